//! TLS for `--e2b-listen` (`--e2b-tls-cert`, `--e2b-tls-key`): rustls, with the ring
//! provider the daemon installs, offering HTTP/2 and HTTP/1.1 by ALPN as the SDKs
//! expect. Handshakes run in their own tasks (bounded in time), so a slow or silent
//! client never holds up the accept loop; finished ones are handed to axum through
//! [`TlsListener`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use stockade_server::gate::Counted;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

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
    rx: mpsc::Receiver<(TlsStream<Counted<TcpStream>>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` and runs each handshake in its own task (a pending
    /// connection of the listener's budget: closed if it takes too long, or when
    /// newer ones push it out).
    pub fn new(
        mut listener: crate::conn::Guarded,
        cfg: rustls::ServerConfig,
    ) -> std::io::Result<TlsListener> {
        use axum::serve::Listener;
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(cfg));
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = listener.accept().await;
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(tls) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Err(e) => tracing::debug!(%peer, "E2B API TLS handshake: {e}"),
                    }
                });
            }
        });
        Ok(TlsListener { rx, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<Counted<TcpStream>>;
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
