//! What the host looks like: which root directories exist (and which are symlinks in a
//! merged-/usr layout), which harmless `/etc` entries to show, and how cgroups are
//! mounted. Gathered once by I/O here; planning is pure over it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A host path as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Entry {
    Dir,
    File,
    Symlink(String),
}

/// Host directories shown read-only inside (when they exist).
pub const ROOT_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Host `/etc` entries shown read-only inside: public configuration that programs need
/// (dynamic linker cache, alternatives symlinks, CA certificates, time zone, service
/// and protocol names). Nothing with secrets or host identity.
pub const ETC_ALLOWLIST: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/localtime",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/bash.bashrc",
    "/etc/inputrc",
];

/// Device nodes bound into `/dev`.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The host facts the planner uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostLayout {
    /// Root directories that exist, in [`ROOT_DIRS`] order.
    pub root: Vec<(PathBuf, Entry)>,
    /// `/etc` entries that exist, in [`ETC_ALLOWLIST`] order.
    pub etc: Vec<(PathBuf, Entry)>,
    /// Nameserver lines for the sandbox's resolv.conf when it has network.
    pub nameservers: Vec<String>,
    /// The cgroup layout.
    pub cgroups: CgroupLayout,
    /// The host's own IP addresses (sandboxes with egress must not reach them).
    pub host_addresses: Vec<String>,
}

/// How cgroups are mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CgroupLayout {
    /// Pure cgroup v2 at this mountpoint.
    V2 { root: PathBuf },
    /// v1 controllers (name -> mountpoint), maybe with a v2 hierarchy (for cgroup.kill).
    Hybrid {
        v1: BTreeMap<String, PathBuf>,
        unified: Option<PathBuf>,
    },
    /// No usable cgroups.
    None,
}

fn entry(p: &Path) -> Option<Entry> {
    let m = fs::symlink_metadata(p).ok()?;
    if m.file_type().is_symlink() {
        Some(Entry::Symlink(
            fs::read_link(p).ok()?.to_string_lossy().into_owned(),
        ))
    } else if m.is_dir() {
        Some(Entry::Dir)
    } else {
        Some(Entry::File)
    }
}

/// Reads the layout of this host.
pub fn detect() -> HostLayout {
    let pick = |list: &[&str]| {
        list.iter()
            .filter_map(|p| entry(Path::new(p)).map(|e| (PathBuf::from(p), e)))
            .collect()
    };
    let nameservers = fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.trim_start().starts_with("nameserver"))
        .map(|l| l.trim().to_string())
        .collect();
    HostLayout {
        root: pick(ROOT_DIRS),
        etc: pick(ETC_ALLOWLIST),
        nameservers,
        cgroups: parse_cgroups(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()),
        host_addresses: host_addresses(
            &fs::read_to_string("/proc/net/fib_trie").unwrap_or_default(),
            &fs::read_to_string("/proc/net/if_inet6").unwrap_or_default(),
        ),
    }
}

/// The host's local addresses: IPv4 from `/proc/net/fib_trie` (`/32 host LOCAL`
/// entries), IPv6 from `/proc/net/if_inet6`.
pub fn host_addresses(fib_trie: &str, if_inet6: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut prev = "";
    for line in fib_trie.lines() {
        let t = line.trim();
        if t.starts_with("/32 host LOCAL")
            && let Some(addr) = prev.split_whitespace().nth(1)
            && !out.iter().any(|a| a == addr)
        {
            out.push(addr.to_string());
        }
        prev = t;
    }
    for line in if_inet6.lines() {
        if let Some(hex) = line.split_whitespace().next()
            && hex.len() == 32
        {
            let groups: Vec<&str> = (0..8).map(|i| &hex[i * 4..i * 4 + 4]).collect();
            let v6 = groups.join(":");
            if let Ok(a) = v6.parse::<std::net::Ipv6Addr>() {
                let a = a.to_string();
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

/// Parses `/proc/self/mountinfo` into a cgroup layout.
pub fn parse_cgroups(mountinfo: &str) -> CgroupLayout {
    let mut v1 = BTreeMap::new();
    let mut v2: Option<PathBuf> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mountpoint = left.split(' ').nth(4).unwrap_or("");
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let opts = r.nth(1).unwrap_or("");
        match fstype {
            "cgroup2" => v2 = Some(PathBuf::from(mountpoint)),
            "cgroup" => {
                for o in opts.split(',') {
                    if matches!(
                        o,
                        "memory" | "pids" | "cpu" | "cpuacct" | "cpuset" | "freezer"
                    ) {
                        v1.insert(o.to_string(), PathBuf::from(mountpoint));
                    }
                }
            }
            _ => {}
        }
    }
    match (v1.is_empty(), v2) {
        (true, Some(root)) => CgroupLayout::V2 { root },
        (false, unified) => CgroupLayout::Hybrid { v1, unified },
        (true, None) => CgroupLayout::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_and_pure_v2() {
        let hybrid = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                      35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                      39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        match parse_cgroups(hybrid) {
            CgroupLayout::Hybrid { v1, unified } => {
                assert_eq!(v1["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
                assert_eq!(v1["pids"], PathBuf::from("/sys/fs/cgroup/pids"));
                assert_eq!(unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));
            }
            other => panic!("{other:?}"),
        }
        let v2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_cgroups(v2),
            CgroupLayout::V2 {
                root: "/sys/fs/cgroup".into()
            }
        );
        assert_eq!(parse_cgroups(""), CgroupLayout::None);
    }

    #[test]
    fn reads_host_addresses() {
        let fib = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 192.0.2.2\n        /32 host LOCAL\n     |-- 127.0.0.1\n        /32 host LOCAL\n";
        let v6 = "fd000000000000000000000000000002 04 40 00 82     eth0\n00000000000000000000000000000001 01 80 10 80       lo\n";
        assert_eq!(
            host_addresses(fib, v6),
            ["192.0.2.2", "127.0.0.1", "fd00::2", "::1"]
        );
    }
}
