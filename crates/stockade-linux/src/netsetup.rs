//! The network of a sandbox in a namespace another provider made (docker, microvm's
//! VMM): its plan on this host, its setup, and a live policy's change and refusals
//! over the monitor's control socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use stockade_agent_proto::EgressDenial;
use stockade_agent_proto::launch::{NetReply, NetRequest, NetworkPlan};
use stockade_core::{Error, Result};

use crate::{egress, layout, plan};

/// The network half of a launch plan for a sandbox in a network namespace of its own
/// that another provider made (docker): this host's layout and tools, the host's
/// resolvers unless `dns_upstreams` names others.
pub fn network_plan_here(
    network: &stockade_spec::Network,
    secrets: Option<&egress::EgressSecrets>,
    dns_upstreams: &[String],
) -> Result<NetworkPlan> {
    let host = layout::detect();
    let (slirp, nft) = (which("slirp4netns"), which("nft"));
    plan::network_plan(
        network,
        &plan::NetContext {
            host: &host,
            slirp: slirp.as_deref(),
            nft: nft.as_deref(),
            dns_upstreams,
            egress_secrets: secrets,
            rootless: false,
        },
    )
}

/// A sandbox's network as a network monitor outside the native monitor serves it
/// (`docker-watch` for a container, `vm-host` for a microVM's VMM): the input that
/// monitor reads on its stdin, and what the sandbox itself gets.
pub struct NetworkSetup {
    /// The monitor's stdin: `LENGTH\n`, the network plan (its credentials taken
    /// out), then the credentials and the authority's key when the policy has some.
    pub monitor_input: Vec<u8>,
    /// What `/etc/resolv.conf` says in the sandbox's network namespace.
    pub resolv_conf: String,
    /// A policy with credentials: the sandbox's authority (for
    /// [`egress::SANDBOX_CA`]) and that authority after the host's roots (for
    /// [`egress::SANDBOX_CA_BUNDLE`]).
    pub ca: Option<(String, String)>,
    /// What every exec's environment gets: the credentials' placeholders and the
    /// variables naming the bundle.
    pub env: std::collections::BTreeMap<String, String>,
    /// The applied line of a policy; `None` for plain egress, which each provider
    /// describes itself.
    pub policy_applied: Option<stockade_core::Wall>,
}

/// The error of a sandbox whose host-side network monitor (docker's watcher, the
/// microVM's host) could not set up its egress, with the monitor's own words.
pub fn egress_unavailable(id: &str, why: String) -> Error {
    Error::Unavailable {
        what: format!("network egress for sandbox {id}"),
        reason: why,
        fix: "see `stockade doctor` (slirp4netns and nftables must work as root)".into(),
    }
}

/// The [`NetworkSetup`] of a spec's `network` on this host (the native provider's
/// firewall, resolver, proxy and credentials: [`network_plan_here`]); `None` for
/// network none. With credentials, a new authority and placeholders are made.
pub fn network_setup(
    network: &stockade_spec::Network,
    dns_upstreams: &[String],
) -> Result<Option<NetworkSetup>> {
    if *network == stockade_spec::Network::None {
        return Ok(None);
    }
    let policy = network.policy();
    let secrets = match policy {
        Some(p) if !p.credentials.is_empty() => Some(egress::secrets(p, None)?),
        _ => None,
    };
    let mut plan = network_plan_here(network, secrets.as_ref(), dns_upstreams)?;
    let NetworkPlan::UserModeNat {
        resolv_conf,
        policy: egress_plan,
        ..
    } = &mut plan
    else {
        return Err(Error::Internal("a network spec planned no network".into()));
    };
    let resolv_conf = resolv_conf.clone();
    let tls = egress_plan.as_mut().and_then(|e| e.tls.take());
    let json = serde_json::to_vec(&plan)
        .map_err(|e| Error::Internal(format!("cannot encode the network plan: {e}")))?;
    let mut monitor_input = format!("{}\n", json.len()).into_bytes();
    monitor_input.extend_from_slice(&json);
    if let Some(t) = &tls {
        monitor_input.extend(
            serde_json::to_vec(t)
                .map_err(|e| Error::Internal(format!("cannot encode credentials: {e}")))?,
        );
    }
    let (ca, env) = match (policy, &secrets) {
        (Some(p), Some(s)) => (
            Some((
                s.ca_cert_pem.clone(),
                format!("{}\n{}", s.host_bundle_pem.trim_end(), s.ca_cert_pem),
            )),
            egress::sandbox_env(p, s),
        ),
        _ => (None, Default::default()),
    };
    Ok(Some(NetworkSetup {
        monitor_input,
        resolv_conf,
        ca,
        env,
        policy_applied: policy.map(egress::describe),
    }))
}

/// The denials since `since_ms` that the network monitor serving `sock` (a policy
/// sandbox's `net.sock`) recorded; none when the sandbox has no policy (no socket).
pub async fn egress_denied_via(sock: &Path, since_ms: u64) -> Result<Vec<EgressDenial>> {
    if !sock.exists() {
        return Ok(Vec::new());
    }
    match net_request(sock, &NetRequest::Denials { since_ms }).await? {
        NetReply::Denials(d) => Ok(d),
        NetReply::Failed(m) => Err(Error::Internal(m)),
        NetReply::Done => Ok(Vec::new()),
    }
}

/// Replaces the policy of sandbox `id` through its network monitor's `sock`;
/// `created_with` is the sandbox's current `network` (for the error when it has no
/// policy).
pub async fn set_network_via(
    sock: &Path,
    id: &str,
    network: &stockade_spec::Network,
    created_with: serde_json::Value,
    dns_upstreams: &[String],
) -> Result<()> {
    if network.policy().is_some_and(|p| !p.credentials.is_empty()) {
        return Err(Error::InvalidRequest(
            "credentials are fixed when the sandbox is created (its environment holds \
             their placeholders); replace allow and deny only, and keep credentials out \
             of the new policy (the sandbox keeps the ones it has)"
                .into(),
        ));
    }
    let policy = match (network, sock.exists()) {
        (stockade_spec::Network::Policy(p), true) => p,
        (_, true) => {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} has an egress policy; it can be replaced by another policy, \
                 not by network \"none\" or \"egress\" (an empty allowlist denies everything)"
            )));
        }
        (_, false) => {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} was created with network {created_with}; only a sandbox created with \
                 an egress policy (an allowlist) can change its policy live"
            )));
        }
    };
    let host = layout::detect();
    let upstreams = if dns_upstreams.is_empty() {
        egress::upstreams_from(&host.nameservers)
    } else {
        dns_upstreams.to_vec()
    };
    let req = NetRequest::SetPolicy {
        firewall: egress::policy_firewall(policy, &host.host_addresses, &host.host_networks),
        policy: egress::egress_plan(policy, upstreams),
        network: serde_json::to_value(network).unwrap_or_default(),
    };
    match net_request(sock, &req).await? {
        NetReply::Failed(m) => Err(Error::Internal(m)),
        _ => Ok(()),
    }
}

/// One request to a policy sandbox's monitor over its control socket.
async fn net_request(sock: &Path, req: &NetRequest) -> Result<NetReply> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut s = tokio::net::UnixStream::connect(sock).await?;
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        s.write_all(&line).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        serde_json::from_slice::<NetReply>(&out).map_err(std::io::Error::other)
    };
    match tokio::time::timeout(Duration::from_secs(10), talk).await {
        Ok(r) => r.map_err(|e| {
            Error::io(
                format!(
                    "cannot talk to the sandbox's network monitor at {}",
                    sock.display()
                ),
                e,
            )
        }),
        Err(_) => Err(Error::Timeout {
            operation: "asking the sandbox's network monitor".into(),
            after_ms: 10_000,
        }),
    }
}

/// `name` on `$PATH` or in the sbin directories, if it is a file there.
pub fn which(name: &str) -> Option<PathBuf> {
    // The sbin directories too: nft lives there and is not on every user's PATH.
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    path.push(":/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin");
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The tools a sandbox's network needs on this host (slirp4netns, nft), as
/// `name path` pairs; the fix (the packages to install) when one is missing. For
/// the `doctor` of every provider that uses this network (native, microvm).
pub fn network_tools() -> std::result::Result<String, String> {
    let found: Vec<(&str, Option<PathBuf>, &str)> = vec![
        ("slirp4netns", which("slirp4netns"), "slirp4netns"),
        ("nft", which("nft"), "nftables"),
    ];
    let missing: Vec<&str> = found
        .iter()
        .filter(|(_, p, _)| p.is_none())
        .map(|(_, _, pkg)| *pkg)
        .collect();
    if !missing.is_empty() {
        return Err(format!("apt-get install {}", missing.join(" ")));
    }
    Ok(found
        .iter()
        .filter_map(|(n, p, _)| p.as_ref().map(|p| format!("{n} {}", p.display())))
        .collect::<Vec<_>>()
        .join(", "))
}
