//! Unpacking, on the host, a tar archive that came out of a sandbox (`stockade cp
//! ID:/dir DEST`, the Python SDK's `download(path, to=DEST)`). The archive is
//! hostile: whatever made it (code in the sandbox, a compromised agent) chose every
//! byte. [`unpack_on_host`] is the one rule every host-side caller applies.
//!
//! The rule, checked for every entry before anything is written:
//! - at most [`MAX_ENTRIES`] entries and [`MAX_TRANSFER_BYTES`] of contents;
//! - paths relative, without `..`, each named once;
//! - only files, directories and symlinks (no hard links, devices, FIFOs, sparse files);
//! - no entry below a symlink of the archive (nothing is written through a link);
//! - a symlink's target relative and, following the archive's other links, inside DEST.
//!
//! Then, while unpacking: nothing is written through a symlink that leaves DEST (also
//! one already there), ownership and extended attributes are not restored, and modes
//! lose setuid, setgid, sticky and group/other write.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::files::{MAX_ENTRIES, MAX_TRANSFER_BYTES, safe_entry_path};
use crate::{Error, Result};

/// Most symlinks followed while checking one symlink's target (as the kernel's 40).
const MAX_LINK_HOPS: u32 = 40;

/// Mode bits never restored on the host: group and other write (setuid, setgid and
/// sticky are dropped with every bit above 0o777).
const MODE_MASK: u32 = 0o022;

/// Unpacks `archive` (a plain tar) into `dest` (created if missing), refusing it whole
/// (`PolicyDenied`, `LimitExceeded`, `InvalidRequest` for a corrupt archive) unless
/// every entry passes the rule of this module.
pub fn unpack_on_host(archive: &[u8], dest: &Path) -> Result<()> {
    check(archive)?;
    std::fs::create_dir_all(dest)
        .map_err(|e| Error::io(format!("cannot create {}", dest.display()), e))?;
    let canon_dest = canonical(dest)?;
    let mut a = tar::Archive::new(archive);
    a.set_preserve_permissions(false);
    a.set_preserve_ownerships(false);
    a.set_unpack_xattrs(false);
    a.set_mask(MODE_MASK);
    for e in a.entries().map_err(bad_archive)? {
        let mut e = e.map_err(bad_archive)?;
        let path = normal(&e.path().map_err(bad_archive)?);
        // A symlink already in dest (the archive's own are refused by `check`).
        let mut dir = dest.join(&path);
        while dir.pop() && dir.symlink_metadata().is_err() {}
        if !canonical(&dir)?.starts_with(&canon_dest) {
            return Err(denied(format!(
                "archive entry {} would be written through a symlink leaving {}",
                path.display(),
                dest.display()
            )));
        }
        // unpack_in checks that again, as it writes.
        if !e
            .unpack_in(dest)
            .map_err(|err| Error::io(format!("cannot unpack {}", path.display()), err))?
        {
            return Err(denied(format!(
                "archive entry {} leaves {}",
                path.display(),
                dest.display()
            )));
        }
    }
    Ok(())
}

/// The first pass: every entry against the rule, nothing written.
fn check(archive: &[u8]) -> Result<()> {
    let mut paths = HashSet::new();
    let mut links: HashMap<PathBuf, PathBuf> = HashMap::new();
    let (mut count, mut bytes) = (0u32, 0u64);
    let mut a = tar::Archive::new(archive);
    for e in a.entries().map_err(bad_archive)? {
        let e = e.map_err(bad_archive)?;
        count += 1;
        bytes = bytes.saturating_add(e.size());
        if count > MAX_ENTRIES || bytes > MAX_TRANSFER_BYTES {
            return Err(Error::LimitExceeded {
                what: "the archive from the sandbox".into(),
                limit: format!("{MAX_ENTRIES} entries and {MAX_TRANSFER_BYTES} bytes of contents"),
            });
        }
        let raw = e.path().map_err(bad_archive)?;
        safe_entry_path(&raw).map_err(denied)?;
        let path = normal(&raw);
        let kind = e.header().entry_type();
        if !(kind.is_file() || kind.is_dir() || kind.is_symlink()) {
            return Err(denied(format!(
                "archive entry {} is a {kind:?}; only files, directories and symlinks are unpacked",
                path.display()
            )));
        }
        if !paths.insert(path.clone()) {
            return Err(denied(format!(
                "archive entry {} appears twice",
                path.display()
            )));
        }
        if kind.is_symlink() {
            let target = e
                .link_name()
                .map_err(bad_archive)?
                .ok_or_else(|| denied(format!("symlink {} has no target", path.display())))?;
            links.insert(path, target.into_owned());
        }
    }
    for path in &paths {
        if let Some(link) = path.ancestors().skip(1).find(|a| links.contains_key(*a)) {
            return Err(denied(format!(
                "archive entry {} is below the symlink {} of the same archive",
                path.display(),
                link.display()
            )));
        }
    }
    for (link, target) in &links {
        link_stays_inside(&links, link, target)?;
    }
    Ok(())
}

/// `path` without `.` components (the archive's key for it).
fn normal(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

/// Resolves `target` from the directory of `link`, following the archive's links,
/// and refuses it when it is absolute or climbs above the destination.
fn link_stays_inside(links: &HashMap<PathBuf, PathBuf>, link: &Path, target: &Path) -> Result<()> {
    let refuse = |why: &str| {
        denied(format!(
            "symlink {} -> {} {why}",
            link.display(),
            target.display()
        ))
    };
    let mut at: Vec<OsString> = link
        .parent()
        .map(|p| p.iter().map(OsString::from).collect())
        .unwrap_or_default();
    let mut todo: VecDeque<Component<'_>> = target.components().collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c {
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse(
                    "is absolute; links must stay inside the destination",
                ));
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if at.pop().is_none() {
                    return Err(refuse("leaves the destination"));
                }
            }
            Component::Normal(name) => {
                at.push(name.to_os_string());
                let here: PathBuf = at.iter().collect();
                if let Some(next) = links.get(&here) {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(refuse("goes through too many links (a loop?)"));
                    }
                    at.pop();
                    for c in next.components().rev() {
                        todo.push_front(c);
                    }
                }
            }
        }
    }
    Ok(())
}

fn canonical(path: &Path) -> Result<PathBuf> {
    path.canonicalize()
        .map_err(|e| Error::io(format!("cannot resolve {}", path.display()), e))
}

fn denied(message: String) -> Error {
    Error::PolicyDenied(message)
}

fn bad_archive(e: std::io::Error) -> Error {
    Error::InvalidRequest(format!(
        "the archive from the sandbox is not a valid tar archive: {e}"
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::ErrorCode;

    /// One raw entry: name, type, mode, link target, contents. The name is written
    /// into the header as is, so the tar crate's own checks do not clean it.
    struct E<'a>(&'a str, tar::EntryType, u32, Option<&'a str>, &'a [u8]);

    fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for E(name, kind, mode, link, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(l) = link {
                h.set_link_name(l).unwrap();
            }
            h.set_size(data.len() as u64);
            h.set_mode(*mode);
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn file<'a>(name: &'a str, data: &'a [u8]) -> E<'a> {
        E(name, tar::EntryType::Regular, 0o644, None, data)
    }

    fn symlink<'a>(name: &'a str, target: &'a str) -> E<'a> {
        E(name, tar::EntryType::Symlink, 0o777, Some(target), b"")
    }

    /// Unpacks into a fresh `out` under a temp dir; the error's code and the temp dir
    /// (to look for what must not be there).
    fn refused(entries: &[E<'_>]) -> (ErrorCode, String, tempfile::TempDir) {
        let tmp = tempfile::tempdir().unwrap();
        let err = unpack_on_host(&tar_of(entries), &tmp.path().join("out")).unwrap_err();
        (err.code(), err.to_string(), tmp)
    }

    #[test]
    fn a_tree_with_links_inside_it_unpacks() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let archive = tar_of(&[
            E("bin", tar::EntryType::Directory, 0o755, None, b""),
            E(
                "bin/run",
                tar::EntryType::Regular,
                0o755,
                None,
                b"#!/bin/sh\n",
            ),
            file("lib/data.txt", b"payload"),
            symlink("current", "lib/data.txt"),
            symlink("bin/up", "../lib"),
        ]);
        unpack_on_host(&archive, &out).unwrap();
        assert_eq!(std::fs::read(out.join("current")).unwrap(), b"payload");
        assert_eq!(
            std::fs::read(out.join("bin/up/data.txt")).unwrap(),
            b"payload"
        );
        let mode = std::fs::metadata(out.join("bin/run"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }

    #[test]
    fn dotdot_and_absolute_paths_are_refused() {
        for name in ["../x", "a/../../x", "/etc/x", "/tmp/abs"] {
            let (code, msg, tmp) = refused(&[file("ok", b"ok"), file(name, b"evil")]);
            assert_eq!(code, ErrorCode::PolicyDenied, "{name}: {msg}");
            assert!(!tmp.path().join("x").exists(), "{name}");
            // Checked before anything is written.
            assert!(!tmp.path().join("out/ok").exists(), "{name}");
        }
    }

    #[test]
    fn a_file_through_a_symlink_of_the_archive_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        // The link alone would be refused (absolute); the file below it is refused
        // too, however the link is spelled, and whichever comes first.
        let v = victim.to_str().unwrap();
        for entries in [
            vec![symlink("l", v), file("l/x", b"evil")],
            vec![symlink("l", "."), file("l/x", b"evil")],
            vec![file("l/x", b"evil"), symlink("l", "sub")],
        ] {
            let (code, msg, _t) = refused(&entries);
            assert_eq!(code, ErrorCode::PolicyDenied, "{msg}");
        }
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
    }

    #[test]
    fn symlinks_leaving_dest_are_refused() {
        for entries in [
            vec![symlink("secret", "/etc/shadow")],
            vec![symlink("up", "../../etc")],
            vec![symlink("d/up", "../..")],
            // Each link stays inside on its own; followed one after the other they
            // climb out: a/c is dest, so b = a/c/.. is dest's parent.
            vec![
                E("sub", tar::EntryType::Directory, 0o755, None, b""),
                symlink("a", "sub"),
                symlink("sub/c", ".."),
                symlink("b", "a/c/.."),
            ],
            vec![symlink("x", "y"), symlink("y", "x")],
        ] {
            let (code, msg, tmp) = refused(&entries);
            assert_eq!(code, ErrorCode::PolicyDenied, "{msg}");
            assert!(!tmp.path().join("out").join(entries[0].0).exists(), "{msg}");
        }
    }

    #[test]
    fn a_symlink_already_in_dest_is_not_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let (out, victim) = (tmp.path().join("out"), tmp.path().join("victim"));
        std::fs::create_dir_all(&out).unwrap();
        std::fs::create_dir(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, out.join("l")).unwrap();
        let err = unpack_on_host(&tar_of(&[file("l/x", b"evil")]), &out).unwrap_err();
        assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
        assert!(!victim.join("x").exists());
    }

    #[test]
    fn hard_links_devices_and_fifos_are_refused() {
        for (kind, link) in [
            (tar::EntryType::Link, Some("/etc/passwd")),
            (tar::EntryType::Link, Some("inside")),
            (tar::EntryType::Block, None),
            (tar::EntryType::Char, None),
            (tar::EntryType::Fifo, None),
        ] {
            let (code, msg, tmp) = refused(&[file("inside", b"x"), E("e", kind, 0o644, link, b"")]);
            assert_eq!(code, ErrorCode::PolicyDenied, "{kind:?}: {msg}");
            assert!(!tmp.path().join("out/e").exists());
        }
    }

    #[test]
    fn setuid_setgid_and_world_writable_modes_are_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let archive = tar_of(&[
            E("suid", tar::EntryType::Regular, 0o4755, None, b"x"),
            E("sgid", tar::EntryType::Regular, 0o2777, None, b"x"),
            E("dir", tar::EntryType::Directory, 0o1777, None, b""),
        ]);
        unpack_on_host(&archive, &out).unwrap();
        for (name, want) in [("suid", 0o755), ("sgid", 0o755), ("dir", 0o755)] {
            let mode = std::fs::metadata(out.join(name))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, want, "{name}");
        }
    }

    #[test]
    fn too_many_entries_or_bytes_are_refused() {
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("f{i}")).collect();
        let many: Vec<E<'_>> = names.iter().map(|n| file(n, b"")).collect();
        let (code, msg, tmp) = refused(&many);
        assert_eq!(code, ErrorCode::LimitExceeded, "{msg}");
        assert!(!tmp.path().join("out").exists());

        let big = vec![0u8; (MAX_TRANSFER_BYTES / 2 + 1) as usize];
        let (code, msg, _t) = refused(&[file("a", &big), file("b", &big)]);
        assert_eq!(code, ErrorCode::LimitExceeded, "{msg}");
    }

    #[test]
    fn duplicate_and_garbage_entries_are_refused() {
        let (code, msg, _t) = refused(&[file("a", b"1"), file("./a", b"2")]);
        assert_eq!(code, ErrorCode::PolicyDenied, "{msg}");
        let tmp = tempfile::tempdir().unwrap();
        let err = unpack_on_host(&[7u8; 1024], &tmp.path().join("out")).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidSpec, "{err}");
    }
}
