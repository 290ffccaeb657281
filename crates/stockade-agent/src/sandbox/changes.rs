//! `FileOp::Changes`: an OCI image layer of what a sandbox changed in its root,
//! against a read-only view of the tree it started from (a template build's result).
//!
//! An entry is changed when it is new, or when its type, mode, size, mtime, ctime or
//! link target differ from the same path below `base`. ctime carries the weight: a
//! file the sandbox never touched is the very inode `base` shows (the overlay's lower
//! layer), ctime and all, while a copy-up, a write, a chmod or a chown gives it a new
//! one. Directories are always walked (a merged directory takes its upper copy's
//! times); removals are whiteouts (`.wh.NAME`) in the parent.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use stockade_agent_proto::ErrorCode;
use stockade_agent_proto::files::FileResult;

use super::fileop::OpError;

type R<T> = Result<T, OpError>;

fn err(what: &str, path: &Path, e: io::Error) -> OpError {
    OpError(
        ErrorCode::Internal,
        format!("{what} {}: {e}", path.display()),
    )
}

/// A tar writer that counts what it wrote and stops at a cap.
struct Counted<W> {
    inner: W,
    written: u64,
    max: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() as u64 > self.max {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "over the cap"));
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Walk<'a> {
    root: &'a Path,
    base: &'a Path,
    skip: BTreeSet<PathBuf>,
    tar: tar::Builder<Counted<fs::File>>,
    max: u64,
}

/// Runs the operation: see [`stockade_agent_proto::files::FileOp::Changes`].
pub fn run(base: &str, out: &str, exclude: &[String], max_bytes: u64) -> R<FileResult> {
    run_in(
        Path::new("/"),
        Path::new(base),
        Path::new(out),
        exclude,
        max_bytes,
    )
}

/// The changes below `root` (`/` but in tests); `exclude` names paths below it as
/// absolute paths.
fn run_in(
    root: &Path,
    base: &Path,
    out: &Path,
    exclude: &[String],
    max_bytes: u64,
) -> R<FileResult> {
    for p in [base, out] {
        if !p.is_absolute() {
            return Err(OpError(
                ErrorCode::InvalidSpec,
                format!("{} is not an absolute path", p.display()),
            ));
        }
    }
    if !fs::metadata(base).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(OpError(
            ErrorCode::NotFound,
            format!("the base tree {} is not a directory", base.display()),
        ));
    }
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(out)
        .map_err(|e| err("cannot create", out, e))?;
    let mut skip: BTreeSet<PathBuf> = exclude
        .iter()
        .map(|x| root.join(x.trim_start_matches('/')))
        .collect();
    skip.insert(base.to_path_buf());
    skip.insert(out.to_path_buf());
    let mut tar = tar::Builder::new(Counted {
        inner: file,
        written: 0,
        max: max_bytes,
    });
    tar.follow_symlinks(false);
    tar.mode(tar::HeaderMode::Complete);
    let mut w = Walk {
        root,
        base,
        skip,
        tar,
        max: max_bytes,
    };
    let walked = w.dir(Path::new(""));
    let done = walked.and_then(|()| {
        w.tar
            .finish()
            .map_err(|e| w.write_err(out, e))
            .and_then(|()| {
                w.tar
                    .get_mut()
                    .inner
                    .sync_all()
                    .map_err(|e| err("cannot write", out, e))
            })
    });
    if let Err(e) = done {
        let _ = fs::remove_file(out);
        return Err(e);
    }
    Ok(FileResult::Done)
}

/// Whether `now` is not what `was` described.
fn differs(now: &fs::Metadata, was: &fs::Metadata, path: &Path, base_path: &Path) -> bool {
    if now.file_type() != was.file_type()
        || now.mode() != was.mode()
        || (now.ctime(), now.ctime_nsec()) != (was.ctime(), was.ctime_nsec())
        || (now.mtime(), now.mtime_nsec()) != (was.mtime(), was.mtime_nsec())
    {
        return true;
    }
    if now.is_file() && now.len() != was.len() {
        return true;
    }
    now.file_type().is_symlink() && fs::read_link(path).ok() != fs::read_link(base_path).ok()
}

impl Walk<'_> {
    fn write_err(&self, at: &Path, e: io::Error) -> OpError {
        if e.kind() == io::ErrorKind::StorageFull && e.to_string() == "over the cap" {
            return OpError(
                ErrorCode::LimitExceeded,
                format!("the changes are over {} bytes", self.max),
            );
        }
        err("cannot pack", at, e)
    }

    /// Walks the directory `/rel`.
    fn dir(&mut self, rel: &Path) -> R<()> {
        let here = self.root.join(rel);
        let mut names: Vec<std::ffi::OsString> = fs::read_dir(&here)
            .map_err(|e| err("cannot list", &here, e))?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();
        let was_dir = fs::symlink_metadata(self.base.join(rel))
            .map(|m| m.is_dir())
            .unwrap_or(false);
        for name in &names {
            let path = here.join(name);
            if self.skip.contains(&path) {
                continue;
            }
            let Ok(now) = fs::symlink_metadata(&path) else {
                continue;
            };
            let t = now.file_type();
            if !(t.is_dir() || t.is_file() || t.is_symlink()) {
                continue;
            }
            let rel_name = rel.join(name);
            let base_path = self.base.join(&rel_name);
            let was = if was_dir {
                fs::symlink_metadata(&base_path).ok()
            } else {
                None
            };
            if was
                .as_ref()
                .is_none_or(|was| differs(&now, was, &path, &base_path))
            {
                self.add(&path, &rel_name, &now)?;
            }
            if t.is_dir() {
                self.dir(&rel_name)?;
            }
        }
        if was_dir {
            self.whiteouts(rel, &names)?;
        }
        Ok(())
    }

    /// A whiteout for each entry of `base/rel` that `/rel` no longer has.
    fn whiteouts(&mut self, rel: &Path, kept: &[std::ffi::OsString]) -> R<()> {
        let below = self.base.join(rel);
        let Ok(entries) = fs::read_dir(&below) else {
            return Ok(());
        };
        let mut gone: Vec<std::ffi::OsString> = entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| !kept.contains(n))
            .filter(|n| !self.skip.contains(&self.root.join(rel).join(n)))
            .collect();
        gone.sort();
        for name in gone {
            let mut wh = std::ffi::OsString::from(".wh.");
            wh.push(&name);
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(0);
            h.set_mode(0o600);
            h.set_mtime(0);
            let at = rel.join(&wh);
            self.tar
                .append_data(&mut h, &at, io::empty())
                .map_err(|e| self.write_err(&at, e))?;
        }
        Ok(())
    }

    fn add(&mut self, path: &Path, rel: &Path, m: &fs::Metadata) -> R<()> {
        let r = if m.is_file() {
            // Opened without following or blocking: an entry swapped for a FIFO or a
            // link since the walk saw it is left out, never waited on.
            match fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
            {
                Ok(mut f) if f.metadata().is_ok_and(|m| m.is_file()) => {
                    self.tar.append_file(rel, &mut f)
                }
                _ => return Ok(()),
            }
        } else {
            self.tar.append_path_with_name(path, rel)
        };
        r.map_err(|e| self.write_err(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_that_changed_is_a_change() {
        let d = std::env::temp_dir().join(format!("stockade-changes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("base")).unwrap();
        fs::write(d.join("base/same"), "s").unwrap();
        fs::write(d.join("base/other"), "o").unwrap();
        let same = fs::symlink_metadata(d.join("base/same")).unwrap();
        let p = d.join("base/same");
        assert!(!differs(&same, &same, &p, &p));
        fs::copy(d.join("base/same"), d.join("copy")).unwrap();
        let copy = fs::symlink_metadata(d.join("copy")).unwrap();
        assert!(
            differs(&copy, &same, &d.join("copy"), &p),
            "a copy is a new inode"
        );
        std::os::unix::fs::symlink("a", d.join("l1")).unwrap();
        std::os::unix::fs::symlink("b", d.join("l2")).unwrap();
        let l1 = fs::symlink_metadata(d.join("l1")).unwrap();
        assert!(
            differs(&l1, &l1, &d.join("l1"), &d.join("l2")),
            "another target"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    /// `base` a tree, `root` the same inodes (hard links) with changes made.
    #[test]
    fn a_layer_holds_what_changed_and_whiteouts_for_what_went() {
        let d = std::env::temp_dir().join(format!("stockade-layer-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let (base, root) = (d.join("base"), d.join("root"));
        for dir in ["etc", "usr/lib/gone", "usr/bin"] {
            fs::create_dir_all(base.join(dir)).unwrap();
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        for f in [
            "etc/kept",
            "etc/replaced",
            "etc/removed",
            "usr/bin/tool",
            "usr/lib/gone/x",
        ] {
            fs::write(base.join(f), f).unwrap();
            fs::hard_link(base.join(f), root.join(f)).unwrap();
        }
        fs::remove_file(root.join("etc/replaced")).unwrap();
        fs::write(root.join("etc/replaced"), "new").unwrap();
        fs::remove_file(root.join("etc/removed")).unwrap();
        fs::remove_dir_all(root.join("usr/lib/gone")).unwrap();
        fs::write(root.join("etc/added"), "added").unwrap();
        std::os::unix::fs::symlink("../etc/added", root.join("usr/bin/link")).unwrap();
        fs::create_dir_all(root.join("proc/1")).unwrap();
        let out = d.join("layer.tar");
        let res = run_in(&root, &base, &out, &["/proc".into()], 1 << 20);
        assert!(res.is_ok(), "{:?}", res.err().map(|e| e.1));
        let mut names = Vec::new();
        let mut a = tar::Archive::new(fs::File::open(&out).unwrap());
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            names.push(e.path().unwrap().to_string_lossy().into_owned());
        }
        for want in [
            "etc/added",
            "etc/replaced",
            "etc/.wh.removed",
            "usr/lib/.wh.gone",
            "usr/bin/link",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
        for not in [
            "etc/kept",
            "usr/bin/tool",
            "usr/lib/gone/x",
            "proc",
            "proc/1",
        ] {
            assert!(!names.iter().any(|n| n == not), "{not} in {names:?}");
        }
        // Over the cap: refused by name, nothing left.
        let _ = fs::remove_file(&out);
        let e = run_in(&root, &base, &out, &[], 100).err().unwrap();
        assert_eq!(e.0, ErrorCode::LimitExceeded, "{}", e.1);
        assert!(!out.exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
