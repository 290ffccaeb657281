//! Directory watching, an exec the agent serves itself ([`crate::ExecRequest::watch`]).
//!
//! The watcher runs in the exec's place, as the exec's user, after every step of the
//! exec's policy (user, landlock, seccomp), and reports through the exec's streams:
//!
//! - stdout: one [`WatchLine`] a line, as JSON. [`WatchLine::Ready`] once every watch
//!   is in place (changes made after it are reported), then an
//!   [`WatchLine::Event`] per change, named relative to the watched directory.
//!   Before `Ready`, a failure is one [`WatchLine::Failed`] and the exec exits 2.
//! - stdin, when kept open: a line `sync N` is answered by [`WatchLine::Synced`]`(N)`
//!   once every event already queued is written (a change whose call returned before
//!   the line was sent has queued its events), so a caller can ask "everything up to
//!   now" without sleeping.
//!
//! The watch ends when the watched directory goes (deleted or moved away), or when
//! the exec is killed.

use serde::{Deserialize, Serialize};

/// The output cap of a watch ([`crate::ExecRequest::output_limit_bytes`]): the first
/// half of it is what reaches the caller live, so a watch reports about 128 MiB of
/// events over its life (a million or so).
pub const OUTPUT_LIMIT: u64 = 256 << 20;

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchDir {
    /// An absolute path in the sandbox.
    pub path: String,
    /// Watch every directory below it too, including the ones made later (whose
    /// entries made before their watch existed are reported as created).
    pub recursive: bool,
}

/// What happened to an entry (fsnotify's names, as most watchers report them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchKind {
    /// Created, or moved in.
    Create,
    /// Its content changed.
    Write,
    /// Deleted.
    Remove,
    /// Moved away (or renamed; the new name is a `Create`).
    Rename,
    /// Its mode, owner or times changed.
    Chmod,
}

/// Why a watch could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchError {
    /// The path does not exist.
    NotFound,
    /// The path is not a directory.
    NotADirectory,
    /// The exec's user may not read it.
    PermissionDenied,
    /// The kernel's inotify limits (instances or watches per user) are reached.
    Exhausted,
    /// Another failure of the host; the message says which.
    Io,
}

/// One line of a watcher's stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchLine {
    /// Every watch is in place.
    Ready,
    /// A change: the entry's path relative to the watched directory, and what happened.
    Event { name: String, kind: WatchKind },
    /// Every event queued before `sync N` was read is above this line.
    Synced(u64),
    /// The watch could not start; the exec exits 2.
    Failed { error: WatchError, message: String },
}

impl WatchLine {
    /// The line as the watcher writes it (JSON, no newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line, or `None` when it is not a watcher's line.
    pub fn parse(line: &[u8]) -> Option<WatchLine> {
        serde_json::from_slice(line).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_as_json() {
        let lines = [
            WatchLine::Ready,
            WatchLine::Event {
                name: "a/b.txt".into(),
                kind: WatchKind::Create,
            },
            WatchLine::Synced(7),
            WatchLine::Failed {
                error: WatchError::NotADirectory,
                message: "/x is not a directory".into(),
            },
        ];
        for l in lines {
            assert_eq!(WatchLine::parse(l.to_json().as_bytes()), Some(l));
        }
        assert_eq!(
            WatchLine::Event {
                name: "f".into(),
                kind: WatchKind::Write
            }
            .to_json(),
            r#"{"event":{"name":"f","kind":"write"}}"#
        );
        assert_eq!(WatchLine::parse(b"not json"), None);
    }
}
