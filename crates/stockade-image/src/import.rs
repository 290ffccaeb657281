//! Import of `docker save` archives and OCI image layouts (a directory, or a tar of
//! one, optionally gzip-compressed).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::oci::{self, Descriptor, Index, Manifest};
use crate::reference::Reference;
use crate::store::{MAX_DOCUMENT_BYTES, Store};

/// One image an import added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The references now pointing at it (normalized).
    pub references: Vec<String>,
    /// Its manifest digest.
    pub digest: Digest,
}

/// The archive's own top-level documents an import reads.
const DOCUMENTS: [&str; 3] = ["index.json", "manifest.json", "oci-layout"];

/// Imports every image of an archive or layout at `path`. With `tag`, the (single)
/// image is also tagged with it; an archive with several images and a tag is refused.
pub fn import(store: &Store, path: &Path, tag: Option<&str>) -> Result<Vec<Imported>> {
    let tag = tag.map(Reference::parse).transpose()?;
    let _lock = store.lock(false)?;
    let mut imported = if path.is_dir() {
        import_layout_dir(store, path)?
    } else {
        import_archive(store, path)?
    };
    if let Some(t) = tag {
        if imported.len() != 1 {
            return Err(Error::InvalidImage {
                what: format!("archive {}", path.display()),
                reason: format!(
                    "it holds {} images; a tag names exactly one",
                    imported.len()
                ),
            });
        }
        store.tag(&t, &imported[0].digest)?;
        imported[0].references.push(t.to_string());
    }
    Ok(imported)
}

fn import_layout_dir(store: &Store, dir: &Path) -> Result<Vec<Imported>> {
    let index_path = dir.join("index.json");
    let data = std::fs::read(&index_path).map_err(Error::io("read", &index_path))?;
    let mut fetch = |d: &Descriptor| -> Result<()> {
        if store.has_blob(&d.digest) {
            return Ok(());
        }
        let p = dir.join("blobs/sha256").join(d.digest.hex());
        let f = File::open(&p).map_err(Error::io("open", &p))?;
        store.put_blob(f, Some(&d.digest), Some(d.size))?;
        Ok(())
    };
    from_index(store, &data, &dir.display().to_string(), &mut fetch)
}

fn import_archive(store: &Store, path: &Path) -> Result<Vec<Imported>> {
    let what = format!("archive {}", path.display());
    let read_err = |source| Error::Archive {
        what: what.clone(),
        source,
    };
    let file = File::open(path).map_err(Error::io("open", path))?;
    let mut buffered = BufReader::new(file);
    let gzip = buffered
        .fill_buf()
        .map_err(read_err)?
        .starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    };
    let mut archive = tar::Archive::new(reader);
    let mut docs: HashMap<String, Vec<u8>> = HashMap::new();
    let mut files: HashMap<String, Digest> = HashMap::new();
    let mut links: HashMap<String, String> = HashMap::new();
    // A gzip-compressed archive may expand without bound: cap what it stores.
    let max_bytes = store.limits().max_bytes;
    let mut stored = 0u64;
    for entry in archive.entries().map_err(read_err)? {
        let mut entry = entry.map_err(read_err)?;
        let raw = entry.path_bytes().into_owned();
        let Ok(rel) = crate::unpack::safe_relative(&raw) else {
            return Err(Error::InvalidImage {
                what,
                reason: format!(
                    "entry {:?} escapes the archive",
                    String::from_utf8_lossy(&raw)
                ),
            });
        };
        let name = rel.to_string_lossy().into_owned();
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            // Older `docker save` links a layer shared by two images.
            tar::EntryType::Symlink | tar::EntryType::Link => {
                if let Some(t) = entry.link_name_bytes() {
                    links.insert(name, String::from_utf8_lossy(&t).into_owned());
                }
                continue;
            }
            _ => continue,
        }
        if DOCUMENTS.contains(&name.as_str()) {
            let mut data = Vec::new();
            (&mut entry)
                .take(MAX_DOCUMENT_BYTES + 1)
                .read_to_end(&mut data)
                .map_err(read_err)?;
            if data.len() as u64 > MAX_DOCUMENT_BYTES {
                return Err(Error::InvalidImage {
                    what,
                    reason: format!("{name} is larger than {MAX_DOCUMENT_BYTES} bytes"),
                });
            }
            docs.insert(name, data);
            continue;
        }
        // A blob named by its digest is verified against its name.
        let expected = name
            .strip_prefix("blobs/sha256/")
            .map(Digest::from_hex)
            .transpose()?;
        let size = entry.header().size().map_err(read_err)?;
        stored = stored.saturating_add(size);
        if stored > max_bytes {
            return Err(Error::LimitExceeded {
                layer: format!("archive {}", path.display()),
                what: "bytes",
                limit: max_bytes,
            });
        }
        let digest = store.put_blob(&mut entry, expected.as_ref(), Some(size))?;
        files.insert(name, digest);
    }
    if let Some(index) = docs.get("index.json") {
        let mut fetch = |d: &Descriptor| -> Result<()> {
            let p = store.blob_path(&d.digest);
            match std::fs::metadata(&p) {
                Ok(m) if m.len() == d.size => Ok(()),
                Ok(m) => Err(Error::SizeMismatch {
                    what: format!("blob {}", d.digest),
                    expected: d.size,
                    actual: m.len(),
                }),
                Err(_) => Err(Error::InvalidImage {
                    what: what.clone(),
                    reason: format!("blob {} is not in the archive", d.digest),
                }),
            }
        };
        from_index(store, index, &path.display().to_string(), &mut fetch)
    } else if let Some(manifest) = docs.get("manifest.json") {
        from_docker_manifest(store, manifest, &files, &links, &what)
    } else {
        Err(Error::InvalidImage {
            what,
            reason: "neither an OCI layout (index.json) nor a docker save archive (manifest.json)"
                .to_string(),
        })
    }
}

/// Walks an OCI index: each entry (an index is resolved to this platform) becomes an
/// image, named by its annotations when they give a full name.
fn from_index(
    store: &Store,
    index: &[u8],
    source: &str,
    fetch: &mut dyn FnMut(&Descriptor) -> Result<()>,
) -> Result<Vec<Imported>> {
    let index: Index = oci::parse(&format!("index.json of {source}"), index)?;
    if index.manifests.is_empty() {
        return Err(Error::InvalidImage {
            what: source.to_string(),
            reason: "index.json lists no manifests".to_string(),
        });
    }
    let mut out = Vec::new();
    for desc in &index.manifests {
        let digest = resolve_manifest(store, desc, source, fetch)?;
        let manifest: Manifest = oci::parse(
            &format!("manifest {digest}"),
            &store.read_document(&digest)?,
        )?;
        fetch(&manifest.config)?;
        for l in &manifest.layers {
            fetch(l)?;
        }
        let mut references = Vec::new();
        if let Some(name) = annotated_name(desc) {
            store.tag(&name, &digest)?;
            references.push(name.to_string());
        } else {
            store.keep(&digest)?;
        }
        out.push(Imported { references, digest });
    }
    Ok(out)
}

/// Fetches a manifest; an index (multi-platform) is resolved to this platform's one.
fn resolve_manifest(
    store: &Store,
    desc: &Descriptor,
    source: &str,
    fetch: &mut dyn FnMut(&Descriptor) -> Result<()>,
) -> Result<Digest> {
    fetch(desc)?;
    let data = store.read_document(&desc.digest)?;
    if !oci::is_index(&desc.media_type, &data) {
        return Ok(desc.digest.clone());
    }
    let inner: Index = oci::parse(&format!("index {}", desc.digest), &data)?;
    let platform = oci::host_platform();
    let chosen =
        oci::select_platform(&inner, &platform).ok_or_else(|| Error::NoMatchingPlatform {
            reference: format!("{source} ({})", desc.digest),
            platform: format!("{}/{}", platform.os, platform.architecture),
        })?;
    fetch(chosen)?;
    Ok(chosen.digest.clone())
}

/// The full image name an index entry carries: containerd's annotation, or the OCI
/// ref name when it is more than a bare tag.
fn annotated_name(desc: &Descriptor) -> Option<Reference> {
    if let Some(n) = desc.annotations.get(oci::ANNOTATION_IMAGE_NAME) {
        return Reference::parse(n).ok();
    }
    let n = desc.annotations.get(oci::ANNOTATION_REF_NAME)?;
    if n.contains(':') || n.contains('/') {
        Reference::parse(n).ok()
    } else {
        None
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerSaveEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// A `docker save` archive: its manifest.json lists config and layer files by path;
/// an OCI manifest is written for each image.
fn from_docker_manifest(
    store: &Store,
    data: &[u8],
    files: &HashMap<String, Digest>,
    links: &HashMap<String, String>,
    what: &str,
) -> Result<Vec<Imported>> {
    let entries: Vec<DockerSaveEntry> = oci::parse(&format!("manifest.json of {what}"), data)?;
    let find = |name: &str| -> Result<Descriptor> {
        let mut name = PathBuf::from(name);
        // Follow in-archive symlinks (relative to the link's directory), a few hops.
        for _ in 0..8 {
            let key = name.to_string_lossy().into_owned();
            if let Some(d) = files.get(&key) {
                let size = std::fs::metadata(store.blob_path(d))
                    .map_err(Error::io("inspect", store.blob_path(d)))?
                    .len();
                return Ok(Descriptor {
                    media_type: String::new(),
                    digest: d.clone(),
                    size,
                    platform: None,
                    annotations: Default::default(),
                });
            }
            let Some(target) = links.get(&key) else { break };
            let joined = name.parent().unwrap_or(Path::new("")).join(target);
            name = normalize(&joined).ok_or_else(|| Error::InvalidImage {
                what: what.to_string(),
                reason: format!("link {key} escapes the archive"),
            })?;
        }
        Err(Error::InvalidImage {
            what: what.to_string(),
            reason: format!("{} is not in the archive", name.display()),
        })
    };
    let mut out = Vec::new();
    for e in entries {
        let mut config = find(&e.config)?;
        config.media_type = oci::MEDIA_CONFIG.to_string();
        let mut layers = Vec::new();
        for l in &e.layers {
            let mut d = find(l)?;
            d.media_type = layer_media_type(store, &d.digest).to_string();
            layers.push(d);
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(oci::MEDIA_MANIFEST.to_string()),
            config,
            layers,
        };
        let json = serde_json::to_vec(&manifest).expect("manifest serializes");
        let digest = store.put_blob_bytes(&json, None)?;
        let mut references = Vec::new();
        for t in e.repo_tags.unwrap_or_default() {
            let r = Reference::parse(&t)?;
            store.tag(&r, &digest)?;
            references.push(r.to_string());
        }
        if references.is_empty() {
            store.keep(&digest)?;
        }
        out.push(Imported { references, digest });
    }
    Ok(out)
}

/// The layer media type matching a blob's compression (by its magic bytes).
pub(crate) fn layer_media_type(store: &Store, d: &Digest) -> &'static str {
    let mut head = [0u8; 4];
    let read = store.open_blob(d).and_then(|mut f| {
        f.read_exact(&mut head)
            .map_err(Error::io("read", store.blob_path(d)))
    });
    match read {
        Ok(()) if head.starts_with(&crate::store::GZIP_MAGIC) => oci::MEDIA_LAYER_GZIP,
        Ok(()) if head == crate::store::ZSTD_MAGIC => oci::MEDIA_LAYER_ZSTD,
        _ => oci::MEDIA_LAYER_TAR,
    }
}

/// `a/../b` -> `b`; `None` when it climbs out.
fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::Normal(x) => out.push(x),
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some(out)
}
