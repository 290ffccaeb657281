//! The E2B listener's connections: a cap on how many are open at once, and the
//! daemon's handshake budget (`stockade_server::handshake`) for those that have not
//! been answered an authenticated request yet: at most [`MAX_PENDING`] of them, the
//! oldest closed first, each closed after the handshake timeout. A connection is
//! authenticated once a request on it carries an API key of a tenant or a sandbox's
//! access token ([`authenticated`]), so a flood of idle or key-less connections
//! cannot keep out an SDK with a key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use stockade_server::gate::Counted;
use stockade_server::handshake::{ConnState, HANDSHAKE_TIMEOUT, Handshakes};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Most connections open at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 1024;
/// Most connections without an authenticated answer at once.
pub const MAX_PENDING: usize = 128;

/// The TCP listener, each connection counted and pending until authenticated.
pub struct Guarded {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    handshakes: Arc<Handshakes>,
}

impl Guarded {
    pub fn new(listener: TcpListener) -> Guarded {
        Guarded {
            listener,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            handshakes: Handshakes::new(MAX_PENDING, HANDSHAKE_TIMEOUT),
        }
    }
}

impl axum::serve::Listener for Guarded {
    type Io = Counted<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return std::future::pending().await;
        };
        loop {
            match self.listener.accept().await {
                Ok((tcp, peer)) => {
                    // No Nagle: a response's head and body go out as separate small
                    // writes, and with Nagle the second waited for the client's
                    // delayed ACK (40 ms on every call).
                    let _ = tcp.set_nodelay(true);
                    return (Counted::new(tcp, slot, self.handshakes.open()), peer);
                }
                Err(e) => {
                    // Out of fds and the like: wait rather than spin.
                    tracing::warn!("E2B API accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// A request's connection, in its extensions (`ConnectInfo<Standing>`).
#[derive(Clone)]
pub struct Standing(pub Arc<ConnState>);

impl Connected<IncomingStream<'_, Guarded>> for Standing {
    fn connect_info(stream: IncomingStream<'_, Guarded>) -> Standing {
        Standing(stream.io().state().clone())
    }
}

impl Connected<IncomingStream<'_, crate::tls::TlsListener>> for Standing {
    fn connect_info(stream: IncomingStream<'_, crate::tls::TlsListener>) -> Standing {
        Standing(stream.io().get_ref().0.state().clone())
    }
}

/// The request's key or token held: its connection is no longer pending.
pub fn authenticated(req: &axum::extract::Request) {
    if let Some(c) = req
        .extensions()
        .get::<axum::extract::ConnectInfo<Standing>>()
    {
        c.0.0.authenticated();
    }
}
