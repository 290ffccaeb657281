//! Host checks for `stockade doctor` and `Provider::probe`.

use std::path::Path;

use stockade_core::Check;

use crate::layout::{self, CgroupLayout};

fn check(name: &str, ok: bool, detail: String, fix: &str) -> Check {
    Check {
        name: name.into(),
        ok,
        detail,
        fix: (!ok).then(|| fix.to_string()),
    }
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// What this host offers the native provider (its `probe`): each check it needs, and
/// the optional parts (overlayfs for writable roots, slirp4netns and nft for egress).
/// Other providers check their own parts (docker: dockerd) in their own `probe`.
pub fn host_checks() -> Vec<Check> {
    let mut v = Vec::new();
    let root = stockade_core::host::is_root();
    if root {
        v.push(check("root", true, "running as root".into(), ""));
        let pool = crate::idpool::IdPool::from_env().and_then(|p| p.check_host().map(|()| p));
        v.push(check(
            "id pool",
            pool.is_ok(),
            match &pool {
                Ok(p) => format!("sandboxes' user namespaces lease host ids from {p}"),
                Err(e) => e.to_string(),
            },
            "choose a range clear of host accounts: serve --id-range or $STOCKADE_ID_RANGE",
        ));
    } else {
        let r = crate::rootless::RootlessHost::detect();
        v.push(check(
            "rootless ids",
            true,
            match (&r.helpers, r.subuid) {
                (Some(_), Some((s, n))) => format!("your uid {} and subordinate ids {s} (+{n}) through newuidmap", r.uid),
                _ => format!("your uid {} only (no /etc/subuid range or no newuidmap: root inside is not mapped)", r.uid),
            },
            "",
        ));
        let parent = crate::rootless::delegated_name(r.uid);
        let cgs: Vec<std::path::PathBuf> = match layout::detect().cgroups {
            CgroupLayout::V2 { root } => vec![root.join(&parent)],
            CgroupLayout::Hybrid { v1, .. } => ["memory", "pids", "cpu"]
                .iter()
                .filter_map(|c| v1.get(*c).map(|b| b.join(&parent)))
                .collect(),
            CgroupLayout::None => vec![],
        };
        let delegated = !cgs.is_empty()
            && cgs
                .iter()
                .all(|p| nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::W_OK).is_ok());
        v.push(check(
            "rootless limits",
            delegated,
            if delegated {
                format!(
                    "cgroups delegated to you: {}",
                    cgs.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                "no cgroup is delegated to you: sandboxes (which all have limits) are refused"
                    .into()
            },
            "as root, once: stockade setup rootless --user YOUR_NAME",
        ));
    }
    let userns = read("/proc/sys/user/max_user_namespaces")
        .parse::<u64>()
        .unwrap_or(0);
    v.push(check(
        "user namespaces",
        userns > 0,
        format!("max_user_namespaces = {userns}"),
        "sysctl -w user.max_user_namespaces=15000",
    ));
    let ns_ok = ["mnt", "pid", "net", "uts", "ipc", "cgroup"]
        .iter()
        .all(|n| Path::new(&format!("/proc/self/ns/{n}")).exists());
    v.push(check(
        "namespaces",
        ns_ok,
        "mount, pid, net, uts, ipc, cgroup".into(),
        "use a kernel with namespaces enabled",
    ));
    let cg = layout::detect().cgroups;
    let (ok, detail) = match &cg {
        CgroupLayout::V2 { root } => (true, format!("cgroup v2 at {}", root.display())),
        CgroupLayout::Hybrid { v1, unified } => (
            ["memory", "pids", "cpu"]
                .iter()
                .all(|c| v1.contains_key(*c)),
            format!(
                "hybrid: v1 controllers {} + {}",
                v1.keys().cloned().collect::<Vec<_>>().join(","),
                unified
                    .as_ref()
                    .map(|u| format!("cgroup2 at {} (cgroup.kill)", u.display()))
                    .unwrap_or_else(|| "no cgroup2".into())
            ),
        ),
        CgroupLayout::None => (false, "no cgroup filesystem mounted".into()),
    };
    v.push(check(
        "cgroups",
        ok,
        detail,
        "mount cgroup2 at /sys/fs/cgroup, or the v1 memory, pids and cpu controllers",
    ));
    // Not a requirement: a tuning hint. Cgroup migrations (one per sandbox) wait for an
    // RCU grace period unless the hierarchy favours dynamic changes.
    let mountinfo = read("/proc/self/mountinfo");
    let favor = mountinfo
        .lines()
        .any(|l| l.contains(" - cgroup2 ") && l.contains("favordynmods"));
    v.push(Check {
        name: "cgroup favordynmods".into(),
        ok: true,
        detail: if favor {
            "on (sandbox starts skip an RCU grace period)".into()
        } else {
            "off; optional tuning, sandboxes start 2-4 ms faster with: mount -o remount,favordynmods <cgroup2 mount>".into()
        },
        fix: None,
    });
    let abi = stockade_sys::landlock::kernel_abi();
    v.push(check(
        "landlock",
        abi >= 3,
        format!("ABI {abi}"),
        "boot a kernel >= 6.2 with lsm=landlock",
    ));
    let seccomp = read("/proc/self/status")
        .lines()
        .any(|l| l.starts_with("Seccomp:"));
    v.push(check(
        "seccomp",
        seccomp,
        if seccomp {
            "available".into()
        } else {
            "missing".into()
        },
        "use a kernel with CONFIG_SECCOMP_FILTER",
    ));
    let overlay = read("/proc/filesystems").contains("overlay");
    v.push(check(
        "overlayfs",
        overlay,
        if overlay {
            "available (writable roots)".into()
        } else {
            "missing".into()
        },
        "modprobe overlay",
    ));
    let slirp = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("slirp4netns").is_file());
    v.push(check(
        "slirp4netns (network egress)",
        slirp,
        if slirp {
            "installed".into()
        } else {
            "not installed".into()
        },
        "apt-get install slirp4netns",
    ));
    let nft = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
        .iter()
        .any(|p| std::path::Path::new(p).is_file());
    v.push(check(
        "nft (egress firewall)",
        nft,
        if nft {
            "installed".into()
        } else {
            "not installed".into()
        },
        "apt-get install nftables",
    ));
    let agent = crate::find_agent();
    v.push(check(
        "stockade-agent",
        agent.is_ok(),
        agent
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(std::string::ToString::to_string),
        "install stockade-agent beside stockade or set STOCKADE_AGENT",
    ));
    v
}
