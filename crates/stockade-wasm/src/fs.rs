//! File operations on a sandbox's files, from the host: write, read, edit, ls, glob,
//! grep, copy, mkdir, remove.
//!
//! A sandbox path is resolved the way the guest sees it: lexically against the
//! workdir (a `..` that climbs above `/` is refused), then to the preopened directory
//! with the longest matching prefix. Everything below that point goes through
//! `cap-std`, which opens each component relative to the preopen's directory handle
//! and refuses any `..` or symlink (absolute or relative) that would lead out of it,
//! so a link planted by sandboxed code can never make us touch a host path.

mod fileop;
mod path;
mod search;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stockade_core::{Error, Result};
use stockade_spec::format_size;

use crate::WasmProvider;
use crate::sandbox::SandboxEntry;
use path::{dot_if_empty, entry_of, kind_of, normalize, resolve};
use search::walk;

pub(crate) use path::open_cwd;

/// Largest file [`WasmProvider::read_file`] returns whole (64 MiB); read bigger files
/// in ranges with [`WasmProvider::read_range`].
pub const MAX_READ_BYTES: u64 = 64 << 20;
/// Most entries a walk (glob, grep, recursive copy) visits.
const MAX_WALK_ENTRIES: usize = 100_000;

// The entry, kind and match types are the shared ones of the file API, so the
// wasm provider answers `Provider::file` with the same values as the agent.
pub use stockade_core::{FileEntry, FileKind, GrepMatch};

impl WasmProvider {
    async fn fs_op<T: Send + 'static>(
        &self,
        id: &str,
        op: impl FnOnce(&SandboxEntry) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let sb: Arc<SandboxEntry> = self.sandbox(id)?;
        tokio::task::spawn_blocking(move || op(&sb))
            .await
            .map_err(|e| Error::Internal(format!("file operation panicked: {e}")))?
    }

    /// Writes `bytes` to `path` in sandbox `id` (created or truncated; missing parent
    /// directories are made). Refused on read-only mounts and past the `/tmp` cap.
    pub async fn write_file(&self, id: &str, path: &str, bytes: &[u8]) -> Result<()> {
        let (path, bytes) = (path.to_string(), bytes.to_vec());
        self.fs_op(id, move |sb| {
            let r = resolve(sb, &path)?;
            r.writable()?;
            r.charge(sb, bytes.len() as u64, r.depth())?;
            let dir = r.dir()?;
            // Only missing parents are made: an existing one (even a link) is left for
            // the write to resolve, which refuses links that lead out.
            if let Some(parent) = r.rel.parent().filter(|p| !p.as_os_str().is_empty())
                && dir.symlink_metadata(parent).is_err()
            {
                dir.create_dir_all(parent).map_err(|e| {
                    // A component that is a link leading out shows up here as "exists";
                    // following it says why.
                    match dir.metadata(parent) {
                        Err(why) => r.err("create parents of", why),
                        Ok(_) => r.err("create parents of", e),
                    }
                })?;
            }
            dir.write(r.at(), &bytes).map_err(|e| r.err("write", e))
        })
        .await
    }

    /// Reads all of `path` in sandbox `id` (at most [`MAX_READ_BYTES`]).
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>> {
        let path = path.to_string();
        self.fs_op(id, move |sb| {
            let r = resolve(sb, &path)?;
            let dir = r.dir()?;
            let md = dir.metadata(r.at()).map_err(|e| r.err("read", e))?;
            if md.len() > MAX_READ_BYTES {
                return Err(Error::LimitExceeded {
                    what: format!("file {} ({})", r.guest, format_size(md.len())),
                    limit: format!(
                        "{} per read; read it in ranges",
                        format_size(MAX_READ_BYTES)
                    ),
                });
            }
            dir.read(r.at()).map_err(|e| r.err("read", e))
        })
        .await
    }

    /// Reads up to `limit` bytes (at most [`MAX_READ_BYTES`]) of `path` from `offset`.
    pub async fn read_range(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let path = path.to_string();
        self.fs_op(id, move |sb| {
            let r = resolve(sb, &path)?;
            let mut f = r.dir()?.open(r.at()).map_err(|e| r.err("read", e))?;
            f.seek(SeekFrom::Start(offset))
                .map_err(|e| r.err("seek in", e))?;
            let mut out = Vec::new();
            f.take(limit.min(MAX_READ_BYTES))
                .read_to_end(&mut out)
                .map_err(|e| r.err("read", e))?;
            Ok(out)
        })
        .await
    }

    /// Replaces `old` by `new` in the text file `path`; returns the number of
    /// replacements. Refused when `old` is absent, or occurs more than once and
    /// `replace_all` is false.
    pub async fn edit_file(
        &self,
        id: &str,
        path: &str,
        old: &str,
        new: &str,
        replace_all: bool,
    ) -> Result<usize> {
        let (path, old, new) = (path.to_string(), old.to_string(), new.to_string());
        self.fs_op(id, move |sb| {
            if old.is_empty() {
                return Err(Error::InvalidRequest("the text to replace is empty".into()));
            }
            let r = resolve(sb, &path)?;
            r.writable()?;
            let dir = r.dir()?;
            if dir.metadata(r.at()).map_err(|e| r.err("edit", e))?.len() > MAX_READ_BYTES {
                return Err(Error::LimitExceeded {
                    what: format!("file {}", r.guest),
                    limit: format_size(MAX_READ_BYTES),
                });
            }
            let text = dir.read_to_string(r.at()).map_err(|e| r.err("edit", e))?;
            let count = text.matches(old.as_str()).count();
            if count == 0 {
                return Err(Error::InvalidRequest(format!(
                    "the text to replace is not in {}",
                    r.guest
                )));
            }
            if count > 1 && !replace_all {
                return Err(Error::InvalidRequest(format!(
                    "the text to replace occurs {count} times in {}; make it unique or replace all",
                    r.guest
                )));
            }
            let edited = if replace_all {
                text.replace(old.as_str(), &new)
            } else {
                text.replacen(old.as_str(), &new, 1)
            };
            r.charge(sb, edited.len().saturating_sub(text.len()) as u64, 0)?;
            dir.write(r.at(), edited).map_err(|e| r.err("write", e))?;
            Ok(count)
        })
        .await
    }

    /// The entries of directory `path`, sorted by name (symlinks are listed, not
    /// followed). `/` lists the sandbox's top-level directories.
    pub async fn list_dir(&self, id: &str, path: &str) -> Result<Vec<FileEntry>> {
        let path = path.to_string();
        self.fs_op(id, move |sb| {
            let abs = normalize(&sb.workdir, &path);
            // Directories above the preopens (such as `/`) exist only as their names.
            if let Some(abs) = &abs
                && !sb.preopens.iter().any(|p| abs.starts_with(&p.guest))
            {
                let mut names: Vec<String> = sb
                    .preopens
                    .iter()
                    .filter_map(|p| {
                        Path::new(&p.guest)
                            .strip_prefix(abs)
                            .ok()
                            .and_then(|rest| rest.components().next())
                            .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    })
                    .collect();
                if !names.is_empty() {
                    names.sort();
                    names.dedup();
                    return Ok(names
                        .into_iter()
                        .map(|name| FileEntry {
                            name,
                            kind: FileKind::Dir,
                            size: 0,
                            mode: 0o755,
                            mtime: 0,
                            link_target: None,
                            xattrs: Default::default(),
                        })
                        .collect());
                }
            }
            let r = resolve(sb, &path)?;
            let dir = r.dir()?;
            let rd = dir.read_dir(r.at()).map_err(|e| r.err("list", e))?;
            let mut out = Vec::new();
            for entry in rd {
                let entry = entry.map_err(|e| r.err("list", e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let md = entry.metadata().map_err(|e| r.err("list", e))?;
                out.push(entry_of(name, &md));
                if out.len() > MAX_WALK_ENTRIES {
                    return Err(Error::LimitExceeded {
                        what: format!("entries in {}", r.guest),
                        limit: MAX_WALK_ENTRIES.to_string(),
                    });
                }
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
        .await
    }

    /// Copies `from` to `to` inside sandbox `id` (a file, or a directory with all it
    /// holds; symlinks are copied as links). Returns the bytes copied.
    pub async fn copy(&self, id: &str, from: &str, to: &str) -> Result<u64> {
        let (from, to) = (from.to_string(), to.to_string());
        self.fs_op(id, move |sb| {
            let src = resolve(sb, &from)?;
            let dst = resolve(sb, &to)?;
            dst.writable()?;
            let (sdir, ddir) = (src.dir()?, dst.dir()?);
            let md = sdir
                .symlink_metadata(src.at())
                .map_err(|e| src.err("copy", e))?;
            let items: Vec<(PathBuf, FileKind)> = if md.is_dir() {
                let mut v = vec![(PathBuf::new(), FileKind::Dir)];
                v.extend(walk(&sdir, &src.rel, &src.guest)?);
                v
            } else {
                vec![(PathBuf::new(), kind_of(md.file_type()))]
            };
            let mut copied = 0u64;
            for (rel, kind) in items {
                // The first item may make the destination's missing parents too.
                let entries = if rel.as_os_str().is_empty() {
                    dst.depth()
                } else {
                    1
                };
                // `join("")` would add a trailing slash, which names a directory.
                let (s, d) = if rel.as_os_str().is_empty() {
                    (src.rel.clone(), dst.rel.clone())
                } else {
                    (src.rel.join(&rel), dst.rel.join(&rel))
                };
                let s_at = dot_if_empty(&s);
                match kind {
                    FileKind::Dir => {
                        dst.charge(sb, 0, entries)?;
                        ddir.create_dir_all(&d).map_err(|e| dst.err("create", e))?;
                    }
                    FileKind::File => {
                        let len = sdir.metadata(s_at).map(|m| m.len()).unwrap_or(0);
                        dst.charge(sb, len, entries)?;
                        let mut from = sdir.open(s_at).map_err(|e| src.err("copy", e))?;
                        let mut to = ddir.create(&d).map_err(|e| dst.err("create", e))?;
                        copied +=
                            std::io::copy(&mut from, &mut to).map_err(|e| src.err("copy", e))?;
                    }
                    FileKind::Symlink => {
                        let target = sdir
                            .read_link_contents(s_at)
                            .map_err(|e| src.err("copy", e))?;
                        dst.charge(sb, 0, entries)?;
                        ddir.symlink_contents(&target, &d)
                            .map_err(|e| dst.err("create link", e))?;
                    }
                    FileKind::Other => {}
                }
            }
            Ok(copied)
        })
        .await
    }

    /// Makes directory `path` and its missing parents.
    pub async fn mkdir(&self, id: &str, path: &str) -> Result<()> {
        let path = path.to_string();
        self.fs_op(id, move |sb| {
            let r = resolve(sb, &path)?;
            r.writable()?;
            r.charge(sb, 0, r.depth())?;
            r.dir()?
                .create_dir_all(r.at())
                .map_err(|e| r.err("create", e))
        })
        .await
    }

    /// Removes the file, link or directory `path` (a directory with what it holds
    /// only when `recursive`). The sandbox's top-level directories cannot be removed.
    pub async fn remove(&self, id: &str, path: &str, recursive: bool) -> Result<()> {
        let path = path.to_string();
        self.fs_op(id, move |sb| {
            let r = resolve(sb, &path)?;
            r.writable()?;
            if r.rel.as_os_str().is_empty() {
                return Err(Error::PolicyDenied(format!(
                    "{} is a top-level directory of the sandbox",
                    r.guest
                )));
            }
            let dir = r.dir()?;
            let md = dir
                .symlink_metadata(&r.rel)
                .map_err(|e| r.err("remove", e))?;
            let done = if md.is_dir() && recursive {
                dir.remove_dir_all(&r.rel)
            } else if md.is_dir() {
                dir.remove_dir(&r.rel)
            } else {
                dir.remove_file(&r.rel)
            };
            done.map_err(|e| r.err("remove", e))
        })
        .await
    }
}
