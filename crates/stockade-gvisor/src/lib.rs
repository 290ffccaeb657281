//! The gVisor provider: each sandbox is a gVisor sandbox started with `runsc` (no
//! dockerd), so the code's system calls are served by gVisor's user-space kernel and
//! a kernel bug on the host is no longer one step away. No KVM needed: the ptrace (or
//! systrap) platform runs anywhere; kvm is used only where a real probe boots.
//!
//! `create` plans the root exactly as the native provider does
//! (`stockade_linux::plan`: the host's read-only view or an image's flattened
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
mod host;
pub mod runsc;
mod start;

use host::*;

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
use stockade_linux::freezer;
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
        let cgroups = cgroup::dirs(stockade_linux::plan::CGROUP_PARENT, id);
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

/// The gVisor provider's optional verbs: `runsc pause`, files as any uid of the
/// sandbox, usage from its host cgroups; no network to control, no fork or snapshots
/// (runsc checkpoint and restore are not used).
pub const VERBS: stockade_core::Verbs = stockade_core::Verbs {
    pause: true,
    fork: false,
    snapshots: false,
    egress_control: false,
    usage: true,
    files_as_user: true,
    terminals: true,
};

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
            verbs: VERBS,
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
        stockade_linux::ensure_image(reference, self.image_store.as_deref()).await
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

    fn pausing(&self) -> Option<&dyn stockade_core::Pausing> {
        Some(self)
    }

    fn usage_counters(&self) -> Option<&dyn stockade_core::UsageCounters> {
        Some(self)
    }

    fn files_as_user(&self) -> bool {
        true
    }

    fn terminals(&self) -> bool {
        true
    }

    fn why_not(&self, verb: stockade_core::Verb) -> &'static str {
        match verb {
            stockade_core::Verb::Fork => {
                "copying a running gVisor sandbox into new ones would take runsc checkpoint and \
                 restore, which this provider does not do; pause and resume work (runsc \
                 pause)"
            }
            v => stockade_core::default_reason(v),
        }
    }
}

#[async_trait]
impl stockade_core::Pausing for GvisorLauncher {
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
}

#[async_trait]
impl stockade_core::UsageCounters for GvisorLauncher {
    /// `runsc pause`: gVisor's kernel stops every task of the sandbox where it is
    /// (their memory stays in RAM); the sentry itself keeps running, so a `runsc
    /// delete` (the watcher's, at the owner's death or the lifetime's end) and a
    /// destroy still end it. Chosen over freezing the sandbox's host cgroup (as
    /// native does), which also stops the sentry: a frozen sentry cannot be killed
    /// by runsc (a v1-frozen task dies only once thawed), so the watcher would leave
    /// a paused sandbox behind. The pause files are native's (`paused`, `paused-ms`,
    /// here in the agent directory: [`Self::pause_dir`]): execs and file operations
    /// are refused on them without asking the stopped agent.
    /// From the sandbox's host cgroups, which hold the whole of it (the sentry serving
    /// its kernel, the gofer): CPU time and memory as the host charges them.
    async fn usage(&self, id: &str) -> Result<stockade_core::Usage> {
        self.live_dir(id)?;
        stockade_linux::usage::read(id, &cgroup::dirs(stockade_linux::plan::CGROUP_PARENT, id))
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
