//! The directory watcher ([`stockade_agent_proto::watch`]): inotify, run by an exec's
//! child in place of a program, once the exec's policy is in force (it is the sandbox
//! user, in landlock and seccomp), so it sees what the code would see and nothing
//! more. It writes [`WatchLine`]s on stdout and answers `sync N` lines on stdin.
//!
//! Events map as fsnotify (and so E2B's envd) maps them: created and moved-in entries
//! are `create`, a modification `write`, a deletion `remove`, a move away `rename`, an
//! attribute change `chmod`. Recursive, a directory that appears is watched at once
//! and what it already holds is reported as created (it was made before its watch
//! existed); symlinks are reported, never followed.

use std::collections::HashMap;
use std::io::Write;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use stockade_agent_proto::{WatchDir, WatchError, WatchKind, WatchLine};

/// What each watch reports, and how it is placed (never through a symlink, only on
/// directories).
fn flags() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
}

/// The kinds an inotify mask stands for, in the order they are reported.
fn kinds(mask: ReadFlags) -> impl Iterator<Item = WatchKind> {
    [
        (ReadFlags::CREATE, WatchKind::Create),
        (ReadFlags::MOVED_TO, WatchKind::Create),
        (ReadFlags::MODIFY, WatchKind::Write),
        (ReadFlags::DELETE, WatchKind::Remove),
        (ReadFlags::MOVED_FROM, WatchKind::Rename),
        (ReadFlags::ATTRIB, WatchKind::Chmod),
    ]
    .into_iter()
    .filter(move |(bit, _)| mask.contains(*bit))
    .map(|(_, k)| k)
}

fn failure(e: Errno) -> WatchError {
    match e {
        Errno::NOENT => WatchError::NotFound,
        Errno::NOTDIR => WatchError::NotADirectory,
        Errno::ACCESS | Errno::PERM => WatchError::PermissionDenied,
        Errno::MFILE | Errno::NFILE | Errno::NOSPC | Errno::NOMEM => WatchError::Exhausted,
        _ => WatchError::Io,
    }
}

struct Watcher {
    fd: OwnedFd,
    root: String,
    recursive: bool,
    /// Each watch's directory, relative to the root ("" for the root).
    dirs: HashMap<i32, String>,
    out: std::io::BufWriter<std::io::Stdout>,
}

impl Watcher {
    fn full(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.root.clone()
        } else {
            format!("{}/{rel}", self.root.trim_end_matches('/'))
        }
    }

    fn emit(&mut self, line: &WatchLine) {
        let _ = writeln!(self.out, "{}", line.to_json());
    }

    /// Watches the directory `rel` (and, recursive, the directories below it). With
    /// `report`, it just appeared: what it holds is reported as created.
    fn add_tree(&mut self, rel: &str, report: bool) -> Result<(), Errno> {
        let full = self.full(rel);
        let wd = inotify::add_watch(&self.fd, full.as_str(), flags())?;
        self.dirs.insert(wd, rel.to_string());
        if !self.recursive {
            return Ok(());
        }
        let Ok(entries) = std::fs::read_dir(&full) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if report {
                self.emit(&WatchLine::Event {
                    name: child.clone(),
                    kind: WatchKind::Create,
                });
            }
            // The entry's own type (a symlink to a directory is not one).
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                // A directory that went meanwhile, or one we may not read, is skipped.
                let _ = self.add_tree(&child, report);
            }
        }
        Ok(())
    }

    /// Reads and reports what inotify has queued, without waiting. Returns false once
    /// no watch is left.
    fn drain(&mut self) -> bool {
        let mut queued = Vec::new();
        {
            let mut buf = [MaybeUninit::<u8>::uninit(); 64 << 10];
            let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
            loop {
                match reader.next() {
                    Ok(ev) => queued.push((
                        ev.wd(),
                        ev.events(),
                        ev.file_name().map(|n| n.to_string_lossy().into_owned()),
                    )),
                    Err(Errno::INTR) => continue,
                    // AGAIN: nothing more is queued.
                    Err(_) => break,
                }
            }
        }
        for (wd, mask, name) in queued {
            if mask.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&wd);
                if self.dirs.is_empty() {
                    return false;
                }
                continue;
            }
            // Events on a watched directory itself (deleted) name no entry; its
            // IGNORED follows and ends that watch.
            let (Some(base), Some(name)) = (self.dirs.get(&wd).cloned(), name) else {
                continue;
            };
            let rel = if base.is_empty() {
                name
            } else {
                format!("{base}/{name}")
            };
            for kind in kinds(mask) {
                self.emit(&WatchLine::Event {
                    name: rel.clone(),
                    kind,
                });
            }
            if self.recursive
                && mask.contains(ReadFlags::ISDIR)
                && mask.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
            {
                let _ = self.add_tree(&rel, true);
            }
        }
        true
    }
}

/// Watches `w` until no watched directory is left (exit 0), or fails before it is
/// ready (exit 2, with a [`WatchLine::Failed`]). Returns the exit code.
pub fn run(w: &WatchDir) -> i32 {
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let fail = |out: &mut std::io::BufWriter<std::io::Stdout>, error, message: String| {
        let _ = writeln!(out, "{}", WatchLine::Failed { error, message }.to_json());
        let _ = out.flush();
        2
    };
    match rustix::fs::stat(w.path.as_str()) {
        Ok(st)
            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                == rustix::fs::FileType::Directory => {}
        Ok(_) => {
            return fail(
                &mut out,
                WatchError::NotADirectory,
                format!("path {} is not a directory", w.path),
            );
        }
        Err(e) => {
            let message = match failure(e) {
                WatchError::NotFound => format!("path {} does not exist", w.path),
                WatchError::PermissionDenied => {
                    format!("path {} cannot be read by the sandbox user", w.path)
                }
                _ => format!("cannot look at {}: {e}", w.path),
            };
            return fail(&mut out, failure(e), message);
        }
    }
    let fd = match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => {
            return fail(
                &mut out,
                failure(e),
                format!(
                    "cannot start watching (inotify_init1): {e}; the kernel's limit is fs.inotify.max_user_instances"
                ),
            );
        }
    };
    let mut me = Watcher {
        fd,
        root: w.path.clone(),
        recursive: w.recursive,
        dirs: HashMap::new(),
        out,
    };
    if let Err(e) = me.add_tree("", false) {
        let message = format!(
            "cannot watch {}: {e}{}",
            w.path,
            if failure(e) == WatchError::Exhausted {
                "; the kernel's limit is fs.inotify.max_user_watches"
            } else {
                ""
            }
        );
        return fail(&mut me.out, failure(e), message);
    }
    me.emit(&WatchLine::Ready);
    let _ = me.out.flush();
    let mut stdin_open = true;
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let (events, input) = {
            let stdin = std::io::stdin();
            let mut fds = vec![PollFd::new(&me.fd, PollFlags::IN)];
            if stdin_open {
                fds.push(PollFd::new(&stdin, PollFlags::IN));
            }
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(_) => return 1,
            }
            let input = fds.get(1).map(|f| !f.revents().is_empty());
            (!fds[0].revents().is_empty(), input.unwrap_or(false))
        };
        if events && !me.drain() {
            let _ = me.out.flush();
            return 0;
        }
        if input {
            let mut chunk = [0u8; 4096];
            match rustix::io::read(std::io::stdin(), &mut chunk) {
                Ok(0) | Err(_) => stdin_open = false,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line);
                if let Some(n) = text
                    .trim()
                    .strip_prefix("sync ")
                    .and_then(|n| n.parse().ok())
                {
                    // Everything queued so far, then the answer.
                    if !me.drain() {
                        let _ = me.out.flush();
                        return 0;
                    }
                    me.emit(&WatchLine::Synced(n));
                }
            }
        }
        if me.out.flush().is_err() {
            // Nobody reads the events any more.
            return 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_map_as_fsnotify_does() {
        let all: Vec<_> = kinds(ReadFlags::CREATE | ReadFlags::ISDIR).collect();
        assert_eq!(all, [WatchKind::Create]);
        assert_eq!(
            kinds(ReadFlags::MOVED_TO).collect::<Vec<_>>(),
            [WatchKind::Create]
        );
        assert_eq!(
            kinds(ReadFlags::MOVED_FROM).collect::<Vec<_>>(),
            [WatchKind::Rename]
        );
        assert_eq!(
            kinds(ReadFlags::MODIFY).collect::<Vec<_>>(),
            [WatchKind::Write]
        );
        assert_eq!(
            kinds(ReadFlags::ATTRIB).collect::<Vec<_>>(),
            [WatchKind::Chmod]
        );
        assert_eq!(
            kinds(ReadFlags::DELETE).collect::<Vec<_>>(),
            [WatchKind::Remove]
        );
        assert_eq!(failure(Errno::NOENT), WatchError::NotFound);
        assert_eq!(failure(Errno::NOSPC), WatchError::Exhausted);
    }
}
