//! Where a daemon listens, spelled the same way by the daemon (`--listen`) and its
//! clients (`STOCKADE_HOST`): one parser for both.
//!
//! - `unix:///run/stockaded.sock`, `unix:/run/stockaded.sock`, `/run/stockaded.sock`:
//!   a unix socket (absolute path);
//! - `tcp://HOST:PORT`, `tcp:HOST:PORT`, `HOST:PORT`: TCP, with TLS as configured (the
//!   daemon: when it has `--tls-cert`; a client: when it has a CA file, or always when
//!   HOST is not loopback);
//! - `https://HOST:PORT`: TCP with TLS, always;
//! - `http://HOST:PORT`: TCP in plain text, always (the daemon allows it on loopback
//!   only, unless `--insecure-plaintext`).
//!
//! HOST is a name, an IPv4 address or a bracketed IPv6 address (`[::1]:7000`).

use std::net::IpAddr;
use std::path::PathBuf;

use stockade_core::{Error, Result};

/// Whether a TCP address asks for TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// `tcp://` or no scheme: as configured (see the module docs).
    Auto,
    /// `https://`: TLS.
    Tls,
    /// `http://`: plain text.
    Plain,
}

/// A daemon's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A unix socket.
    Unix(PathBuf),
    /// A TCP port.
    Tcp {
        /// A name or an IP address (IPv6 without brackets).
        host: String,
        port: u16,
        security: Security,
    },
}

fn bad(text: &str, why: &str) -> Error {
    Error::InvalidRequest(format!(
        "daemon address {text:?} {why}; write unix:///path/to.sock, /path/to.sock, \
         tcp://host:port, host:port, https://host:port or http://host:port"
    ))
}

impl Address {
    /// Parses any of the spellings in the module docs.
    pub fn parse(text: &str) -> Result<Address> {
        let t = text.trim();
        if let Some(p) = t
            .strip_prefix("unix://")
            .or_else(|| t.strip_prefix("unix:"))
            .or_else(|| t.starts_with('/').then_some(t))
        {
            if !p.starts_with('/') {
                return Err(bad(text, "must name an absolute socket path"));
            }
            return Ok(Address::Unix(p.into()));
        }
        let (rest, security) = if let Some(r) = t.strip_prefix("https://") {
            (r, Security::Tls)
        } else if let Some(r) = t.strip_prefix("http://") {
            (r, Security::Plain)
        } else if let Some(r) = t.strip_prefix("tcp://").or_else(|| t.strip_prefix("tcp:")) {
            (r, Security::Auto)
        } else if t.contains("://") {
            return Err(bad(text, "has a scheme the daemon does not speak"));
        } else {
            (t, Security::Auto)
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            return Err(bad(text, "has a path after host:port"));
        }
        let Some((host, port)) = rest.rsplit_once(':') else {
            return Err(bad(text, "has no port"));
        };
        let port: u16 = port
            .parse()
            .map_err(|_| bad(text, "has a port that is not a number from 1 to 65535"))?;
        if port == 0 {
            return Err(bad(text, "has port 0"));
        }
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => v6.to_string(),
            Some(_) => {
                return Err(bad(
                    text,
                    "has a bracketed host that is not an IPv6 address",
                ));
            }
            None if host.contains(':') => {
                return Err(bad(
                    text,
                    "has an IPv6 address without brackets ([::1]:port)",
                ));
            }
            None => host.to_string(),
        };
        if host.is_empty() {
            return Err(bad(text, "has no host"));
        }
        Ok(Address::Tcp {
            host,
            port,
            security,
        })
    }

    /// Whether the address stays on this machine (a unix socket, `localhost`, or a
    /// loopback IP address).
    pub fn is_loopback(&self) -> bool {
        match self {
            Address::Unix(_) => true,
            Address::Tcp { host, .. } => {
                host.eq_ignore_ascii_case("localhost")
                    || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        }
    }

    /// Whether a client speaks TLS to this address, given whether it has a CA file:
    /// `https://` always, `http://` never, otherwise with a CA file or off loopback.
    pub fn client_uses_tls(&self, has_ca: bool) -> bool {
        match self {
            Address::Unix(_) => false,
            Address::Tcp { security, .. } => match security {
                Security::Tls => true,
                Security::Plain => false,
                Security::Auto => has_ca || !self.is_loopback(),
            },
        }
    }

    /// `host:port` with an IPv6 host in brackets (for URIs and socket addresses).
    pub fn authority(&self) -> Option<String> {
        match self {
            Address::Unix(_) => None,
            Address::Tcp { host, port, .. } if host.contains(':') => {
                Some(format!("[{host}]:{port}"))
            }
            Address::Tcp { host, port, .. } => Some(format!("{host}:{port}")),
        }
    }
}

impl std::str::FromStr for Address {
    type Err = Error;
    fn from_str(s: &str) -> Result<Address> {
        Address::parse(s)
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix://{}", p.display()),
            Address::Tcp { security, .. } => {
                let scheme = match security {
                    Security::Auto => "tcp",
                    Security::Tls => "https",
                    Security::Plain => "http",
                };
                write!(f, "{scheme}://{}", self.authority().unwrap_or_default())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, security: Security) -> Address {
        Address::Tcp {
            host: host.into(),
            port,
            security,
        }
    }

    #[test]
    fn every_spelling_parses_to_one_address() {
        for s in ["unix:///run/x.sock", "unix:/run/x.sock", "/run/x.sock"] {
            assert_eq!(
                Address::parse(s).unwrap(),
                Address::Unix("/run/x.sock".into())
            );
        }
        for s in [
            "tcp://127.0.0.1:7000",
            "tcp:127.0.0.1:7000",
            "127.0.0.1:7000",
        ] {
            assert_eq!(
                Address::parse(s).unwrap(),
                tcp("127.0.0.1", 7000, Security::Auto),
                "{s}"
            );
        }
        assert_eq!(
            Address::parse("https://d.example:443/").unwrap(),
            tcp("d.example", 443, Security::Tls)
        );
        assert_eq!(
            Address::parse("http://[::1]:7000").unwrap(),
            tcp("::1", 7000, Security::Plain)
        );
    }

    #[test]
    fn display_parses_back_to_the_same_address() {
        for s in [
            "unix:///run/x.sock",
            "tcp://10.0.0.1:7000",
            "https://[::1]:7000",
            "http://localhost:1",
        ] {
            let a = Address::parse(s).unwrap();
            assert_eq!(a.to_string(), s);
            assert_eq!(Address::parse(&a.to_string()).unwrap(), a);
        }
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        for (bad, why) in [
            ("unix://rel", "absolute"),
            ("unix:rel", "absolute"),
            ("ftp://x:1", "scheme"),
            ("http://", "no port"),
            ("x", "no port"),
            ("x:http", "port"),
            ("x:0", "port 0"),
            (":7000", "no host"),
            ("::1:7000", "brackets"),
            ("[nothost]:1", "IPv6"),
            ("http://x:1/api", "path"),
            ("", "no port"),
        ] {
            let e = Address::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("daemon address") && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn loopback_and_tls_choice() {
        let a = |s: &str| Address::parse(s).unwrap();
        assert!(a("/s").is_loopback());
        assert!(a("localhost:1").is_loopback());
        assert!(a("127.0.0.2:1").is_loopback());
        assert!(a("[::1]:1").is_loopback());
        assert!(!a("10.0.0.1:1").is_loopback());
        assert!(!a("d.example:1").is_loopback());
        // Loopback: plain unless a CA is given; elsewhere TLS unless http:// says not.
        assert!(!a("127.0.0.1:1").client_uses_tls(false));
        assert!(a("127.0.0.1:1").client_uses_tls(true));
        assert!(a("10.0.0.1:1").client_uses_tls(false));
        assert!(!a("http://10.0.0.1:1").client_uses_tls(true));
        assert!(a("https://127.0.0.1:1").client_uses_tls(false));
        assert!(!a("/s").client_uses_tls(true));
    }
}
