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
        .map(Iterator::count)
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

/// Fork whose child is our parent's child (`CLONE_PARENT`), for single-threaded
/// callers: the agent's exec zygote makes shims that are PID 1's own children, reaped
/// by PID 1 like the ones it spawns itself. Fails with `EINVAL` in an init process.
pub fn fork_sibling() -> Result<Forked> {
    fork_into(CloneFlags::CLONE_PARENT)
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

/// `struct __user_cap_header_struct`.
#[repr(C)]
pub(crate) struct CapHeader {
    pub(crate) version: u32,
    pub(crate) pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (version 3 takes two: capabilities 0-31, 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct CapData {
    pub(crate) effective: u32,
    pub(crate) permitted: u32,
    pub(crate) inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`.
pub(crate) const CAP_V3: u32 = 0x2008_0522;
const CAP_NET_ADMIN: u32 = 12;

/// Makes the child spawned by `cmd` enter the user namespace `userns` (one the caller
/// owns) and the network namespace `netns` (owned by it), and keep `CAP_NET_ADMIN` there
/// across exec as an ambient capability, for a caller that is not root (rootless
/// sandboxes' firewall: `nft` in the sandbox's own network namespace).
pub fn enter_with_net_admin(cmd: &mut Command, userns: OwnedFd, netns: OwnedFd) {
    let (u, n) = (userns.as_raw_fd(), netns.as_raw_fd());
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls (setns, capget, capset, prctl) on stack data; the
    // two fds are moved into the closure, so they are open through the fork (and
    // close-on-exec, so the program does not inherit them).
    unsafe {
        cmd.pre_exec(move || {
            let _keep = (&userns, &netns);
            let last = || Err(std::io::Error::last_os_error());
            if libc::setns(u, libc::CLONE_NEWUSER) != 0 || libc::setns(n, libc::CLONE_NEWNET) != 0 {
                return last();
            }
            let mut head = CapHeader {
                version: CAP_V3,
                pid: 0,
            };
            let mut data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capget, &raw mut head, data.as_mut_ptr()) != 0 {
                return last();
            }
            data[0].inheritable |= 1 << CAP_NET_ADMIN;
            if libc::syscall(libc::SYS_capset, &raw mut head, data.as_ptr()) != 0 {
                return last();
            }
            let raise = libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong;
            if libc::prctl(
                libc::PR_CAP_AMBIENT,
                raise,
                CAP_NET_ADMIN as libc::c_ulong,
                0,
                0,
            ) != 0
            {
                return last();
            }
            Ok(())
        });
    }
}

/// `close_range(first, ~0, flags)`; false when the kernel refuses it (older than
/// 5.9, or 5.11 for `CLOSE_RANGE_CLOEXEC`).
fn close_range(first: u32, flags: libc::c_uint) -> bool {
    // SAFETY: close_range only closes (or marks close-on-exec) descriptors of this
    // process; callers own every descriptor at or above `first` (see the callers'
    // contracts), so no Rust object is left with a closed fd it still uses.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            flags,
        ) == 0
    }
}

/// Open descriptors of this process at or above `first`, from `/proc/self/fd`.
fn open_fds_from(first: i32) -> Vec<i32> {
    let mut fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|fd| *fd >= first)
                .collect()
        })
        .unwrap_or_default();
    fds.sort_unstable();
    fds
}

/// Closes every descriptor at or above `first` (`close_range`, else a walk of
/// `/proc/self/fd`). For the start of a program that must hold nothing its caller
/// left open: the caller must own no `OwnedFd`/`File` at or above `first` yet.
pub fn close_fds_from(first: u32) {
    if close_range(first, 0) {
        return;
    }
    for fd in open_fds_from(first as i32) {
        // SAFETY: as above; a stale entry (the walk's own directory fd, already closed)
        // fails with EBADF harmlessly.
        unsafe { libc::close(fd) };
    }
}

/// Like [`close_fds_from`], but leaves `keep` (a descriptor at or above `first`) open.
pub fn close_fds_from_except(first: u32, keep: Option<u32>) {
    match keep {
        Some(k) if k >= first => {
            if k > first {
                // SAFETY: as in close_range: the caller owns every descriptor in
                // [first, k), and no Rust object uses one of them afterwards.
                let ok = unsafe {
                    libc::syscall(
                        libc::SYS_close_range,
                        first as libc::c_uint,
                        (k - 1) as libc::c_uint,
                        0 as libc::c_uint,
                    ) == 0
                };
                if !ok {
                    for fd in open_fds_from(first as i32) {
                        if fd >= k as i32 {
                            break;
                        }
                        // SAFETY: as in close_fds_from.
                        unsafe { libc::close(fd) };
                    }
                }
            }
            close_fds_from(k + 1);
        }
        _ => close_fds_from(first),
    }
}

/// Marks every descriptor at or above `first` close-on-exec (`close_range` with
/// `CLOSE_RANGE_CLOEXEC`, else `fcntl` over `/proc/self/fd`): the last step before an
/// `execve` that must start with stdio only, which keeps the descriptors usable until
/// the exec (e.g. a pipe that reports a failed exec). Single-threaded callers only
/// (the walk allocates).
pub fn cloexec_fds_from(first: u32) -> Result<()> {
    if close_range(first, libc::CLOSE_RANGE_CLOEXEC) {
        return Ok(());
    }
    for fd in open_fds_from(first as i32) {
        // SAFETY: F_SETFD only changes the close-on-exec flag of `fd`.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBADF) {
                return Err(SysError {
                    call: "fcntl",
                    args: format!("{fd}, F_SETFD, FD_CLOEXEC"),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// Makes the program spawned by `cmd` start with stdio only: in the child, before
/// exec, every descriptor from 3 up is marked close-on-exec, so nothing this process
/// inherited from its own caller without close-on-exec gets through. Call it before
/// [`pass_fd`] (closures run in the order they were added; a later `pass_fd` puts its
/// descriptor back).
pub fn spawn_with_stdio_only(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // raw system calls (close_range, open, getdents64 into a stack buffer, close,
    // getrlimit, fcntl), which are async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if close_range(3, libc::CLOSE_RANGE_CLOEXEC) {
                return Ok(());
            }
            // Without close_range (Linux < 5.11, gVisor): the open descriptors as
            // listed in /proc/self/fd, not every number up to RLIMIT_NOFILE (tens of
            // thousands of fcntl calls, each a round trip to gVisor's kernel on the
            // ptrace platform: 0.8 s per spawn).
            if for_each_open_fd_from(3, |fd| {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }) {
                return Ok(());
            }
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as i32
            } else {
                1 << 16
            };
            for fd in 3..max {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
            Ok(())
        });
    }
}

/// Calls `f` with each descriptor at or above `first` that this process has open,
/// read from `/proc/self/fd` with raw `open`/`getdents64` calls into a buffer on the
/// stack: async-signal-safe (no allocation), for a child between fork and exec.
/// Returns false when `/proc/self/fd` cannot be read (then nothing was called). The
/// walk's own descriptor is not passed to `f`; after a fork, `f` must be
/// async-signal-safe too.
fn for_each_open_fd_from(first: i32, mut f: impl FnMut(i32)) -> bool {
    // SAFETY: open of a constant NUL-terminated path; the descriptor is closed below.
    let dir = unsafe {
        libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`, which we own.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                buf.as_mut_ptr(),
                buf.len() as libc::c_uint,
            )
        };
        if n <= 0 {
            break;
        }
        let n = n as usize;
        let mut off = 0;
        // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name (NUL).
        while off + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen == 0 || off + reclen > n {
                break;
            }
            let mut fd: i32 = 0;
            let mut digits = 0;
            for &b in &buf[off + 19..off + reclen] {
                if !b.is_ascii_digit() {
                    break;
                }
                fd = fd.saturating_mul(10).saturating_add(i32::from(b - b'0'));
                digits += 1;
            }
            if digits > 0 && fd >= first && fd != dir {
                f(fd);
            }
            off += reclen;
        }
    }
    // SAFETY: `dir` is ours, opened above.
    unsafe { libc::close(dir) };
    true
}

/// What [`spawn_in_new_session`] and [`spawn_with_stdio_only`] do for a child, done
/// by the program itself as the first thing it does: a session of its own (no
/// controlling terminal, out of reach of its caller's Ctrl-C and hangup), and every
/// descriptor from 3 up closed (inherited ones: this program forks children that do
/// not exec, so close-on-exec would not keep them out). A launcher that leaves this
/// to the program spawns it without a `pre_exec` closure, so the standard library
/// can use `posix_spawn` (a vfork) instead of `fork`, whose cost grows with the
/// caller's memory (a Node or JVM process pays about a millisecond).
///
/// Call it first thing in `main`, before this process opens any descriptor of its
/// own.
pub fn detach_and_close_inherited() {
    // Fails only when already a group leader (then already detached by its launcher).
    let _ = nix::unistd::setsid();
    if !close_range(3, 0) {
        let max = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1 << 16, |(soft, _)| soft.min(1 << 20) as i32);
        for fd in 3..max {
            // Not owned by any object of this process yet (see above).
            let _ = nix::unistd::close(fd);
        }
    }
}

/// Makes the program spawned by `cmd` start in a session (and process group) of its
/// own, with no controlling terminal: a Ctrl-C or hangup of the caller's terminal does
/// not reach it. Do not combine with `process_group`, which makes the child a group
/// leader first (setsid then fails).
pub fn spawn_in_new_session(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and makes one raw
    // system call (setsid), which is async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
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

/// Resets every signal disposition to the default but SIGPIPE, which is ignored (as
/// Rust's runtime sets it), once, in the agent's exec zygote: its children then need
/// only [`reset_sigpipe_and_mask`] before they `execve`.
pub fn reset_signals_but_ignore_sigpipe() {
    reset_signals();
    // SAFETY: installing SIG_IGN runs no code of ours.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Resets SIGPIPE to the default and unblocks every signal: all [`reset_signals`]
/// does, for a process whose other dispositions are the defaults already (a child of
/// the agent's exec zygote, which reset them once, keeping SIGPIPE ignored).
pub fn reset_sigpipe_and_mask() {
    // SAFETY: installing SIG_DFL runs no code of ours.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
}

/// Resets every signal disposition to the default and unblocks all signals, so a
/// program started after fork does not inherit our ignored SIGPIPE or blocked SIGCHLD.
///
/// Only the signals `/proc/self/status` lists as ignored or caught are touched (a
/// few system calls instead of 62: under gVisor's ptrace platform each costs ~65 µs);
/// when that file cannot be read or parsed, every signal is. Allocates nothing, so it
/// is safe between fork and exec.
pub fn reset_signals() {
    let changed = non_default_signals().unwrap_or(u64::MAX);
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || changed & (1u64 << (sig - 1)) == 0 {
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

/// The signals whose disposition is not the default (`SigIgn | SigCgt` of
/// `/proc/self/status`, bit `n - 1` for signal `n`), read without allocating; `None`
/// when the file cannot be read or lacks either line.
fn non_default_signals() -> Option<u64> {
    let mut buf = [0u8; 4096];
    let len = read_own_status(&mut buf)?;
    parse_signal_masks(&buf[..len])
}

/// A hexadecimal field of `/proc/self/status` (e.g. `CapBnd:`), read with one `read`
/// into a stack buffer and parsed without allocating; `None` when the file cannot
/// be read or lacks the field.
pub fn own_status_hex(field: &[u8]) -> Option<u64> {
    let mut buf = [0u8; 4096];
    let len = read_own_status(&mut buf)?;
    buf[..len]
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(field))
        .and_then(parse_hex)
}

fn parse_hex(text: &[u8]) -> Option<u64> {
    let hex = text.trim_ascii();
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for c in hex {
        v = (v << 4) | u64::from((*c as char).to_digit(16)?);
    }
    Some(v)
}

/// Reads `/proc/self/status` into `buf` (the kernel writes it whole on the first
/// `read` when it fits); the number of bytes read.
fn read_own_status(buf: &mut [u8; 4096]) -> Option<usize> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/status".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reads into the unused tail of a buffer we own.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: closes the descriptor opened above, once.
    unsafe { libc::close(fd) };
    Some(len)
}

/// `SigIgn | SigCgt` from the text of a `/proc/PID/status` file.
fn parse_signal_masks(status: &[u8]) -> Option<u64> {
    let (mut ign, mut cgt) = (None, None);
    for line in status.split(|b| *b == b'\n') {
        let slot = if let Some(rest) = line.strip_prefix(b"SigIgn:") {
            (&mut ign, rest)
        } else if let Some(rest) = line.strip_prefix(b"SigCgt:") {
            (&mut cgt, rest)
        } else {
            continue;
        };
        *slot.0 = Some(parse_hex(slot.1)?);
    }
    Some(ign? | cgt?)
}

/// Ends the process at once without running destructors or atexit handlers (for a
/// forked child whose exec failed).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no process state we rely on.
    unsafe { libc::_exit(code) }
}

/// Now on `CLOCK_MONOTONIC`, in ns: one clock for every process of the host (none of
/// ours is in a time namespace), so steps timed in different processes line up.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fd_walk_lists_exactly_the_open_descriptors() {
        let a = std::fs::File::open("/dev/null").unwrap();
        let b = std::fs::File::open("/dev/null").unwrap();
        let (a, b) = (a.as_raw_fd(), b.as_raw_fd());
        let mut seen = Vec::new();
        assert!(for_each_open_fd_from(3, |fd| seen.push(fd)));
        seen.sort_unstable();
        // Other test threads open files too: ours are among them, nothing below 3 is.
        assert!(seen.contains(&a) && seen.contains(&b), "{seen:?}");
        assert!(seen.iter().all(|fd| *fd >= 3));
        let mut above = Vec::new();
        assert!(for_each_open_fd_from(a.max(b) + 1, |fd| above.push(fd)));
        assert!(!above.contains(&a) && !above.contains(&b), "{above:?}");
    }

    #[test]
    fn signal_masks_are_read_from_the_status_text() {
        let status =
            b"Name:\tx\nSigQ:\t0/1\nSigPnd:\t0000000000000000\nSigBlk:\t0000000000010000\n\
SigIgn:\t0000000000001000\nSigCgt:\t0000000180000600\nCapInh:\t0\n";
        // SIGPIPE (13) ignored; SIGUSR1 (10), SIGSEGV (11), 32 and 33 caught.
        assert_eq!(
            parse_signal_masks(status),
            Some((1 << 12) | (1 << 9) | (1 << 10) | (1 << 31) | (1 << 32))
        );
        assert_eq!(parse_signal_masks(b"SigIgn:\t0000000000001000\n"), None);
        assert_eq!(parse_signal_masks(b"SigIgn:\tzz\nSigCgt:\t0\n"), None);
        assert_eq!(parse_signal_masks(b""), None);
    }

    #[test]
    fn reset_signals_leaves_every_disposition_at_its_default() {
        // In a child: dispositions are per process, and the test harness has threads.
        // SAFETY: the child only calls async-signal-safe functions and exits.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: SIG_IGN runs no code; `on_signal` does nothing and is never
                // invoked (no signal is sent), it only makes SIGTERM caught.
                unsafe {
                    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                    libc::signal(libc::SIGUSR2, libc::SIG_IGN);
                    libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
                }
                let want = (1u64 << (libc::SIGPIPE - 1))
                    | (1 << (libc::SIGUSR2 - 1))
                    | (1 << (libc::SIGTERM - 1));
                if non_default_signals().map(|m| m & want) != Some(want) {
                    exit_now(100);
                }
                reset_signals();
                // 32 and 33 are glibc's own (thread cancellation, setxid): `signal`
                // refuses them, and exec resets them.
                let libc_own = (1u64 << 31) | (1 << 32);
                if non_default_signals().map(|m| m & !libc_own) != Some(0) {
                    exit_now(101);
                }
                let mut bad = 0;
                for sig in 1..=31 {
                    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                        continue;
                    }
                    // SAFETY: `sigaction` is plain data, valid all zeroes.
                    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
                    // SAFETY: reads the disposition into `old` only.
                    unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
                    if old.sa_sigaction != libc::SIG_DFL {
                        bad = sig;
                    }
                }
                exit_now(bad)
            }
            pid if pid > 0 => {
                let mut st = 0;
                // SAFETY: waits for the child forked above.
                unsafe { libc::waitpid(pid, &mut st, 0) };
                assert!(libc::WIFEXITED(st), "{st}");
                assert_eq!(libc::WEXITSTATUS(st), 0, "a signal kept its handler");
            }
            _ => panic!("fork: {}", std::io::Error::last_os_error()),
        }
    }

    extern "C" fn on_signal(_: libc::c_int) {}

    #[test]
    fn reads_own_start_time_and_parent() {
        let me = std::process::id();
        let t = start_ticks(me).expect("own start time");
        assert!(is_same_process(me, t));
        assert!(!is_same_process(me, t + 1));
        assert_eq!(parent_pid(me), Some(std::os::unix::process::parent_id()));
    }

    #[test]
    fn spawned_programs_start_with_stdio_only() {
        let f = std::fs::File::open("/").unwrap();
        let fd = f.as_raw_fd();
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .unwrap();
        let probe = format!("[ -e /proc/self/fd/{fd} ] && echo leaked; ls /proc/self/fd");
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &probe]);
        let leaky = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        assert!(leaky.contains("leaked"), "the fd was not planted: {leaky}");
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &probe]);
        spawn_with_stdio_only(&mut cmd);
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        assert_eq!(
            out.split_whitespace().collect::<Vec<_>>(),
            ["0", "1", "2", "3"],
            "{out}"
        );
    }

    #[test]
    fn refuses_to_clone_when_threaded() {
        // The test harness runs tests on threads, so this process is multi-threaded.
        let err = fork().err().expect("must refuse");
        assert!(err.to_string().contains("single-threaded"), "{err}");
    }
}
