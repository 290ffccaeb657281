//! File operations on a sandbox's files, from the host: write, read, edit, ls, glob,
//! grep, copy, mkdir, remove.
//!
//! A sandbox path is resolved the way the guest sees it: lexically against the
//! workdir (a `..` that climbs above `/` is refused), then to the preopened directory
//! with the longest matching prefix. Everything below that point goes through
//! `cap-std`, which opens each component relative to the preopen's directory handle
//! and refuses any `..` or symlink (absolute or relative) that would lead out of it,
//! so a link planted by sandboxed code can never make us touch a host path.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::{Dir, MetadataExt};
use stockade_core::{Error, Result};
use stockade_spec::format_size;

use crate::quota::TmpQuota;
use crate::{Preopen, SandboxEntry, TMP_DIR, WasmProvider};

/// Largest file [`WasmProvider::read_file`] returns whole (64 MiB); read bigger files
/// in ranges with [`WasmProvider::read_range`].
pub const MAX_READ_BYTES: u64 = 64 << 20;
/// Most entries a walk (glob, grep, recursive copy) visits.
const MAX_WALK_ENTRIES: usize = 100_000;
/// Files larger than this are not searched by grep.
const MAX_GREP_FILE_BYTES: u64 = 16 << 20;
/// Longest line grep returns (longer lines are cut, on a character boundary).
const MAX_GREP_LINE_CHARS: usize = 1000;

// The entry, kind and match types are the shared ones of the file API, so the
// wasm provider answers `Provider::file` with the same values as the agent.
pub use stockade_core::{FileEntry, FileKind, GrepMatch};

/// A sandbox path resolved to a preopen and a path relative to it.
struct Resolved {
    preopen: Preopen,
    rel: PathBuf,
    guest: String,
}

impl Resolved {
    fn dir(&self) -> Result<Dir> {
        Dir::open_ambient_dir(&self.preopen.host, cap_std::ambient_authority()).map_err(|e| {
            Error::io(
                format!(
                    "cannot open {} (backing {})",
                    self.preopen.host.display(),
                    self.preopen.guest
                ),
                e,
            )
        })
    }

    /// The path to give cap-std (`.` for the preopen itself).
    fn at(&self) -> &Path {
        if self.rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.rel
        }
    }

    fn writable(&self) -> Result<()> {
        if self.preopen.writable {
            Ok(())
        } else {
            Err(Error::PolicyDenied(format!(
                "{} is on the read-only mount {}",
                self.guest, self.preopen.guest
            )))
        }
    }

    /// Charges `bytes` of new data and up to `entries` new entries to the sandbox's
    /// `/tmp` quota when this is there.
    fn charge(&self, sb: &SandboxEntry, bytes: u64, entries: u64) -> Result<()> {
        if self.preopen.guest != TMP_DIR
            || sb.quota.reserve(
                TmpQuota::write_cost(bytes) + entries * TmpQuota::entry_cost(),
                entries,
            )
        {
            Ok(())
        } else {
            Err(Error::LimitExceeded {
                what: format!("/tmp of sandbox {}", sb.info.id),
                limit: format!(
                    "{} or {} entries",
                    format_size(sb.quota.cap()),
                    sb.quota.max_entries()
                ),
            })
        }
    }

    /// Most entries that making this path (and its missing parents) can add.
    fn depth(&self) -> u64 {
        self.rel.components().count().max(1) as u64
    }

    fn err(&self, op: &str, e: std::io::Error) -> Error {
        map_io(op, &self.guest, e)
    }
}

fn map_io(op: &str, guest: &str, e: std::io::Error) -> Error {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => Error::NotFound {
            kind: "file",
            id: guest.to_string(),
        },
        ErrorKind::PermissionDenied => Error::PolicyDenied(format!(
            "cannot {op} {guest}: {e} (it leads outside the sandbox or is not permitted)"
        )),
        _ => Error::io(format!("cannot {op} {guest}"), e),
    }
}

/// Lexically normalizes `path` (relative to `workdir`); `None` when `..` climbs above `/`.
pub(crate) fn normalize(workdir: &str, path: &str) -> Option<PathBuf> {
    let joined = if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        Path::new(workdir).join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn resolve(sb: &SandboxEntry, path: &str) -> Result<Resolved> {
    if path.contains('\0') {
        return Err(Error::InvalidRequest(format!("path {path:?} contains NUL")));
    }
    let abs = normalize(&sb.workdir, path).ok_or_else(|| {
        Error::PolicyDenied(format!("path {path} leaves the sandbox (.. above /)"))
    })?;
    let best = sb
        .preopens
        .iter()
        .filter(|p| abs.starts_with(&p.guest))
        .max_by_key(|p| p.guest.len())
        .ok_or_else(|| {
            let dirs: Vec<_> = sb.preopens.iter().map(|p| p.guest.as_str()).collect();
            Error::PolicyDenied(format!(
                "path {path} is outside the sandbox's directories ({})",
                dirs.join(", ")
            ))
        })?;
    let rel = abs
        .strip_prefix(&best.guest)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    Ok(Resolved {
        preopen: best.clone(),
        rel,
        guest: abs.to_string_lossy().into_owned(),
    })
}

/// The working directory `cwd` of an exec, opened without leaving the sandbox, as a
/// host path for `preopened_dir` and whether it is writable. For a directory below
/// a preopen the path is `/proc/self/fd/N` of a handle cap-std opened (so a link
/// planted by the guest cannot redirect it); the returned `Dir` keeps it open.
pub(crate) fn open_cwd(sb: &SandboxEntry, cwd: &str) -> Result<(PathBuf, bool, Option<Dir>)> {
    use std::os::fd::AsRawFd;
    let r = resolve(sb, cwd)?;
    if r.rel.as_os_str().is_empty() {
        return Ok((r.preopen.host.clone(), r.preopen.writable, None));
    }
    let dir = r.dir()?.open_dir(&r.rel).map_err(|e| r.err("enter", e))?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    Ok((path, r.preopen.writable, Some(dir)))
}

fn entry_of(name: String, md: &cap_std::fs::Metadata) -> FileEntry {
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    };
    let mtime = md
        .modified()
        .ok()
        .and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    FileEntry {
        name,
        kind,
        size: md.len(),
        mode: md.mode() & 0o7777,
        mtime,
    }
}

/// Every entry below `rel` in `dir` (not following symlinks), as paths relative to
/// `rel`, each with whether it is a regular file.
fn walk(dir: &Dir, rel: &Path, guest: &str) -> Result<Vec<(PathBuf, FileKind)>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(sub) = stack.pop() {
        let here = rel.join(&sub);
        let at = if here.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            here
        };
        let rd = dir.read_dir(&at).map_err(|e| map_io("list", guest, e))?;
        for entry in rd.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            let path = sub.join(entry.file_name());
            let kind = if ft.is_symlink() {
                FileKind::Symlink
            } else if ft.is_dir() {
                stack.push(path.clone());
                FileKind::Dir
            } else if ft.is_file() {
                FileKind::File
            } else {
                FileKind::Other
            };
            out.push((path, kind));
            if out.len() > MAX_WALK_ENTRIES {
                return Err(Error::LimitExceeded {
                    what: format!("entries under {guest}"),
                    limit: MAX_WALK_ENTRIES.to_string(),
                });
            }
        }
    }
    // Paths are unique, so ordering by path alone is total.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn join_guest(base: &str, rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        return base.to_string();
    }
    let b = base.trim_end_matches('/');
    format!("{b}/{}", rel.to_string_lossy())
}

fn glob_matcher(pattern: &str) -> Result<globset::GlobMatcher> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::InvalidRequest(format!("glob {pattern:?} is invalid: {e}")))
}

/// Splits an absolute glob into the literal directory it starts from and the rest.
fn split_glob(pattern: &str) -> (String, String) {
    let is_meta = |s: &str| s.contains(['*', '?', '[', '{']);
    let mut root = Vec::new();
    let mut parts = pattern.split('/').filter(|s| !s.is_empty()).peekable();
    while let Some(p) = parts.peek() {
        if is_meta(p) {
            break;
        }
        root.push(*p);
        parts.next();
    }
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() {
        // No wildcard: the last component is the pattern itself.
        let last = root.pop().unwrap_or("");
        return (format!("/{}", root.join("/")), last.to_string());
    }
    (format!("/{}", root.join("/")), rest.join("/"))
}

fn cut_line(line: &str) -> String {
    match line.char_indices().nth(MAX_GREP_LINE_CHARS) {
        Some((i, _)) => line[..i].to_string(),
        None => line.to_string(),
    }
}

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

    /// Sandbox paths matching `pattern`, sorted. A relative pattern is matched below
    /// `root` (default: the workdir); an absolute one below its literal leading
    /// directories. `*` stays within one directory, `**` crosses them.
    pub async fn glob(&self, id: &str, pattern: &str, root: Option<&str>) -> Result<Vec<String>> {
        let (pattern, root) = (pattern.to_string(), root.map(str::to_string));
        self.fs_op(id, move |sb| {
            let (root, pattern) = if pattern.starts_with('/') {
                split_glob(&pattern)
            } else {
                (root.unwrap_or_else(|| sb.workdir.clone()), pattern)
            };
            let matcher = glob_matcher(&pattern)?;
            let r = resolve(sb, &root)?;
            let dir = r.dir()?;
            Ok(walk(&dir, &r.rel, &r.guest)?
                .into_iter()
                .filter(|(p, _)| matcher.is_match(p))
                .map(|(p, _)| join_guest(&r.guest, &p))
                .collect())
        })
        .await
    }

    /// Lines matching `regex` in the files under `root` (a directory or one file;
    /// default: the workdir) whose relative path matches `glob` when given. At most
    /// `max_matches` lines; binary files and files over 16 MiB are skipped.
    pub async fn grep(
        &self,
        id: &str,
        regex: &str,
        root: Option<&str>,
        glob: Option<&str>,
        max_matches: usize,
    ) -> Result<Vec<GrepMatch>> {
        let re = regex::Regex::new(regex)
            .map_err(|e| Error::InvalidRequest(format!("regex {regex:?} is invalid: {e}")))?;
        let filter = glob.map(glob_matcher).transpose()?;
        let root = root.map(str::to_string);
        self.fs_op(id, move |sb| {
            let root = root.unwrap_or_else(|| sb.workdir.clone());
            let r = resolve(sb, &root)?;
            let dir = r.dir()?;
            let md = dir.metadata(r.at()).map_err(|e| r.err("search", e))?;
            let files: Vec<(PathBuf, String)> = if md.is_file() {
                vec![(r.rel.clone(), r.guest.clone())]
            } else {
                walk(&dir, &r.rel, &r.guest)?
                    .into_iter()
                    .filter(|(p, k)| {
                        *k == FileKind::File && filter.as_ref().is_none_or(|f| f.is_match(p))
                    })
                    .map(|(p, _)| (r.rel.join(&p), join_guest(&r.guest, &p)))
                    .collect()
            };
            let mut out = Vec::new();
            for (rel, guest) in files {
                let Ok(md) = dir.metadata(&rel) else { continue };
                if md.len() > MAX_GREP_FILE_BYTES {
                    continue;
                }
                let Ok(bytes) = dir.read(&rel) else { continue };
                if bytes[..bytes.len().min(8192)].contains(&0) {
                    continue;
                }
                let text = String::from_utf8_lossy(&bytes);
                for (i, line) in text.lines().enumerate() {
                    if re.is_match(line) {
                        out.push(GrepMatch {
                            path: guest.clone(),
                            line_number: i as u64 + 1,
                            line: cut_line(line),
                        });
                        if out.len() >= max_matches {
                            return Ok(out);
                        }
                    }
                }
            }
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
                vec![(PathBuf::new(), entry_of(String::new(), &md).kind)]
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
                let s_at = if s.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    s
                };
                match kind {
                    FileKind::Dir => {
                        dst.charge(sb, 0, entries)?;
                        ddir.create_dir_all(&d).map_err(|e| dst.err("create", e))?;
                    }
                    FileKind::File => {
                        let len = sdir.metadata(&s_at).map(|m| m.len()).unwrap_or(0);
                        dst.charge(sb, len, entries)?;
                        let mut from = sdir.open(&s_at).map_err(|e| src.err("copy", e))?;
                        let mut to = ddir.create(&d).map_err(|e| dst.err("create", e))?;
                        copied +=
                            std::io::copy(&mut from, &mut to).map_err(|e| src.err("copy", e))?;
                    }
                    FileKind::Symlink => {
                        let target = sdir
                            .read_link_contents(&s_at)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_the_guest() {
        assert_eq!(normalize("/tmp", "a/b").unwrap(), Path::new("/tmp/a/b"));
        assert_eq!(
            normalize("/tmp", "../data/x").unwrap(),
            Path::new("/data/x")
        );
        assert_eq!(
            normalize("/tmp", "/tmp/./a/../b").unwrap(),
            Path::new("/tmp/b")
        );
        assert!(normalize("/tmp", "../../etc/passwd").is_none());
        assert!(normalize("/", "/..").is_none());
    }

    #[test]
    fn splits_absolute_globs() {
        assert_eq!(
            split_glob("/tmp/**/*.py"),
            ("/tmp".into(), "**/*.py".into())
        );
        assert_eq!(split_glob("/data/a.txt"), ("/data".into(), "a.txt".into()));
        assert_eq!(split_glob("/*.txt"), ("/".into(), "*.txt".into()));
    }

    #[test]
    fn cuts_long_lines_on_char_boundaries() {
        let long = "é".repeat(MAX_GREP_LINE_CHARS + 5);
        assert_eq!(cut_line(&long).chars().count(), MAX_GREP_LINE_CHARS);
    }
}
