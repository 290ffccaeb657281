//! The native provider: Linux namespaces, cgroups, capabilities, no_new_privs, landlock
//! and seccomp, with no daemon. The embedded default.
//!
//! `create` computes a [`LaunchPlan`](stockade_agent_proto::launch::LaunchPlan) (pure,
//! see [`plan`]) and hands it to `stockade-agent monitor`, a small single-threaded
//! jailer that builds the sandbox, forks the agent into it as PID 1, and supervises it
//! from outside until its lifetime ends, its owner dies, or it is destroyed. The
//! monitor stays a child of the process that created the sandbox, which reaps it.
//!
//! [`NativeLauncher`] is this provider's [`Launcher`]; [`NativeProvider`] is it plus
//! the agent host ([`AgentProvider`]), which runs execs and file operations over the
//! agent's unix socket in the sandbox's state directory (the code inside cannot see it).

mod doctor;
mod monitors;
mod state;

// The Linux host layer every Linux provider shares (crate::plan and the rest resolve
// through these).
use stockade_linux::{egress, freezer, idpool, layout, plan, rootless, usage};
use stockade_linux::{egress_denied_via, set_network_via, which};

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use stockade_agent_host::{AgentProvider, Launcher, UnixSocket, reap};
use stockade_agent_proto::EgressDenial;
use stockade_agent_proto::launch::{LaunchReport, NetworkPlan, SandboxState, TimedStep};
use stockade_agent_proto::now_ms;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, Error, GcReport, Result, RunState,
    SandboxInfo, StartStep, ValidatedSpec,
};
use stockade_sys::process::monotonic_ns;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

pub use doctor::{host_checks, tune_favordynmods, tune_pid_max};
pub use state::default_state_root;
pub use stockade_agent_host::find_agent;

/// The native provider: the native launcher with the agent host.
pub type NativeProvider = AgentProvider<NativeLauncher>;

/// As root: lets `user` (a name or a uid) run native sandboxes without root, with
/// limits (see [`rootless::setup`]). Returns what was done, one line each.
pub fn setup_rootless(user: &str) -> Result<Vec<String>> {
    if !stockade_core::host::is_root() {
        return Err(Error::Unavailable {
            what: "setup rootless".into(),
            reason: "delegating cgroups to a user needs root".into(),
            fix: "run it as root, once per user".into(),
        });
    }
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| Error::io("cannot read /etc/passwd", e))?;
    let entry = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&user) || f.get(2) == Some(&user))
            .then(|| {
                Some((
                    f.get(2)?.parse::<u32>().ok()?,
                    f.get(3)?.parse::<u32>().ok()?,
                ))
            })
            .flatten()
    });
    let (uid, gid) = entry.ok_or_else(|| {
        Error::InvalidRequest(format!(
            "no user {user:?} in /etc/passwd; create it first (useradd {user})"
        ))
    })?;
    if uid == 0 {
        return Err(Error::InvalidRequest(
            "root needs no rootless setup: it runs native sandboxes directly".into(),
        ));
    }
    rootless::setup(&layout::detect().cgroups, uid, gid)
}

/// Launches native sandboxes: a `stockade-agent monitor` per sandbox builds and
/// supervises it.
#[derive(Clone, Debug)]
pub struct NativeLauncher {
    state_root: PathBuf,
    /// The image store `--image` reads (default: `$STOCKADE_HOME/images`).
    image_store: Option<PathBuf>,
    /// The pool of host ids; `None`: `$STOCKADE_ID_RANGE` or the default, at create.
    id_pool: Option<idpool::IdPool>,
    /// Resolvers an egress policy's allowed lookups go to; empty: the host's.
    dns_upstreams: Vec<String>,
    /// Roots (PEM) trusted for the upstream servers of intercepted TLS, besides the
    /// host's bundle and `$STOCKADE_UPSTREAM_CA`.
    upstream_roots: Option<String>,
}

impl Default for NativeLauncher {
    fn default() -> Self {
        NativeLauncher::new()
    }
}

/// A workdir the sandbox makes on the host's root view (not in `/tmp` or a mount)
/// that is a file on the host cannot be made there: the caller's mistake, said
/// before anything is built.
fn host_workdir_check(spec: &stockade_spec::ValidatedSpec) -> Result<()> {
    let Some(w) = &spec.workdir else {
        return Ok(());
    };
    if w.starts_with("/tmp") || spec.mounts.iter().any(|m| w.starts_with(&m.target)) {
        return Ok(());
    }
    let mut p = std::path::PathBuf::from("/");
    for c in w.components().skip(1) {
        p.push(c);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            return Err(Error::InvalidSpec(stockade_spec::SpecErrors(vec![
                stockade_spec::SpecError {
                    field: "workdir".into(),
                    message: format!(
                        "workdir {}: {} is a file, not a directory",
                        w.display(),
                        p.display()
                    ),
                },
            ])));
        }
    }
    Ok(())
}

/// The monitor's input (the plan, then the credentials) and its log file, with the
/// plan kept in `dir` for gc (a monitor that crashed before state.json still names
/// its cgroups).
fn prepare_launch<T: serde::Serialize>(
    dir: &std::path::Path,
    plan: &stockade_agent_proto::launch::LaunchPlan,
    secrets: Option<&T>,
) -> Result<(Vec<u8>, std::fs::File)> {
    let json = serde_json::to_vec(plan)
        .map_err(|e| Error::Internal(format!("cannot encode launch plan: {e}")))?;
    let mut input = format!("{}\n", json.len()).into_bytes();
    input.extend_from_slice(&json);
    if let Some(s) = secrets {
        input.extend(
            serde_json::to_vec(s)
                .map_err(|e| Error::Internal(format!("cannot encode credentials: {e}")))?,
        );
    }
    std::fs::write(dir.join("plan.json"), &json)
        .map_err(|e| Error::io(format!("cannot write {}/plan.json", dir.display()), e))?;
    let log = std::fs::File::create(dir.join("monitor.log"))
        .map_err(|e| Error::io("cannot create monitor log", e))?;
    Ok((input, log))
}

/// `steps` (absolute, on the host's monotonic clock) as the API says them: from the
/// start of the first, in the order they began.
fn start_steps(steps: &[TimedStep]) -> Vec<StartStep> {
    let Some(first) = steps.iter().map(|s| s.start_ns).min() else {
        return Vec::new();
    };
    let mut out: Vec<StartStep> = steps
        .iter()
        .map(|s| StartStep {
            name: s.name.clone(),
            start_us: (s.start_ns - first) / 1000,
            took_us: s.end_ns.saturating_sub(s.start_ns) / 1000,
        })
        .collect();
    out.sort_by_key(|s| s.start_us);
    out
}

fn new_id() -> String {
    stockade_core::host::new_sandbox_id()
}

impl NativeLauncher {
    /// A launcher keeping state under [`default_state_root`].
    pub fn new() -> NativeLauncher {
        NativeLauncher {
            state_root: default_state_root(),
            image_store: None,
            id_pool: None,
            dns_upstreams: Vec::new(),
            upstream_roots: None,
        }
    }

    /// A launcher keeping state under `root` (tests use their own).
    pub fn with_state_root(root: impl Into<PathBuf>) -> NativeLauncher {
        NativeLauncher {
            state_root: root.into(),
            image_store: None,
            id_pool: None,
            dns_upstreams: Vec::new(),
            upstream_roots: None,
        }
    }

    /// Reads images from the store at `root` instead of `$STOCKADE_HOME/images`.
    pub fn with_image_store(mut self, root: impl Into<PathBuf>) -> NativeLauncher {
        self.image_store = Some(root.into());
        self
    }

    /// Forwards the allowed lookups of sandboxes with an egress policy to these
    /// resolvers instead of the host's (`/etc/resolv.conf`).
    pub fn with_dns_upstreams(mut self, upstreams: &[std::net::SocketAddr]) -> NativeLauncher {
        self.dns_upstreams = upstreams.iter().map(ToString::to_string).collect();
        self
    }

    /// Trusts these roots (PEM certificates) too for the servers that sandboxes with
    /// credentials reach through the egress proxy (an internal CA; tests).
    pub fn with_upstream_roots(mut self, pem: impl Into<String>) -> NativeLauncher {
        self.upstream_roots = Some(pem.into());
        self
    }

    /// Sandboxes' host ids come from `pool` (checked against the host's accounts at
    /// each create).
    pub fn with_id_pool(mut self, pool: idpool::IdPool) -> NativeLauncher {
        self.id_pool = Some(pool);
        self
    }

    /// The user namespace part of a plan: as root, a range leased from the pool;
    /// rootless, none here (the caller's ids, see [`rootless`]).
    fn userns(&self) -> Result<Option<stockade_agent_proto::launch::UsernsPlan>> {
        if !stockade_core::host::is_root() {
            return Ok(None);
        }
        let pool = match self.id_pool {
            Some(p) => p,
            None => idpool::IdPool::from_env()?,
        };
        pool.check_host()?;
        Ok(Some(pool.plan()))
    }

    pub fn state_root(&self) -> &Path {
        &self.state_root
    }

    fn dir(&self, id: &str) -> Result<PathBuf> {
        stockade_core::host::check_sandbox_id(id)?;
        Ok(self.state_root.join(id))
    }

    /// What `inspect` says of a live sandbox whose state directory is `dir`: paused
    /// or not, and its deadline moved by the time it spent paused.
    fn info(dir: &Path, st: &SandboxState) -> SandboxInfo {
        let paused = stockade_agent_proto::launch::PausedTime::read(dir, now_ms());
        SandboxInfo {
            id: st.id.clone(),
            provider: "native".into(),
            created_at_ms: st.created_at_ms,
            expires_at_ms: paused.deadline(st.expires_at_ms),
            owner_pid: st.owner_pid,
            spec: st.spec.clone(),
            applied: st.applied.clone(),
            state: if paused.since_ms.is_some() {
                RunState::Paused
            } else {
                RunState::Running
            },
            steps: start_steps(&st.steps),
        }
    }

    /// The state of live sandbox `id`, or `NotFound`.
    fn live(&self, id: &str) -> Result<(PathBuf, SandboxState)> {
        let dir = self.dir(id)?;
        match state::read_live(&dir) {
            Some(st) => Ok((dir, st)),
            None => Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            }),
        }
    }

    async fn start(&self, spec: &ValidatedSpec, opts: &CreateOptions) -> Result<SandboxState> {
        let t0 = monotonic_ns();
        let userns = self.userns()?;
        let rootless = (!stockade_core::host::is_root()).then(rootless::RootlessHost::detect);
        let agent = find_agent()?;
        let id = new_id();
        let dir = self.state_root.join(&id);
        state::make_dirs(&self.state_root, &dir)?;
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
            .collect::<Result<Vec<bool>>>();
        let image = match spec.image.clone() {
            // Flattening an image the first time takes seconds: off the async threads.
            Some(r) => {
                let store = self.image_store.clone();
                if let Err(e) = stockade_linux::ensure_image(&r, store.as_deref()).await {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
                tokio::task::spawn_blocking(move || {
                    stockade_linux::image_root(&r, store.as_deref())
                })
                .await
                .map_err(|e| Error::Internal(format!("image task failed: {e}")))
                .and_then(|r| r.map(Some))
            }
            None => Ok(None),
        };
        // Our hold on the image lasts until the monitor holds it (or creation failed).
        let (image, _image_guard) = match image {
            Ok(Some((root, guard))) => (Ok(Some(root)), Some(guard)),
            Ok(None) => (Ok(None), None),
            Err(e) => (Err(e), None),
        };
        let ctx = mount_is_file.and_then(|m| image.map(|i| (m, i)));
        let ctx = ctx.map(|(mount_is_file, image)| plan::PlanContext {
            id: id.clone(),
            state_dir: dir.clone(),
            host: layout::detect(),
            slirp: which("slirp4netns"),
            nft: which("nft"),
            now_ms: now_ms(),
            owner_pid: opts.owner_pid,
            mount_is_file,
            image,
            userns,
            rootless: rootless.clone(),
            dns_upstreams: self.dns_upstreams.clone(),
            egress_secrets: None,
        });
        let ctx = ctx.and_then(|mut ctx| {
            if let Some(p) = spec.network.policy()
                && !p.credentials.is_empty()
            {
                ctx.egress_secrets = Some(egress::secrets(p, self.upstream_roots.as_deref())?);
            }
            Ok(ctx)
        });
        let ctx = ctx.and_then(|ctx| {
            if ctx.image.is_none() {
                host_workdir_check(spec)?;
            }
            Ok(ctx)
        });
        let planned = ctx.and_then(|ctx| plan::plan(spec, &ctx));
        let planned = planned.and_then(|p| match &rootless {
            Some(r) => {
                let parents: Vec<PathBuf> =
                    p.cgroups.parents.iter().map(|c| c.path.clone()).collect();
                let l = &spec.limits;
                let limits = [
                    format!("memory {}", stockade_spec::format_size(l.memory_bytes)),
                    format!("cpus {}", l.cpus),
                    format!("pids {}", l.pids),
                ];
                rootless::check_delegated(&parents, &limits, r.uid).map(|()| p)
            }
            None => Ok(p),
        });
        let plan = match planned {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let mut plan = plan;
        // `STOCKADE_NO_ZYGOTE=1`: every exec's shim spawned from the agent's binary, as
        // before the exec zygote (to measure it, or to set it aside on a kernel where
        // it misbehaves); no guarantee differs between the two paths.
        if std::env::var_os("STOCKADE_NO_ZYGOTE").is_some_and(|v| v == "1") {
            plan.exec.no_zygote = true;
        }
        // The credentials and the authority's key go to the monitor after the plan, as
        // their own document: never in plan.json, never in PID 1's memory.
        let secrets = match &mut plan.network {
            NetworkPlan::UserModeNat {
                policy: Some(policy),
                ..
            } => policy.tls.take(),
            _ => None,
        };
        // Until the monitor owns the directory, a failure here (a full state root, say)
        // removes it: no empty `sb-*` is left for `rm` to call unknown.
        let (input, log) = match prepare_launch(&dir, &plan, secrets.as_ref()) {
            Ok(x) => x,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // A session of its own and nothing of our caller's open: the monitor's first
        // act (`stockade_sys::process::detach_and_close_inherited`), so its spawn is a
        // `posix_spawn` (vfork), not a `fork` that copies a large embedding process's
        // page tables; where this process made a sandbox before, a monitor server
        // forks it instead (monitors.rs).
        let t1 = monotonic_ns();
        let started = monitors::start(&agent, log).await.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        let t2 = monotonic_ns();
        let (mut stdin, stdout) = (started.stdin, started.stdout);
        stdin
            .write_all(&input)
            .await
            .map_err(|e| Error::io("cannot send the launch plan", e))?;
        drop(stdin);
        let mut line = String::new();
        let read = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await;
        match read {
            Err(_) => {
                state::reap_dir(&dir);
                return Err(Error::Timeout {
                    operation: format!("starting sandbox {id}"),
                    after_ms: 30_000,
                });
            }
            Ok(Err(e)) => return Err(Error::io("cannot read the monitor's report", e)),
            Ok(Ok(_)) => {}
        }
        match serde_json::from_str::<LaunchReport>(line.trim()) {
            Ok(LaunchReport::Ready(mut st)) => {
                let step = |name: &str, start_ns, end_ns| TimedStep {
                    name: name.to_string(),
                    start_ns,
                    end_ns,
                };
                let t3 = monotonic_ns();
                // From our start of the monitor to its first step: its `exec` and its
                // own start (or, from the monitor server, its fork). A monitor forked
                // by the monitor server can begin before our spawn call has returned:
                // then the row is an instant just before its first step.
                let monitor_from = st
                    .steps
                    .iter()
                    .filter(|s| s.name.starts_with("monitor: "))
                    .map(|s| s.start_ns)
                    .min();
                // In any order: `start_steps` orders them by when they began.
                st.steps.push(step("host: plan the sandbox", t0, t1));
                st.steps.push(step("host: start the monitor", t1, t2));
                if let Some(m) = monitor_from {
                    let from = t2.min(m.saturating_sub(1));
                    st.steps
                        .push(step("monitor: its process starting", from, m));
                }
                st.steps.push(step("host: the monitor's report", t2, t3));
                Ok(st)
            }
            Ok(LaunchReport::Failed { code, message }) => {
                state::reap_dir(&dir);
                Err(Error::remote(code, message))
            }
            Err(_) => {
                let log = std::fs::read_to_string(dir.join("monitor.log")).unwrap_or_default();
                state::reap_dir(&dir);
                Err(Error::Internal(format!(
                    "the sandbox monitor failed without a report: {}",
                    log.trim()
                )))
            }
        }
    }
}

/// The native provider's optional verbs: pause by the cgroup freezer, a live egress
/// policy, usage from its cgroups, files as any uid of the sandbox; no fork or
/// snapshots (the host's kernel cannot copy a process tree into a new sandbox).
pub const VERBS: stockade_core::Verbs = stockade_core::Verbs {
    pause: true,
    fork: false,
    snapshots: false,
    egress_control: true,
    usage: true,
    files_as_user: true,
    terminals: true,
};

#[async_trait]
impl Launcher for NativeLauncher {
    type Transport = UnixSocket;

    fn name(&self) -> &'static str {
        "native"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            local_images: true,
            verbs: VERBS,
            ..Capabilities::FULL_LINUX
        }
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        Ok(host_checks())
    }

    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        let st = self.start(&spec, opts).await?;
        Ok(Self::info(&self.state_root.join(&st.id), &st))
    }

    async fn transport(&self, id: &str) -> Result<UnixSocket> {
        let dir = self.dir(id)?;
        if !dir.join("state.json").exists() {
            return Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            });
        }
        // Its agent is frozen with the rest and would not answer.
        if freezer::is_paused(&dir) {
            return Err(stockade_core::paused_error(id));
        }
        Ok(UnixSocket::new(id, dir.join("agent.sock")))
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        let dir = self.dir(id)?;
        let monitor = tokio::task::spawn_blocking(move || {
            let monitor = state::monitor(&dir);
            state::destroy_dir(&dir).map(|()| monitor)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        // The monitor has ended (a zombie counts: `destroy_dir` waits for that much).
        // When this process started it, it is reaped before we return; `reaped` returns
        // at once for any other pid. Bounded, in case it was not ours after all.
        if let Some((pid, _)) = monitor {
            let _ = tokio::time::timeout(Duration::from_secs(5), reap::reaped(pid)).await;
        }
        Ok(())
    }

    /// A live sandbox's directory has a state file and a monitor holding its lock:
    /// two look-ups and a lock probe each, where `list` also reads and decodes the
    /// state (at 3,000 sandboxes, about 100 ms every 5 s of a daemon's CPU).
    async fn live_ids(&self) -> Result<Vec<String>> {
        let root = self.state_root.clone();
        tokio::task::spawn_blocking(move || state::live_ids(&root))
            .await
            .map_err(|e| Error::Internal(format!("the listing task failed: {e}")))
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        // A few files per sandbox: with thousands (a daemon's idle ones) that is
        // hundreds of milliseconds, which must not hold up the caller's runtime thread
        // (every other request it serves would wait).
        let root = self.state_root.clone();
        tokio::task::spawn_blocking(move || {
            state::live(&root)
                .iter()
                .map(|st| Self::info(&root.join(&st.id), st))
                .collect()
        })
        .await
        .map_err(|e| Error::Internal(format!("the listing task failed: {e}")))
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        let (dir, st) = self.live(id)?;
        Ok(Self::info(&dir, &st))
    }

    async fn gc(&self) -> Result<GcReport> {
        let root = self.state_root.clone();
        tokio::task::spawn_blocking(move || state::gc(&root))
            .await
            .map_err(|e| Error::Internal(e.to_string()))
    }

    fn pausing(&self) -> Option<&dyn stockade_core::Pausing> {
        Some(self)
    }

    fn egress_control(&self) -> Option<&dyn stockade_core::EgressControl> {
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
                "a native sandbox's processes live in the host's kernel, which cannot copy a \
                 running process tree (its memory, namespaces and open files) into new sandboxes; \
                 pause and resume work (the cgroup freezer)"
            }
            v => stockade_core::default_reason(v),
        }
    }
}

#[async_trait]
impl stockade_core::Pausing for NativeLauncher {
    /// Freezes the sandbox's cgroup (see [`freezer`]): memory stays in RAM.
    async fn pause(&self, id: &str) -> Result<()> {
        let (dir, st) = self.live(id)?;
        let id = id.to_string();
        tokio::task::spawn_blocking(move || freezer::pause(&id, &dir, &st.cgroups, now_ms()))
            .await
            .map_err(|e| Error::Internal(format!("pause task failed: {e}")))?
    }

    async fn resume(&self, id: &str) -> Result<()> {
        let (dir, st) = self.live(id)?;
        let id = id.to_string();
        tokio::task::spawn_blocking(move || freezer::resume(&id, &dir, &st.cgroups, now_ms()))
            .await
            .map_err(|e| Error::Internal(format!("resume task failed: {e}")))?
    }
}

#[async_trait]
impl stockade_core::UsageCounters for NativeLauncher {
    async fn usage(&self, id: &str) -> Result<stockade_core::Usage> {
        let (_, st) = self.live(id)?;
        usage::read(id, &st.cgroups)
    }
}

#[async_trait]
impl stockade_core::EgressControl for NativeLauncher {
    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        let dir = self.dir(id)?;
        if state::read_live(&dir).is_none() {
            return Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            });
        }
        egress_denied_via(&dir.join("net.sock"), since_ms).await
    }

    async fn set_network(&self, id: &str, network: &stockade_spec::Network) -> Result<()> {
        let dir = self.dir(id)?;
        let st = state::read_live(&dir).ok_or_else(|| Error::NotFound {
            kind: "sandbox",
            id: id.to_string(),
        })?;
        set_network_via(
            &dir.join("net.sock"),
            id,
            network,
            st.spec.get("network").cloned().unwrap_or_default(),
            &self.dns_upstreams,
        )
        .await
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;

    #[test]
    fn start_steps_count_from_the_first_and_are_in_order() {
        let s = |name: &str, start_ns, end_ns| TimedStep {
            name: name.into(),
            start_ns,
            end_ns,
        };
        let steps = start_steps(&[
            s("host: plan", 1_000_000, 1_300_000),
            s("monitor: clone", 2_000_000, 2_500_000),
            s("PID 1: root", 2_200_000, 4_000_000),
            s("monitor: move", 2_500_000, 3_000_000),
        ]);
        let got: Vec<(&str, u64, u64)> = steps
            .iter()
            .map(|s| (s.name.as_str(), s.start_us, s.took_us))
            .collect();
        assert_eq!(
            got,
            [
                ("host: plan", 0, 300),
                ("monitor: clone", 1000, 500),
                ("PID 1: root", 1200, 1800),
                ("monitor: move", 1500, 500),
            ]
        );
        assert!(start_steps(&[]).is_empty());
    }
}
