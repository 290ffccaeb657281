//! Process creation in new namespaces, fd handover, and /proc helpers.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sched::CloneFlags;
use nix::unistd::Pid;

use crate::{Result, SysError};

/// Which side of a fork we are on.
pub enum Forked {
    /// In the parent; the child has this pid.
    Parent(Pid),
    /// In the child.
    Child,
}

/// Forks into new namespaces (`clone` with `flags`, no new stack: fork semantics).
///
/// The caller must be single-threaded: the child continues with a copy of this one
/// thread, as after `fork`. With `CLONE_NEWPID` the child is PID 1 of the new
/// namespace.
pub fn fork_into(flags: CloneFlags) -> Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1);
    if threads != 1 {
        return Err(SysError::other(
            "clone",
            format!("{flags:?}"),
            format!("caller has {threads} threads; must be single-threaded"),
        ));
    }
    // SAFETY: a raw clone(2) without CLONE_VM and with a null stack behaves like fork(2):
    // the child gets a copy-on-write copy of the address space and continues on the
    // same stack copy. The process is single-threaded (checked above), so no lock held
    // by another thread can be copied in a locked state. glibc no longer caches the
    // pid, so getpid() in the child is correct.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags.bits() as libc::c_long) | libc::SIGCHLD as libc::c_long,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_long,
        )
    };
    match ret {
        -1 => Err(SysError::last("clone", format!("{flags:?}"))),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(pid as i32))),
    }
}

/// Plain fork, for single-threaded callers (the exec shim).
pub fn fork() -> Result<Forked> {
    fork_into(CloneFlags::empty())
}

/// Makes `fd` appear as fd `target` in the child spawned by `cmd` (not close-on-exec
/// there), in addition to stdio.
pub fn pass_fd(cmd: &mut Command, fd: OwnedFd, target: i32) {
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // dup2/fcntl, which are async-signal-safe. `fd` is moved into the closure, so it
    // stays open in the parent until the Command is dropped, i.e. through the fork.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &fd;
            if raw == target {
                let flags = libc::fcntl(raw, libc::F_GETFD);
                if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, target) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Takes ownership of a descriptor inherited at exec (e.g. the shim's fd 3), marking
/// it close-on-exec. `None` when the descriptor is not open.
pub fn take_inherited_fd(fd: i32) -> Option<OwnedFd> {
    use std::os::fd::FromRawFd;
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).ok()?;
    let _ = nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFD(
            nix::fcntl::FdFlag::from_bits_truncate(flags) | nix::fcntl::FdFlag::FD_CLOEXEC,
        ),
    );
    // SAFETY: F_GETFD succeeded, so `fd` is open; it was inherited across exec, so no
    // other object in this process owns it. Callers take each inherited fd once.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Points the given standard descriptors (0, 1, 2) at `/dev/null`, e.g. so a
/// process's own copies do not keep a pipe open. Best effort.
pub fn stdio_to_null(fds: &[i32]) {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in fds {
            let _ = nix::unistd::dup2(null.as_raw_fd(), *fd);
        }
    }
}

/// Start time of a process in clock ticks since boot (field 22 of `/proc/PID/stat`),
/// used with the pid to tell a process from a later one that reused its pid.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Parent pid of a process, from `/proc/PID/stat`.
pub fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// True when `pid` runs (is not a zombie) and started at `ticks`.
pub fn is_same_process(pid: u32, ticks: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 2..].split(' ');
    let state = fields.next().unwrap_or("X");
    let started = fields.nth(18).and_then(|t| t.parse::<u64>().ok());
    !matches!(state, "Z" | "X" | "x") && started == Some(ticks)
}

/// Sets this process's oom_score_adj (raising it needs no privilege).
pub fn set_oom_score_adj(value: i32) -> Result<()> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string()).map_err(|e| SysError {
        call: "write",
        args: "/proc/self/oom_score_adj".into(),
        source: e,
    })
}

/// Resets every signal disposition to the default and unblocks all signals, so a
/// program started after fork does not inherit our ignored SIGPIPE or blocked SIGCHLD.
pub fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL runs no code of ours; invalid numbers (32, 33 used
        // by libc) fail harmlessly with EINVAL.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
}

/// Ends the process at once without running destructors or atexit handlers (for a
/// forked child whose exec failed).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no process state we rely on.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_start_time_and_parent() {
        let me = std::process::id();
        let t = start_ticks(me).expect("own start time");
        assert!(is_same_process(me, t));
        assert!(!is_same_process(me, t + 1));
        assert_eq!(parent_pid(me), Some(std::os::unix::process::parent_id()));
    }

    #[test]
    fn refuses_to_clone_when_threaded() {
        // The test harness runs tests on threads, so this process is multi-threaded.
        let err = fork().err().expect("must refuse");
        assert!(err.to_string().contains("single-threaded"), "{err}");
    }
}
