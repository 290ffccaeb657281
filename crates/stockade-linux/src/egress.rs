//! An egress policy as nftables rules and resolver rules. Pure: unit-tested.
//!
//! The ruleset of a policy sandbox (table `inet stockade`, output hook of the
//! sandbox's own network namespace), in order:
//!
//! 1. loopback (where Stockade's resolver listens) and established connections pass;
//! 2. slirp4netns's host gateway and DNS forwarder (10.0.2.2, 10.0.2.3) are refused,
//!    whatever the policy says: the forwarder would answer any name;
//! 3. the denylist's ranges are refused;
//! 4. the allowlist's ranges pass on their ports (this may open a private range);
//! 5. the host's addresses, its networks and the private, link-local, metadata and
//!    reserved ranges are refused (also when an allowed name resolves into them);
//! 6. addresses that an allowed name resolved to pass, on that entry's ports, until
//!    the record's TTL runs out (sets filled by the resolver);
//! 7. everything else is refused.
//!
//! TCP connections let through by step 6 are then redirected (nat output) to the
//! monitor's SNI/Host proxy on loopback, which checks the name the code asks the
//! server for (see the agent's `proxy` module).
//!
//! Refusals reset TCP (`ECONNREFUSED` at once) and answer anything else with ICMP
//! port unreachable, and are recorded per rule in a dynamic set (address . protocol .
//! port, one hour) that the monitor reads back for `egress_denied`.

use std::collections::BTreeMap;
use std::io::Read;

use stockade_agent_proto::launch::{
    CidrRule, CredentialRule, EGRESS_PROXY_PORT, EgressPlan, NameRule, TlsIntercept,
};
use stockade_core::Error;
use stockade_spec::{EgressPolicy, NetRule, NetTarget, Ports};

use crate::plan::{DENIED_V4, DENIED_V6};

/// The deny chains and what each reports as the deciding rule.
pub const DENY_CHAINS: &[(&str, &str)] = &[
    ("deny_list", "denylist"),
    ("deny_host", "host or private range"),
    ("deny_other", "not in the allowlist"),
];

/// The nftables ruleset of a sandbox with `policy` (see the module docs).
pub fn policy_firewall(
    policy: &EgressPolicy,
    host_addresses: &[String],
    host_networks: &[String],
) -> String {
    let (h6, h4): (Vec<&String>, Vec<&String>) = host_addresses
        .iter()
        .chain(host_networks)
        .partition(|a| a.contains(':'));
    let mut d4: Vec<String> = DENIED_V4.iter().map(|s| (*s).to_string()).collect();
    d4.extend(h4.into_iter().cloned());
    let mut d6: Vec<String> = DENIED_V6.iter().map(|s| (*s).to_string()).collect();
    d6.extend(h6.into_iter().cloned());
    let mut r = String::from("table inet stockade {\n");
    for (set, key) in [
        ("allow4", "ipv4_addr . inet_proto . inet_service"),
        ("allow6", "ipv6_addr . inet_proto . inet_service"),
        ("allowany4", "ipv4_addr . inet_proto"),
        ("allowany6", "ipv6_addr . inet_proto"),
    ] {
        r.push_str(&format!("  set {set} {{ type {key}; flags timeout; }}\n"));
    }
    for (chain, _) in DENY_CHAINS {
        for (fam, addr) in [("4", "ipv4_addr"), ("6", "ipv6_addr")] {
            r.push_str(&format!(
                "  set {chain}{fam} {{ type {addr} . inet_proto . inet_service; flags dynamic,timeout; timeout 1h; size 4096; }}\n"
            ));
        }
    }
    // Before the nat chain (-100): it decides on the address the code asked for, and
    // only what it let through is redirected to the proxy.
    r.push_str("  chain output {\n    type filter hook output priority -150; policy accept;\n");
    r.push_str("    oifname \"lo\" accept\n    ct state established,related accept\n");
    r.push_str("    ip daddr { 10.0.2.2, 10.0.2.3 } jump deny_host\n");
    for rule in policy.deny_rules() {
        if let Some(m) = cidr_match(&rule) {
            r.push_str(&format!("    {m} jump deny_list\n"));
        }
    }
    for rule in policy.allow_rules() {
        if let Some(m) = cidr_match(&rule) {
            r.push_str(&format!("    {m} accept\n"));
        }
    }
    r.push_str(&format!(
        "    ip daddr {{ {} }} jump deny_host\n",
        d4.join(", ")
    ));
    r.push_str(&format!(
        "    ip6 daddr {{ {} }} jump deny_host\n",
        d6.join(", ")
    ));
    r.push_str("    ip daddr . meta l4proto . th dport @allow4 accept\n");
    r.push_str("    ip6 daddr . meta l4proto . th dport @allow6 accept\n");
    r.push_str("    ip daddr . meta l4proto @allowany4 accept\n");
    r.push_str("    ip6 daddr . meta l4proto @allowany6 accept\n");
    r.push_str("    jump deny_other\n  }\n");
    // TCP to an address an allowed name opened goes through the SNI/Host proxy (which
    // lets what the allowlist's ranges open through by address, and sets credentials).
    r.push_str("  chain proxy {\n    type nat hook output priority -100; policy accept;\n");
    r.push_str("    oifname \"lo\" return\n");
    for m in [
        "ip daddr . meta l4proto . th dport @allow4",
        "ip6 daddr . meta l4proto . th dport @allow6",
        "ip daddr . meta l4proto @allowany4",
        "ip6 daddr . meta l4proto @allowany6",
    ] {
        r.push_str(&format!(
            "    meta l4proto tcp {m} redirect to :{EGRESS_PROXY_PORT}\n"
        ));
    }
    r.push_str("  }\n");
    for (chain, _) in DENY_CHAINS {
        r.push_str(&format!(
            "  chain {chain} {{\n    meta l4proto {{ tcp, udp }} update @{chain}4 {{ ip daddr . meta l4proto . th dport }}\n    meta l4proto {{ tcp, udp }} update @{chain}6 {{ ip6 daddr . meta l4proto . th dport }}\n    meta l4proto tcp reject with tcp reset\n    reject\n  }}\n"
        ));
    }
    r.push_str("}\n");
    r
}

/// The nft match of a CIDR rule (`None` for names).
fn cidr_match(rule: &NetRule) -> Option<String> {
    let NetTarget::Cidr(ip, len) = &rule.target else {
        return None;
    };
    let fam = if ip.is_ipv4() { "ip" } else { "ip6" };
    let mut m = format!(
        "{fam} daddr {ip}/{len} meta l4proto {{ {} }}",
        rule.protocol.names().join(", ")
    );
    if let Ports::List(ports) = &rule.ports {
        let p: Vec<String> = ports.iter().map(u16::to_string).collect();
        m.push_str(&format!(" th dport {{ {} }}", p.join(", ")));
    }
    Some(m)
}

/// The resolver's rules: the policy's names, and where answers come from.
pub fn egress_plan(policy: &EgressPolicy, upstreams: Vec<String>) -> EgressPlan {
    let names = |rules: Vec<NetRule>| -> Vec<NameRule> {
        rules
            .into_iter()
            .filter_map(|r| {
                let (name, wildcard) = match &r.target {
                    NetTarget::Name(n) => (n.clone(), false),
                    NetTarget::Wildcard(s) => (s.clone(), true),
                    NetTarget::Cidr(..) => return None,
                };
                Some(NameRule {
                    name,
                    wildcard,
                    ports: match &r.ports {
                        Ports::Any => None,
                        Ports::List(l) => Some(l.clone()),
                    },
                    protocols: r
                        .protocol
                        .names()
                        .iter()
                        .map(|s| (*s).to_string())
                        .collect(),
                    text: r.text,
                })
            })
            .collect()
    };
    let cidrs = policy
        .allow_rules()
        .into_iter()
        .filter_map(|r| match r.target {
            NetTarget::Cidr(addr, len) => Some(CidrRule {
                addr,
                len,
                ports: match &r.ports {
                    Ports::Any => None,
                    Ports::List(l) => Some(l.clone()),
                },
                protocols: r
                    .protocol
                    .names()
                    .iter()
                    .map(|s| (*s).to_string())
                    .collect(),
            }),
            _ => None,
        })
        .collect();
    EgressPlan {
        deny: names(policy.deny_rules()),
        allow: names(policy.allow_rules()),
        upstreams,
        cidrs,
        tls: None,
    }
}

/// The sandbox's copy of its authority's certificate, and the host's bundle with it
/// appended (what `SSL_CERT_FILE` and the other variables of [`sandbox_env`] name).
pub const SANDBOX_CA: &str = "/etc/stockade-ca.pem";
pub const SANDBOX_CA_BUNDLE: &str = "/etc/stockade-ca-bundle.pem";
/// The host's bundle of trusted roots (Debian's `ca-certificates`).
const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What a sandbox with credentials is made with, besides its policy: a certificate
/// authority of its own (the key goes to the monitor only), and a placeholder per
/// credential.
#[derive(Clone)]
pub struct EgressSecrets {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub ca_name: String,
    /// One per credential, in order.
    pub placeholders: Vec<String>,
    /// The host's roots: trusted in the sandbox beside its authority, and upstream.
    pub host_bundle_pem: String,
    /// Further roots trusted upstream (the launcher's, `$STOCKADE_UPSTREAM_CA`).
    pub extra_roots_pem: String,
}

impl std::fmt::Debug for EgressSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressSecrets")
            .field("ca_name", &self.ca_name)
            .finish_non_exhaustive()
    }
}

fn random_hex(bytes: usize) -> Result<String, Error> {
    let mut b = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::io("cannot read /dev/urandom", e))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Makes the authority and placeholders of a policy with credentials.
pub fn secrets(policy: &EgressPolicy, extra_roots: Option<&str>) -> Result<EgressSecrets, Error> {
    use rcgen::KeyPair;
    let unavailable = |reason: String| Error::Unavailable {
        what: "credentials (the sandbox's certificate authority)".into(),
        reason,
        fix: "see `stockade doctor`".into(),
    };
    let ca_name = format!("Stockade sandbox CA {}", random_hex(8)?);
    let key = KeyPair::generate().map_err(|e| unavailable(format!("key generation: {e}")))?;
    let cert = stockade_agent_proto::launch::sandbox_ca_params(&ca_name)
        .self_signed(&key)
        .map_err(|e| unavailable(format!("signing: {e}")))?;
    let host_bundle_pem = std::fs::read_to_string(HOST_BUNDLE).map_err(|e| Error::Unavailable {
        what: "credentials".into(),
        reason: format!("cannot read the host's trusted roots {HOST_BUNDLE}: {e}"),
        fix: "apt-get install ca-certificates".into(),
    })?;
    let mut extra_roots_pem = extra_roots.unwrap_or_default().to_string();
    if let Ok(path) = std::env::var("STOCKADE_UPSTREAM_CA") {
        let pem = std::fs::read_to_string(&path).map_err(|e| Error::Unavailable {
            what: "credentials".into(),
            reason: format!("cannot read STOCKADE_UPSTREAM_CA {path}: {e}"),
            fix: "point STOCKADE_UPSTREAM_CA at a PEM file of trusted roots, or unset it".into(),
        })?;
        extra_roots_pem.push('\n');
        extra_roots_pem.push_str(&pem);
    }
    let placeholders = policy
        .credentials
        .iter()
        .map(|_| random_hex(24).map(|h| format!("stockade-placeholder-{h}")))
        .collect::<Result<_, _>>()?;
    Ok(EgressSecrets {
        ca_cert_pem: cert.pem(),
        ca_key_pem: key.serialize_pem(),
        ca_name,
        placeholders,
        host_bundle_pem,
        extra_roots_pem,
    })
}

/// The proxy's part of the secrets.
pub fn tls_intercept(policy: &EgressPolicy, s: &EgressSecrets) -> TlsIntercept {
    TlsIntercept {
        ca_key_pem: s.ca_key_pem.clone(),
        ca_name: s.ca_name.clone(),
        roots_pem: format!("{}\n{}", s.host_bundle_pem, s.extra_roots_pem),
        credentials: policy
            .credentials
            .iter()
            .zip(&s.placeholders)
            .map(|(c, ph)| CredentialRule {
                host: c.host.trim_end_matches('.').to_ascii_lowercase(),
                header: c.header.clone(),
                value: c.value.clone(),
                placeholder: ph.clone(),
            })
            .collect(),
    }
}

/// The environment a sandbox with credentials gets: each credential's placeholder in
/// its variable, and the trust of the sandbox's authority for the usual TLS stacks
/// (OpenSSL and Python's `ssl`, requests and pip, curl, Node).
pub fn sandbox_env(policy: &EgressPolicy, s: &EgressSecrets) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (c, ph) in policy.credentials.iter().zip(&s.placeholders) {
        if let Some(name) = &c.env {
            env.insert(name.clone(), ph.clone());
        }
    }
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
    ] {
        env.insert(var.into(), SANDBOX_CA_BUNDLE.into());
    }
    env.insert("NODE_EXTRA_CA_CERTS".into(), SANDBOX_CA.into());
    env
}

/// The resolvers a policy sandbox's lookups are forwarded to: `IP:53` of each
/// `nameserver` line of the host's resolv.conf.
pub fn upstreams_from(nameservers: &[String]) -> Vec<String> {
    nameservers
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
        .map(|ip| std::net::SocketAddr::new(ip, 53).to_string())
        .collect()
}

/// The network wall of a policy, for `inspect`.
pub fn describe(policy: &EgressPolicy) -> stockade_core::Wall {
    let mut s = format!(
        "egress policy through slirp4netns; names resolve only through Stockade's resolver; allow [{}]",
        policy.allow.join(", ")
    );
    if !policy.deny.is_empty() {
        s.push_str(&format!(", deny [{}]", policy.deny.join(", ")));
    }
    s.push_str(
        "; host, private, link-local and metadata addresses rejected unless a CIDR names them",
    );
    stockade_core::Wall::on(stockade_core::WallKind::Network, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> EgressPolicy {
        EgressPolicy {
            allow: vec![
                "pypi.org".into(),
                "*.pythonhosted.org:443".into(),
                "10.1.2.0/24:5432".into(),
                "[2001:db8::/32]:*/udp".into(),
            ],
            deny: vec!["203.0.113.7".into(), "bad.pypi.org".into()],
            credentials: Vec::new(),
        }
    }

    #[test]
    fn ruleset_orders_deny_before_allow_before_host_ranges() {
        let r = policy_firewall(
            &policy(),
            &["192.0.2.10".into()],
            &["198.51.100.0/24".into()],
        );
        let pos = |s: &str| r.find(s).unwrap_or_else(|| panic!("{s} missing from\n{r}"));
        let slirp = pos("ip daddr { 10.0.2.2, 10.0.2.3 } jump deny_host");
        let deny = pos("ip daddr 203.0.113.7/32 meta l4proto { tcp, udp } jump deny_list");
        let allow = pos("ip daddr 10.1.2.0/24 meta l4proto { tcp } th dport { 5432 } accept");
        let allow6 = pos("ip6 daddr 2001:db8::/32 meta l4proto { udp } accept");
        let host = pos("169.254.0.0/16");
        let sets = pos("@allow4 accept");
        let other = pos("jump deny_other");
        assert!(slirp < deny && deny < allow && allow < allow6 && allow6 < host);
        assert!(host < sets && sets < other);
        assert!(r.contains("192.0.2.10") && r.contains("198.51.100.0/24"));
        assert!(!r.contains("pypi"), "names are the resolver's, not nft's");
        insta::assert_snapshot!(r);
    }

    #[test]
    fn resolver_rules_keep_names_only() {
        let p = egress_plan(&policy(), vec!["10.0.0.53:53".into()]);
        assert_eq!(p.allow.len(), 2);
        assert_eq!(p.allow[0].name, "pypi.org");
        assert_eq!(p.allow[0].ports, Some(vec![80, 443]));
        assert!(p.allow[1].wildcard && p.allow[1].matches("files.pythonhosted.org"));
        assert_eq!(p.deny.len(), 1);
        assert_eq!(p.deny[0].ports, None);
        assert_eq!(
            upstreams_from(&["nameserver 10.0.0.53".into(), "nameserver fe80::1".into()]),
            ["10.0.0.53:53", "[fe80::1]:53"]
        );
    }
}
