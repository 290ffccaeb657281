//! Reaching the daemon: a unix socket, or TCP with TLS verified against a CA file
//! (or the system's roots) or in plain text, as the [`Address`] and
//! [`ConnectOptions`] say.

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use stockade_core::{Error, Result};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Uri};

use crate::Address;

/// How a client reaches the daemon: its token and the CA its TLS certificate must
/// chain to.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// Sent as a bearer token on every call (`STOCKADE_TOKEN`).
    pub token: Option<String>,
    /// A PEM file of the CA certificate(s) the daemon's TLS certificate must chain to
    /// (`STOCKADE_TLS_CA`, the CLI's `--tls-ca`). Without it, TLS trusts the system's
    /// roots; with it, only these.
    pub tls_ca: Option<PathBuf>,
}

impl ConnectOptions {
    /// `STOCKADE_TOKEN` and `STOCKADE_TLS_CA` (empty values count as unset).
    pub fn from_env() -> ConnectOptions {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        ConnectOptions {
            token: env("STOCKADE_TOKEN"),
            tls_ca: env("STOCKADE_TLS_CA").map(PathBuf::from),
        }
    }
}

/// Every message of an error and its sources, joined.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let m = s.to_string();
        if !msg.contains(&m) {
            msg = format!("{msg}: {m}");
        }
        src = s.source();
    }
    msg
}

/// The TLS refusal in an error's sources, if the handshake failed.
fn tls_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut src = Some(e);
    while let Some(s) = src {
        if let Some(t) = s.downcast_ref::<rustls::Error>() {
            return Some(t.to_string());
        }
        if let Some(t) = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(t.to_string());
        }
        src = s.source();
    }
    None
}

pub(crate) async fn channel(host: &Address, opts: &ConnectOptions) -> Result<Channel> {
    let unreachable = |e: tonic::transport::Error| {
        if let Some(why) = tls_refusal(&e) {
            return Error::PolicyDenied(format!(
                "stockaded at {host} did not pass the TLS check ({why}); give the CA \
                 certificate that signed the daemon's certificate with --tls-ca FILE or \
                 STOCKADE_TLS_CA, and name the daemon by a host its certificate lists"
            ));
        }
        Error::Unavailable {
            what: format!("stockaded at {host}"),
            reason: chain(&e),
            fix: "start it with `stockade serve`, or unset STOCKADE_HOST to run in-process".into(),
        }
    };
    let (authority, server_name) = match host {
        Address::Unix(path) => {
            let path = path.clone();
            return Endpoint::from_static("http://stockaded.invalid")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(s))
                    }
                }))
                .await
                .map_err(unreachable);
        }
        Address::Tcp { host: name, .. } => (host.authority().unwrap_or_default(), name.clone()),
    };
    let tls = host.client_uses_tls(opts.tls_ca.is_some());
    let scheme = if tls { "https" } else { "http" };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{authority}"))
        .map_err(|e| Error::InvalidRequest(format!("daemon address {host}: {e}")))?
        .tcp_nodelay(true);
    if tls {
        let mut cfg = ClientTlsConfig::new().domain_name(server_name);
        cfg = match &opts.tls_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::InvalidRequest(format!(
                        "cannot read the TLS CA file {} ({e}); give a PEM file with \
                         --tls-ca or STOCKADE_TLS_CA",
                        path.display()
                    ))
                })?;
                cfg.ca_certificate(Certificate::from_pem(pem))
            }
            None => cfg.with_native_roots(),
        };
        ep = ep.tls_config(cfg).map_err(|e| {
            Error::InvalidRequest(format!("TLS settings for {host}: {}", chain(&e)))
        })?;
    }
    ep.connect().await.map_err(unreachable)
}
