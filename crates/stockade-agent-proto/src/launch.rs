//! The launch plan: everything the native provider decided about a sandbox, as data.
//!
//! The provider computes a [`LaunchPlan`] from a validated spec (pure code, unit-tested)
//! and hands it as JSON to `stockade-agent monitor`, which executes it mechanically:
//! cgroups, namespaces, mounts, pivot_root, then the agent as PID 1. This keeps policy
//! (what to mount, what to limit) apart from enforcement (the syscalls).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ErrorCode;

mod guest;
mod net;
mod state;

pub use guest::*;
pub use net::*;
pub use state::*;

/// A native sandbox to start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchPlan {
    /// Sandbox id.
    pub id: String,
    /// Host directory holding this sandbox's state (`state.json`, `agent.sock`, `root/`).
    pub state_dir: PathBuf,
    /// Hostname inside.
    pub hostname: String,
    /// Network setup.
    pub network: NetworkPlan,
    /// Cgroups to create and join.
    pub cgroups: CgroupPlan,
    /// Filesystem operations building the new root, in order. Targets are paths inside
    /// the sandbox; sources are host paths.
    pub mounts: Vec<MountOp>,
    /// Remount the new root read-only once built.
    pub readonly_root: bool,
    /// Absolute deadline (unix ms) at which everything is killed.
    pub expires_at_ms: u64,
    /// Kill the sandbox when this host process dies (the embedding caller).
    pub owner_pid: Option<u32>,
    /// Policy the agent applies to each exec.
    pub exec: ExecPolicy,
    /// The user's spec, stored as given for `inspect`.
    pub spec: serde_json::Value,
    /// Hardening this plan applies, reported by `inspect`.
    pub applied: Vec<crate::Wall>,
    /// Files the monitor holds a shared `flock` on for the sandbox's life, so that
    /// what they guard (an image's root filesystem) is not removed under it.
    #[serde(default)]
    pub hold_locks: Vec<PathBuf>,
    /// The sandbox's user namespace: where its host ids come from. `None` runs the
    /// sandbox without one (its uids are host uids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<UsernsPlan>,
}

/// How many ids (0 to 65535 inside) each sandbox's user namespace maps.
pub const ID_RANGE_SIZE: u32 = 65_536;

/// Where a sandbox's host ids come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsernsPlan {
    /// As root: a range leased from a pool (see [`IdPoolPlan`]); the user namespace is
    /// entered by PID 1 last, so it owns none of the sandbox's other namespaces.
    Pool(IdPoolPlan),
    /// Rootless: PID 1 is made in a new user namespace with these maps (the caller's
    /// own uid, plus its subordinate ids when it has some), and owns the others.
    Rootless(RootlessMaps),
}

/// A range of [`ID_RANGE_SIZE`] ids leased from a pool for the sandbox's life. A lease
/// is a lock file in `lease_dir` named by the range's first host id, locked (`flock`)
/// by the monitor and PID 1 while the sandbox lives: the kernel releases it however
/// they end, so no range is ever lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdPoolPlan {
    /// Directory of the lease files (shared by every sandbox of the host).
    pub lease_dir: PathBuf,
    /// First host id of the pool (a multiple of [`ID_RANGE_SIZE`]).
    pub pool_start: u32,
    /// Number of ranges in the pool.
    pub pool_ranges: u32,
}

/// One line of a uid or gid map: `count` ids from `inside` are host ids from `host`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapLine {
    pub inside: u32,
    pub host: u32,
    pub count: u32,
}

/// The maps of a rootless sandbox's user namespace and the setuid helpers that write
/// them (`newuidmap`/`newgidmap`, needed for more than the caller's own id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootlessMaps {
    pub uid_map: Vec<MapLine>,
    pub gid_map: Vec<MapLine>,
    /// `newuidmap` and `newgidmap`; `None`: the maps are one line each, the caller's
    /// own ids, written directly (supplementary groups then cannot be dropped).
    pub helpers: Option<(PathBuf, PathBuf)>,
}

/// How a bind mount's file owners appear inside a sandbox with a user namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdMap {
    /// Unmapped: owners appear as they are on the host, or as `nobody` where the host
    /// id has no sandbox id (device nodes).
    #[default]
    Host,
    /// Through the sandbox's own mapping: host root's files appear owned by root
    /// inside (the host view of `/usr`, an image's rootfs).
    Sandbox,
    /// The source's host owner appears as the exec user inside (and its group as the
    /// exec group); what the sandbox creates there is owned by that host owner.
    Owner,
}

impl IdMap {
    /// Whether this is the default ([`IdMap::Host`]), for serde.
    pub fn is_host(&self) -> bool {
        *self == IdMap::Host
    }
}

/// A cgroup directory to create, configure and join.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupDir {
    /// Absolute directory path (created, removed at destroy).
    pub path: PathBuf,
    /// Files written after creation, in order: (file name, value).
    pub settings: Vec<(String, String)>,
}

/// Cgroups of a sandbox (one per v1 controller, or one v2 group, plus a v2 group for
/// `cgroup.kill` on hybrid hosts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupPlan {
    /// Directories created and joined, in order.
    pub dirs: Vec<CgroupDir>,
    /// Parent directories that must exist (created if missing), with settings applied
    /// once (e.g. `cgroup.subtree_control` on pure v2).
    pub parents: Vec<CgroupDir>,
    /// The `cgroup.kill` file that kills every process of the sandbox, when available.
    pub kill_file: Option<PathBuf>,
    /// Where the OOM kill counter of the sandbox is read.
    pub oom_counter: Option<OomCounter>,
}

/// A file with a `key value` line counting OOM kills (`memory.events` on v2,
/// `memory.oom_control` on v1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomCounter {
    pub path: PathBuf,
    pub key: String,
}

/// Mount flags shared by the mount operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountFlags {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl MountFlags {
    /// Read-only, nosuid, nodev: the flags of every host view.
    pub const RO_HOST: MountFlags = MountFlags {
        readonly: true,
        nosuid: true,
        nodev: true,
        noexec: false,
    };
    /// Writable, nosuid, nodev.
    pub const RW: MountFlags = MountFlags {
        readonly: false,
        nosuid: true,
        nodev: true,
        noexec: false,
    };
}

/// One step of building the new root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountOp {
    /// A tmpfs of `size_bytes` at `target`.
    Tmpfs {
        target: PathBuf,
        size_bytes: u64,
        mode: u32,
        flags: MountFlags,
    },
    /// Bind the host path `source` at `target` (recursively). With `within` (an
    /// image's rootfs), `source` is a path inside that directory and is resolved
    /// inside it (`openat2` with `RESOLVE_IN_ROOT`): its symlinks, `..` and absolute
    /// targets never leave it.
    Bind {
        source: PathBuf,
        target: PathBuf,
        flags: MountFlags,
        file: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        within: Option<PathBuf>,
        /// How file owners appear inside (with a user namespace only).
        #[serde(default, skip_serializing_if = "IdMap::is_host")]
        idmap: IdMap,
    },
    /// An overlay with the host path `lower` below and a fresh upper in a scratch
    /// tmpfs; `within` as for `Bind`.
    Overlay {
        lower: PathBuf,
        target: PathBuf,
        flags: MountFlags,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        within: Option<PathBuf>,
    },
    /// A fresh procfs (of the sandbox's pid namespace).
    Proc { target: PathBuf },
    /// A read-only sysfs.
    Sysfs { target: PathBuf },
    /// A fresh devpts instance.
    Devpts { target: PathBuf },
    /// Bind the host device node `source` at `target` (a file).
    Device { source: PathBuf, target: PathBuf },
    /// A directory.
    Mkdir { path: PathBuf, mode: u32 },
    /// A symbolic link at `path` pointing to `to`.
    Symlink { to: String, path: PathBuf },
    /// A file with these contents.
    File {
        path: PathBuf,
        contents: String,
        mode: u32,
    },
    /// A copy of the regular file `source` (`within` as for `Bind`) at `path`, with
    /// its mode (no setuid or setgid bits): a writable root's files that its code may
    /// change or remove, where a bind would be a mount point.
    Copy {
        source: PathBuf,
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        within: Option<PathBuf>,
    },
    /// Make an already mounted path read-only (bind onto itself, remount ro).
    ReadOnly { target: PathBuf },
    /// Hide a file or directory (`/dev/null` over files, an empty read-only tmpfs over
    /// directories); missing paths are ignored.
    Mask { target: PathBuf },
}

/// The policy the agent applies to every exec it starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecPolicy {
    /// uid of the code.
    pub uid: u32,
    /// gid of the code.
    pub gid: u32,
    /// Base environment (PATH, HOME, LANG and the spec's env).
    pub env: BTreeMap<String, String>,
    /// Default working directory.
    pub workdir: String,
    /// Set `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: bool,
    /// Drop every capability (bounding, ambient, inheritable, permitted, effective).
    pub drop_caps: bool,
    /// Apply the seccomp allowlist.
    pub seccomp: bool,
    /// Landlock: paths writable below (everything else read-only); `None` = off.
    pub landlock_writable: Option<Vec<String>>,
    /// The agent exits (ending the sandbox) after this long without requests.
    pub idle_timeout_ms: Option<u64>,
    /// The sandbox has its own user namespace: uid 0 (its user, or an exec asking for
    /// it) keeps [`ROOT_CAPS`] there, where they reach only what the sandbox's own ids
    /// own, instead of dropping every capability; and an exec may ask for another uid
    /// of the namespace (`ExecRequest::uid`).
    #[serde(default)]
    pub root_caps: bool,
    /// The oldest landlock ABI the exec accepts (default: 3, which handles
    /// truncate). A microVM whose guest kernel has ABI 2 sets 2: everything the
    /// ruleset leaves read-only is also on a read-only mount there, where truncate
    /// fails anyway. (Never skipped when serializing: postcard has no field names.)
    #[serde(default)]
    pub landlock_min_abi: Option<u8>,
    /// `RLIMIT_AS` of the code's processes, in bytes (the gVisor provider: an
    /// allocation past it fails inside, where a host cgroup limit would end the whole
    /// sandbox); `None` = unlimited. (Never skipped when serializing: the policy also
    /// travels as postcard, which has no field names.)
    #[serde(default)]
    pub rlimit_as_bytes: Option<u64>,
    /// `RLIMIT_NPROC` of the code's uid (the gVisor provider's pids cap, enforced by
    /// gVisor's own kernel); `None` = unlimited.
    #[serde(default)]
    pub rlimit_nproc: Option<u64>,
    /// PID 1 looks for processes an exec left reparented to it (a scan of `/proc`)
    /// when the exec ends, and kills them: set where the kernel does not honour the
    /// shim's `PR_SET_CHILD_SUBREAPER` (gVisor 2022), so a double-forked process of
    /// the exec ends up below PID 1 instead of its shim. Off by default: where the
    /// mark is honoured the shim kills them and the scan is wasted time on every exec.
    #[serde(default)]
    pub sweep_orphans: bool,
    /// A cgroup directory each exec's shim moves itself into before it starts the
    /// command (so the exec's processes, not the agent's threads, meet that cgroup's
    /// caps): the microvm guest's `pids` cap for the code. None elsewhere: the sandbox's
    /// own cgroup holds everything. (Always serialized: the policy also travels in
    /// postcard, which has no field names to skip by.)
    #[serde(default)]
    pub exec_cgroup: Option<String>,
    /// Spawn each exec's shim (and file operation) from the agent's binary instead of
    /// forking it from PID 1's exec zygote: set under gVisor's ptrace platform, where a
    /// fork's new address space costs what the `exec` it saves does and the zygote's
    /// start made every create slower (measured: ARCHITECTURE.md, the exec zygote).
    #[serde(default)]
    pub no_zygote: bool,
}

/// The capabilities root inside a sandbox with a user namespace keeps: those a
/// package manager needs on the sandbox's own files. Not `CAP_FSETID` or
/// `CAP_SETFCAP` (setuid bits and file capabilities could reach the host through a
/// writable mount), nothing over namespaces, mounts, the network or the kernel.
pub const ROOT_CAPS: &[&str] = &[
    "chown",
    "dac_override",
    "fowner",
    "kill",
    "setgid",
    "setuid",
];
