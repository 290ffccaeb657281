//! `stockade-agent shim`: runs one exec. Started fresh (single-threaded) by PID 1 for
//! every exec, with the exec's stdio pipes as fds 0-2 and a control socket as fd 3.
//!
//! It becomes a child subreaper, so everything the exec starts (also processes that
//! call setsid or double-fork) stays its descendant. It forks the user's process,
//! which drops to the sandbox user, loses every capability, sets no_new_privs, enters
//! landlock and seccomp, and execs with stdio only. When the user's process exits, at
//! the deadline, on a `kill` line, or when the control socket closes, it kills every
//! descendant and reaps them: nothing an exec starts outlives its result.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid};
use serde::{Deserialize, Serialize};
use stockade_agent_proto::WatchDir;
use stockade_agent_proto::launch::ExecPolicy;
use stockade_sys::process::{Forked, exit_now, fork};

/// What PID 1 tells the shim.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShimConfig {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub timeout_ms: Option<u64>,
    pub policy: ExecPolicy,
    /// Leave what the command started running after it exits (we stay their
    /// subreaper until the last one ends).
    #[serde(default)]
    pub background: bool,
    /// Detached: PID 1 answers once the command has started and closes our control
    /// socket, which then means nothing (the deadline still holds); the command's
    /// stdin is `/dev/null` and its output goes where this says.
    #[serde(default)]
    pub detach: Option<DetachedOutput>,
    /// Stdio is a terminal: the command leads a session of its own with it as its
    /// controlling terminal (so Ctrl-C typed there interrupts it, and job control works).
    #[serde(default)]
    pub tty: bool,
    /// Run the agent's directory watcher in the program's place
    /// ([`stockade_agent_proto::ExecRequest::watch`]).
    #[serde(default)]
    pub watch: Option<WatchDir>,
}

/// Where a detached command's stdout and stderr go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DetachedOutput {
    /// [`stockade_agent_proto::detached_log`] of its pid.
    Log,
    /// `/dev/null`.
    Discard,
}

/// What the shim tells PID 1, one JSON line each.
#[derive(Debug, Serialize, Deserialize)]
pub enum ShimEvent {
    Started {
        pid: u32,
    },
    Exited {
        exit_code: i32,
        signal: Option<i32>,
        timed_out: bool,
        background: bool,
    },
}

fn send(ctl: &mut UnixStream, ev: &ShimEvent) {
    if let Ok(mut line) = serde_json::to_vec(ev) {
        line.push(b'\n');
        let _ = ctl.write_all(&line);
    }
}

/// Entry point of `stockade-agent shim`.
pub fn main() -> i32 {
    run(false, false)
}

/// The shim, with the exec's stdio at fds 0-2 and its control socket at fd 3 (set up
/// by PID 1's `pass_fd`, or by the zygote that forked us). `seccomp_in_force`: we are
/// under the sandbox's seccomp filter already (the zygote's, inherited), so the
/// code's process is too, without building or installing it again.
/// `signals_clean`: every disposition is the default but SIGPIPE's (the zygote's).
pub fn run(seccomp_in_force: bool, signals_clean: bool) -> i32 {
    let _ = nix::sys::prctl::set_name(c"stockade-shim");
    let Some(ctl) = stockade_sys::process::take_inherited_fd(3) else {
        eprintln!("stockade-shim: no control socket on fd 3; this command is run by the agent");
        return 2;
    };
    let mut ctl = UnixStream::from(ctl);
    let mut line = String::new();
    let mut reader = BufReader::new(ctl.try_clone().expect("clone control socket"));
    if reader.read_line(&mut line).is_err() {
        return 2;
    }
    let config: ShimConfig = match serde_json::from_str(&line) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stockade-shim: bad config: {e}");
            return 2;
        }
    };
    let _ = nix::unistd::setsid();
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let _ = nix::sys::prctl::set_dumpable(false);
    // Under memory pressure the kernel picks the exec's processes (raised to 1000 in
    // the child), not the shim that tracks them: -1000 where we may (it takes
    // CAP_SYS_RESOURCE, which docker containers and some hosts' root lack; then the
    // inherited value stays, still below the code's). Should the shim die anyway,
    // PID 1 kills the exec's tree.
    let _ = stockade_sys::process::set_oom_score_adj(-1000);
    // Into the execs' cgroup before anything of the exec exists, so all of it is
    // counted there; an exec that cannot be capped does not run.
    if let Some(cg) = &config.policy.exec_cgroup
        && let Err(e) = fs::write(Path::new(cg).join("cgroup.procs"), "0")
    {
        report_failure(
            &mut ctl,
            &format!("cannot enter the execs' cgroup {cg}: {e}"),
        );
        return 1;
    }
    let install = config.policy.seccomp && !seccomp_in_force;
    let filters = if install {
        stockade_sys::seccomp::build().ok()
    } else {
        None
    };
    if install && filters.is_none() {
        report_failure(&mut ctl, "cannot build the seccomp filter");
        return 1;
    }
    // Without the sandbox's filter the code still runs under the floor: no setuid or
    // setgid file from it, whatever the hardening.
    let floor = if config.policy.seccomp {
        None
    } else {
        match stockade_sys::seccomp::build_floor() {
            Ok(f) => Some(f),
            Err(e) => {
                report_failure(&mut ctl, &format!("cannot build the setuid floor: {e}"));
                return 1;
            }
        }
    };
    let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("pipe2");
    let started = Instant::now();
    let child = match fork() {
        Ok(Forked::Child) => {
            drop(err_r);
            let msg = exec_child(&config, filters.as_ref(), floor.as_ref(), signals_clean);
            let mut w = fs::File::from(err_w);
            let _ = w.write_all(msg.as_bytes());
            exit_now(if msg.contains("permission denied") {
                126
            } else {
                127
            });
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => {
            report_failure(&mut ctl, &format!("cannot fork: {e}"));
            return 1;
        }
    };
    drop(err_w);
    // Our copies of the exec's stdio must not keep its pipes open.
    stockade_sys::process::stdio_to_null(&[0, 1, 2]);
    let mut exec_error = String::new();
    let _ = fs::File::from(err_r).read_to_string(&mut exec_error);
    // A detached command that never ran is no start: PID 1 answers with its failure.
    if config.detach.is_none() || exec_error.is_empty() {
        send(
            &mut ctl,
            &ShimEvent::Started {
                pid: child.as_raw() as u32,
            },
        );
    }
    let deadline = config
        .timeout_ms
        .map(|ms| started + Duration::from_millis(ms));
    let (status, timed_out) = wait_child(child, &mut reader, deadline, config.detach.is_some());
    let (mut exit_code, signal) = match status {
        WaitStatus::Exited(_, c) => (c, None),
        WaitStatus::Signaled(_, s, _) => (128 + s as i32, Some(s as i32)),
        _ => (255, None),
    };
    // What the exec left in the background (also double-forked or setsid) ends with
    // it: nothing outlives the result. Killed and reaped before we report, so the
    // output pipes reach EOF; `background` only says some process could not be
    // reaped in time (stuck in the kernel), so PID 1 drains the pipes without
    // waiting for their end.
    // Asked for background processes: they keep running when the command exited by
    // itself (not at a deadline or a kill); we stay their subreaper, out of the code's
    // reach (root), and end when the last one has.
    let keep = (config.background || config.detach.is_some())
        && !timed_out
        && status != WaitStatus::StillAlive;
    if !keep {
        let _ = kill_descendants(child);
    }
    let background = has_descendants();
    if !exec_error.is_empty() {
        // The program never ran (the child said why on the exec's stderr): report
        // what a shell would.
        exit_code = if exec_error.contains("permission denied") {
            126
        } else {
            127
        };
    }
    send(
        &mut ctl,
        &ShimEvent::Exited {
            exit_code,
            signal,
            timed_out,
            background,
        },
    );
    if keep && background {
        reap_until_none_left();
    }
    0
}

/// Reaps children (the kept background processes, and their orphans, which are
/// reparented to us) until there are none.
fn reap_until_none_left() {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

fn report_failure(ctl: &mut UnixStream, msg: &str) {
    eprintln!("stockade-shim: {msg}");
    send(
        ctl,
        &ShimEvent::Exited {
            exit_code: 126,
            signal: None,
            timed_out: false,
            background: false,
        },
    );
}

/// Waits for the child, the deadline, or a kill request. Returns the child's status
/// (`StillAlive` when we were told to kill) and whether the deadline passed.
fn wait_child(
    child: Pid,
    ctl: &mut BufReader<UnixStream>,
    deadline: Option<Instant>,
    detached: bool,
) -> (WaitStatus, bool) {
    // Detached, the end of the control socket is PID 1 having answered: from then
    // on only the child and the deadline count.
    let mut listening = true;
    let pidfd = rustix::process::Pid::from_raw(child.as_raw())
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    loop {
        if let Ok(st) = waitpid(child, Some(WaitPidFlag::WNOHANG))
            && st != WaitStatus::StillAlive
        {
            return (st, false);
        }
        let timeout = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (kill_main_first(child), true);
                }
                PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        let ctl_fd = ctl.get_ref().as_fd();
        let mut fds = Vec::with_capacity(2);
        if listening {
            fds.push(PollFd::new(ctl_fd, PollFlags::POLLIN));
        }
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        let pidfd_missing = pidfd.is_none();
        let timeout = if pidfd_missing {
            PollTimeout::from(10u8)
        } else {
            timeout
        };
        // A request that came with the config is in the reader's buffer already,
        // where polling the socket would never see it.
        let buffered = listening && !ctl.buffer().is_empty();
        let polled = if buffered {
            Ok(0)
        } else {
            poll(&mut fds, timeout)
        };
        match polled {
            Ok(_) => {
                if buffered || (listening && fds[0].revents().is_some_and(|r| !r.is_empty())) {
                    let mut line = String::new();
                    // "signal N": passed to the main child, which decides what it does.
                    // "kill" or end of stream: the caller gave up on this exec.
                    let read = ctl.read_line(&mut line);
                    if let Some(n) = line.trim().strip_prefix("signal ")
                        && let Ok(sig) = n.parse::<i32>().map(Signal::try_from)
                        && let Ok(sig) = sig
                    {
                        let _ = kill(child, sig);
                        continue;
                    }
                    let gone = read.map(|n| n == 0).unwrap_or(true);
                    if gone && detached {
                        listening = false;
                        continue;
                    }
                    if gone || line.trim() == "kill" {
                        return (kill_main_first(child), false);
                    }
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Pids of all processes below us (children, and orphans reparented to us).
fn descendants() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut parent: HashMap<i32, i32> = HashMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
                && let Some(pp) = stockade_sys::process::parent_pid(pid as u32)
            {
                parent.insert(pid, pp as i32);
            }
        }
    }
    let mut below: HashSet<i32> = HashSet::new();
    let mut changed = true;
    while changed {
        changed = false;
        for (&pid, &pp) in &parent {
            if (pp == me || below.contains(&pp)) && below.insert(pid) {
                changed = true;
            }
        }
    }
    below.into_iter().collect()
}

fn has_descendants() -> bool {
    // Reaps what already ended; no child at all means nothing below us (every
    // descendant is a child of ours or below one: we are their subreaper), and spares
    // the walk of /proc.
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Err(Errno::ECHILD) => return false,
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(_) => {}
        }
    }
    !descendants().is_empty()
}

/// At a deadline or a kill: SIGKILL to the main child's process group (its own, made
/// with `setpgid` before exec; the child is not reaped yet, so neither its pid nor its
/// group can belong to anyone else) and to the child, before the rest. Killed one by
/// one in any order, a shell could see its child die and exit by itself (137,
/// "Killed") before its own signal came, and the exec would look as if it ended on
/// its own instead of killed.
fn kill_main_first(child: Pid) -> WaitStatus {
    let _ = kill(Pid::from_raw(-child.as_raw()), Signal::SIGKILL);
    let _ = kill(child, Signal::SIGKILL);
    kill_descendants(child)
}

/// Kills every descendant and reaps them, until none is left (bounded to 5 s for
/// processes stuck in uninterruptible sleep). Returns the main child's status
/// (`StillAlive` if it could not be collected).
fn kill_descendants(child: Pid) -> WaitStatus {
    let until = Instant::now() + Duration::from_secs(5);
    let mut main = WaitStatus::StillAlive;
    loop {
        // Collect what ended; with no child left there is nothing below us (see
        // `has_descendants`), the common case, and the walk of /proc is skipped.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Err(Errno::ECHILD) => return main,
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(st) => {
                    if st.pid() == Some(child) {
                        main = st;
                    }
                }
            }
        }
        let pids = descendants();
        if pids.is_empty() || Instant::now() > until {
            return main;
        }
        // Stopped first, killed after: a stopped process cannot fork, and stopping one
        // frees no pid, so under a full pids cap (a fork bomb) those still running
        // cannot fork into the pids that killing frees. Walked again while new ones
        // appear (a few times at most), then all killed at once.
        let mut seen: HashSet<i32> = pids.iter().copied().collect();
        let mut fresh = pids;
        for _ in 0..4 {
            for p in &fresh {
                let _ = kill(Pid::from_raw(*p), Signal::SIGSTOP);
            }
            fresh = descendants()
                .into_iter()
                .filter(|p| seen.insert(*p))
                .collect();
            if fresh.is_empty() {
                break;
            }
        }
        for p in &seen {
            let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
        }
        while let Ok(st) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if st == WaitStatus::StillAlive {
                break;
            }
            if st.pid() == Some(child) {
                main = st;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In the forked child: apply the policy and exec. Returns only on failure, with the
/// reason (also written to the exec's stderr).
fn exec_child(
    config: &ShimConfig,
    filters: Option<&stockade_sys::seccomp::Filters>,
    floor: Option<&stockade_sys::seccomp::Floor>,
    signals_clean: bool,
) -> String {
    let msg = match prepare_and_exec(config, filters, floor, signals_clean) {
        Ok(never) => match never {},
        Err(m) => m,
    };
    let _ = writeln!(std::io::stderr(), "stockade: {msg}");
    msg
}

fn prepare_and_exec(
    config: &ShimConfig,
    filters: Option<&stockade_sys::seccomp::Filters>,
    floor: Option<&stockade_sys::seccomp::Floor>,
    signals_clean: bool,
) -> Result<std::convert::Infallible, String> {
    if config.tty {
        // A session (and so a process group) of its own, led by the command, whose
        // controlling terminal is its stdin.
        nix::unistd::setsid()
            .map_err(|e| format!("cannot start a session for the terminal: {e}"))?;
        rustix::process::ioctl_tiocsctty(std::io::stdin())
            .map_err(|e| format!("cannot make the terminal the command's own: {e}"))?;
    } else {
        let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    }
    // Our own /proc files must be ours to write: the shim made itself undumpable,
    // which gives them to root of the user namespace (or to host root, when a
    // rootless sandbox maps no root). The code is dumpable after exec anyway.
    let _ = nix::sys::prctl::set_dumpable(true);
    // Set before the capabilities go: with CAP_SYS_RESOURCE this also makes 1000 the
    // floor the code cannot lower it below.
    stockade_sys::process::set_oom_score_adj(1000)
        .map_err(|e| format!("cannot raise the OOM score: {e}"))?;
    if signals_clean {
        stockade_sys::process::reset_sigpipe_and_mask();
    } else {
        stockade_sys::process::reset_signals();
    }
    if let Some(f) = floor {
        // While the capabilities are still held (CAP_SYS_ADMIN of the sandbox's user
        // namespace lets it in without no_new_privs); where they do not suffice (a
        // container without that capability), with no_new_privs.
        if f.apply().is_err() {
            nix::sys::prctl::set_no_new_privs()
                .map_err(|e| format!("cannot set no_new_privs for the setuid floor: {e}"))?;
            f.apply()
                .map_err(|e| format!("cannot enter the setuid floor: {e}"))?;
        }
    }
    become_sandbox_user(&config.policy)?;
    nix::unistd::chdir(config.cwd.as_str()).map_err(|e| {
        // What the kernel judged by: the directory's owner and mode, and who we are.
        use std::os::unix::fs::MetadataExt;
        let dir = fs::metadata(&config.cwd)
            .map(|m| format!("owner {}:{} mode {:o}", m.uid(), m.gid(), m.mode() & 0o7777))
            .unwrap_or_else(|e| format!("not readable: {e}"));
        // And the root it is looked up from (stat of `/` itself needs no search
        // permission): its mode, owner and filesystem.
        let root = fs::metadata("/")
            .map(|m| {
                let fs = rustix::fs::statfs("/")
                    .map(|s| format!("{:#x}", s.f_type))
                    .unwrap_or_else(|e| e.to_string());
                format!(
                    "owner {}:{} mode {:o} dev {:#x} ino {} fs {fs}",
                    m.uid(),
                    m.gid(),
                    m.mode() & 0o7777,
                    m.dev(),
                    m.ino()
                )
            })
            .unwrap_or_else(|e| format!("not readable: {e}"));
        format!(
            "cannot enter working directory {}: {} (the directory: {dir}; /: {root}; this exec runs as uid {} gid {})",
            config.cwd,
            describe(e),
            nix::unistd::getuid(),
            nix::unistd::getgid()
        )
    })?;
    if let Some(w) = &config.watch {
        // The agent's own watcher, under the same policy the program would have had.
        // It holds stdio only: nothing exec closes is left open (the error pipe's end
        // among them, whose close tells the shim the exec started). Nothing here owns
        // a descriptor above stdio that is used again: this process ends in `run`.
        enter_landlock(&config.policy)?;
        stockade_sys::process::close_fds_from(3);
        if let Some(f) = filters {
            f.apply().map_err(|e| e.to_string())?;
        }
        exit_now(crate::dirwatch::run(w));
    }
    let program = resolve(
        &config.argv[0],
        config
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str()),
    )?;
    let c = |s: &str| CString::new(s).map_err(|_| format!("argument {s:?} contains NUL"));
    let argv: Vec<CString> = config.argv.iter().map(|a| c(a)).collect::<Result<_, _>>()?;
    let envp: Vec<CString> = config
        .env
        .iter()
        .map(|(k, v)| c(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let prog = c(&program)?;
    // Detached, the exec's stderr (its pipe to PID 1) is kept aside, close-on-exec: a
    // failure from here on is said there, not into the command's log.
    let pipe_stderr = match config.detach {
        Some(output) => Some(detach_stdio(output)?),
        None => None,
    };
    let last_steps = || -> Result<std::convert::Infallible, String> {
        enter_landlock(&config.policy)?;
        // The program starts with stdio only: whatever this process holds (the control
        // socket, the error pipe) closes at exec.
        stockade_sys::process::cloexec_fds_from(3).map_err(|e| e.to_string())?;
        if let Some(f) = filters {
            f.apply().map_err(|e| e.to_string())?;
        }
        nix::unistd::execve(&prog, &argv, &envp)
            .map_err(|e| format!("cannot execute {}: {}", config.argv[0], describe(e)))
    };
    let failed = last_steps();
    if let Some(fd) = pipe_stderr {
        let _ = nix::unistd::dup2(fd.as_raw_fd(), 2);
    }
    failed
}

/// A detached command's stdio, opened as the sandbox user (so a link planted in the
/// log directory gains nothing): stdin `/dev/null`, stdout and stderr the log of
/// this pid, created in a directory every user of the sandbox may add to (sticky,
/// as `/tmp`), or `/dev/null`.
/// Returns the exec's stderr as it was, close-on-exec.
fn detach_stdio(output: DetachedOutput) -> Result<std::os::fd::OwnedFd, String> {
    use rustix::fs::{Mode, OFlags};
    let pipe_stderr = rustix::io::fcntl_dupfd_cloexec(std::io::stderr(), 3)
        .map_err(|e| format!("cannot keep the exec's stderr: {e}"))?;
    let null = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("cannot open /dev/null: {e}"))?;
    let out = match output {
        DetachedOutput::Discard => None,
        DetachedOutput::Log => {
            let dir = stockade_agent_proto::DETACHED_LOG_DIR;
            match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o1777)) {
                // The umask took bits off; the directory is ours to set.
                Ok(()) => rustix::fs::chmod(dir, Mode::from_raw_mode(0o1777))
                    .map_err(|e| format!("cannot open {dir} to every user: {e}"))?,
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(format!("cannot keep the detached output in {dir}: {e}")),
            }
            let d = rustix::fs::open(
                dir,
                OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| format!("cannot keep the detached output in {dir}: {e}"))?;
            let name = format!("{}.log", std::process::id());
            let f = rustix::fs::openat(
                &d,
                name.as_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| format!("cannot keep the detached output in {dir}/{name}: {e}"))?;
            Some(f)
        }
    };
    let out = out.as_ref().unwrap_or(&null);
    for (from, to) in [(&null, 0), (out, 1), (out, 2)] {
        nix::unistd::dup2(from.as_raw_fd(), to)
            .map_err(|e| format!("cannot set up the detached command's stdio: {e}"))?;
    }
    Ok(pipe_stderr)
}

/// Drops to the sandbox user: no capabilities in any set, the policy's uid and gid,
/// no_new_privs. Shared by execs and file operations.
pub fn become_sandbox_user(p: &ExecPolicy) -> Result<(), String> {
    // Root of a sandbox's own user namespace keeps what a package manager needs on
    // the sandbox's files; everyone else keeps nothing.
    let root_caps = p.root_caps && p.uid == 0;
    if p.drop_caps {
        if root_caps {
            stockade_sys::caps::keep_only(stockade_agent_proto::launch::ROOT_CAPS)
                .map_err(|e| e.to_string())?;
        } else {
            stockade_sys::caps::drop_bounding().map_err(|e| e.to_string())?;
        }
    }
    set_rlimits(p)?;
    let gid = Gid::from_raw(p.gid);
    if let Err(e) = nix::unistd::setgroups(&[gid]) {
        // A rootless sandbox without subordinate ids: the kernel denies setgroups there
        // (the groups are the caller's own, as with bubblewrap).
        let denied =
            std::fs::read_to_string("/proc/self/setgroups").is_ok_and(|s| s.trim() == "deny");
        if !(denied && e == nix::errno::Errno::EPERM) {
            return Err(format!("cannot set groups to [{}]: {e}", p.gid));
        }
    }
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("cannot set gid {}: {e}", p.gid))?;
    let uid = Uid::from_raw(p.uid);
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("cannot set uid {}: {e}", p.uid))?;
    if p.drop_caps && !root_caps {
        stockade_sys::caps::clear_all().map_err(|e| e.to_string())?;
    }
    if p.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(|e| format!("cannot set no_new_privs: {e}"))?;
    }
    Ok(())
}

/// Sets the policy's resource limits (before dropping to the sandbox user, so the
/// code cannot raise them again).
fn set_rlimits(p: &ExecPolicy) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    for (resource, name, value) in [
        (Resource::RLIMIT_AS, "RLIMIT_AS", p.rlimit_as_bytes),
        (Resource::RLIMIT_NPROC, "RLIMIT_NPROC", p.rlimit_nproc),
    ] {
        if let Some(v) = value {
            setrlimit(resource, v, v).map_err(|e| format!("cannot set {name} to {v}: {e}"))?;
        }
    }
    Ok(())
}

/// Enters the policy's landlock domain, if it has one.
/// A child of the exec zygote enters the ruleset it built once, when it is this one.
pub fn enter_landlock(p: &ExecPolicy) -> Result<(), String> {
    if let Some(writable) = &p.landlock_writable {
        let own = own_scope(p.uid);
        match crate::zygote::prepared_landlock() {
            Some(prepared) if prepared.is_for(writable, p.landlock_min_abi, own) => {
                prepared.restrict_self()
            }
            _ => stockade_sys::landlock::restrict_min(writable, p.landlock_min_abi, own),
        }
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether an exec as `uid` gets landlock's own scopes (its signals and abstract
/// sockets reach only what it starts). The sandbox's other execs run as the same
/// user and may be signalled, as on any machine; the agent, the shims and the zygote
/// stay out of reach by uid (they are root of the sandbox). So the scopes are
/// needed only where the uid does not separate them: an exec as root, or as the
/// agent's own uid (a rootless sandbox mapping one id), or when that is unknown.
pub fn own_scope(uid: u32) -> bool {
    uid == 0 || agent_uid().is_none_or(|a| a == uid)
}

/// The uid of the sandbox's PID 1 (the agent), from `/proc/1/status`.
fn agent_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/1/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn describe(e: Errno) -> &'static str {
    match e {
        Errno::ENOENT => "no such file or directory",
        Errno::EACCES => "permission denied",
        Errno::ENOEXEC => "not an executable format",
        Errno::ENOTDIR => "not a directory",
        other => other.desc(),
    }
}

/// Finds `name` in PATH unless it contains a slash (as execvp would, but with the
/// exec's own PATH).
fn resolve(name: &str, path: Option<&str>) -> Result<String, String> {
    if name.contains('/') {
        return Ok(name.to_string());
    }
    for dir in path
        .unwrap_or(stockade_default_path())
        .split(':')
        .filter(|d| !d.is_empty())
    {
        let candidate = Path::new(dir).join(name);
        if let Ok(m) = fs::metadata(&candidate)
            && m.is_file()
            && m.permissions().mode() & 0o111 != 0
        {
            return Ok(candidate.to_string_lossy().into_owned());
        }
    }
    Err(format!("cannot execute {name}: command not found in PATH"))
}

fn stockade_default_path() -> &'static str {
    "/usr/local/bin:/usr/bin:/bin"
}
