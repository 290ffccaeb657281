//! TLS for `--e2b-listen` (`--e2b-tls-cert`, `--e2b-tls-key`): rustls, with the ring
//! provider the daemon installs, offering HTTP/2 and HTTP/1.1 by ALPN as the SDKs
//! expect. Handshakes run in their own tasks (bounded in time), so a slow or silent
//! client never holds up the accept loop; finished ones are handed to axum through
//! [`TlsListener`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server settings from the PEM files, with errors naming the flag and the file.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<rustls::ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<_, _>>)
        .map_err(|e| {
            anyhow::anyhow!(
                "--e2b-tls-cert {}: cannot read a PEM certificate from it ({e})",
                cert.display()
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!(
            "--e2b-tls-cert {}: no certificate in it (give a PEM file, the certificate first, its chain after it)",
            cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow::anyhow!(
            "--e2b-tls-key {}: cannot read a PEM private key from it ({e})",
            key.display()
        )
    })?;
    let mut cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "--e2b-tls-cert {} / --e2b-tls-key: not a usable pair (the key must match the certificate)",
                cert.display()
            )
        })?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// A listener of finished TLS connections.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` and runs each handshake in its own task.
    pub fn new(listener: TcpListener, cfg: rustls::ServerConfig) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(cfg));
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of fds and the like: wait rather than spin.
                        tracing::warn!("E2B API accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                // No Nagle (see the plain listener in `serve`).
                let _ = tcp.set_nodelay(true);
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "E2B API TLS handshake: {e}"),
                        Err(_) => tracing::debug!(%peer, "E2B API TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { rx, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task ended (never, while the listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
