//! Builders for layers, images, OCI layouts and docker save archives, and `require`.

use std::io::Write;
use std::path::Path;

use stockade_image::{Digest, Image, Reference, Store};

pub use stockade_testkit::require;

/// A layer tar built entry by entry, names written raw (so `..` and absolute paths,
/// which `tar::Builder` refuses, can be planted).
pub struct Layer(tar::Builder<Vec<u8>>);

impl Layer {
    pub fn new() -> Layer {
        Layer(tar::Builder::new(Vec::new()))
    }

    fn raw(
        mut self,
        kind: tar::EntryType,
        name: &str,
        link: &str,
        data: &[u8],
        mode: u32,
    ) -> Layer {
        let mut h = tar::Header::new_old();
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        h.set_cksum();
        self.0.append(&h, data).unwrap();
        self
    }

    pub fn file(self, name: &str, data: &[u8]) -> Layer {
        self.raw(tar::EntryType::Regular, name, "", data, 0o644)
    }
    pub fn file_mode(self, name: &str, data: &[u8], mode: u32) -> Layer {
        self.raw(tar::EntryType::Regular, name, "", data, mode)
    }
    pub fn dir(self, name: &str) -> Layer {
        self.raw(tar::EntryType::Directory, name, "", b"", 0o755)
    }
    pub fn dir_mode(self, name: &str, mode: u32) -> Layer {
        self.raw(tar::EntryType::Directory, name, "", b"", mode)
    }
    pub fn symlink(self, name: &str, target: &str) -> Layer {
        self.raw(tar::EntryType::Symlink, name, target, b"", 0o777)
    }
    pub fn hardlink(self, name: &str, target: &str) -> Layer {
        self.raw(tar::EntryType::Link, name, target, b"", 0o644)
    }
    pub fn special(self, kind: tar::EntryType, name: &str) -> Layer {
        self.raw(kind, name, "", b"", 0o644)
    }
    pub fn into_tar(self) -> Vec<u8> {
        self.0.into_inner().unwrap()
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The blobs of an image: (digest, bytes) of config, layers and manifest.
pub struct Built {
    pub manifest: (Digest, Vec<u8>),
    pub config: (Digest, Vec<u8>),
    pub layers: Vec<(Digest, Vec<u8>)>,
}

/// An image made of these layer tars (gzipped when asked), with a config naming
/// their diff_ids and a run config.
pub fn build(layers: &[Vec<u8>], gz: bool) -> Built {
    build_compressed(
        layers,
        if gz {
            Compression::Gzip
        } else {
            Compression::None
        },
    )
}

/// How the layer blobs of a built image are compressed.
#[derive(Clone, Copy)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Like [`build`], with any compression.
pub fn build_compressed(layers: &[Vec<u8>], compression: Compression) -> Built {
    let diff_ids: Vec<String> = layers.iter().map(|l| Digest::of(l).to_string()).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], "WorkingDir": "/srv",
                   "User": "1000", "Cmd": ["python3"], "Entrypoint": ["/bin/sh", "-c"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    let blobs: Vec<Vec<u8>> = layers
        .iter()
        .map(|l| match compression {
            Compression::None => l.clone(),
            Compression::Gzip => gzip(l),
            Compression::Zstd => ruzstd::encoding::compress_to_vec(
                &l[..],
                ruzstd::encoding::CompressionLevel::Fastest,
            ),
        })
        .collect();
    let layer_media = match compression {
        Compression::None => "application/vnd.oci.image.layer.v1.tar",
        Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
        Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
    };
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": Digest::of(&config).to_string(), "size": config.len()},
        "layers": blobs.iter().map(|b| serde_json::json!({
            "mediaType": layer_media, "digest": Digest::of(b).to_string(), "size": b.len()
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    Built {
        manifest: (Digest::of(&manifest), manifest),
        config: (Digest::of(&config), config),
        layers: blobs.into_iter().map(|b| (Digest::of(&b), b)).collect(),
    }
}

/// Puts a built image into the store, tags it `name` and returns it.
pub fn store_image(store: &Store, built: &Built, name: &str) -> Image {
    for (d, b) in built.layers.iter().chain([&built.config, &built.manifest]) {
        store.put_blob_bytes(b, Some(d)).unwrap();
    }
    store
        .tag(&Reference::parse(name).unwrap(), &built.manifest.0)
        .unwrap();
    store.image(name).unwrap()
}

/// Writes an OCI image layout for `built` into `dir`, the index entry annotated
/// with `ref_name`.
pub fn write_layout(dir: &Path, built: &Built, ref_name: &str) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    for (d, b) in built.layers.iter().chain([&built.config, &built.manifest]) {
        std::fs::write(blobs.join(d.hex()), b).unwrap();
    }
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": built.manifest.0.to_string(), "size": built.manifest.1.len(),
            "annotations": {"org.opencontainers.image.ref.name": ref_name}}],
    });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

/// Tars a directory (paths relative to it).
pub fn tar_dir(dir: &Path, out: &Path) {
    let mut b = tar::Builder::new(std::fs::File::create(out).unwrap());
    b.append_dir_all(".", dir).unwrap();
    b.finish().unwrap();
}

/// Lists a tree as sorted relative paths.
pub fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// A fresh store in a temp dir.
pub fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("images")).unwrap();
    (dir, store)
}
