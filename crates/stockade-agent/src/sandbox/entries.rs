//! What `ls` and `stat` say of an entry (its kind, mode, times, link target and
//! user extended attributes), and `set_xattrs`.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use stockade_agent_proto::ErrorCode;
use stockade_agent_proto::files::{FileEntry, FileKind, FileResult, XATTR_PREFIX, check_xattrs};

use super::fileop::{OpError, io_err};

fn kind_of(ft: fs::FileType) -> FileKind {
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

/// `m` describes `path` (followed or not); `link_target` is what `path` holds when
/// it is a symbolic link; `xattrs` its user extended attributes.
pub(super) fn entry(
    name: String,
    m: &fs::Metadata,
    link_target: Option<String>,
    xattrs: BTreeMap<String, String>,
) -> FileEntry {
    FileEntry {
        name,
        kind: kind_of(m.file_type()),
        size: m.len(),
        mode: m.mode() & 0o7777,
        mtime: m.mtime(),
        link_target,
        xattrs,
    }
}

/// The `user.` extended attributes of `path` whose values are text (`follow`: of what
/// a link leads to). A file system without them, or a file the user may not ask,
/// has none: a listing is not refused for them.
pub(super) fn user_xattrs(path: &Path, follow: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut names = vec![0u8; 64 << 10];
    let n = if follow {
        rustix::fs::listxattr(path, &mut names[..])
    } else {
        rustix::fs::llistxattr(path, &mut names[..])
    };
    let Ok(n) = n else { return out };
    let mut value = vec![0u8; 64 << 10];
    for name in names[..n].split(|b| *b == 0) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if !name.starts_with(XATTR_PREFIX) {
            continue;
        }
        let got = if follow {
            rustix::fs::getxattr(path, name, &mut value[..])
        } else {
            rustix::fs::lgetxattr(path, name, &mut value[..])
        };
        if let Ok(len) = got
            && let Ok(v) = std::str::from_utf8(&value[..len])
        {
            out.insert(name.to_string(), v.to_string());
        }
    }
    out
}

/// What the symbolic link at `path` holds, when it is one.
pub(super) fn link_target(path: &Path, m: &fs::Metadata) -> Option<String> {
    if !m.file_type().is_symlink() {
        return None;
    }
    fs::read_link(path)
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
}

/// Sets `user.` extended attributes of `path` (following links).
pub(super) fn set_xattrs(
    path: &Path,
    xattrs: &BTreeMap<String, String>,
) -> Result<FileResult, OpError> {
    check_xattrs(xattrs).map_err(|m| OpError(ErrorCode::InvalidSpec, m))?;
    fs::metadata(path).map_err(|e| io_err("set attributes of", path, e))?;
    for (name, value) in xattrs {
        rustix::fs::setxattr(
            path,
            name.as_str(),
            value.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::OPNOTSUPP => OpError(
                ErrorCode::Unavailable,
                format!(
                    "the file system of {} keeps no extended attributes",
                    path.display()
                ),
            ),
            e => io_err("set attributes of", path, e.into()),
        })?;
    }
    Ok(FileResult::Done)
}
