//! Tenants and their tokens. Each line of the token file is a token; each token is a
//! tenant. Tokens are compared as SHA-256 digests in constant time, so neither their
//! content nor their length shows in timing.

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;

/// The tenant of callers when the daemon has no token file (unix socket only).
pub const LOCAL_TENANT: &str = "local";

/// A failure to read the token file.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("token file {path} has no tokens")]
    Empty { path: String },
    #[error("token file {path} line {line}: a token must be at least 16 characters")]
    Short { path: String, line: usize },
}

/// Who may call, and as which tenant.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// Digest and tenant name of each token; empty: no tokens (one local tenant).
    tokens: Vec<([u8; 32], String)>,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Auth {
    /// No tokens: every caller is the local tenant.
    pub fn none() -> Auth {
        Auth::default()
    }

    /// The tenants' names, one per token in the file's order (what a profiles
    /// file's `[tenants]` names; a name tells nothing of its token).
    pub fn tenant_names(&self) -> Vec<&str> {
        self.tokens.iter().map(|(_, n)| n.as_str()).collect()
    }

    /// Tokens from a file (one per line; blank lines and `#` comments skipped).
    pub fn from_file(path: &Path) -> Result<Auth, AuthError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
            path: p.clone(),
            source,
        })?;
        let mut tokens = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if t.len() < 16 {
                return Err(AuthError::Short {
                    path: p,
                    line: i + 1,
                });
            }
            let d = digest(t.as_bytes());
            // The tenant's name: a prefix of the digest, stable across restarts and
            // edits of the file, and useless for guessing the token.
            let name = format!(
                "t-{}",
                d[..6]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            );
            tokens.push((d, name));
        }
        if tokens.is_empty() {
            return Err(AuthError::Empty { path: p });
        }
        Ok(Auth { tokens })
    }

    /// The tenants of the tokens (each once, sorted; empty without tokens).
    pub fn tenants(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tokens.iter().map(|(_, t)| t.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Whether callers must send a token.
    pub fn required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The caller's tenant, from the header `authorization: Bearer TOKEN`.
    pub fn tenant(&self, md: &tonic::codegen::http::HeaderMap) -> Result<String, Status> {
        if self.tokens.is_empty() {
            return Ok(LOCAL_TENANT.to_string());
        }
        let header = md
            .get("authorization")
            .ok_or_else(|| {
                Status::unauthenticated(
                    "missing token: send `authorization: Bearer TOKEN` (STOCKADE_TOKEN)",
                )
            })?
            .as_bytes();
        let token = header
            .strip_prefix(b"Bearer ")
            .ok_or_else(|| Status::unauthenticated("authorization header is not `Bearer TOKEN`"))?;
        self.tenant_of_token(token)
            .ok_or_else(|| Status::unauthenticated("token refused"))
    }

    /// The tenant of a token (`None`: not one of the daemon's tokens, or the daemon
    /// has none). For front ends that carry the token in their own header.
    pub fn tenant_of_token(&self, token: &[u8]) -> Option<String> {
        let d = digest(token);
        // Every token is compared, so the position of a match does not show either.
        let mut found = None;
        for (known, name) in &self.tokens {
            if bool::from(known.ct_eq(&d)) {
                found = Some(name);
            }
        }
        found.cloned()
    }

    /// The tenant of a caller on the unix socket whose uid is `uid` (`SO_PEERCRED`;
    /// `None` if the kernel did not tell) when the daemon runs as `own_uid`: the
    /// token's tenant when it sends one; without one, root and the daemon's own user
    /// are who they were before (see [`Auth::tenant`]), and any other user is the
    /// tenant `uid:N` (`--socket-group` lets such users in).
    pub fn tenant_on_socket(
        &self,
        md: &tonic::codegen::http::HeaderMap,
        uid: Option<u32>,
        own_uid: u32,
    ) -> Result<String, Status> {
        if self.required() && md.contains_key("authorization") {
            return self.tenant(md);
        }
        match uid {
            Some(u) if u == 0 || u == own_uid => self.tenant(md),
            Some(u) => Ok(format!("uid:{u}")),
            None => Err(Status::unauthenticated(
                "the daemon cannot tell the caller's uid on its unix socket (SO_PEERCRED \
                 failed); send a token",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(h: Option<&str>) -> tonic::codegen::http::HeaderMap {
        let mut m = tonic::codegen::http::HeaderMap::new();
        if let Some(h) = h {
            m.insert("authorization", h.parse().unwrap());
        }
        m
    }

    #[test]
    fn tokens_map_to_distinct_tenants_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(
            &f,
            "# tenants\nalpha-token-0123456789\n\n  beta-token-0123456789  \n",
        )
        .unwrap();
        let a = Auth::from_file(&f).unwrap();
        assert!(a.required());
        let ta = a
            .tenant(&md(Some("Bearer alpha-token-0123456789")))
            .unwrap();
        let tb = a.tenant(&md(Some("Bearer beta-token-0123456789"))).unwrap();
        assert_ne!(ta, tb);
        assert!(ta.starts_with("t-") && ta.len() == 14, "{ta}");
        for bad in [
            None,
            Some("Bearer wrong-token-0123456789"),
            Some("Bearer "),
            Some("alpha-token-0123456789"),
        ] {
            let s = a.tenant(&md(bad)).unwrap_err();
            assert_eq!(s.code(), tonic::Code::Unauthenticated, "{bad:?}");
        }
        assert_eq!(
            Auth::none().tenant(&md(None)).unwrap(),
            LOCAL_TENANT,
            "no token file: one local tenant"
        );
    }

    #[test]
    fn on_the_socket_each_other_uid_is_a_tenant_and_a_token_wins() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "alpha-token-0123456789\n").unwrap();
        let with = Auth::from_file(&f).unwrap();
        let none = Auth::none();
        let token = md(Some("Bearer alpha-token-0123456789"));
        let ta = with.tenant(&token).unwrap();
        // Root and the daemon's own user: as before (local, or a token required).
        for own in [0, 1234] {
            for uid in [0, own] {
                let t = none.tenant_on_socket(&md(None), Some(uid), own).unwrap();
                assert_eq!(t, LOCAL_TENANT);
                let e = with.tenant_on_socket(&md(None), Some(uid), own);
                assert_eq!(e.unwrap_err().code(), tonic::Code::Unauthenticated);
            }
        }
        // Any other uid is its own tenant, with or without a token file.
        for a in [&none, &with] {
            assert_eq!(
                a.tenant_on_socket(&md(None), Some(1000), 0).unwrap(),
                "uid:1000"
            );
            assert_eq!(
                a.tenant_on_socket(&md(None), Some(1001), 0).unwrap(),
                "uid:1001"
            );
            let e = a.tenant_on_socket(&md(None), None, 0).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
        }
        // A token is its tenant whoever sends it; a wrong one is refused.
        assert_eq!(with.tenant_on_socket(&token, Some(1000), 0).unwrap(), ta);
        assert_eq!(with.tenant_on_socket(&token, Some(0), 0).unwrap(), ta);
        let bad = md(Some("Bearer wrong-token-0123456789"));
        let e = with.tenant_on_socket(&bad, Some(1000), 0).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn bad_token_files_are_refused_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "# nothing\n").unwrap();
        assert!(
            Auth::from_file(&f)
                .unwrap_err()
                .to_string()
                .contains("has no tokens")
        );
        std::fs::write(&f, "short\n").unwrap();
        assert!(
            Auth::from_file(&f)
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
        let e = Auth::from_file(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("cannot read token file"));
    }
}
