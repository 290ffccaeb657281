//! The E2B listener's connections: a cap on how many are open at once, and the
//! daemon's handshake budget (`stockade_server::handshake`) for those that have not
//! been answered an authenticated request yet: at most [`MAX_PENDING`] of them, the
//! oldest closed first, each closed after the handshake timeout. A connection is
//! authenticated once a request on it carries an API key of a tenant or a sandbox's
//! access token ([`authenticated`]), so a flood of idle or key-less connections
//! cannot keep out an SDK with a key. An authenticated connection counts against its
//! tenant: at most [`MAX_PER_TENANT`] of them at once, so one tenant's flood of
//! authenticated connections leaves room for the others.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
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
/// Most authenticated connections of one tenant at once (a quarter of the listener's).
pub const MAX_PER_TENANT: usize = MAX_CONNECTIONS / 4;

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

/// The authenticated connections of each tenant.
#[derive(Default)]
pub struct TenantConns {
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One connection counted against its tenant until it closes.
pub struct TenantLease {
    open: Arc<Mutex<HashMap<String, usize>>>,
    tenant: String,
}

impl TenantConns {
    /// A lease for one more connection of `tenant`; `None` at its cap.
    fn lease(&self, tenant: &str) -> Option<TenantLease> {
        let mut open = lock(&self.open);
        let n = open.entry(tenant.to_string()).or_insert(0);
        if *n >= MAX_PER_TENANT {
            return None;
        }
        *n += 1;
        Some(TenantLease {
            open: self.open.clone(),
            tenant: tenant.to_string(),
        })
    }

    /// The tenant's authenticated connections now.
    pub fn of(&self, tenant: &str) -> usize {
        lock(&self.open).get(tenant).copied().unwrap_or(0)
    }
}

impl Drop for TenantLease {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(n) = open.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A request's connection, in its extensions (`ConnectInfo<Standing>`): its place in
/// the handshake budget, and once a request on it is authenticated, its tenant's lease.
#[derive(Clone)]
pub struct Standing {
    state: Arc<ConnState>,
    tenant: Arc<OnceLock<Option<TenantLease>>>,
}

impl Standing {
    fn new(state: Arc<ConnState>) -> Standing {
        Standing {
            state,
            tenant: Arc::new(OnceLock::new()),
        }
    }
}

impl Connected<IncomingStream<'_, Guarded>> for Standing {
    fn connect_info(stream: IncomingStream<'_, Guarded>) -> Standing {
        Standing::new(stream.io().state().clone())
    }
}

impl Connected<IncomingStream<'_, crate::tls::TlsListener>> for Standing {
    fn connect_info(stream: IncomingStream<'_, crate::tls::TlsListener>) -> Standing {
        Standing::new(stream.io().get_ref().0.state().clone())
    }
}

/// The request's key or token held for `tenant`: its connection is no longer pending,
/// and counts against the tenant from now until it closes. Past the tenant's cap the
/// answer is 429, and the connection is closed.
pub fn authenticated(
    req: &axum::extract::Request,
    conns: &TenantConns,
    tenant: &str,
) -> Result<(), Box<axum::response::Response>> {
    let Some(c) = req
        .extensions()
        .get::<axum::extract::ConnectInfo<Standing>>()
    else {
        return Ok(());
    };
    let lease = c.0.tenant.get_or_init(|| conns.lease(tenant));
    if lease.is_none() {
        let mut r = crate::api::error(
            429,
            &format!(
                "too many connections of this tenant: at most {MAX_PER_TENANT} at once; \
                 close idle ones or reuse them (keep-alive)"
            ),
        );
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return Err(Box::new(r));
    }
    c.0.state.authenticated();
    Ok(())
}
