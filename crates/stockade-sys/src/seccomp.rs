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
//!
//! Three filters carry this. The allowlist itself is a binary search over the allowed
//! syscall numbers, built here ([`allowlist_program`]): seccompiler emits one
//! comparison chain per syscall, 1,458 instructions for this list, and the kernel runs
//! a new filter once per syscall number when it is installed (to cache the calls it
//! always allows), which took 0.6 ms in every shim and zygote; a search of the 34
//! runs of consecutive allowed numbers takes about 20 instructions per number. The argument checks (clone's flags,
//! modes, socket families) are a second filter that seccompiler builds from rules
//! saying what is refused, allowing everything else; the third answers `ENOSYS`. The
//! strictest answer of the three wins, so a call runs only if the allowlist has it and
//! its arguments pass. A test runs the filters on a BPF interpreter against the
//! single filter seccompiler builds from the same rules, for every syscall number
//! and thousands of argument values.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
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

/// The compiled filters: the allowlist (syscall numbers only), the argument checks of
/// the calls it allows on conditions, and a filter making `clone3` and the
/// [`NOT_IMPLEMENTED`] calls fail with `ENOSYS` (the strictest answer of all installed
/// filters wins).
pub struct Filters {
    allowlist: BpfProgram,
    arguments: BpfProgram,
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

/// The allowed syscalls and, for some, the conditions on their arguments under which
/// they are allowed (a call is allowed when any rule of its list holds; an empty list
/// allows it outright). The [`NOT_IMPLEMENTED`] calls pass here, so that the `ENOSYS`
/// filter's answer is the one that counts (the strictest answer wins, and `EPERM`
/// would win over `ENOSYS`).
fn allowed_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>> {
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
    Ok(rules)
}

/// `arg & bit == bit`, one condition per bit of `mask`: any of them holding is
/// `arg & mask != 0`, which seccompiler's comparisons cannot say in one.
fn bits_set(arg: u8, len: SeccompCmpArgLen, mask: u64) -> Result<Vec<SeccompCondition>> {
    (0..64)
        .map(|i| 1u64 << i)
        .filter(|bit| mask & bit != 0)
        .map(|bit| {
            SeccompCondition::new(arg, len.clone(), SeccompCmpOp::MaskedEq(bit), bit)
                .map_err(|e| SysError::other("seccomp", "condition", e))
        })
        .collect()
}

fn arg_ne(arg: u8, value: libc::c_int) -> Result<SeccompCondition> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        value as u32 as u64,
    )
    .map_err(|e| SysError::other("seccomp", "condition", e))
}

/// What [`allowed_rules`]' conditions refuse, as rules that match a refused call (the
/// negation of each list, written out): namespace flags on `clone`, a setuid or
/// setgid bit in a mode (for `open`/`openat` only when the call creates), a socket
/// family other than the allowed ones.
/// The calls that would give a file a setuid or setgid bit (chmod, creating a file
/// with such a mode, mknod), each with the conditions under which it is refused.
fn set_id_refusals() -> Result<BTreeMap<i64, Vec<SeccompRule>>> {
    let set_id = |arg: u8| -> Result<Vec<SeccompRule>> {
        bits_set(arg, SeccompCmpArgLen::Dword, SET_ID_BITS)?
            .into_iter()
            .map(|c| rule(vec![c]))
            .collect()
    };
    let creating_set_id = |flags: u8, mode: u8| -> Result<Vec<SeccompRule>> {
        let mut v = Vec::new();
        for creates in bits_set(flags, SeccompCmpArgLen::Dword, CREATING)? {
            for bit in bits_set(mode, SeccompCmpArgLen::Dword, SET_ID_BITS)? {
                v.push(rule(vec![creates.clone(), bit])?);
            }
        }
        Ok(v)
    };
    let mut refused = BTreeMap::new();
    refused.insert(libc::SYS_fchmod, set_id(1)?);
    refused.insert(libc::SYS_fchmodat, set_id(2)?);
    refused.insert(SYS_FCHMODAT2, set_id(2)?);
    refused.insert(libc::SYS_mknodat, set_id(2)?);
    refused.insert(libc::SYS_openat, creating_set_id(2, 3)?);
    #[cfg(target_arch = "x86_64")]
    {
        refused.insert(libc::SYS_chmod, set_id(1)?);
        refused.insert(libc::SYS_creat, set_id(1)?);
        refused.insert(libc::SYS_mknod, set_id(1)?);
        refused.insert(libc::SYS_open, creating_set_id(1, 2)?);
    }
    Ok(refused)
}

/// `fchmodat2` (Linux 6.6), the same number on every architecture; not in libc yet.
const SYS_FCHMODAT2: i64 = 452;

/// The filter every exec runs under even when its sandbox turned seccomp off: no
/// setuid or setgid bit on any file (a file the code makes in a writable mount lands
/// on the host, owned by the mount's owner, maybe root), and `openat2` (its mode sits
/// behind a pointer) answers `ENOSYS`. Everything else is allowed.
pub struct Floor {
    set_id: BpfProgram,
    openat2: BpfProgram,
}

/// Builds [`Floor`].
pub fn build_floor() -> Result<Floor> {
    let arch = target_arch()?;
    let set_id = SeccompFilter::new(
        set_id_refusals()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SysError::other("seccomp", "setuid floor", e))?;
    let openat2 = SeccompFilter::new(
        [(libc::SYS_openat2, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SysError::other("seccomp", "openat2 floor", e))?;
    Ok(Floor { set_id, openat2 })
}

impl Floor {
    /// Installs the floor on the calling thread. Needs no_new_privs or CAP_SYS_ADMIN
    /// in the caller's user namespace (before the capabilities go).
    pub fn apply(&self) -> Result<()> {
        seccompiler::apply_filter(&self.openat2)
            .map_err(|e| SysError::other("seccomp", "openat2 floor", e))?;
        seccompiler::apply_filter(&self.set_id)
            .map_err(|e| SysError::other("seccomp", "setuid floor", e))
    }
}

fn refused_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    refused.insert(
        libc::SYS_clone,
        bits_set(0, SeccompCmpArgLen::Qword, CLONE_NAMESPACE_FLAGS)?
            .into_iter()
            .map(|c| rule(vec![c]))
            .collect::<Result<_>>()?,
    );
    refused.extend(set_id_refusals()?);
    let mut other_family = SOCKET_FAMILIES
        .iter()
        .map(|f| arg_ne(0, *f))
        .collect::<Result<Vec<_>>>()?;
    other_family.push(arg_ne(0, libc::AF_NETLINK)?);
    refused.insert(
        libc::SYS_socket,
        vec![
            rule(other_family)?,
            rule(vec![
                arg_eq(0, libc::AF_NETLINK)?,
                arg_ne(2, libc::NETLINK_ROUTE)?,
            ])?,
        ],
    );
    refused.insert(
        libc::SYS_socketpair,
        vec![rule(vec![arg_ne(0, libc::AF_UNIX)?])?],
    );
    Ok(refused)
}

// Classic BPF instruction codes (linux/bpf_common.h).
/// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `struct seccomp_data`.
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JA`: jump `k` instructions ahead.
const BPF_JMP_JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const BPF_JMP_JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGT | BPF_K`.
const BPF_JMP_JGT_K: u16 = 0x25;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const BPF_JMP_JGE_K: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const BPF_RET_K: u16 = 0x06;
/// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The allowlist as a filter on syscall numbers alone: another architecture kills the
/// process (as seccompiler's filters do), a number in `allowed` is allowed, any other
/// is refused with `EPERM`. A binary search over the runs of consecutive allowed
/// numbers: about 2 log2(runs) + 3 instructions per call.
fn allowlist_program(audit_arch: u32, allowed: impl IntoIterator<Item = u32>) -> BpfProgram {
    let mut numbers: Vec<u32> = allowed.into_iter().collect();
    numbers.sort_unstable();
    numbers.dedup();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for n in numbers {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == n => *hi = n,
            _ => runs.push((n, n)),
        }
    }
    let deny = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let mut prog = vec![
        stmt(BPF_LD_W_ABS, DATA_ARCH),
        jump(BPF_JMP_JEQ_K, audit_arch, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, DATA_NR),
    ];
    if runs.is_empty() {
        prog.push(stmt(BPF_RET_K, deny));
        return prog;
    }
    prog.extend(search(&runs, deny));
    prog
}

/// The search below one node: with `runs` split in two, numbers from the first run of
/// the second half on go right (over the left half's code, by an unconditional jump:
/// conditional jumps reach only 255 instructions), the rest left; a single run checks
/// both its bounds.
fn search(runs: &[(u32, u32)], deny: u32) -> Vec<sock_filter> {
    if let [(lo, hi)] = runs {
        return vec![
            jump(BPF_JMP_JGE_K, *lo, 0, 2),
            jump(BPF_JMP_JGT_K, *hi, 1, 0),
            stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            stmt(BPF_RET_K, deny),
        ];
    }
    let mid = runs.len() / 2;
    let left = search(&runs[..mid], deny);
    let right = search(&runs[mid..], deny);
    let mut v = Vec::with_capacity(left.len() + right.len() + 2);
    v.push(jump(BPF_JMP_JGE_K, runs[mid].0, 0, 1));
    v.push(stmt(BPF_JMP_JA, left.len() as u32));
    v.extend(left);
    v.extend(right);
    v
}

/// Builds the filters.
pub fn build() -> Result<Filters> {
    let arch = target_arch()?;
    let allowed = allowed_rules()?;
    let allowlist = allowlist_program(audit_arch(arch), allowed.keys().map(|nr| *nr as u32));
    let arguments = SeccompFilter::new(
        refused_rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SysError::other("seccomp", "argument checks", e))?;
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
        allowlist,
        arguments,
        clone3,
    })
}

/// The `AUDIT_ARCH_*` value seccomp reports for `arch` (seccompiler's own filters
/// check the same).
fn audit_arch(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::x86_64 => 62 | 0x8000_0000 | 0x4000_0000,
        TargetArch::aarch64 => 183 | 0x8000_0000 | 0x4000_0000,
        TargetArch::riscv64 => 243 | 0x8000_0000 | 0x4000_0000,
    }
}

impl Filters {
    /// Installs both filters on the calling thread. Needs no_new_privs (or CAP_SYS_ADMIN).
    pub fn apply(&self) -> Result<()> {
        seccompiler::apply_filter(&self.clone3)
            .map_err(|e| SysError::other("seccomp", "clone3 filter", e))?;
        seccompiler::apply_filter(&self.allowlist)
            .map_err(|e| SysError::other("seccomp", "allowlist", e))?;
        seccompiler::apply_filter(&self.arguments)
            .map_err(|e| SysError::other("seccomp", "argument checks", e))
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

    /// Runs a classic BPF program on `struct seccomp_data` (the instructions
    /// seccompiler and [`allowlist_program`] emit; any other fails the test). Returns
    /// the action and the number of instructions run.
    fn run(prog: &[sock_filter], data: &[u8; 64]) -> (u32, usize) {
        let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
        loop {
            let i = &prog[pc];
            steps += 1;
            let (jt, jf) = (pc + 1 + i.jt as usize, pc + 1 + i.jf as usize);
            pc = match i.code {
                0x20 => {
                    let k = i.k as usize;
                    a = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                    pc + 1
                }
                0x54 => {
                    a &= i.k;
                    pc + 1
                }
                0x05 => pc + 1 + i.k as usize,
                0x15 => {
                    if a == i.k {
                        jt
                    } else {
                        jf
                    }
                }
                0x25 => {
                    if a > i.k {
                        jt
                    } else {
                        jf
                    }
                }
                0x35 => {
                    if a >= i.k {
                        jt
                    } else {
                        jf
                    }
                }
                0x06 => return (i.k, steps),
                code => panic!("instruction {code:#x} is not modelled"),
            };
        }
    }

    /// What the kernel decides for a stack of filters (in the order installed): the
    /// most restrictive action; among equal ones, the first filter run (the newest).
    fn decide(stack: &[&BpfProgram], data: &[u8; 64]) -> u32 {
        let mut decided: Option<u32> = None;
        for prog in stack.iter().rev() {
            let (ret, _) = run(prog, data);
            let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
            if decided.is_none_or(|d| action(ret) < action(d)) {
                decided = Some(ret);
            }
        }
        decided.unwrap()
    }

    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_le_bytes());
        d[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        d
    }

    /// The filters decide every call exactly as the single filter seccompiler builds
    /// from the same rules (what Stockade installed before the allowlist became a
    /// search): every syscall number (and x32's, and numbers past any table) with a
    /// few argument sets, and the calls with conditions with thousands.
    #[test]
    fn the_split_filters_decide_as_the_single_one_does() {
        let arch = target_arch().unwrap();
        let reference = BpfProgram::try_from(
            SeccompFilter::new(
                allowed_rules().unwrap(),
                SeccompAction::Errno(libc::EPERM as u32),
                SeccompAction::Allow,
                arch,
            )
            .unwrap(),
        )
        .unwrap();
        let f = build().unwrap();
        let old = [&f.clone3, &reference];
        let new = [&f.clone3, &f.allowlist, &f.arguments];
        assert!(
            reference.len() > 3 * f.allowlist.len(),
            "{} vs {}",
            reference.len(),
            f.allowlist.len()
        );
        let audit = audit_arch(arch);
        let conditioned: Vec<u32> = refused_rules().unwrap().keys().map(|n| *n as u32).collect();
        // Values that sit on the conditions' edges: every single bit, the masks, the
        // socket families and netlink protocols, all ones.
        let mut values: Vec<u64> = (0..64).map(|i| 1u64 << i).collect();
        values.extend(0..64);
        values.extend([
            SET_ID_BITS,
            CREATING,
            CREATING | SET_ID_BITS,
            CLONE_NAMESPACE_FLAGS,
            0o644,
            0o4755,
            0o2755,
            libc::O_TMPFILE as u64,
            libc::O_DIRECTORY as u64,
            (libc::O_CREAT | libc::O_WRONLY) as u64,
            libc::SIGCHLD as u64,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
        ]);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut checked = 0;
        let numbers = (0..1024u32).chain(0x4000_0000..0x4000_0000 + 600).chain([
            u32::MAX,
            u32::MAX - 1,
            0x7fff_ffff,
        ]);
        for nr in numbers {
            let mut sets: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6], [7, 1, 2, 3, 4, 5]];
            if conditioned.contains(&nr) {
                // Each argument through every value, the others at a few bases...
                for pos in 0..4 {
                    for base in [0u64, u64::MAX, libc::AF_NETLINK as u64] {
                        for v in &values {
                            let mut args = [base; 6];
                            args[pos] = *v;
                            sets.push(args);
                        }
                    }
                }
                // ...and random combinations of them.
                for _ in 0..3000 {
                    let mut args = [0u64; 6];
                    for a in &mut args {
                        let r = next();
                        *a = if r % 4 == 0 {
                            r
                        } else {
                            values[(r >> 8) as usize % values.len()]
                        };
                    }
                    sets.push(args);
                }
            }
            for args in sets {
                let d = data(audit, nr, args);
                assert_eq!(
                    decide(&new, &d),
                    decide(&old, &d),
                    "syscall {nr} with {args:x?}"
                );
                checked += 1;
            }
        }
        // Another architecture is killed by both.
        let d = data(0x4000_0003, 1, [0; 6]);
        assert_eq!(decide(&new, &d), libc::SECCOMP_RET_KILL_PROCESS);
        assert_eq!(decide(&old, &d), libc::SECCOMP_RET_KILL_PROCESS);
        assert!(checked > 30_000, "{checked}");
    }

    /// The allowlist is a search: no syscall number runs through more than a few
    /// dozen instructions of it, where the chain of one comparison per syscall ran
    /// through hundreds.
    #[test]
    fn the_allowlist_is_a_short_search() {
        let arch = target_arch().unwrap();
        let f = build().unwrap();
        let most = (0..1024u32)
            .map(|nr| run(&f.allowlist, &data(audit_arch(arch), nr, [0; 6])).1)
            .max()
            .unwrap();
        assert!(most <= 24, "{most} instructions for one syscall number");
        // An empty list refuses everything (and still checks the architecture).
        let none = allowlist_program(audit_arch(arch), []);
        assert_eq!(
            run(&none, &data(audit_arch(arch), 0, [0; 6])).0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
        );
    }
}
