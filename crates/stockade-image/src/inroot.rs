//! Reading an image's root filesystem from the host with every path resolved inside
//! it, as the sandbox would see it.
//!
//! Images may hold any symlink (`/bin -> usr/bin`, `/etc -> /`, `x -> ../../..`): they
//! are legal and keep their targets. The host must never follow one on its own side,
//! so a host-side look into a rootfs never goes through `Path::join` and a following
//! call: each path is opened with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`
//! below the rootfs's directory fd, which resolves `..` and absolute symlink targets
//! against the rootfs itself.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

/// How every lookup inside a rootfs resolves: `/` and `..` stop at the rootfs, and
/// `/proc` magic links (which jump anywhere) are refused.
pub const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// What one directory entry is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// Anything else (devices, fifos, sockets).
    Other,
}

impl Kind {
    fn of(t: FileType) -> Kind {
        match t {
            FileType::Directory => Kind::Dir,
            FileType::RegularFile => Kind::File,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// Opens `rel` (relative, or absolute meaning relative to the rootfs) inside `root`
/// with `flags` (`O_CLOEXEC` always added). The last component is followed (inside
/// the root) unless `flags` has `O_NOFOLLOW`.
pub fn open(root: &Path, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    open_at(&dir, rel, flags)
}

/// Like [`open`], below an already open root directory.
pub fn open_at(root: &OwnedFd, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    Ok(rustix::fs::openat2(
        root,
        rel,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )?)
}

/// The parent of `rel` opened inside `root` (`O_PATH`) and the last component's name.
fn parent_and_name(root: &Path, rel: &Path) -> io::Result<(OwnedFd, OsString)> {
    let name = rel.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no entry", rel.display()),
        )
    })?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let fd = open(root, parent, OFlags::PATH | OFlags::DIRECTORY)?;
    Ok((fd, name.to_owned()))
}

/// What `rel` is, its last component not followed (`lstat` inside the root).
pub fn kind(root: &Path, rel: &Path) -> io::Result<Kind> {
    let (dir, name) = parent_and_name(root, rel)?;
    let st = rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(Kind::of(FileType::from_raw_mode(st.st_mode)))
}

/// The target of the symlink `rel` (parents resolved inside the root), as stored.
pub fn read_link(root: &Path, rel: &Path) -> io::Result<OsString> {
    let (dir, name) = parent_and_name(root, rel)?;
    let target = rustix::fs::readlinkat(&dir, name.as_os_str(), Vec::new())?;
    Ok(OsString::from_vec(target.into_bytes()))
}

/// The entries of the directory `rel` inside `root` (names and kinds, not followed),
/// sorted by name; `.` and `..` left out.
pub fn read_dir(root: &Path, rel: &Path) -> io::Result<Vec<(OsString, Kind)>> {
    let fd = open(root, rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let probe = fd.try_clone()?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::new(fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match e.file_type() {
            FileType::Unknown => {
                let st = rustix::fs::statat(&probe, e.file_name(), AtFlags::SYMLINK_NOFOLLOW)?;
                Kind::of(FileType::from_raw_mode(st.st_mode))
            }
            t => Kind::of(t),
        };
        out.push((OsString::from_vec(name.to_vec()), kind));
    }
    out.sort();
    Ok(out)
}

/// Reads the regular file `rel` inside `root` (symlinks followed inside the root),
/// at most `max` bytes: longer is an error.
pub fn read(root: &Path, rel: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let fd = open(root, rel, OFlags::RDONLY)?;
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", rel.display()),
        ));
    }
    let mut data = Vec::new();
    file.take(max + 1).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", rel.display()),
        ));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let outer = tempfile::tempdir().unwrap();
        std::fs::write(outer.path().join("secret"), b"host").unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/secret"), b"image").unwrap();
        symlink("/", root.join("abs")).unwrap();
        symlink("../../..", root.join("up")).unwrap();
        symlink("/proc/self/root", root.join("magic")).unwrap();
        std::fs::create_dir(root.join("proc")).unwrap();
        // Absolute and climbing targets both land on the root itself.
        for link in ["abs", "up"] {
            let names: Vec<_> = read_dir(&root, Path::new(link))
                .unwrap()
                .into_iter()
                .map(|(n, _)| n.into_string().unwrap())
                .collect();
            assert_eq!(names, ["abs", "magic", "proc", "real", "up"], "{link}");
            assert!(read(&root, &Path::new(link).join("secret"), 100).is_err());
            assert_eq!(
                read(&root, &Path::new(link).join("real/secret"), 100).unwrap(),
                b"image"
            );
        }
        // A link to /proc/self/root is a plain path inside the root: not there.
        assert!(read_dir(&root, Path::new("magic")).is_err());
        assert_eq!(kind(&root, Path::new("abs")).unwrap(), Kind::Symlink);
        assert_eq!(kind(&root, Path::new("abs/real")).unwrap(), Kind::Dir);
        assert_eq!(read_link(&root, Path::new("up")).unwrap(), "../../..");
        assert!(
            read(&root, Path::new("real/secret"), 2).is_err(),
            "over max"
        );
    }
}
