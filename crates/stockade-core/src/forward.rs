//! [`Forward`]: a port of a sandbox (a server its code started) on this host's
//! 127.0.0.1, for as long as it is held: each connection accepted there is carried
//! to the port inside through the provider ([`Provider::connect_port`]), so nothing
//! of the sandbox's network is opened to the host.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::{Error, Provider, Result};

/// What a forward does with the error of one connection (the connection is closed;
/// the forward lives on).
pub type OnError = Arc<dyn Fn(Error) + Send + Sync>;

/// A listener on 127.0.0.1 carrying each connection to a port of a sandbox. Dropped
/// or [`Forward::close`]d, it stops listening and ends every connection it carries.
pub struct Forward {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward").field("addr", &self.addr).finish()
    }
}

impl Forward {
    /// Listens on 127.0.0.1:`local` (0: a free port) and carries each connection to
    /// port `port` of sandbox `id` on `provider`.
    pub async fn start(
        provider: Arc<dyn Provider>,
        id: &str,
        port: u16,
        local: u16,
        on_error: Option<OnError>,
    ) -> Result<Forward> {
        if port == 0 {
            return Err(Error::InvalidRequest(
                "port 0 is no port of a server: give the port it listens on (1 to 65535)".into(),
            ));
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", local))
            .await
            .map_err(|e| Error::io(format!("cannot listen on 127.0.0.1:{local}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the listening address", e))?;
        let id = id.to_string();
        let task = tokio::spawn(async move {
            // Dropped with the task: every connection it carries ends with it.
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                };
                let Ok((mut client, _)) = accepted else {
                    continue;
                };
                let (provider, id, on_error) = (provider.clone(), id.clone(), on_error.clone());
                conns.spawn(async move {
                    match provider.connect_port(&id, port).await {
                        Ok(mut inside) => {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut inside).await;
                        }
                        Err(e) => {
                            if let Some(f) = on_error {
                                f(e);
                            }
                        }
                    }
                });
            }
        });
        Ok(Forward { addr, task })
    }

    /// Where it listens (127.0.0.1 and its port).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and ends the connections it carries.
    pub fn close(&self) {
        self.task.abort();
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}
