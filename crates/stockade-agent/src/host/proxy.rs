//! The SNI/Host check of a policy sandbox: a transparent proxy for the TCP
//! connections that an allowed *name* opened.
//!
//! The sandbox's ruleset lets a connection to an address in the resolver's allow sets
//! through its filter chain and then redirects it (nat output) to this proxy's
//! listener on loopback of the sandbox's namespace (made while the monitor entered
//! it); the proxy runs in the monitor, host side, and connects to the original
//! destination from the host's namespace, as the resolver forwards lookups. Before
//! connecting it reads the first bytes the code sends:
//!
//! - a TLS ClientHello (parsed by rustls's `Acceptor`): its server name (SNI) must be
//!   allowed on that port, else the code gets a TLS `access_denied` alert;
//! - an HTTP/1 request (parsed by httparse): its `Host` (and an absolute target's
//!   host) must be allowed, else the code gets a `403` saying why; every later request
//!   on the same connection is checked too (bodies are framed by `Content-Length` or
//!   chunked encoding; a request with both is refused), and one that is not allowed
//!   ends the connection;
//! - nothing within `SERVER_FIRST_WAIT` on a port other than 80/443 (a protocol where
//!   the server speaks first), or bytes of another protocol there: passed through,
//!   checked by address only; on 80 and 443 anything else than TLS or HTTP is refused.
//!
//! So allowing `pypi.org` does not open every site behind the same CDN or proxy
//! address. Every refusal is recorded like the resolver's (`tls` or `http`, the
//! address, the port, the name asked for, the rule). Not checked: what travels inside
//! an allowed TLS session (a `Host` different from the SNI, "domain fronting", is
//! the server's to refuse).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{getsockopt, sockopt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use stockade_agent::wire::{Framing, Head, Request, classify, incomplete, parse_request, refusal};
use stockade_agent_proto::launch::{
    CredentialRule, EGRESS_PROXY_PORT, EgressPlan, TlsIntercept, sandbox_ca_params,
};

mod intercept;

pub use intercept::Intercept;
use intercept::*;

/// How long the proxy waits for the code's first bytes before taking the protocol
/// for one where the server speaks first (not on ports 80 and 443).
const SERVER_FIRST_WAIT: Duration = Duration::from_millis(300);
/// How long a client gets to send a whole ClientHello or request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head or ClientHello read before deciding.
const MAX_HEAD: usize = 64 * 1024;
/// Connections proxied at once for one sandbox (two threads each).
const MAX_CONNECTIONS: usize = 256;
/// How long connecting to the original destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the answers to a connection's allowed requests may take once a later
/// request on it was refused (the server may keep the connection open after ours
/// ends).
const DRAIN_AFTER_REFUSAL: Duration = Duration::from_secs(5);

/// What the proxy needs of the monitor's egress state.
pub trait Policy: Send + Sync + 'static {
    /// The current name rules.
    fn plan(&self) -> Option<EgressPlan>;
    /// Records a refusal.
    fn record(&self, protocol: &str, dest: SocketAddr, name: Option<&str>, rule: String);
    /// Credentials and the authority to intercept TLS with, when the sandbox has any.
    fn intercept(&self) -> Option<&Intercept>;
}

/// The proxy's listeners, bound inside the sandbox's namespace.
pub struct Listeners {
    v4: TcpListener,
    v6: Option<TcpListener>,
}

/// Binds the listeners; the caller is inside the sandbox's network namespace.
pub fn bind() -> Result<Listeners, String> {
    let v4 = TcpListener::bind(("127.0.0.1", EGRESS_PROXY_PORT)).map_err(|e| {
        format!("cannot listen on port {EGRESS_PROXY_PORT} in the sandbox's namespace: {e}")
    })?;
    // No IPv6 loopback when the namespace has IPv6 disabled: IPv4 only then.
    let v6 = TcpListener::bind(("::1", EGRESS_PROXY_PORT)).ok();
    Ok(Listeners { v4, v6 })
}

impl Listeners {
    /// The listeners' descriptors (IPv4 first), to pass to another process.
    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        std::iter::once(self.v4.as_fd())
            .chain(self.v6.as_ref().map(AsFd::as_fd))
            .collect()
    }

    /// Listeners received from another process (see [`Listeners::fds`]).
    pub fn from_parts(v4: TcpListener, v6: Option<TcpListener>) -> Listeners {
        Listeners { v4, v6 }
    }
}

/// Starts the accept threads (from the host's namespace: upstream connections are
/// made where the thread runs).
pub fn start(l: Listeners, policy: Arc<dyn Policy>) -> Result<(), String> {
    let live = Arc::new(AtomicUsize::new(0));
    for listener in std::iter::once(l.v4).chain(l.v6) {
        let policy = policy.clone();
        let live = live.clone();
        std::thread::Builder::new()
            .name("egress-proxy".into())
            .spawn(move || accept_loop(&listener, &policy, &live))
            .map_err(|e| format!("cannot start the egress proxy: {e}"))?;
    }
    Ok(())
}

fn accept_loop(listener: &TcpListener, policy: &Arc<dyn Policy>, live: &Arc<AtomicUsize>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Some(dest) = original_destination(&conn) else {
            // Connected to the proxy's own address: nothing was redirected.
            reset(&conn);
            continue;
        };
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            policy.record(
                "tcp",
                dest,
                None,
                format!("more than {MAX_CONNECTIONS} connections through the proxy at once"),
            );
            reset(&conn);
            continue;
        }
        let policy = policy.clone();
        let live2 = live.clone();
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                handle(conn, dest, &*policy);
                live2.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Where the code meant to connect (the address before the redirect), or `None` for
/// a connection made to the proxy itself.
fn original_destination(conn: &TcpStream) -> Option<SocketAddr> {
    let local = conn.local_addr().ok()?;
    let dest = if local.is_ipv4() {
        let a = getsockopt(conn, sockopt::OriginalDst).ok()?;
        SocketAddr::new(
            IpAddr::V4(u32::from_be(a.sin_addr.s_addr).into()),
            u16::from_be(a.sin_port),
        )
    } else {
        let a = getsockopt(conn, sockopt::Ip6tOriginalDst).ok()?;
        SocketAddr::new(
            IpAddr::V6(a.sin6_addr.s6_addr.into()),
            u16::from_be(a.sin6_port),
        )
    };
    (dest != local && !dest.ip().is_loopback()).then_some(dest)
}

/// Closes with a reset: the code sees ECONNRESET, not a clean end of stream.
fn reset(conn: &TcpStream) {
    let _ = nix::sys::socket::setsockopt(
        conn,
        sockopt::Linger,
        &nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
}

fn handle(client: TcpStream, dest: SocketAddr, policy: &dyn Policy) {
    let web = matches!(dest.port(), 80 | 443);
    let mut head = Vec::new();
    let Ok(kind) = read_head(&client, &mut head, web) else {
        return;
    };
    let Some(plan) = policy.plan() else {
        reset(&client);
        return;
    };
    // An address the allowlist's ranges open is allowed whatever name is asked for.
    let by_address = plan.cidrs.iter().any(|c| c.covers_tcp(dest));
    match kind {
        Head::Tls(sni) => {
            let why = match &sni {
                _ if by_address => None,
                Some(name) => refusal(&plan, name, dest.port()),
                None => Some("TLS without a server name (SNI)".into()),
            };
            if let Some(rule) = why {
                policy.record("tls", dest, sni.as_deref(), rule);
                tls_refuse(&client);
                return;
            }
            match (policy.intercept(), sni) {
                (Some(i), Some(sni)) => {
                    if let Err(why) = i.serve(client, dest, &head, &sni) {
                        policy.record("tls", dest, Some(&sni), why);
                    }
                }
                (Some(_), None) => {
                    policy.record(
                        "tls",
                        dest,
                        None,
                        "TLS without a server name (SNI) in a sandbox with credentials".into(),
                    );
                    tls_refuse(&client);
                }
                (None, _) => {
                    let Some(up) = connect(&client, dest) else {
                        return;
                    };
                    pass_through(client, up, &head);
                }
            }
        }
        Head::Http => http(client, dest, head, policy, by_address),
        Head::Malformed(protocol, why) if !by_address => {
            policy.record(protocol, dest, None, why.clone());
            if protocol == "tls" {
                tls_refuse(&client);
            } else {
                refuse_http(&client, &why);
            }
        }
        Head::Malformed(..) | Head::Other | Head::NeedMore if web => {
            policy.record(
                "tcp",
                dest,
                None,
                format!("neither TLS nor HTTP on port {}", dest.port()),
            );
            reset(&client);
        }
        Head::Malformed(..) | Head::Other | Head::NeedMore => {
            let Some(up) = connect(&client, dest) else {
                return;
            };
            pass_through(client, up, &head);
        }
    }
}

/// A fatal TLS `access_denied` alert (what TLS clients report as such), then the end.
fn tls_refuse(client: &TcpStream) {
    let _ = (&*client).write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);
    let _ = client.shutdown(Shutdown::Both);
}

/// Reads until the head is classified. Off ports 80/443, silence for
/// `SERVER_FIRST_WAIT` is a server-first protocol (returns `Other` with no bytes).
fn read_head(client: &TcpStream, head: &mut Vec<u8>, web: bool) -> io::Result<Head> {
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let wait = if head.is_empty() && !web {
            SERVER_FIRST_WAIT
        } else {
            HEAD_TIMEOUT
        };
        let left = wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(if head.is_empty() {
                Head::Other
            } else {
                incomplete(head, "not complete within 30 s")
            });
        }
        client.set_read_timeout(Some(left))?;
        match (&*client).read(&mut buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        }
        match classify(head) {
            Head::NeedMore if head.len() < MAX_HEAD => continue,
            Head::NeedMore => return Ok(incomplete(head, "over 64 KiB")),
            k => {
                client.set_read_timeout(None)?;
                return Ok(k);
            }
        }
    }
}

fn connect(client: &TcpStream, dest: SocketAddr) -> Option<TcpStream> {
    match TcpStream::connect_timeout(&dest, CONNECT_TIMEOUT) {
        Ok(up) => Some(up),
        Err(_) => {
            reset(client);
            None
        }
    }
}

/// Copies both ways until both sides are done (`first` goes upstream first).
fn pass_through(client: TcpStream, up: TcpStream, first: &[u8]) {
    if (&up).write_all(first).is_err() {
        reset(&client);
        return;
    }
    let (Ok(c2), Ok(u2)) = (client.try_clone(), up.try_clone()) else {
        return;
    };
    let back = std::thread::Builder::new()
        .name("egress-back".into())
        .spawn(move || copy_then_close(&u2, &c2));
    copy_then_close(&client, &up);
    if let Ok(t) = back {
        let _ = t.join();
    }
}

fn copy_then_close(from: &TcpStream, to: &TcpStream) {
    let _ = io::copy(&mut &*from, &mut &*to);
    let _ = to.shutdown(Shutdown::Write);
}

/// A cleartext HTTP connection: each request's host is checked before it goes on.
/// The answers come back through a thread that relays one response per request sent
/// (so it knows when every answer asked for has arrived).
fn http(client: TcpStream, dest: SocketAddr, head: Vec<u8>, policy: &dyn Policy, by_address: bool) {
    let mut input = Input { buf: head };
    let mut up: Option<TcpStream> = None;
    let mut back: Option<(std::sync::mpsc::Sender<Sent>, std::thread::JoinHandle<()>)> = None;
    let mut switched: Option<std::sync::mpsc::Receiver<bool>> = None;
    // A refused request after allowed ones on the same connection: the answers to
    // those still reach the client, then the connection ends (no answer is sent for
    // the refused one: the client's parser could not tell it from the server's).
    let mut refused_later = false;
    loop {
        let req = match input.request_head(&mut &client) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(why) => {
                policy.record("http", dest, None, why.clone());
                refused_later = up.is_some();
                if !refused_later {
                    refuse_http(&client, &why);
                }
                break;
            }
        };
        let Some(plan) = policy.plan() else {
            reset(&client);
            break;
        };
        let why = req
            .refusal(&plan, dest.port())
            .filter(|_| !by_address || req.connect)
            .or_else(|| {
                let i = policy.intercept()?;
                // Credentials go over TLS only; in clear text a placeholder goes nowhere.
                i.placeholder_in(&req.raw).map(|c| {
                    (
                        req.host.clone(),
                        format!("the placeholder of the credential for {c} sent in clear text"),
                    )
                })
            });
        if let Some((name, rule)) = why {
            policy.record("http", dest, name.as_deref(), rule.clone());
            refused_later = up.is_some();
            if !refused_later {
                refuse_http(&client, &rule);
            }
            break;
        }
        if up.is_none() {
            let Some(u) = connect(&client, dest) else {
                return;
            };
            let (Ok(c2), Ok(u2)) = (client.try_clone(), u.try_clone()) else {
                return;
            };
            let (tx, rx) = std::sync::mpsc::channel();
            let (sw_tx, sw_rx) = std::sync::mpsc::channel();
            let Ok(t) = std::thread::Builder::new()
                .name("egress-back".into())
                .spawn(move || relay_answers(&u2, &c2, &rx, &sw_tx))
            else {
                reset(&client);
                return;
            };
            back = Some((tx, t));
            switched = Some(sw_rx);
            up = Some(u);
        }
        let (Some(u), Some((tx, _))) = (up.as_ref(), back.as_ref()) else {
            break;
        };
        if (&*u).write_all(&req.raw).is_err() {
            break;
        }
        let _ = tx.send(Sent {
            head_request: req.head_request,
            upgrade: req.upgrade,
        });
        if input.body(&mut &client, &req.framing, &mut &*u).is_err() {
            break;
        }
        if req.upgrade {
            // A protocol switch (e.g. websocket) only once the server agreed (its
            // 101): until then the connection is HTTP, and its next request is
            // checked like the first.
            match switched.as_ref().map(std::sync::mpsc::Receiver::recv) {
                Some(Ok(true)) => {
                    let _ = (&*u).write_all(&input.buf);
                    copy_then_close(&client, u);
                    break;
                }
                Some(Ok(false)) => {}
                Some(Err(_)) | None => break,
            }
        }
    }
    if refused_later && let Some(u) = &up {
        // A server that never answers what was asked does not hold this forever.
        let _ = u.set_read_timeout(Some(DRAIN_AFTER_REFUSAL));
    }
    if let Some((tx, t)) = back {
        // No more requests: the thread ends once the answers to those sent are in.
        drop(tx);
        let _ = t.join();
    }
    if let Some(u) = up {
        let _ = u.shutdown(Shutdown::Both);
    }
    if refused_later {
        let _ = client.shutdown(Shutdown::Both);
    }
}

/// What the relay of answers needs to know of a request sent upstream.
struct Sent {
    head_request: bool,
    upgrade: bool,
}

/// Relays one response per request sent, then closes the client's side for writing.
/// The answer to an upgrade request is told to the request side (`switched`: true
/// for a `101`); after a `101` the rest is copied as it comes.
fn relay_answers(
    up: &TcpStream,
    client: &TcpStream,
    sent: &std::sync::mpsc::Receiver<Sent>,
    switched: &std::sync::mpsc::Sender<bool>,
) {
    let mut uin = Input { buf: Vec::new() };
    while let Ok(req) = sent.recv() {
        match relay_response(&mut uin, &mut &*up, &mut &*client, req.head_request) {
            Ok(Relayed::Next) => {
                if req.upgrade {
                    let _ = switched.send(false);
                }
            }
            Ok(Relayed::Switched) if req.upgrade => {
                let _ = switched.send(true);
                if (&*client).write_all(&uin.buf).is_ok() {
                    let _ = io::copy(&mut &*up, &mut &*client);
                }
                break;
            }
            // (A 101 nobody asked for ends the connection.)
            Ok(Relayed::Switched | Relayed::End) | Err(_) => break,
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}

fn refuse_tls_http(down: &mut impl Write, first: bool, why: &str) {
    if first {
        refuse_tls_http_status(down, "403 Forbidden", why);
    }
}

fn refuse_tls_http_status(down: &mut impl Write, status: &str, why: &str) {
    let body = format!("blocked by the sandbox's network policy: {why}\n");
    let _ = down.write_all(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nx-stockade-egress: denied\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let _ = down.flush();
}

/// A refusal the code can read: a 403 before anything went upstream, else a reset
/// (a response is already on its way to the client).
/// Answers a connection's first request with 403 and the reason, and closes it.
fn refuse_http(client: &TcpStream, why: &str) {
    let body = format!("blocked by the sandbox's network policy: {why}\n");
    let _ = (&*client).write_all(
        format!(
            "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nx-stockade-egress: denied\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let _ = client.shutdown(Shutdown::Both);
}

/// What was read ahead of one side of a connection; the stream is passed to each
/// call (a TLS session both reads and writes through one value).
struct Input {
    buf: Vec<u8>,
}

impl Input {
    fn fill(&mut self, r: &mut impl Read) -> io::Result<usize> {
        let mut b = [0u8; 16 * 1024];
        let n = r.read(&mut b)?;
        self.buf.extend_from_slice(&b[..n]);
        Ok(n)
    }

    /// The next request head, `None` at a clean end of stream.
    fn request_head(&mut self, r: &mut impl Read) -> Result<Option<Request>, String> {
        loop {
            if !self.buf.is_empty() {
                if let Some((n, req)) = parse_request(&self.buf)? {
                    self.buf.drain(..n);
                    return Ok(Some(req));
                }
                if self.buf.len() >= MAX_HEAD {
                    return Err(format!("HTTP request head over {MAX_HEAD} bytes"));
                }
            }
            match self.fill(r) {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => return Err("connection closed inside an HTTP request head".into()),
                Ok(_) => {}
                Err(_) => return Ok(None),
            }
        }
    }

    /// Copies exactly `n` bytes to `to`.
    fn copy_exact(&mut self, r: &mut impl Read, mut n: u64, to: &mut impl Write) -> io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && self.fill(r)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = (self.buf.len() as u64).min(n) as usize;
            to.write_all(&self.buf[..take])?;
            self.buf.drain(..take);
            n -= take as u64;
        }
        Ok(())
    }

    /// Copies everything to `to` until the end of the stream.
    fn copy_to_end(&mut self, r: &mut impl Read, to: &mut impl Write) -> io::Result<()> {
        loop {
            if !self.buf.is_empty() {
                to.write_all(&self.buf)?;
                self.buf.clear();
            }
            if self.fill(r)? == 0 {
                return Ok(());
            }
        }
    }

    /// One CRLF-ended line, copied to `to` and returned.
    fn copy_line(&mut self, r: &mut impl Read, to: &mut impl Write) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                to.write_all(&line)?;
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(io::Error::other("chunk line too long"));
            }
            if self.fill(r)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    fn body(
        &mut self,
        r: &mut impl Read,
        framing: &Framing,
        to: &mut impl Write,
    ) -> io::Result<()> {
        match framing {
            Framing::None => Ok(()),
            Framing::Length(n) => self.copy_exact(r, *n, to),
            Framing::ToEnd => self.copy_to_end(r, to),
            Framing::Chunked => loop {
                let line = self.copy_line(r, to)?;
                let text = String::from_utf8_lossy(&line);
                let size = text.trim().split(';').next().unwrap_or("").trim();
                let size = u64::from_str_radix(size, 16)
                    .map_err(|_| io::Error::other("bad chunk size"))?;
                if size == 0 {
                    // Trailers, up to the empty line.
                    while self.copy_line(r, to)? != b"\r\n" {}
                    return Ok(());
                }
                self.copy_exact(r, size + 2, to)?;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use stockade_agent::wire::*;
    use stockade_agent_proto::launch::NameRule;

    use super::*;

    fn plan() -> EgressPlan {
        let rule = |name: &str, wildcard, ports: Option<Vec<u16>>| NameRule {
            name: name.into(),
            wildcard,
            ports,
            protocols: vec!["tcp".into()],
            text: name.into(),
        };
        EgressPlan {
            deny: vec![rule("bad.pypi.org", false, None)],
            allow: vec![
                rule("pypi.org", false, Some(vec![80, 443])),
                rule("pythonhosted.org", true, Some(vec![443])),
            ],
            upstreams: Vec::new(),
            cidrs: Vec::new(),
            tls: None,
        }
    }

    #[test]
    fn names_are_checked_with_their_ports() {
        let p = plan();
        assert_eq!(refusal(&p, "PyPI.org.", 443), None);
        assert_eq!(refusal(&p, "files.pythonhosted.org", 443), None);
        assert!(refusal(&p, "files.pythonhosted.org", 80).is_some());
        assert!(refusal(&p, "pythonhosted.org", 443).is_some());
        assert_eq!(
            refusal(&p, "bad.pypi.org", 443).as_deref(),
            Some("denylist: bad.pypi.org")
        );
        assert_eq!(
            refusal(&p, "registry.npmjs.org", 443).as_deref(),
            Some("name not in the allowlist")
        );
    }

    #[test]
    fn heads_are_told_apart() {
        assert_eq!(classify(b""), Head::NeedMore);
        assert_eq!(classify(b"GE"), Head::NeedMore);
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: a\r\n"), Head::NeedMore);
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Head::Http);
        assert_eq!(classify(b"SSH-2.0-OpenSSH\r\n"), Head::Other);
        assert_eq!(classify(b"\x00\x00\x00\x08"), Head::Other);
        // HTTP/2 with prior knowledge: its streams could each name another host.
        assert!(matches!(
            classify(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Head::Malformed("http", _)
        ));
        // What a lax server would still read as a request is refused, not passed on.
        for lax in [
            &b" GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"[..],
            b"\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            b"GET\t/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            b"GET /  HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            b"GET / HTTP/1.1\nHost evil.test\r\n\r\n",
        ] {
            assert!(
                matches!(classify(lax), Head::Malformed("http", _)),
                "{:?}: {:?}",
                String::from_utf8_lossy(lax),
                classify(lax)
            );
        }
        // Any token is a method to some server (Go's routes `get` and `GE-`): each is
        // read, and checked, as a request.
        for method in [
            "get",
            "GE-",
            "M-SEARCH",
            "PROPFIND",
            "AAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            let req = format!("{method} / HTTP/1.1\r\nHost: evil.test\r\n\r\n");
            assert_eq!(classify(req.as_bytes()), Head::Http, "{method}");
        }
        for lax in [
            &b"get\t/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"[..],
            b" get / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        ] {
            assert!(
                matches!(classify(lax), Head::Malformed("http", _)),
                "{:?}: {:?}",
                String::from_utf8_lossy(lax),
                classify(lax)
            );
        }
        // A head that never completes is refused if it began as HTTP or TLS.
        assert!(matches!(
            incomplete(b"GET / HTTP/1.1\r\nHost: evil.test\r\n", "t"),
            Head::Malformed("http", _)
        ));
        assert!(matches!(
            incomplete(&[0x16, 0x03, 0x01, 0x02], "t"),
            Head::Malformed("tls", _)
        ));
        assert_eq!(incomplete(b"\x00\x01", "t"), Head::Other);
        // A TLS record header alone is not yet a ClientHello.
        assert_eq!(classify(&[0x16, 0x03, 0x01]), Head::NeedMore);
    }

    #[test]
    fn requests_are_framed_and_smuggling_is_refused() {
        let (n, r) = parse_request(
            b"POST http://Evil.example:80/x HTTP/1.1\r\nHost: pypi.org:80\r\nContent-Length: 5\r\n\r\nhello",
        )
        .unwrap()
        .unwrap();
        assert_eq!(n, r.raw.len());
        assert_eq!(r.host.as_deref(), Some("pypi.org"));
        assert_eq!(r.target_host.as_deref(), Some("evil.example"));
        assert_eq!(r.framing, Framing::Length(5));
        assert_eq!(
            r.refusal(&plan(), 80),
            Some((
                Some("evil.example".into()),
                "name not in the allowlist".into()
            ))
        );
        let (_, r) = parse_request(
            b"POST / HTTP/1.1\r\nHost: [::1]:8080\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.host.as_deref(), Some("::1"));
        assert_eq!(r.framing, Framing::Chunked);
        for bad in [
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            assert!(parse_request(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let (_, r) = parse_request(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            r.refusal(&plan(), 80),
            Some((None, "HTTP request without a Host header".into()))
        );
        for bad in [
            // userinfo: a server may take the part before the @ as the host
            &b"GET / HTTP/1.1\r\nHost: evil.test:80@pypi.org\r\n\r\n"[..],
            b"GET http://evil.test@pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: pypi.org/x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: pypi.org evil.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: pypi.org:8o\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: \r\n\r\n",
            // echoes of the request, credentials included
            b"TRACE / HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
            b"TRACK / HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
            // HTTP/2 streams after the switch could each name another host
            b"GET / HTTP/1.1\r\nHost: pypi.org\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
            // neither origin nor absolute form
            b"GET pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
            b"GET ://evil.test/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
        ] {
            assert!(
                parse_request(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // `://` in an origin-form query is not an absolute target.
        let (_, r) =
            parse_request(b"GET /?next=http://evil.test/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
                .unwrap()
                .unwrap();
        assert_eq!(r.target_host, None);
        assert_eq!(r.refusal(&plan(), 80), None);
        let (_, r) = parse_request(b"GET / HTTP/1.1\r\nHost: pypi.org\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.upgrade);
        let (_, r) = parse_request(b"OPTIONS * HTTP/1.1\r\nHost: [::1]:80\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.host.as_deref(), Some("::1"));
        let (_, r) = parse_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.refusal(&plan(), 80).is_some());
    }

    #[test]
    fn an_injected_secret_never_passes_a_scrub() {
        let rule = |value: &str| CredentialRule {
            host: "api.test".into(),
            header: "Authorization".into(),
            value: value.into(),
            placeholder: "p".into(),
        };
        let secrets = secrets_of(&[rule("Bearer sk-live-12345678")]);
        assert_eq!(
            secrets,
            [
                b"Bearer sk-live-12345678".to_vec(),
                b"sk-live-12345678".to_vec()
            ]
        );
        // Split across writes, at every point: cut before any byte of it is written.
        let body = b"{\"headers\": {\"authorization\": \"Bearer sk-live-12345678\"}}";
        let at = body.windows(7).position(|w| w == b"sk-live").unwrap();
        for split in 0..body.len() {
            let mut out = Vec::new();
            let mut w = Scrub::new(&mut out, &secrets);
            let r = w
                .write_all(&body[..split])
                .and_then(|()| w.write_all(&body[split..]));
            assert_eq!(
                r.unwrap_err().kind(),
                io::ErrorKind::PermissionDenied,
                "split at {split}"
            );
            assert!(
                out.len() <= at,
                "split at {split}: {}",
                String::from_utf8_lossy(&out)
            );
        }
        // Anything else goes through whole, the held tail at the flush.
        let mut out = Vec::new();
        let mut w = Scrub::new(&mut out, &secrets);
        w.write_all(b"HTTP/1.1 200 OK\r\n\r\nsk-live-1234567 is not it")
            .unwrap();
        w.flush().unwrap();
        assert_eq!(out, b"HTTP/1.1 200 OK\r\n\r\nsk-live-1234567 is not it");
    }
}
