//! From a validated spec and the host layout to a launch plan. Pure: no I/O, so every
//! decision about what to mount and what to limit is unit-tested.

use std::path::{Path, PathBuf};

#[cfg(test)]
use stockade_agent_proto::launch::IdPoolPlan;
use stockade_agent_proto::launch::{
    CgroupDir, CgroupPlan, ExecPolicy, IdMap, LaunchPlan, MountFlags, MountOp, NetworkPlan,
    OomCounter, UsernsPlan,
};
use stockade_core::{Error, ValidatedSpec, Wall, WallKind};
use stockade_spec::{Network, format_size};

use crate::layout::{DEVICES, Entry, HostLayout};
use stockade_cgroup::Layout;

/// Everything besides the spec that the plan depends on.
#[derive(Clone, Debug)]
pub struct PlanContext {
    pub id: String,
    pub state_dir: PathBuf,
    pub host: HostLayout,
    /// The user-mode NAT helper (`slirp4netns`), when installed.
    pub slirp: Option<PathBuf>,
    /// The nftables tool (`nft`), when installed.
    pub nft: Option<PathBuf>,
    pub now_ms: u64,
    pub owner_pid: Option<u32>,
    /// For each spec mount, whether the host path is a file (else a directory).
    pub mount_is_file: Vec<bool>,
    /// The image to run on instead of the host's `/usr` (when the spec names one).
    pub image: Option<ImageRoot>,
    /// Where the sandbox's user namespace gets its host ids (as root); `None`: no user
    /// namespace, unless rootless.
    pub userns: Option<UsernsPlan>,
    /// Rootless: the caller's ids, from which the sandbox's user namespace is made.
    pub rootless: Option<crate::rootless::RootlessHost>,
    /// Resolvers (`IP:PORT`) an egress policy's lookups go to; empty: the host's
    /// resolv.conf.
    pub dns_upstreams: Vec<String>,
    /// An egress policy's credentials: the sandbox's authority and placeholders.
    pub egress_secrets: Option<crate::egress::EgressSecrets>,
}

/// What the network half of a plan needs from the host.
pub struct NetContext<'a> {
    pub host: &'a HostLayout,
    /// The user-mode NAT helper (`slirp4netns`), when installed.
    pub slirp: Option<&'a Path>,
    /// The nftables tool (`nft`), when installed.
    pub nft: Option<&'a Path>,
    /// Resolvers (`IP:PORT`) an egress policy's lookups go to; empty: the host's.
    pub dns_upstreams: &'a [String],
    /// An egress policy's credentials: the sandbox's authority and placeholders.
    pub egress_secrets: Option<&'a crate::egress::EgressSecrets>,
    /// Rootless (the helper cannot sandbox itself from outside our namespace).
    pub rootless: bool,
}

/// The network half of a plan: what a sandbox in a network namespace of its own gets
/// for `network` (a native sandbox's, and a docker container's, whose host side runs
/// the same firewall, resolver and proxy).
pub fn network_plan(network: &Network, ctx: &NetContext<'_>) -> Result<NetworkPlan, Error> {
    Ok(match network {
        Network::None => NetworkPlan::LoopbackOnly,
        Network::Egress | Network::Policy(_) => {
            let slirp = ctx.slirp.ok_or_else(|| Error::Unavailable {
                what: "network egress".into(),
                reason: "the user-mode NAT helper slirp4netns is not installed".into(),
                fix: "apt-get install slirp4netns".into(),
            })?;
            let nft = ctx.nft.ok_or_else(|| Error::Unavailable {
            what: "network egress".into(),
            reason: "nft is not installed; it keeps the host's own network out of the sandbox's reach".into(),
            fix: "apt-get install nftables".into(),
        })?;
            let (firewall, policy, resolv_conf) = match network {
                Network::Policy(p) => {
                    let upstreams = if ctx.dns_upstreams.is_empty() {
                        crate::egress::upstreams_from(&ctx.host.nameservers)
                    } else {
                        ctx.dns_upstreams.to_vec()
                    };
                    if upstreams.is_empty() {
                        return Err(Error::Unavailable {
                        what: "an egress allowlist".into(),
                        reason: "the host's /etc/resolv.conf names no resolver to forward allowed names to".into(),
                        fix: "add a nameserver line to /etc/resolv.conf".into(),
                    });
                    }
                    let mut names = crate::egress::egress_plan(p, upstreams);
                    names.tls = ctx
                        .egress_secrets
                        .map(|s| Box::new(crate::egress::tls_intercept(p, s)));
                    (
                        crate::egress::policy_firewall(
                            p,
                            &ctx.host.host_addresses,
                            &ctx.host.host_networks,
                        ),
                        Some(names),
                        POLICY_RESOLV_CONF,
                    )
                }
                _ => (
                    firewall(&ctx.host.host_addresses, &ctx.host.host_networks),
                    None,
                    RESOLV_CONF,
                ),
            };
            NetworkPlan::UserModeNat {
                argv: slirp_argv(slirp)
                    .into_iter()
                    // Rootless, slirp4netns's own sandbox (a mount namespace it makes
                    // as root of ours) cannot be set up from outside our namespace.
                    .filter(|a| !ctx.rootless || a != "--enable-sandbox")
                    .collect(),
                resolv_conf: resolv_conf.into(),
                nft: nft.display().to_string(),
                firewall,
                policy,
            }
        }
    })
}

fn has_userns(ctx: &PlanContext) -> bool {
    ctx.userns.is_some() || ctx.rootless.is_some()
}

/// An image's flattened root filesystem (from `stockade-image`), read-only on the host.
#[derive(Clone, Debug)]
pub struct ImageRoot {
    /// The rootfs directory on the host.
    pub rootfs: PathBuf,
    /// Its top-level entries but `/etc`, `/proc`, `/sys`, `/dev` and `/tmp`, as
    /// sandbox paths (`/usr`).
    pub root: Vec<(PathBuf, Entry)>,
    /// Its `/etc` entries but those Stockade writes itself, as sandbox paths.
    pub etc: Vec<(PathBuf, Entry)>,
    /// The image config's `Env` (`KEY=VALUE`): over the defaults, under the spec's.
    pub env: Vec<String>,
    /// The image config's `WorkingDir`, used when the spec names none.
    pub workdir: Option<PathBuf>,
    /// The image config's `User` as uid and gid, when it names a user other than
    /// root: used when the spec keeps the default user. An image asking for root
    /// still runs as the default non-root user unless the spec says `--user 0`.
    pub user: Option<(u32, u32)>,
    /// The store's in-use lock file of this image: the monitor holds a shared lock on
    /// it for the sandbox's life (see `stockade_image::Store::hold`).
    pub in_use_lock: Option<PathBuf>,
}

/// The user execs run as: the spec's, or the image's when the spec keeps the default.
pub fn effective_user(spec: &ValidatedSpec, ctx: &PlanContext) -> stockade_spec::User {
    match ctx.image.as_ref().and_then(|i| i.user) {
        Some((uid, gid)) if spec.user == stockade_spec::User::default() => {
            stockade_spec::User { uid, gid }
        }
        _ => spec.user,
    }
}

impl ImageRoot {
    /// A sandbox path of the image as a path inside its rootfs, which the agent
    /// resolves inside the rootfs (never `rootfs.join(..)` followed on the host: an
    /// image's `/etc -> /` would reach the host's root).
    pub fn source(&self, path: &Path) -> PathBuf {
        path.strip_prefix("/").unwrap_or(path).to_path_buf()
    }
}

/// `/etc` entries Stockade writes itself; an image's own are not bound over them.
pub const SYNTHETIC_ETC: &[&str] = &[
    "passwd",
    "group",
    "shadow",
    "gshadow",
    "hostname",
    "hosts",
    "nsswitch.conf",
    "resolv.conf",
];

/// A mount source: a host path, or a path inside an image's rootfs (`within`).
struct Source {
    path: PathBuf,
    within: Option<PathBuf>,
}

/// (source, sandbox target, entry) of the root's or `/etc`'s entries: the image's
/// when there is one, else the host's.
fn sources<'a>(
    ctx: &'a PlanContext,
    pick: impl Fn(&'a ImageRoot) -> &'a [(PathBuf, Entry)],
    host: &'a [(PathBuf, Entry)],
) -> Vec<(Source, &'a PathBuf, &'a Entry)> {
    match &ctx.image {
        Some(img) => pick(img)
            .iter()
            .map(|(p, e)| {
                let source = Source {
                    path: img.source(p),
                    within: Some(img.rootfs.clone()),
                };
                (source, p, e)
            })
            .collect(),
        None => host
            .iter()
            .map(|(p, e)| {
                let source = Source {
                    path: p.clone(),
                    within: None,
                };
                (source, p, e)
            })
            .collect(),
    }
}

/// Name of the cgroup directory holding every sandbox, in each hierarchy.
pub const CGROUP_PARENT: &str = "stockade";
/// CFS period used for the CPU quota.
const CPU_PERIOD_US: u64 = 100_000;

/// Builds the plan.
pub fn plan(spec: &ValidatedSpec, ctx: &PlanContext) -> Result<LaunchPlan, Error> {
    let writable = spec.writable;
    let mut ops = Vec::new();
    let root_size = if writable {
        spec.limits.tmp_bytes
    } else {
        4 << 20
    };
    ops.push(MountOp::Tmpfs {
        target: "/".into(),
        size_bytes: root_size,
        mode: 0o755,
        flags: MountFlags::RW,
    });
    for (source, path, entry) in sources(ctx, |i| &i.root, &ctx.host.root) {
        ops.push(match entry {
            Entry::Symlink(to) => MountOp::Symlink {
                to: to.clone(),
                path: path.clone(),
            },
            Entry::Dir if writable => MountOp::Overlay {
                lower: source.path,
                target: path.clone(),
                flags: MountFlags::RW,
                within: source.within,
            },
            _ => MountOp::Bind {
                source: source.path,
                target: path.clone(),
                flags: MountFlags::RO_HOST,
                file: *entry == Entry::File,
                within: source.within,
                idmap: IdMap::Sandbox,
            },
        });
    }
    ops.extend(etc_ops(spec, ctx));
    ops.extend(proc_sys_dev_ops(spec));
    ops.push(MountOp::Tmpfs {
        target: "/tmp".into(),
        size_bytes: spec.limits.tmp_bytes,
        mode: 0o1777,
        flags: MountFlags::RW,
    });
    for (i, m) in spec.mounts.iter().enumerate() {
        let flags = if m.writable {
            MountFlags::RW
        } else {
            MountFlags::RO_HOST
        };
        let file = ctx.mount_is_file.get(i).copied().unwrap_or(false);
        ops.push(MountOp::Bind {
            source: m.host.clone(),
            target: m.target.clone(),
            flags,
            file,
            within: None,
            idmap: IdMap::Owner,
        });
    }
    let image_workdir = ctx.image.as_ref().and_then(|i| i.workdir.clone());
    let workdir = match (&spec.workdir, &image_workdir) {
        (None, Some(w)) => w.clone(),
        _ => spec.effective_workdir(),
    };
    let workdir_in_image = spec.workdir.is_none() && image_workdir.is_some();
    if !workdir_in_image
        && !spec.mounts.iter().any(|m| workdir.starts_with(&m.target))
        && !workdir.starts_with("/tmp")
    {
        ops.push(MountOp::Mkdir {
            path: workdir.clone(),
            mode: 0o755,
        });
    }
    if writable {
        ops.push(MountOp::Mask {
            target: "/.stockade".into(),
        });
    }

    let mut landlock_writable = vec![
        "/tmp".to_string(),
        "/dev/shm".to_string(),
        "/dev/pts".to_string(),
    ];
    if writable {
        landlock_writable = vec!["/".to_string()];
    } else {
        landlock_writable.extend(
            spec.mounts
                .iter()
                .filter(|m| m.writable)
                .map(|m| m.target.display().to_string()),
        );
    }
    let exec = ExecPolicy {
        uid: effective_user(spec, ctx).uid,
        gid: effective_user(spec, ctx).gid,
        env: exec_env(spec, ctx),
        workdir: workdir.display().to_string(),
        no_new_privs: spec.hardening.no_new_privileges,
        drop_caps: spec.hardening.drop_capabilities,
        seccomp: spec.hardening.seccomp,
        landlock_writable: spec.hardening.landlock.then_some(landlock_writable),
        idle_timeout_ms: spec.idle_timeout_secs.map(|s| s * 1000),
        // Whenever uid 0 is root of the sandbox's own namespace: the sandbox's user,
        // or an exec asking for uid 0 (`ExecRequest::uid`).
        root_caps: has_userns(ctx),
        landlock_min_abi: None,
        rlimit_as_bytes: None,
        rlimit_nproc: None,
        sweep_orphans: false,
        exec_cgroup: None,
        no_zygote: false,
    };
    let network = network_plan(
        &spec.network,
        &NetContext {
            host: &ctx.host,
            slirp: ctx.slirp.as_deref(),
            nft: ctx.nft.as_deref(),
            dns_upstreams: &ctx.dns_upstreams,
            egress_secrets: ctx.egress_secrets.as_ref(),
            rootless: ctx.rootless.is_some(),
        },
    )?;
    let cgroups = cgroup_plan(spec, ctx)?;
    let applied = applied(spec, ctx, &cgroups, &network);
    Ok(LaunchPlan {
        id: ctx.id.clone(),
        state_dir: ctx.state_dir.clone(),
        hostname: spec.hostname.clone(),
        network,
        cgroups,
        mounts: ops,
        readonly_root: !writable,
        expires_at_ms: ctx.now_ms + spec.timeout_secs * 1000,
        owner_pid: ctx.owner_pid,
        exec,
        spec: {
            // Credential values stay out of the state file and `inspect`.
            let mut v = serde_json::to_value(spec.spec()).unwrap_or_default();
            v["network"] = serde_json::to_value(spec.network.redacted()).unwrap_or_default();
            v
        },
        applied,
        hold_locks: ctx
            .image
            .iter()
            .filter_map(|i| i.in_use_lock.clone())
            .collect(),
        userns: match &ctx.rootless {
            Some(r) => {
                let u = effective_user(spec, ctx);
                Some(UsernsPlan::Rootless(r.maps(u.uid, u.gid)))
            }
            None => ctx.userns.clone(),
        },
    })
}

/// slirp4netns's DNS forwarder inside the sandbox (it resolves with the host's
/// resolver, so a host resolver on loopback works too).
const RESOLV_CONF: &str = "nameserver 10.0.2.3\n";

/// Stockade's resolver, served by the monitor on port 53 of the sandbox's own
/// network namespace (see `crate::egress`).
const POLICY_RESOLV_CONF: &str = "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n";

/// Destinations a sandbox with egress may not reach: the host's own addresses (added
/// per host), private and shared address space (the host's LAN, other machines'
/// services), link-local (cloud metadata at 169.254.169.254), loopback, multicast and
/// reserved ranges. Only slirp4netns's DNS forwarder at 10.0.2.3 is let through.
/// Documentation and benchmarking ranges are not listed: they are not routable on the
/// internet, and some egress proxies hand them out as stand-in addresses for public
/// hosts (this project's own machines do).
pub(crate) const DENIED_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
];
pub(crate) const DENIED_V6: &[&str] = &["::1/128", "fc00::/7", "fe80::/10", "ff00::/8"];

/// The nftables ruleset for a sandbox with egress (see [`DENIED_V4`]): also the host's
/// own addresses and its LAN (connected networks, gateways, resolvers).
pub fn firewall(host_addresses: &[String], host_networks: &[String]) -> String {
    let (v6, v4): (Vec<&String>, Vec<&String>) = host_addresses
        .iter()
        .chain(host_networks)
        .partition(|a| a.contains(':'));
    let mut d4: Vec<String> = DENIED_V4
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    d4.extend(v4.iter().map(std::string::ToString::to_string));
    let mut d6: Vec<String> = DENIED_V6
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    d6.extend(v6.iter().map(std::string::ToString::to_string));
    let mut rules = String::from(
        "table inet stockade {\n  chain output {\n    type filter hook output priority 0; policy accept;\n",
    );
    rules.push_str("    oifname \"lo\" accept\n");
    rules.push_str(
        "    ip daddr 10.0.2.3 udp dport 53 accept\n    ip daddr 10.0.2.3 tcp dport 53 accept\n",
    );
    rules.push_str(&format!(
        "    ip daddr {{ {} }} jump refuse\n",
        d4.join(", ")
    ));
    rules.push_str(&format!(
        "    ip6 daddr {{ {} }} jump refuse\n",
        d6.join(", ")
    ));
    // TCP is refused with a reset, as a policy's refusals are: a socket refused by an
    // ICMP error reports only POLLERR, which the microVM provider's user-mode network
    // (QEMU's libslirp 4.7) does not act on, so the guest's connection would hang
    // until its timeout instead of failing at once.
    rules.push_str(
        "  }\n  chain refuse {\n    meta l4proto tcp reject with tcp reset\n    reject\n  }\n}\n",
    );
    rules
}

/// slirp4netns with the host's loopback unreachable (`--disable-host-loopback`), no
/// port forwards (none is ever added), and itself sandboxed (own mount namespace,
/// seccomp). The monitor appends the ready/exit fds, the netns path and the tap name.
fn slirp_argv(slirp: &Path) -> Vec<String> {
    let flags = [
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
        "--netns-type=path",
    ];
    std::iter::once(slirp.display().to_string())
        .chain(flags.iter().map(std::string::ToString::to_string))
        .collect()
}

fn etc_ops(spec: &ValidatedSpec, ctx: &PlanContext) -> Vec<MountOp> {
    let u = effective_user(spec, ctx);
    let mut ops = vec![MountOp::Mkdir {
        path: "/etc".into(),
        mode: 0o755,
    }];
    let file = |path: &str, contents: String| MountOp::File {
        path: path.into(),
        contents,
        mode: 0o644,
    };
    let mut passwd = "root:x:0:0:root:/root:/usr/sbin/nologin\n".to_string();
    let mut group = "root:x:0:\n".to_string();
    if u.uid != 0 {
        passwd.push_str(&format!(
            "sandbox:x:{}:{}:sandbox:/tmp:/bin/sh\n",
            u.uid, u.gid
        ));
    }
    if u.gid != 0 {
        group.push_str(&format!("sandbox:x:{}:\n", u.gid));
    }
    passwd.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    group.push_str("nogroup:x:65534:\n");
    ops.push(file("/etc/passwd", passwd));
    ops.push(file("/etc/group", group));
    ops.push(file("/etc/hostname", format!("{}\n", spec.hostname)));
    ops.push(file(
        "/etc/hosts",
        format!(
            "127.0.0.1\tlocalhost {0}\n::1\tlocalhost ip6-localhost {0}\n",
            spec.hostname
        ),
    ));
    ops.push(file(
        "/etc/nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files dns\n".into(),
    ));
    match &spec.network {
        Network::None => {}
        Network::Egress => ops.push(file("/etc/resolv.conf", RESOLV_CONF.into())),
        Network::Policy(_) => ops.push(file("/etc/resolv.conf", POLICY_RESOLV_CONF.into())),
    }
    if let Some(s) = &ctx.egress_secrets {
        ops.push(file(crate::egress::SANDBOX_CA, s.ca_cert_pem.clone()));
        ops.push(file(
            crate::egress::SANDBOX_CA_BUNDLE,
            format!("{}\n{}", s.host_bundle_pem.trim_end(), s.ca_cert_pem),
        ));
    }
    for (source, path, entry) in sources(ctx, |i| &i.etc, &ctx.host.etc) {
        ops.push(match entry {
            Entry::Symlink(to) => MountOp::Symlink {
                to: to.clone(),
                path: path.clone(),
            },
            Entry::Dir if spec.writable => MountOp::Overlay {
                lower: source.path,
                target: path.clone(),
                flags: MountFlags::RW,
                within: source.within,
            },
            // An image's /etc files in a writable root: copies its code may change
            // or remove (the host's stay bound: the host's /etc is not the image's
            // to edit, and copying it at each start would cost).
            Entry::File if spec.writable && ctx.image.is_some() => MountOp::Copy {
                source: source.path,
                path: path.clone(),
                within: source.within,
            },
            Entry::File | Entry::Dir => MountOp::Bind {
                source: source.path,
                target: path.clone(),
                flags: MountFlags::RO_HOST,
                file: *entry == Entry::File,
                within: source.within,
                idmap: IdMap::Sandbox,
            },
        });
    }
    if ctx.image.is_none() {
        // The host's TLS private keys: root inside owns what it sees of the host's root.
        for p in HOST_ETC_MASKED {
            ops.push(MountOp::Mask { target: p.into() });
        }
    }
    ops
}

/// Parts of the host's `/etc` view hidden even from root inside.
pub const HOST_ETC_MASKED: &[&str] = &["/etc/ssl/private"];

/// The exec environment: defaults, then the image's `Env`, then the spec's `env`.
fn exec_env(spec: &ValidatedSpec, ctx: &PlanContext) -> std::collections::BTreeMap<String, String> {
    let mut env = spec.base_env();
    if let Some(img) = &ctx.image {
        for kv in &img.env {
            if let Some((k, v)) = kv.split_once('=')
                && !spec.env.contains_key(k)
            {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    if let (Some(p), Some(s)) = (spec.network.policy(), &ctx.egress_secrets) {
        env.extend(crate::egress::sandbox_env(p, s));
    }
    env
}

fn proc_sys_dev_ops(spec: &ValidatedSpec) -> Vec<MountOp> {
    let mut ops = vec![MountOp::Proc {
        target: "/proc".into(),
    }];
    for p in [
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/irq",
        "/proc/bus",
        "/proc/fs",
    ] {
        ops.push(MountOp::ReadOnly { target: p.into() });
    }
    for p in [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/sched_debug",
        "/proc/acpi",
        "/proc/scsi",
        "/proc/kallsyms",
        "/proc/asound",
        "/proc/latency_stats",
        "/proc/timer_stats",
        // The host kernel's build configuration.
        "/proc/config.gz",
    ] {
        ops.push(MountOp::Mask { target: p.into() });
    }
    ops.push(MountOp::Sysfs {
        target: "/sys".into(),
    });
    // What sysfs tells of the host beyond the sandbox's own network: the crash-dump
    // layout and build notes of its kernel, its firmware tables, and the energy
    // counters (a side channel on other tenants' work).
    for p in [
        "/sys/kernel/vmcoreinfo",
        "/sys/kernel/notes",
        "/sys/firmware",
        "/sys/devices/virtual/powercap",
    ] {
        ops.push(MountOp::Mask { target: p.into() });
    }
    ops.push(MountOp::Tmpfs {
        target: "/dev".into(),
        size_bytes: 64 << 10,
        mode: 0o755,
        flags: MountFlags {
            readonly: false,
            nosuid: true,
            nodev: false,
            noexec: true,
        },
    });
    for d in DEVICES {
        ops.push(MountOp::Device {
            source: format!("/dev/{d}").into(),
            target: format!("/dev/{d}").into(),
        });
    }
    ops.push(MountOp::Devpts {
        target: "/dev/pts".into(),
    });
    ops.push(MountOp::Symlink {
        to: "pts/ptmx".into(),
        path: "/dev/ptmx".into(),
    });
    ops.push(MountOp::Tmpfs {
        target: "/dev/shm".into(),
        size_bytes: spec.limits.tmp_bytes,
        mode: 0o1777,
        flags: MountFlags::RW,
    });
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        ops.push(MountOp::Symlink {
            to: to.into(),
            path: format!("/dev/{name}").into(),
        });
    }
    ops
}

fn cgroup_plan(spec: &ValidatedSpec, ctx: &PlanContext) -> Result<CgroupPlan, Error> {
    let l = &spec.limits;
    let quota = ((l.cpus * CPU_PERIOD_US as f64).round() as u64).max(1000);
    let id = &ctx.id;
    // Rootless: below the subtree root delegated to the caller (set up once by root).
    let parent_name = match &ctx.rootless {
        Some(r) => crate::rootless::delegated_name(r.uid),
        None => CGROUP_PARENT.to_string(),
    };
    match &ctx.host.cgroups {
        Layout::V2 { root } => {
            let parent = root.join(&parent_name);
            let dir = parent.join(id);
            let enable = (
                "cgroup.subtree_control".to_string(),
                "+cpu +memory +pids".to_string(),
            );
            let parents = if ctx.rootless.is_some() {
                vec![CgroupDir {
                    path: parent,
                    settings: vec![],
                }]
            } else {
                vec![
                    CgroupDir {
                        path: root.clone(),
                        settings: vec![enable.clone()],
                    },
                    CgroupDir {
                        path: parent,
                        settings: vec![enable],
                    },
                ]
            };
            Ok(CgroupPlan {
                parents,
                dirs: vec![CgroupDir {
                    path: dir.clone(),
                    settings: vec![
                        ("memory.max".into(), l.memory_bytes.to_string()),
                        ("?memory.swap.max".into(), "0".into()),
                        ("pids.max".into(), l.pids.to_string()),
                        ("cpu.max".into(), format!("{quota} {CPU_PERIOD_US}")),
                    ],
                }],
                kill_file: Some(dir.join("cgroup.kill")),
                oom_counter: Some(OomCounter {
                    path: dir.join("memory.events"),
                    key: "oom_kill".into(),
                }),
            })
        }
        Layout::Hybrid { v1, unified } => {
            let need = |c: &str| {
                v1.get(c).cloned().ok_or_else(|| Error::Unavailable {
                    what: format!("the {c} cgroup controller"),
                    reason: "it is not mounted".into(),
                    fix: format!("mount it: mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}"),
                })
            };
            let (mem, pids, cpu) = (need("memory")?, need("pids")?, need("cpu")?);
            let mut parents = Vec::new();
            let mut dirs = Vec::new();
            let mut add = |base: &Path, settings: Vec<(String, String)>| {
                parents.push(CgroupDir {
                    path: base.join(&parent_name),
                    settings: vec![],
                });
                dirs.push(CgroupDir {
                    path: base.join(&parent_name).join(id),
                    settings,
                });
            };
            add(
                &mem,
                vec![
                    ("memory.limit_in_bytes".into(), l.memory_bytes.to_string()),
                    (
                        "?memory.memsw.limit_in_bytes".into(),
                        l.memory_bytes.to_string(),
                    ),
                    ("?memory.swappiness".into(), "0".into()),
                ],
            );
            add(&pids, vec![("pids.max".into(), l.pids.to_string())]);
            add(
                &cpu,
                vec![
                    ("cpu.cfs_period_us".into(), CPU_PERIOD_US.to_string()),
                    ("cpu.cfs_quota_us".into(), quota.to_string()),
                ],
            );
            // Rootless, the v2 group is left out: moving a process into it needs write
            // access at the common ancestor (the root). The pid namespace still ends
            // every process when PID 1 is killed.
            let unified = unified.as_ref().filter(|_| ctx.rootless.is_none());
            let kill_file = unified.map(|u| {
                add(u, vec![]);
                u.join(&parent_name).join(id).join("cgroup.kill")
            });
            // Pause freezes the cgroup2 group; without one, root's sandbox joins a v1
            // freezer group instead (rootless has no delegated freezer: refused there).
            if kill_file.is_none()
                && ctx.rootless.is_none()
                && let Some(f) = v1.get("freezer")
            {
                add(f, vec![]);
            }
            Ok(CgroupPlan {
                parents,
                dirs,
                kill_file,
                oom_counter: Some(OomCounter {
                    path: mem.join(&parent_name).join(id).join("memory.oom_control"),
                    key: "oom_kill".into(),
                }),
            })
        }
        Layout::None => Err(Error::Unavailable {
            what: "cgroups".into(),
            reason:
                "no cgroup filesystem is mounted, so memory, cpu and pids limits cannot be enforced"
                    .into(),
            fix: "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup)".into(),
        }),
    }
}

fn applied(
    spec: &ValidatedSpec,
    ctx: &PlanContext,
    cg: &CgroupPlan,
    net: &NetworkPlan,
) -> Vec<Wall> {
    use WallKind as K;
    let user = effective_user(spec, ctx);
    let l = &spec.limits;
    let mut v = vec![
        if has_userns(ctx) {
            Wall::on(
                K::Isolation,
                "namespaces: user, mount, pid, network, uts, ipc, cgroup",
            )
        } else {
            Wall::on(
                K::Isolation,
                "namespaces: mount, pid, network, uts, ipc, cgroup (no user namespace)",
            )
        },
        if spec.writable {
            Wall::on(
                K::Root,
                "host /usr etc. under a discarded tmpfs overlay (writable)",
            )
        } else {
            Wall::on(
                K::Root,
                "read-only, pivot_root onto host /usr, /bin, /lib (ro, nosuid, nodev) and a synthetic /etc",
            )
        },
        Wall::on(
            K::Tmp,
            format!("tmpfs {} (nosuid, nodev)", format_size(l.tmp_bytes)),
        ),
        match net {
            NetworkPlan::LoopbackOnly => {
                Wall::on(K::Network, "none (own namespace, loopback only)")
            }
            NetworkPlan::UserModeNat {
                policy: Some(_), ..
            } => match spec.network.policy() {
                Some(p) => crate::egress::describe(p),
                None => Wall::on(K::Network, "egress policy"),
            },
            NetworkPlan::UserModeNat { .. } => Wall::on(
                K::Network,
                "egress through slirp4netns (no port forwards); host, private, link-local and metadata addresses rejected by nftables",
            ),
        },
        Wall::on(
            K::Limits,
            format!(
                "cgroups: memory {} (no swap), cpu {} CPUs, pids {}{}",
                format_size(l.memory_bytes),
                l.cpus,
                l.pids,
                if cg.kill_file.is_some() {
                    ", cgroup.kill"
                } else {
                    ""
                }
            ),
        ),
        Wall::on(K::User, format!("uid {} gid {}", user.uid, user.gid)),
        Wall::on(K::Lifetime, format!("{} s", spec.timeout_secs)),
    ];
    let h = spec.hardening;
    if let Some(r) = &ctx.rootless {
        v.push(r.describe(user.uid));
    }
    v.push(if h.drop_capabilities && has_userns(ctx) && user.uid == 0 {
        Wall::on(
            K::Capabilities,
            format!(
                "root inside keeps {} over its own user namespace only; all others dropped",
                stockade_agent_proto::launch::ROOT_CAPS.join(", ")
            ),
        )
    } else if h.drop_capabilities {
        Wall::on(K::Capabilities, "all dropped")
    } else {
        Wall::off(K::Capabilities, "NOT dropped (opt-out)")
    });
    v.push(Wall::new(
        K::NoNewPrivs,
        h.no_new_privileges,
        if h.no_new_privileges {
            "set"
        } else {
            "NOT set (opt-out)"
        },
    ));
    v.push(if h.seccomp {
        Wall::on(K::Seccomp, stockade_sys::seccomp::describe())
    } else {
        Wall::off(K::Seccomp, "OFF (opt-out)")
    });
    v.push(if h.landlock {
        Wall::on(
            K::Landlock,
            "read-only except /tmp, /dev/shm and writable mounts",
        )
    } else {
        Wall::off(K::Landlock, "OFF (opt-out)")
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use stockade_cgroup::Layout;
    use stockade_spec::{Mount, SandboxSpec};

    #[test]
    fn the_egress_firewall_refuses_the_host_and_private_ranges_tcp_with_a_reset() {
        let rules = firewall(&["192.0.2.2".into()], &["fd00::/64".into()]);
        let at = |needle: &str| {
            rules
                .find(needle)
                .unwrap_or_else(|| panic!("{needle} missing from:\n{rules}"))
        };
        // Loopback and slirp4netns's DNS forwarder first, then the refusals.
        assert!(at("oifname \"lo\" accept") < at("ip daddr 10.0.2.3 udp dport 53 accept"));
        let v4 = at("ip daddr { 0.0.0.0/8, 10.0.0.0/8,");
        assert!(at("ip daddr 10.0.2.3 tcp dport 53 accept") < v4);
        assert!(rules[v4..].starts_with(&format!(
            "ip daddr {{ {}, 192.0.2.2 }} jump refuse",
            DENIED_V4.join(", ")
        )));
        assert!(rules.contains(
            "ip6 daddr { ::1/128, fc00::/7, fe80::/10, ff00::/8, fd00::/64 } jump refuse"
        ));
        assert!(
            rules.contains(
                "chain refuse {\n    meta l4proto tcp reject with tcp reset\n    reject\n  }"
            ),
            "{rules}"
        );
    }

    fn ctx(cgroups: Layout) -> PlanContext {
        PlanContext {
            id: "sb-test".into(),
            state_dir: "/run/stockade/sb-test".into(),
            host: HostLayout {
                root: vec![
                    ("/usr".into(), Entry::Dir),
                    ("/bin".into(), Entry::Symlink("usr/bin".into())),
                    ("/lib".into(), Entry::Symlink("usr/lib".into())),
                ],
                etc: vec![
                    ("/etc/ld.so.cache".into(), Entry::File),
                    ("/etc/alternatives".into(), Entry::Dir),
                ],
                nameservers: vec!["nameserver 10.0.0.53".into()],
                host_addresses: vec!["192.0.2.2".into(), "fd00::2".into()],
                host_networks: vec![
                    "192.0.2.0/24".into(),
                    "192.0.2.1/32".into(),
                    "fd00::/64".into(),
                ],
                cgroups,
            },
            slirp: Some("/usr/bin/slirp4netns".into()),
            nft: Some("/usr/sbin/nft".into()),
            dns_upstreams: Vec::new(),
            egress_secrets: None,
            now_ms: 1_000_000,
            owner_pid: Some(42),
            mount_is_file: vec![false],
            image: None,
            userns: Some(UsernsPlan::Pool(IdPoolPlan {
                lease_dir: "/run/stockade-ids".into(),
                pool_start: 1 << 30,
                pool_ranges: 16_384,
            })),
            rootless: None,
        }
    }

    fn hybrid() -> Layout {
        let v1: BTreeMap<String, PathBuf> = ["memory", "pids", "cpu"]
            .iter()
            .map(|c| (c.to_string(), PathBuf::from(format!("/sys/fs/cgroup/{c}"))))
            .collect();
        Layout::Hybrid {
            v1,
            unified: Some("/sys/fs/cgroup/unified".into()),
        }
    }

    #[test]
    fn default_plan_on_hybrid_host() {
        let spec = SandboxSpec::default().validate().unwrap();
        let p = plan(&spec, &ctx(hybrid())).unwrap();
        assert!(p.readonly_root);
        assert_eq!(p.network, NetworkPlan::LoopbackOnly);
        assert_eq!(p.expires_at_ms, 1_000_000 + 300_000);
        insta::assert_json_snapshot!(p);
    }

    fn image_ctx() -> PlanContext {
        let mut c = ctx(hybrid());
        c.image = Some(ImageRoot {
            rootfs: "/var/lib/stockade/images/rootfs/abc".into(),
            root: vec![
                ("/bin".into(), Entry::Symlink("usr/bin".into())),
                ("/srv".into(), Entry::Dir),
                ("/usr".into(), Entry::Dir),
            ],
            etc: vec![("/etc/ssl".into(), Entry::Dir)],
            env: vec![
                "PATH=/opt/py/bin:/usr/bin".into(),
                "PYTHONDONTWRITEBYTECODE=1".into(),
                "LANG=x".into(),
            ],
            workdir: Some("/srv".into()),
            user: None,
            in_use_lock: Some("/var/lib/stockade/images/inuse/abc".into()),
        });
        c
    }

    #[test]
    fn image_root_replaces_the_host_usr() {
        let mut spec = SandboxSpec {
            image: Some("python:3.12".into()),
            ..Default::default()
        };
        spec.env.insert("LANG".into(), "C.UTF-8".into());
        let p = plan(&spec.clone().validate().unwrap(), &image_ctx()).unwrap();
        // Sources are paths inside the rootfs, resolved inside it by the agent.
        let bind = |source: &str, target: &str, file: bool| MountOp::Bind {
            source: source.into(),
            target: target.into(),
            flags: MountFlags::RO_HOST,
            file,
            within: Some("/var/lib/stockade/images/rootfs/abc".into()),
            idmap: IdMap::Sandbox,
        };
        assert!(p.mounts.contains(&bind("usr", "/usr", false)));
        assert!(p.mounts.contains(&bind("etc/ssl", "/etc/ssl", false)));
        assert!(p.mounts.contains(&MountOp::Symlink {
            to: "usr/bin".into(),
            path: "/bin".into()
        }));
        // Nothing of the host's root or /etc.
        for op in &p.mounts {
            if let MountOp::Bind { source, within, .. } = op {
                assert!(
                    within.is_some() || !source.starts_with("/usr") && !source.starts_with("/etc"),
                    "{op:?}"
                );
            }
        }
        // The synthetic /etc stays.
        assert!(
            p.mounts.iter().any(
                |o| matches!(o, MountOp::File { path, .. } if path == Path::new("/etc/passwd"))
            )
        );
        // Image env over the defaults, the spec's over the image's.
        assert_eq!(p.exec.env["PATH"], "/opt/py/bin:/usr/bin");
        assert_eq!(p.exec.env["PYTHONDONTWRITEBYTECODE"], "1");
        assert_eq!(p.exec.env["LANG"], "C.UTF-8");
        // The image's working directory, not created (it is in the read-only image).
        assert_eq!(p.exec.workdir, "/srv");
        assert!(
            !p.mounts
                .iter()
                .any(|o| matches!(o, MountOp::Mkdir { path, .. } if path == Path::new("/srv")))
        );
        // Unless the spec names one.
        spec.workdir = Some("/tmp".into());
        let p = plan(&spec.validate().unwrap(), &image_ctx()).unwrap();
        assert_eq!(p.exec.workdir, "/tmp");
    }

    #[test]
    fn writable_image_root_overlays_the_image() {
        let spec = SandboxSpec {
            image: Some("python:3.12".into()),
            writable: true,
            ..Default::default()
        };
        let p = plan(&spec.validate().unwrap(), &image_ctx()).unwrap();
        assert!(p.mounts.contains(&MountOp::Overlay {
            lower: "usr".into(),
            target: "/usr".into(),
            flags: MountFlags::RW,
            within: Some("/var/lib/stockade/images/rootfs/abc".into()),
        }));
    }

    #[test]
    fn pure_v2_limits() {
        let mut spec = SandboxSpec::default();
        spec.limits.cpus = 0.5;
        spec.limits.memory_bytes = 1 << 30;
        let p = plan(
            &spec.validate().unwrap(),
            &ctx(Layout::V2 {
                root: "/sys/fs/cgroup".into(),
            }),
        )
        .unwrap();
        insta::assert_json_snapshot!(p.cgroups);
    }

    #[test]
    fn writable_root_uses_overlays_and_mounts_follow_spec() {
        let mut spec = SandboxSpec {
            writable: true,
            network: Network::Egress,
            ..Default::default()
        };
        spec.mounts.push(Mount {
            host: "/srv/data".into(),
            target: "/work".into(),
            writable: true,
        });
        spec.workdir = Some("/work".into());
        let p = plan(&spec.validate().unwrap(), &ctx(hybrid())).unwrap();
        assert!(!p.readonly_root);
        assert!(p.mounts.contains(&MountOp::Overlay {
            lower: "/usr".into(),
            target: "/usr".into(),
            flags: MountFlags::RW,
            within: None,
        }));
        assert!(p.mounts.contains(&MountOp::Bind {
            source: "/srv/data".into(),
            target: "/work".into(),
            flags: MountFlags::RW,
            file: false,
            within: None,
            idmap: IdMap::Owner,
        }));
        assert!(p.mounts.contains(&MountOp::Mask {
            target: "/.stockade".into()
        }));
        match &p.network {
            NetworkPlan::UserModeNat { firewall, .. } => {
                assert!(
                    firewall.contains("169.254.0.0/16")
                        && firewall.contains("192.0.2.2")
                        && firewall.contains("fd00::2"),
                    "{firewall}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.exec.workdir, "/work");
    }

    #[test]
    fn egress_without_slirp_is_unavailable_with_a_fix() {
        let spec = SandboxSpec {
            network: Network::Egress,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let mut c = ctx(hybrid());
        c.slirp = None;
        let err = plan(&spec, &c).unwrap_err();
        assert!(
            err.to_string().contains("apt-get install slirp4netns"),
            "{err}"
        );
    }

    #[test]
    fn no_cgroups_is_unavailable() {
        let spec = SandboxSpec::default().validate().unwrap();
        let err = plan(&spec, &ctx(Layout::None)).unwrap_err();
        assert_eq!(err.code(), stockade_core::ErrorCode::Unavailable);
    }

    #[test]
    fn read_only_mounts_stay_out_of_landlock_writes() {
        let mut spec = SandboxSpec::default();
        spec.mounts.push(Mount {
            host: "/srv/ro".into(),
            target: "/data".into(),
            writable: false,
        });
        let p = plan(&spec.validate().unwrap(), &ctx(hybrid())).unwrap();
        let w = p.exec.landlock_writable.unwrap();
        assert!(!w.iter().any(|x| x == "/data"), "{w:?}");
        assert!(w.iter().any(|x| x == "/tmp"));
    }
}
