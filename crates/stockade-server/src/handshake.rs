//! Connections that have not authenticated yet: a budget of their own, apart from
//! the connection slots of callers that have.
//!
//! An open TCP connection costs nothing to make, so a peer without a token can hold
//! every slot of the daemon by opening connections and sending nothing (or a TLS
//! hello, or an HTTP/2 preface and no request). Here a connection is *pending* from
//! its accept until a request on it passes the gate's authentication
//! ([`ConnState::authenticated`]). Pending connections:
//!
//! - have [`HANDSHAKE_TIMEOUT`] to get there, else the connection is closed;
//! - are at most [`Handshakes::cap`] at once across the daemon's listeners: one more
//!   closes the oldest pending one (not the new one), so a flood of idle connections
//!   cannot keep out a caller that authenticates at once, and never holds more than
//!   the cap of the daemon's connection slots.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Context;
use std::time::Duration;

use futures_util::task::AtomicWaker;

/// How long a connection may take to send its first authenticated request.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most pending connections the daemon keeps: a quarter of its connection slots, at
/// most this many.
pub const MAX_PENDING: usize = 64;

/// The pending connections of one daemon, oldest first.
pub struct Handshakes {
    pending: Mutex<VecDeque<Weak<ConnState>>>,
    cap: usize,
    timeout: Duration,
}

impl Handshakes {
    pub fn new(cap: usize, timeout: Duration) -> Arc<Handshakes> {
        Arc::new(Handshakes {
            pending: Mutex::new(VecDeque::new()),
            cap: cap.max(1),
            timeout,
        })
    }

    /// Most pending connections at once.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A new connection's state, pending; past the cap, the oldest pending one is
    /// closed.
    pub fn open(self: &Arc<Self>) -> Arc<ConnState> {
        let state = Arc::new(ConnState {
            authenticated: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            deadline: Mutex::new(Some(Box::pin(tokio::time::sleep(self.timeout)))),
        });
        let mut q = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        q.retain(|w| w.upgrade().is_some_and(|s| !s.is_authenticated()));
        q.push_back(Arc::downgrade(&state));
        while q.len() > self.cap {
            if let Some(old) = q.pop_front().and_then(|w| w.upgrade()) {
                old.evicted.store(true, Ordering::SeqCst);
                old.waker.wake();
            }
        }
        state
    }
}

/// One connection's standing.
pub struct ConnState {
    authenticated: AtomicBool,
    evicted: AtomicBool,
    waker: AtomicWaker,
    deadline: Mutex<Option<Pin<Box<tokio::time::Sleep>>>>,
}

impl ConnState {
    /// A request on the connection passed authentication: it is pending no more.
    pub fn authenticated(&self) {
        self.authenticated.store(true, Ordering::SeqCst);
    }

    fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::SeqCst)
    }

    /// Whether the connection must end now (called from its reads): evicted, or
    /// pending past its deadline.
    pub fn poll_refused(&self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        if self.is_authenticated() {
            return None;
        }
        self.waker.register(cx.waker());
        if self.evicted.load(Ordering::SeqCst) {
            return Some(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed: too many connections without an authenticated request",
            ));
        }
        let mut d = self
            .deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sleep) = d.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            *d = None;
            return Some(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "closed: no authenticated request within the handshake timeout",
            ));
        }
        None
    }
}

/// What the connection's requests carry (tonic puts a connection's `ConnectInfo`
/// in each request's extensions): the transport's own info and the connection's
/// standing, so the gate can mark it authenticated.
#[derive(Clone)]
pub struct Guarded<C> {
    pub inner: C,
    pub state: Arc<ConnState>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &ConnState) -> bool {
        let w = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&w);
        s.poll_refused(&mut cx).is_some()
    }

    #[tokio::test]
    async fn past_the_cap_the_oldest_pending_connection_goes() {
        let h = Handshakes::new(2, Duration::from_secs(60));
        let a = h.open();
        let b = h.open();
        b.authenticated();
        let c = h.open();
        assert!(!refused(&a) && !refused(&b) && !refused(&c));
        let d = h.open();
        assert!(refused(&a), "the oldest pending one stays");
        assert!(!refused(&b), "an authenticated one was closed");
        assert!(!refused(&c) && !refused(&d));
    }

    #[tokio::test]
    async fn a_pending_connection_has_until_its_deadline() {
        let h = Handshakes::new(8, Duration::from_millis(50));
        let a = h.open();
        let b = h.open();
        b.authenticated();
        assert!(!refused(&a));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(refused(&a));
        assert!(!refused(&b));
    }
}
