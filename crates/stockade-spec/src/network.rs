//! Network access of a sandbox: none, all of the public internet, or an egress policy
//! (an allowlist of names and CIDRs with ports, and a denylist that wins).
//!
//! Policy entries are kept as text in the spec (`pypi.org`, `*.pythonhosted.org:443`,
//! `10.1.2.0/24:5432`, `[2001:db8::/32]:443/udp`) and parsed by [`NetRule::parse`];
//! [`SandboxSpec::validate`](crate::SandboxSpec::validate) lists every bad entry.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Ports an allow entry opens when it names none: HTTP and HTTPS.
pub const DEFAULT_ALLOW_PORTS: &[u16] = &[80, 443];
/// Ranges that are not the public internet (see [`NetRule::opens_private`]).
const NON_PUBLIC_V4: &[(&str, u32)] = &[
    ("0.0.0.0", 8),
    ("10.0.0.0", 8),
    ("100.64.0.0", 10),
    ("127.0.0.0", 8),
    ("169.254.0.0", 16),
    ("172.16.0.0", 12),
    ("192.0.0.0", 24),
    ("192.168.0.0", 16),
    ("224.0.0.0", 4),
    ("240.0.0.0", 4),
];
const NON_PUBLIC_V6: &[(&str, u32)] = &[("::1", 128), ("fc00::", 7), ("fe80::", 10), ("ff00::", 8)];

/// Most entries one list of a policy may hold.
pub const MAX_POLICY_ENTRIES: usize = 256;
/// Most ports one entry may list.
pub const MAX_ENTRY_PORTS: usize = 32;

/// Network access of a sandbox.
///
/// In JSON: `"none"` (or `false`), `"egress"` (or `"all"`, `true`), a list of allow
/// entries, or `{"allow": [...], "deny": [...]}`. It is written back as `"none"`,
/// `"egress"` or the object, so older readers of `"none"`/`"egress"` keep working.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Network {
    /// Own network namespace with loopback only (default).
    #[default]
    None,
    /// Outbound access to the public internet through a user-mode NAT; nothing of the
    /// host's own network (its loopback, its services, its LAN, cloud metadata) is
    /// reachable.
    Egress,
    /// Outbound access only to what the policy allows; names resolve only through
    /// Stockade's resolver, which answers allowed names alone.
    Policy(EgressPolicy),
}

impl Network {
    /// An allowlist policy from entries (no denylist).
    pub fn allow<I, S>(entries: I) -> Network
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Network::Policy(EgressPolicy {
            allow: entries.into_iter().map(Into::into).collect(),
            ..Default::default()
        })
    }

    /// Whether any traffic can leave the sandbox's namespace.
    pub fn has_egress(&self) -> bool {
        !matches!(self, Network::None)
    }

    /// This network with credential values redacted (see [`EgressPolicy::redacted`]).
    pub fn redacted(&self) -> Network {
        match self {
            Network::Policy(p) => Network::Policy(p.redacted()),
            other => other.clone(),
        }
    }

    /// The policy, when this is one.
    pub fn policy(&self) -> Option<&EgressPolicy> {
        match self {
            Network::Policy(p) => Some(p),
            _ => None,
        }
    }
}

/// An egress policy: entries as text (see the module docs). Default: nothing allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressPolicy {
    /// What may be reached: `NAME`, `*.SUFFIX`, `IP`, `CIDR`, each with optional
    /// `:PORTS` (`443`, `80,443`, `*`) and `/tcp`, `/udp` or `/any` (default tcp on
    /// 80 and 443).
    pub allow: Vec<String>,
    /// What may never be reached, even when allowed (default: every port and protocol).
    pub deny: Vec<String>,
    /// Secrets bound to a host: set as a header on the sandbox's HTTPS requests to
    /// that host by the egress proxy, never inside the sandbox (see [`Credential`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
}

/// Most credentials one policy may hold.
pub const MAX_CREDENTIALS: usize = 16;
/// What `inspect` and the state file show instead of a credential's value.
pub const REDACTED: &str = "<redacted>";

/// A secret bound to a host. Code in the sandbox sees only a placeholder (in `env`,
/// when named); the egress proxy, outside the sandbox, sets `header: value` on each
/// HTTPS request to `host` (through a certificate authority made for the sandbox,
/// which the sandbox trusts and whose key it never sees), and refuses any request
/// that carries the placeholder to another host.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// The host whose requests get the secret: a name (not a wildcard) the allowlist
    /// opens on TCP (the secret is set on HTTPS requests to it, on any port opened).
    pub host: String,
    /// The request header set to `value` (default `Authorization`).
    #[serde(default = "default_credential_header")]
    pub header: String,
    /// The header's value, e.g. `Bearer sk-...`: the secret.
    pub value: String,
    /// An environment variable that holds the placeholder inside the sandbox (for
    /// clients that refuse to start without a key), e.g. `OPENAI_API_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

fn default_credential_header() -> String {
    "Authorization".into()
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("host", &self.host)
            .field("header", &self.header)
            .field("value", &REDACTED)
            .field("env", &self.env)
            .finish()
    }
}

impl Credential {
    /// Every problem of this credential against the policy's allow rules, as messages.
    fn problems(&self, allow: &[NetRule]) -> Vec<String> {
        let mut out = Vec::new();
        let host = self.host.trim_end_matches('.').to_ascii_lowercase();
        match NetRule::parse_with(&host, Defaults::ALLOW) {
            Ok(NetRule {
                target: NetTarget::Name(_),
                ports: Ports::List(p),
                ..
            }) if p == DEFAULT_ALLOW_PORTS => {
                let opened = allow
                    .iter()
                    .any(|r| r.protocol != Protocol::Udp && r.matches_name(&host));
                if !opened {
                    out.push(format!(
                        "host {:?} is not opened on tcp by the allowlist; add \"{host}:443\" to allow",
                        self.host
                    ));
                }
            }
            _ => out.push(format!(
                "host {:?} must be a plain name like api.openai.com (no wildcard, address, port or protocol)",
                self.host
            )),
        }
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if self.header.is_empty() || !self.header.chars().all(token) {
            out.push(format!(
                "header {:?} is not an HTTP header name",
                self.header
            ));
        } else if [
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "upgrade",
            "te",
            "trailer",
        ]
        .contains(&self.header.to_ascii_lowercase().as_str())
        {
            out.push(format!(
                "header {:?} frames or routes the request; a credential cannot set it",
                self.header
            ));
        }
        if self.value.is_empty() {
            out.push("value is empty".into());
        } else if self.value.len() > 8192 {
            out.push(format!(
                "value is {} bytes, more than 8192",
                self.value.len()
            ));
        } else if self
            .value
            .bytes()
            .any(|b| b < 0x20 && b != b'\t' || b == 0x7f)
        {
            out.push(
                "value holds a control character (a line break would split the request)".into(),
            );
        }
        if let Some(env) = &self.env {
            let ok = !env.is_empty()
                && !env.starts_with(|c: char| c.is_ascii_digit())
                && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                out.push(format!(
                    "env {env:?} is not an environment variable name (letters, digits, _)"
                ));
            }
        }
        out
    }
}

impl EgressPolicy {
    /// Every problem of the policy, as (field, message), fields like `network.allow[2]`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (list, entries, default) in [
            ("allow", &self.allow, Defaults::ALLOW),
            ("deny", &self.deny, Defaults::DENY),
        ] {
            if entries.len() > MAX_POLICY_ENTRIES {
                out.push((
                    format!("network.{list}"),
                    format!(
                        "{} entries is more than the {MAX_POLICY_ENTRIES} allowed",
                        entries.len()
                    ),
                ));
            }
            for (i, e) in entries.iter().enumerate() {
                if let Err(ps) = NetRule::parse_with(e, default) {
                    out.extend(ps.into_iter().map(|p| (format!("network.{list}[{i}]"), p)));
                }
            }
        }
        if self.credentials.len() > MAX_CREDENTIALS {
            out.push((
                "network.credentials".into(),
                format!(
                    "{} credentials is more than the {MAX_CREDENTIALS} allowed",
                    self.credentials.len()
                ),
            ));
        }
        let allow = self.allow_rules();
        let mut envs = std::collections::HashSet::new();
        for (i, c) in self.credentials.iter().enumerate() {
            let field = format!("network.credentials[{i}]");
            out.extend(c.problems(&allow).into_iter().map(|p| (field.clone(), p)));
            if let Some(e) = &c.env
                && !envs.insert(e.clone())
            {
                out.push((field, format!("env {e:?} is named by two credentials")));
            }
        }
        out
    }

    /// The policy with each credential's value replaced by [`REDACTED`]: what is
    /// written to state files and shown by `inspect`.
    pub fn redacted(&self) -> EgressPolicy {
        let mut p = self.clone();
        for c in &mut p.credentials {
            c.value = REDACTED.into();
        }
        p
    }

    /// The parsed allow rules (entries that do not parse are skipped: validate first).
    pub fn allow_rules(&self) -> Vec<NetRule> {
        self.allow
            .iter()
            .filter_map(|e| NetRule::parse_with(e, Defaults::ALLOW).ok())
            .collect()
    }

    /// The parsed deny rules (entries that do not parse are skipped: validate first).
    pub fn deny_rules(&self) -> Vec<NetRule> {
        self.deny
            .iter()
            .filter_map(|e| NetRule::parse_with(e, Defaults::DENY).ok())
            .collect()
    }
}

/// What one entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetTarget {
    /// One name, lowercase, without a trailing dot.
    Name(String),
    /// Every name below a suffix (`*.example.com` is `example.com`): not the suffix
    /// itself.
    Wildcard(String),
    /// An address range; a single address is a /32 or /128.
    Cidr(IpAddr, u8),
}

/// Ports of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Every port.
    Any,
    /// These ports.
    List(Vec<u16>),
}

/// Transport protocol of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    /// TCP and UDP.
    Any,
}

impl Protocol {
    /// The nftables protocol names it covers.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Protocol::Tcp => &["tcp"],
            Protocol::Udp => &["udp"],
            Protocol::Any => &["tcp", "udp"],
        }
    }
}

/// One parsed policy entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetRule {
    pub target: NetTarget,
    pub ports: Ports,
    pub protocol: Protocol,
    /// The entry as written.
    pub text: String,
}

#[derive(Clone, Copy)]
struct Defaults {
    any_port: bool,
    protocol: Protocol,
}

impl Defaults {
    const ALLOW: Defaults = Defaults {
        any_port: false,
        protocol: Protocol::Tcp,
    };
    const DENY: Defaults = Defaults {
        any_port: true,
        protocol: Protocol::Any,
    };
}

impl NetRule {
    /// Parses an allow entry (default tcp on 80 and 443); every problem is listed.
    pub fn parse(text: &str) -> Result<NetRule, Vec<String>> {
        Self::parse_with(text, Defaults::ALLOW)
    }

    /// Parses a deny entry (default every port, tcp and udp).
    pub fn parse_deny(text: &str) -> Result<NetRule, Vec<String>> {
        Self::parse_with(text, Defaults::DENY)
    }

    fn parse_with(text: &str, d: Defaults) -> Result<NetRule, Vec<String>> {
        let mut problems = Vec::new();
        let t = text.trim();
        if t.is_empty() {
            return Err(vec!["entry is empty".into()]);
        }
        let mut rest = t;
        let mut protocol = d.protocol;
        for (suffix, p) in [
            ("/tcp", Protocol::Tcp),
            ("/udp", Protocol::Udp),
            ("/any", Protocol::Any),
        ] {
            // Bytes, not a str slice: the end of `rest` may be inside a character.
            if rest.len() > suffix.len()
                && rest.as_bytes()[rest.len() - suffix.len()..]
                    .eq_ignore_ascii_case(suffix.as_bytes())
            {
                rest = &rest[..rest.len() - suffix.len()];
                protocol = p;
            }
        }
        if let Some((head, tail)) = rest.rsplit_once('/')
            && tail.chars().any(|c| c.is_ascii_alphabetic())
            && !tail.contains(':')
        {
            problems.push(format!(
                "{t:?}: unknown protocol {tail:?}; use /tcp, /udp or /any"
            ));
            rest = head;
        }
        let (target, ports) = if let Some(inner) = rest.strip_prefix('[') {
            match inner.split_once(']') {
                Some((addr, "")) => (addr, None),
                Some((addr, p)) => match p.strip_prefix(':') {
                    Some(p) => (addr, Some(p)),
                    None => {
                        problems.push(format!("{t:?}: expected :PORTS after ]"));
                        (addr, None)
                    }
                },
                None => {
                    problems.push(format!("{t:?}: [ without ]"));
                    (inner, None)
                }
            }
        } else if rest.matches(':').count() > 1 {
            // An IPv6 address or range without brackets: no ports.
            (rest, None)
        } else {
            match rest.rsplit_once(':') {
                Some((a, p)) => (a, Some(p)),
                None => (rest, None),
            }
        };
        let ports = match ports {
            None if d.any_port => Ports::Any,
            None => Ports::List(DEFAULT_ALLOW_PORTS.to_vec()),
            Some("*") => Ports::Any,
            Some(p) => {
                let mut list = Vec::new();
                for part in p.split(',') {
                    match part.trim().parse::<u32>() {
                        Ok(0) => problems.push(format!("{t:?}: port 0 is not a port (1-65535)")),
                        Ok(n) if n > 65535 => {
                            problems.push(format!("{t:?}: port {n} is out of range 1-65535"));
                        }
                        Ok(n) => {
                            if !list.contains(&(n as u16)) {
                                list.push(n as u16);
                            }
                        }
                        Err(_) => problems.push(format!(
                            "{t:?}: port {part:?} is not a number (ports: 443, 80,443 or *)"
                        )),
                    }
                }
                if list.len() > MAX_ENTRY_PORTS {
                    problems.push(format!(
                        "{t:?}: {} ports is more than the {MAX_ENTRY_PORTS} allowed",
                        list.len()
                    ));
                }
                Ports::List(list)
            }
        };
        let target = match parse_target(target) {
            Ok(x) => Some(x),
            Err(m) => {
                problems.push(format!("{t:?}: {m}"));
                None
            }
        };
        match target {
            Some(target) if problems.is_empty() => Ok(NetRule {
                target,
                ports,
                protocol,
                text: t.to_string(),
            }),
            _ => Err(problems),
        }
    }

    /// Whether this rule is a range that reaches into loopback, private, shared,
    /// link-local (metadata), multicast or reserved addresses.
    pub fn opens_private(&self) -> bool {
        let fixed = |ranges: &[(&str, u32)]| {
            ranges.iter().any(|(n, l)| {
                n.parse::<IpAddr>()
                    .is_ok_and(|n| self.overlaps_range(n, *l as u8))
            })
        };
        match &self.target {
            NetTarget::Cidr(IpAddr::V4(_), _) => fixed(NON_PUBLIC_V4),
            NetTarget::Cidr(IpAddr::V6(_), _) => fixed(NON_PUBLIC_V6),
            _ => false,
        }
    }

    /// Whether this rule is an address range that shares an address with `cidr`
    /// (`A.B.C.D/N`, an IPv6 prefix, or one address); a `cidr` that does not parse
    /// overlaps nothing.
    pub fn overlaps(&self, cidr: &str) -> bool {
        let (ip, len) = match cidr.split_once('/') {
            Some((ip, len)) => (ip.parse::<IpAddr>(), len.parse::<u8>().ok()),
            None => (cidr.parse::<IpAddr>(), None),
        };
        let Ok(ip) = ip else {
            return false;
        };
        let len = len.unwrap_or(if ip.is_ipv4() { 32 } else { 128 });
        self.overlaps_range(ip, len)
    }

    fn overlaps_range(&self, b: IpAddr, blen: u8) -> bool {
        let NetTarget::Cidr(a, alen) = &self.target else {
            return false;
        };
        let (a, b, bits) = match (a, b) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                (u128::from(u32::from(*a)), u128::from(u32::from(b)), 32u32)
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(*a), u128::from(b), 128),
            _ => return false,
        };
        let l = u32::from(*alen).min(u32::from(blen)).min(bits);
        let mask = if l == 0 {
            0
        } else {
            (u128::MAX >> (128 - bits)) << (bits - l)
        };
        (a & mask) == (b & mask)
    }

    /// Whether this rule names `name` (lowercase, no trailing dot).
    pub fn matches_name(&self, name: &str) -> bool {
        match &self.target {
            NetTarget::Name(n) => n == name,
            NetTarget::Wildcard(s) => {
                name.len() > s.len() + 1
                    && name.ends_with(s.as_str())
                    && name.as_bytes()[name.len() - s.len() - 1] == b'.'
            }
            NetTarget::Cidr(..) => false,
        }
    }
}

fn parse_target(t: &str) -> Result<NetTarget, String> {
    if t.is_empty() {
        return Err("no host, name or CIDR".into());
    }
    if let Some((addr, len)) = t.split_once('/') {
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address (CIDR: ADDRESS/LENGTH)"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("prefix length {len:?} is not 0-{max}"))?;
        let host_bits = match ip {
            IpAddr::V4(a) => u32::from(a).checked_shl(u32::from(len)).unwrap_or(0) != 0,
            IpAddr::V6(a) => u128::from(a).checked_shl(u32::from(len)).unwrap_or(0) != 0,
        };
        if host_bits {
            return Err(format!(
                "{t} has bits set past its /{len} prefix; write the network address"
            ));
        }
        return Ok(NetTarget::Cidr(ip, len));
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(NetTarget::Cidr(ip, if ip.is_ipv4() { 32 } else { 128 }));
    }
    let lower = t.to_ascii_lowercase();
    if lower == "*" {
        return Err("the wildcard names no domain (write *.example.com)".into());
    }
    if let Some(suffix) = lower.strip_prefix("*.") {
        let suffix = suffix.trim_end_matches('.');
        if suffix.is_empty() {
            return Err("the wildcard names no domain (write *.example.com)".into());
        }
        check_name(suffix)?;
        if !suffix.contains('.') {
            return Err(format!(
                "*.{suffix} covers a whole top-level domain; name a domain below it"
            ));
        }
        return Ok(NetTarget::Wildcard(suffix.to_string()));
    }
    let lower = lower.trim_end_matches('.').to_string();
    if lower.contains('*') {
        return Err("'*' may only be the first label (*.example.com)".into());
    }
    check_name(&lower)?;
    Ok(NetTarget::Name(lower))
}

fn check_name(n: &str) -> Result<(), String> {
    if n.len() > 253 {
        return Err(format!("name of {} characters is longer than 253", n.len()));
    }
    for label in n.split('.') {
        if label.is_empty() {
            return Err(format!("{n:?} has an empty label"));
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is longer than 63 characters"));
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || label.starts_with('-')
        {
            return Err(format!("{n:?} is not a host name"));
        }
    }
    Ok(())
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Network::None => s.serialize_str("none"),
            Network::Egress => s.serialize_str("egress"),
            Network::Policy(p) => p.serialize(s),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NetworkRepr {
    Flag(bool),
    Word(String),
    List(Vec<String>),
    Policy(EgressPolicy),
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = NetworkRepr::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "network must be \"none\", \"egress\" (or \"all\"), a list of allow entries, \
                 or {\"allow\": [...], \"deny\": [...], \"credentials\": [{\"host\", \"header\", \"value\", \"env\"}]}",
            )
        })?;
        Ok(match r {
            NetworkRepr::Flag(false) => Network::None,
            NetworkRepr::Flag(true) => Network::Egress,
            NetworkRepr::Word(w) => match w.as_str() {
                "none" => Network::None,
                "egress" | "all" => Network::Egress,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "network {other:?} is not \"none\", \"egress\" or \"all\" \
                         (an allowlist is a list: [{other:?}])"
                    )));
                }
            },
            NetworkRepr::List(allow) => Network::Policy(EgressPolicy {
                allow,
                ..Default::default()
            }),
            NetworkRepr::Policy(p) => Network::Policy(p),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_ending_inside_a_character_are_refused_not_a_panic() {
        // Found by the `spec` fuzz target: the protocol suffix was cut out of a str at
        // a byte offset inside a character.
        for e in [
            "\u{30d}smo",
            "pypi.org/t\u{e9}cp",
            "\u{1f600}/udp",
            "\u{e9}",
        ] {
            assert!(NetRule::parse(e).is_err(), "{e:?}");
        }
    }

    #[test]
    fn parses_entries() {
        let r = NetRule::parse("PyPI.org.").unwrap();
        assert_eq!(r.target, NetTarget::Name("pypi.org".into()));
        assert_eq!(r.ports, Ports::List(vec![80, 443]));
        assert_eq!(r.protocol, Protocol::Tcp);
        let r = NetRule::parse("10.1.2.0/24:5432").unwrap();
        assert_eq!(r.target, NetTarget::Cidr("10.1.2.0".parse().unwrap(), 24));
        assert_eq!(r.ports, Ports::List(vec![5432]));
        let r = NetRule::parse("[2001:db8::/32]:443,8443/udp").unwrap();
        assert_eq!(r.target, NetTarget::Cidr("2001:db8::".parse().unwrap(), 32));
        assert_eq!(r.ports, Ports::List(vec![443, 8443]));
        assert_eq!(r.protocol, Protocol::Udp);
        let r = NetRule::parse("2001:db8::1").unwrap();
        assert_eq!(
            r.target,
            NetTarget::Cidr("2001:db8::1".parse().unwrap(), 128)
        );
        let r = NetRule::parse("*.pythonhosted.org:*/any").unwrap();
        assert_eq!(r.target, NetTarget::Wildcard("pythonhosted.org".into()));
        assert_eq!((r.ports, r.protocol), (Ports::Any, Protocol::Any));
        let r = NetRule::parse_deny("8.8.8.8").unwrap();
        assert_eq!((r.ports, r.protocol), (Ports::Any, Protocol::Any));
    }

    #[test]
    fn knows_private_ranges() {
        for p in [
            "10.1.2.0/24",
            "169.254.169.254",
            "0.0.0.0/0",
            "fd00::1",
            "172.20.0.0/16",
        ] {
            assert!(NetRule::parse(p).unwrap().opens_private(), "{p}");
        }
        for p in ["203.0.113.0/24", "8.8.8.8", "2001:db8::/32", "pypi.org"] {
            assert!(!NetRule::parse(p).unwrap().opens_private(), "{p}");
        }
    }

    #[test]
    fn ranges_overlap_by_their_common_prefix() {
        let r = NetRule::parse("198.51.100.0/30:8080").unwrap();
        assert!(r.overlaps("198.51.100.2"));
        assert!(r.overlaps("198.51.100.0/24"));
        assert!(r.overlaps("0.0.0.0/0"));
        assert!(!r.overlaps("198.51.100.4"));
        assert!(!r.overlaps("2001:db8::1"));
        assert!(!r.overlaps("not an address"));
        let r = NetRule::parse("2001:db8::/32").unwrap();
        assert!(r.overlaps("2001:db8:1::1/64"));
        assert!(!r.overlaps("2001:db9::1"));
        assert!(!NetRule::parse("pypi.org").unwrap().overlaps("0.0.0.0/0"));
    }

    #[test]
    fn wildcards_match_below_the_suffix_only() {
        let r = NetRule::parse("*.example.com").unwrap();
        assert!(r.matches_name("a.example.com"));
        assert!(r.matches_name("a.b.example.com"));
        assert!(!r.matches_name("example.com"));
        assert!(!r.matches_name("badexample.com"));
        assert!(
            NetRule::parse("example.com")
                .unwrap()
                .matches_name("example.com")
        );
    }

    #[test]
    fn lists_every_problem_of_an_entry() {
        let e = NetRule::parse("*.:0,70000,x/ftp").unwrap_err();
        assert_eq!(e.len(), 5, "{e:?}");
        for (bad, what) in [
            ("10.1.2.3/24", "bits set past"),
            ("10.0.0.0/33", "prefix length"),
            ("*.", "names no domain"),
            ("*.com", "top-level"),
            ("a.*.com", "first label"),
            ("bad host", "not a host name"),
            ("", "empty"),
            ("x..y", "empty label"),
        ] {
            let e = NetRule::parse(bad).unwrap_err();
            assert!(e.iter().any(|m| m.contains(what)), "{bad}: {e:?}");
        }
    }

    #[test]
    fn serde_keeps_the_old_forms_and_takes_lists() {
        let n: Network = serde_json::from_str("\"egress\"").unwrap();
        assert_eq!(n, Network::Egress);
        let n: Network = serde_json::from_str("\"all\"").unwrap();
        assert_eq!(n, Network::Egress);
        let n: Network = serde_json::from_str("true").unwrap();
        assert_eq!(n, Network::Egress);
        let n: Network = serde_json::from_str("false").unwrap();
        assert_eq!(n, Network::None);
        let n: Network = serde_json::from_str("[\"pypi.org\"]").unwrap();
        assert_eq!(n, Network::allow(["pypi.org"]));
        let n: Network =
            serde_json::from_str(r#"{"allow":["pypi.org"],"deny":["1.2.3.4"]}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"allow":["pypi.org"],"deny":["1.2.3.4"]}"#
        );
        assert_eq!(
            serde_json::to_string(&Network::Egress).unwrap(),
            "\"egress\""
        );
        assert_eq!(serde_json::to_string(&Network::None).unwrap(), "\"none\"");
        let e = serde_json::from_str::<Network>("\"pypi.org\"").unwrap_err();
        assert!(e.to_string().contains("allowlist is a list"), "{e}");
    }

    #[test]
    fn credentials_are_checked_and_never_shown() {
        let json = r#"{"allow": ["api.openai.com:443", "*.example.com"],
            "credentials": [
              {"host": "api.openai.com", "value": "Bearer sk-real", "env": "OPENAI_API_KEY"},
              {"host": "x.example.com", "header": "x-api-key", "value": "k"},
              {"host": "pypi.org", "value": "v"},
              {"host": "*.example.com", "header": "Host", "value": "a\r\nb", "env": "1X"},
              {"host": "api.openai.com", "header": "bad header", "value": "", "env": "OPENAI_API_KEY"}
            ]}"#;
        let net: Network = serde_json::from_str(json).unwrap();
        let p = net.policy().unwrap();
        assert_eq!(p.credentials[0].header, "Authorization");
        let problems = p.problems();
        let of = |i: usize| -> Vec<&str> {
            problems
                .iter()
                .filter(|(f, _)| *f == format!("network.credentials[{i}]"))
                .map(|(_, m)| m.as_str())
                .collect()
        };
        assert!(of(0).is_empty() && of(1).is_empty(), "{problems:?}");
        assert!(of(2)[0].contains("not opened on tcp"), "{problems:?}");
        let three = of(3).join(" | ");
        for needle in [
            "plain name",
            "frames or routes",
            "control character",
            "not an environment variable",
        ] {
            assert!(three.contains(needle), "{needle}: {three}");
        }
        let four = of(4).join(" | ");
        for needle in [
            "not an HTTP header name",
            "value is empty",
            "named by two credentials",
        ] {
            assert!(four.contains(needle), "{needle}: {four}");
        }
        // Never in what is written down or printed.
        let shown = serde_json::to_string(&net.redacted()).unwrap();
        assert!(
            !shown.contains("sk-real") && shown.contains(REDACTED),
            "{shown}"
        );
        assert!(!format!("{net:?}").contains("sk-real"));
        // A plain list or a policy without credentials serializes as before.
        let plain = serde_json::to_string(&Network::allow(["pypi.org"])).unwrap();
        assert_eq!(plain, r#"{"allow":["pypi.org"],"deny":[]}"#);
    }
}
