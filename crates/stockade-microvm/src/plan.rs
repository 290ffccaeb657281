//! From a spec to a VM: its size, the guest's config, the host cgroups around the
//! VMM and the hardening lines `inspect` shows. Pure, so it is unit-tested.

use std::path::{Path, PathBuf};

use std::net::Ipv4Addr;

use stockade_agent_proto::launch::{ExecPolicy, GuestNetwork, GuestShare, VmConfig};
use stockade_core::{ValidatedSpec, Wall, WallKind};

use crate::vmm::{Accel, PORT_NAME};

/// Guest RAM beyond the sandbox's own memory cap: the kernel, the agent in the
/// initramfs and the page cache of the root image.
pub const GUEST_OVERHEAD_MIB: u64 = 192;

/// Host memory of the VMM beyond the guest's RAM (QEMU itself, TCG's code cache).
pub const VMM_OVERHEAD_MIB: u64 = 320;

/// TCG's translated-code cache (QEMU's default is 1 GiB per VM).
pub const TCG_TB_MIB: u64 = 64;

/// The agent's own threads, which count against the guest cgroup's pids cap.
pub const AGENT_PIDS: u64 = 16;

/// The guest's cgroup of the execs (below the sandbox's): it holds each exec's shim
/// and what it starts, capped at the spec's pids.
pub const GUEST_EXEC_CGROUP: &str = "/sys/fs/cgroup/sandbox/execs";

/// The guest's address on the VMM's user-mode network (QEMU's default layout).
pub const GUEST_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
/// The user-mode network's gateway: the VMM itself.
pub const GUEST_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The user-mode network's DNS forwarder, which asks the resolver of the VMM's
/// network namespace (never the host's).
pub const GUEST_DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

/// A sandbox's network, as the guest gets it (from `stockade_linux::network_setup`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetInput {
    /// `/etc/resolv.conf` of the VMM's namespace; its `options` lines are kept.
    pub resolv_conf: String,
    /// A policy's authority and bundle (see `stockade_linux::NetworkSetup::ca`).
    pub ca: Option<(String, String)>,
    /// The credentials' environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// A policy's network wall; `None`: plain egress.
    pub policy_applied: Option<Wall>,
}

impl NetInput {
    /// The guest's interface and files.
    fn guest(&self) -> GuestNetwork {
        let mut resolv = format!("nameserver {GUEST_DNS}\n");
        for l in self
            .resolv_conf
            .lines()
            .filter(|l| l.starts_with("options"))
        {
            resolv.push_str(l);
            resolv.push('\n');
        }
        let mut files = vec![("/etc/resolv.conf".to_string(), resolv)];
        if let Some((ca, bundle)) = &self.ca {
            files.push((stockade_linux::egress::SANDBOX_CA.into(), ca.clone()));
            files.push((
                stockade_linux::egress::SANDBOX_CA_BUNDLE.into(),
                bundle.clone(),
            ));
        }
        GuestNetwork {
            address: GUEST_ADDRESS,
            prefix: 24,
            gateway: GUEST_GATEWAY,
            files,
        }
    }
}

/// What the plan decides.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub memory_mib: u64,
    pub vcpus: u32,
    pub guest: VmConfig,
    pub expires_at_ms: u64,
    pub applied: Vec<Wall>,
}

/// The virtiofs tag of the `i`th shared directory.
pub fn share_tag(i: usize) -> String {
    format!("ws{i}")
}

/// What an OCI image's config says about the execs of a VM booted from it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageRun {
    /// The reference the spec named.
    pub reference: String,
    /// `KEY=VALUE` lines; the spec's own `env` wins over them.
    pub env: Vec<String>,
    /// The image's working directory, unless the spec names one.
    pub workdir: Option<PathBuf>,
    /// The image's user as uid and gid, unless the spec names one.
    pub user: Option<(u32, u32)>,
}

/// The VM for `spec` (booted from `image`'s root when given); `modules` are the
/// initramfs's module files, in load order.
pub fn plan(
    spec: &ValidatedSpec,
    image: Option<&ImageRun>,
    net: Option<&NetInput>,
    modules: Vec<String>,
    now_ms: u64,
    accel: Accel,
) -> Plan {
    let l = &spec.limits;
    let h = spec.hardening;
    let memory_mib = l.memory_bytes.div_ceil(1 << 20) + GUEST_OVERHEAD_MIB;
    let vcpus = (l.cpus.ceil() as u32).max(1);
    // As on native: defaults, the image's `Env`, the spec's `env`; the image's
    // working directory and user unless the spec names its own.
    let mut env = spec.base_env();
    let mut workdir = spec.effective_workdir().display().to_string();
    let mut user = spec.user;
    if let Some(img) = image {
        for kv in &img.env {
            if let Some((k, v)) = kv.split_once('=')
                && !spec.env.contains_key(k)
            {
                env.insert(k.to_string(), v.to_string());
            }
        }
        if let (None, Some(w)) = (&spec.workdir, &img.workdir) {
            workdir = w.display().to_string();
        }
        if let (true, Some((uid, gid))) = (spec.user == stockade_spec::User::default(), img.user) {
            user = stockade_spec::User { uid, gid };
        }
    }
    if let Some(n) = net {
        env.extend(n.env.clone());
    }
    let exec = ExecPolicy {
        uid: user.uid,
        gid: user.gid,
        env,
        workdir: workdir.clone(),
        no_new_privs: h.no_new_privileges,
        drop_caps: h.drop_capabilities,
        seccomp: h.seccomp,
        landlock_writable: h.landlock.then(|| {
            if spec.writable {
                vec!["/".to_string()]
            } else {
                let mut w = vec!["/tmp".to_string(), "/dev/shm".to_string()];
                w.extend(
                    spec.mounts
                        .iter()
                        .filter(|m| m.writable)
                        .map(|m| m.target.display().to_string()),
                );
                w
            }
        }),
        idle_timeout_ms: spec.idle_timeout_secs.map(|s| s * 1000),
        root_caps: false,
        // Debian 12's kernel has landlock ABI 2 (see `assets::find_kernel`).
        landlock_min_abi: Some(2),
        rlimit_as_bytes: None,
        rlimit_nproc: None,
        sweep_orphans: false,
        exec_cgroup: Some(GUEST_EXEC_CGROUP.into()),
        no_zygote: false,
    };
    let guest = VmConfig {
        exec,
        modules,
        root_device: "/dev/vda".into(),
        writable: spec.writable,
        tmp_bytes: l.tmp_bytes,
        overlay_bytes: l.memory_bytes,
        memory_bytes: l.memory_bytes,
        pids: u64::from(l.pids) + AGENT_PIDS,
        exec_pids: u64::from(l.pids),
        port_name: PORT_NAME.into(),
        shares: spec
            .mounts
            .iter()
            .enumerate()
            .map(|(i, m)| GuestShare {
                tag: share_tag(i),
                target: m.target.display().to_string(),
                writable: m.writable,
            })
            .collect(),
        network: net.map(NetInput::guest),
    };
    use WallKind as K;
    let mut applied = vec![
        Wall::on(
            K::Isolation,
            format!(
                "a QEMU microvm under {} ({}), {} MiB RAM, {vcpus} vCPU(s), {}; a Debian cloud kernel, the static stockade agent as PID 1 (initramfs)",
                accel.as_str(),
                match accel {
                    Accel::Kvm => "hardware virtualisation",
                    Accel::Tcg => "software emulation: KVM is unusable here",
                },
                memory_mib,
                if net.is_some() {
                    "one virtio-net device on the VMM's user-mode network"
                } else {
                    "no network device"
                }
            ),
        ),
        match net {
            None => Wall::on(K::Network, "none (the VM has no network device)"),
            Some(n) => {
                let outer = n.policy_applied.clone().unwrap_or_else(|| {
                    Wall::on(
                        K::Network,
                        "egress through slirp4netns from the VMM's own network namespace; host, private, link-local and metadata addresses rejected by nftables there",
                    )
                });
                Wall::on(
                    K::Network,
                    format!(
                        "{}; the guest ({GUEST_ADDRESS}/24, gateway and DNS {GUEST_GATEWAY}, {GUEST_DNS}) reaches out only through QEMU's user-mode network, which opens each connection as a socket in the VMM's own network namespace behind that firewall, its DNS forwarder asking that namespace's resolver",
                        outer.detail
                    ),
                )
            }
        },
        Wall::on(
            K::Root,
            match (image, spec.writable) {
                (Some(img), true) => format!(
                    "image {} (erofs image of its flattened rootfs, read-only) under a writable overlay in guest RAM (discarded at destroy)",
                    img.reference
                ),
                (Some(img), false) => format!(
                    "image {} (erofs image of its flattened rootfs), read-only",
                    img.reference
                ),
                (None, true) => "the host-rootfs view (erofs image, read-only) under a writable overlay in guest RAM (discarded at destroy)".into(),
                (None, false) => "the host-rootfs view (erofs image of /usr and selected /etc), read-only".into(),
            },
        ),
        Wall::on(K::Tmp, format!("tmpfs {} bytes in the guest", l.tmp_bytes)),
        Wall::on(
            K::Limits,
            format!(
                "guest cgroup: memory {} bytes (no swap); pids {} for the execs (their own cgroup), +{AGENT_PIDS} for the agent",
                l.memory_bytes, l.pids
            ),
        ),
        Wall::on(
            K::AgentChannel,
            "a virtio-serial port on a host unix socket in a root-only directory, multiplexed",
        ),
        Wall::on(
            K::User,
            format!("uid {} gid {}, workdir {workdir}", user.uid, user.gid),
        ),
        Wall::new(
            K::Seccomp,
            h.seccomp,
            if h.seccomp {
                "on every exec in the guest"
            } else {
                "OFF (opt-out)"
            },
        ),
        Wall::new(
            K::Landlock,
            h.landlock,
            if h.landlock {
                "on every exec in the guest"
            } else {
                "OFF (opt-out)"
            },
        ),
        Wall::new(
            K::NoNewPrivs,
            h.no_new_privileges,
            if h.no_new_privileges {
                "set on every exec in the guest"
            } else {
                "NOT set (opt-out)"
            },
        ),
        Wall::on(K::Lifetime, format!("{} s", spec.timeout_secs)),
    ];
    for m in &spec.mounts {
        applied.push(Wall::on(
            K::Mount,
            format!(
                "{} at {} (virtiofs, {}; the host side served {} by a virtiofsd confined to it)",
                m.host.display(),
                m.target.display(),
                if m.writable {
                    "read-write"
                } else {
                    "read-only"
                },
                if m.writable {
                    "read-write"
                } else {
                    "read-only"
                },
            ),
        ));
    }
    Plan {
        memory_mib,
        vcpus,
        guest,
        expires_at_ms: now_ms + spec.timeout_secs * 1000,
        applied,
    }
}

/// The host cgroups of one VMM: memory (guest RAM + the VMM's own) and the CPU quota,
/// under `stockade-microvm/ID` of each hierarchy (cgroup v2 when mounted, else v1).
pub fn host_cgroups(
    root: &Path,
    id: &str,
    memory_mib: u64,
    cpus: f64,
) -> Vec<(String, Vec<(String, String)>)> {
    let memory = ((memory_mib + VMM_OVERHEAD_MIB) << 20).to_string();
    let quota = ((cpus * 100_000.0) as u64).max(1000).to_string();
    let s = |k: &str, v: &str| (k.to_string(), v.to_string());
    if root.join("cgroup.controllers").exists() {
        return vec![(
            root.join("stockade-microvm").join(id).display().to_string(),
            vec![
                s("memory.max", &memory),
                s("?memory.swap.max", "0"),
                s("cpu.max", &format!("{quota} 100000")),
            ],
        )];
    }
    let mut v = Vec::new();
    if root.join("memory").is_dir() {
        v.push((
            root.join("memory/stockade-microvm")
                .join(id)
                .display()
                .to_string(),
            vec![
                s("memory.limit_in_bytes", &memory),
                s("?memory.memsw.limit_in_bytes", &memory),
            ],
        ));
    }
    if root.join("cpu").is_dir() {
        v.push((
            root.join("cpu/stockade-microvm")
                .join(id)
                .display()
                .to_string(),
            vec![
                s("cpu.cfs_period_us", "100000"),
                s("cpu.cfs_quota_us", &quota),
            ],
        ));
    }
    // Where cpuacct is a hierarchy of its own (not co-mounted with cpu), a group
    // there accounts the VMM's CPU time (nothing to set).
    let (cpu, cpuacct) = (root.join("cpu"), root.join("cpuacct"));
    if cpuacct.is_dir() && std::fs::canonicalize(&cpuacct).ok() != std::fs::canonicalize(&cpu).ok()
    {
        v.push((
            cpuacct
                .join("stockade-microvm")
                .join(id)
                .display()
                .to_string(),
            Vec::new(),
        ));
    }
    v
}

/// The walls of a copy of a VM (a fork, a start from a snapshot): its source's, with
/// the copy's own origin in place of the source's state.
pub fn copy_walls(source: &[Wall], origin: String) -> Vec<Wall> {
    let mut walls: Vec<Wall> = source
        .iter()
        .filter(|w| w.kind != WallKind::State)
        .cloned()
        .collect();
    walls.push(Wall::on(
        WallKind::State,
        format!(
            "{origin}: own hostname, clock and random seed; own copy of memory, /tmp and overlay"
        ),
    ));
    walls
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_spec::SandboxSpec;

    #[test]
    fn the_vm_is_sized_from_the_spec_with_the_secure_defaults() {
        let spec = SandboxSpec::default().validate().unwrap();
        let p = plan(
            &spec,
            None,
            None,
            vec!["virtio.ko".into()],
            1000,
            Accel::Tcg,
        );
        assert_eq!(p.memory_mib, 512 + GUEST_OVERHEAD_MIB);
        assert_eq!(p.vcpus, 1);
        assert!(!p.guest.writable);
        assert_eq!(p.guest.pids, 64 + AGENT_PIDS);
        assert_eq!(p.guest.memory_bytes, 512 << 20);
        assert!(p.guest.exec.seccomp && p.guest.exec.no_new_privs);
        assert_eq!(
            p.guest.exec.landlock_writable.as_deref(),
            Some(&["/tmp".to_string(), "/dev/shm".to_string()][..])
        );
        assert!(
            p.applied[0].kind == WallKind::Isolation
                && p.applied[0].detail.contains("software emulation"),
            "{:?}",
            p.applied
        );
        assert_eq!(p.expires_at_ms, 1000 + spec.timeout_secs * 1000);
        assert_eq!(p.guest.network, None);
        assert!(
            p.applied
                .iter()
                .any(|w| w.to_string() == "network: none (the VM has no network device)"),
            "{:?}",
            p.applied
        );
    }

    #[test]
    fn a_vm_with_network_gets_a_static_interface_the_vmms_dns_and_the_policys_files() {
        let spec = SandboxSpec::default().validate().unwrap();
        let net = NetInput {
            resolv_conf: "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n".into(),
            ca: Some(("CA".into(), "ROOTS\nCA".into())),
            env: [("TOKEN".to_string(), "placeholder".to_string())].into(),
            policy_applied: Some(Wall::on(WallKind::Network, "egress policy")),
        };
        let p = plan(&spec, None, Some(&net), Vec::new(), 0, Accel::Tcg);
        let g = p.guest.network.expect("a network interface");
        assert_eq!(
            (g.address, g.prefix, g.gateway),
            (GUEST_ADDRESS, 24, GUEST_GATEWAY)
        );
        // The guest asks the VMM's forwarder, never the namespace's loopback resolver
        // (127.0.0.1 in the guest is the guest's own).
        assert_eq!(
            g.files[0],
            (
                "/etc/resolv.conf".to_string(),
                "nameserver 10.0.2.3\noptions attempts:1 timeout:2\n".to_string()
            )
        );
        assert_eq!(g.files[1], ("/etc/stockade-ca.pem".into(), "CA".into()));
        assert_eq!(
            g.files[2],
            ("/etc/stockade-ca-bundle.pem".into(), "ROOTS\nCA".into())
        );
        assert_eq!(
            p.guest.exec.env.get("TOKEN").map(String::as_str),
            Some("placeholder")
        );
        assert!(
            p.applied[0].detail.contains("one virtio-net device"),
            "{:?}",
            p.applied
        );
        assert!(
            p.applied[1]
                .to_string()
                .starts_with("network: egress policy; the guest (10.0.2.15/24"),
            "{:?}",
            p.applied
        );
    }

    #[test]
    fn host_cgroups_cap_memory_and_cpu_on_v1_and_v2() {
        let d = std::env::temp_dir().join(format!("mvcg-{}", std::process::id()));
        std::fs::create_dir_all(d.join("memory")).unwrap();
        std::fs::create_dir_all(d.join("cpu")).unwrap();
        let v1 = host_cgroups(&d, "sb-1", 704, 0.5);
        assert_eq!(v1.len(), 2);
        assert!(v1[0].0.ends_with("memory/stockade-microvm/sb-1"));
        assert!(v1[0].1.contains(&(
            "memory.limit_in_bytes".into(),
            ((704 + VMM_OVERHEAD_MIB) << 20).to_string()
        )));
        assert!(
            v1[1]
                .1
                .contains(&("cpu.cfs_quota_us".into(), "50000".into()))
        );
        std::fs::write(d.join("cgroup.controllers"), "memory cpu").unwrap();
        let v2 = host_cgroups(&d, "sb-1", 704, 2.0);
        assert_eq!(v2.len(), 1);
        assert!(
            v2[0]
                .1
                .contains(&("cpu.max".into(), "200000 100000".into()))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
