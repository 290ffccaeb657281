//! What the host looks like: which root directories exist (and which are symlinks in a
//! merged-/usr layout), which harmless `/etc` entries to show, and how cgroups are
//! mounted. Gathered once by I/O here; planning is pure over it.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use stockade_cgroup::Layout;

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
    pub cgroups: Layout,
    /// The host's own IP addresses (sandboxes with egress must not reach them).
    pub host_addresses: Vec<String>,
    /// The host's connected networks, its gateways and its resolvers, as CIDR prefixes
    /// (read from the routing tables and `/etc/resolv.conf` at each create): a sandbox
    /// with egress must not reach the host's LAN, whatever its address range.
    pub host_networks: Vec<String>,
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

/// How this host's cgroups are mounted, read from `/proc/self/mountinfo` once per
/// process: the file lists every mount of the host (hundreds on a container host,
/// and reading it took 0.57 ms per create here with 285), and the cgroup hierarchies
/// are mounted at boot. A layout with no cgroups is read again next time (a host
/// whose cgroups were not mounted yet).
fn cgroups() -> Layout {
    static CACHED: std::sync::OnceLock<Layout> = std::sync::OnceLock::new();
    if let Some(c) = CACHED.get() {
        return c.clone();
    }
    let layout = Layout::parse(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    if layout != Layout::None {
        let _ = CACHED.set(layout.clone());
    }
    layout
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
        cgroups: cgroups(),
        host_addresses: read_host_addresses(),
        host_networks: read_host_networks(),
    }
}

/// [`host_addresses`] of this host now.
pub fn read_host_addresses() -> Vec<String> {
    host_addresses(
        &fs::read_to_string("/proc/net/fib_trie").unwrap_or_default(),
        &fs::read_to_string("/proc/net/if_inet6").unwrap_or_default(),
    )
}

/// [`host_networks`] of this host now.
pub fn read_host_networks() -> Vec<String> {
    host_networks(
        &fs::read_to_string("/proc/net/route").unwrap_or_default(),
        &fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default(),
        &fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    )
}

/// The host's LAN as CIDR prefixes: every directly connected network (a route without
/// a gateway, but the default route), every gateway, and every resolver of
/// `resolv.conf`, IPv4 from `/proc/net/route` and IPv6 from `/proc/net/ipv6_route`.
/// Routes through a gateway are not listed themselves (a VPN's `0.0.0.0/1` +
/// `128.0.0.0/1` would otherwise deny the whole internet); their gateways are.
pub fn host_networks(route: &str, ipv6_route: &str, resolv_conf: &str) -> Vec<String> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    const RTF_UP: u32 = 0x1;
    const RTF_GATEWAY: u32 = 0x2;
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    // /proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric Mask ...
    // (addresses in host byte order, hex).
    for line in route.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] == "lo" {
            continue;
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let (Some(dest), Some(gw), Some(flags), Some(mask)) =
            (hex(f[1]), hex(f[2]), hex(f[3]), hex(f[7]))
        else {
            continue;
        };
        if flags & RTF_UP == 0 {
            continue;
        }
        let addr = |v: u32| Ipv4Addr::from(u32::from_be(v));
        if flags & RTF_GATEWAY != 0 && gw != 0 {
            add(format!("{}/32", addr(gw)));
        } else if mask != 0 {
            let len = u32::from_be(mask).leading_ones();
            add(format!("{}/{len}", addr(dest & mask)));
        }
    }
    // /proc/net/ipv6_route: dest dest_len src src_len next_hop metric refcnt use flags iface
    for line in ipv6_route.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[9] == "lo" {
            continue;
        }
        let v6 = |s: &str| u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from);
        let (Some(dest), Ok(len), Some(gw), Ok(flags)) = (
            v6(f[0]),
            u8::from_str_radix(f[1], 16),
            v6(f[4]),
            u32::from_str_radix(f[8], 16),
        ) else {
            continue;
        };
        if flags & RTF_UP == 0 {
            continue;
        }
        if flags & RTF_GATEWAY != 0 && !gw.is_unspecified() {
            add(format!("{gw}/128"));
        } else if len > 0 && len < 128 && !dest.is_multicast() {
            add(format!("{dest}/{len}"));
        }
    }
    for line in resolv_conf.lines() {
        let mut w = line.split_whitespace();
        if w.next() == Some("nameserver")
            && let Some(ip) = w.next().and_then(|a| a.parse::<std::net::IpAddr>().ok())
        {
            add(match ip {
                std::net::IpAddr::V4(a) => format!("{a}/32"),
                std::net::IpAddr::V6(a) => format!("{a}/128"),
            });
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_host_networks_gateways_and_resolvers() {
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            tun0\t00000000\t0108000A\t0003\t0\t0\t0\t00000080\t0\t0\t0\n\
            eth1\t0000A8C0\t00000000\t0000\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        let v6 = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
            00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n\
            00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n\
            ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000003 00000000 00000001     eth0\n";
        let resolv =
            "# comment\nnameserver 10.255.255.53\nnameserver 2001:db8::53\nsearch example\n";
        assert_eq!(
            host_networks(route, v6, resolv),
            [
                "192.0.2.1/32",
                "192.0.2.0/24",
                "10.0.8.1/32",
                "fd00::/64",
                "fd00::1/128",
                "10.255.255.53/32",
                "2001:db8::53/128"
            ]
        );
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
