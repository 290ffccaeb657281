//! How images in the store are named: `refs.json` maps references to manifest
//! digests and keeps the images that have no name (an import whose archive names
//! none), so every image in the store is listed and reachable by its digest.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::oci::{self, ImageConfig, Manifest};
use crate::reference::Reference;
use crate::store::{Image, Store};

/// Bare hex digits taken as a digest prefix (when no reference has that name): the
/// length of the short digest `image ls` shows, so a short name is not taken for one.
pub const MIN_BARE_PREFIX: usize = 12;

/// The prefix `sha256:` that makes a string a digest (or a digest prefix).
pub(crate) const SHA256: &str = "sha256:";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Refs {
    refs: BTreeMap<String, Digest>,
    /// Images kept without any reference.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    unnamed: BTreeSet<Digest>,
}

/// One image as [`Store::images`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// A reference naming it, or `None` for an image that has no name.
    pub reference: Option<String>,
    /// Its manifest digest.
    pub digest: Digest,
}

/// The hex digits of a digest prefix `s` (`sha256:` + 1 to 64 lowercase hex digits,
/// or bare hex digits, which need at least [`MIN_BARE_PREFIX`]).
pub(crate) fn digest_prefix(s: &str) -> Option<&str> {
    let (hex, min) = match s.strip_prefix(SHA256) {
        Some(h) => (h, 1),
        None => (s, MIN_BARE_PREFIX),
    };
    let ok = (min..=64).contains(&hex.len())
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then_some(hex)
}

impl Store {
    fn refs_path(&self) -> PathBuf {
        self.root().join("refs.json")
    }

    fn read_refs(&self) -> Result<Refs> {
        let path = self.refs_path();
        match fs::read(&path) {
            Ok(data) => oci::parse(&format!("reference index {}", path.display()), &data),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Refs::default()),
            Err(e) => Err(Error::io("read", &path)(e)),
        }
    }

    /// Read-modify-write of the reference index under its own lock.
    fn update_refs<T>(&self, f: impl FnOnce(&mut Refs) -> Result<T>) -> Result<T> {
        let lock_path = self.root().join("refs.lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(Error::io("open", &lock_path))?;
        lock.lock().map_err(Error::io("lock", &lock_path))?;
        let mut refs = self.read_refs()?;
        let out = f(&mut refs)?;
        let path = self.refs_path();
        let mut tmp = tempfile::NamedTempFile::new_in(self.root().join("tmp"))
            .map_err(Error::io("create a file for", &path))?;
        let data = serde_json::to_vec_pretty(&refs).expect("refs serialize");
        tmp.write_all(&data).map_err(Error::io("write", &path))?;
        tmp.persist(&path)
            .map_err(|e| Error::io("rename into", &path)(e.error))?;
        Ok(out)
    }

    /// Points `reference` at a manifest that is in the store.
    pub fn tag(&self, reference: &Reference, manifest: &Digest) -> Result<()> {
        if !self.has_blob(manifest) {
            return Err(Error::BlobNotFound {
                digest: manifest.to_string(),
            });
        }
        let mut r = reference.clone();
        r.digest = None;
        self.update_refs(|refs| {
            refs.refs.insert(r.to_string(), manifest.clone());
            refs.unnamed.remove(manifest);
            Ok(())
        })
    }

    /// Keeps the image `manifest` in the store although no reference names it (an
    /// imported image its archive gives no name): listed by [`Store::images`], kept
    /// by gc, reached by its digest. Nothing changes when a reference names it.
    pub fn keep(&self, manifest: &Digest) -> Result<()> {
        if !self.has_blob(manifest) {
            return Err(Error::BlobNotFound {
                digest: manifest.to_string(),
            });
        }
        self.update_refs(|refs| {
            if !refs.refs.values().any(|d| d == manifest) {
                refs.unnamed.insert(manifest.clone());
            }
            Ok(())
        })
    }

    /// Every reference and the manifest it points at (images without a name are not
    /// here; see [`Store::images`]).
    pub fn list(&self) -> Result<BTreeMap<String, Digest>> {
        Ok(self.read_refs()?.refs)
    }

    /// Every image in the store: each reference with its manifest, then each image
    /// that has no name.
    pub fn images(&self) -> Result<Vec<Listed>> {
        let refs = self.read_refs()?;
        let named = refs.refs.into_iter().map(|(r, digest)| Listed {
            reference: Some(r),
            digest,
        });
        let unnamed = refs.unnamed.into_iter().map(|digest| Listed {
            reference: None,
            digest,
        });
        Ok(named.chain(unnamed).collect())
    }

    /// The one image whose manifest digest starts with `hex`: `Ok(None)` when none
    /// does, an error listing them when several do.
    fn by_prefix(&self, reference: &str, hex: &str) -> Result<Option<Digest>> {
        let all: BTreeSet<Digest> = self.images()?.into_iter().map(|l| l.digest).collect();
        let found: Vec<&Digest> = all.iter().filter(|d| d.hex().starts_with(hex)).collect();
        match found.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((*one).clone())),
            many => Err(Error::InvalidReference {
                reference: reference.to_string(),
                reason: format!(
                    "the digest prefix matches {} images ({}); give more of the digest",
                    many.len(),
                    many.iter()
                        .map(std::string::ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// Resolves a reference (`python:3.12`, `name@sha256:...`), a manifest digest
    /// (`sha256:<64 hex>`) or a unique digest prefix of an image in the store
    /// (`sha256:` and some hex digits, or at least [`MIN_BARE_PREFIX`] hex digits
    /// alone when no reference has that name) to its manifest digest. A prefix that
    /// matches several images is refused, naming them.
    pub fn resolve(&self, reference: &str) -> Result<Digest> {
        let not_found = || Error::ImageNotFound {
            reference: reference.to_string(),
        };
        if let Ok(d) = Digest::parse(reference) {
            return if self.has_blob(&d) {
                Ok(d)
            } else {
                Err(not_found())
            };
        }
        let prefix = digest_prefix(reference);
        if reference.starts_with(SHA256) {
            let Some(hex) = prefix else {
                return Err(Error::InvalidDigest {
                    digest: reference.to_string(),
                });
            };
            return self.by_prefix(reference, hex)?.ok_or_else(not_found);
        }
        let r = Reference::parse(reference)?;
        if let Some(d) = &r.digest {
            return if self.has_blob(d) {
                Ok(d.clone())
            } else {
                Err(not_found())
            };
        }
        if let Some(d) = self.read_refs()?.refs.get(&r.to_string()) {
            return Ok(d.clone());
        }
        match prefix {
            Some(hex) => self.by_prefix(reference, hex)?.ok_or_else(not_found),
            None => Err(not_found()),
        }
    }

    /// The image `reference` names (see [`Store::resolve`]).
    pub fn image(&self, reference: &str) -> Result<Image> {
        self.image_by_digest(&self.resolve(reference)?)
    }

    /// The image with this manifest digest.
    pub fn image_by_digest(&self, digest: &Digest) -> Result<Image> {
        let data = self.read_document(digest)?;
        let manifest: Manifest = oci::parse(&format!("manifest {digest}"), &data)?;
        let config_digest = manifest.config.digest.clone();
        let config: ImageConfig = oci::parse(
            &format!("image config {config_digest}"),
            &self.read_document(&config_digest)?,
        )?;
        Ok(Image {
            digest: digest.clone(),
            manifest,
            config_digest,
            config,
        })
    }

    /// Removes a reference, or an image by its digest or a unique digest prefix (with
    /// every reference to it), and everything no other image needs. Returns the
    /// manifest digest. The last name of an image a sandbox uses is refused.
    pub fn remove(&self, reference: &str) -> Result<Digest> {
        let key = Reference::parse(reference).map(|r| r.to_string()).ok();
        let named = key
            .as_ref()
            .is_some_and(|k| self.read_refs().is_ok_and(|r| r.refs.contains_key(k)));
        // Anything else is an image by its digest (or prefix): every name of it goes.
        let by_digest = if named {
            None
        } else {
            Some(self.resolve(reference)?)
        };
        let in_use = || Error::InUse {
            reference: reference.to_string(),
        };
        let digest = self.update_refs(|refs| {
            let d = match &by_digest {
                None => key
                    .as_ref()
                    .and_then(|k| refs.refs.remove(k))
                    .ok_or_else(|| Error::ImageNotFound {
                        reference: reference.to_string(),
                    })?,
                Some(d) => {
                    let before = refs.refs.len();
                    refs.refs.retain(|_, v| v != d);
                    if !refs.unnamed.remove(d) && refs.refs.len() == before {
                        return Err(Error::ImageNotFound {
                            reference: reference.to_string(),
                        });
                    }
                    d.clone()
                }
            };
            let still_kept = refs.refs.values().any(|v| *v == d) || refs.unnamed.contains(&d);
            // The last reference of an image a running sandbox uses stays.
            if !still_kept && self.in_use_after_teardowns(&d) {
                return Err(in_use());
            }
            Ok(d)
        })?;
        self.gc()?;
        Ok(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_prefixes() {
        assert_eq!(digest_prefix("sha256:ab"), Some("ab"));
        assert_eq!(digest_prefix("0123456789ab"), Some("0123456789ab"));
        // Short bare hex is a name (`cafe`), not a prefix.
        assert_eq!(digest_prefix("cafe"), None);
        assert_eq!(digest_prefix("sha256:"), None);
        assert_eq!(digest_prefix("sha256:AB"), None);
        assert_eq!(digest_prefix("python"), None);
    }
}
