//! File operations: requests and results, shared by every provider.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

/// Largest file accepted by `write` or returned by one `read`.
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// Largest tar archive moved by one upload or download (after decompression).
pub const MAX_TRANSFER_BYTES: u64 = 32 << 20;
/// Most entries one `ls`, `glob`, upload or download handles.
pub const MAX_ENTRIES: u32 = 10_000;
/// Default and largest number of `grep` matches returned.
pub const DEFAULT_GREP_MATCHES: u32 = 1_000;
/// Default number of bytes one `read` returns.
pub const DEFAULT_READ_BYTES: u64 = 1 << 20;
/// Most extended attributes one `set_xattrs` sets.
pub const MAX_XATTRS: usize = 64;
/// Longest extended attribute value `set_xattrs` takes (the kernel allows 64 KiB, but
/// most file systems keep every attribute of a file in one block).
pub const MAX_XATTR_VALUE_BYTES: usize = 4096;
/// The namespace of the extended attributes file operations set and return: the
/// user's own (`trusted.`, `security.` and `system.` are not the caller's).
pub const XATTR_PREFIX: &str = "user.";

/// One file operation. Paths are inside the sandbox; relative paths are relative to
/// the sandbox's working directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileOp {
    /// Write `data` to `path` (parents created), replacing it; `mode` defaults to 0644.
    Write {
        path: String,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        mode: Option<u32>,
    },
    /// Read up to `limit` bytes from `offset`.
    Read {
        path: String,
        offset: u64,
        limit: u64,
    },
    /// Replace `old` with `new`: exactly one occurrence unless `replace_all`.
    Edit {
        path: String,
        old: String,
        new: String,
        replace_all: bool,
    },
    /// List a directory (or describe one file).
    Ls { path: String },
    /// Describe one path (following symlinks).
    Stat { path: String },
    /// Paths below `root` matching a glob pattern (relative to `root`).
    Glob { pattern: String, root: String },
    /// Lines matching a regex in files below `root` (optionally only files matching
    /// `include`), at most `max_matches`.
    Grep {
        regex: String,
        root: String,
        include: Option<String>,
        max_matches: u32,
    },
    /// Create a directory (and its parents when `parents`).
    Mkdir { path: String, parents: bool },
    /// Remove a file, or a directory (its contents too when `recursive`).
    Rm { path: String, recursive: bool },
    /// Unpack a tar (optionally gzip-compressed) archive into the directory `dest`.
    Upload {
        dest: String,
        #[serde(with = "serde_bytes")]
        archive: Vec<u8>,
    },
    /// Pack `path` (a file or a directory) into a tar archive.
    Download { path: String },
    /// Set extended attributes of `path` (following links), each name in the `user.`
    /// namespace ([`check_xattrs`]); others it has are kept.
    SetXattrs {
        path: String,
        xattrs: BTreeMap<String, String>,
    },
    /// Writes to `out` (a new file) an OCI image layer (a tar; `.wh.NAME` marks a
    /// removal) of what differs under `/` from `base`, a read-only view of the same
    /// tree as it was before: entries that are new, or whose type, mode, size, mtime,
    /// ctime (a chown or chmod changes it) or link target differ; at most `max_bytes`
    /// of it. `exclude` (absolute paths), `base` and `out` are left out, as are
    /// devices, sockets and FIFOs.
    Changes {
        base: String,
        out: String,
        exclude: Vec<String>,
        max_bytes: u64,
    },
}

impl FileOp {
    /// Whether the operation changes the sandbox's files (approval policies ask).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            FileOp::Write { .. }
                | FileOp::Edit { .. }
                | FileOp::Mkdir { .. }
                | FileOp::Rm { .. }
                | FileOp::Upload { .. }
                | FileOp::SetXattrs { .. }
                | FileOp::Changes { .. }
        )
    }

    /// The main path the operation is about.
    pub fn path(&self) -> &str {
        match self {
            FileOp::Write { path, .. }
            | FileOp::Read { path, .. }
            | FileOp::Edit { path, .. }
            | FileOp::Ls { path }
            | FileOp::Stat { path }
            | FileOp::Mkdir { path, .. }
            | FileOp::Rm { path, .. }
            | FileOp::SetXattrs { path, .. }
            | FileOp::Download { path } => path,
            FileOp::Glob { root, .. } | FileOp::Grep { root, .. } => root,
            FileOp::Upload { dest, .. } => dest,
            FileOp::Changes { out, .. } => out,
        }
    }

    /// The operation with its path (the one [`FileOp::path`] names; every operation
    /// has exactly one) replaced by `f(path)`.
    pub fn map_paths(mut self, f: impl FnOnce(String) -> String) -> FileOp {
        let p = match &mut self {
            FileOp::Write { path, .. }
            | FileOp::Read { path, .. }
            | FileOp::Edit { path, .. }
            | FileOp::Ls { path }
            | FileOp::Stat { path }
            | FileOp::Mkdir { path, .. }
            | FileOp::Rm { path, .. }
            | FileOp::SetXattrs { path, .. }
            | FileOp::Download { path } => path,
            FileOp::Glob { root, .. } | FileOp::Grep { root, .. } => root,
            FileOp::Upload { dest, .. } => dest,
            FileOp::Changes { out, .. } => out,
        };
        *p = f(std::mem::take(p));
        self
    }
}

/// Kind of a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of `ls` / `stat`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    /// Modification time, unix seconds.
    pub mtime: i64,
    /// Where a symbolic link points (as written in it): an entry of a listing that is
    /// a link, or a stat of a path that is one (whose other fields describe the file
    /// it leads to).
    #[serde(default)]
    pub link_target: Option<String>,
    /// Its extended attributes in the `user.` namespace (names in full), those whose
    /// values are text. (Never skipped when serializing: the agent's messages travel
    /// as postcard, which has no field names.)
    #[serde(default)]
    pub xattrs: BTreeMap<String, String>,
}

/// One `grep` match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepMatch {
    pub path: String,
    pub line_number: u64,
    pub line: String,
}

/// Result of a file operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileResult {
    /// Done, nothing to return.
    Done,
    /// Bytes read; `size` is the file's size, `eof` whether the read reached its end.
    Data {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        size: u64,
        eof: bool,
    },
    /// Number of replacements made.
    Edited { replacements: u64 },
    /// Directory entries (or the one entry of a stat).
    Entries(Vec<FileEntry>),
    /// Paths (glob), relative to the root, sorted; `truncated` when capped.
    Paths { paths: Vec<String>, truncated: bool },
    /// Grep matches; `truncated` when capped.
    Matches {
        matches: Vec<GrepMatch>,
        truncated: bool,
    },
    /// A tar archive.
    Archive(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// Checks the extended attributes of a `set_xattrs`: at most [`MAX_XATTRS`], each name
/// `user.` and something (at most 255 bytes, no NUL), each value at most
/// [`MAX_XATTR_VALUE_BYTES`] without NUL.
pub fn check_xattrs(xattrs: &BTreeMap<String, String>) -> Result<(), String> {
    if xattrs.len() > MAX_XATTRS {
        return Err(format!(
            "{} extended attributes in one call; at most {MAX_XATTRS}",
            xattrs.len()
        ));
    }
    for (name, value) in xattrs {
        if !name.starts_with(XATTR_PREFIX) || name.len() == XATTR_PREFIX.len() {
            return Err(format!(
                "extended attribute {name:?} is not in the user namespace: name it \
                 {XATTR_PREFIX}SOMETHING"
            ));
        }
        if name.len() > 255 || name.contains('\0') {
            return Err(format!(
                "extended attribute name {name:?} is over 255 bytes or holds a NUL"
            ));
        }
        if value.len() > MAX_XATTR_VALUE_BYTES || value.contains('\0') {
            return Err(format!(
                "extended attribute {name:?}: its value is over {MAX_XATTR_VALUE_BYTES} bytes \
                 or holds a NUL"
            ));
        }
    }
    Ok(())
}

/// Checks an archive entry's path: relative, without `..` or root components, not
/// empty. Used wherever an untrusted archive is unpacked (in the sandbox and, for
/// `cp` out of a sandbox, on the host).
pub fn safe_entry_path(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("archive entry with an empty path".into());
    }
    for c in path.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            _ => {
                return Err(format!(
                    "archive entry {} leaves the target directory",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_paths_rewrites_the_one_path_and_keeps_the_rest() {
        let op = FileOp::Grep {
            regex: "x".into(),
            root: "src".into(),
            include: Some("*.rs".into()),
            max_matches: 3,
        };
        let mapped = op.map_paths(|p| format!("/work/{p}"));
        assert_eq!(mapped.path(), "/work/src");
        assert!(
            matches!(mapped, FileOp::Grep { max_matches: 3, ref include, .. } if include.as_deref() == Some("*.rs"))
        );
        let up = FileOp::Upload {
            dest: "d".into(),
            archive: vec![1, 2],
        }
        .map_paths(|p| p + "/x");
        assert_eq!(
            up,
            FileOp::Upload {
                dest: "d/x".into(),
                archive: vec![1, 2]
            }
        );
    }

    #[test]
    fn xattrs_are_the_users_own_and_bounded() {
        let one = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(check_xattrs(&one("user.e2b.owner", "team-a")).is_ok());
        assert!(check_xattrs(&BTreeMap::new()).is_ok());
        for bad in [
            "trusted.x",
            "security.capability",
            "system.posix_acl_access",
            "user.",
            "x",
        ] {
            let e = check_xattrs(&one(bad, "v")).unwrap_err();
            assert!(e.contains("user namespace"), "{bad}: {e}");
        }
        assert!(check_xattrs(&one(&format!("user.{}", "n".repeat(251)), "v")).is_err());
        assert!(check_xattrs(&one("user.a\0b", "v")).is_err());
        assert!(check_xattrs(&one("user.a", "v\0")).is_err());
        assert!(check_xattrs(&one("user.a", &"v".repeat(MAX_XATTR_VALUE_BYTES + 1))).is_err());
        let many: BTreeMap<String, String> = (0..=MAX_XATTRS)
            .map(|i| (format!("user.k{i}"), "v".to_string()))
            .collect();
        assert!(check_xattrs(&many).unwrap_err().contains("at most"));
    }
}
