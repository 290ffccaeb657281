//! The network half of a launch plan: user-mode NAT, an egress policy's resolver,
//! firewall and proxy (with TLS interception for credentials), and the requests of a
//! policy sandbox's control socket.

use super::*;

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
