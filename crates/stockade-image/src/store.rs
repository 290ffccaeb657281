//! The content-addressed image store under `$STOCKADE_HOME/images`:
//!
//! ```text
//! blobs/sha256/<hex>     manifests, configs, layers, verified on write
//! refs.json              reference -> manifest digest, and images without a name
//! lock                   shared while importing or pulling, exclusive for gc
//! layers/<hex>/          one layer unpacked (whiteouts kept as files), read-only
//! rootfs/<hex>/          all layers of a manifest flattened, read-only
//! tmp/                   blobs and trees being written; renamed into place
//! ```

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::digest::{Digest, HashingReader, HashingWriter};
use crate::error::{Error, Result};
use crate::oci::{ImageConfig, Manifest, RunConfig};
use crate::unpack::{Limits, Room, Unpacker, Whiteouts};

/// The default cap on the whole store, when the config names none (it is also held
/// to what it holds plus half the free disk).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 20 << 30;

/// The largest JSON document (manifest, index, config) the store reads into memory.
pub const MAX_DOCUMENT_BYTES: u64 = 4 << 20;
/// How long removing an image in use waits for its holders' teardowns.
pub const TEARDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// The image store. Cheap to clone paths around; every method is safe to call from
/// several processes at once.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    limits: Limits,
    /// The cap on the whole store; `None`: the default (see [`DEFAULT_MAX_TOTAL_BYTES`]).
    max_total_bytes: Option<u64>,
    /// What this handle (and its clones) may add, and has added.
    budget: Option<u64>,
    added: Arc<AtomicU64>,
}

/// An image in the store: its manifest and config.
#[derive(Debug, Clone)]
pub struct Image {
    /// The manifest digest: the image's identity.
    pub digest: Digest,
    /// The manifest.
    pub manifest: Manifest,
    /// The config blob's digest.
    pub config_digest: Digest,
    /// The config.
    pub config: ImageConfig,
}

impl Image {
    /// How the image says it should run (empty when the config has no `config`).
    pub fn run_config(&self) -> RunConfig {
        self.config.config.clone().unwrap_or_default()
    }

    /// The sum of the (compressed) layer sizes.
    pub fn size(&self) -> u64 {
        self.manifest.layers.iter().map(|l| l.size).sum()
    }
}

/// What `gc` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Blobs removed.
    pub blobs: usize,
    /// Unpacked layers and flattened root filesystems removed.
    pub trees: usize,
}

/// A held store lock (released on drop).
pub(crate) struct StoreLock(#[allow(dead_code)] File);

impl Store {
    /// Opens (creating it if needed) the store at `root`, with the caps of the config
    /// file's `[store]` table and the environment (see [`crate::StoreConfig`]).
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let path = crate::Config::default_path();
        let caps = crate::Config::load_from(&path)?
            .store
            .with_env()
            .map_err(|reason| Error::Config { path, reason })?;
        Store::open_with(root, &caps)
    }

    /// Opens the store at `root` with these caps (unset ones at their defaults).
    pub fn open_with(root: impl Into<PathBuf>, caps: &crate::StoreConfig) -> Result<Store> {
        let root = root.into();
        for d in ["blobs/sha256", "layers", "rootfs", "tmp", "inuse", "sizes"] {
            let p = root.join(d);
            fs::create_dir_all(&p).map_err(Error::io("create directory", &p))?;
        }
        let d = Limits::default();
        Ok(Store {
            root,
            limits: Limits {
                max_entries: caps.max_image_entries.unwrap_or(d.max_entries),
                max_bytes: caps.max_image_bytes.unwrap_or(d.max_bytes),
            },
            max_total_bytes: caps.max_total_bytes,
            budget: None,
            added: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Replaces the cap on the whole store (default: the smaller of
    /// [`DEFAULT_MAX_TOTAL_BYTES`] and what it holds plus half the free disk).
    pub fn with_max_store_bytes(mut self, bytes: u64) -> Store {
        self.max_total_bytes = Some(bytes);
        self
    }

    /// A handle that may add at most `bytes` to the store (blobs written and trees
    /// unpacked through it and its clones; a failed write counts nothing), for a
    /// caller with its own quota. [`Store::added_bytes`] says how much it added.
    pub fn with_budget(mut self, bytes: u64) -> Store {
        self.budget = Some(bytes);
        self.added = Arc::new(AtomicU64::new(0));
        self
    }

    /// Bytes this handle and its clones added to the store (blobs and unpacked trees),
    /// since it was opened or given a budget.
    pub fn added_bytes(&self) -> u64 {
        self.added.load(Ordering::Relaxed)
    }

    /// What the store takes on disk: the length of every file under it (sparse files
    /// count in full), symlinks and directories not counted. An unpacked tree counts
    /// what was measured when it was made (kept under `sizes/`), so this does not walk
    /// every image's files; a tree without that is walked.
    pub fn usage(&self) -> Result<u64> {
        let mut total = 0;
        for e in fs::read_dir(&self.root).map_err(Error::io("read", &self.root))? {
            let e = e.map_err(Error::io("read", &self.root))?;
            let name = e.file_name();
            match name.to_str() {
                Some(kind @ ("layers" | "rootfs")) => {
                    for t in fs::read_dir(e.path()).into_iter().flatten().flatten() {
                        let name = t.file_name().to_string_lossy().into_owned();
                        total += match self.tree_size(kind, &name) {
                            Some(n) => n,
                            None => self.measure(kind, &name, &t.path()),
                        };
                    }
                }
                _ if e.file_type().is_ok_and(|t| t.is_dir()) => total += tree_bytes(&e.path()),
                _ if e.file_type().is_ok_and(|t| t.is_file()) => {
                    total += e.metadata().map(|m| m.len()).unwrap_or(0);
                }
                _ => {}
            }
        }
        Ok(total)
    }

    /// Where the measured size of the tree `kind/name` is kept.
    fn size_path(&self, kind: &str, name: &str) -> PathBuf {
        self.root.join("sizes").join(format!("{kind}-{name}"))
    }

    /// Measures the tree `kind/name` at `at` and keeps its size (a tree in place is
    /// never changed; one made before sizes were kept is measured once).
    fn measure(&self, kind: &str, name: &str, at: &Path) -> u64 {
        let n = tree_bytes(at);
        let size = self.size_path(kind, name);
        let part = size.with_extension(format!("tmp{}", std::process::id()));
        if fs::write(&part, n.to_string()).is_ok() {
            let _ = fs::rename(&part, &size);
        }
        n
    }

    fn tree_size(&self, kind: &str, name: &str) -> Option<u64> {
        fs::read_to_string(self.size_path(kind, name))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The room left for `what`: under the store's total cap and this handle's
    /// budget, whichever is smaller, with the error passing it gives.
    pub(crate) fn room(&self, what: &str) -> Result<Room> {
        let used = self.usage()?;
        let total = match self.max_total_bytes {
            Some(n) => n,
            None => {
                let free = rustix::fs::statvfs(&self.root)
                    .map(|v| v.f_bavail.saturating_mul(v.f_frsize))
                    .map_err(|e| Error::io("statvfs", &self.root)(e.into()))?;
                DEFAULT_MAX_TOTAL_BYTES.min(used.saturating_add(free / 2))
            }
        };
        let store_left = total.saturating_sub(used);
        let what = what.to_string();
        let store_fix = "remove images (`stockade image rm`, `stockade image gc`) or raise \
                         `max_total_bytes` in the [store] table of the config file or \
                         STOCKADE_IMAGE_STORE_MAX_BYTES";
        let added = self.added_bytes();
        match self.budget {
            Some(b) if b.saturating_sub(added) < store_left => Ok(Room {
                left: b.saturating_sub(added),
                exceeded: Box::new(move || Error::QuotaExceeded {
                    what: what.clone(),
                    cap: "budget of this caller",
                    limit: b,
                    used: added,
                    fix: "remove images of this caller or ask for a larger image quota".into(),
                }),
            }),
            _ => Ok(Room {
                left: store_left,
                exceeded: Box::new(move || Error::QuotaExceeded {
                    what: what.clone(),
                    cap: "total cap (max_total_bytes)",
                    limit: total,
                    used,
                    fix: store_fix.into(),
                }),
            }),
        }
    }

    /// Opens the store at `$STOCKADE_HOME/images` (see [`crate::stockade_home`]).
    pub fn open_default() -> Result<Store> {
        Store::open(crate::stockade_home().join("images"))
    }

    /// Replaces the unpacking limits (default: [`Limits::default`]).
    pub fn with_limits(mut self, limits: Limits) -> Store {
        self.limits = limits;
        self
    }

    /// The unpacking limits; `max_bytes` also caps what one archive import stores.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a blob lives (whether or not it is there).
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    /// Whether a blob is stored.
    pub fn has_blob(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Stores what `reader` yields, returning its digest. With `expected`, content
    /// that hashes otherwise is an error and is not stored (nor is it when `size` is
    /// given and differs). The blob appears atomically (temp file + rename).
    pub fn put_blob(
        &self,
        reader: impl Read,
        expected: Option<&Digest>,
        size: Option<u64>,
    ) -> Result<Digest> {
        let tmp_dir = self.root.join("tmp");
        let tmp = tempfile::NamedTempFile::new_in(&tmp_dir)
            .map_err(Error::io("create a file in", &tmp_dir))?;
        let mut w = HashingWriter::new(io::BufWriter::new(tmp));
        let what = || match expected {
            Some(d) => format!("blob {d}"),
            None => "blob".to_string(),
        };
        let room = self.room(&what())?;
        if size.is_some_and(|n| n > room.left) {
            return Err((room.exceeded)());
        }
        // One byte more than announced (or than there is room for) is enough to know
        // it is too long.
        let cap = size.unwrap_or(u64::MAX).min(room.left);
        io::copy(&mut reader.take(cap.saturating_add(1)), &mut w).map_err(|source| {
            Error::Archive {
                what: what(),
                source,
            }
        })?;
        if w.count > room.left {
            return Err((room.exceeded)());
        }
        let actual = w.digest();
        if let Some(n) = size
            && w.count != n
        {
            return Err(Error::SizeMismatch {
                what: what(),
                expected: n,
                actual: w.count,
            });
        }
        if let Some(d) = expected
            && *d != actual
        {
            return Err(Error::DigestMismatch {
                what: what(),
                expected: d.to_string(),
                actual: actual.to_string(),
            });
        }
        let count = w.count;
        let tmp = w
            .inner
            .into_inner()
            .map_err(|e| Error::io("write", &tmp_dir)(e.into_error()))?;
        tmp.as_file()
            .sync_all()
            .map_err(Error::io("sync", tmp.path()))?;
        let dest = self.blob_path(&actual);
        let existed = dest.exists();
        tmp.persist(&dest)
            .map_err(|e| Error::io("rename into", &dest)(e.error))?;
        if !existed {
            self.added.fetch_add(count, Ordering::Relaxed);
        }
        Ok(actual)
    }

    /// Stores bytes in memory; see [`Store::put_blob`].
    pub fn put_blob_bytes(&self, data: &[u8], expected: Option<&Digest>) -> Result<Digest> {
        self.put_blob(data, expected, None)
    }

    /// Opens a stored blob.
    pub fn open_blob(&self, digest: &Digest) -> Result<File> {
        File::open(self.blob_path(digest)).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::BlobNotFound {
                digest: digest.to_string(),
            },
            _ => Error::io("open", self.blob_path(digest))(e),
        })
    }

    /// Reads a stored JSON document (at most [`MAX_DOCUMENT_BYTES`]).
    pub fn read_document(&self, digest: &Digest) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        self.open_blob(digest)?
            .take(MAX_DOCUMENT_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(Error::io("read", self.blob_path(digest)))?;
        if data.len() as u64 > MAX_DOCUMENT_BYTES {
            return Err(Error::InvalidImage {
                what: format!("document {digest}"),
                reason: format!("larger than {MAX_DOCUMENT_BYTES} bytes"),
            });
        }
        Ok(data)
    }

    /// Takes the store lock: shared for writers of new images, exclusive for gc.
    pub(crate) fn lock(&self, exclusive: bool) -> Result<StoreLock> {
        let path = self.root.join("lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io("open", &path))?;
        if exclusive { f.lock() } else { f.lock_shared() }.map_err(Error::io("lock", &path))?;
        Ok(StoreLock(f))
    }

    /// Marks `digest`'s root filesystem in use for as long as the returned file (or a
    /// process that opened the same path and took a shared lock on it) stays open:
    /// `remove` refuses to drop its last reference and `gc` keeps its tree. Take it
    /// before [`Store::rootfs`], so gc cannot remove the tree in between.
    pub fn hold(&self, digest: &Digest) -> Result<(PathBuf, File)> {
        let path = self.root.join("inuse").join(digest.hex());
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io("open", &path))?;
        f.lock_shared().map_err(Error::io("lock", &path))?;
        Ok((path, f))
    }

    /// Like [`Store::in_use`], but waits up to [`TEARDOWN_GRACE`] for the holders to let
    /// go: a sandbox whose destroy was answered holds its image until its teardown
    /// ends (the daemon answers a destroy before that), so `run` then `image rm`
    /// waits for it instead of being refused.
    pub fn in_use_after_teardowns(&self, digest: &Digest) -> bool {
        let until = std::time::Instant::now() + TEARDOWN_GRACE;
        while self.in_use(digest) {
            if std::time::Instant::now() > until {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    }

    /// Whether a sandbox holds `digest` (see [`Store::hold`]).
    pub fn in_use(&self, digest: &Digest) -> bool {
        let path = self.root.join("inuse").join(digest.hex());
        match File::open(&path) {
            Ok(f) => matches!(f.try_lock(), Err(fs::TryLockError::WouldBlock)),
            Err(_) => false,
        }
    }

    /// Removes blobs, unpacked layers and root filesystems no reference needs, and
    /// leftovers in `tmp/`. Waits for imports and pulls in progress.
    pub fn gc(&self) -> Result<GcReport> {
        let _lock = self.lock(true)?;
        let mut live: HashSet<String> = HashSet::new();
        for d in self.images()?.iter().map(|l| &l.digest) {
            live.insert(d.hex().to_string());
            if let Ok(img) = self.image_by_digest(d) {
                live.insert(img.config_digest.hex().to_string());
                for l in &img.manifest.layers {
                    live.insert(l.digest.hex().to_string());
                }
            }
        }
        let mut report = GcReport::default();
        for (dir, is_tree) in [("blobs/sha256", false), ("layers", true), ("rootfs", true)] {
            let dir = self.root.join(dir);
            for e in fs::read_dir(&dir).map_err(Error::io("read", &dir))? {
                let e = e.map_err(Error::io("read", &dir))?;
                let name = e.file_name();
                let name = name.to_string_lossy();
                if live.contains(name.as_ref()) {
                    continue;
                }
                // A tree a running sandbox uses stays until it is gone.
                if dir.ends_with("rootfs")
                    && Digest::parse(&format!("sha256:{name}")).is_ok_and(|d| self.in_use(&d))
                {
                    continue;
                }
                let p = e.path();
                if is_tree {
                    make_writable(&p);
                    fs::remove_dir_all(&p).map_err(Error::io("remove", &p))?;
                    let kind = if dir.ends_with("rootfs") {
                        "rootfs"
                    } else {
                        "layers"
                    };
                    let _ = fs::remove_file(self.size_path(kind, &name));
                    report.trees += 1;
                } else {
                    fs::remove_file(&p).map_err(Error::io("remove", &p))?;
                    report.blobs += 1;
                }
            }
        }
        let inuse = self.root.join("inuse");
        for e in fs::read_dir(&inuse)
            .map_err(Error::io("read", &inuse))?
            .flatten()
        {
            let name = e.file_name();
            let held = Digest::parse(&format!("sha256:{}", name.to_string_lossy()))
                .is_ok_and(|d| self.in_use(&d));
            if !held && !live.contains(name.to_string_lossy().as_ref()) {
                let _ = fs::remove_file(e.path());
            }
        }
        // Sizes of trees no longer there.
        for e in fs::read_dir(self.root.join("sizes"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name();
            let tree = name
                .to_str()
                .and_then(|n| n.split_once('-'))
                .map(|(kind, hex)| self.root.join(kind).join(hex));
            if !tree.is_some_and(|t| t.is_dir()) {
                let _ = fs::remove_file(e.path());
            }
        }
        let tmp = self.root.join("tmp");
        for e in fs::read_dir(&tmp)
            .map_err(Error::io("read", &tmp))?
            .flatten()
        {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&p);
                let _ = fs::remove_dir_all(&p);
            } else {
                let _ = fs::remove_file(&p);
            }
        }
        Ok(report)
    }

    /// One layer unpacked on its own under `layers/<hex>/` (whiteout markers kept as
    /// empty files), once per layer digest; shared read-only by every image using it.
    pub fn unpack_layer(&self, layer: &Digest) -> Result<PathBuf> {
        let dest = self.root.join("layers").join(layer.hex());
        if dest.is_dir() {
            return Ok(dest);
        }
        let room = self.room(&format!("layer {layer} unpacked"))?;
        self.build_tree(&dest, |root| {
            let mut u = Unpacker::new(root, self.limits).with_room(room);
            let reader = decompressed(self.open_blob(layer)?, layer)?;
            u.apply(&layer.to_string(), reader, Whiteouts::Keep)?;
            let n = u.bytes();
            u.finish()?;
            Ok(n)
        })
    }

    /// The image's layers flattened in order (whiteouts applied) under
    /// `rootfs/<manifest hex>/`, built once per manifest and shared read-only. Each
    /// layer's uncompressed content is checked against the config's `diff_ids`.
    pub fn rootfs(&self, image: &Image) -> Result<PathBuf> {
        let dest = self.root.join("rootfs").join(image.digest.hex());
        if dest.is_dir() {
            return Ok(dest);
        }
        let diff_ids = image
            .config
            .rootfs
            .as_ref()
            .map(|r| r.diff_ids.clone())
            .unwrap_or_default();
        if !diff_ids.is_empty() && diff_ids.len() != image.manifest.layers.len() {
            return Err(Error::InvalidImage {
                what: format!("image {}", image.digest),
                reason: format!(
                    "{} layers but {} diff_ids in the config",
                    image.manifest.layers.len(),
                    diff_ids.len()
                ),
            });
        }
        let room = self.room(&format!("image {} unpacked", image.digest))?;
        self.build_tree(&dest, |root| {
            let mut u = Unpacker::new(root, self.limits).with_room(room);
            for (i, layer) in image.manifest.layers.iter().enumerate() {
                let d = &layer.digest;
                let mut hashing = HashingReader::new(decompressed(self.open_blob(d)?, d)?);
                u.apply(&d.to_string(), &mut hashing, Whiteouts::Apply)?;
                let (actual, _) = hashing.finish().map_err(|source| Error::Archive {
                    what: format!("layer {d}"),
                    source,
                })?;
                if let Some(want) = diff_ids.get(i)
                    && *want != actual
                {
                    return Err(Error::DigestMismatch {
                        what: format!("uncompressed layer {d}"),
                        expected: want.to_string(),
                        actual: actual.to_string(),
                    });
                }
            }
            let n = u.bytes();
            u.finish()?;
            Ok(n)
        })
    }

    /// Builds a tree in a private temp dir and renames it to `dest`; a concurrent
    /// builder that finished first wins, and its tree is used. `fill` returns the
    /// bytes it wrote, counted as added once the tree is in place. A failed build
    /// leaves nothing; gc (which waits for the shared store lock held here) removes
    /// what a killed one left in `tmp/`.
    fn build_tree(&self, dest: &Path, fill: impl FnOnce(&Path) -> Result<u64>) -> Result<PathBuf> {
        let _lock = self.lock(false)?;
        let tmp_dir = self.root.join("tmp");
        let tmp = tempfile::Builder::new()
            .prefix("tree-")
            .tempdir_in(&tmp_dir)
            .map_err(Error::io("create a directory in", &tmp_dir))?;
        let result = fill(tmp.path());
        let tmp = tmp.keep();
        let written = match result {
            Ok(n) => n,
            Err(e) => {
                make_writable(&tmp);
                let _ = fs::remove_dir_all(&tmp);
                return Err(e);
            }
        };
        // Measured once here, so that the store's usage need not walk it again.
        if let (Some(kind), Some(name)) = (
            dest.parent()
                .and_then(Path::file_name)
                .and_then(|k| k.to_str()),
            dest.file_name().and_then(|n| n.to_str()),
        ) {
            self.measure(kind, name, &tmp);
        }
        match fs::rename(&tmp, dest) {
            Ok(()) => {
                self.added.fetch_add(written, Ordering::Relaxed);
                Ok(dest.to_path_buf())
            }
            Err(_) if dest.is_dir() => {
                make_writable(&tmp);
                let _ = fs::remove_dir_all(&tmp);
                Ok(dest.to_path_buf())
            }
            Err(e) => {
                make_writable(&tmp);
                let _ = fs::remove_dir_all(&tmp);
                Err(Error::io("rename into", dest)(e))
            }
        }
    }
}

/// The length of every file under `dir` (symlinks and directories not counted; an
/// unreadable directory counts nothing).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// A layer blob's tar stream: gzip and zstd are detected by their magic bytes,
/// whatever the media type says.
pub(crate) fn decompressed(file: File, digest: &Digest) -> Result<Box<dyn Read>> {
    let mut r = BufReader::new(file);
    let head = r.fill_buf().map_err(|source| Error::Archive {
        what: format!("layer {digest}"),
        source,
    })?;
    if head.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(r)))
    } else if head.starts_with(&ZSTD_MAGIC) {
        let z = ruzstd::decoding::StreamingDecoder::new(r).map_err(|e| Error::Archive {
            what: format!("layer {digest}"),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        })?;
        Ok(Box::new(z))
    } else {
        Ok(Box::new(r))
    }
}

/// The first bytes of a gzip stream.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The first bytes of a zstd frame.
pub(crate) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Restores owner write permission on every directory under `path`, so that a tree
/// with read-only directories can be removed by a non-root owner.
fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = fs::symlink_metadata(path) else {
        return;
    };
    if !m.is_dir() {
        return;
    }
    let _ = fs::set_permissions(
        path,
        fs::Permissions::from_mode(m.permissions().mode() | 0o700),
    );
    if let Ok(rd) = fs::read_dir(path) {
        for e in rd.flatten() {
            make_writable(&e.path());
        }
    }
}
