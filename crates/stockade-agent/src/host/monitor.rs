//! `stockade-agent monitor`: the host-side jailer and supervisor of one native sandbox.
//!
//! Reads a [`LaunchPlan`] (JSON) on stdin, creates the cgroups, forks the agent into
//! new namespaces (it becomes PID 1 there, builds the root and pivots into it), starts
//! the network helper, writes `state.json`, answers one [`LaunchReport`] line on stdout,
//! and then stays outside the namespaces until the sandbox must end: its lifetime
//! passes, its owner process dies, it receives SIGTERM (destroy), or the agent dies.
//! Then it kills everything and removes every trace (cgroups, helper, state dir).

use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use stockade_agent_proto::ErrorCode;
use stockade_agent_proto::launch::{
    LaunchPlan, LaunchReport, NetworkPlan, SandboxState, TimedStep, TlsIntercept, UsernsPlan,
};
use stockade_sys::process::{Forked, fork_into, monotonic_ns};

use crate::ids::{self, Ids};
use crate::{cgroup, egress, rootfs, server};
use stockade_agent_proto::now_ms;

fn report(out: &mut impl Write, r: &LaunchReport) {
    let mut line = serde_json::to_string(r).unwrap_or_else(|e| {
        format!("{{\"failed\":{{\"code\":\"internal\",\"message\":\"{e}\"}}}}")
    });
    line.push('\n');
    // The caller may have gone away; the sandbox then lives on until gc or its lifetime.
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

fn fail(code: ErrorCode, message: String) -> LaunchReport {
    LaunchReport::Failed { code, message }
}

/// Reads `LENGTH\n` and that many bytes from fd 0, unbuffered: what follows stays
/// in the pipe.
pub(crate) fn read_plan_bytes() -> Result<Vec<u8>, String> {
    let mut len = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(0, &mut b) {
            Ok(1) if b[0] == b'\n' => break,
            Ok(1) if b[0].is_ascii_digit() && len.len() < 12 => len.push(b[0]),
            Ok(0) => return Err("stdin ended before the plan's length".into()),
            Ok(_) => return Err("stdin does not start with the plan's length".into()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let n: usize = String::from_utf8_lossy(&len)
        .parse()
        .map_err(|_| "bad plan length".to_string())?;
    let mut plan = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match nix::unistd::read(0, &mut plan[got..]) {
            Ok(0) => return Err(format!("stdin ended after {got} of {n} bytes of the plan")),
            Ok(k) => got += k,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(plan)
}

/// The rest of stdin: an egress policy's credentials and authority, or nothing.
pub(crate) fn read_secrets() -> Result<Option<TlsIntercept>, String> {
    let mut rest = Vec::new();
    std::io::stdin()
        .read_to_end(&mut rest)
        .map_err(|e| format!("cannot read the credentials: {e}"))?;
    if rest.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&rest)
        .map(Some)
        .map_err(|e| format!("invalid credentials: {e}"))
}

/// Entry point of `stockade-agent monitor`.
pub fn main() -> i32 {
    // Before anything: a session of our own, and nothing of our launcher's caller
    // kept open (the launcher leaves this to us: see `detach_and_close_inherited`).
    stockade_sys::process::detach_and_close_inherited();
    let mut steps = Steps::default();
    let t = monotonic_ns();
    let mut stdout = std::io::stdout();
    // Stdin is `LENGTH\n`, the plan, then the credentials of an egress policy (if
    // any), which are read only after the fork: PID 1's memory never holds them.
    let input = match read_plan_bytes() {
        Ok(b) => b,
        Err(e) => {
            report(
                &mut stdout,
                &fail(ErrorCode::Internal, format!("cannot read launch plan: {e}")),
            );
            return 2;
        }
    };
    let plan: LaunchPlan = match serde_json::from_slice(&input) {
        Ok(p) => p,
        Err(e) => {
            report(
                &mut stdout,
                &fail(ErrorCode::InvalidSpec, format!("invalid launch plan: {e}")),
            );
            return 2;
        }
    };
    let t = steps.done("monitor: read the launch plan", t);
    // We stay a child of the process that created the sandbox (started in a session of
    // our own), which reaps us; we outlive it if it exits first.
    let launched = launch(&plan, &mut steps, t);
    let (child, helper, ids, resolver) = match launched {
        Ok(v) => v,
        Err((code, message)) => {
            let _ = fs::remove_dir_all(&plan.state_dir);
            report(&mut stdout, &fail(code, message));
            return 1;
        }
    };
    let t = monotonic_ns();
    // Hold the state dir's lock for the rest of our life: gc treats an unlocked dir
    // with state as dead. Taken after the fork so PID 1 does not share it (gc ignores
    // young dirs without state meanwhile).
    let lock = match lock_state_dir(&plan.state_dir) {
        Ok(l) => l,
        Err(e) => {
            teardown(&plan, child, helper.as_ref());
            report(&mut stdout, &fail(ErrorCode::Internal, e));
            return 1;
        }
    };
    // Shared locks on what the sandbox runs from (its image), for its whole life.
    let mut held = Vec::new();
    for path in &plan.hold_locks {
        match fs::File::open(path).and_then(|f| f.lock_shared().map(|()| f)) {
            Ok(f) => held.push(f),
            Err(e) => {
                teardown(&plan, child, helper.as_ref());
                let e = format!("cannot lock {}: {e}", path.display());
                report(&mut stdout, &fail(ErrorCode::Internal, e));
                return 1;
            }
        }
    }
    let mut applied = plan.applied.clone();
    if let Some(ids) = &ids {
        applied.push(ids.describe(plan.exec.uid, plan.exec.gid));
    }
    steps.done("monitor: lock the state and the image", t);
    let mut state = SandboxState {
        id: plan.id.clone(),
        monitor_pid: std::process::id(),
        monitor_start_ticks: stockade_sys::process::start_ticks(std::process::id()).unwrap_or(0),
        init_pid: child.as_raw() as u32,
        created_at_ms: now_ms(),
        expires_at_ms: plan.expires_at_ms,
        owner_pid: plan.owner_pid,
        cgroups: plan.cgroups.dirs.iter().map(|d| d.path.clone()).collect(),
        applied,
        spec: plan.spec.clone(),
        host_ids: ids.as_ref().map(|i| i.range),
        // What state.json keeps; the report has the steps after it too.
        steps: steps.0.clone(),
    };
    let t = monotonic_ns();
    if let Err(e) = write_state(&plan.state_dir, &state) {
        teardown(&plan, child, helper.as_ref());
        report(&mut stdout, &fail(ErrorCode::Internal, e));
        return 1;
    }
    // Threads from here on: they inherit the mask, so SIGTERM still reaches only
    // `supervise`'s signalfd.
    let _ = supervised_signals().thread_block();
    if let (
        Some(sockets),
        NetworkPlan::UserModeNat {
            nft,
            policy: Some(policy),
            ..
        },
    ) = (resolver, &plan.network)
        && let Err(e) = read_secrets().and_then(|tls| {
            let mut policy = policy.clone();
            policy.tls = tls.map(Box::new);
            egress::start(sockets, policy, nft.clone(), plan.state_dir.clone())
        })
    {
        teardown(&plan, child, helper.as_ref());
        report(&mut stdout, &fail(ErrorCode::Internal, e));
        return 1;
    }
    steps.done("monitor: write the state, start the egress proxy", t);
    state.steps = steps.0;
    report(&mut stdout, &LaunchReport::Ready(state));
    // The children that made the namespaces exited long ago: reaped now, after the
    // answer, not on the way to it.
    let mut ids = ids;
    if let Some(ids) = ids.as_mut() {
        ids.reap_makers();
    }
    stockade_sys::process::stdio_to_null(&[0, 1]);
    supervise(&plan, child);
    teardown(&plan, child, helper.as_ref());
    drop(held);
    drop(ids);
    drop(lock);
    0
}

fn lock_state_dir(dir: &Path) -> Result<nix::fcntl::Flock<fs::File>, String> {
    let path = dir.join("lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| format!("cannot lock {}: {e}", path.display()))
}

fn write_state(dir: &Path, state: &SandboxState) -> Result<(), String> {
    let tmp = dir.join("state.json.tmp");
    let json = serde_json::to_vec_pretty(state).map_err(|e| format!("cannot encode state: {e}"))?;
    fs::write(&tmp, json).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, dir.join("state.json"))
        .map_err(|e| format!("cannot write {}/state.json: {e}", dir.display()))
}

type Launched = (Pid, Option<Helper>, Option<Ids>, Option<egress::Sockets>);

/// The steps of a sandbox's start, timed as they happen (`stockade run --timings`).
#[derive(Default)]
struct Steps(Vec<TimedStep>);

impl Steps {
    /// Records `name` as running from `start` (ns, [`monotonic_ns`]) until now, and
    /// returns now: the start of the next step.
    fn done(&mut self, name: &str, start: u64) -> u64 {
        let now = monotonic_ns();
        self.0.push(TimedStep {
            name: name.to_string(),
            start_ns: start,
            end_ns: now,
        });
        now
    }
}

/// Everything up to a listening agent. On error nothing is left but the state dir.
fn launch(plan: &LaunchPlan, steps: &mut Steps, t: u64) -> Result<Launched, (ErrorCode, String)> {
    let internal = |m: String| (ErrorCode::Internal, m);
    let mut t = t;
    // The user namespace and the mount mappings first: made by forks, which need this
    // process single-threaded, and inherited by PID 1.
    let ids = match &plan.userns {
        Some(UsernsPlan::Pool(u)) => Some(ids::prepare(plan, u).map_err(|m| {
            (
                ErrorCode::Unavailable,
                format!("{m} (see `stockade doctor`)"),
            )
        })?),
        _ => None,
    };
    if ids.is_some() {
        t = steps.done("monitor: user namespace and id-mapped mounts", t);
    }
    let rootless = match &plan.userns {
        Some(UsernsPlan::Rootless(m)) => Some(m),
        _ => None,
    };
    cgroup::create(&plan.cgroups).map_err(|m| {
        (
            ErrorCode::Unavailable,
            format!("{m} (is this root on a host with cgroups? see `stockade doctor`)"),
        )
    })?;
    t = steps.done("monitor: create the cgroups", t);
    let (sync_r, sync_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| internal(format!("pipe: {e}")))?;
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| internal(format!("pipe: {e}")))?;
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    if rootless.is_some() {
        // Rootless, the user namespace comes first and owns the others.
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    let child = match fork_into(flags) {
        Err(e) => {
            cgroup::remove(&plan.cgroups.dirs);
            return Err((
                ErrorCode::Unavailable,
                format!("cannot create namespaces: {e} (see `stockade doctor`)"),
            ));
        }
        Ok(Forked::Child) => {
            drop(sync_w);
            drop(ready_r);
            init(plan, sync_r, ready_w, ids.as_ref(), rootless.is_some())
        }
        Ok(Forked::Parent(pid)) => pid,
    };
    t = steps.done("monitor: clone PID 1 into new namespaces", t);
    drop(sync_r);
    drop(ready_w);
    let abort = |msg: (ErrorCode, String), helper: Option<&Helper>| {
        teardown(plan, child, helper);
        msg
    };
    let mut w = fs::File::from(sync_w);
    if let Some(m) = rootless {
        // PID 1 waits for its maps before anything else.
        if let Err(e) = ids::write_rootless_maps(child, m) {
            return Err(abort((ErrorCode::Unavailable, e), None));
        }
        if w.write_all(b"m").is_err() {
            return Err(abort(
                internal("the sandbox init died before setup".into()),
                None,
            ));
        }
    }
    if let Err(m) = cgroup::join(&plan.cgroups, child.as_raw() as u32) {
        return Err(abort(internal(m), None));
    }
    t = steps.done("monitor: move PID 1 into the cgroups", t);
    let mut resolver = None;
    let helper = match &plan.network {
        NetworkPlan::LoopbackOnly => None,
        NetworkPlan::UserModeNat {
            argv,
            nft,
            firewall,
            policy,
            ..
        } => {
            // The firewall goes in before there is any route out.
            if let Err(m) =
                apply_firewall(&plan.state_dir, nft, firewall, child, rootless.is_some())
            {
                return Err(abort(
                    (
                        ErrorCode::Unavailable,
                        format!("{m} (see `stockade doctor`)"),
                    ),
                    None,
                ));
            }
            if policy.is_some() {
                match egress::prepare(&plan.state_dir, child, rootless.is_some()) {
                    Ok(s) => resolver = Some(s),
                    Err(m) => return Err(abort((ErrorCode::Unavailable, m), None)),
                }
            }
            match start_helper(&plan.state_dir, argv, child, rootless.is_some()) {
                Ok(h) => Some(h),
                Err(m) => {
                    return Err(abort(
                        (
                            ErrorCode::Unavailable,
                            format!("{m} (see `stockade doctor`)"),
                        ),
                        None,
                    ));
                }
            }
        }
    };
    if helper.is_some() {
        t = steps.done("monitor: firewall and network helper", t);
    }
    let went = w.write_all(b"g").is_ok();
    // PID 1's answer: "ok", or why it failed (also when it failed before our go).
    let mut answer = String::new();
    let _ = fs::File::from(ready_r).read_to_string(&mut answer);
    if !went && answer.is_empty() {
        return Err(abort(
            internal("the sandbox init died before setup".into()),
            helper.as_ref(),
        ));
    }
    // Held open until here: PID 1 sees it close if we die while it finishes setup.
    drop(w);
    steps.done("monitor: wait for PID 1 to finish its setup", t);
    // `ok`, then PID 1's own steps, one per line.
    let answer = match answer.strip_prefix("ok") {
        Some(rest) if rest.is_empty() || rest.starts_with('\n') => {
            steps.0.extend(TimedStep::parse_lines(rest));
            "ok".to_string()
        }
        _ => answer,
    };
    if answer != "ok" {
        let msg = if answer.is_empty() {
            "the sandbox init died during setup".to_string()
        } else {
            answer
        };
        return Err(abort(internal(msg), helper.as_ref()));
    }
    Ok((child, helper, ids, resolver))
}

/// Loads the nftables ruleset inside the sandbox's network namespace: this thread
/// enters it, runs `nft -f`, and comes back. The code inside has no CAP_NET_ADMIN, so
/// it cannot change the rules.
pub(crate) fn apply_firewall(
    state_dir: &Path,
    nft: &str,
    ruleset: &str,
    child: Pid,
    rootless: bool,
) -> Result<(), String> {
    let file = state_dir.join("firewall.nft");
    fs::write(&file, ruleset).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    if rootless {
        // Not root here: nft runs in the sandbox's user namespace (which owns its
        // network namespace) with CAP_NET_ADMIN there, and nowhere else.
        let ns = |kind: &str| {
            fs::File::open(format!("/proc/{}/ns/{kind}", child.as_raw()))
                .map(OwnedFd::from)
                .map_err(|e| format!("cannot open the sandbox's {kind} namespace: {e}"))
        };
        let mut cmd = std::process::Command::new(nft);
        cmd.arg("-f").arg(&file).stdin(std::process::Stdio::null());
        stockade_sys::process::enter_with_net_admin(&mut cmd, ns("user")?, ns("net")?);
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {nft}: {e} (install it: apt-get install nftables)"))?;
        if !out.status.success() {
            return Err(format!(
                "{nft} refused the sandbox firewall: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        return Ok(());
    }
    let ours = fs::File::open("/proc/self/ns/net")
        .map_err(|e| format!("cannot open our network namespace: {e}"))?;
    let theirs = fs::File::open(format!("/proc/{}/ns/net", child.as_raw()))
        .map_err(|e| format!("cannot open the sandbox's network namespace: {e}"))?;
    nix::sched::setns(&theirs, CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("cannot enter the sandbox's network namespace: {e}"))?;
    let out = std::process::Command::new(nft)
        .arg("-f")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .output();
    nix::sched::setns(&ours, CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("cannot return to the host network namespace: {e}"))?;
    let out =
        out.map_err(|e| format!("cannot run {nft}: {e} (install it: apt-get install nftables)"))?;
    if !out.status.success() {
        return Err(format!(
            "{nft} refused the sandbox firewall: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The user-mode NAT helper (slirp4netns). It exits by itself when `exit_w` closes,
/// which happens when we exit, however we exit.
pub(crate) struct Helper {
    pid: Pid,
    _exit_w: OwnedFd,
}

/// Fds the helper sees its ready and exit pipes as (above any fd we hold).
const READY_FD: i32 = 10;
const EXIT_FD: i32 = 11;

pub(crate) fn start_helper(
    state_dir: &Path,
    argv: &[String],
    child: Pid,
    rootless: bool,
) -> Result<Helper, String> {
    let (ready_r, ready_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (exit_r, exit_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let log_path = state_dir.join("net-helper.log");
    let log = fs::File::create(&log_path).map_err(|e| format!("cannot create helper log: {e}"))?;
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .arg(format!("--ready-fd={READY_FD}"))
        .arg(format!("--exit-fd={EXIT_FD}"))
        .args(rootless.then(|| format!("--userns-path=/proc/{}/ns/user", child.as_raw())))
        .arg(format!("/proc/{}/ns/net", child.as_raw()))
        .arg("tap0")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    stockade_sys::process::pass_fd(&mut cmd, ready_w, READY_FD);
    stockade_sys::process::pass_fd(&mut cmd, exit_r, EXIT_FD);
    let spawned = cmd.spawn().map_err(|e| {
        format!(
            "cannot start network helper {}: {e} (install it: apt-get install slirp4netns)",
            argv[0]
        )
    });
    // Drop our copies of the helper's pipe ends (held by the command's closures).
    drop(cmd);
    let pid = Pid::from_raw(spawned?.id() as i32);
    let _ = fs::write(state_dir.join("net-helper.pid"), pid.as_raw().to_string());
    let mut ready = fs::File::from(ready_r);
    let mut byte = [0u8; 1];
    let came_up = {
        let mut fds = [PollFd::new(ready.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::from(10_000u16)), Ok(n) if n > 0)
    };
    if !came_up || ready.read_exact(&mut byte).is_err() {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        return Err(format!(
            "network helper {} did not come up: {}",
            argv[0],
            log.trim()
        ));
    }
    Ok(Helper {
        pid,
        _exit_w: exit_w,
    })
}

pub(crate) fn stop_helper(h: &Helper) {
    let _ = kill(h.pid, Signal::SIGKILL);
    let _ = waitpid(h.pid, None);
}

/// PID 1 of the new namespaces: waits to be placed in the cgroups, builds the root,
/// listens, tells the monitor, and serves until killed. Never returns.
fn init(
    plan: &LaunchPlan,
    sync_r: OwnedFd,
    ready_w: OwnedFd,
    ids: Option<&Ids>,
    rootless: bool,
) -> ! {
    // Die with the monitor: a killed monitor must not leave the sandbox running past
    // its lifetime (gc then only has directories to remove). Had it died before this
    // call, the sync pipe below reads EOF and setup stops.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let mut ready = fs::File::from(ready_w);
    match setup_init(plan, sync_r, ids, rootless) {
        Ok((listener, oom, steps)) => {
            let mut answer = String::from("ok\n");
            for s in &steps.0 {
                answer.push_str(&s.to_line());
            }
            let _ = ready.write_all(answer.as_bytes());
            drop(ready);
            server::serve(listener, plan.exec.clone(), oom)
        }
        Err(e) => {
            let _ = ready.write_all(e.as_bytes());
            stockade_sys::process::exit_now(1)
        }
    }
}

fn setup_init(
    plan: &LaunchPlan,
    sync_r: OwnedFd,
    ids: Option<&Ids>,
    rootless: bool,
) -> Result<
    (
        std::os::unix::net::UnixListener,
        Option<server::OomCounter>,
        Steps,
    ),
    String,
> {
    let mut steps = Steps::default();
    let mut t = monotonic_ns();
    let mut sync = fs::File::from(sync_r);
    let mut go = [0u8; 1];
    if rootless {
        // Our ids mean nothing until the monitor has written the maps.
        sync.read_exact(&mut go)
            .map_err(|_| "the monitor went away before mapping the sandbox's ids".to_string())?;
        t = steps.done("PID 1: wait for the rootless id maps", t);
    }
    // The root is built while the monitor moves us into the cgroups (a v1 migration
    // waits for an RCU grace period, ~10 ms); nothing here forks or allocates much.
    nix::unistd::sethostname(&plan.hostname).map_err(|e| format!("cannot set hostname: {e}"))?;
    stockade_sys::net::loopback_up().map_err(|e| format!("cannot bring loopback up: {e}"))?;
    let oom = match &plan.cgroups.oom_counter {
        Some(c) => Some(
            server::OomCounter::open(&c.path, &c.key)
                .map_err(|e| format!("cannot open {}: {e}", c.path.display()))?,
        ),
        None => None,
    };
    let sock = plan.state_dir.join("agent.sock");
    let _ = fs::remove_file(&sock);
    let listener = std::os::unix::net::UnixListener::bind(&sock)
        .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
    t = steps.done("PID 1: hostname, loopback, the agent's socket", t);
    rootfs::build_and_pivot(
        &plan.state_dir.join("root"),
        &plan.mounts,
        plan.readonly_root,
        ids,
    )?;
    t = steps.done("PID 1: build the root and pivot into it", t);
    sync.read_exact(&mut go)
        .map_err(|_| "the monitor went away during setup".to_string())?;
    t = steps.done("PID 1: wait for the cgroups and the network", t);
    // Now inside the sandbox's cgroups: a fresh cgroup namespace makes
    // /proc/self/cgroup show "/" inside.
    nix::sched::unshare(CloneFlags::CLONE_NEWCGROUP)
        .map_err(|e| format!("cannot unshare the cgroup namespace: {e}"))?;
    if let Some(ids) = ids {
        nix::sched::setns(&ids.userns, CloneFlags::CLONE_NEWUSER)
            .map_err(|e| format!("cannot enter the sandbox's user namespace: {e}"))?;
        become_userns_root(&sync)?;
    } else if rootless {
        // Our capabilities in the sandbox's namespace must survive exec (of the
        // shims): as its root when the maps have one, else as ambient capabilities.
        let root_mapped = fs::read_to_string("/proc/self/uid_map")
            .is_ok_and(|m| m.lines().any(|l| l.split_whitespace().next() == Some("0")));
        if root_mapped {
            become_userns_root(&sync)?;
        } else {
            stockade_sys::caps::all_ambient()
                .map_err(|e| format!("cannot keep capabilities across exec: {e}"))?;
        }
    }
    steps.done("PID 1: cgroup namespace, user namespace root", t);
    Ok((listener, oom, steps))
}

/// Becomes root of the user namespace we are in, the last step of setup. As root of
/// the host, that namespace was just entered (its ids are the leased range) and every
/// other namespace stays owned by the host's, so root inside has capabilities over
/// nothing but its own user namespace.
fn become_userns_root(sync: &fs::File) -> Result<(), String> {
    let root_gid = nix::unistd::Gid::from_raw(0);
    let root_uid = nix::unistd::Uid::from_raw(0);
    let denied = fs::read_to_string("/proc/self/setgroups").is_ok_and(|s| s.trim() == "deny");
    if !denied {
        nix::unistd::setgroups(&[]).map_err(|e| format!("cannot clear groups: {e}"))?;
    }
    nix::unistd::setresgid(root_gid, root_gid, root_gid)
        .map_err(|e| format!("cannot become gid 0 of the sandbox: {e}"))?;
    nix::unistd::setresuid(root_uid, root_uid, root_uid)
        .map_err(|e| format!("cannot become uid 0 of the sandbox: {e}"))?;
    // The uid change cleared the parent-death signal: set it again, then make sure the
    // monitor did not die in between (it holds the sync pipe open until we answer).
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let mut fds = [PollFd::new(sync.as_fd(), PollFlags::POLLIN)];
    if matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
        return Err("the monitor went away during setup".into());
    }
    Ok(())
}

/// Waits until the sandbox must end.
fn supervised_signals() -> SigSet {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        mask.add(s);
    }
    mask
}

/// How often the monitor checks that the sandbox is still in its cgroups.
const CGROUP_CHECK_MS: u64 = 5_000;

fn supervise(plan: &LaunchPlan, child: Pid) {
    let mask = supervised_signals();
    let _ = mask.thread_block();
    let sigfd = SignalFd::new(&mask).ok();
    let child_fd = rustix::process::Pid::from_raw(child.as_raw())
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let owner_fd = match plan.owner_pid {
        Some(pid) => match rustix::process::Pid::from_raw(pid as i32)
            .map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()))
        {
            Some(Ok(fd)) => Some(fd),
            _ => return, // owner already gone
        },
        None => None,
    };
    loop {
        // The lifetime does not run while the sandbox is paused (frozen): its
        // deadline moves by every pause's length, and a paused one is never due.
        let now = now_ms();
        let paused = stockade_agent_proto::launch::PausedTime::read(&plan.state_dir, now);
        let left = paused.deadline(plan.expires_at_ms).saturating_sub(now);
        let left = if paused.since_ms.is_some() {
            left.max(1000)
        } else if left == 0 {
            return;
        } else {
            left
        };
        let mut fds: Vec<PollFd> = Vec::new();
        for fd in [child_fd.as_ref(), owner_fd.as_ref()].into_iter().flatten() {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        if let Some(s) = &sigfd {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        // Woken at least every few seconds to check that the sandbox is still in its
        // groups: one whose processes were moved out would run without its limits.
        let timeout = PollTimeout::try_from(Duration::from_millis(left.min(CGROUP_CHECK_MS)))
            .unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, timeout) {
            Ok(0) => {
                if let Some(dir) = cgroup::lost(&plan.cgroups, child.as_raw()) {
                    eprintln!(
                        "stockade monitor: the sandbox left its cgroup {dir} (moved out by \
                         someone on the host): killed, since its limits no longer held"
                    );
                    return;
                }
                continue;
            }
            Ok(_) => {
                if fds
                    .iter()
                    .any(|f| f.revents().is_some_and(|r| !r.is_empty()))
                {
                    return;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Kills everything and removes every trace of the sandbox.
fn teardown(plan: &LaunchPlan, child: Pid, helper: Option<&Helper>) {
    cgroup::kill(&plan.cgroups);
    // Killing PID 1 of a pid namespace kills every process in it.
    let _ = kill(child, Signal::SIGKILL);
    // A paused sandbox is frozen: the v1 freezer holds back even SIGKILL until
    // thawed (v2 lets it through). Thawed after the kill, so no code runs again.
    cgroup::thaw(&plan.cgroups);
    let _ = waitpid(child, None);
    if let Some(h) = helper {
        stop_helper(h);
    }
    let left = cgroup::remove(&plan.cgroups.dirs);
    for l in &left {
        eprintln!("stockade monitor: {l}");
    }
    if left.is_empty() {
        let _ = fs::remove_dir_all(&plan.state_dir);
    }
}
