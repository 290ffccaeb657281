//! The wasm provider: sandboxes that run WASI (preview 1) modules on wasmtime.
//!
//! A sandbox is a module (`spec.image`: a `.wasm` file, or a runtime name such as
//! `python`) plus its files: a private writable `/tmp` (a host directory that is
//! deleted at destroy, capped at `limits.tmp_bytes` and [`WasmConfig::tmp_max_entries`]
//! entries) and the spec's mounts as
//! preopened directories. Each exec runs the module's `_start` in a fresh instance,
//! made from an `InstancePre` that was linked once per module, with the exec's
//! arguments, environment and stdin.
//!
//! # How the spec maps onto WASI
//!
//! | spec | here |
//! |---|---|
//! | `network: none` | no socket is granted (WASI p1 can only use sockets it is given); `egress` is refused |
//! | `mounts` | preopened directories, read-only unless `writable`; file mounts are refused |
//! | `/tmp`, `limits.tmp_bytes` | a host directory per sandbox; writes past the cap, and new entries past [`WasmConfig::tmp_max_entries`], fail with `ENOSPC` |
//! | `limits.memory_bytes` | one budget for the linear memories of all the sandbox's execs; growth past it fails inside the guest |
//! | `limits.pids` | at most this many execs run at once in the sandbox (an exec is one instance with one thread; WASI has no fork) |
//! | `limits.cpus` | each exec runs on one host thread at a time; values below 1 are refused, since nothing can throttle below that |
//! | `timeout_secs`, `timeout_ms` | epoch interruption (every [`WasmConfig::tick`]) plus the host-side deadline: the exec ends with `timed_out` |
//! | `hardening.*` | met by construction: a module has no syscalls to filter (seccomp), reaches files only through preopens (landlock), and has no privileges, capabilities or identity to drop |
//! | `user`, `hostname` | not applicable: WASI has no users and no host name; accepted and reported |
//! | `writable` (root) | refused: there is no root file system to make writable |
//!
//! Compiled modules are cached as artifacts (see [`WasmProvider::precompile`]), sealed
//! with a key only the host can read and checked before they are loaded; a module
//! named by a caller is always WebAssembly that Stockade compiles itself, never
//! precompiled code (a `.cwasm` image is refused).

mod artifact;
mod exec;
mod fs;
mod home;
mod output;
mod quota;
pub mod runtime;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use stockade_core::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, Error, ExecIo, ExecOutcome,
    GcReport, Provider, Result, SandboxInfo, ValidatedSpec,
};
use stockade_spec::{SpecError, SpecErrors, format_size};
use stockade_sys::wasm::ArtifactKey;
use tokio::sync::{Semaphore, watch};
use wasmtime::{Engine, InstancePre, Linker};

pub use artifact::{CachedArtifact, LoadPath};
pub use fs::{FileEntry, FileKind, GrepMatch, MAX_READ_BYTES};
pub use home::stockade_home;
pub use runtime::{
    InstalledRuntime, RuntimeList, RuntimeSpec, RuntimeStatus, image_for_language, install_runtime,
    install_runtime_from_file, list_runtimes,
};

use exec::ExecState;
use quota::{MemoryBudget, TmpQuota};
use stockade_core::now_ms;

/// Guest path of the sandbox's private writable directory.
pub const TMP_DIR: &str = "/tmp";

/// Configuration of a [`WasmProvider`].
#[derive(Clone, Debug, PartialEq)]
pub struct WasmConfig {
    /// Where runtimes are installed: `<home>/runtimes/` (default [`stockade_home`]).
    pub home: PathBuf,
    /// The artifact cache (default `<home>/cache/wasm`).
    pub cache_dir: PathBuf,
    /// The secret key that seals the artifact cache (default
    /// `<home>/keys/wasm-artifacts.key`; made on first use, mode 0600). Artifacts
    /// sealed under another key are compiled again.
    pub key_file: PathBuf,
    /// Parent of the sandboxes' host directories (default
    /// `$TMPDIR/stockade-wasm-<uid>`); each process uses `<scratch_dir>/<pid>/`.
    pub scratch_dir: PathBuf,
    /// Fuel each exec may burn (about one unit per wasm instruction); `None` (the
    /// default) meters nothing. An exec that runs out ends as `timed_out`, like a
    /// deadline counted in instructions. Turning it on changes the compiled code, so
    /// artifacts are compiled separately for it.
    pub fuel_per_exec: Option<u64>,
    /// How often running code checks its deadline (default 10 ms): the precision of
    /// exec deadlines.
    pub tick: Duration,
    /// Most entries (files, directories, links) a sandbox's `/tmp` may hold, the
    /// counterpart of a tmpfs's inode limit (default [`DEFAULT_TMP_MAX_ENTRIES`]);
    /// creating more fails with `ENOSPC` inside the guest.
    pub tmp_max_entries: u64,
}

/// Default of [`WasmConfig::tmp_max_entries`].
pub const DEFAULT_TMP_MAX_ENTRIES: u64 = 10_000;

impl Default for WasmConfig {
    fn default() -> Self {
        WasmConfig::in_home(&stockade_home())
    }
}

impl WasmConfig {
    /// The default configuration with everything under `home`.
    pub fn in_home(home: &Path) -> WasmConfig {
        WasmConfig {
            home: home.to_path_buf(),
            cache_dir: home.join("cache").join("wasm"),
            key_file: home.join("keys").join("wasm-artifacts.key"),
            scratch_dir: std::env::temp_dir()
                .join(format!("stockade-wasm-{}", stockade_core::host::euid())),
            fuel_per_exec: None,
            tick: Duration::from_millis(10),
            tmp_max_entries: DEFAULT_TMP_MAX_ENTRIES,
        }
    }
}

/// The wasm provider. Cheap to clone; clones share sandboxes and compiled modules.
/// Sandboxes live in this process: they end with it (and [`Provider::gc`] removes
/// what a crashed process left on disk).
#[derive(Clone)]
pub struct WasmProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WasmProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProvider")
            .field("config", &self.inner.config)
            .finish()
    }
}

struct Inner {
    config: WasmConfig,
    engine: Engine,
    engine_key: String,
    linker: Linker<ExecState>,
    modules: Mutex<HashMap<ModuleKey, Arc<ModuleEntry>>>,
    /// The artifact key, read (or made) on first use.
    artifact_key: Mutex<Option<Arc<ArtifactKey>>>,
    sandboxes: Mutex<HashMap<String, Arc<SandboxEntry>>>,
    /// The epoch ticker runs while this is alive.
    _alive: Arc<()>,
}

/// Identity of a module file on disk: a change of any part loads it again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ModuleKey {
    path: PathBuf,
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

/// A module ready to instantiate.
pub(crate) struct ModuleEntry {
    pre: InstancePre<ExecState>,
    source: PathBuf,
    sha256: String,
    load: LoadPath,
    load_ms: f64,
}

/// A guest directory backed by a host directory.
#[derive(Clone, Debug)]
pub(crate) struct Preopen {
    guest: String,
    host: PathBuf,
    writable: bool,
}

/// A live sandbox.
pub(crate) struct SandboxEntry {
    info: SandboxInfo,
    spec: ValidatedSpec,
    module: Arc<ModuleEntry>,
    /// This sandbox's host directory (holds `tmp/`); removed at destroy.
    dir: PathBuf,
    preopens: Vec<Preopen>,
    workdir: String,
    quota: Arc<TmpQuota>,
    memory: Arc<MemoryBudget>,
    exec_slots: Arc<Semaphore>,
    expires_at: Instant,
    /// Set when the sandbox is destroyed: running execs stop.
    dead: watch::Sender<bool>,
    dead_flag: Arc<AtomicBool>,
}

impl Drop for SandboxEntry {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn new_id() -> String {
    format!("wasm-{}", stockade_core::host::random_hex(6))
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// `path` with its longest existing ancestor resolved (links, `..`): where it is or
/// will be once made.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    loop {
        if let Ok(real) = std::fs::canonicalize(&at) {
            return rest
                .iter()
                .rev()
                .fold(real, |p, c: &std::ffi::OsString| p.join(c));
        }
        match (at.file_name().map(|n| n.to_os_string()), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                at = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Opens a module file for reading.
fn open_module(path: &Path) -> Result<std::fs::File> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot open module {}", path.display()), e))?;
    match file.metadata() {
        Ok(md) if md.is_file() => Ok(file),
        _ => Err(Error::InvalidRequest(format!(
            "module {} is not a regular file",
            path.display()
        ))),
    }
}

fn spec_error(field: &str, message: String) -> Error {
    Error::InvalidSpec(SpecErrors::one(field, message))
}

impl WasmProvider {
    /// A provider with the default configuration.
    pub fn new() -> Result<WasmProvider> {
        WasmProvider::with_config(WasmConfig::default())
    }

    /// A provider with `config`.
    pub fn with_config(config: WasmConfig) -> Result<WasmProvider> {
        let engine = exec::engine(&config)?;
        let linker = exec::linker(&engine)?;
        let alive = Arc::new(());
        exec::start_ticker(engine.clone(), config.tick, Arc::downgrade(&alive));
        Ok(WasmProvider {
            inner: Arc::new(Inner {
                engine_key: artifact::engine_key(&engine),
                config,
                engine,
                linker,
                modules: Mutex::new(HashMap::new()),
                artifact_key: Mutex::new(None),
                sandboxes: Mutex::new(HashMap::new()),
                _alive: alive,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &WasmConfig {
        &self.inner.config
    }

    /// The key of this provider's engine configuration in artifact names.
    pub fn engine_key(&self) -> &str {
        &self.inner.engine_key
    }

    /// Compiles the WebAssembly module at `path` into the artifact cache (or finds it
    /// there) and says how: [`LoadPath::Compiled`] or [`LoadPath::Cached`].
    pub fn precompile(&self, path: &Path) -> Result<LoadPath> {
        let file = open_module(path)?;
        Ok(self.load(path, &file)?.path)
    }

    /// Loads the module in `file` through the artifact cache.
    fn load(&self, path: &Path, file: &std::fs::File) -> Result<artifact::Loaded> {
        let key = self.artifact_key()?;
        let cache = artifact::Cache {
            dir: &self.inner.config.cache_dir,
            engine_key: &self.inner.engine_key,
            key: &key,
        };
        let known = self.known_digest(path);
        artifact::load(&self.inner.engine, &cache, path, file, known.as_deref())
    }

    /// The artifact key of [`WasmConfig::key_file`], made on first use.
    fn artifact_key(&self) -> Result<Arc<ArtifactKey>> {
        let mut slot = self
            .inner
            .artifact_key
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(k) = &*slot {
            return Ok(k.clone());
        }
        let key = Arc::new(home::artifact_key(&self.inner.config.key_file)?);
        *slot = Some(key.clone());
        Ok(key)
    }

    /// How the module of a sandbox was loaded and how long that took (ms).
    pub fn module_load(&self, id: &str) -> Result<(LoadPath, f64)> {
        let sb = self.sandbox(id)?;
        Ok((sb.module.load, sb.module.load_ms))
    }

    /// The pinned digest of `path` when it is an intact installed runtime (so that
    /// loading it skips hashing 26 MB).
    fn known_digest(&self, path: &Path) -> Option<String> {
        runtime::RUNTIMES.iter().find_map(|spec| {
            let inst = runtime::installed(spec, &self.inner.config.home)?;
            (inst.module == path).then_some(inst.sha256)
        })
    }

    /// Resolves `spec.image` to a module file.
    fn resolve_image(&self, image: &str) -> Result<PathBuf> {
        if let Some(rt) = RuntimeSpec::find(image) {
            return match runtime::installed(rt, &self.inner.config.home) {
                Some(inst) => Ok(inst.module),
                None => Err(Error::Unavailable {
                    what: format!("the {} runtime", rt.name),
                    reason: format!(
                        "it is not installed in {}",
                        rt.dir_in(&self.inner.config.home).display()
                    ),
                    fix: format!("run `stockade runtime install {}`", rt.name),
                }),
            };
        }
        if image.ends_with(".cwasm") {
            return Err(spec_error(
                "image",
                format!(
                    "image {image:?} is a precompiled .cwasm artifact; Stockade never loads precompiled code it did not compile itself: pass the .wasm module instead (it is compiled once and cached)"
                ),
            ));
        }
        let looks_like_file = image.ends_with(".wasm") || image.contains('/');
        if !looks_like_file {
            let known: Vec<_> = runtime::RUNTIMES.iter().map(|r| r.name).collect();
            return Err(spec_error(
                "image",
                format!(
                    "image {image:?} is neither a .wasm file nor a known runtime ({}); the wasm provider does not run OCI images",
                    known.join(", ")
                ),
            ));
        }
        let path = std::path::absolute(image)
            .map_err(|e| Error::io(format!("cannot resolve image path {image}"), e))?;
        if !path.is_file() {
            return Err(spec_error(
                "image",
                format!("module {} does not exist or is not a file", path.display()),
            ));
        }
        Ok(path)
    }

    /// Loads (or finds in memory) the module at `path` and links it.
    fn module(&self, path: &Path) -> Result<Arc<ModuleEntry>> {
        // The in-memory key and the bytes compiled come from one open file, so the
        // entry describes exactly what was loaded.
        let file = open_module(path)?;
        let md = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat module {}", path.display()), e))?;
        let key = ModuleKey {
            path: path.to_path_buf(),
            dev: md.dev(),
            ino: md.ino(),
            len: md.len(),
            mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        };
        if let Some(m) = self
            .inner
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(m.clone());
        }
        let loaded = self.load(path, &file)?;
        let pre = exec::prelink(&self.inner.linker, &loaded.module, path)?;
        let entry = Arc::new(ModuleEntry {
            pre,
            source: path.to_path_buf(),
            sha256: loaded.sha256,
            load: loaded.path,
            load_ms: loaded.load_ms,
        });
        self.inner
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, entry.clone());
        Ok(entry)
    }

    pub(crate) fn sandbox(&self, id: &str) -> Result<Arc<SandboxEntry>> {
        self.inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            })
    }

    /// The host directory behind a sandbox's `/tmp` (for tests and diagnostics).
    pub fn tmp_host_path(&self, id: &str) -> Result<PathBuf> {
        Ok(self.sandbox(id)?.dir.join("tmp"))
    }

    /// Bytes used in a sandbox's `/tmp` and its cap.
    pub fn tmp_usage(&self, id: &str) -> Result<(u64, u64)> {
        let sb = self.sandbox(id)?;
        Ok((sb.quota.used(), sb.quota.cap()))
    }

    /// The wasm-specific refusals, all listed at once.
    fn check_spec(&self, spec: &ValidatedSpec) -> Result<()> {
        let mut errs = Vec::new();
        let mut bad = |field: String, message: String| errs.push(SpecError { field, message });
        if spec.limits.cpus < 1.0 {
            bad(
                "limits.cpus".into(),
                format!(
                    "the wasm provider cannot throttle an exec below one cpu (asked {})",
                    spec.limits.cpus
                ),
            );
        }
        for (i, m) in spec.mounts.iter().enumerate() {
            if m.target == Path::new(TMP_DIR) {
                bad(
                    format!("mounts[{i}].target"),
                    "target /tmp is the sandbox's own /tmp on the wasm provider".into(),
                );
            }
            match std::fs::metadata(&m.host) {
                Ok(md) if md.is_dir() => {
                    if let Some(private) = self.overlaps_private(&m.host) {
                        bad(
                            format!("mounts[{i}].host"),
                            format!(
                                "mount source {} would give the sandbox {}, which holds Stockade's compiled code or its key; mount a directory that neither holds it nor lies in it",
                                m.host.display(),
                                private.display()
                            ),
                        );
                    }
                }
                Ok(_) => bad(
                    format!("mounts[{i}].host"),
                    format!(
                        "mount source {} is a file; the wasm provider mounts directories only",
                        m.host.display()
                    ),
                ),
                Err(e) => bad(
                    format!("mounts[{i}].host"),
                    format!("mount source {} cannot be used: {e}", m.host.display()),
                ),
            }
        }
        let workdir = spec.effective_workdir();
        let covered = workdir.starts_with(TMP_DIR)
            || spec.mounts.iter().any(|m| workdir.starts_with(&m.target));
        if !covered {
            bad(
                "workdir".into(),
                format!(
                    "workdir {} is not in /tmp or a mount; the wasm sandbox has no other directories",
                    workdir.display()
                ),
            );
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidSpec(SpecErrors(errs)))
        }
    }

    /// The directory of the artifact cache or of its key that a mount of `host` would
    /// reach (`host` is one of them, lies in one, or holds one), if any.
    fn overlaps_private(&self, host: &Path) -> Option<PathBuf> {
        let host = std::fs::canonicalize(host).ok()?;
        let config = &self.inner.config;
        let key_dir = config.key_file.parent().unwrap_or(Path::new("/"));
        [config.cache_dir.as_path(), key_dir]
            .into_iter()
            .map(canonical_prefix)
            .find(|d| d.starts_with(&host) || host.starts_with(d))
    }

    fn applied(&self, spec: &ValidatedSpec, module: &ModuleEntry) -> Vec<String> {
        let fuel = self.inner.config.fuel_per_exec;
        let mut a = vec![
            format!(
                "module {} (sha256 {}), WASI preview 1",
                module.source.display(),
                module.sha256
            ),
            "network: none (no sockets granted)".to_string(),
            format!(
                "memory: {} for all execs together (linear memory growth past it fails in the guest)",
                format_size(spec.limits.memory_bytes)
            ),
            format!(
                "/tmp: private host directory capped at {} and {} entries, removed at destroy",
                format_size(spec.limits.tmp_bytes),
                self.inner.config.tmp_max_entries
            ),
            format!("pids: at most {} execs at once, one thread each", spec.limits.pids),
            "cpu: one host thread per exec".to_string(),
            format!(
                "lifetime {} s and exec deadlines: epoch interruption",
                spec.timeout_secs
            ),
            "seccomp, landlock, no_new_privileges, capabilities: by construction (a module has no syscalls, reaches files only through preopens, holds no privileges)".to_string(),
            "user, hostname: not applicable in WASI".to_string(),
        ];
        for m in &spec.mounts {
            a.push(format!(
                "mount {} -> {} ({})",
                m.host.display(),
                m.target.display(),
                if m.writable {
                    "read-write"
                } else {
                    "read-only"
                }
            ));
        }
        if let Some(f) = fuel {
            a.push(format!("fuel: {f} per exec"));
        }
        a
    }

    fn end_sandbox(&self, id: &str) -> Option<Arc<SandboxEntry>> {
        let sb = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)?;
        sb.dead_flag
            .store(true, std::sync::atomic::Ordering::Release);
        let _ = sb.dead.send(true);
        let _ = std::fs::remove_dir_all(&sb.dir);
        Some(sb)
    }

    /// This process's directory of sandbox directories.
    fn process_dir(&self) -> PathBuf {
        self.inner
            .config
            .scratch_dir
            .join(std::process::id().to_string())
    }
}

/// Ends a sandbox at its lifetime or when its owner process dies. Holds only a weak
/// reference, so a dropped provider is not kept alive by its sandboxes' timers.
async fn watch_lifetime(
    provider: std::sync::Weak<Inner>,
    id: String,
    expires_at: Instant,
    owner: Option<u32>,
    mut dead: watch::Receiver<bool>,
) {
    let deadline = tokio::time::Instant::from_std(expires_at);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = dead.wait_for(|d| *d) => return,
            _ = tokio::time::sleep(Duration::from_secs(1)), if owner.is_some() => {
                if owner.is_some_and(|p| !pid_alive(p)) {
                    break;
                }
            }
        }
    }
    if let Some(inner) = provider.upgrade() {
        WasmProvider { inner }.end_sandbox(&id);
    }
}

#[async_trait]
impl Provider for WasmProvider {
    fn name(&self) -> &'static str {
        "wasm"
    }

    /// What a WASI sandbox enforces. `seccomp` and `landlock` are true because the
    /// wasm provider meets them by construction, not by applying them: a module can
    /// make no system calls at all (only the WASI imports we link, none of which is a
    /// socket), and it reaches no file but through the preopened directories. So the
    /// default spec, which asks for both, runs here unchanged. `images` means modules
    /// and runtimes (`python`), not OCI images; without an image there is nothing to
    /// run, hence no `host_rootfs`. `pids_limit` caps concurrent execs (WASI has no
    /// fork). No CPU quota, no users, no egress, no writable root.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            host_rootfs: false,
            images: true,
            network_egress: false,
            writable_root: false,
            mounts: true,
            memory_limit: true,
            cpu_limit: false,
            pids_limit: true,
            users: false,
            seccomp: true,
            landlock: true,
            local_images: false,
        }
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = vec![Check {
            name: "wasmtime engine".into(),
            ok: true,
            detail: format!(
                "wasmtime 48 with cranelift, epoch interruption, engine key {}",
                self.inner.engine_key
            ),
            fix: None,
        }];
        for (name, dir) in [
            ("artifact cache", self.inner.config.cache_dir.clone()),
            ("sandbox directories", self.inner.config.scratch_dir.clone()),
        ] {
            let made = home::make_private_dir(&dir);
            checks.push(Check {
                name: name.into(),
                ok: made.is_ok(),
                detail: match &made {
                    Ok(()) => format!("{} is usable", dir.display()),
                    Err(e) => e.to_string(),
                },
                fix: made
                    .is_err()
                    .then(|| format!("make {} writable, or set STOCKADE_HOME", dir.display())),
            });
        }
        for spec in runtime::RUNTIMES {
            let inst = runtime::installed(spec, &self.inner.config.home);
            checks.push(Check {
                name: format!("{} runtime", spec.name),
                ok: inst.is_some(),
                detail: match &inst {
                    Some(i) => format!("{} {} at {}", spec.name, i.version, i.module.display()),
                    None => "not installed".into(),
                },
                fix: inst
                    .is_none()
                    .then(|| format!("stockade runtime install {}", spec.name)),
            });
        }
        Ok(checks)
    }

    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo> {
        let spec = spec.into_inner();
        self.check_spec(&spec)?;
        let image = spec
            .image
            .clone()
            .ok_or_else(|| spec_error("image", "the wasm provider needs an image".into()))?;
        let path = self.resolve_image(&image)?;
        let this = self.clone();
        let module = tokio::task::spawn_blocking(move || this.module(&path))
            .await
            .map_err(|e| Error::Internal(format!("module loader panicked: {e}")))??;

        let id = new_id();
        let dir = self.process_dir().join(&id);
        home::make_private_dir(&self.inner.config.scratch_dir)?;
        home::make_private_dir(&dir.join("tmp"))?;
        let mut preopens = vec![Preopen {
            guest: TMP_DIR.into(),
            host: dir.join("tmp"),
            writable: true,
        }];
        preopens.extend(spec.mounts.iter().map(|m| Preopen {
            guest: m.target.to_string_lossy().into_owned(),
            host: m.host.clone(),
            writable: m.writable,
        }));
        let created = now_ms();
        let lifetime = Duration::from_secs(spec.timeout_secs);
        let info = SandboxInfo {
            id: id.clone(),
            provider: self.name().into(),
            created_at_ms: created,
            expires_at_ms: created + lifetime.as_millis() as u64,
            owner_pid: opts.owner_pid,
            spec: serde_json::to_value(spec.spec())
                .map_err(|e| Error::Internal(format!("cannot encode spec: {e}")))?,
            applied: self.applied(&spec, &module),
        };
        let (dead, dead_rx) = watch::channel(false);
        let expires_at = Instant::now() + lifetime;
        let entry = Arc::new(SandboxEntry {
            info: info.clone(),
            quota: Arc::new(TmpQuota::new(
                dir.join("tmp"),
                spec.limits.tmp_bytes,
                self.inner.config.tmp_max_entries,
            )),
            memory: MemoryBudget::new(spec.limits.memory_bytes),
            exec_slots: Arc::new(Semaphore::new(spec.limits.pids as usize)),
            workdir: spec.effective_workdir().to_string_lossy().into_owned(),
            spec,
            module,
            dir,
            preopens,
            expires_at,
            dead,
            dead_flag: Arc::new(AtomicBool::new(false)),
        });
        self.inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), entry);
        tokio::spawn(watch_lifetime(
            Arc::downgrade(&self.inner),
            id,
            expires_at,
            opts.owner_pid,
            dead_rx,
        ));
        Ok(info)
    }

    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome> {
        let req = req.into_inner();
        if req.keep_stdin_open {
            return Err(Error::InvalidRequest(
                "the wasm provider cannot keep stdin open; pass stdin as bytes".into(),
            ));
        }
        if req.background {
            return Err(Error::InvalidRequest(
                "the wasm provider has no processes to leave in the background; use the native or docker provider".into(),
            ));
        }
        let sb = self.sandbox(id)?;
        let ExecIo { output, input } = io;
        let run = exec::run(
            &self.inner.engine,
            &self.inner.config,
            &sb,
            req.clone(),
            output,
        );
        stockade_core::exec_with_kill(self.name(), &req, input, run).await
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        self.end_sandbox(id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let mut all: Vec<SandboxInfo> = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|s| s.info.clone())
            .collect();
        all.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(all)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        Ok(self.sandbox(id)?.info.clone())
    }

    async fn file(&self, id: &str, op: stockade_core::FileOp) -> Result<stockade_core::FileResult> {
        use stockade_core::{FileOp as Op, FileResult as Res};
        // The entry of one path, from its parent's listing.
        let stat = |path: String| async move {
            let (parent, name) = match path.trim_end_matches('/').rsplit_once('/') {
                Some(("", n)) => ("/".to_string(), n.to_string()),
                Some((p, n)) => (p.to_string(), n.to_string()),
                None => (".".to_string(), path.clone()),
            };
            self.list_dir(id, &parent)
                .await?
                .into_iter()
                .find(|e| e.name == name)
                .ok_or(Error::NotFound {
                    kind: "path",
                    id: path,
                })
        };
        Ok(match op {
            Op::Write { path, data, .. } => {
                self.write_file(id, &path, &data).await?;
                Res::Done
            }
            Op::Read {
                path,
                offset,
                limit,
            } => {
                let size = stat(path.clone()).await?.size;
                let data = self.read_range(id, &path, offset, limit).await?;
                Res::Data {
                    eof: offset + data.len() as u64 >= size,
                    data,
                    size,
                }
            }
            Op::Edit {
                path,
                old,
                new,
                replace_all,
            } => Res::Edited {
                replacements: self.edit_file(id, &path, &old, &new, replace_all).await? as u64,
            },
            Op::Ls { path } => Res::Entries(self.list_dir(id, &path).await?),
            Op::Stat { path } => Res::Entries(vec![stat(path).await?]),
            Op::Glob { pattern, root } => {
                // The file API returns paths relative to the root, as the agent does.
                let prefix = format!("{}/", root.trim_end_matches('/'));
                let paths = self.glob(id, &pattern, Some(&root)).await?;
                let paths = paths
                    .into_iter()
                    .map(|p| p.strip_prefix(&prefix).map(str::to_string).unwrap_or(p))
                    .collect();
                Res::Paths {
                    paths,
                    truncated: false,
                }
            }
            Op::Grep {
                regex,
                root,
                include,
                max_matches,
            } => {
                let max = if max_matches == 0 {
                    stockade_core::files::DEFAULT_GREP_MATCHES
                } else {
                    max_matches
                } as usize;
                let matches = self
                    .grep(id, &regex, Some(&root), include.as_deref(), max)
                    .await?;
                let truncated = matches.len() >= max;
                Res::Matches { matches, truncated }
            }
            Op::Mkdir { path, .. } => {
                self.mkdir(id, &path).await?;
                Res::Done
            }
            Op::Rm { path, recursive } => {
                self.remove(id, &path, recursive).await?;
                Res::Done
            }
            Op::Upload { .. } | Op::Download { .. } => {
                return Err(Error::Unavailable {
                    what: "archive upload and download on the wasm provider".into(),
                    reason: "not implemented for WASI sandboxes yet".into(),
                    fix: "write and read files one by one, or use the native provider".into(),
                });
            }
        })
    }

    async fn gc(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        let now = Instant::now();
        let stale: Vec<String> = self
            .inner
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|s| s.expires_at <= now || s.info.owner_pid.is_some_and(|p| !pid_alive(p)))
            .map(|s| s.info.id.clone())
            .collect();
        for id in stale {
            if self.end_sandbox(&id).is_some() {
                report.reaped.push(id);
            }
        }
        // Directories of processes that died without destroying their sandboxes.
        let scratch = &self.inner.config.scratch_dir;
        let Ok(rd) = std::fs::read_dir(scratch) else {
            return Ok(report);
        };
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(pid) = name.parse::<u32>() else {
                continue;
            };
            if pid == std::process::id() || pid_alive(pid) {
                continue;
            }
            let ids: Vec<String> = std::fs::read_dir(entry.path())
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => report.reaped.extend(ids),
                Err(e) => report
                    .errors
                    .push(format!("cannot remove {}: {e}", entry.path().display())),
            }
        }
        Ok(report)
    }
}
