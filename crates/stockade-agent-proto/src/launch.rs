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
    /// Hardening this plan applies, one line each, reported by `inspect`.
    pub applied: Vec<String>,
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

/// Network of a native sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPlan {
    /// Own network namespace with only loopback, brought up.
    LoopbackOnly,
    /// Own network namespace plus a user-mode NAT helper giving egress; `argv` is the
    /// helper's command line, to which the netns path is appended. `firewall` is an
    /// nftables ruleset loaded (with the `nft` binary) inside the sandbox's namespace
    /// first: it keeps the host's own addresses and private ranges out of reach.
    UserModeNat {
        argv: Vec<String>,
        resolv_conf: String,
        nft: String,
        firewall: String,
        /// An egress policy: the monitor serves the sandbox's only resolver (see
        /// [`EgressPlan`]) and its control socket `net.sock`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<EgressPlan>,
    },
}

/// The resolver side of an egress policy, executed by the monitor.
///
/// The resolver listens on port 53 of the sandbox's network namespace (every
/// address, so `127.0.0.1` inside) and forwards from the host's namespace to
/// `upstreams`; names are checked against `deny` then `allow` first, and a name that
/// is not allowed is answered NXDOMAIN without any packet leaving. The addresses of
/// each answer go into the nftables sets `allow4`/`allow6` (address . protocol .
/// port) and `allowany4`/`allowany6` (address . protocol) of table `inet stockade`
/// for the record's TTL (at least [`MIN_ANSWER_TTL_SECS`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPlan {
    /// Names never answered (checked first).
    pub deny: Vec<NameRule>,
    /// Names answered, and what their addresses open.
    pub allow: Vec<NameRule>,
    /// Resolvers the answers come from, `IP:PORT`, tried in order.
    pub upstreams: Vec<String>,
    /// The allowlist's address ranges: connections to them are allowed by address,
    /// and the proxy does not check their names.
    #[serde(default)]
    pub cidrs: Vec<CidrRule>,
    /// Credentials, and the sandbox's certificate authority to intercept TLS with
    /// (fixed at create; a policy replaced live keeps them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Box<TlsIntercept>>,
}

/// What the proxy needs to set credentials on HTTPS requests: every allowed TLS
/// connection of such a sandbox is terminated with a certificate the sandbox's own
/// authority signs, and made again upstream, verified against `roots_pem`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsIntercept {
    /// The authority's private key (PKCS#8 PEM). Only the monitor holds it.
    pub ca_key_pem: String,
    /// The authority's common name (its certificate is rebuilt from it and the key).
    pub ca_name: String,
    /// Trusted roots for upstream servers (PEM certificates).
    pub roots_pem: String,
    pub credentials: Vec<CredentialRule>,
}

impl std::fmt::Debug for TlsIntercept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIntercept")
            .field("ca_name", &self.ca_name)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// An address range of the allowlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CidrRule {
    pub addr: std::net::IpAddr,
    pub len: u8,
    /// `None`: every port.
    pub ports: Option<Vec<u16>>,
    /// `tcp`, `udp`.
    pub protocols: Vec<String>,
}

impl CidrRule {
    /// Whether a TCP connection to `dest` is opened by this range.
    pub fn covers_tcp(&self, dest: std::net::SocketAddr) -> bool {
        use std::net::IpAddr;
        let inside = match (self.addr, dest.ip()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        };
        inside
            && self.protocols.iter().any(|p| p == "tcp")
            && self.ports.as_ref().is_none_or(|p| p.contains(&dest.port()))
    }
}

/// The parameters of a sandbox's certificate authority named `name`: the launcher
/// self-signs them at create, the monitor rebuilds them with the key to sign leaf
/// certificates (an issuer is its name and key).
#[cfg(feature = "ca")]
pub fn sandbox_ca_params(name: &str) -> rcgen::CertificateParams {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
    let mut p = CertificateParams::default();
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

/// One credential as the proxy applies it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialRule {
    /// Lowercase, no trailing dot.
    pub host: String,
    pub header: String,
    pub value: String,
    /// What the sandbox holds instead of the value.
    pub placeholder: String,
}

impl std::fmt::Debug for CredentialRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRule")
            .field("host", &self.host)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// The port of a policy sandbox's SNI/Host proxy on its loopback (IPv4 and IPv6):
/// connections to addresses an allowed name opened are redirected there. Below
/// 1024, so code in the sandbox could not have bound it.
pub const EGRESS_PROXY_PORT: u16 = 1023;

/// Shortest time an answer's addresses stay open: a record with a TTL of 0 or 1 s
/// must still let the connection that follows it through.
pub const MIN_ANSWER_TTL_SECS: u32 = 30;

/// A name rule of an [`EgressPlan`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameRule {
    /// The name, or the suffix of a wildcard, lowercase without a trailing dot.
    pub name: String,
    /// `*.name`: names below `name`, not `name` itself.
    pub wildcard: bool,
    /// Ports opened; `None`: every port.
    pub ports: Option<Vec<u16>>,
    /// Protocols opened (`tcp`, `udp`).
    pub protocols: Vec<String>,
    /// The entry as the user wrote it.
    pub text: String,
}

impl NameRule {
    /// Whether `name` (lowercase, no trailing dot) is covered.
    pub fn matches(&self, name: &str) -> bool {
        if self.wildcard {
            name.len() > self.name.len() + 1
                && name.ends_with(self.name.as_str())
                && name.as_bytes()[name.len() - self.name.len() - 1] == b'.'
        } else {
            name == self.name
        }
    }
}

/// A request on a policy sandbox's control socket (`net.sock` in its state dir), one
/// JSON line; answered with one [`NetReply`] line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetRequest {
    /// The denials recorded at or after `since_ms` (unix ms).
    Denials { since_ms: u64 },
    /// Replace the policy: the new ruleset (loaded in one transaction), the new name
    /// rules, and the spec's new `network` value (for `inspect`).
    SetPolicy {
        firewall: String,
        policy: EgressPlan,
        network: serde_json::Value,
    },
}

/// The answer to a [`NetRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetReply {
    Denials(Vec<crate::EgressDenial>),
    Done,
    Failed(String),
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

/// The monitor's one-line JSON answer on its stdout once the sandbox is up (or not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchReport {
    /// The agent listens; `state.json` is written.
    Ready(SandboxState),
    /// Launch failed; nothing is left behind.
    Failed { code: ErrorCode, message: String },
}

/// What `state.json` records about a live native sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxState {
    pub id: String,
    /// Host pid of the monitor (parent of the agent, outside the namespaces).
    pub monitor_pid: u32,
    /// Start time of the monitor (clock ticks since boot), to detect pid reuse.
    pub monitor_start_ticks: u64,
    /// Host pid of the agent (PID 1 inside).
    pub init_pid: u32,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub owner_pid: Option<u32>,
    /// Cgroup directories to remove at destroy.
    pub cgroups: Vec<PathBuf>,
    /// Hardening actually applied, e.g. `seccomp: allowlist (301 syscalls)`.
    pub applied: Vec<String>,
    /// The user's spec.
    pub spec: serde_json::Value,
    /// The host ids the sandbox's ids 0 to `count - 1` are, when it has a user
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ids: Option<HostIds>,
    /// The steps of the sandbox's start, as the monitor and PID 1 timed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<TimedStep>,
}

/// One step of a native sandbox's start, timed on the host's `CLOCK_MONOTONIC` (one
/// clock for every process there: the sandbox has no time namespace), in ns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedStep {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl TimedStep {
    /// PID 1 sends its steps to the monitor after `ok`, one per line:
    /// `start_ns end_ns name`.
    pub fn to_line(&self) -> String {
        format!("{} {} {}\n", self.start_ns, self.end_ns, self.name)
    }

    /// The steps in `text` (lines of [`TimedStep::to_line`]); lines that are not one
    /// are skipped.
    pub fn parse_lines(text: &str) -> Vec<TimedStep> {
        text.lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let start_ns = it.next()?.parse().ok()?;
                let end_ns = it.next()?.parse().ok()?;
                let name = it.next()?.to_string();
                (end_ns >= start_ns && !name.is_empty()).then_some(TimedStep {
                    name,
                    start_ns,
                    end_ns,
                })
            })
            .collect()
    }
}

/// In a native sandbox's state directory: the unix ms at which its current pause
/// began (present only while it is paused, i.e. its cgroup is frozen).
pub const PAUSED_FILE: &str = "paused";
/// In a native sandbox's state directory: the total ms of its pauses that ended.
pub const PAUSED_TOTAL_FILE: &str = "paused-ms";

/// How long a native sandbox has been paused, read from its state directory: the
/// lifetime does not run while a sandbox is paused (as E2B's timeout), so its
/// deadline is the planned one plus [`PausedTime::total_ms`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PausedTime {
    /// When the current pause began (unix ms), if paused now.
    pub since_ms: Option<u64>,
    /// Every pause's length so far, the current one up to `now_ms` included.
    pub total_ms: u64,
}

impl PausedTime {
    /// Reads the pause files of `state_dir` (missing or unreadable files: not paused,
    /// nothing paused before).
    pub fn read(state_dir: &std::path::Path, now_ms: u64) -> PausedTime {
        let num = |f: &str| {
            std::fs::read_to_string(state_dir.join(f))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        let since_ms = num(PAUSED_FILE);
        let ended = num(PAUSED_TOTAL_FILE).unwrap_or(0);
        PausedTime {
            since_ms,
            total_ms: ended + since_ms.map_or(0, |s| now_ms.saturating_sub(s)),
        }
    }

    /// The deadline of a sandbox planned to end at `planned_ms`.
    pub fn deadline(&self, planned_ms: u64) -> u64 {
        planned_ms.saturating_add(self.total_ms)
    }
}

/// A sandbox's range of host ids (uids and gids alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIds {
    /// Host id of id 0 inside.
    pub first: u32,
    /// How many ids are mapped.
    pub count: u32,
}

/// Where the docker provider mounts a sandbox's private directory (host side: mode
/// 0700, owned by root) inside the container: it holds the agent binary (read-only),
/// [`ContainerConfig`] as `config.json`, and the agent's socket `agent.sock`. The code
/// runs as a non-root user without capabilities and cannot enter it.
pub const CONTAINER_DIR: &str = "/.stockade";

/// How `stockade-agent container` begins its message when the container's `/` is
/// not one the sandbox user can enter: the container runtime started it on something
/// other than the image's root (dockerd 20.10 was seen to, rarely), or the image's
/// root is closed to that user. The provider replaces such a container once.
pub const ROOT_NOT_ENTERABLE: &str = "the container's root cannot be entered by the sandbox user";

/// What the docker provider tells `stockade-agent container` (PID 1 of a container),
/// as `config.json` in [`CONTAINER_DIR`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerConfig {
    /// Policy the agent applies to each exec.
    pub exec: ExecPolicy,
    /// Absolute deadline (unix ms) at which the agent exits, which ends the container.
    pub expires_at_ms: u64,
}

/// What the microVM provider tells `stockade-agent vm-init` (PID 1 of a VM), as
/// `/config.json` in the VM's initramfs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    /// Policy the agent applies to each exec.
    pub exec: ExecPolicy,
    /// Kernel modules to load, in order (files under `/modules` of the initramfs).
    pub modules: Vec<String>,
    /// The root filesystem's block device (an erofs image, read-only).
    pub root_device: String,
    /// Keep the root's overlay writable (`writable`); otherwise it is remounted
    /// read-only once the agent's mount points exist.
    pub writable: bool,
    /// Size of the `/tmp` tmpfs.
    pub tmp_bytes: u64,
    /// Size of the tmpfs holding a writable root's changes.
    pub overlay_bytes: u64,
    /// `memory.max` of the sandbox's cgroup in the guest.
    pub memory_bytes: u64,
    /// `pids.max` of the sandbox's cgroup in the guest (the agent's threads count).
    pub pids: u64,
    /// `pids.max` of the execs' cgroup below it ([`ExecPolicy::exec_cgroup`]): the
    /// spec's cap, for the code's processes alone. 0: no such cgroup.
    #[serde(default)]
    pub exec_pids: u64,
    /// The name of the virtio-serial port the host multiplexer is on.
    pub port_name: String,
    /// Host directories to mount (virtiofs), in order.
    #[serde(default)]
    pub shares: Vec<GuestShare>,
    /// The network interface (a sandbox with egress); `None`: the VM has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<GuestNetwork>,
}

/// A microVM's one network interface, configured by the guest's PID 1 itself (static
/// addresses: the guest has no DHCP client). Its gateway and resolver are the VMM's
/// user-mode network, which opens every connection in the host-side network
/// namespace the sandbox's firewall guards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestNetwork {
    /// The guest's IPv4 address.
    pub address: std::net::Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The default route's gateway.
    pub gateway: std::net::Ipv4Addr,
    /// Files written into the root before it turns read-only, (path, contents):
    /// `/etc/resolv.conf`, an egress policy's certificate authority.
    pub files: Vec<(String, String)>,
}

/// A host directory shared into a microVM with virtiofs, as the guest mounts it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GuestShare {
    /// The virtiofs tag.
    pub tag: String,
    /// Where it is mounted in the guest.
    pub target: String,
    /// Mounted read-write (else read-only; the host side is read-only too).
    pub writable: bool,
}

/// What the microVM provider tells `stockade-agent vm-host DIR` (the host-side
/// supervisor of one VM), as `host.json` in the sandbox's state directory `DIR`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmHostConfig {
    /// The sandbox id (the guest's hostname).
    pub id: String,
    /// The VMM's command line (program first).
    pub vmm: Vec<String>,
    /// The VMM's serial-port socket the multiplexer connects to (it listens).
    pub serial_socket: String,
    /// The host process whose death destroys the sandbox.
    pub owner_pid: Option<u32>,
    /// Start time of the owner (clock ticks since boot), to detect pid reuse.
    pub owner_ticks: Option<u64>,
    /// End of the lifetime (unix ms).
    pub expires_at_ms: u64,
    /// Host cgroups to put the VMM in (one per v1 hierarchy, or one v2 group), each
    /// with its settings (file, value); created by the supervisor, removed at its end.
    pub cgroups: Vec<(String, Vec<(String, String)>)>,
    /// Daemons to start before the VMM, each with the socket it listens on once
    /// ready (the virtiofsd of each shared directory): (command line, socket).
    #[serde(default)]
    pub daemons: Vec<(Vec<String>, String)>,
    /// A VM with network: the directory of its network monitor. The supervisor then
    /// reads a [`NetworkPlan`] on stdin (`LENGTH\n`, the plan, an egress policy's
    /// credentials if any), runs the VMM in a network namespace of its own with the
    /// plan's firewall, resolver and NAT helper, and serves them as a native
    /// sandbox's monitor does (`net.sock` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_dir: Option<String>,
    /// Where the VMM's own host uid and gid come from: the supervisor leases a range
    /// of this pool for the VM's life (as native sandboxes do) and runs the VMM as its
    /// first id, with no capabilities, `no_new_privs` and no supplementary groups.
    pub vmm_ids: IdPoolPlan,
    /// Files the supervisor opens read-only (as root, before the VMM drops its ids)
    /// and hands to the VMM as file descriptors [`VMM_FIRST_FD`], [`VMM_FIRST_FD`]+1,
    /// ...: what the VMM's uid may not open by path (the root image, the state to
    /// restore, both possibly in root-only directories).
    #[serde(default)]
    pub vmm_files: Vec<String>,
    /// Files of the sandbox's directory the VMM opens by path (its kernel and
    /// initramfs): the supervisor gives them to the VMM's gid to read (0640).
    #[serde(default)]
    pub vmm_reads: Vec<String>,
}

/// The first file descriptor of [`VmHostConfig::vmm_files`] in the VMM.
pub const VMM_FIRST_FD: i32 = 3;

#[cfg(test)]
mod tests {
    use super::TimedStep;

    #[test]
    fn timed_steps_go_through_lines_and_bad_lines_are_skipped() {
        let steps = vec![
            TimedStep {
                name: "PID 1: build the root and pivot into it".into(),
                start_ns: 10,
                end_ns: 2_000_000,
            },
            TimedStep {
                name: "x".into(),
                start_ns: 5,
                end_ns: 5,
            },
        ];
        let mut text: String = steps.iter().map(TimedStep::to_line).collect();
        // What a confused or hostile writer could add: none of it is a step.
        text.push_str("\n1 2\n3 1 backwards\nnot numbers at all\n7 9 \n-1 2 negative\n");
        assert_eq!(TimedStep::parse_lines(&text), steps);
    }
}
