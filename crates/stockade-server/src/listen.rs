//! The daemon's listeners: one per `--listen` address (a unix socket for local tools
//! and a TCP port for remote clients at once, like dockerd's `-H`), each spelled as
//! clients spell it ([`Address`]). A TCP listener speaks TLS when the daemon has
//! `--tls-cert`/`--tls-key` (or its address says `https://`); plain TCP is allowed only
//! on loopback, or with `--insecure-plaintext`, which is logged at start: bearer
//! tokens never cross a network in the clear unless the operator says so.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use stockade_client::{Address, Security};
use tonic::transport::{Identity, ServerTlsConfig};

/// `--socket-group`: the group whose members may use the unix sockets.
#[derive(Clone, Debug)]
pub struct SocketGroup {
    pub name: String,
    pub gid: u32,
}

impl SocketGroup {
    /// The group named `name`, refused when the host has none of that name.
    pub fn lookup(name: &str) -> anyhow::Result<SocketGroup> {
        match nix::unistd::Group::from_name(name) {
            Ok(Some(g)) => Ok(SocketGroup {
                name: name.to_string(),
                gid: g.gid.as_raw(),
            }),
            Ok(None) => bail!(
                "--socket-group {name}: no such group on this host (create it with \
                 `groupadd {name}` and add its users with `usermod -aG {name} USER`, or \
                 name an existing group)"
            ),
            Err(e) => bail!("--socket-group {name}: cannot look the group up: {e}"),
        }
    }
}

/// A listener bound and ready to serve.
pub enum Bound {
    /// A unix socket (mode 0600, or 0660 for `--socket-group`), removed when serving
    /// ends.
    Unix(tokio::net::UnixListener, PathBuf),
    /// A TCP port, with TLS or in plain text.
    Tcp {
        listener: tokio::net::TcpListener,
        addr: SocketAddr,
        tls: Option<ServerTlsConfig>,
    },
}

/// What a TCP listener needs to know besides its address.
pub struct TcpPolicy<'a> {
    /// `--tls-cert` and `--tls-key`.
    pub identity: Option<(&'a Path, &'a Path)>,
    /// `--insecure-plaintext`.
    pub insecure_plaintext: bool,
}

/// The daemon's certificate and key as tonic's TLS settings, with errors naming the
/// flag and the file.
pub fn tls_config(cert: &Path, key: &Path) -> anyhow::Result<ServerTlsConfig> {
    let read = |flag: &str, p: &Path| {
        std::fs::read(p).with_context(|| {
            format!(
                "{flag} {}: cannot read it (give a PEM file the daemon can read)",
                p.display()
            )
        })
    };
    let identity = Identity::from_pem(read("--tls-cert", cert)?, read("--tls-key", key)?);
    let cfg = ServerTlsConfig::new().identity(identity);
    // Checked now rather than at the first connection: a bad pair fails the start.
    tonic::transport::Server::builder()
        .tls_config(cfg.clone())
        .map_err(|e| {
            anyhow::anyhow!(
                "--tls-cert {} / --tls-key {}: not a usable certificate and key ({}); give \
                 both as PEM, the key matching the certificate",
                cert.display(),
                key.display(),
                error_chain(&e)
            )
        })?;
    Ok(cfg)
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    msg
}

/// Refuses what must not start: plain TCP off loopback without
/// `--insecure-plaintext`, `https://` without a certificate. Returns whether the
/// address gets TLS.
pub fn check_tcp(addr: &Address, resolved: SocketAddr, policy: &TcpPolicy) -> anyhow::Result<bool> {
    let Address::Tcp { security, .. } = addr else {
        return Ok(false);
    };
    let tls = match security {
        Security::Tls if policy.identity.is_none() => {
            bail!("--listen {addr}: https:// needs --tls-cert and --tls-key")
        }
        Security::Tls => true,
        Security::Plain => false,
        Security::Auto => policy.identity.is_some(),
    };
    if !tls && !resolved.ip().is_loopback() && !policy.insecure_plaintext {
        bail!(
            "--listen {addr}: plain TCP off loopback would send bearer tokens over the \
             network in the clear; give --tls-cert and --tls-key, listen on a loopback \
             address, or pass --insecure-plaintext"
        );
    }
    Ok(tls)
}

/// Binds every address (all or nothing: the first that fails stops the start).
pub async fn bind_all(
    addrs: &[Address],
    policy: &TcpPolicy<'_>,
    group: Option<&SocketGroup>,
) -> anyhow::Result<Vec<Bound>> {
    let tls = match policy.identity {
        Some((cert, key)) => Some(tls_config(cert, key)?),
        None => None,
    };
    let mut out = Vec::new();
    for a in addrs {
        out.push(match a {
            Address::Unix(path) => bind_unix(path, group)?,
            Address::Tcp { .. } => {
                let authority = a.authority().unwrap_or_default();
                let resolved = tokio::net::lookup_host(&authority)
                    .await
                    .with_context(|| format!("--listen {a}: cannot resolve {authority}"))?
                    .next()
                    .with_context(|| format!("--listen {a}: {authority} has no address"))?;
                let use_tls = check_tcp(a, resolved, policy)?;
                let listener = tokio::net::TcpListener::bind(resolved)
                    .await
                    .with_context(|| format!("cannot listen on {resolved}"))?;
                let addr = listener.local_addr().unwrap_or(resolved);
                Bound::Tcp {
                    listener,
                    addr,
                    tls: if use_tls { tls.clone() } else { None },
                }
            }
        });
    }
    Ok(out)
}

fn bind_unix(path: &Path, group: Option<&SocketGroup>) -> anyhow::Result<Bound> {
    if let Some(dir) = path.parent() {
        // Directories the daemon makes for a group's socket are the group's to enter.
        let first_made = dir.ancestors().take_while(|d| !d.exists()).last();
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if let (Some(g), Some(top)) = (group, first_made) {
            for d in dir.ancestors().take_while(|d| d.starts_with(top)) {
                std::os::unix::fs::chown(d, None, Some(g.gid))
                    .and_then(|()| {
                        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o750))
                    })
                    .with_context(|| format!("cannot give {} to group {}", d.display(), g.name))?;
            }
        }
        if let Some(g) = group {
            reachable_by(dir, g)?;
        }
    }
    // A socket left by a daemon that died; refuse to steal a live one.
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("another daemon is listening on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot remove stale socket {}", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    let mode = match group {
        Some(g) => {
            std::os::unix::fs::chown(path, None, Some(g.gid))
                .with_context(|| format!("cannot give {} to group {}", path.display(), g.name))?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot restrict {}", path.display()))?;
    Ok(Bound::Unix(l, path.to_path_buf()))
}

/// Refuses a socket directory that members of `g` cannot enter (each directory on
/// the way must be searchable by others, or by `g`).
fn reachable_by(dir: &Path, g: &SocketGroup) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for d in dir.ancestors() {
        let m = std::fs::metadata(d).with_context(|| format!("cannot stat {}", d.display()))?;
        let ok = m.mode() & 0o001 != 0 || (m.gid() == g.gid && m.mode() & 0o010 != 0);
        if !ok {
            bail!(
                "--socket-group {}: members of the group cannot enter {} (mode {:o}), so \
                 they could not reach the socket; run `chgrp {} {} && chmod g+x {}`, or \
                 put the socket elsewhere",
                g.name,
                d.display(),
                m.mode() & 0o7777,
                g.name,
                d.display(),
                d.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(identity: bool, insecure: bool) -> TcpPolicy<'static> {
        TcpPolicy {
            identity: identity.then_some((Path::new("/c"), Path::new("/k"))),
            insecure_plaintext: insecure,
        }
    }

    fn check(addr: &str, resolved: &str, p: &TcpPolicy) -> anyhow::Result<bool> {
        check_tcp(&Address::parse(addr).unwrap(), resolved.parse().unwrap(), p)
    }

    #[test]
    fn plain_tcp_only_on_loopback_or_when_the_operator_says_so() {
        assert!(!check("127.0.0.1:7000", "127.0.0.1:7000", &policy(false, false)).unwrap());
        let e = check("0.0.0.0:7000", "0.0.0.0:7000", &policy(false, false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--insecure-plaintext") && e.contains("--tls-cert"),
            "{e}"
        );
        let e = check(
            "http://10.1.2.3:7000",
            "10.1.2.3:7000",
            &policy(true, false),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("in the clear"), "{e}");
        assert!(!check("0.0.0.0:7000", "0.0.0.0:7000", &policy(false, true)).unwrap());
    }

    #[test]
    fn tls_when_the_daemon_has_a_certificate_or_the_address_asks() {
        assert!(check("0.0.0.0:7000", "0.0.0.0:7000", &policy(true, false)).unwrap());
        assert!(
            check(
                "https://127.0.0.1:7000",
                "127.0.0.1:7000",
                &policy(true, false)
            )
            .unwrap()
        );
        let e = check(
            "https://127.0.0.1:7000",
            "127.0.0.1:7000",
            &policy(false, false),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("needs --tls-cert"), "{e}");
    }
}
