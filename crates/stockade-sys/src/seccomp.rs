//! The seccomp allowlist applied to sandboxed code.
//!
//! What ordinary interpreters (CPython, Node, shells, compilers) need is allowed;
//! everything else fails with `EPERM`. Not allowed, among others: `io_uring_*`,
//! `userfaultfd`, `bpf`, `perf_event_open`, `keyctl`/`add_key`/`request_key`, `ptrace`,
//! `process_vm_*`, `mount` and the new mount API, `pivot_root`, `unshare`, `setns`,
//! `open_by_handle_at`, kernel modules, `kexec_*`, `reboot`, `swapon`, clock setting.
//! `clone` is allowed only without namespace flags; `clone3` returns `ENOSYS` (its flags
//! sit behind a pointer seccomp cannot read), so libc falls back to `clone`.
//!
//! Sockets: only the address families a sandbox needs. `AF_UNIX`, `AF_INET` and
//! `AF_INET6` (a sandbox without network has only its own loopback, which local servers
//! and test suites use), and `AF_NETLINK` with protocol `NETLINK_ROUTE` only (what
//! `getifaddrs` uses, answering for the sandbox's own network namespace). Every other
//! family (vsock, packet, bluetooth, alg, rds, tipc, xdp, can, other netlink protocols,
//! ...) fails with `EPERM`; `socketpair` is `AF_UNIX` only.
//!
//! Machine-wide and per-user kernel resources that one sandbox could exhaust for
//! everyone else answer `ENOSYS`, as if the kernel lacked them, so libraries fall back
//! to their portable paths: native AIO (`io_setup` takes from the machine-wide
//! `fs.aio-max-nr`) and POSIX message queues (charged to the uid's `RLIMIT_MSGQUEUE`,
//! shared by every sandbox running as that uid).
//!
//! Setuid and setgid bits cannot be set: `chmod`, `mknod` and the creating forms of
//! `open`/`openat`/`creat` fail with `EPERM` when the mode carries one, and `openat2`
//! (whose mode seccomp cannot read) answers `ENOSYS`. A file made in a writable mount
//! belongs on the host to the mount's owner, who may be root.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::{Result, SysError};

macro_rules! syscalls {
    ($($name:ident),* $(,)?) => { &[$((stringify!($name), libc::$name)),*] };
}

/// Syscalls allowed on every architecture.
const COMMON: &[(&str, libc::c_long)] = syscalls![
    SYS_accept,
    SYS_accept4,
    SYS_bind,
    SYS_brk,
    SYS_capget,
    SYS_capset,
    SYS_chdir,
    SYS_clock_getres,
    SYS_clock_gettime,
    SYS_clock_nanosleep,
    SYS_close,
    SYS_close_range,
    SYS_connect,
    SYS_copy_file_range,
    SYS_dup,
    SYS_dup3,
    SYS_epoll_create1,
    SYS_epoll_ctl,
    SYS_epoll_pwait,
    SYS_epoll_pwait2,
    SYS_eventfd2,
    SYS_execve,
    SYS_execveat,
    SYS_exit,
    SYS_exit_group,
    SYS_faccessat,
    SYS_faccessat2,
    SYS_fadvise64,
    SYS_fallocate,
    SYS_fchdir,
    SYS_fchmod,
    SYS_fchmodat,
    SYS_fchown,
    SYS_fchownat,
    SYS_fcntl,
    SYS_fdatasync,
    SYS_fgetxattr,
    SYS_flistxattr,
    SYS_flock,
    SYS_fremovexattr,
    SYS_fsetxattr,
    SYS_fstat,
    SYS_fstatfs,
    SYS_fsync,
    SYS_ftruncate,
    SYS_futex,
    SYS_futex_waitv,
    SYS_get_mempolicy,
    SYS_get_robust_list,
    SYS_getcpu,
    SYS_getcwd,
    SYS_getdents64,
    SYS_getegid,
    SYS_geteuid,
    SYS_getgid,
    SYS_getgroups,
    SYS_getitimer,
    SYS_getpeername,
    SYS_getpgid,
    SYS_getpid,
    SYS_getppid,
    SYS_getpriority,
    SYS_getrandom,
    SYS_getresgid,
    SYS_getresuid,
    SYS_getrlimit,
    SYS_getrusage,
    SYS_getsid,
    SYS_getsockname,
    SYS_getsockopt,
    SYS_gettid,
    SYS_gettimeofday,
    SYS_getuid,
    SYS_getxattr,
    SYS_inotify_add_watch,
    SYS_inotify_init1,
    SYS_inotify_rm_watch,
    SYS_ioctl,
    SYS_ioprio_get,
    SYS_ioprio_set,
    SYS_kill,
    SYS_landlock_add_rule,
    SYS_landlock_create_ruleset,
    SYS_landlock_restrict_self,
    SYS_lgetxattr,
    SYS_linkat,
    SYS_listen,
    SYS_listxattr,
    SYS_llistxattr,
    SYS_lremovexattr,
    SYS_lseek,
    SYS_lsetxattr,
    SYS_madvise,
    SYS_mbind,
    SYS_membarrier,
    SYS_memfd_create,
    SYS_mincore,
    SYS_mkdirat,
    SYS_mknodat,
    SYS_mlock,
    SYS_mlock2,
    SYS_mlockall,
    SYS_mmap,
    SYS_mprotect,
    SYS_mremap,
    SYS_msgctl,
    SYS_msgget,
    SYS_msgrcv,
    SYS_msgsnd,
    SYS_msync,
    SYS_munlock,
    SYS_munlockall,
    SYS_munmap,
    SYS_nanosleep,
    SYS_newfstatat,
    SYS_openat,
    SYS_pidfd_open,
    SYS_pidfd_send_signal,
    SYS_pipe2,
    SYS_ppoll,
    SYS_prctl,
    SYS_pread64,
    SYS_preadv,
    SYS_preadv2,
    SYS_prlimit64,
    SYS_pselect6,
    SYS_pwrite64,
    SYS_pwritev,
    SYS_pwritev2,
    SYS_read,
    SYS_readahead,
    SYS_readlinkat,
    SYS_readv,
    SYS_recvfrom,
    SYS_recvmmsg,
    SYS_recvmsg,
    SYS_remap_file_pages,
    SYS_removexattr,
    SYS_renameat,
    SYS_renameat2,
    SYS_restart_syscall,
    SYS_rseq,
    SYS_rt_sigaction,
    SYS_rt_sigpending,
    SYS_rt_sigprocmask,
    SYS_rt_sigqueueinfo,
    SYS_rt_sigreturn,
    SYS_rt_sigsuspend,
    SYS_rt_sigtimedwait,
    SYS_rt_tgsigqueueinfo,
    SYS_sched_get_priority_max,
    SYS_sched_get_priority_min,
    SYS_sched_getaffinity,
    SYS_sched_getattr,
    SYS_sched_getparam,
    SYS_sched_getscheduler,
    SYS_sched_rr_get_interval,
    SYS_sched_setaffinity,
    SYS_sched_setattr,
    SYS_sched_setparam,
    SYS_sched_setscheduler,
    SYS_sched_yield,
    SYS_seccomp,
    SYS_semctl,
    SYS_semget,
    SYS_semop,
    SYS_semtimedop,
    SYS_sendfile,
    SYS_sendmmsg,
    SYS_sendmsg,
    SYS_sendto,
    SYS_set_mempolicy,
    SYS_set_robust_list,
    SYS_set_tid_address,
    SYS_setfsgid,
    SYS_setfsuid,
    SYS_setgid,
    SYS_setgroups,
    SYS_setitimer,
    SYS_setpgid,
    SYS_setpriority,
    SYS_setregid,
    SYS_setresgid,
    SYS_setresuid,
    SYS_setreuid,
    SYS_setrlimit,
    SYS_setsid,
    SYS_setsockopt,
    SYS_setuid,
    SYS_setxattr,
    SYS_shmat,
    SYS_shmctl,
    SYS_shmdt,
    SYS_shmget,
    SYS_shutdown,
    SYS_sigaltstack,
    SYS_signalfd4,
    SYS_splice,
    SYS_statfs,
    SYS_statx,
    SYS_symlinkat,
    SYS_sync,
    SYS_sync_file_range,
    SYS_syncfs,
    SYS_sysinfo,
    SYS_tee,
    SYS_tgkill,
    SYS_timer_create,
    SYS_timer_delete,
    SYS_timer_getoverrun,
    SYS_timer_gettime,
    SYS_timer_settime,
    SYS_timerfd_create,
    SYS_timerfd_gettime,
    SYS_timerfd_settime,
    SYS_times,
    SYS_tkill,
    SYS_truncate,
    SYS_umask,
    SYS_uname,
    SYS_unlinkat,
    SYS_utimensat,
    SYS_wait4,
    SYS_waitid,
    SYS_write,
    SYS_writev,
];

/// Syscalls that answer `ENOSYS`: `clone3` (flags behind a pointer) and the shared
/// kernel resources a sandbox must not exhaust (see the module docs).
const NOT_IMPLEMENTED: &[(&str, libc::c_long)] = syscalls![
    SYS_clone3,
    SYS_openat2,
    SYS_io_cancel,
    SYS_io_destroy,
    SYS_io_getevents,
    SYS_io_setup,
    SYS_io_submit,
    SYS_mq_getsetattr,
    SYS_mq_notify,
    SYS_mq_open,
    SYS_mq_timedreceive,
    SYS_mq_timedsend,
    SYS_mq_unlink,
];

/// Socket address families allowed for any protocol.
const SOCKET_FAMILIES: &[libc::c_int] = &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];

/// Legacy syscalls that exist only on x86_64.
#[cfg(target_arch = "x86_64")]
const ARCH: &[(&str, libc::c_long)] = syscalls![
    SYS_access,
    SYS_alarm,
    SYS_arch_prctl,
    SYS_chmod,
    SYS_chown,
    SYS_creat,
    SYS_dup2,
    SYS_epoll_create,
    SYS_epoll_wait,
    SYS_eventfd,
    SYS_fork,
    SYS_futimesat,
    SYS_getdents,
    SYS_getpgrp,
    SYS_inotify_init,
    SYS_lchown,
    SYS_link,
    SYS_lstat,
    SYS_mkdir,
    SYS_mknod,
    SYS_open,
    SYS_pause,
    SYS_pipe,
    SYS_poll,
    SYS_readlink,
    SYS_rename,
    SYS_rmdir,
    SYS_select,
    SYS_signalfd,
    SYS_stat,
    SYS_symlink,
    SYS_time,
    SYS_unlink,
    SYS_utime,
    SYS_utimes,
    SYS_vfork,
];
#[cfg(not(target_arch = "x86_64"))]
const ARCH: &[(&str, libc::c_long)] = &[];

/// Namespace flags `clone` may not carry.
const CLONE_NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP
    | 0x80) as u64; // CLONE_NEWTIME

/// Names of the allowed syscalls, for reports and tests.
pub fn allowed_names() -> Vec<&'static str> {
    let mut v: Vec<_> = COMMON
        .iter()
        .chain(ARCH)
        .map(|(n, _)| n.trim_start_matches("SYS_"))
        .collect();
    v.extend(["clone", "socket", "socketpair"]);
    v.sort_unstable();
    v
}

/// One line for `inspect`: what the filter allows.
pub fn describe() -> String {
    format!(
        "allowlist of {} syscalls (others EPERM); sockets AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE only; no setuid/setgid mode bits; clone3, openat2, native AIO and POSIX message queues ENOSYS",
        allowed_names().len()
    )
}

fn target_arch() -> Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SysError::other("seccomp", std::env::consts::ARCH, e))
}

/// The compiled filters: the allowlist, and a second filter making `clone3` and the
/// [`NOT_IMPLEMENTED`] calls fail with `ENOSYS` (the strictest answer of all installed
/// filters wins).
pub struct Filters {
    allowlist: BpfProgram,
    clone3: BpfProgram,
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule> {
    SeccompRule::new(conditions).map_err(|e| SysError::other("seccomp", "rule", e))
}

fn arg_eq(arg: u8, value: libc::c_int) -> Result<SeccompCondition> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        value as u32 as u64,
    )
    .map_err(|e| SysError::other("seccomp", "condition", e))
}

/// Setuid and setgid mode bits.
const SET_ID_BITS: u64 = (libc::S_ISUID | libc::S_ISGID) as u64;
/// Open flags that create a file (`O_TMPFILE` without `O_DIRECTORY`'s bit).
const CREATING: u64 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u64;

fn masked_zero(arg: u8, mask: u64) -> Result<SeccompCondition> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        0,
    )
    .map_err(|e| SysError::other("seccomp", "condition", e))
}

/// Rules that refuse setuid and setgid bits wherever a mode is given (chmod, and
/// creating a file): a file the sandbox makes in a writable mount is owned on the host
/// by the mount's owner (root, maybe), so such a bit would be a way up on the host.
/// `openat2` (its mode sits behind a pointer) answers `ENOSYS` instead.
fn no_set_id_bits() -> Result<Vec<(i64, Vec<SeccompRule>)>> {
    let mode_at = |nr: libc::c_long, arg: u8| -> Result<(i64, Vec<SeccompRule>)> {
        Ok((nr, vec![rule(vec![masked_zero(arg, SET_ID_BITS)?])?]))
    };
    let open_at = |nr: libc::c_long, flags: u8, mode: u8| -> Result<(i64, Vec<SeccompRule>)> {
        Ok((
            nr,
            vec![
                rule(vec![masked_zero(flags, CREATING)?])?,
                rule(vec![masked_zero(mode, SET_ID_BITS)?])?,
            ],
        ))
    };
    let mut v = vec![
        mode_at(libc::SYS_fchmod, 1)?,
        mode_at(libc::SYS_fchmodat, 2)?,
        mode_at(libc::SYS_mknodat, 2)?,
        open_at(libc::SYS_openat, 2, 3)?,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        mode_at(libc::SYS_chmod, 1)?,
        mode_at(libc::SYS_creat, 1)?,
        mode_at(libc::SYS_mknod, 1)?,
        open_at(libc::SYS_open, 1, 2)?,
    ]);
    Ok(v)
}

/// Builds the filters.
pub fn build() -> Result<Filters> {
    let arch = target_arch()?;
    // The ENOSYS calls pass the allowlist, so that the second filter's answer is the
    // one that counts (the strictest answer wins, and EPERM would win over ENOSYS).
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = COMMON
        .iter()
        .chain(ARCH)
        .chain(NOT_IMPLEMENTED)
        .map(|(_, nr)| (*nr, vec![]))
        .collect();
    let no_ns = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(CLONE_NAMESPACE_FLAGS),
        0,
    )
    .and_then(|c| SeccompRule::new(vec![c]))
    .map_err(|e| SysError::other("seccomp", "clone rule", e))?;
    rules.insert(libc::SYS_clone, vec![no_ns]);
    for (nr, rules_of) in no_set_id_bits()? {
        rules.insert(nr, rules_of);
    }
    let mut socket = SOCKET_FAMILIES
        .iter()
        .map(|f| rule(vec![arg_eq(0, *f)?]))
        .collect::<Result<Vec<_>>>()?;
    socket.push(rule(vec![
        arg_eq(0, libc::AF_NETLINK)?,
        arg_eq(2, libc::NETLINK_ROUTE)?,
    ])?);
    rules.insert(libc::SYS_socket, socket);
    rules.insert(
        libc::SYS_socketpair,
        vec![rule(vec![arg_eq(0, libc::AF_UNIX)?])?],
    );
    let allow = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SysError::other("seccomp", "allowlist", e))?;
    let clone3 = SeccompFilter::new(
        NOT_IMPLEMENTED
            .iter()
            .map(|(_, nr)| (*nr, vec![]))
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SysError::other("seccomp", "clone3", e))?;
    Ok(Filters {
        allowlist: allow,
        clone3,
    })
}

impl Filters {
    /// Installs both filters on the calling thread. Needs no_new_privs (or CAP_SYS_ADMIN).
    pub fn apply(&self) -> Result<()> {
        seccompiler::apply_filter(&self.clone3)
            .map_err(|e| SysError::other("seccomp", "clone3 filter", e))?;
        seccompiler::apply_filter(&self.allowlist)
            .map_err(|e| SysError::other("seccomp", "allowlist", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangerous_syscalls_are_not_allowed() {
        let allowed = allowed_names();
        for bad in [
            "io_uring_setup",
            "userfaultfd",
            "bpf",
            "perf_event_open",
            "keyctl",
            "add_key",
            "request_key",
            "ptrace",
            "process_vm_readv",
            "mount",
            "umount2",
            "pivot_root",
            "unshare",
            "setns",
            "open_by_handle_at",
            "init_module",
            "kexec_load",
            "reboot",
            "swapon",
            "move_mount",
            "fsopen",
            "io_setup",
            "io_submit",
            "mq_open",
            "clone3",
        ] {
            assert!(!allowed.contains(&bad), "{bad} must not be allowed");
        }
        for good in [
            "read", "write", "execve", "clone", "futex", "mmap", "openat",
        ] {
            assert!(allowed.contains(&good), "{good} must be allowed");
        }
    }

    #[test]
    fn filters_compile() {
        build().unwrap();
    }
}
