//! Host checks for `stockade doctor` and `Provider::probe`.

use std::path::Path;

use stockade_core::Check;

use crate::layout;
use stockade_cgroup::Layout;

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
            Layout::V2 { root } => vec![root.join(&parent)],
            Layout::Hybrid { v1, .. } => ["memory", "pids", "cpu"]
                .iter()
                .filter_map(|c| v1.get(*c).map(|b| b.join(&parent)))
                .collect(),
            Layout::None => vec![],
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
        Layout::V2 { root } => (true, format!("cgroup v2 at {}", root.display())),
        Layout::Hybrid { v1, unified } => (
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
        Layout::None => (false, "no cgroup filesystem mounted".into()),
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
            "off; optional tuning, sandboxes start 2-4 ms faster after `stockade setup tune` (mount -o remount,favordynmods on each cgroup2 mount; `--undo` reverts)".into()
        },
        fix: None,
    });
    let pid_max = read(PID_MAX).trim().parse::<u64>().unwrap_or(0);
    v.push(Check {
        name: "pid_max".into(),
        ok: true,
        detail: if pid_max >= TUNED_PID_MAX {
            format!("{pid_max}")
        } else {
            format!(
                "{pid_max}: room for about {} idle sandboxes ({IDLE_TASKS} tasks each) with nothing else running; \
                 `stockade setup tune` raises it to {TUNED_PID_MAX}",
                pid_max / IDLE_TASKS
            )
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

/// One cgroup2 mount: where, and its super options (`rw,nsdelegate,...`).
#[derive(Debug, PartialEq, Eq)]
pub struct Cgroup2Mount {
    pub path: String,
    pub options: Vec<String>,
}

/// The cgroup2 mounts in `/proc/self/mountinfo` text.
pub fn cgroup2_mounts(mountinfo: &str) -> Vec<Cgroup2Mount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let mut t = tail.split_whitespace();
            if t.next()? != "cgroup2" {
                return None;
            }
            let options = t
                .nth(1)
                .unwrap_or("")
                .split(',')
                .map(str::to_string)
                .collect();
            // Mount points are octal-escaped (`\040` for a space).
            let path = head.split_whitespace().nth(4)?.replace("\\040", " ");
            Some(Cgroup2Mount { path, options })
        })
        .collect()
}

/// The kernel's pid limit (it counts threads too).
const PID_MAX: &str = "/proc/sys/kernel/pid_max";

/// What `setup tune` raises `pid_max` to: the 64-bit kernel's ceiling (2^22).
pub const TUNED_PID_MAX: u64 = 1 << 22;

/// Tasks an idle native sandbox holds: its monitor, PID 1 (two threads) and the exec
/// zygote.
pub const IDLE_TASKS: u64 = 4;

/// `stockade setup tune`, second part: raises `kernel.pid_max` to [`TUNED_PID_MAX`]
/// when it is lower (the Linux default of 32768 caps a host at a few thousand idle
/// sandboxes). `--undo` leaves it: a higher limit takes nothing from anyone.
pub fn tune_pid_max(raise: bool, dry_run: bool) -> stockade_core::Result<Vec<String>> {
    use stockade_core::Error;
    let now = read(PID_MAX).trim().parse::<u64>().unwrap_or(0);
    if !raise {
        return Ok(vec![format!(
            "{PID_MAX}: left at {now} (a higher limit is harmless)"
        )]);
    }
    if now >= TUNED_PID_MAX {
        return Ok(vec![format!("{PID_MAX}: already {now}")]);
    }
    let what = format!("echo {TUNED_PID_MAX} > {PID_MAX} (was {now})");
    if dry_run {
        return Ok(vec![format!("would run: {what}")]);
    }
    std::fs::write(PID_MAX, TUNED_PID_MAX.to_string()).map_err(|e| Error::Unavailable {
        what: "kernel.pid_max".into(),
        reason: format!("{what} failed: {e}"),
        fix: "run as root (in the host's pid namespace)".into(),
    })?;
    Ok(vec![format!("ran: {what}")])
}

/// The remount data that turns `favordynmods` on (or off) and keeps the mount's
/// other cgroup2 options (a remount clears the options it does not name); `None`
/// when nothing would change.
pub fn favordynmods_data(m: &Cgroup2Mount, on: bool) -> Option<String> {
    let has = m.options.iter().any(|o| o == "favordynmods");
    if has == on {
        return None;
    }
    let mut kept: Vec<&str> = m
        .options
        .iter()
        .map(String::as_str)
        .filter(|o| !matches!(*o, "rw" | "ro" | "favordynmods" | ""))
        .collect();
    if on {
        kept.push("favordynmods");
    }
    Some(kept.join(","))
}

/// `stockade setup tune`: turns `favordynmods` on (or off with `on == false`) on
/// every cgroup2 mount, so a sandbox's cgroup migration skips an RCU grace period
/// (2-4 ms per create on hosts where it is off). Says what it did (or, with
/// `dry_run`, would do). Needs root and a kernel of 6.0 or later.
pub fn tune_favordynmods(on: bool, dry_run: bool) -> stockade_core::Result<Vec<String>> {
    use stockade_core::Error;
    let mounts = cgroup2_mounts(&read("/proc/self/mountinfo"));
    if mounts.is_empty() {
        return Err(Error::Unavailable {
            what: "favordynmods".into(),
            reason: "no cgroup2 mount on this host".into(),
            fix: "mount cgroup2 (e.g. at /sys/fs/cgroup); on a cgroup v1 host there is nothing to tune".into(),
        });
    }
    let mut done = Vec::new();
    for m in &mounts {
        let Some(data) = favordynmods_data(m, on) else {
            done.push(format!(
                "{}: favordynmods already {}",
                m.path,
                if on { "on" } else { "off" }
            ));
            continue;
        };
        let what = if data.is_empty() {
            format!("mount -o remount {}", m.path)
        } else {
            format!("mount -o remount,{data} {}", m.path)
        };
        if dry_run {
            done.push(format!("would run: {what}"));
            continue;
        }
        nix::mount::mount(
            None::<&str>,
            m.path.as_str(),
            None::<&str>,
            nix::mount::MsFlags::MS_REMOUNT,
            Some(data.as_str()),
        )
        .map_err(|e| Error::Unavailable {
            what: format!("favordynmods on {}", m.path),
            reason: format!("{what} failed: {e}"),
            fix: "run as root, on a kernel of 6.0 or later".into(),
        })?;
        done.push(format!("ran: {what}"));
    }
    Ok(done)
}

#[cfg(test)]
mod tune_tests {
    use super::*;

    #[test]
    fn favordynmods_keeps_the_other_options() {
        let text = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n\
                    31 1 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let m = cgroup2_mounts(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, "/sys/fs/cgroup/unified");
        assert_eq!(
            favordynmods_data(&m[0], true).as_deref(),
            Some("favordynmods")
        );
        assert_eq!(favordynmods_data(&m[0], false), None);
        assert_eq!(
            favordynmods_data(&m[1], true).as_deref(),
            Some("nsdelegate,memory_recursiveprot,favordynmods")
        );
        let on = Cgroup2Mount {
            path: "/x".into(),
            options: vec!["rw".into(), "nsdelegate".into(), "favordynmods".into()],
        };
        assert_eq!(favordynmods_data(&on, true), None);
        assert_eq!(favordynmods_data(&on, false).as_deref(), Some("nsdelegate"));
    }
}
