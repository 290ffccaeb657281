//! Sandbox paths as the guest sees them, resolved to a preopen and opened through
//! cap-std; entries and kinds as the file API reports them.

use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, MetadataExt};
use stockade_core::{Error, Result};
use stockade_spec::format_size;

use super::{FileEntry, FileKind};
use crate::TMP_DIR;
use crate::quota::TmpQuota;
use crate::sandbox::{Preopen, SandboxEntry};

/// A sandbox path resolved to a preopen and a path relative to it.
pub(super) struct Resolved {
    pub(super) preopen: Preopen,
    pub(super) rel: PathBuf,
    pub(super) guest: String,
}

impl Resolved {
    pub(super) fn dir(&self) -> Result<Dir> {
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
    pub(super) fn at(&self) -> &Path {
        dot_if_empty(&self.rel)
    }

    pub(super) fn writable(&self) -> Result<()> {
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
    pub(super) fn charge(&self, sb: &SandboxEntry, bytes: u64, entries: u64) -> Result<()> {
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
    pub(super) fn depth(&self) -> u64 {
        self.rel.components().count().max(1) as u64
    }

    pub(super) fn err(&self, op: &str, e: std::io::Error) -> Error {
        map_io(op, &self.guest, e)
    }
}

pub(super) fn map_io(op: &str, guest: &str, e: std::io::Error) -> Error {
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

pub(super) fn resolve(sb: &SandboxEntry, path: &str) -> Result<Resolved> {
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

/// `path` as cap-std takes it: `.` for the empty path (the directory itself).
pub(super) fn dot_if_empty(path: &Path) -> &Path {
    if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    }
}

pub(super) fn kind_of(ft: cap_std::fs::FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

pub(super) fn entry_of(name: String, md: &cap_std::fs::Metadata) -> FileEntry {
    let mtime = md
        .modified()
        .ok()
        .and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    FileEntry {
        name,
        kind: kind_of(md.file_type()),
        size: md.len(),
        mode: md.mode() & 0o7777,
        mtime,
        link_target: None,
        xattrs: Default::default(),
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
}
