//! What PID 1 cleans up after execs: the trees of shims that died, and the shared
//! memory the code left behind.
//!
//! - Each exec's shim tracks the exec's processes (it is their subreaper) and kills
//!   them when the exec ends. Should the shim itself die (the OOM killer, a kill), its
//!   processes are reparented to PID 1; [`kill_orphans`] kills every process whose
//!   line of parents reaches PID 1 through anything but a live helper (shim, file
//!   operation), before the exec's result is sent.
//! - SysV shared memory, semaphores and message queues outlive the processes that
//!   made them, and so do files in `/dev/shm` (POSIX shm and semaphores): memory
//!   charged to the sandbox that no process holds. When an exec ends and no other
//!   exec is running, PID 1 starts `ipc-clean`, which becomes the sandbox user and
//!   removes them all (the sandbox has its own IPC namespace; the code never runs as
//!   another user, so it owns everything it made). Where the kernel cannot list them
//!   (gVisor: no `/proc/sysvipc`, no `*_STAT`), they are found by id instead
//!   ([`IpcMarks`]).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use stockade_agent_proto::launch::ExecPolicy;
use stockade_sys::ipc::Kind;

use crate::zygote::{Role, Zygote};

/// How long a helper may take before it is killed.
const HELPER_DEADLINE: Duration = Duration::from_secs(10);

/// Pids of PID 1's helper children (exec shims, file operations, ipc-clean), and the
/// exec zygote that forks most of them. Every other child of PID 1 is an orphan of an
/// exec whose shim died.
pub struct Helpers {
    pids: Mutex<HashSet<u32>>,
    zygote: Zygote,
}

impl Helpers {
    /// Helpers started through `zygote` where it can, else spawned.
    pub fn new(zygote: Zygote) -> Helpers {
        Helpers {
            pids: Mutex::new(HashSet::new()),
            zygote,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.pids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Spawns `cmd` and records it as a helper (under the lock, so a concurrent sweep
    /// never takes it for an orphan).
    pub fn spawn(&self, cmd: &mut Command) -> std::io::Result<std::process::Child> {
        let mut h = self.lock();
        let child = cmd.spawn()?;
        h.insert(child.id());
        Ok(child)
    }

    /// Starts the zygote now, if the policy has one and it is not running, and waits
    /// (a few seconds at most) until it serves: see [`Zygote::warm`].
    pub fn warm(&self) {
        self.zygote.warm();
    }

    /// Starts a helper in `role` through the zygote (a fork, no `exec`) and records
    /// it, as [`Helpers::spawn`] does. An error means nothing was started: the caller
    /// spawns the helper instead.
    pub fn fork(&self, role: Role, fds: &[BorrowedFd<'_>]) -> std::io::Result<u32> {
        let mut h = self.lock();
        let pid = self.zygote.spawn(role, fds)?;
        h.insert(pid);
        Ok(pid)
    }

    /// Whether any recorded helper still runs (a shim keeping background processes,
    /// or one of another exec); forgets those that ended.
    pub fn any_alive(&self) -> bool {
        let mut h = self.lock();
        if h.is_empty() {
            return false; // the common case after an exec: no walk of /proc
        }
        let live: HashSet<u32> = processes().into_iter().map(|(pid, _)| pid).collect();
        h.retain(|p| live.contains(p));
        !h.is_empty()
    }

    /// Forgets a helper that ended.
    pub fn forget(&self, pid: u32) {
        self.lock().remove(&pid);
    }
}

/// `(pid, ppid)` of every live (not zombie) process we can see.
fn processes() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut f = stat[close + 2..].split(' ');
        let state = f.next().unwrap_or("X");
        if let (false, Some(ppid)) = (
            matches!(state, "Z" | "X" | "x"),
            f.next().and_then(|p| p.parse().ok()),
        ) {
            out.push((pid, ppid));
        }
    }
    out
}

/// Kills every process below us that is not (below) a live helper, after forgetting
/// the dead shim `dead`, until none is left (bounded: a process stuck in the kernel
/// cannot be waited for forever).
pub fn kill_orphans(helpers: &Helpers, dead: u32) {
    let mut h = helpers.lock();
    h.remove(&dead);
    let zygote = helpers.zygote.pid();
    let until = Instant::now() + HELPER_DEADLINE;
    loop {
        let victims = orphans(&mut h, zygote);
        if victims.is_empty() || Instant::now() > until {
            return;
        }
        for v in victims {
            let _ = kill(Pid::from_raw(v as i32), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether any process below us is not (below) a live helper.
pub fn any_orphan(helpers: &Helpers) -> bool {
    let mut h = helpers.lock();
    let zygote = helpers.zygote.pid();
    !orphans(&mut h, zygote).is_empty()
}

/// Whether `pid` is the only live helper (forgetting those that ended).
pub fn only_helper(helpers: &Helpers, pid: u32) -> bool {
    let _ = helpers.any_alive();
    helpers.lock().iter().all(|p| *p == pid)
}

/// Processes below us that are not (below) a helper in `h` or the zygote; forgets
/// helpers that ended (kept-background shims are forgotten only here).
fn orphans(h: &mut HashSet<u32>, zygote: Option<u32>) -> Vec<u32> {
    let me = std::process::id();
    let procs = processes();
    let parent: HashMap<u32, u32> = procs.iter().copied().collect();
    h.retain(|p| parent.contains_key(p));
    procs
        .iter()
        .map(|(pid, _)| *pid)
        .filter(|pid| {
            // Walk up to our child on this process's line.
            let mut p = *pid;
            let mut steps = 0;
            while let Some(&pp) = parent.get(&p) {
                if pp == me {
                    return !h.contains(&p) && Some(p) != zygote;
                }
                p = pp;
                steps += 1;
                if steps > 4096 {
                    break;
                }
            }
            false
        })
        .collect()
}

/// Waits until process `pid` (a child of ours that the reaper thread collects) has
/// exited, up to `deadline`; kills it then. True when it ended by itself.
pub fn wait_or_kill(pid: u32, deadline: Duration) -> bool {
    let Some(fd) = rustix::process::Pid::from_raw(pid as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
    else {
        return true; // already gone and reaped
    };
    let until = Instant::now() + deadline;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(n) if n > 0 => return true,
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let _ = poll(&mut fds, PollTimeout::from(5_000u16));
    false
}

/// Where the kernel cannot list the SysV objects of the IPC namespace (gVisor 2022),
/// the ids handed out since the last cleanup. gVisor gives each new object the first
/// free id above the last one given, so PID 1 makes (and at once removes) a private
/// object of each kind after every cleanup: its id marks where the code's next
/// objects start, and the next probe's id where they end. Every object the code made
/// in between has an id in that range, and `ipc-clean` removes them by id.
pub struct IpcMarks {
    /// The last probe's id of each kind ([`Kind::ALL`] order); `None` where the
    /// kernel lists its objects (nothing to probe) or a probe failed.
    last: Option<Mutex<[Option<i32>; 3]>>,
}

/// The id ranges to clear between the probes `last` and `now` ([`Kind::ALL`] order).
fn ranges_between(last: &[Option<i32>; 3], now: &[Option<i32>; 3]) -> Vec<String> {
    Kind::ALL
        .iter()
        .zip(last.iter().zip(now.iter()))
        .filter_map(|(k, (l, n))| range_arg(*k, *l, (*n)?))
        .collect()
}

/// The ids of `kind` the code may have used between two probes, as an `ipc-clean`
/// argument (`kind:first:last`, inclusive), or none when the probes are consecutive.
fn range_arg(kind: Kind, last: Option<i32>, now: i32) -> Option<String> {
    // A wrap (`now` at or below `last`) needs 2^31 objects made since the last
    // cleanup; the ids from 0 are then the ones to try (and the helper's deadline
    // bounds the work either way).
    let first = match last {
        Some(l) if l < now => l + 1,
        _ => 0,
    };
    (first < now).then(|| format!("{}:{first}:{}", kind.name(), now - 1))
}

impl IpcMarks {
    /// Probes where the kernel cannot list SysV objects; nothing elsewhere.
    pub fn new() -> IpcMarks {
        IpcMarks {
            last: (!stockade_sys::ipc::listable())
                .then(|| Mutex::new(Kind::ALL.map(|k| stockade_sys::ipc::probe_id(k).ok()))),
        }
    }

    /// Probes again: the id ranges to clear (`None` where the kernel lists its
    /// objects) and the marks to keep once they are cleared. When there is nothing
    /// to clear the new marks are kept at once: the next probe counts from them.
    fn since_last(&self) -> Option<(Vec<String>, [Option<i32>; 3])> {
        self.since_last_by(|k| stockade_sys::ipc::probe_id(k).ok())
    }

    /// [`Self::since_last`] with `probe` making the new marks.
    fn since_last_by(
        &self,
        probe: impl Fn(Kind) -> Option<i32>,
    ) -> Option<(Vec<String>, [Option<i32>; 3])> {
        let cell = self.last.as_ref()?;
        let mut last = cell
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Kind::ALL.map(probe);
        let ranges = ranges_between(&last, &now);
        if ranges.is_empty() {
            *last = now;
        }
        Some((ranges, now))
    }

    fn keep(&self, marks: [Option<i32>; 3]) {
        if let Some(last) = &self.last {
            *last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = marks;
        }
    }
}

fn dev_shm_used() -> bool {
    fs::read_dir("/dev/shm")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

/// Removes the shared memory the execs left, through an `ipc-clean` helper running as
/// the sandbox user. The caller makes sure no exec is running.
pub fn clean_shared_memory(policy: &ExecPolicy, helpers: &Helpers, marks: &IpcMarks) {
    let (ranges, next) = match marks.since_last() {
        Some((ranges, next)) => (ranges, Some(next)),
        None => (Vec::new(), None),
    };
    let listed = next.is_none() && stockade_sys::ipc::count() > 0;
    if !listed && ranges.is_empty() && !dev_shm_used() {
        return;
    }
    let Ok(json) = serde_json::to_vec(policy) else {
        return;
    };
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("stockade-ipc-clean")
        .arg("ipc-clean")
        .args(&ranges)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    stockade_sys::process::spawn_with_stdio_only(&mut cmd);
    let Ok(mut child) = helpers.spawn(&mut cmd) else {
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&json);
    }
    let pid = child.id();
    drop(child);
    let finished = wait_or_kill(pid, HELPER_DEADLINE);
    helpers.forget(pid);
    // Ranges a killed helper did not finish are tried again next time.
    if let (true, Some(next)) = (finished, next) {
        marks.keep(next);
    }
}

/// Parses an `ipc-clean` id range argument (`kind:first:last`).
fn parse_range(arg: &str) -> Option<(Kind, i32, i32)> {
    let mut it = arg.split(':');
    let kind = Kind::from_name(it.next()?)?;
    let first = it.next()?.parse().ok()?;
    let last = it.next()?.parse().ok()?;
    (it.next().is_none() && first <= last).then_some((kind, first, last))
}

/// Entry point of `stockade-agent ipc-clean` (the policy as JSON on stdin; each
/// argument an id range `kind:first:last` to clear where objects cannot be listed).
pub fn ipc_clean_main(args: Vec<String>) -> i32 {
    let Some(ranges) = args
        .iter()
        .map(|a| parse_range(a))
        .collect::<Option<Vec<_>>>()
    else {
        eprintln!("stockade-ipc-clean: bad id range in {args:?}; this command is run by the agent");
        return 2;
    };
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        return 2;
    }
    let policy: ExecPolicy = match serde_json::from_str(&input) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stockade-ipc-clean: bad policy: {e}; this command is run by the agent");
            return 2;
        }
    };
    if let Err(e) = crate::shim::become_sandbox_user(&policy) {
        eprintln!("stockade-ipc-clean: {e}");
        return 1;
    }
    stockade_sys::ipc::remove_all();
    for (kind, first, last) in ranges {
        for id in first..=last {
            stockade_sys::ipc::remove(kind, id);
        }
    }
    if let Ok(dir) = fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            let p = e.path();
            let _ = match e.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(&p),
                _ => fs::remove_file(&p),
            };
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ids_between_two_probes_are_the_range_to_clear() {
        assert_eq!(range_arg(Kind::Shm, Some(4), 5), None, "nothing made");
        assert_eq!(range_arg(Kind::Sem, Some(4), 9).as_deref(), Some("sem:5:8"));
        assert_eq!(range_arg(Kind::Msg, None, 3).as_deref(), Some("msg:0:2"));
        assert_eq!(
            range_arg(Kind::Shm, Some(i32::MAX - 1), 2).as_deref(),
            Some("shm:0:1")
        );
        assert_eq!(range_arg(Kind::Shm, None, 0), None);
    }

    #[test]
    fn consecutive_probes_leave_nothing_to_clear() {
        // Probes 1 then 2 (nothing made between): no range, so no helper runs, and
        // the marks move to 2 at once. Kept at 1 instead, the next probe (3) would
        // clear id 2, the probe's own, with a helper on every other exec.
        assert!(ranges_between(&[Some(1); 3], &[Some(2); 3]).is_empty());
        assert_eq!(
            ranges_between(&[Some(1); 3], &[Some(3), Some(2), None]),
            vec!["shm:2:2".to_string()]
        );
        let marks = IpcMarks {
            last: Some(Mutex::new([Some(1); 3])),
        };
        let last = || *marks.last.as_ref().unwrap().lock().unwrap();
        let (ranges, _) = marks.since_last_by(|_| Some(2)).unwrap();
        assert!(ranges.is_empty());
        assert_eq!(
            last(),
            [Some(2); 3],
            "nothing to clear: the marks move at once"
        );
        let (ranges, next) = marks.since_last_by(|_| Some(4)).unwrap();
        assert_eq!(ranges, ["shm:3:3", "sem:3:3", "msg:3:3"]);
        assert_eq!(
            last(),
            [Some(2); 3],
            "kept only once the helper cleared them"
        );
        marks.keep(next);
        assert_eq!(last(), [Some(4); 3]);
        let none = IpcMarks { last: None };
        assert!(
            none.since_last_by(|_| Some(9)).is_none(),
            "the kernel lists them"
        );
    }

    #[test]
    fn range_arguments_parse_strictly() {
        assert_eq!(parse_range("sem:5:8"), Some((Kind::Sem, 5, 8)));
        assert_eq!(parse_range("shm:8:5"), None);
        assert_eq!(parse_range("shm:1:2:3"), None);
        assert_eq!(parse_range("pipe:1:2"), None);
        assert_eq!(parse_range("msg:x:2"), None);
    }
}
