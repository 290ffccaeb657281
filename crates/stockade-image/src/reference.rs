//! Image references as Docker users write them: `python:3.12`, `ghcr.io/o/r@sha256:...`.

use std::fmt;

use crate::digest::Digest;
use crate::error::{Error, Result};

/// The registry of references that name none.
pub const DEFAULT_REGISTRY: &str = "docker.io";
/// The tag of references that name neither a tag nor a digest.
pub const DEFAULT_TAG: &str = "latest";

/// A parsed, normalized image reference: `registry/repository[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reference {
    /// `docker.io`, `127.0.0.1:5000`, `ghcr.io`...
    pub registry: String,
    /// `library/python`, `org/repo`...
    pub repository: String,
    /// The tag; `latest` when the reference names neither tag nor digest.
    pub tag: Option<String>,
    /// The manifest digest, when pinned.
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference. A name without a registry is on Docker Hub (`python` is
    /// `docker.io/library/python:latest`); the first component is a registry when it
    /// has a `.` or a `:` or is `localhost`.
    pub fn parse(s: &str) -> Result<Reference> {
        let bad = |reason: &str| Error::InvalidReference {
            reference: s.to_string(),
            reason: reason.to_string(),
        };
        if s.is_empty() || s.len() > 1024 {
            return Err(bad("empty or longer than 1024 bytes"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (r, Some(Digest::parse(d)?)),
            None => (s, None),
        };
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag {
            let ok = !tag.is_empty()
                && tag.len() <= 128
                && !tag.starts_with(['.', '-'])
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if !ok {
                return Err(bad("invalid tag"));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), path.to_string())
            }
            _ if name.contains('/') => (DEFAULT_REGISTRY.to_string(), name.to_string()),
            _ => (DEFAULT_REGISTRY.to_string(), format!("library/{name}")),
        };
        if registry
            .bytes()
            .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':')))
        {
            return Err(bad("invalid registry"));
        }
        let repo_ok = repository.split('/').all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
                && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        });
        if !repo_ok {
            return Err(bad(
                "repository components must be lowercase letters, digits, '.', '_' or '-'",
            ));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some(DEFAULT_TAG.to_string()),
            (None, Some(_)) => None,
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository`, without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_docker() {
        let r = |s| Reference::parse(s).unwrap().to_string();
        assert_eq!(r("python"), "docker.io/library/python:latest");
        assert_eq!(r("python:3.12-slim"), "docker.io/library/python:3.12-slim");
        assert_eq!(r("org/app:1"), "docker.io/org/app:1");
        assert_eq!(r("127.0.0.1:5000/t/py:1"), "127.0.0.1:5000/t/py:1");
        assert_eq!(r("localhost/py"), "localhost/py:latest");
        let d = Digest::of(b"x");
        assert_eq!(r(&format!("ghcr.io/a/b@{d}")), format!("ghcr.io/a/b@{d}"));
    }

    #[test]
    fn refuses_garbage() {
        for s in [
            "",
            "Python",
            "a:",
            "a:-x",
            "a/../b",
            "a@sha256:12",
            "a b",
            "a//b",
        ] {
            assert!(Reference::parse(s).is_err(), "{s} accepted");
        }
    }
}
