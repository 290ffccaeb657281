//! The gVisor provider: each sandbox is a gVisor sandbox started with `runsc` (no
//! dockerd), so the code's system calls are served by gVisor's user-space kernel and
//! a kernel bug on the host is no longer one step away. No KVM needed: the ptrace (or
//! systrap) platform runs anywhere; kvm is used only where a real probe boots.
//!
//! `create` plans the root exactly as the native provider does
//! (`stockade_native::plan`: the host's read-only view or an image's flattened
//! rootfs), turns the plan into an OCI bundle ([`bundle`]), and starts it with `runsc
//! run --detach`: PID 1 is the static Stockade agent (`stockade-agent container`, as in
//! a docker sandbox), which listens on `/.stockade/agent.sock`, a *host* unix socket
//! that gVisor creates in the sandbox's private state directory because runsc runs
//! with `--host-uds=create`. The host connects to it directly, so exec, streaming,
//! stdin, deadlines, output caps and file operations are the agent host's
//! ([`AgentProvider`]), the same code as native and docker. A detached
//! `stockade-agent gvisor-watch` runs `runsc delete --force` when the owner dies, the
//! lifetime passes or the sandbox ends; [`GvisorLauncher::reap`] (`gc`) removes what
//! a crash left.

pub mod bundle;
pub mod cgroup;
pub mod runsc;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use stockade_agent_host::{AgentProvider, Launcher, UnixSocket};
use stockade_agent_proto::launch::{ContainerConfig, PausedTime};
use stockade_agent_proto::now_ms;
use stockade_core::host::check_sandbox_id;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, Error, GcReport, Result, SandboxInfo,
    ValidatedSpec,
};
use stockade_native::freezer;
use tokio::sync::OnceCell;

pub use runsc::{Platform, Runsc};

/// The gVisor provider: the gVisor launcher with the agent host.
pub type GvisorProvider = AgentProvider<GvisorLauncher>;

/// Default state root (root only): one directory per sandbox, and runsc's own state
/// in `runsc/`.
pub const DEFAULT_STATE_ROOT: &str = "/run/stockade-gvisor";

/// How long `runsc run` and the agent's first answer may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A state directory this young may belong to a creation in progress: gc leaves it.
const YOUNG: Duration = Duration::from_secs(60);

/// Per-step timings of one create or destroy, printed to stderr when
/// `STOCKADE_GVISOR_TIMINGS` is set (for profiling; see BENCHMARKS.md).
struct Steps {
    what: String,
    last: Instant,
    steps: Vec<(&'static str, Duration)>,
    on: bool,
}

impl Steps {
    fn new(what: String) -> Steps {
        Steps {
            what,
            last: Instant::now(),
            steps: Vec::new(),
            on: std::env::var_os("STOCKADE_GVISOR_TIMINGS").is_some(),
        }
    }

    fn step(&mut self, name: &'static str) {
        if self.on {
            let now = Instant::now();
            self.steps.push((name, now - self.last));
            self.last = now;
        }
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        if self.on {
            let total: Duration = self.steps.iter().map(|s| s.1).sum();
            let parts: Vec<String> = self
                .steps
                .iter()
                .map(|(n, d)| format!("{n} {:.1}", d.as_secs_f64() * 1000.0))
                .collect();
            eprintln!(
                "stockade-gvisor: {} {:.1} ms: {}",
                self.what,
                total.as_secs_f64() * 1000.0,
                parts.join(", ")
            );
        }
    }
}

/// What a sandbox's directory records (`sandbox.json`), for list, inspect and gc.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    info: SandboxInfo,
    /// The `runsc-sandbox` process (gVisor's kernel) and its start time.
    init_pid: u32,
    init_ticks: u64,
    owner_ticks: Option<u64>,
    /// The sandbox's host memory limit (for explaining an OOM death).
    host_memory_bytes: u64,
    /// The detached watcher (`stockade-agent gvisor-watch`) and its start time: a
    /// destroy ends it first, so it does not run its own `runsc delete` as the
    /// sandbox dies.
    #[serde(default)]
    watcher: Option<(u32, u64)>,
}

/// The runsc this launcher uses and the platform it picked.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The runsc binary.
    pub runsc: Runsc,
    /// The platform sandboxes run on.
    pub platform: Platform,
    /// Why kvm is not used, when it is not.
    pub kvm: std::result::Result<(), String>,
    /// Who asked for the platform (`None`: chosen here).
    pub platform_from: Option<&'static str>,
}

/// Launches gVisor sandboxes with runsc.
#[derive(Debug)]
pub struct GvisorLauncher {
    state_root: PathBuf,
    image_store: Option<PathBuf>,
    runsc: Option<PathBuf>,
    setup: OnceCell<Setup>,
}

impl Default for GvisorLauncher {
    fn default() -> Self {
        GvisorLauncher::new()
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        kind: "sandbox",
        id: id.to_string(),
    }
}

fn io(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let msg = format!("cannot {what} {}", p.display());
    move |e| Error::io(msg, e)
}

fn need_root() -> Result<()> {
    if stockade_core::host::is_root() {
        Ok(())
    } else {
        Err(Error::Unavailable {
            what: "the gvisor provider".into(),
            reason: "it runs runsc as root (its cgroups and its gofer need it)".into(),
            fix: "run as root, or use the native provider (rootless mode) or a daemon run by root"
                .into(),
        })
    }
}

impl GvisorLauncher {
    /// A launcher keeping its state in [`DEFAULT_STATE_ROOT`], reading images from
    /// `$STOCKADE_HOME/images`, with runsc from `$STOCKADE_RUNSC`, the config file or
    /// `PATH` (found on first use).
    pub fn new() -> GvisorLauncher {
        GvisorLauncher {
            state_root: PathBuf::from(DEFAULT_STATE_ROOT),
            image_store: None,
            runsc: None,
            setup: OnceCell::new(),
        }
    }

    /// Keeps the state under `root`.
    pub fn with_state_root(mut self, root: impl Into<PathBuf>) -> GvisorLauncher {
        self.state_root = root.into();
        self
    }

    /// Reads images from the store at `root`.
    pub fn with_image_store(mut self, root: impl Into<PathBuf>) -> GvisorLauncher {
        self.image_store = Some(root.into());
        self
    }

    /// Uses the runsc at `path`.
    pub fn with_runsc(mut self, path: impl Into<PathBuf>) -> GvisorLauncher {
        self.runsc = Some(path.into());
        self
    }

    fn runsc_root(&self) -> PathBuf {
        self.state_root.join("runsc")
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.state_root.join(id)
    }

    /// The runsc and the platform (found and probed once; the kvm probe's answer is
    /// kept in the state root for this runsc, since a hanging kvm costs the probe's
    /// whole timeout).
    pub async fn setup(&self) -> Result<&Setup> {
        self.setup
            .get_or_try_init(|| async {
                let path = match &self.runsc {
                    Some(p) => p.clone(),
                    None => runsc::locate()?,
                };
                let runsc = open_runsc(&path).await?;
                let requested = runsc::requested_platform()?;
                // The kvm probe (up to 5 s the first time) only when kvm may be used.
                let kvm = match requested {
                    Some((p, _)) if p != Platform::Kvm => {
                        Err("another platform was asked for".into())
                    }
                    _ => self.kvm_works(&runsc).await,
                };
                let platform = match requested {
                    Some((p, from)) => runsc::check_requested(p, from, &runsc, &kvm)?,
                    None => runsc::choose(kvm.is_ok(), runsc.has_systrap),
                };
                Ok(Setup {
                    platform,
                    runsc,
                    kvm,
                    platform_from: requested.map(|(_, from)| from),
                })
            })
            .await
    }

    async fn kvm_works(&self, runsc: &Runsc) -> std::result::Result<(), String> {
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
        {
            return Err(format!("/dev/kvm cannot be opened: {e}"));
        }
        // One answer per host and runsc, whatever the state root.
        let cache_dir = stockade_core::host::runtime_dir("stockade-gvisor");
        let cache = cache_dir.join("kvm-probe.json");
        let key = format!("{} {}", runsc.path.display(), runsc.version);
        if let Ok(text) = std::fs::read_to_string(&cache)
            && let Ok((k, answer)) =
                serde_json::from_str::<(String, std::result::Result<(), String>)>(&text)
            && k == key
        {
            return answer;
        }
        let answer = runsc
            .platform_works(Platform::Kvm)
            .await
            .map_err(|e| format!("runsc does not boot on it: {e}"));
        if std::fs::create_dir_all(&cache_dir).is_ok()
            && let Ok(text) = serde_json::to_string(&(key, &answer))
        {
            let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &cache);
            }
        }
        answer
    }

    /// `runsc --root R ARGS` within [`START_TIMEOUT`]; its stdout, or its stderr in
    /// the error when it fails.
    async fn runsc_ok(&self, args: &[&str]) -> Result<String> {
        let setup = self.setup().await?;
        let mut cmd = tokio::process::Command::new(&setup.runsc.path);
        cmd.arg(format!("--root={}", self.runsc_root().display()))
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let what = format!("runsc {}", args.join(" "));
        let child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("cannot start {what}"), e))?;
        let out = match tokio::time::timeout(START_TIMEOUT, child.wait_with_output()).await {
            Ok(r) => r.map_err(|e| Error::io(format!("cannot run {what}"), e))?,
            Err(_) => {
                return Err(Error::Timeout {
                    operation: what,
                    after_ms: START_TIMEOUT.as_millis() as u64,
                });
            }
        };
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Internal(format!(
                "{what} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    fn record(&self, id: &str) -> Option<Record> {
        let text = std::fs::read(self.dir(id).join("sandbox.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    fn alive(r: &Record) -> bool {
        stockade_sys::process::is_same_process(r.init_pid, r.init_ticks)
    }

    /// What `list` and `inspect` say of a live sandbox: paused or running, and its
    /// deadline moved by the time it spent paused (which its lifetime does not count).
    fn info(&self, r: Record) -> SandboxInfo {
        let mut info = r.info;
        let paused = PausedTime::read(&self.pause_dir(&info.id), now_ms());
        info.expires_at_ms = paused.deadline(info.expires_at_ms);
        if paused.since_ms.is_some() {
            info.state = stockade_core::RunState::Paused;
        }
        info
    }

    /// The deadline of sandbox `r` now: the planned one plus its pauses.
    fn deadline(&self, r: &Record, now: u64) -> u64 {
        PausedTime::read(&self.pause_dir(&r.info.id), now).deadline(r.info.expires_at_ms)
    }

    /// Where the pause files of sandbox `id` are (`paused`, `paused-ms`, as native's):
    /// its agent directory, PID 1's `/.stockade` (root's alone, out of the code's
    /// reach), as in a docker sandbox, so PID 1 of either can read them.
    fn pause_dir(&self, id: &str) -> PathBuf {
        self.dir(id).join("agent")
    }

    /// The pause directory of live sandbox `id`.
    fn live_dir(&self, id: &str) -> Result<PathBuf> {
        check_sandbox_id(id)?;
        let r = self.record(id).ok_or_else(|| not_found(id))?;
        if Self::alive(&r) {
            Ok(self.pause_dir(id))
        } else {
            Err(self.gone(id, not_found(id)))
        }
    }

    /// Kills the sandbox and removes everything of it, without `runsc delete`: that
    /// SIGKILLs the sandbox and then polls (every 100 ms) until the killed process is
    /// *reaped*, by its parent, which is the host's init since `runsc run --detach`
    /// leaves it an orphan; where init reaps slowly (this project's VMs: ~2 s) a
    /// destroy took 1.6-2 s. Here: runsc's state files first (so the `runsc delete`
    /// the watcher runs when it sees the kernel die finds nothing and returns at
    /// once), then the sentry and every process of the sandbox's cgroups
    /// ([`cgroup::kill`]), its cgroups (they can be removed once their tasks are dead,
    /// zombies or not), its state directory.
    async fn remove(&self, id: &str) -> Result<()> {
        let mut steps = Steps::new(format!("destroy {id}"));
        let record = self.record(id);
        // The watcher would run `runsc delete` when it sees the kernel die: wasted
        // work (a Go program's start, ~25 ms of CPU) racing this removal.
        if let Some((pid, ticks)) = record.as_ref().and_then(|r| r.watcher)
            && stockade_sys::process::is_same_process(pid, ticks)
            && let Some(p) = rustix::process::Pid::from_raw(pid as i32)
        {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
        remove_runsc_state(&self.runsc_root(), id)?;
        steps.step("runsc state");
        let cgroups = cgroup::dirs(stockade_native::plan::CGROUP_PARENT, id);
        // The sentry first (also when runsc never moved it into its cgroups: a
        // failed start), then the rest of its cgroups.
        let sentry = record
            .as_ref()
            .filter(|r| Self::alive(r))
            .map(|r| r.init_pid);
        cgroup::kill(&cgroups, sentry);
        steps.step("kill");
        let left = tokio::task::spawn_blocking(move || cgroup::remove(&cgroups))
            .await
            .map_err(|e| Error::Internal(format!("cgroup removal task failed: {e}")))?;
        steps.step("cgroups");
        if let Some(e) = left {
            return Err(Error::Internal(format!("destroying sandbox {id}: {e}")));
        }
        let dir = self.dir(id);
        let r = tokio::task::spawn_blocking(move || remove_tree(&dir).map_err(io("remove", &dir)))
            .await
            .map_err(|e| Error::Internal(format!("state dir removal task failed: {e}")))?;
        steps.step("state dir");
        r
    }

    /// Why sandbox `id`, whose agent stopped answering, is gone.
    fn gone(&self, id: &str, cause: Error) -> Error {
        let Some(r) = self.record(id) else {
            return not_found(id);
        };
        if Self::alive(&r) {
            return cause;
        }
        let now = now_ms();
        let how = if now >= self.deadline(&r, now) {
            "its lifetime passed".to_string()
        } else {
            format!(
                "its gVisor kernel (runsc-sandbox, pid {}) was killed: by a signal, or by the host's OOM killer at the sandbox's host memory limit of {}",
                r.init_pid,
                stockade_spec::format_size(r.host_memory_bytes)
            )
        };
        Error::Unavailable {
            what: format!("sandbox {id}"),
            reason: format!("it died under us: {how}"),
            fix: format!("destroy it (stockade rm {id}) and create a new one"),
        }
    }

    async fn start(&self, spec: &ValidatedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        need_root()?;
        let mut steps = Steps::new("create".into());
        let setup = self.setup().await?.clone();
        steps.step("setup");
        let agent = stockade_agent_host::find_static_agent().map_err(|e| match e {
            Error::Unavailable { reason, fix, .. } => Error::Unavailable {
                what: "the gvisor provider's agent".into(),
                reason,
                fix,
            },
            e => e,
        })?;
        steps.step("find agent");
        let id = stockade_core::host::new_sandbox_id();
        let dir = self.dir(&id);
        make_dirs(&self.state_root, &dir)?;
        let r = self
            .start_in(spec, opts, &setup, &agent, &id, &mut steps)
            .await;
        if r.is_err() {
            let _ = self.remove(&id).await;
        }
        r
    }

    async fn start_in(
        &self,
        spec: &ValidatedSpec,
        opts: &CreateOptions,
        setup: &Setup,
        agent: &Path,
        id: &str,
        steps: &mut Steps,
    ) -> Result<SandboxInfo> {
        let dir = &self.dir(id);
        let mount_is_file = spec
            .mounts
            .iter()
            .map(|m| match std::fs::metadata(&m.host) {
                Ok(md) => Ok(md.is_file()),
                Err(e) => Err(Error::InvalidRequest(format!(
                    "mount source {} cannot be used: {e}",
                    m.host.display()
                ))),
            })
            .collect::<Result<Vec<bool>>>()?;
        let (image, image_guard) = match spec.image.clone() {
            Some(r) => {
                let store = self.image_store.clone();
                stockade_native::ensure_image(&r, store.as_deref()).await?;
                let (root, guard) = tokio::task::spawn_blocking(move || {
                    stockade_native::image_root(&r, store.as_deref())
                })
                .await
                .map_err(|e| Error::Internal(format!("image task failed: {e}")))??;
                (Some(root), Some(guard))
            }
            None => (None, None),
        };
        steps.step("image");
        let created = now_ms();
        let in_use_lock = image.as_ref().and_then(|i| i.in_use_lock.clone());
        let image_rootfs = image.as_ref().map(|i| i.rootfs.clone());
        let ctx = stockade_native::plan::PlanContext {
            id: id.to_string(),
            state_dir: dir.to_path_buf(),
            host: stockade_native::layout::detect(),
            slirp: None,
            nft: None,
            dns_upstreams: Vec::new(),
            egress_secrets: None,
            now_ms: created,
            owner_pid: opts.owner_pid,
            mount_is_file,
            image,
            userns: None,
            rootless: None,
        };
        steps.step("layout");
        let plan = stockade_native::plan::plan(spec, &ctx)?;
        let input = bundle::BundleInput {
            agent: agent.to_path_buf(),
            agent_dir: dir.join("agent"),
            root_dir: dir.join("rootfs"),
            files_dir: dir.join("files"),
            image_rootfs,
            runsc_version: setup.runsc.version.clone(),
            platform: setup.platform,
            cgroup_parent: stockade_native::plan::CGROUP_PARENT.into(),
        };
        let b = bundle::bundle(spec, &plan, &input)?;
        steps.step("plan+bundle");
        let base = if input.image_rootfs.is_some() {
            &input.files_dir
        } else {
            &input.root_dir
        };
        write_root(base, &b.root_ops)?;
        make_private(&input.agent_dir)?;
        let config = ContainerConfig {
            exec: b.exec.clone(),
            expires_at_ms: plan.expires_at_ms,
        };
        write_json(&input.agent_dir.join("config.json"), &config)?;
        std::fs::write(input.agent_dir.join("agent"), b"")
            .map_err(io("create", &input.agent_dir))?;
        write_json(&dir.join("config.json"), &b.config)?;
        steps.step("write root");

        let console = std::fs::File::create(dir.join("console.log"))
            .map_err(io("create", &dir.join("console.log")))?;
        let pid_file = dir.join("init.pid");
        let mut cmd = tokio::process::Command::new(&setup.runsc.path);
        cmd.arg(format!("--root={}", self.runsc_root().display()))
            .arg(format!("--platform={}", setup.platform.as_str()))
            .args(["--network=none", "--host-uds=create"]);
        // Diagnostics: gVisor's debug log with every system call of the sandbox
        // (`--strace`), one file per runsc process, in this directory.
        if let Some(log) = std::env::var_os("STOCKADE_GVISOR_DEBUG_LOG").filter(|d| !d.is_empty()) {
            let mut flag = std::ffi::OsString::from("--debug-log=");
            flag.push(&log);
            flag.push("/");
            cmd.args(["--debug", "--strace"]).arg(flag);
        }
        if input.image_rootfs.is_some() {
            // Mount points the image lacks are made in memory, never in the store.
            cmd.arg("--overlay2=root:memory");
        }
        cmd.arg("run")
            .arg("--detach")
            .arg(format!("--bundle={}", dir.display()))
            .arg(format!("--pid-file={}", pid_file.display()))
            .arg(id)
            .stdin(std::process::Stdio::null())
            .stdout(
                console
                    .try_clone()
                    .map_err(|e| Error::io("cannot dup console log", e))?,
            )
            .stderr(console)
            .kill_on_drop(true);
        let status = tokio::time::timeout(START_TIMEOUT, cmd.status())
            .await
            .map_err(|_| Error::Timeout {
                operation: format!("runsc run {id}"),
                after_ms: START_TIMEOUT.as_millis() as u64,
            })?
            .map_err(|e| Error::io(format!("cannot start {}", setup.runsc.path.display()), e))?;
        if !status.success() {
            return Err(Error::Internal(format!(
                "runsc run {id} failed ({status}): {}",
                console_tail(dir)
            )));
        }
        steps.step("runsc run");
        let init_pid: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| Error::Internal(format!("runsc run {id} wrote no pid file")))?;
        let init_ticks = stockade_sys::process::start_ticks(init_pid).ok_or_else(|| {
            Error::Internal(format!(
                "the sandbox {id} ended at once: {}",
                console_tail(dir)
            ))
        })?;
        let info = SandboxInfo {
            id: id.to_string(),
            provider: "gvisor".into(),
            created_at_ms: created,
            expires_at_ms: plan.expires_at_ms,
            owner_pid: opts.owner_pid,
            spec: serde_json::to_value(spec.spec()).unwrap_or_default(),
            applied: b.applied,
            state: stockade_core::RunState::Running,
            steps: Vec::new(),
        };
        let record = Record {
            info: info.clone(),
            init_pid,
            init_ticks,
            owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
            host_memory_bytes: spec.limits.memory_bytes + bundle::SENTRY_OVERHEAD_BYTES,
            watcher: None,
        };
        let transport = UnixSocket::new(id, input.agent_dir.join("agent.sock"));
        let agent_up = async {
            let started = Instant::now();
            loop {
                if stockade_agent_host::client::ping(id, &transport)
                    .await
                    .is_ok()
                {
                    return Ok(());
                }
                if !stockade_sys::process::is_same_process(init_pid, init_ticks) {
                    return Err(Error::Internal(format!(
                        "the agent of sandbox {id} did not start: {}",
                        console_tail(dir)
                    )));
                }
                if started.elapsed() > START_TIMEOUT {
                    return Err(Error::Timeout {
                        operation: format!("starting sandbox {id}"),
                        after_ms: START_TIMEOUT.as_millis() as u64,
                    });
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        // The watcher starts while the agent comes up (it needs only the kernel's
        // pid); should either fail, the caller's removal kills both.
        let watcher = self.watch(setup, agent, &record, dir, in_use_lock.as_deref());
        let (up, watched) = tokio::join!(agent_up, watcher);
        up?;
        watched?;
        steps.step("agent up + watcher");
        let record = Record {
            watcher: find_watcher(id, dir),
            ..record
        };
        write_json(&dir.join("sandbox.json"), &record)?;
        steps.step("record");
        drop(image_guard);
        Ok(info)
    }

    /// Starts the detached watcher: `runsc delete --force` when the owner dies, the
    /// lifetime passes or the sandbox ends; it also holds the image in use.
    async fn watch(
        &self,
        setup: &Setup,
        agent: &Path,
        r: &Record,
        dir: &Path,
        in_use_lock: Option<&Path>,
    ) -> Result<()> {
        let mut cmd = std::process::Command::new(agent);
        cmd.arg("gvisor-watch")
            .arg(&setup.runsc.path)
            .arg(self.runsc_root())
            .arg(&r.info.id)
            .arg(r.init_pid.to_string())
            .arg(
                r.info
                    .owner_pid
                    .map(|p| p.to_string())
                    .unwrap_or("-".into()),
            )
            .arg(r.info.expires_at_ms.to_string())
            .arg(dir)
            .arg(in_use_lock.map(Path::as_os_str).unwrap_or("-".as_ref()))
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        stockade_sys::process::spawn_with_stdio_only(&mut cmd);
        let status = tokio::process::Command::from(cmd)
            .status()
            .await
            .map_err(|e| Error::io(format!("cannot start {} gvisor-watch", agent.display()), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "the watcher of sandbox {} failed to start ({status})",
                r.info.id
            )))
        }
    }

    /// Reaps every sandbox whose gVisor kernel ended, whose owner died or whose
    /// lifetime passed, state directories left half-made, and runsc containers with
    /// no state directory. The daemon calls this too.
    pub async fn reap(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        if !self.state_root.exists() {
            return Ok(report);
        }
        let now = now_ms();
        let mut known = Vec::new();
        for e in std::fs::read_dir(&self.state_root)
            .map_err(io("read", &self.state_root))?
            .flatten()
        {
            let id = e.file_name().to_string_lossy().into_owned();
            if check_sandbox_id(&id).is_err() {
                continue;
            }
            known.push(id.clone());
            let stale = match self.record(&id) {
                Some(r) => {
                    let owner_dead = match (r.info.owner_pid, r.owner_ticks) {
                        (Some(p), Some(t)) => !stockade_sys::process::is_same_process(p, t),
                        (Some(p), None) => !Path::new(&format!("/proc/{p}")).exists(),
                        _ => false,
                    };
                    !Self::alive(&r) || owner_dead || now >= self.deadline(&r, now)
                }
                None => !e
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().unwrap_or_default() < YOUNG),
            };
            if stale {
                match self.remove(&id).await {
                    Ok(()) => report.reaped.push(id),
                    Err(err) => report.errors.push(format!("sandbox {id}: {err}")),
                }
            }
        }
        // Containers runsc knows that have no directory (a crash between the two;
        // or a lock file a `runsc delete` of the watcher made again while a destroy
        // removed the state, left once it is a minute old). Looked at again now: a
        // sandbox created since the listing above has its directory (made before its
        // container) and is not an orphan.
        for (id, age) in runsc_ids(&self.runsc_root()) {
            if check_sandbox_id(&id).is_ok()
                && !known.contains(&id)
                && !self.state_root.join(&id).exists()
                && age > YOUNG
            {
                match self.remove(&id).await {
                    Ok(()) => report.reaped.push(id),
                    Err(err) => report.errors.push(format!("sandbox {id}: {err}")),
                }
            }
        }
        Ok(report)
    }
}

/// The detached watcher of sandbox `id` (its command line is `... gvisor-watch RUNSC
/// ROOT ID INIT OWNER EXPIRES DIR LOCK`) and its start time.
fn find_watcher(id: &str, dir: &Path) -> Option<(u32, u64)> {
    let dir = dir.as_os_str().as_encoded_bytes();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.get(1) == Some(&b"gvisor-watch".as_slice())
            && args.get(4) == Some(&id.as_bytes())
            && args.get(8) == Some(&dir)
        {
            return stockade_sys::process::start_ticks(pid).map(|t| (pid, t));
        }
    }
    None
}

/// Removes `dir` and everything below it (never following a symlink), like
/// `remove_dir_all`, but the directories of one depth in parallel: the root's mount
/// points were mount points in the gofer's mount namespace, just ended, and each
/// rmdir of one waits for an RCU grace period (~3 ms each here, ~30 ms a sandbox one
/// after the other); in parallel the waits overlap. A missing `dir` is not an error.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    fn walk(d: &Path, depth: usize, dirs: &mut Vec<(usize, PathBuf)>) -> std::io::Result<()> {
        for e in std::fs::read_dir(d)? {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                walk(&path, depth + 1, dirs)?;
            } else {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        dirs.push((depth, d.to_path_buf()));
        Ok(())
    }
    let mut dirs = Vec::new();
    match walk(dir, 0, &mut dirs) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    for level in dirs.chunk_by(|a, b| a.0 == b.0) {
        let results: Vec<std::io::Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = level
                .iter()
                .map(|(_, d)| s.spawn(move || std::fs::remove_dir(d)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
                })
                .collect()
        });
        for r in results {
            match r {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// runsc's files of sandbox `id` in its state root (`ID_sandbox:ID.state` and
/// `.lock`).
fn runsc_files(runsc_root: &Path, id: &str) -> Vec<PathBuf> {
    let prefix = format!("{id}_sandbox:");
    std::fs::read_dir(runsc_root)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes runsc's state of sandbox `id`: from then on runsc does not know it.
fn remove_runsc_state(runsc_root: &Path, id: &str) -> Result<()> {
    for f in runsc_files(runsc_root, id) {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove", &f)(e)),
        }
    }
    Ok(())
}

/// The sandbox ids runsc has files of in `runsc_root`, with the age of the youngest.
fn runsc_ids(runsc_root: &Path) -> Vec<(String, Duration)> {
    let mut v: Vec<(String, Duration)> = Vec::new();
    for e in std::fs::read_dir(runsc_root)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((id, _)) = name.split_once("_sandbox:") else {
            continue;
        };
        let age = e
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default())
            .unwrap_or_default();
        match v.iter_mut().find(|(i, _)| i == id) {
            Some((_, a)) => *a = (*a).min(age),
            None => v.push((id.to_string(), age)),
        }
    }
    v
}

/// [`Runsc::open`], whose answer (two runs of runsc, ~50 ms, on every create of a
/// fresh process such as the CLI) is kept per build of the binary
/// ([`runsc::identity`]) in `runsc-info.json` of the runtime directory. Only a runsc
/// that answered is kept; a missing or broken one is asked again each time.
async fn open_runsc(path: &Path) -> Result<Runsc> {
    let cache_dir = stockade_core::host::runtime_dir("stockade-gvisor");
    let cache = cache_dir.join("runsc-info.json");
    let key = runsc::identity(path);
    if let Some(key) = &key
        && let Ok(text) = std::fs::read_to_string(&cache)
        && let Ok((k, r)) = serde_json::from_str::<(String, Runsc)>(&text)
        && k == *key
        && r.path == path
    {
        return Ok(r);
    }
    let runsc = Runsc::open(path).await?;
    if let Some(key) = key
        && std::fs::create_dir_all(&cache_dir).is_ok()
        && let Ok(text) = serde_json::to_string(&(key, &runsc))
    {
        let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &cache);
        }
    }
    Ok(runsc)
}

fn console_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        "it exited without a message".into()
    } else {
        let start = text.len().saturating_sub(2000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text[start..].to_string()
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| Error::Internal(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(path, bytes).map_err(io("write", path))
}

fn make_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io("create", dir))
}

/// The state root (0711, root's) and the sandbox's directory (0700).
fn make_dirs(root: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(root).map_err(io("create", root))?;
    let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711));
    make_private(dir)
}

/// Applies `ops` below `base` (a directory of ours, just made: nothing in it is a
/// link we did not make, so joining paths is safe).
fn write_root(base: &Path, ops: &[bundle::RootOp]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(base).map_err(io("create", base))?;
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod", base))?;
    for op in ops {
        match op {
            bundle::RootOp::Dir { path, mode } => {
                let p = base.join(path);
                if std::fs::symlink_metadata(&p).is_err() {
                    std::fs::create_dir_all(&p).map_err(io("create", &p))?;
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
                        .map_err(io("chmod", &p))?;
                }
            }
            bundle::RootOp::EmptyFile { path } => {
                let p = base.join(path);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                }
                if std::fs::symlink_metadata(&p).is_err() {
                    std::fs::write(&p, b"").map_err(io("create", &p))?;
                }
            }
            bundle::RootOp::Symlink { to, path } => {
                let p = base.join(path);
                if std::fs::symlink_metadata(&p).is_err() {
                    std::os::unix::fs::symlink(to, &p).map_err(io("link", &p))?;
                }
            }
            bundle::RootOp::File {
                path,
                contents,
                mode,
            } => {
                let p = base.join(path);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                }
                std::fs::write(&p, contents).map_err(io("write", &p))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
                    .map_err(io("chmod", &p))?;
            }
        }
    }
    Ok(())
}

#[async_trait]
impl Launcher for GvisorLauncher {
    type Transport = UnixSocket;

    fn name(&self) -> &'static str {
        "gvisor"
    }

    /// Everything but network egress (runsc's own network stack would need the
    /// host-side filtering the native provider does with slirp4netns and nftables,
    /// not wired here: refused rather than weakened) and a writable root.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            network_egress: false,
            network_policy: false,
            writable_root: false,
            local_images: true,
            ..Capabilities::FULL_LINUX
        }
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = Vec::new();
        checks.push(Check {
            name: "root".into(),
            ok: stockade_core::host::is_root(),
            detail: format!("running as uid {}", stockade_core::host::euid()),
            fix: need_root().err().map(|e| e.to_string()),
        });
        match self.setup().await {
            Ok(s) => {
                let today = (now_ms() / 86_400_000) as i64;
                let age = s.runsc.age_days(today);
                let stale = age.is_some_and(|a| a > runsc::STALE_AFTER_DAYS);
                checks.push(Check {
                    name: "runsc".into(),
                    ok: true,
                    detail: format!(
                        "{}: {}{}",
                        s.runsc.path.display(),
                        s.runsc.version,
                        match age {
                            Some(a) if stale => format!(
                                " (WARNING: built {a} days ago, more than a year: gVisor fixes security bugs in newer releases; update it)"
                            ),
                            Some(a) => format!(" (built {a} days ago)"),
                            None => String::new(),
                        }
                    ),
                    fix: stale.then(|| "install a newer runsc (Debian 12: apt-get install -t bookworm-backports runsc; or gVisor's own releases) and point STOCKADE_RUNSC at it if it is not in PATH".into()),
                });
                checks.push(Check {
                    name: "gvisor platform".into(),
                    ok: true,
                    detail: format!(
                        "{}{}",
                        s.platform.as_str(),
                        match (s.platform_from, &s.kvm) {
                            (Some(from), _) => format!(" (asked for by {from})"),
                            (None, Ok(())) => String::new(),
                            (None, Err(why)) => format!(" (kvm not used: {why})"),
                        }
                    ),
                    fix: None,
                });
            }
            Err(Error::Unavailable { reason, fix, .. }) => checks.push(Check {
                name: "runsc".into(),
                ok: false,
                detail: reason,
                fix: Some(fix),
            }),
            Err(e) => return Err(e),
        }
        match stockade_agent_host::find_static_agent() {
            Ok(p) => checks.push(Check {
                name: "static agent".into(),
                ok: true,
                detail: format!("{} (statically linked)", p.display()),
                fix: None,
            }),
            Err(e) => checks.push(Check {
                name: "static agent".into(),
                ok: false,
                detail: e.to_string(),
                fix: Some(stockade_agent_host::BUILD_STATIC_AGENT.into()),
            }),
        }
        Ok(checks)
    }

    async fn prepare_image(
        &self,
        reference: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<()> {
        progress(&format!("checking image {reference}"));
        stockade_native::ensure_image(reference, self.image_store.as_deref()).await
    }

    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        self.start(&spec, opts).await
    }

    async fn transport(&self, id: &str) -> Result<UnixSocket> {
        check_sandbox_id(id)?;
        let sock = self.dir(id).join("agent").join("agent.sock");
        if !sock.exists() {
            return Err(self.gone(id, not_found(id)));
        }
        // Its agent is frozen with the rest and would not answer.
        if freezer::is_paused(&self.pause_dir(id)) {
            return Err(stockade_core::paused_error(id));
        }
        Ok(UnixSocket::new(id, sock))
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        if !self.dir(id).exists() {
            return Ok(());
        }
        self.remove(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let Ok(dir) = std::fs::read_dir(&self.state_root) else {
            return Ok(Vec::new());
        };
        let mut v: Vec<SandboxInfo> = dir
            .flatten()
            .filter_map(|e| self.record(&e.file_name().to_string_lossy()))
            .filter(Self::alive)
            .map(|r| self.info(r))
            .collect();
        v.sort_by_key(|i| i.created_at_ms);
        Ok(v)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        check_sandbox_id(id)?;
        let r = self.record(id).ok_or_else(|| not_found(id))?;
        if Self::alive(&r) {
            Ok(self.info(r))
        } else {
            Err(self.gone(id, not_found(id)))
        }
    }

    async fn gc(&self) -> Result<GcReport> {
        if !stockade_core::host::is_root() {
            return Ok(GcReport::default());
        }
        self.reap().await
    }

    async fn explain(&self, id: &str, error: Error) -> Error {
        self.gone(id, error)
    }

    /// `runsc pause`: gVisor's kernel stops every task of the sandbox where it is
    /// (their memory stays in RAM); the sentry itself keeps running, so a `runsc
    /// delete` (the watcher's, at the owner's death or the lifetime's end) and a
    /// destroy still end it. Chosen over freezing the sandbox's host cgroup (as
    /// native does), which also stops the sentry: a frozen sentry cannot be killed
    /// by runsc (a v1-frozen task dies only once thawed), so the watcher would leave
    /// a paused sandbox behind. The pause files are native's (`paused`, `paused-ms`,
    /// here in the agent directory: [`Self::pause_dir`]): execs and file operations
    /// are refused on them without asking the stopped agent.
    async fn pause(&self, id: &str) -> Result<()> {
        let dir = self.live_dir(id)?;
        let mark = freezer::PauseMark::begin(id, &dir, false, now_ms())?;
        if let Err(e) = self.runsc_ok(&["pause", id]).await {
            mark.undo();
            return Err(e);
        }
        Ok(())
    }

    async fn resume(&self, id: &str) -> Result<()> {
        let dir = self.live_dir(id)?;
        let mark = freezer::ResumeMark::begin(id, &dir, false)?;
        if let Err(e) = self.runsc_ok(&["resume", id]).await {
            // Marked but never paused (a crash between the two): running already.
            let state = self.runsc_ok(&["state", id]).await.unwrap_or_default();
            if !state.contains("\"running\"") {
                return Err(e);
            }
        }
        mark.finish(now_ms())
    }

    async fn fork(&self, id: &str, count: u32, opts: &CreateOptions) -> Result<Vec<SandboxInfo>> {
        let _ = (count, opts);
        self.live_dir(id)?;
        Err(stockade_core::unsupported(
            "gvisor",
            "fork",
            "copying a running gVisor sandbox into new ones would take runsc checkpoint and \
             restore, which this provider does not do; pause and resume work (runsc \
             pause)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_tree_removes_everything_and_never_follows_a_symlink() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let d = t.path().join("sb");
        for sub in ["a/b/c", "a/d", "e"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("a/b/c/f"), "1").unwrap();
        std::fs::write(d.join("top"), "2").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("a/d/link")).unwrap();
        remove_tree(&d).unwrap();
        assert!(!d.exists());
        assert!(outside.join("keep").exists(), "followed a symlink");
        // Missing: nothing to do.
        remove_tree(&d).unwrap();
    }
}
