//! The address guard of pulls made for someone else (a daemon's tenants): a proxy on
//! loopback, private to one pull, that every connection of that pull goes through (the
//! registry, its token realm, the blob store a redirect names). It resolves each
//! target itself, refuses it when any of its addresses is one the caller refuses
//! (loopback, link-local, the host's own), and connects to the address it checked,
//! so a name cannot resolve to another address between the check and the connection.
//!
//! Written by hand on purpose: the registry client (`oci-client` over `reqwest`) takes
//! no resolver or connector, only a proxy, and this proxy needs only two forms: a
//! `CONNECT` tunnel (https) and an absolute-form `GET`/`HEAD` (plain-HTTP registries),
//! parsed with `httparse`. Every other request is refused; a plain request is sent
//! on with `Connection: close`, so a kept-alive connection never carries a second
//! request to a target that was not checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Why an address is refused, or `None` when it may be reached.
pub type Refuse = Arc<dyn Fn(IpAddr) -> Option<String> + Send + Sync>;

/// Longest request head the guard reads.
const MAX_HEAD: usize = 16 << 10;
/// How long a client has to send its head, and a target to accept.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// The addresses a pull for someone else never reaches, whoever names them:
/// unspecified, loopback, link-local, multicast and broadcast, and `own` (the
/// host's own addresses).
pub fn refuse_local(own: Vec<IpAddr>) -> Refuse {
    Arc::new(move |ip: IpAddr| {
        let ip = ip.to_canonical();
        let kind = match ip {
            IpAddr::V4(v) if v.is_unspecified() => Some("unspecified"),
            IpAddr::V4(v) if v.is_loopback() => Some("loopback"),
            IpAddr::V4(v) if v.is_link_local() => Some("link-local"),
            IpAddr::V4(v) if v.is_multicast() || v.is_broadcast() => Some("multicast"),
            IpAddr::V6(v) if v.is_unspecified() => Some("unspecified"),
            IpAddr::V6(v) if v.is_loopback() => Some("loopback"),
            IpAddr::V6(v) if v.is_unicast_link_local() => Some("link-local"),
            IpAddr::V6(v) if v.is_multicast() => Some("multicast"),
            _ => None,
        };
        if let Some(k) = kind {
            return Some(format!("{ip} is a {k} address"));
        }
        own.iter()
            .any(|o| o.to_canonical() == ip)
            .then(|| format!("{ip} is an address of this host"))
    })
}

/// A running guard; it stops when dropped (its tunnels with it).
pub struct Guard {
    addr: SocketAddr,
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Guard {
    /// Starts a guard on a loopback port of its own. It asks for no credential: it
    /// reaches only what anyone on this host can reach directly, minus what it refuses
    /// (and a client follows a redirect without the proxy credentials it was given).
    pub async fn start(refuse: Refuse) -> std::io::Result<Guard> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let refused = Arc::new(Mutex::new(Vec::new()));
        let r = refused.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.spawn(serve(c, refuse.clone(), r.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Guard {
            addr,
            refused,
            task,
        })
    }

    /// The proxy URL to give the pull's client (for both http and https).
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The targets refused so far, each with why.
    pub fn refused(&self) -> Vec<String> {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

async fn answer(c: &mut TcpStream, status: &str, why: &str) {
    let body = format!("{why}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = c.write_all(head.as_bytes()).await;
    let _ = c.write_all(body.as_bytes()).await;
}

/// One client connection: one checked target, then bytes both ways until either end
/// closes.
async fn serve(mut c: TcpStream, refuse: Refuse, refused: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::with_capacity(1024);
    let head_len = loop {
        let mut chunk = [0u8; 2048];
        let n = match tokio::time::timeout(STEP_TIMEOUT, c.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return answer(
                &mut c,
                "431 Request Header Fields Too Large",
                "head too long",
            )
            .await;
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(
        req.parse(&buf[..head_len]),
        Ok(httparse::Status::Complete(_))
    ) {
        return answer(&mut c, "400 Bad Request", "not an HTTP request head").await;
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return answer(&mut c, "400 Bad Request", "no request line").await;
    };
    let (authority, origin_path) = match method {
        "CONNECT" => (target.to_string(), None),
        "GET" | "HEAD" => match target.strip_prefix("http://") {
            Some(rest) => {
                let (auth, path) = match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, "/"),
                };
                (auth.to_string(), Some(path.to_string()))
            }
            None => return answer(&mut c, "400 Bad Request", "not an absolute http URL").await,
        },
        _ => return answer(&mut c, "405 Method Not Allowed", "a pull only reads").await,
    };
    let has_body = req.headers.iter().any(|h| {
        (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
            || h.name.eq_ignore_ascii_case("transfer-encoding")
    });
    if origin_path.is_some() && has_body {
        return answer(&mut c, "400 Bad Request", "a pull's reads carry no body").await;
    }
    let default_port = if origin_path.is_some() { 80 } else { 443 };
    let to = match vet(&authority, default_port, &refuse).await {
        Ok(a) => a,
        Err(why) => {
            refused
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(why.clone());
            return answer(&mut c, "403 Forbidden", &why).await;
        }
    };
    let Ok(Ok(mut up)) = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(to)).await else {
        return answer(
            &mut c,
            "502 Bad Gateway",
            &format!("cannot connect to {to}"),
        )
        .await;
    };
    match origin_path {
        None => {
            if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            if up.write_all(&buf[head_len..]).await.is_err() {
                return;
            }
            let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
        }
        Some(path) => {
            let mut head = format!("{method} {path} HTTP/1.1\r\n");
            for h in req.headers.iter() {
                let n = h.name.to_ascii_lowercase();
                if n.starts_with("proxy-") || n == "connection" || n == "keep-alive" {
                    continue;
                }
                head.push_str(h.name);
                head.push_str(": ");
                head.push_str(&String::from_utf8_lossy(h.value));
                head.push_str("\r\n");
            }
            head.push_str("Connection: close\r\n\r\n");
            if up.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            // The answer, to its end; the client's further bytes are not sent on.
            let _ = tokio::io::copy(&mut up, &mut c).await;
            let _ = c.shutdown().await;
        }
    }
}

/// Resolves `authority` (`host[:port]`, `[v6]:port`) and checks every address it
/// resolves to; the first one, checked, is the one to connect to.
async fn vet(authority: &str, default_port: u16, refuse: &Refuse) -> Result<SocketAddr, String> {
    let (host, port) = split_authority(authority, default_port)
        .ok_or_else(|| format!("{authority:?} is not HOST:PORT"))?;
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| format!("{host} does not resolve: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    for a in &addrs {
        if let Some(why) = refuse(a.ip()) {
            return Err(format!("{host}:{port} was refused: {why}"));
        }
    }
    Ok(addrs[0])
}

fn split_authority(a: &str, default_port: u16) -> Option<(String, u16)> {
    if a.contains('@') || a.is_empty() {
        return None;
    }
    if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match a.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h.to_string(), p.parse().ok()?)),
        Some(_) => None,
        None => Some((a.to_string(), default_port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_split_and_userinfo_is_refused() {
        assert_eq!(
            split_authority("reg.lan:5000", 443),
            Some(("reg.lan".into(), 5000))
        );
        assert_eq!(split_authority("reg.lan", 80), Some(("reg.lan".into(), 80)));
        assert_eq!(split_authority("[::1]:443", 80), Some(("::1".into(), 443)));
        assert_eq!(split_authority("evil@127.0.0.1:80", 80), None);
        assert_eq!(split_authority("a:b:c", 80), None);
        assert_eq!(split_authority("reg:notaport", 80), None);
    }

    #[test]
    fn local_addresses_are_refused_in_every_spelling() {
        let own: IpAddr = "192.0.2.7".parse().unwrap();
        let r = refuse_local(vec![own]);
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "fe80::1",
            "224.0.0.1",
            "192.0.2.7",
            "::ffff:192.0.2.7",
        ] {
            assert!(r(ip.parse().unwrap()).is_some(), "{ip} passed");
        }
        for ip in ["198.18.0.2", "10.1.2.3", "2001:db8::1"] {
            assert!(r(ip.parse().unwrap()).is_none(), "{ip} refused");
        }
    }

    async fn http_get(proxy: &SocketAddr, head: &str) -> String {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_loopback_target_is_refused_and_recorded() {
        let g = Guard::start(refuse_local(vec![])).await.unwrap();
        let target = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = target.local_addr().unwrap().port();
        let auth = "eA==";
        let out = http_get(
            &g.addr,
            &format!(
                "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
            ),
        )
        .await;
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
        assert!(out.contains("loopback"), "{out}");
        let out = http_get(
            &g.addr,
            &format!(
                "GET http://localhost:{port}/v2/ HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
            ),
        )
        .await;
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
        assert_eq!(g.refused().len(), 2, "{:?}", g.refused());
        // Other methods are refused.
        let out = http_get(
            &g.addr,
            &format!(
                "POST http://198.18.0.2/x HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n"
            ),
        )
        .await;
        assert!(out.starts_with("HTTP/1.1 405"), "{out}");
        // The target never saw a connection.
        let accepted = tokio::time::timeout(Duration::from_millis(200), target.accept()).await;
        assert!(accepted.is_err(), "the loopback target was reached");
    }

    #[tokio::test]
    async fn an_allowed_target_gets_a_tunnel_or_one_request_with_connection_close() {
        let g = Guard::start(Arc::new(|_| None)).await.unwrap();
        let target = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = target.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let (mut s, _) = target.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await
                    .unwrap();
            }
            seen
        });
        let auth = "eA==";
        let out = http_get(
            &g.addr,
            &format!(
                "GET http://127.0.0.1:{port}/v2/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Proxy-Authorization: Basic {auth}\r\nConnection: keep-alive\r\n\r\n"
            ),
        )
        .await;
        assert!(out.ends_with("ok"), "{out}");
        let mut s = TcpStream::connect(g.addr).await.unwrap();
        s.write_all(
            format!(
                "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n\
                 GET /tunnelled HTTP/1.1\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
        assert!(
            out.starts_with("HTTP/1.1 200 Connection established"),
            "{out}"
        );
        let seen = server.await.unwrap();
        assert!(seen[0].starts_with("GET /v2/x HTTP/1.1\r\n"), "{seen:?}");
        assert!(seen[0].contains("Connection: close"), "{seen:?}");
        assert!(!seen[0].to_ascii_lowercase().contains("proxy-"), "{seen:?}");
        assert!(!seen[0].contains("keep-alive"), "{seen:?}");
        assert!(seen[1].starts_with("GET /tunnelled"), "{seen:?}");
    }
}
