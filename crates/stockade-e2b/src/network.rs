//! E2B's egress options (`network` at create, the body of `PUT /sandboxes/ID/network`
//! that `Sandbox.update_network` sends) as a Stockade [`Network`].
//!
//! E2B lets everything out unless told otherwise, lets `allow_out` win over
//! `deny_out`, and writes "nothing but these" as `allow_out` with `deny_out` of
//! `0.0.0.0/0` (what `allow_internet_access=False` means too). Stockade's egress is
//! an allowlist whose names resolve through its own resolver, so:
//!
//! - `deny_out` holding `0.0.0.0/0` with `allow_out` entries is an egress policy
//!   allowing those entries on every port and protocol (names and `*.suffix` as well
//!   as addresses and CIDRs); without entries it is no network at all;
//! - nothing denied is the public internet (`egress`);
//! - `rules` whose transform sets headers on a host's requests are Stockade
//!   credentials: the egress proxy, outside the sandbox, sets each header on the
//!   HTTPS requests to that host, and the values never enter the sandbox (so the host
//!   must be a plain name `allow_out` opens; set at create only, as E2B's
//!   placeholders for workload identity tokens have no Stockade form);
//! - `deny_out` of some addresses only ("all but these") has no Stockade form and is
//!   refused with what to write instead, as are `egress_proxy` and `dns_servers`.

use serde::Deserialize;
use serde_json::Value;
use stockade::spec::{Credential, EgressPolicy, Network};

/// What E2B calls all traffic.
const ALL_V4: &str = "0.0.0.0/0";
const ALL_V6: &str = "::/0";

/// The egress fields of a create's `network` or of an update's body (camelCase on
/// the wire but the update's `allow_internet_access`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressOpts {
    #[serde(default)]
    allow_out: Option<Vec<String>>,
    #[serde(default)]
    deny_out: Option<Vec<String>>,
    /// An update's own (a create's is beside `network`).
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(default)]
    rules: Option<Value>,
    #[serde(default)]
    egress_proxy: Option<Value>,
    #[serde(default)]
    dns_servers: Option<Value>,
}

/// Whether the network `o` asks for comes with a create or replaces a sandbox's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    Create,
    Update,
}

/// The network `o` asks for, or what is wrong with it (a 400's message).
/// `internet`: the create's `allow_internet_access` (an update's is in `o`).
pub fn network_of(o: &EgressOpts, internet: Option<bool>, at: At) -> Result<Network, String> {
    for (name, v) in [
        ("egress_proxy (egressProxy)", o.egress_proxy.as_ref()),
        ("dns_servers (dnsServers)", o.dns_servers.as_ref()),
    ] {
        if given(v) {
            return Err(format!(
                "network.{name} is not supported by Stockade's E2B API: egress leaves through \
                 Stockade's own proxy and resolver; send allow_out, deny_out and rules"
            ));
        }
    }
    let credentials = credentials_of(o.rules.as_ref())?;
    if !credentials.is_empty() && at == At::Update {
        return Err(
            "network.rules are fixed when the sandbox is created (the egress proxy holds \
             their values); an update replaces allow_out and deny_out only: send it without \
             rules"
                .into(),
        );
    }
    let internet = o.allow_internet_access.or(internet);
    let deny = o.deny_out.clone().unwrap_or_default();
    let deny_all = internet == Some(false) || deny.iter().any(|d| is_all(d));
    let allow = o.allow_out.clone().unwrap_or_default();
    if !deny_all {
        if let Some(d) = deny.first() {
            return Err(format!(
                "deny_out {d:?} without {ALL_V4}: Stockade's egress is an allowlist, so \"all \
                 but these addresses\" has no form here; list what may be reached in \
                 allow_out and set deny_out to [\"{ALL_V4}\"]"
            ));
        }
        if !credentials.is_empty() {
            return Err(format!(
                "network.rules need an allowlist: the headers are set by Stockade's egress \
                 proxy, which only an egress policy has; list the hosts in allow_out and set \
                 deny_out to [\"{ALL_V4}\"]"
            ));
        }
        return Ok(Network::Egress);
    }
    if allow.is_empty() && credentials.is_empty() {
        return Ok(Network::None);
    }
    if let Some(a) = allow.iter().find(|a| is_all(a)) {
        return Err(format!(
            "allow_out {a:?} with deny_out of all traffic: leave both out for the whole \
             internet, or list what may be reached"
        ));
    }
    Ok(Network::Policy(EgressPolicy {
        allow: allow.iter().map(|a| every_port(a)).collect(),
        deny: Vec::new(),
        credentials,
    }))
}

/// Whether an optional field holds anything (an empty object or list is nothing).
fn given(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

/// E2B's `rules` (`{HOST: [{"transform": {"headers": {NAME: VALUE}}}]}`) as Stockade
/// credentials, one per header; what they cannot be is named.
fn credentials_of(rules: Option<&Value>) -> Result<Vec<Credential>, String> {
    let Some(rules) = rules.filter(|r| given(Some(r))) else {
        return Ok(Vec::new());
    };
    let Value::Object(rules) = rules else {
        return Err("network.rules is an object of host names to lists of rules".into());
    };
    let mut out = Vec::new();
    for (host, list) in rules {
        if host.contains('*') {
            return Err(format!(
                "network.rules for {host:?}: a rule names one host (api.example.com); \
                 Stockade sets a credential on the requests to a plain name only"
            ));
        }
        let Value::Array(list) = list else {
            return Err(format!("network.rules.{host} is a list of rules"));
        };
        for rule in list {
            let headers = rule
                .get("transform")
                .and_then(|t| t.get("headers"))
                .and_then(Value::as_object);
            let Some(headers) = headers else {
                return Err(format!(
                    "network.rules.{host}: each rule needs transform.headers (the headers set \
                     on its requests)"
                ));
            };
            for (name, value) in headers {
                let Some(value) = value.as_str() else {
                    return Err(format!(
                        "network.rules.{host}: header {name:?} needs a string value"
                    ));
                };
                if value.contains("${e2b.") {
                    return Err(format!(
                        "network.rules.{host}: header {name:?} asks for a workload identity \
                         token, which Stockade does not mint: set the header's value itself"
                    ));
                }
                out.push(Credential {
                    host: host.clone(),
                    header: name.clone(),
                    value: value.to_string(),
                    env: None,
                });
            }
        }
    }
    Ok(out)
}

fn is_all(entry: &str) -> bool {
    let e = entry.trim();
    e == ALL_V4 || e == ALL_V6
}

/// An E2B entry (an address, a CIDR, a name) as a Stockade entry opening every port
/// and protocol to it, as E2B's entries do.
fn every_port(entry: &str) -> String {
    let e = entry.trim();
    if e.contains(':') && !e.starts_with('[') {
        format!("[{e}]:*/any")
    } else {
        format!("{e}:*/any")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: Value) -> EgressOpts {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn e2b_egress_options_map_to_a_stockade_network_or_a_named_refusal() {
        let policy = |allow: &[&str]| {
            Network::Policy(EgressPolicy {
                allow: allow.iter().map(ToString::to_string).collect(),
                ..EgressPolicy::default()
            })
        };
        let cases = [
            (serde_json::json!({}), None, Ok(Network::Egress)),
            (serde_json::json!({}), Some(false), Ok(Network::None)),
            (
                serde_json::json!({"denyOut": ["0.0.0.0/0"]}),
                None,
                Ok(Network::None),
            ),
            (
                serde_json::json!({"allowOut": ["pypi.org", "1.1.1.1", "10.0.0.0/8", "2001:db8::/32"], "denyOut": ["0.0.0.0/0"]}),
                None,
                Ok(policy(&[
                    "pypi.org:*/any",
                    "1.1.1.1:*/any",
                    "10.0.0.0/8:*/any",
                    "[2001:db8::/32]:*/any",
                ])),
            ),
            (
                serde_json::json!({"allowOut": ["*.example.com"], "allow_internet_access": false}),
                None,
                Ok(policy(&["*.example.com:*/any"])),
            ),
        ];
        for (v, internet, want) in cases {
            assert_eq!(
                network_of(&opts(v.clone()), internet, At::Create),
                want,
                "{v}"
            );
        }
        for (v, words) in [
            (
                serde_json::json!({"denyOut": ["8.8.8.8"]}),
                "all but these addresses",
            ),
            (
                serde_json::json!({"allowOut": ["0.0.0.0/0"], "denyOut": ["0.0.0.0/0"]}),
                "leave both out",
            ),
            (
                serde_json::json!({"rules": {"api.x.com": [{"transform": {}}]}, "denyOut": ["0.0.0.0/0"]}),
                "transform.headers",
            ),
            (
                serde_json::json!({"rules": {"*.x.com": [{"transform": {"headers": {"A": "b"}}}]}, "denyOut": ["0.0.0.0/0"]}),
                "one host",
            ),
            (
                serde_json::json!({"rules": {"api.x.com": [{"transform": {"headers": {"A": "${e2b.identity.tokens.aws}"}}}]}, "denyOut": ["0.0.0.0/0"]}),
                "workload identity",
            ),
            (
                serde_json::json!({"rules": {"api.x.com": [{"transform": {"headers": {"A": "b"}}}]}}),
                "need an allowlist",
            ),
            (
                serde_json::json!({"egressProxy": {"address": "p:1"}}),
                "network.egress_proxy",
            ),
        ] {
            let e = network_of(&opts(v.clone()), None, At::Create).unwrap_err();
            assert!(e.contains(words), "{v}: {e}");
        }
        // Header rules are credentials, one per header, set at create only.
        let with_rules = opts(serde_json::json!({
            "allowOut": ["api.x.com"],
            "denyOut": ["0.0.0.0/0"],
            "rules": {"api.x.com": [{"transform": {"headers": {"Authorization": "Bearer s", "X-Org": "o"}}}]},
        }));
        let Ok(Network::Policy(p)) = network_of(&with_rules, None, At::Create) else {
            panic!("rules make a policy");
        };
        assert_eq!(p.allow, vec!["api.x.com:*/any".to_string()]);
        let creds: Vec<_> = p
            .credentials
            .iter()
            .map(|c| {
                (
                    c.host.as_str(),
                    c.header.as_str(),
                    c.value.as_str(),
                    c.env.clone(),
                )
            })
            .collect();
        assert_eq!(
            creds,
            vec![
                ("api.x.com", "Authorization", "Bearer s", None),
                ("api.x.com", "X-Org", "o", None)
            ]
        );
        let e = network_of(&with_rules, None, At::Update).unwrap_err();
        assert!(e.contains("fixed when the sandbox is created"), "{e}");
        // Empty rules and no proxy are no request for them.
        assert_eq!(
            network_of(
                &opts(serde_json::json!({"rules": {}, "egressProxy": null})),
                None,
                At::Create
            ),
            Ok(Network::Egress)
        );
    }
}
