//! The microVM provider: each sandbox is a QEMU `microvm` guest whose PID 1 is the
//! Stockade agent, so the code runs behind a guest kernel instead of the host's.
//!
//! `create` plans the VM from the spec ([`plan`]), makes or reuses the guest's boot
//! assets ([`assets`]: Debian's cloud kernel, an initramfs with the static agent as
//! `/init`, an erofs image of the host-rootfs view), and starts `stockade-agent
//! vm-host`, a detached supervisor that runs the VMM ([`vmm`]) in a host cgroup,
//! multiplexes agent connections over the VM's one virtio-serial port, and kills the
//! VM when its owner dies or its lifetime passes. Execs, files and health then go
//! through the agent host exactly as for native and docker sandboxes
//! ([`MicrovmLauncher`] is this provider's [`Launcher`]).
//!
//! Snapshots: [`Launcher::pause`] saves the VM's memory and device state to a file
//! in the sandbox's directory (QEMU migration) and ends the VMM; `resume` verifies
//! the file's SHA-256 and restores it; `fork` restores one snapshot into N new
//! sandboxes, each told its own hostname, clock and random seed on connect.
//!
//! Network (`network` egress or a policy): the VM gets one virtio-net device on
//! QEMU's user-mode network, and the VMM runs in a network namespace of its own that
//! the supervisor serves exactly as the native monitor serves a sandbox's (the same
//! plan: `stockade_native::network_setup`), so each connection the guest makes is a
//! socket of the VMM behind the native firewall, resolver and proxy.

pub mod assets;
pub mod plan;
mod snapshots;
pub mod vmm;

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use stockade_agent_host::{AgentProvider, Launcher, UnixSocket};
use stockade_agent_proto::launch::VmHostConfig;
use stockade_agent_proto::now_ms;
use stockade_core::host::check_sandbox_id;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, Error, GcReport, Result, RunState,
    SandboxInfo, SnapshotInfo,
};
use tokio::sync::OnceCell;

use crate::vmm::{Accel, QemuMicrovm, VmPlan, Vmm};

/// The microVM provider: the microVM launcher with the agent host.
pub type MicrovmProvider = AgentProvider<MicrovmLauncher>;

/// Where named snapshots live below Stockade's home.
pub const SNAPSHOTS_DIR: &str = "snapshots/microvm";
/// The key that seals named snapshots, under `$STOCKADE_HOME`.
pub const SNAPSHOT_KEY: &str = "keys/snapshots.key";

/// Default cache of boot assets (kernel initramfs, root images, the KVM probe).
pub const DEFAULT_CACHE: &str = "/var/cache/stockade/microvm";

/// How long a VM may take from start to its agent answering (TCG on a busy host).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

/// The directory of a sandbox's network monitor, below its own.
const NET_DIR: &str = "net";

/// What a sandbox's directory records about it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    info: SandboxInfo,
    plan: VmPlan,
    host: VmHostConfig,
}

/// A saved VM: its state file's digest and size.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    sha256: String,
    bytes: u64,
    saved_at_ms: u64,
}

/// What new sandboxes restore from: a verified state file and the VM it was saved
/// from.
struct Restore {
    mem: PathBuf,
    /// The saved VM's plan (its sockets and logs are replaced per copy).
    plan: VmPlan,
    /// A kernel to copy into each new sandbox's directory (a named snapshot's own
    /// copy); `None`: the plan's.
    kernel: Option<PathBuf>,
    spec: serde_json::Value,
    applied: Vec<String>,
    lifetime_ms: u64,
    /// Whether the saved VM ran in host cgroups (the copies do too).
    cgroups: bool,
}

/// Launches microVM sandboxes.
#[derive(Clone)]
pub struct MicrovmLauncher {
    state_root: PathBuf,
    cache: PathBuf,
    /// Where named snapshots are kept.
    snapshots: PathBuf,
    /// The key that seals them (`<home>/keys/snapshots.key`).
    snapshot_key: PathBuf,
    vmm: Arc<dyn Vmm>,
    qemu: PathBuf,
    accel: Arc<OnceCell<(Accel, String)>>,
    /// The image store `--image` reads (default: `$STOCKADE_HOME/images`).
    image_store: Option<PathBuf>,
}

impl std::fmt::Debug for MicrovmLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicrovmLauncher")
            .field("state_root", &self.state_root)
            .field("vmm", &self.vmm.name())
            .finish()
    }
}

impl Default for MicrovmLauncher {
    fn default() -> Self {
        MicrovmLauncher::new()
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        kind: "sandbox",
        id: id.to_string(),
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(what, e)
}

fn need_root() -> Result<()> {
    if stockade_core::host::is_root() {
        Ok(())
    } else {
        Err(Error::Unavailable {
            what: "the microvm provider".into(),
            reason: "it needs root (host cgroups around the VMM, a private mount namespace to build the root image)".into(),
            fix: "run stockade as root, or use the native provider".into(),
        })
    }
}

/// The spec as records, `inspect` and snapshots keep it: a policy's credential
/// values redacted (they go to the VM's network monitor only).
fn shown_spec(spec: &stockade_core::ValidatedSpec) -> serde_json::Value {
    let mut v = serde_json::to_value(spec.spec()).unwrap_or_default();
    if v.is_object() {
        v["network"] = serde_json::to_value(spec.network.redacted()).unwrap_or_default();
    }
    v
}

/// Why a VM whose policy has credentials cannot be restored.
fn credentials_fixed(id: &str) -> Error {
    Error::Unavailable {
        what: format!("restoring sandbox {id}, whose egress policy has credentials"),
        reason: "its credentials and certificate authority key were never written down, so a \
                 restored VM's network monitor cannot have them"
            .into(),
        fix: "create a new sandbox".into(),
    }
}

/// SHA-256 of a file, as hex, and its size.
fn sha256_file(path: &Path) -> Result<(String, u64)> {
    sha256_copy(path, None)
}

/// SHA-256 of a file, as hex, and its size, written to `to` as it is read when given
/// (one pass: what was written is what was hashed).
fn sha256_copy(path: &Path, mut to: Option<&mut std::fs::File>) -> Result<(String, u64)> {
    use std::io::Write;
    let mut f = std::fs::File::open(path).map_err(io(format!("cannot open {}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("cannot read {}", path.display())))?;
        if n == 0 {
            break;
        }
        n_total += n as u64;
        h.update(&buf[..n]);
        if let Some(out) = to.as_mut() {
            out.write_all(&buf[..n])
                .map_err(io(format!("cannot copy {}", path.display())))?;
        }
    }
    if let Some(out) = to {
        out.sync_all()
            .map_err(io(format!("cannot flush the copy of {}", path.display())))?;
    }
    Ok((
        h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        n_total,
    ))
}

/// Whether the process `pid` that started at `ticks` still runs. A zombie does not:
/// a killed VM host is reparented to the host's init, which may reap it late.
/// A sandbox held by a make, pause or resume in progress ([`MicrovmLauncher::hold`]).
struct Hold(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

fn alive(pid: u32, ticks: u64) -> bool {
    stockade_sys::process::is_same_process(pid, ticks)
}

impl MicrovmLauncher {
    /// A launcher keeping sandboxes under the runtime directory `stockade-microvm`
    /// (`/run/stockade-microvm` for root) and boot assets under [`DEFAULT_CACHE`]
    /// (`$STOCKADE_MICROVM_CACHE` overrides), named snapshots under
    /// `$STOCKADE_HOME/snapshots/microvm`, running `qemu-system-x86_64`.
    pub fn new() -> MicrovmLauncher {
        let cache = std::env::var_os("STOCKADE_MICROVM_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE));
        MicrovmLauncher {
            state_root: stockade_core::host::runtime_dir("stockade-microvm"),
            cache,
            snapshots: stockade_core::host::stockade_home().join(SNAPSHOTS_DIR),
            snapshot_key: stockade_core::host::stockade_home().join(SNAPSHOT_KEY),
            vmm: Arc::new(QemuMicrovm::default()),
            qemu: PathBuf::from("qemu-system-x86_64"),
            accel: Arc::default(),
            image_store: None,
        }
    }

    /// Reads images from the store at `root` instead of `$STOCKADE_HOME/images`.
    pub fn with_image_store(mut self, root: impl Into<PathBuf>) -> MicrovmLauncher {
        self.image_store = Some(root.into());
        self
    }

    /// The root image of `spec`: the host-rootfs view, or an erofs image of its OCI
    /// image's flattened rootfs (pulled on first use, made once per image), with what
    /// the image's config says about the execs.
    async fn root_for(
        &self,
        spec: &stockade_core::ValidatedSpec,
    ) -> Result<(PathBuf, Option<plan::ImageRun>)> {
        let Some(reference) = spec.image.clone() else {
            let cache = self.cache.clone();
            let root = tokio::task::spawn_blocking(move || assets::root_image(&cache, &mut |_| {}))
                .await
                .map_err(|e| Error::Internal(format!("root image task failed: {e}")))??;
            return Ok((root, None));
        };
        let store = self.image_store.clone();
        stockade_native::ensure_image(&reference, store.as_deref()).await?;
        let cache = self.cache.clone();
        tokio::task::spawn_blocking(move || {
            // Held (kept from gc and `image rm`) while its erofs image is made; the VM
            // then runs from that copy.
            let (image, _held) = stockade_native::image_root(&reference, store.as_deref())?;
            let root = assets::image_root_image(&cache, &image.rootfs, &mut |_| {})?;
            let run = plan::ImageRun {
                reference,
                env: image.env.clone(),
                workdir: image.workdir.clone(),
                user: image.user,
            };
            Ok((root, Some(run)))
        })
        .await
        .map_err(|e| Error::Internal(format!("image task failed: {e}")))?
    }

    /// Keeps sandboxes under `root`.
    pub fn with_state_root(mut self, root: impl Into<PathBuf>) -> MicrovmLauncher {
        self.state_root = root.into();
        self
    }

    /// Keeps named snapshots under `home/snapshots/microvm` (and their key in
    /// `home/keys/`) instead of `$STOCKADE_HOME`'s.
    pub fn with_home(mut self, home: impl AsRef<Path>) -> MicrovmLauncher {
        self.snapshots = home.as_ref().join(SNAPSHOTS_DIR);
        self.snapshot_key = home.as_ref().join(SNAPSHOT_KEY);
        self
    }

    /// Where named snapshots are kept.
    pub fn snapshot_dir(&self) -> &Path {
        &self.snapshots
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.state_root.join(id)
    }

    /// KVM when a guest boots with it, else TCG; and why. Probed once per host boot
    /// (the answer is cached under the cache directory).
    pub async fn accel(&self) -> Result<(Accel, String)> {
        self.accel
            .get_or_try_init(|| async {
                std::fs::create_dir_all(&self.cache)
                    .map_err(io(format!("cannot create {}", self.cache.display())))?;
                let boot =
                    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
                let cached = self.cache.join(format!("kvm-probe-{}", boot.trim()));
                if let Ok(text) = std::fs::read_to_string(&cached) {
                    return Ok(match text.split_once('\n') {
                        Some(("kvm", why)) => (Accel::Kvm, why.to_string()),
                        Some((_, why)) => (Accel::Tcg, why.to_string()),
                        None => (Accel::Tcg, text),
                    });
                }
                let kernel = assets::find_kernel()?;
                let r = match vmm::probe_kvm(&self.qemu, &kernel.image, &self.cache).await {
                    Ok(()) => (Accel::Kvm, "a guest booted under KVM".to_string()),
                    Err(why) => (Accel::Tcg, format!("KVM is unusable: {why}")),
                };
                let _ = std::fs::write(&cached, format!("{}\n{}", r.0.as_str(), r.1));
                Ok(r)
            })
            .await
            .cloned()
    }

    fn read_record(&self, id: &str) -> Result<Record> {
        let p = self.dir(id).join("record.json");
        let text = std::fs::read(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => not_found(id),
            _ => Error::io(format!("cannot read {}", p.display()), e),
        })?;
        serde_json::from_slice(&text)
            .map_err(|e| Error::Internal(format!("{} is not a record: {e}", p.display())))
    }

    fn write_record(&self, r: &Record) -> Result<()> {
        let p = self.dir(&r.info.id).join("record.json");
        let text = serde_json::to_vec(r)
            .map_err(|e| Error::Internal(format!("cannot encode a record: {e}")))?;
        write_private(&p, &text).map_err(io(format!("cannot write {}", p.display())))
    }

    fn is_paused(&self, id: &str) -> bool {
        self.dir(id).join("paused").exists()
    }

    /// The supervisor's pid and start ticks, when it runs.
    fn supervisor(&self, id: &str) -> Option<(u32, u64)> {
        let text = std::fs::read_to_string(self.dir(id).join("host.pid")).ok()?;
        let (p, t) = text.trim().split_once(' ')?;
        let (p, t) = (p.parse().ok()?, t.parse().ok()?);
        alive(p, t).then_some((p, t))
    }

    /// Starts the supervisor of the VM recorded in `dir` and waits for its agent.
    /// A VM with network gets its network monitor's input: `net_input` when given
    /// (a create, whose credentials exist only in that input), else planned anew from
    /// the policy in force (a resume, fork or start from a snapshot; never one with
    /// credentials, which cannot be paused).
    async fn start(&self, record: &Record, net_input: Option<Vec<u8>>) -> Result<()> {
        let id = &record.info.id;
        let dir = self.dir(id);
        for f in ["exit", "host.pid", "agent.sock"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        // What the VMM's uid gets: descriptors of the files it may not open by path,
        // read access to the ones of this directory it boots from.
        let mut host = record.host.clone();
        host.vmm = self.vmm.command(&record.plan);
        host.vmm_files = self
            .vmm
            .files(&record.plan)
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        host.vmm_reads = [&record.plan.kernel, &record.plan.initrd]
            .into_iter()
            .filter(|f| f.starts_with(&dir))
            .map(|f| f.display().to_string())
            .collect();
        let host = serde_json::to_vec(&host)
            .map_err(|e| Error::Internal(format!("cannot encode the VM host config: {e}")))?;
        write_private(&dir.join("host.json"), &host)
            .map_err(io(format!("cannot write {}/host.json", dir.display())))?;
        let net_input = match (&record.host.net_dir, net_input) {
            (None, _) => None,
            (Some(_), Some(input)) => Some(input),
            (Some(_), None) => Some(self.replanned_network(id)?),
        };
        let agent = stockade_agent_host::find_static_agent()?;
        let mut cmd = std::process::Command::new(&agent);
        cmd.arg("vm-host")
            .arg(&dir)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(if net_input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        stockade_sys::process::spawn_with_stdio_only(&mut cmd);
        let mut child = tokio::process::Command::from(cmd)
            .spawn()
            .map_err(io(format!("cannot start {} vm-host", agent.display())))?;
        if let (Some(input), Some(mut stdin)) = (&net_input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // The network plan, then the credentials (if any); closed at the drop.
            stdin.write_all(input).await.map_err(io(format!(
                "cannot hand sandbox {id}'s network plan to its VM host"
            )))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(io(format!("cannot start {} vm-host", agent.display())))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(if net_input.is_some() && why.contains("network egress") {
                stockade_native::egress_unavailable(id, why)
            } else {
                Error::Internal(format!(
                    "the VM host of sandbox {id} failed to start: {why}"
                ))
            });
        }
        if record.plan.incoming.is_some() {
            self.vmm
                .run_restored(&record.plan.control_socket, BOOT_TIMEOUT)
                .await?;
        }
        let sock = UnixSocket::new(id.clone(), dir.join("agent.sock"));
        let started = Instant::now();
        loop {
            if dir.join("agent.sock").exists()
                && stockade_agent_host::client::ping(id, &sock).await.is_ok()
            {
                return Ok(());
            }
            if let Ok(why) = std::fs::read_to_string(dir.join("exit")) {
                return Err(Error::Internal(format!(
                    "the VM of sandbox {id} did not start: {why}; console: {}",
                    self.console_tail(id)
                )));
            }
            if started.elapsed() > BOOT_TIMEOUT {
                return Err(Error::Timeout {
                    operation: format!(
                        "starting the VM of sandbox {id} (console: {})",
                        self.console_tail(id)
                    ),
                    after_ms: BOOT_TIMEOUT.as_millis() as u64,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn console_tail(&self, id: &str) -> String {
        let dir = self.dir(id);
        // Not following a link: QEMU's uid owns that directory.
        let mut text = read_no_follow(&dir.join(VMM_DIR).join("console.log"));
        text.push_str(&std::fs::read_to_string(dir.join("vmm.log")).unwrap_or_default());
        // The agent's own words (why PID 1 failed) say more than the kernel's panic.
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("stockade-agent"))
            .collect();
        if !ours.is_empty() {
            return ours.join(" | ");
        }
        let lines: Vec<&str> = text.lines().rev().take(6).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// Holds sandbox `id` while it is made, paused or resumed (an exclusive `flock`
    /// on `DIR/busy`, waiting up to two minutes for another such operation on it).
    /// Between one VM host's end and the next one's start a sandbox has no
    /// supervisor and would look dead: [`Launcher::gc`] leaves a held one alone.
    async fn hold(&self, id: &str) -> Result<Hold> {
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            match self.try_hold(id)? {
                Some(h) => return Ok(h),
                None if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                None => {
                    return Err(Error::Timeout {
                        operation: format!(
                            "waiting for another operation on sandbox {id} (a pause, resume or start) to finish"
                        ),
                        after_ms: 120_000,
                    });
                }
            }
        }
    }

    /// [`Self::hold`] without waiting: `None` when another process or task holds it.
    fn try_hold(&self, id: &str) -> Result<Option<Hold>> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.dir(id).join("busy");
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&p)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(id)),
            Err(e) => return Err(Error::io(format!("cannot open {}", p.display()), e)),
        };
        match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(h) => Ok(Some(Hold(h))),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(Error::Internal(format!("cannot lock {}: {e}", p.display()))),
        }
    }

    /// Makes sandbox `id`'s directory, held (see [`Self::hold`]) until the returned
    /// hold is dropped.
    fn make_dir(&self, id: &str) -> Result<(PathBuf, Hold)> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&self.state_root)
            .map_err(io(format!("cannot create {}", self.state_root.display())))?;
        // Searchable by the VMMs' uids (each reaches its own `DIR`, which its VM host
        // opens to that VMM's gid alone), not listable.
        let _ = std::fs::set_permissions(&self.state_root, std::fs::Permissions::from_mode(0o711));
        let dir = self.dir(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
        let hold = self.try_hold(id)?.ok_or_else(|| {
            Error::Internal(format!(
                "the new directory {} is held by another",
                dir.display()
            ))
        })?;
        Ok((dir, hold))
    }

    /// Makes sandbox `id`'s network monitor directory (0700, in its own), with the
    /// `state.json` whose `spec.network` the monitor keeps up to date (`network`:
    /// the policy, its credentials redacted).
    fn make_net_dir(&self, id: &str, network: &stockade_spec::Network) -> Result<String> {
        let dir = self.dir(id).join(NET_DIR);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
        let shown = serde_json::json!({ "spec": { "network": network } });
        std::fs::write(dir.join("state.json"), shown.to_string())
            .map_err(io(format!("cannot write {}/state.json", dir.display())))?;
        Ok(dir.display().to_string())
    }

    /// The network of sandbox `id` in force: its monitor's record (a policy replaced
    /// live since the create), else the spec it was created with.
    fn live_network(&self, id: &str, created: &serde_json::Value) -> serde_json::Value {
        std::fs::read(self.dir(id).join(NET_DIR).join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("spec")?.get("network").cloned())
            .unwrap_or_else(|| created.get("network").cloned().unwrap_or_default())
    }

    /// The spec of sandbox `id` with the network in force.
    fn live_spec(&self, id: &str, spec: &serde_json::Value) -> serde_json::Value {
        let mut spec = spec.clone();
        if spec.is_object() {
            spec["network"] = self.live_network(id, &spec);
        }
        spec
    }

    /// The network monitor's input for a VM restored or resumed: its policy in force,
    /// planned again for this host now (the host's addresses and resolvers may have
    /// changed since).
    fn replanned_network(&self, id: &str) -> Result<Vec<u8>> {
        let record = self.read_record(id)?;
        let value = self.live_network(id, &record.info.spec);
        let network: stockade_spec::Network =
            serde_json::from_value(value.clone()).map_err(|e| {
                Error::Internal(format!("sandbox {id}'s network {value} is not valid: {e}"))
            })?;
        if network.policy().is_some_and(|p| !p.credentials.is_empty()) {
            return Err(credentials_fixed(id));
        }
        stockade_native::network_setup(&network, &[])?
            .map(|s| s.monitor_input)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "sandbox {id} has a network device but network none"
                ))
            })
    }

    async fn create_vm(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        need_root()?;
        let spec = spec.into_inner();
        let (accel, _) = self.accel().await?;
        let kernel = assets::find_kernel()?;
        let agent = stockade_agent_host::find_static_agent()?;
        std::fs::create_dir_all(&self.cache)
            .map_err(io(format!("cannot create {}", self.cache.display())))?;
        let (base, modules) = assets::base_initramfs(&self.cache, &agent, &kernel)?;
        let (root, image) = self.root_for(&spec).await?;
        let virtiofsd = shares_check(&spec)?;
        // The native provider's network plan for this host: firewall, resolver,
        // proxy, and (with credentials) a new authority and placeholders.
        let setup = stockade_native::network_setup(&spec.network, &[])?;
        let id = stockade_core::host::new_sandbox_id();
        let (dir, _hold) = self.make_dir(&id)?;
        let r = async {
            let now = now_ms();
            let net = setup.as_ref().map(|s| plan::NetInput {
                resolv_conf: s.resolv_conf.clone(),
                ca: s.ca.clone(),
                env: s.env.clone(),
                policy_applied: s.policy_applied.clone(),
            });
            let net_dir = match &setup {
                Some(_) => Some(self.make_net_dir(&id, &spec.network.redacted())?),
                None => None,
            };
            let p = plan::plan(&spec, image.as_ref(), net.as_ref(), modules, now, accel);
            let config = serde_json::to_vec(&p.guest)
                .map_err(|e| Error::Internal(format!("cannot encode the VM config: {e}")))?;
            assets::vm_initramfs(&base, &config, &dir.join("initrd"))?;
            let vm = VmPlan {
                accel,
                memory_mib: p.memory_mib,
                vcpus: p.vcpus,
                kernel: kernel.image.clone(),
                initrd: dir.join("initrd"),
                cmdline: format!(
                    "console=ttyS0 quiet panic=-1 rdinit=/init {} -- vm-init",
                    vmm::kernel_args(accel)
                ),
                root_image: root.clone(),
                serial_socket: dir.join(VMM_DIR).join("serial.sock"),
                control_socket: dir.join(VMM_DIR).join("qmp.sock"),
                console_log: dir.join(VMM_DIR).join("console.log"),
                incoming: None,
                shares: p
                    .guest
                    .shares
                    .iter()
                    .enumerate()
                    .map(|(i, g)| vmm::Share {
                        tag: g.tag.clone(),
                        socket: dir.join(format!("fs-{i}.sock")),
                    })
                    .collect(),
                network: net.is_some(),
            };
            let daemons = spec
                .mounts
                .iter()
                .zip(&vm.shares)
                .map(|(m, share)| {
                    let socket = share.socket.display().to_string();
                    (virtiofsd_command(virtiofsd.as_deref(), m, &socket), socket)
                })
                .collect();
            let mut applied = p.applied.clone();
            applied.push(vmm::CONFINEMENT.into());
            let cgroups = plan::host_cgroups(Path::new("/sys/fs/cgroup"), &id, p.memory_mib, spec.limits.cpus);
            applied.push(if cgroups.is_empty() {
                "host cgroup: none (no cgroup hierarchy found); the VM's size bounds it".into()
            } else {
                format!(
                    "host cgroup around the VMM: {} (memory = guest RAM + {} MiB, CPU quota {} CPUs)",
                    cgroups.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", "),
                    plan::VMM_OVERHEAD_MIB,
                    spec.limits.cpus
                )
            });
            let host = VmHostConfig {
                id: id.clone(),
                vmm: self.vmm.command(&vm),
                serial_socket: vm.serial_socket.display().to_string(),
                owner_pid: opts.owner_pid,
                owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
                expires_at_ms: p.expires_at_ms,
                cgroups,
                daemons,
                net_dir,
                vmm_ids: vmm_ids()?,
                // Set from the plan by `start`.
                vmm_files: Vec::new(),
                vmm_reads: Vec::new(),
            };
            let record = Record {
                info: SandboxInfo {
                    id: id.clone(),
                    provider: "microvm".into(),
                    created_at_ms: now,
                    expires_at_ms: p.expires_at_ms,
                    owner_pid: opts.owner_pid,
                    spec: shown_spec(&spec),
                    applied,
                    state: RunState::Running,
                    steps: Vec::new(),
                },
                plan: vm,
                host,
            };
            self.write_record(&record)?;
            self.start(&record, setup.map(|s| s.monitor_input)).await?;
            Ok(record.info)
        }
        .await;
        if r.is_err() {
            let _ = self.remove(&id).await;
        }
        r
    }

    /// Kills the VM (its supervisor's process group) and removes everything of it.
    async fn remove(&self, id: &str) -> Result<()> {
        let dir = self.dir(id);
        if let Some((pid, _)) = self.supervisor(id)
            && let Some(p) = rustix::process::Pid::from_raw(pid as i32)
        {
            let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            let until = Instant::now() + Duration::from_secs(10);
            while self.supervisor(id).is_some() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // The VMM may outlive a supervisor killed alone (a crash): by its pidfile-less
        // command line, it is found through the record.
        if let Ok(r) = self.read_record(id) {
            kill_vmm_of(&r.plan.serial_socket);
            for share in &r.plan.shares {
                kill_daemon_of(&share.socket);
            }
            for (cg, _) in &r.host.cgroups {
                remove_cgroup(Path::new(cg)).await;
            }
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("cannot remove {}", dir.display()), e)),
        }
    }

    async fn pause_vm(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        let _hold = self.hold(id).await?;
        let record = self.read_record(id)?;
        if self.is_paused(id) {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is already paused; resume it"
            )));
        }
        if !record.plan.shares.is_empty() {
            // Not `unsupported`: its fix ("use the microvm provider") is this one.
            return Err(Error::Unavailable {
                what: format!(
                    "pause (and snapshot, fork) of microvm sandbox {id}, which has workspaces"
                ),
                reason: "its shared directories are vhost-user (virtiofs) devices, which \
                         QEMU 7.2 cannot migrate, so its memory cannot be saved"
                    .into(),
                fix: "create it without mounts (copy files in with `stockade cp` or a file \
                      write) to pause, snapshot or fork it"
                    .into(),
            });
        }
        if record.host.net_dir.is_some() {
            let network = self.live_network(id, &record.info.spec);
            let has_credentials = network
                .get("credentials")
                .and_then(|c| c.as_array())
                .is_some_and(|c| !c.is_empty());
            if has_credentials {
                return Err(Error::Unavailable {
                    what: format!(
                        "pause (and snapshot, fork) of sandbox {id}, whose egress policy has credentials"
                    ),
                    reason: "the credentials' values and the sandbox's certificate authority key \
                             live only in its running network monitor (never on disk), and a \
                             restored VM would need them"
                        .into(),
                    fix: "create the sandbox without credentials to pause, snapshot or fork it"
                        .into(),
                });
            }
        }
        let (pid, ticks) = self.supervisor(id).ok_or_else(|| self.dead(id))?;
        let dir = self.dir(id);
        let snap = dir.join("snapshot");
        std::fs::create_dir_all(&snap).map_err(io(format!("cannot create {}", snap.display())))?;
        let mem = snap.join("vm.state");
        std::fs::write(dir.join("paused"), b"")
            .map_err(io("cannot mark the sandbox paused".into()))?;
        if let Err(e) = self.vmm.save(&record.plan.control_socket, &mem).await {
            let _ = std::fs::remove_file(dir.join("paused"));
            return Err(e);
        }
        let until = Instant::now() + Duration::from_secs(30);
        while alive(pid, ticks) {
            if Instant::now() > until {
                return Err(Error::Timeout {
                    operation: format!("stopping the VM of sandbox {id} after saving it"),
                    after_ms: 30_000,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (sha256, bytes) = tokio::task::spawn_blocking({
            let mem = mem.clone();
            move || sha256_file(&mem)
        })
        .await
        .map_err(|e| Error::Internal(format!("digest task failed: {e}")))??;
        let manifest = Manifest {
            sha256,
            bytes,
            saved_at_ms: now_ms(),
        };
        std::fs::write(
            snap.join("manifest.json"),
            serde_json::to_vec(&manifest).unwrap_or_default(),
        )
        .map_err(io("cannot write the snapshot manifest".into()))
    }

    /// The verified state file of paused sandbox `id`.
    async fn snapshot_of(&self, id: &str) -> Result<PathBuf> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        if !self.is_paused(id) {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is not paused; pause it first (stockade pause {id})"
            )));
        }
        let snap = self.dir(id).join("snapshot");
        let manifest: Manifest = std::fs::read(snap.join("manifest.json"))
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .ok_or_else(|| Error::Unavailable {
                what: format!("the snapshot of sandbox {id}"),
                reason: "its manifest is missing or unreadable (the pause did not finish)".into(),
                fix: format!("destroy it (stockade rm {id})"),
            })?;
        let mem = snap.join("vm.state");
        let (got, bytes) = tokio::task::spawn_blocking({
            let mem = mem.clone();
            move || sha256_file(&mem)
        })
        .await
        .map_err(|e| Error::Internal(format!("digest task failed: {e}")))??;
        if got != manifest.sha256 || bytes != manifest.bytes {
            return Err(Error::PolicyDenied(format!(
                "the snapshot of sandbox {id} ({}) is corrupt: its SHA-256 is {got} ({bytes} bytes), \
                 not {} ({} bytes) as saved; it was not restored. Destroy it (stockade rm {id})",
                mem.display(),
                manifest.sha256,
                manifest.bytes
            )));
        }
        Ok(mem)
    }

    async fn resume_vm(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        let _hold = self.hold(id).await?;
        let mem = self.snapshot_of(id).await?;
        let mut record = self.read_record(id)?;
        // A sandbox started from a named snapshot boots from that snapshot's root
        // image; the VM cannot restore without the files it booted from.
        for f in [
            &record.plan.kernel,
            &record.plan.initrd,
            &record.plan.root_image,
        ] {
            if !f.exists() {
                return Err(Error::Unavailable {
                    what: format!("resuming sandbox {id}"),
                    reason: format!(
                        "{} it booted from is gone (a removed named snapshot, or a root \
                         image pruned after the host's packages changed)",
                        f.display()
                    ),
                    fix: format!("destroy it (stockade rm {id}) and create a new one"),
                });
            }
        }
        record.plan.incoming = Some(mem.clone());
        record.host.vmm = self.vmm.command(&record.plan);
        let dir = self.dir(id);
        let _ = std::fs::remove_file(dir.join("paused"));
        let r = self.start(&record, None).await;
        record.plan.incoming = None;
        record.host.vmm = self.vmm.command(&record.plan);
        self.write_record(&record)?;
        r?;
        // The VM moved on from the saved state.
        let _ = std::fs::remove_dir_all(dir.join("snapshot"));
        Ok(())
    }

    async fn fork_vm(
        &self,
        id: &str,
        count: u32,
        opts: &CreateOptions,
    ) -> Result<Vec<SandboxInfo>> {
        need_root()?;
        if count == 0 || count > 64 {
            return Err(Error::InvalidRequest(format!(
                "fork count {count} is out of range; give 1 to 64"
            )));
        }
        check_sandbox_id(id)?;
        self.read_record(id)?;
        // The source stays paused (its saved state in place) while the copies start.
        let _hold = self.hold(id).await?;
        let mem = self.snapshot_of(id).await?;
        let source = self.read_record(id)?;
        let mut applied = source.info.applied.clone();
        applied.push(format!(
            "forked from sandbox {id}'s snapshot: own hostname, clock and random seed; own copy of memory, /tmp and overlay"
        ));
        let restore = Restore {
            mem,
            plan: source.plan.clone(),
            kernel: None,
            spec: self.live_spec(id, &source.info.spec),
            applied,
            lifetime_ms: source
                .info
                .expires_at_ms
                .saturating_sub(source.info.created_at_ms),
            cgroups: !source.host.cgroups.is_empty(),
        };
        self.restore_new(&restore, count, opts).await
    }

    /// Starts `count` new sandboxes restoring `r.mem`, each in its own directory
    /// (own id, sockets, host cgroups, owner and lifetime), the copies made and
    /// recorded first and then started at once; on any failure all of them go.
    async fn restore_new(
        &self,
        r: &Restore,
        count: u32,
        opts: &CreateOptions,
    ) -> Result<Vec<SandboxInfo>> {
        let mut made: Vec<Record> = Vec::new();
        let mut holds = Vec::new();
        let mut result = Ok(());
        for _ in 0..count {
            let new = stockade_core::host::new_sandbox_id();
            let made_one = async {
                let (dir, hold) = self.make_dir(&new)?;
                holds.push(hold);
                let initrd = dir.join("initrd");
                if std::fs::hard_link(&r.plan.initrd, &initrd).is_err() {
                    std::fs::copy(&r.plan.initrd, &initrd).map_err(io(format!(
                        "cannot copy {} into {}",
                        r.plan.initrd.display(),
                        dir.display()
                    )))?;
                }
                let kernel = match &r.kernel {
                    Some(k) => {
                        let to = dir.join("kernel");
                        std::fs::copy(k, &to).map_err(io(format!(
                            "cannot copy {} into {}",
                            k.display(),
                            dir.display()
                        )))?;
                        to
                    }
                    None => r.plan.kernel.clone(),
                };
                let now = now_ms();
                let plan = VmPlan {
                    kernel,
                    initrd,
                    serial_socket: dir.join(VMM_DIR).join("serial.sock"),
                    control_socket: dir.join(VMM_DIR).join("qmp.sock"),
                    console_log: dir.join(VMM_DIR).join("console.log"),
                    incoming: Some(r.mem.clone()),
                    ..r.plan.clone()
                };
                let mut cgroups = plan::host_cgroups(
                    Path::new("/sys/fs/cgroup"),
                    &new,
                    plan.memory_mib,
                    plan.vcpus as f64,
                );
                if !r.cgroups {
                    cgroups.clear();
                }
                // A restored VM's network: the one in force in the saved VM, served
                // by this copy's own monitor.
                let net_dir = if plan.network {
                    let value = r.spec.get("network").cloned().unwrap_or_default();
                    let network: stockade_spec::Network = serde_json::from_value(value.clone())
                        .map_err(|e| {
                            Error::Internal(format!("the saved network {value} is not valid: {e}"))
                        })?;
                    Some(self.make_net_dir(&new, &network.redacted())?)
                } else {
                    None
                };
                let host = VmHostConfig {
                    id: new.clone(),
                    vmm: self.vmm.command(&plan),
                    serial_socket: plan.serial_socket.display().to_string(),
                    owner_pid: opts.owner_pid,
                    owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
                    expires_at_ms: now + r.lifetime_ms,
                    cgroups,
                    // A restored VM has no shares (a VM with any cannot be saved).
                    daemons: Vec::new(),
                    net_dir,
                    vmm_ids: vmm_ids()?,
                    vmm_files: Vec::new(),
                    vmm_reads: Vec::new(),
                };
                let record = Record {
                    info: SandboxInfo {
                        id: new.clone(),
                        provider: "microvm".into(),
                        created_at_ms: now,
                        expires_at_ms: now + r.lifetime_ms,
                        owner_pid: opts.owner_pid,
                        spec: r.spec.clone(),
                        applied: r.applied.clone(),
                        state: RunState::Running,
                        steps: Vec::new(),
                    },
                    plan,
                    host,
                };
                self.write_record(&record)?;
                Ok::<_, Error>(record)
            }
            .await;
            match made_one {
                Ok(rec) => made.push(rec),
                Err(e) => {
                    let _ = self.remove(&new).await;
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            let starts = made.iter().map(|r| self.start(r, None));
            for r in futures_util::future::join_all(starts).await {
                if let Err(e) = r {
                    result = Err(e);
                }
            }
        }
        if let Err(e) = result {
            for r in &made {
                let _ = self.remove(&r.info.id).await;
            }
            return Err(e);
        }
        // Restored; later resumes boot from their own state.
        let mut infos = Vec::new();
        for mut r in made {
            r.plan.incoming = None;
            r.host.vmm = self.vmm.command(&r.plan);
            self.write_record(&r)?;
            infos.push(r.info);
        }
        drop(holds);
        Ok(infos)
    }

    /// Why sandbox `id` does not answer: it died under us, and how.
    fn dead(&self, id: &str) -> Error {
        let why = std::fs::read_to_string(self.dir(id).join("exit"))
            .unwrap_or_else(|_| "its VM host is gone (killed, or the host rebooted)".into());
        Error::Unavailable {
            what: format!("sandbox {id}"),
            reason: format!("it died under us: {why}"),
            fix: format!("destroy it (stockade rm {id}) and create a new one"),
        }
    }
}

/// Kills a VMM left without its supervisor: the QEMU process whose command line
/// names this sandbox's serial socket.
/// Where the shared directories of `spec` can be served from: the virtiofsd binary
/// (`None` when nothing is shared). Each must be an existing directory.
fn shares_check(spec: &stockade_core::ValidatedSpec) -> Result<Option<PathBuf>> {
    if spec.mounts.is_empty() {
        return Ok(None);
    }
    for m in &spec.mounts {
        match std::fs::metadata(&m.host) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::InvalidRequest(format!(
                    "mount source {} is not a directory: the microvm provider shares \
                     directories (virtiofs); mount the directory that holds it",
                    m.host.display()
                )));
            }
            Err(e) => {
                return Err(Error::InvalidRequest(format!(
                    "mount source {} cannot be used: {e}",
                    m.host.display()
                )));
            }
        }
    }
    find_virtiofsd()
        .map(Some)
        .ok_or_else(|| Error::Unavailable {
            what: "workspaces on the microvm provider".into(),
            reason: "no virtiofsd on this host (looked at STOCKADE_VIRTIOFSD, in /usr/libexec, \
                 /usr/lib/qemu, /usr/local/libexec and PATH)"
                .into(),
            fix:
                "install virtiofsd (Debian 13: apt-get install virtiofsd; Debian 12 with QEMU 7.2: \
              apt-get install qemu-system-common; otherwise cargo install virtiofsd and set \
              STOCKADE_VIRTIOFSD to it)"
                    .into(),
        })
}

/// The virtiofsd binary, if the host has one: `STOCKADE_VIRTIOFSD`, else the
/// distribution's (`/usr/libexec`), QEMU 7.2's (`/usr/lib/qemu`), one built from
/// crates.io (`/usr/local/libexec`, where the microvm setup installs it), or PATH's.
fn find_virtiofsd() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("STOCKADE_VIRTIOFSD") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let mut candidates = vec![
        PathBuf::from("/usr/libexec/virtiofsd"),
        PathBuf::from(C_VIRTIOFSD),
        PathBuf::from("/usr/local/libexec/virtiofsd"),
    ];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("virtiofsd")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// Where QEMU up to 7.2 installs its own virtiofsd (written in C, with the legacy
/// `-o` options). Every other virtiofsd is the Rust one (QEMU 8 dropped the C one),
/// which takes long options.
const C_VIRTIOFSD: &str = "/usr/lib/qemu/virtiofsd";

/// The command line serving `m` on `socket`: virtiofsd confined to the directory
/// (its own mount, pid and network namespaces, `pivot_root` into it, so no `..` or
/// symlink reaches past it); for a read-only mount, in a private mount namespace
/// where the directory is a read-only bind of itself, so the host side refuses
/// writes too, whatever the guest kernel does.
fn virtiofsd_command(
    virtiofsd: Option<&Path>,
    m: &stockade_spec::Mount,
    socket: &str,
) -> Vec<String> {
    let bin = virtiofsd.unwrap_or(Path::new(C_VIRTIOFSD));
    let source = m.host.display().to_string();
    let serve: Vec<String> = if bin == Path::new(C_VIRTIOFSD) {
        vec![
            bin.display().to_string(),
            format!("--socket-path={socket}"),
            "-o".into(),
            format!("source={source}"),
            "-o".into(),
            "sandbox=namespace".into(),
            "-o".into(),
            "cache=auto".into(),
            "-o".into(),
            "no_posix_lock".into(),
            "-o".into(),
            "no_xattr".into(),
        ]
    } else {
        // The Rust virtiofsd: no xattrs and no POSIX locks by default.
        vec![
            bin.display().to_string(),
            format!("--socket-path={socket}"),
            format!("--shared-dir={source}"),
            "--sandbox=namespace".into(),
            "--cache=auto".into(),
        ]
    };
    if m.writable {
        return serve;
    }
    let mut v: Vec<String> = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind -o ro \"$1\" \"$1\" && shift && exec \"$@\"",
        "sh",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    v.push(source);
    v.extend(serve);
    v
}

/// Kills a virtiofsd a crashed supervisor left, found by its socket's path.
fn kill_daemon_of(socket: &Path) {
    kill_matching(&format!("--socket-path={}", socket.display()));
}

/// The VMM's own directory in a sandbox's (owned by its uid: its sockets and
/// console log).
pub const VMM_DIR: &str = "vmm";

/// Where the VMM's host uid and gid come from: the native provider's id pool
/// (`STOCKADE_ID_RANGE`), one range leased per running VM.
fn vmm_ids() -> Result<stockade_agent_proto::launch::IdPoolPlan> {
    match stockade_native::idpool::IdPool::from_env()?.plan() {
        stockade_agent_proto::launch::UsernsPlan::Pool(p) => Ok(p),
        stockade_agent_proto::launch::UsernsPlan::Rootless(_) => Err(Error::Internal(
            "the id pool planned a rootless user namespace".into(),
        )),
    }
}

/// Writes a root-only file (0600): the sandbox's directory is searchable by its
/// VMM's gid, and these hold the spec.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // One written before by an older version may be 0644.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

/// A file's text, empty if it is missing, unreadable or a symbolic link.
fn read_no_follow(path: &Path) -> String {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        let _ = f.read_to_string(&mut text);
    }
    text
}

fn kill_vmm_of(serial_socket: &Path) {
    kill_matching(&format!("path={},", serial_socket.display()));
}

/// SIGKILLs every process whose command line contains `needle`.
fn kill_matching(needle: &str) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle)
            && let Some(p) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

async fn remove_cgroup(cg: &Path) {
    for _ in 0..100 {
        match std::fs::remove_dir(cg) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[async_trait]
impl Launcher for MicrovmLauncher {
    type Transport = UnixSocket;

    fn name(&self) -> &'static str {
        "microvm"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // OCI images: an erofs image of the flattened rootfs (see `assets`).
            images: true,
            // A virtio-net device on QEMU's user-mode network, the VMM in a network
            // namespace behind the native provider's firewall, resolver and proxy.
            network_egress: true,
            network_policy: true,
            // Directories shared with virtiofs (files are refused by name).
            mounts: true,
            ..Capabilities::FULL_LINUX
        }
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = Vec::new();
        let qemu = std::process::Command::new(&self.qemu)
            .arg("--version")
            .output();
        let (ok, detail) = match qemu {
            Ok(o) if o.status.success() => (
                true,
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            ),
            Ok(o) => (
                false,
                format!("{} --version failed ({})", self.qemu.display(), o.status),
            ),
            Err(e) => (false, format!("{} cannot run: {e}", self.qemu.display())),
        };
        checks.push(Check {
            name: "qemu".into(),
            ok,
            detail,
            fix: (!ok).then(|| "apt-get install qemu-system-x86".into()),
        });
        let kernel = assets::find_kernel();
        checks.push(Check {
            name: "guest kernel".into(),
            ok: kernel.is_ok(),
            detail: match &kernel {
                Ok(k) => format!("{} ({})", k.image.display(), k.release),
                Err(e) => e.to_string(),
            },
            fix: kernel
                .is_err()
                .then(|| "apt-get install linux-image-cloud-amd64".into()),
        });
        let erofs = std::process::Command::new("mkfs.erofs")
            .arg("--help")
            .output()
            .is_ok();
        checks.push(Check {
            name: "mkfs.erofs".into(),
            ok: erofs,
            detail: if erofs {
                "found".into()
            } else {
                "missing".into()
            },
            fix: (!erofs).then(|| "apt-get install erofs-utils".into()),
        });
        if ok && kernel.is_ok() {
            let (accel, why) = self.accel().await?;
            checks.push(Check {
                name: "acceleration".into(),
                ok: true,
                detail: format!("{} ({why})", accel.as_str()),
                fix: None,
            });
        }
        let tools = stockade_native::network_tools();
        checks.push(Check {
            name: "network".into(),
            ok: tools.is_ok(),
            detail: match &tools {
                Ok(t) => format!(
                    "none by default (no network device); with --network: a virtio-net device on \
                     QEMU's user-mode network, the VMM in its own network namespace behind the \
                     native firewall and resolver ({t})"
                ),
                Err(_) => "--network cannot work: slirp4netns or nft is missing (a VM without \
                           network is unaffected)"
                    .into(),
            },
            fix: tools.err(),
        });
        let ids = vmm_ids();
        checks.push(Check {
            name: "vmm confinement".into(),
            ok: ids.is_ok(),
            detail: match &ids {
                Ok(p) => format!(
                    "{} (pool: {} ranges from host id {}, leases in {})",
                    vmm::CONFINEMENT.trim_start_matches("VMM confinement: "),
                    p.pool_ranges,
                    p.pool_start,
                    p.lease_dir.display()
                ),
                Err(e) => e.to_string(),
            },
            fix: ids.is_err().then(|| {
                format!(
                    "set {} to a valid START-END range",
                    stockade_native::idpool::ENV
                )
            }),
        });
        let agent = stockade_agent_host::find_static_agent();
        checks.push(Check {
            name: "static agent".into(),
            ok: agent.is_ok(),
            detail: match &agent {
                Ok(p) => p.display().to_string(),
                Err(e) => e.to_string(),
            },
            fix: agent
                .is_err()
                .then(|| stockade_agent_host::BUILD_STATIC_AGENT.into()),
        });
        checks.push(Check {
            name: "root".into(),
            ok: stockade_core::host::is_root(),
            detail: format!("euid {}", stockade_core::host::euid()),
            fix: (!stockade_core::host::is_root()).then(|| "run as root".into()),
        });
        Ok(checks)
    }

    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        self.create_vm(spec, opts).await
    }

    async fn transport(&self, id: &str) -> Result<UnixSocket> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        if self.is_paused(id) {
            return Err(stockade_core::paused_error(id));
        }
        Ok(UnixSocket::new(id, self.dir(id).join("agent.sock")))
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.remove(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let mut v = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.state_root) else {
            return Ok(v);
        };
        for e in entries.flatten() {
            let id = e.file_name().to_string_lossy().to_string();
            if check_sandbox_id(&id).is_ok()
                && let Ok(info) = self.inspect(&id).await
            {
                v.push(info);
            }
        }
        v.sort_by_key(|i| i.created_at_ms);
        Ok(v)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        check_sandbox_id(id)?;
        let r = self.read_record(id)?;
        let mut info = r.info;
        if r.host.net_dir.is_some() {
            info.spec = self.live_spec(id, &info.spec);
        }
        if self.is_paused(id) {
            info.state = RunState::Paused;
        }
        let state = if self.is_paused(id) {
            let snap = self.dir(id).join("snapshot/vm.state");
            let bytes = std::fs::metadata(&snap).map(|m| m.len()).unwrap_or(0);
            format!("state: paused (memory and device state on disk, {bytes} bytes)")
        } else if self.supervisor(id).is_some() {
            "state: running".to_string()
        } else {
            match std::fs::read_to_string(self.dir(id).join("exit")) {
                Ok(why) => format!("state: dead ({why})"),
                Err(_) => "state: dead (its VM host is gone)".into(),
            }
        };
        info.applied.push(state);
        Ok(info)
    }

    async fn gc(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        // Named snapshots stay; copies a crashed `snapshot` left half-made go.
        report.reaped.extend(self.gc_partial_snapshots());
        let Ok(entries) = std::fs::read_dir(&self.state_root) else {
            return Ok(report);
        };
        for e in entries.flatten() {
            let id = e.file_name().to_string_lossy().to_string();
            if check_sandbox_id(&id).is_err() {
                continue;
            }
            // One being made, paused or resumed is not dead, whatever it looks like.
            let _hold = match self.try_hold(&id) {
                Ok(Some(h)) => h,
                Ok(None) => continue,
                Err(_) => continue,
            };
            let reap = match self.read_record(&id) {
                // Half-made by a crash (no record yet) once it is not fresh.
                Err(_) => e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(300)),
                Ok(r) => {
                    let expired = now_ms() >= r.info.expires_at_ms;
                    let owner_gone = match (r.host.owner_pid, r.host.owner_ticks) {
                        (Some(p), Some(t)) => stockade_sys::process::start_ticks(p) != Some(t),
                        (Some(p), None) => stockade_sys::process::start_ticks(p).is_none(),
                        (None, _) => false,
                    };
                    if self.is_paused(&id) {
                        expired || owner_gone
                    } else {
                        expired || owner_gone || self.supervisor(&id).is_none()
                    }
                }
            };
            if reap {
                match self.remove(&id).await {
                    Ok(()) => report.reaped.push(id),
                    Err(e) => report.errors.push(format!("{id}: {e}")),
                }
            }
        }
        Ok(report)
    }

    async fn explain(&self, id: &str, error: Error) -> Error {
        if self.read_record(id).is_err() {
            return not_found(id);
        }
        if self.supervisor(id).is_none() && !self.is_paused(id) {
            return self.dead(id);
        }
        error
    }

    async fn pause(&self, id: &str) -> Result<()> {
        self.pause_vm(id).await
    }

    async fn egress_denied(
        &self,
        id: &str,
        since_ms: u64,
    ) -> Result<Vec<stockade_agent_proto::EgressDenial>> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        stockade_native::egress_denied_via(&self.dir(id).join(NET_DIR).join("net.sock"), since_ms)
            .await
    }

    async fn set_network(&self, id: &str, network: &stockade_spec::Network) -> Result<()> {
        check_sandbox_id(id)?;
        let record = self.read_record(id)?;
        if self.is_paused(id) {
            return Err(stockade_core::paused_error(id));
        }
        stockade_native::set_network_via(
            &self.dir(id).join(NET_DIR).join("net.sock"),
            id,
            network,
            self.live_network(id, &record.info.spec),
            &[],
        )
        .await
    }

    async fn resume(&self, id: &str) -> Result<()> {
        self.resume_vm(id).await
    }

    async fn fork(&self, id: &str, count: u32, opts: &CreateOptions) -> Result<Vec<SandboxInfo>> {
        self.fork_vm(id, count, opts).await
    }

    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        self.snapshot_vm(id, name).await
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.list_snapshots()
    }

    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.remove_snapshot_dir(name)
    }

    async fn create_from_snapshot(&self, name: &str, opts: &CreateOptions) -> Result<SandboxInfo> {
        self.start_from_snapshot(name, opts).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(writable: bool) -> stockade_spec::Mount {
        stockade_spec::Mount {
            host: PathBuf::from("/srv/work"),
            target: "/work".into(),
            writable,
        }
    }

    #[test]
    fn each_virtiofsd_gets_the_options_it_understands() {
        let c = virtiofsd_command(Some(Path::new(C_VIRTIOFSD)), &mount(true), "/s");
        assert_eq!(c[0], C_VIRTIOFSD);
        assert!(c.iter().any(|a| a == "source=/srv/work"), "{c:?}");
        assert!(c.iter().any(|a| a == "sandbox=namespace"), "{c:?}");
        let r = virtiofsd_command(
            Some(Path::new("/usr/local/libexec/virtiofsd")),
            &mount(true),
            "/s",
        );
        assert_eq!(
            r,
            [
                "/usr/local/libexec/virtiofsd",
                "--socket-path=/s",
                "--shared-dir=/srv/work",
                "--sandbox=namespace",
                "--cache=auto"
            ]
        );
        // Read-only: the same daemon inside a read-only bind of the directory.
        let ro = virtiofsd_command(
            Some(Path::new("/usr/libexec/virtiofsd")),
            &mount(false),
            "/s",
        );
        assert_eq!(ro[0], "unshare");
        assert!(
            ro.iter().any(|a| a.contains("mount --bind -o ro")),
            "{ro:?}"
        );
        assert!(ro.ends_with(&["--cache=auto".to_string()]), "{ro:?}");
        assert!(ro.iter().any(|a| a == "--shared-dir=/srv/work"), "{ro:?}");
    }
}
