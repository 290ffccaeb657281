//! New images made of a base image and one layer on top (`Store::commit`).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::digest::{Digest, HashingReader};
use crate::error::{Error, Result};
use crate::oci::{self, Descriptor, ImageConfig, Manifest};
use crate::reference::Reference;
use crate::store::{GZIP_MAGIC, Image, Store, ZSTD_MAGIC, decompressed};

/// What a commit changes in its base image's configuration.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    /// Environment variables set (replacing a variable of the same name, kept in order:
    /// the base's first, then new ones in the order given).
    pub env: Vec<(String, String)>,
    /// The working directory, when set.
    pub workdir: Option<String>,
    /// The user, when set.
    pub user: Option<String>,
    /// The command (Cmd), when set; the entrypoint is then cleared.
    pub cmd: Option<Vec<String>>,
    /// What made the layer, for the config's history (`created_by`).
    pub created_by: String,
}

impl Store {
    /// A new image: `base`'s layers with `layer` (an uncompressed tar in the OCI layer
    /// format, whiteouts `.wh.NAME` for removals) on top, and `base`'s config changed by
    /// `commit` (rootfs.diff_ids gets the layer's digest, history an entry, `created`
    /// now). Fields of the base config this crate does not type (labels, ports...) are
    /// kept as they are.
    ///
    /// The layer file is read once, streamed into the store under the caps an import
    /// meets: the store's total cap and this handle's budget, and the per-image
    /// `max_bytes` for the base's layers and this one together. It is stored
    /// uncompressed (`MEDIA_LAYER_TAR`): its digest is then its diff_id, taken in the
    /// same read, and no CPU goes to compressing what stays on this host (it takes the
    /// tar's size on disk). A compressed tar is refused.
    ///
    /// The layer is unpacked once on its own (see [`Store::unpack_layer`]) before
    /// anything names the image, so a malformed or unsafe tar names what is wrong and
    /// leaves no name behind (only blobs gc removes). Whether its entries are safe over
    /// the base's own (a write through a base symlink) is checked when
    /// [`Store::rootfs`] flattens it, which refuses such a layer.
    ///
    /// The manifest is an OCI one (`MEDIA_MANIFEST`) with an OCI config
    /// (`MEDIA_CONFIG`). With `tag` the image is tagged with it (replacing what it
    /// named); otherwise it is kept without a name (see [`Store::keep`]).
    pub fn commit(
        &self,
        base: &Image,
        layer: &Path,
        commit: &Commit,
        tag: Option<&Reference>,
    ) -> Result<Image> {
        for (k, _) in &commit.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(Error::InvalidImage {
                    what: format!("commit on image {}", base.digest),
                    reason: format!("{k:?} is not an environment variable name"),
                });
            }
        }
        // Shared: gc waits until the image is named, and removes nothing it uses.
        let _lock = self.lock(false)?;
        for l in &base.manifest.layers {
            if !self.has_blob(&l.digest) {
                return Err(Error::BlobNotFound {
                    digest: l.digest.to_string(),
                });
            }
        }
        let what = format!("image config {}", base.config_digest);
        let mut config: Value = oci::parse(&what, &self.read_document(&base.config_digest)?)?;
        let Some(fields) = config.as_object_mut() else {
            return Err(Error::InvalidImage {
                what,
                reason: "not a JSON object".into(),
            });
        };
        let mut diff_ids = self.diff_ids(base)?;

        let digest = self.put_layer(base, layer)?;
        self.unpack_layer(&digest)
            .map_err(|e| name_layer(e, layer, Some(&digest)))?;
        let size = std::fs::metadata(self.blob_path(&digest))
            .map_err(Error::io("inspect", self.blob_path(&digest)))?
            .len();
        diff_ids.push(digest.clone());

        let env = merged_env(&base.run_config().env.unwrap_or_default(), &commit.env);
        edit_config(fields, commit, env, &diff_ids, &rfc3339(SystemTime::now()))
            .map_err(|reason| Error::InvalidImage { what, reason })?;
        let config_json = serde_json::to_vec(&config).expect("config serializes");
        let _: ImageConfig = oci::parse("committed image config", &config_json)?;
        let config_digest = self.put_blob_bytes(&config_json, None)?;

        let mut layers: Vec<Descriptor> = base
            .manifest
            .layers
            .iter()
            .map(|l| Descriptor {
                media_type: self.oci_layer_type(l).to_string(),
                ..l.clone()
            })
            .collect();
        layers.push(descriptor(oci::MEDIA_LAYER_TAR, digest, size));
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(oci::MEDIA_MANIFEST.to_string()),
            config: descriptor(oci::MEDIA_CONFIG, config_digest, config_json.len() as u64),
            layers,
        };
        let manifest_json = serde_json::to_vec(&manifest).expect("manifest serializes");
        let manifest_digest = self.put_blob_bytes(&manifest_json, None)?;
        // Read back as any reader would before it is named.
        let image = self.image_by_digest(&manifest_digest)?;
        match tag {
            Some(t) => self.tag(t, &manifest_digest)?,
            None => self.keep(&manifest_digest)?,
        }
        Ok(image)
    }

    /// The base's diff_ids, one per layer: hashed from its layers when its config
    /// lists none.
    fn diff_ids(&self, base: &Image) -> Result<Vec<Digest>> {
        let listed = base
            .config
            .rootfs
            .as_ref()
            .map(|r| r.diff_ids.clone())
            .unwrap_or_default();
        let layers = &base.manifest.layers;
        if listed.len() == layers.len() {
            return Ok(listed);
        }
        if !listed.is_empty() {
            return Err(Error::InvalidImage {
                what: format!("image {}", base.digest),
                reason: format!(
                    "{} layers but {} diff_ids in the config",
                    layers.len(),
                    listed.len()
                ),
            });
        }
        layers
            .iter()
            .map(|l| {
                let d = &l.digest;
                let hashing = HashingReader::new(decompressed(self.open_blob(d)?, d)?);
                let (diff_id, _) = hashing.finish().map_err(|source| Error::Archive {
                    what: format!("layer {d}"),
                    source,
                })?;
                Ok(diff_id)
            })
            .collect()
    }

    /// Streams the layer file into a blob, held to the per-image cap (with the base's
    /// layers) and the store's room.
    fn put_layer(&self, base: &Image, path: &Path) -> Result<Digest> {
        let file = File::open(path).map_err(Error::io("open", path))?;
        let meta = file.metadata().map_err(Error::io("inspect", path))?;
        let name = format!("layer {}", path.display());
        if meta.is_dir() {
            return Err(Error::InvalidImage {
                what: name,
                reason: "a directory, not a tar file".into(),
            });
        }
        let max = self.limits().max_bytes;
        let too_big = || Error::LimitExceeded {
            layer: format!("{} on image {}", path.display(), base.digest),
            what: "bytes",
            limit: max,
        };
        let left = max.saturating_sub(base.size());
        // A pipe's length is not known before it is read.
        let size = meta.is_file().then_some(meta.len());
        if size.is_some_and(|n| n > left) {
            return Err(too_big());
        }
        let mut reader = BufReader::new(file);
        let head = reader.fill_buf().map_err(|source| Error::Archive {
            what: name.clone(),
            source,
        })?;
        if head.starts_with(&GZIP_MAGIC) || head.starts_with(&ZSTD_MAGIC) {
            return Err(Error::Unsupported {
                what: name,
                kind: "compressed tar (a commit takes an uncompressed one)".into(),
            });
        }
        let mut capped = Capped {
            inner: reader,
            left,
            over: false,
        };
        let put = self.put_blob(&mut capped, None, size);
        if capped.over {
            return Err(too_big());
        }
        put.map_err(|e| name_layer(e, path, None))
    }

    /// An OCI layer media type for a base layer (a Docker one is named by its blob's
    /// compression).
    fn oci_layer_type<'a>(&self, l: &'a Descriptor) -> &'a str {
        if l.media_type.starts_with("application/vnd.oci.image.layer.") {
            &l.media_type
        } else {
            crate::import::layer_media_type(self, &l.digest)
        }
    }
}

/// Sets the commit's fields in a config object; the reason when a section the commit
/// edits is not an object (or, for history, an array).
fn edit_config(
    fields: &mut Map<String, Value>,
    commit: &Commit,
    env: Vec<String>,
    diff_ids: &[Digest],
    now: &str,
) -> std::result::Result<(), String> {
    fn section<'a>(
        fields: &'a mut Map<String, Value>,
        key: &str,
    ) -> std::result::Result<&'a mut Map<String, Value>, String> {
        let v = fields.entry(key).or_insert(Value::Null);
        if v.is_null() {
            *v = Value::Object(Map::new());
        }
        v.as_object_mut()
            .ok_or_else(|| format!("its {key:?} is not an object"))
    }
    let run = section(fields, "config")?;
    if !env.is_empty() {
        run.insert("Env".into(), json!(env));
    }
    if let Some(w) = &commit.workdir {
        run.insert("WorkingDir".into(), json!(w));
    }
    if let Some(u) = &commit.user {
        run.insert("User".into(), json!(u));
    }
    if let Some(c) = &commit.cmd {
        run.insert("Cmd".into(), json!(c));
        run.remove("Entrypoint");
    }
    let rootfs = section(fields, "rootfs")?;
    rootfs.insert("type".into(), json!("layers"));
    rootfs.insert("diff_ids".into(), json!(diff_ids));
    let history = fields.entry("history").or_insert(Value::Null);
    if history.is_null() {
        *history = Value::Array(Vec::new());
    }
    let Some(history) = history.as_array_mut() else {
        return Err("its \"history\" is not an array".into());
    };
    let mut entry = json!({ "created": now });
    if !commit.created_by.is_empty() {
        entry["created_by"] = json!(commit.created_by);
    }
    history.push(entry);
    fields.insert("created".into(), json!(now));
    Ok(())
}

/// `base` (`KEY=VALUE` entries) with `set` applied: a variable set replaces the first
/// of its name in place (later ones of that name go), others follow in order.
fn merged_env(base: &[String], set: &[(String, String)]) -> Vec<String> {
    let mut env = base.to_vec();
    for (k, v) in set {
        let entry = format!("{k}={v}");
        let mut placed = false;
        env.retain_mut(|e| {
            if e.split_once('=').map_or(e.as_str(), |(n, _)| n) != k.as_str() {
                return true;
            }
            if placed {
                return false;
            }
            placed = true;
            e.clone_from(&entry);
            true
        });
        if !placed {
            env.push(entry);
        }
    }
    env
}

fn descriptor(media_type: &str, digest: Digest, size: u64) -> Descriptor {
    Descriptor {
        media_type: media_type.to_string(),
        digest,
        size,
        platform: None,
        annotations: Default::default(),
    }
}

/// Names the layer file (and its blob) in an error from storing or unpacking it.
fn name_layer(e: Error, path: &Path, digest: Option<&Digest>) -> Error {
    let name = match digest {
        Some(d) => format!("{} ({d})", path.display()),
        None => path.display().to_string(),
    };
    match e {
        Error::UnsafeEntry { entry, reason, .. } => Error::UnsafeEntry {
            layer: name,
            entry,
            reason,
        },
        Error::LimitExceeded { what, limit, .. } => Error::LimitExceeded {
            layer: name,
            what,
            limit,
        },
        Error::Archive { source, .. } => Error::Archive {
            what: format!("layer {name}"),
            source,
        },
        Error::QuotaExceeded {
            cap,
            limit,
            used,
            fix,
            ..
        } => Error::QuotaExceeded {
            what: format!("layer {name}"),
            cap,
            limit,
            used,
            fix,
        },
        Error::SizeMismatch {
            expected, actual, ..
        } => Error::SizeMismatch {
            what: format!("layer {name} (changed while it was read)"),
            expected,
            actual,
        },
        e => e,
    }
}

/// A reader that fails once it yields more than `left` bytes, and says so in `over`.
struct Capped<R> {
    inner: R,
    left: u64,
    over: bool,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.over = true;
            return Err(io::Error::other("larger than the per-image cap"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// `t` as RFC 3339 in UTC, to the second (`2024-05-01T12:00:00Z`).
fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), from 0000-03-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        let at = |s| rfc3339(UNIX_EPOCH + std::time::Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn env_merges_in_place() {
        let base = ["PATH=/bin".to_string(), "A=1".into(), "A=2".into()];
        let set = [
            ("A".to_string(), "3".to_string()),
            ("NEW".into(), "x=y".into()),
            ("PATH".into(), "/usr/bin".into()),
            ("NEW".into(), "z".into()),
        ];
        assert_eq!(merged_env(&base, &set), ["PATH=/usr/bin", "A=3", "NEW=z"]);
    }
}
