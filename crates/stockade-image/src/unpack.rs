//! Safe unpacking of layer tars, one layer alone or several flattened in order.
//!
//! Runs as root on the host, on archives from anywhere, so every entry is checked:
//! paths must be relative without `..`; no write goes through a symlink (each parent
//! component is checked with `symlink_metadata`, an existing symlink at the target is
//! replaced, never followed); hardlinks must point inside the tree; device nodes and
//! fifos are skipped; setuid, setgid and sticky-on-files bits are stripped; entry
//! count and byte totals are capped against decompression bombs.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};

/// Caps on what one unpacking may create. The defaults fit the largest common images
/// (a full CUDA image is ~10 GiB and ~200,000 entries) and stop bombs well before a
/// disk fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries in all layers together. Default 1,000,000.
    pub max_entries: u64,
    /// Bytes of file content in all layers together. Default 4 GiB.
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 1_000_000,
            max_bytes: 4 << 30,
        }
    }
}

/// Room left under the store's total cap or a caller's budget (the smaller), and the
/// error that passing it gives.
pub(crate) struct Room {
    /// Bytes that may still be written.
    pub left: u64,
    /// The error once more would be written.
    pub exceeded: Box<dyn Fn() -> Error + Send>,
}

/// The whiteout prefix of the OCI layer format: `.wh.NAME` deletes `NAME`.
const WHITEOUT: &str = ".wh.";
/// The opaque-directory marker: the directory hides what lower layers had in it.
const OPAQUE: &str = ".wh..wh..opq";

/// Metadata applied to directories once everything is written (a read-only directory
/// must stay writable while its children are created).
struct DirMeta {
    mode: u32,
    mtime: u64,
}

/// Unpacks layers into `root`, which it owns: nothing else may write there while it
/// works (the store unpacks into a fresh private temporary directory).
pub(crate) struct Unpacker<'a> {
    root: &'a Path,
    limits: Limits,
    entries: u64,
    bytes: u64,
    chown: bool,
    dirs: BTreeMap<PathBuf, DirMeta>,
    room: Option<Room>,
}

/// Whether whiteouts are applied (flattening) or kept as plain files (one layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whiteouts {
    Apply,
    Keep,
}

impl<'a> Unpacker<'a> {
    pub(crate) fn new(root: &'a Path, limits: Limits) -> Self {
        Unpacker {
            root,
            limits,
            entries: 0,
            bytes: 0,
            chown: stockade_core::host::is_root(),
            dirs: BTreeMap::new(),
            room: None,
        }
    }

    /// Also stops at `room` (the store's total cap or a caller's budget).
    pub(crate) fn with_room(mut self, room: Room) -> Self {
        self.room = Some(room);
        self
    }

    /// Bytes of file content written so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Applies one layer's tar stream on top of what is already in the root.
    pub(crate) fn apply(&mut self, layer: &str, reader: impl Read, wh: Whiteouts) -> Result<()> {
        let mut archive = tar::Archive::new(reader);
        let read_err = |source| Error::Archive {
            what: format!("layer {layer}"),
            source,
        };
        // Whiteouts hide what lower layers had, never what this layer adds.
        let mut this_layer: HashSet<PathBuf> = HashSet::new();
        for entry in archive.entries().map_err(read_err)? {
            let mut entry = entry.map_err(read_err)?;
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(Error::LimitExceeded {
                    layer: layer.to_string(),
                    what: "entries",
                    limit: self.limits.max_entries,
                });
            }
            let raw = entry.path_bytes().into_owned();
            let shown = String::from_utf8_lossy(&raw).into_owned();
            let refuse = |reason: &str| Error::UnsafeEntry {
                layer: layer.to_string(),
                entry: shown.clone(),
                reason: reason.to_string(),
            };
            let rel = safe_relative(&raw).map_err(&refuse)?;
            let Some(name) = rel.file_name().map(OsStr::to_owned) else {
                continue; // the layer's own root, "./"
            };
            let kind = entry.header().entry_type();
            let name_bytes = name.as_bytes();
            if wh == Whiteouts::Apply && name_bytes.starts_with(WHITEOUT.as_bytes()) {
                let parent = self.make_parents(&rel).map_err(|r| refuse(&r))?;
                if name_bytes == OPAQUE.as_bytes() {
                    let dir_rel = rel.parent().unwrap_or(Path::new(""));
                    self.clear_dir(&parent, dir_rel, &this_layer)?;
                } else if !name_bytes.starts_with(b".wh..wh.") {
                    // `.wh.`, `.wh..` and `.wh...` would name the directory itself or
                    // its parent (at the top: the tree and the store's tmp/).
                    let hidden_name = &name_bytes[WHITEOUT.len()..];
                    if matches!(hidden_name, b"" | b"." | b"..") {
                        return Err(refuse("a whiteout must name an entry, not '.' or '..'"));
                    }
                    let hidden = rel.with_file_name(OsStr::from_bytes(hidden_name));
                    if !this_layer.contains(&hidden) {
                        remove_any(&self.root.join(&hidden))?;
                    }
                }
                continue;
            }
            let dest_parent = self.make_parents(&rel).map_err(|r| refuse(&r))?;
            let dest = dest_parent.join(&name);
            let mode = entry.header().mode().map_err(read_err)?;
            let mtime = entry.header().mtime().unwrap_or(0);
            let (uid, gid) = (
                entry.header().uid().unwrap_or(0),
                entry.header().gid().unwrap_or(0),
            );
            match kind {
                tar::EntryType::Directory => {
                    match fs::symlink_metadata(&dest) {
                        Ok(m) if m.is_dir() => {}
                        Ok(_) => {
                            remove_any(&dest)?;
                            make_dir(&dest)?;
                        }
                        Err(_) => make_dir(&dest)?,
                    }
                    self.set_owner(&dest, uid, gid)?;
                    self.dirs.insert(
                        rel.clone(),
                        DirMeta {
                            mode: strip_mode(mode, true),
                            mtime,
                        },
                    );
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    remove_any(&dest)?;
                    let image_left = self.limits.max_bytes - self.bytes;
                    let room_left = self
                        .room
                        .as_ref()
                        .map_or(u64::MAX, |r| r.left.saturating_sub(self.bytes));
                    let left = image_left.min(room_left);
                    let too_big = || match &self.room {
                        Some(r) if room_left < image_left => (r.exceeded)(),
                        _ => Error::LimitExceeded {
                            layer: layer.to_string(),
                            what: "bytes",
                            limit: self.limits.max_bytes,
                        },
                    };
                    if entry.header().size().unwrap_or(u64::MAX) > left {
                        return Err(too_big());
                    }
                    // create_new (O_EXCL) never follows a symlink at the last component.
                    let mut file = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&dest)
                        .map_err(Error::io("create", &dest))?;
                    let n =
                        io::copy(&mut (&mut entry).take(left + 1), &mut file).map_err(read_err)?;
                    if n > left {
                        return Err(too_big());
                    }
                    self.bytes += n;
                    self.set_owner(&dest, uid, gid)?;
                    file.set_permissions(fs::Permissions::from_mode(strip_mode(mode, false)))
                        .map_err(Error::io("chmod", &dest))?;
                    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime))
                        .map_err(Error::io("set the time of", &dest))?;
                }
                tar::EntryType::Symlink => {
                    let target = entry
                        .link_name_bytes()
                        .ok_or_else(|| refuse("symlink without a target"))?
                        .into_owned();
                    remove_any(&dest)?;
                    std::os::unix::fs::symlink(OsStr::from_bytes(&target), &dest)
                        .map_err(Error::io("create symlink", &dest))?;
                    self.set_owner(&dest, uid, gid)?;
                }
                tar::EntryType::Link => {
                    let target_raw = entry
                        .link_name_bytes()
                        .ok_or_else(|| refuse("hardlink without a target"))?
                        .into_owned();
                    let target_rel = safe_relative(&target_raw)
                        .map_err(|r| refuse(&format!("hardlink target {r}")))?;
                    let target = self
                        .check_parents(&target_rel)
                        .map_err(|r| refuse(&format!("hardlink target: {r}")))?;
                    match fs::symlink_metadata(&target) {
                        Ok(m) if m.is_dir() => {
                            return Err(refuse("hardlink to a directory"));
                        }
                        Ok(_) => {}
                        Err(_) => return Err(refuse("hardlink to a missing file")),
                    }
                    if target_rel != rel {
                        remove_any(&dest)?;
                        fs::hard_link(&target, &dest).map_err(Error::io("hardlink", &dest))?;
                    }
                }
                // Device nodes and fifos have no place in a sandbox's image: the
                // sandbox gets its own /dev.
                tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                    continue;
                }
                tar::EntryType::GNUSparse => {
                    return Err(refuse("sparse files are not supported"));
                }
                // pax global headers and other metadata-only entries.
                _ => continue,
            }
            // Ancestors too: an opaque marker later in this layer must keep them.
            let mut cur = Some(rel.as_path());
            while let Some(p) = cur.filter(|p| !p.as_os_str().is_empty()) {
                if !this_layer.insert(p.to_path_buf()) {
                    break;
                }
                cur = p.parent();
            }
        }
        Ok(())
    }

    /// Applies directory modes and times, deepest first, and makes the root itself
    /// world-readable (it was created private).
    pub(crate) fn finish(self) -> Result<()> {
        for (rel, meta) in self.dirs.iter().rev() {
            let path = self.root.join(rel);
            // Still a real directory (a later layer may have removed or replaced it)?
            if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode))
                .map_err(Error::io("chmod", &path))?;
            if let Ok(f) = File::open(&path) {
                let _ = f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(meta.mtime));
            }
        }
        fs::set_permissions(self.root, fs::Permissions::from_mode(0o755))
            .map_err(Error::io("chmod", self.root))
    }

    /// Makes sure every parent of `rel` is a real directory under the root, creating
    /// missing ones; returns the parent's host path.
    fn make_parents(&self, rel: &Path) -> std::result::Result<PathBuf, String> {
        self.walk_parents(rel, true)
    }

    /// Like `make_parents` without creating anything; returns the host path of `rel`.
    fn check_parents(&self, rel: &Path) -> std::result::Result<PathBuf, String> {
        let parent = self.walk_parents(rel, false)?;
        Ok(parent.join(rel.file_name().unwrap_or_default()))
    }

    fn walk_parents(&self, rel: &Path, create: bool) -> std::result::Result<PathBuf, String> {
        let mut cur = self.root.to_path_buf();
        let Some(parent) = rel.parent() else {
            return Ok(cur);
        };
        for c in parent.components() {
            cur.push(c);
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(format!(
                        "its parent {} is a symlink (no write goes through a symlink)",
                        cur.strip_prefix(self.root).unwrap_or(&cur).display()
                    ));
                }
                Ok(_) => {
                    return Err(format!(
                        "its parent {} is not a directory",
                        cur.strip_prefix(self.root).unwrap_or(&cur).display()
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                    make_dir(&cur).map_err(|e| e.to_string())?;
                }
                Err(e) => return Err(format!("cannot inspect {}: {e}", cur.display())),
            }
        }
        Ok(cur)
    }

    /// Removes what lower layers put in a directory (an opaque whiteout).
    fn clear_dir(&self, dir: &Path, dir_rel: &Path, keep: &HashSet<PathBuf>) -> Result<()> {
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("read", dir)(e)),
        };
        for child in rd {
            let child = child.map_err(Error::io("read", dir))?;
            if !keep.contains(&dir_rel.join(child.file_name())) {
                remove_any(&child.path())?;
            }
        }
        Ok(())
    }

    fn set_owner(&self, path: &Path, uid: u64, gid: u64) -> Result<()> {
        if !self.chown {
            return Ok(());
        }
        let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
            return Ok(());
        };
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(Error::io("chown", path))
    }
}

/// The relative path of an entry: no root, no `..`; `.` components dropped.
pub(crate) fn safe_relative(raw: &[u8]) -> std::result::Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for c in Path::new(OsStr::from_bytes(raw)).components() {
        match c {
            Component::Normal(x) => out.push(x),
            Component::CurDir => {}
            Component::ParentDir => return Err("the path contains '..'"),
            Component::RootDir | Component::Prefix(_) => return Err("the path is absolute"),
        }
    }
    Ok(out)
}

/// Permission bits without setuid and setgid (and sticky, but on directories).
fn strip_mode(mode: u32, dir: bool) -> u32 {
    if dir { mode & 0o1777 } else { mode & 0o777 }
}

fn make_dir(path: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .mode(0o755)
        .create(path)
        .map_err(Error::io("create directory", path))
}

/// Removes a file, symlink (never its target) or directory tree, if there.
fn remove_any(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path).map_err(Error::io("remove", path)),
        Ok(_) => fs::remove_file(path).map_err(Error::io("remove", path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("inspect", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(safe_relative(b"./a/./b/").unwrap(), PathBuf::from("a/b"));
        assert_eq!(safe_relative(b"./").unwrap(), PathBuf::new());
        assert!(safe_relative(b"a/../../b").is_err());
        assert!(safe_relative(b"/etc/passwd").is_err());
        assert!(safe_relative(b"..").is_err());
    }

    #[test]
    fn modes_lose_setuid() {
        assert_eq!(strip_mode(0o4755, false), 0o755);
        assert_eq!(strip_mode(0o2755, true), 0o755);
        assert_eq!(strip_mode(0o1777, true), 0o1777);
        assert_eq!(strip_mode(0o1644, false), 0o644);
    }
}
