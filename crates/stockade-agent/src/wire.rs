//! The bytes the egress proxy reads before it connects anywhere: the first bytes of a
//! connection (a TLS ClientHello, an HTTP/1 request head, or another protocol) and an
//! HTTP/1 request head's host, framing and upgrade, checked as strictly as a server
//! would read them. Pure functions of bytes, so that tests and fuzz targets call them
//! as the proxy does (`fuzz/` at the repository's root).

use stockade_agent_proto::launch::{EgressPlan, NameRule};

/// What the first bytes of a connection are.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    NeedMore,
    /// A TLS ClientHello and its server name.
    Tls(Option<String>),
    /// An HTTP/1 request head.
    Http,
    /// Bytes that start like an HTTP request (as a lax server would read them) or a
    /// TLS ClientHello but are not a well-formed, whole one: refused (`tls` or
    /// `http`, and why), never passed on by address.
    Malformed(&'static str, String),
    Other,
}

pub fn classify(buf: &[u8]) -> Head {
    if buf.is_empty() {
        return Head::NeedMore;
    }
    if buf[0] == 0x16 {
        let mut acceptor = rustls::server::Acceptor::default();
        let mut r = buf;
        while !r.is_empty() {
            if acceptor.read_tls(&mut r).is_err() {
                return Head::Other;
            }
        }
        return match acceptor.accept() {
            Ok(Some(hello)) => Head::Tls(
                hello
                    .client_hello()
                    .server_name()
                    .map(str::to_ascii_lowercase),
            ),
            Ok(None) => Head::NeedMore,
            Err(_) => Head::Other,
        };
    }
    // Lax servers skip whitespace before the request line and split it on tabs: what
    // would reach one of them as a request must be one here.
    let (lead, token) = method_at(buf);
    let rest = &buf[lead..];
    if rest.is_empty() || token == rest.len() {
        return Head::NeedMore;
    }
    if token == 0 || !matches!(rest[token], b' ' | b'\t') {
        return Head::Other;
    }
    if lead > 0 {
        return Head::Malformed("http", "HTTP request line after leading whitespace".into());
    }
    if rest[token] == b'\t' {
        return Head::Malformed(
            "http",
            "HTTP request line with a tab after the method".into(),
        );
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    match httparse::Request::new(&mut headers).parse(buf) {
        Ok(httparse::Status::Partial) => Head::NeedMore,
        Ok(httparse::Status::Complete(_)) => Head::Http,
        Err(e) => Head::Malformed("http", format!("malformed HTTP request ({e})")),
    }
}

/// Where a lax server would find a request's method in `buf`: the length of the
/// whitespace before it and of the method. A method is any token (RFC 9110's
/// `tchar`s, of any length): servers such as Go's route `get`, `GE-` or a 20-letter
/// method to their handlers, so each of them is a request here too.
pub fn method_at(buf: &[u8]) -> (usize, usize) {
    let lead = buf
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .count();
    let token = buf[lead..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
        .count();
    (lead, token)
}

/// A head still undecided when the wait or the size ran out: one that began as a
/// ClientHello or an HTTP request is refused (its rest could name anything once
/// passed on by address), anything else is another protocol.
pub fn incomplete(head: &[u8], how: &str) -> Head {
    if head.first() == Some(&0x16) {
        return Head::Malformed("tls", format!("TLS ClientHello {how}"));
    }
    let (lead, token) = method_at(head);
    let rest = &head[lead..];
    if token > 0 && matches!(rest.get(token), Some(b' ' | b'\t')) {
        return Head::Malformed("http", format!("HTTP request head {how}"));
    }
    Head::Other
}

/// The decision on a name for `port`: `None` allows, `Some(rule)` says why not.
pub fn refusal(plan: &EgressPlan, name: &str, port: u16) -> Option<String> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if let Some(d) = plan.deny.iter().find(|r| r.matches(&name)) {
        return Some(format!("denylist: {}", d.text));
    }
    let opens = |r: &&NameRule| {
        r.matches(&name)
            && r.protocols.iter().any(|p| p == "tcp")
            && r.ports.as_ref().is_none_or(|p| p.contains(&port))
    };
    if plan.allow.iter().any(|r| opens(&r)) {
        None
    } else {
        Some("name not in the allowlist".into())
    }
}

/// How a message's body ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    /// At the end of the stream (a response without a length).
    ToEnd,
}

#[derive(Debug)]
pub struct Request {
    pub raw: Vec<u8>,
    pub host: Option<String>,
    /// The host of an absolute target (`GET http://x/ HTTP/1.1`), when different.
    pub target_host: Option<String>,
    pub framing: Framing,
    pub upgrade: bool,
    pub connect: bool,
    /// `HEAD`: the response has no body whatever its headers say.
    pub head_request: bool,
    pub expect_continue: bool,
}

impl Request {
    /// Why the request may not go on, and the name that was refused.
    pub fn refusal(&self, plan: &EgressPlan, port: u16) -> Option<(Option<String>, String)> {
        if self.connect {
            return Some((self.host.clone(), "CONNECT requests are not proxied".into()));
        }
        let Some(host) = &self.host else {
            return Some((None, "HTTP request without a Host header".into()));
        };
        for h in std::iter::once(host).chain(&self.target_host) {
            if let Some(r) = refusal(plan, h, port) {
                return Some((Some(h.clone()), r));
            }
        }
        None
    }
}

/// The host part of a `Host` value or an authority: no port, no brackets, lowercase.
pub fn host_of(authority: &str) -> String {
    let a = authority.trim();
    let a = a.rsplit_once('@').map_or(a, |(_, h)| h);
    let h = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        a.split(':').next().unwrap_or("")
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `a` is a host with an optional port and nothing else (no userinfo, no
/// path, no spaces inside): a name, an IPv4 address or a bracketed IPv6 address.
pub fn valid_authority(a: &str) -> bool {
    let a = a.trim_matches([' ', '\t']);
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => ("v6", None),
            p => match p.strip_prefix(':') {
                Some(p) => ("v6", Some(p)),
                None => return false,
            },
        }
    } else {
        match a.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Parses one request head (all of it in `buf`).
pub fn parse_request(buf: &[u8]) -> Result<Option<(usize, Request)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed HTTP request ({e})")),
    };
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    if ["TRACE", "TRACK"].contains(&method) {
        // The server would echo the request back, headers (and credentials) included.
        return Err(format!("{method} requests are not proxied"));
    }
    let mut hosts = Vec::new();
    let mut lengths = Vec::new();
    let mut chunked = false;
    let mut te = false;
    let mut upgrade = false;
    let mut expect_continue = false;
    for h in req.headers.iter() {
        let v = String::from_utf8_lossy(h.value);
        match h.name.to_ascii_lowercase().as_str() {
            "host" => {
                if !valid_authority(&v) {
                    return Err(format!(
                        "HTTP request with a malformed Host: {:?}",
                        v.trim()
                    ));
                }
                hosts.push(host_of(&v));
            }
            "content-length" => lengths.push(v.trim().to_string()),
            "transfer-encoding" => {
                te = true;
                chunked = v
                    .rsplit(',')
                    .next()
                    .is_some_and(|l| l.trim().eq_ignore_ascii_case("chunked"));
            }
            "upgrade" => {
                if v.to_ascii_lowercase().contains("h2c") {
                    // Its HTTP/2 streams could each name another host, unchecked.
                    return Err("an HTTP/2 upgrade (h2c) is not proxied".into());
                }
                upgrade = true;
            }
            "expect" => expect_continue = v.trim().eq_ignore_ascii_case("100-continue"),
            _ => {}
        }
    }
    if hosts.len() > 1 {
        return Err("HTTP request with more than one Host header".into());
    }
    let framing = match (te, lengths.as_slice()) {
        (true, []) if chunked => Framing::Chunked,
        (true, []) => return Err("HTTP request with a transfer coding other than chunked".into()),
        (true, _) => {
            return Err("HTTP request with both Content-Length and Transfer-Encoding".into());
        }
        (false, []) => Framing::None,
        (false, [one, rest @ ..]) => {
            if rest.iter().any(|r| r != one) {
                return Err("HTTP request with conflicting Content-Length headers".into());
            }
            Framing::Length(
                one.parse()
                    .map_err(|_| format!("HTTP request with a bad Content-Length: {one}"))?,
            )
        }
    };
    // Origin form (`/path?q`), `*` (OPTIONS), CONNECT's authority (refused later), or
    // the absolute form (`http://host/path`), whose authority is checked as a Host is.
    let target_host = if target.starts_with('/') || target == "*" {
        None
    } else if method.eq_ignore_ascii_case("CONNECT") {
        if !valid_authority(target) {
            return Err(format!("HTTP CONNECT with a malformed target: {target:?}"));
        }
        Some(host_of(target))
    } else {
        let (scheme, rest) = target
            .split_once("://")
            .filter(|(scheme, _)| {
                scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            })
            .ok_or_else(|| format!("HTTP request with a malformed target: {target:?}"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if scheme.is_empty() || !valid_authority(authority) {
            return Err(format!("HTTP request with a malformed target: {target:?}"));
        }
        Some(host_of(authority))
    };
    Ok(Some((
        n,
        Request {
            raw: buf[..n].to_vec(),
            host: hosts.pop(),
            target_host,
            framing,
            upgrade,
            connect: method.eq_ignore_ascii_case("CONNECT"),
            head_request: method.eq_ignore_ascii_case("HEAD"),
            expect_continue,
        },
    )))
}
