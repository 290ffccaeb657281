//! What a provider tells PID 1 when it is not the native monitor's child: a docker
//! or gVisor container's configuration, a microVM guest's and its host supervisor's.

use super::*;

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
