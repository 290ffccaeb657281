//! Pause and resume of a native sandbox through the cgroup freezer: its processes
//! stop where they are and their memory stays in RAM (nothing is written to disk).
//!
//! The sandbox's cgroup2 group is frozen with `cgroup.freeze` when it has one (pure
//! v2 hosts, and root on hybrid hosts, where the monitor makes a cgroup2 group for
//! `cgroup.kill`); else its v1 `freezer` group (root on a v1 host without a cgroup2
//! mount). Rootless on a hybrid host the sandbox has neither (the delegated
//! hierarchies are memory, pids and cpu), so pause is refused with that reason.
//!
//! While paused, `<state dir>/paused` holds the unix ms the pause began: the agent
//! host refuses execs and file operations on its strength (the agent, PID 1, is
//! frozen too and would not answer), `inspect` shows the sandbox `paused`, and the
//! monitor does not count the time against the lifetime (see
//! [`PausedTime`](stockade_agent_proto::launch::PausedTime)).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use stockade_agent_proto::launch::{PAUSED_FILE, PAUSED_TOTAL_FILE, PausedTime};
use stockade_core::{Error, Result};

/// How long a freeze may take before it is undone and reported (a task stuck in
/// uninterruptible sleep, e.g. on a hung NFS mount, keeps a cgroup `FREEZING`).
const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

pub use stockade_cgroup::Freezer;

/// Freezes `freezer`'s group, waiting up to [`FREEZE_TIMEOUT`] for every process in it.
pub fn freeze(freezer: &Freezer) -> Result<()> {
    match freezer.freeze(FREEZE_TIMEOUT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(t)) => Err(Error::Timeout {
            operation: format!("freezing cgroup {}", t.dir.display()),
            after_ms: t.after.as_millis() as u64,
        }),
        Err((what, e)) => Err(Error::io(what, e)),
    }
}

/// Thaws `freezer`'s group.
pub fn thaw(freezer: &Freezer) -> Result<()> {
    freezer.thaw().map_err(|(what, e)| Error::io(what, e))
}

/// Why a sandbox without a freezer cannot be paused, and what to do.
fn no_freezer(id: &str) -> Error {
    let reason = if stockade_core::host::is_root() {
        format!("sandbox {id} has no cgroup2 group and no v1 freezer group to freeze")
    } else {
        format!(
            "sandbox {id} is rootless on a host with v1 cgroups: the hierarchies delegated to \
             this user (memory, pids, cpu) have no freezer, and rootless sandboxes get no \
             cgroup2 group there"
        )
    };
    Error::Unavailable {
        what: format!("pause of sandbox {id}"),
        reason,
        fix: "create the sandbox as root, or on a host with cgroup v2 delegated to this user \
              (stockade setup rootless)"
            .into(),
    }
}

/// Serializes pause and resume of one sandbox (any process): both read, then change,
/// the pause files.
fn lock(dir: &Path) -> Result<Flock<fs::File>> {
    let path = dir.join("pause.lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    Flock::lock(f, FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io(format!("cannot lock {}", path.display()), e.into()))
}

/// Whether the sandbox in `dir` is paused.
pub fn is_paused(dir: &Path) -> bool {
    dir.join(PAUSED_FILE).exists()
}

/// The pause files' protocol, shared by every provider that pauses (native's freezer,
/// `docker pause`, `runsc pause`): under the sandbox's pause lock, a second pause is
/// refused and the sandbox is marked paused before it is stopped, so no new exec
/// reaches its agent from then on. Dropping the guard keeps the mark; [`undo`] takes
/// it back when stopping failed.
///
/// [`undo`]: PauseMark::undo
pub struct PauseMark {
    _lock: Flock<fs::File>,
    marker: PathBuf,
}

impl PauseMark {
    /// Locks and marks sandbox `id` (files in `dir`) paused; `already` is what the
    /// provider itself knows of a pause (dockerd's state, say).
    pub fn begin(id: &str, dir: &Path, already: bool, now_ms: u64) -> Result<PauseMark> {
        let lock = lock(dir)?;
        if already || is_paused(dir) {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is already paused; resume it (stockade resume {id})"
            )));
        }
        let marker = dir.join(PAUSED_FILE);
        fs::write(&marker, now_ms.to_string())
            .map_err(|e| Error::io(format!("cannot write {}", marker.display()), e))?;
        Ok(PauseMark {
            _lock: lock,
            marker,
        })
    }

    /// The sandbox could not be stopped: it is not paused after all.
    pub fn undo(self) {
        let _ = fs::remove_file(&self.marker);
    }
}

/// The other half of [`PauseMark`]: under the pause lock, a resume of a sandbox that is
/// not paused is refused; once the provider has started it again, [`finish`] adds the
/// pause to the time the lifetime does not count and removes the mark.
///
/// [`finish`]: ResumeMark::finish
pub struct ResumeMark {
    _lock: Flock<fs::File>,
    dir: PathBuf,
}

impl ResumeMark {
    /// Locks sandbox `id` (files in `dir`) for its resume; `paused` is what the
    /// provider itself knows of a pause.
    pub fn begin(id: &str, dir: &Path, paused: bool) -> Result<ResumeMark> {
        let lock = lock(dir)?;
        if !paused && !is_paused(dir) {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is not paused; only a paused sandbox can be resumed"
            )));
        }
        Ok(ResumeMark {
            _lock: lock,
            dir: dir.to_path_buf(),
        })
    }

    /// Records the pause and removes the mark (the sandbox runs again).
    pub fn finish(self, now_ms: u64) -> Result<()> {
        let dir = &self.dir;
        let total = PausedTime::read(dir, now_ms).total_ms;
        let tmp = dir.join(".paused-ms.tmp");
        fs::write(&tmp, total.to_string())
            .and_then(|()| fs::rename(&tmp, dir.join(PAUSED_TOTAL_FILE)))
            .map_err(|e| Error::io(format!("cannot record the pause in {}", dir.display()), e))?;
        match fs::remove_file(dir.join(PAUSED_FILE)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("cannot unmark {}", dir.display()), e)),
        }
    }
}

/// Pauses the live sandbox `id` (state in `dir`, cgroups `cgroups`).
pub fn pause(id: &str, dir: &Path, cgroups: &[PathBuf], now_ms: u64) -> Result<()> {
    let freezer = Freezer::of(cgroups).ok_or_else(|| no_freezer(id))?;
    let mark = PauseMark::begin(id, dir, false, now_ms)?;
    if let Err(e) = freeze(&freezer) {
        mark.undo();
        return Err(e);
    }
    Ok(())
}

/// Resumes the paused sandbox `id`: thaws it and adds the pause to the time the
/// lifetime does not count.
pub fn resume(id: &str, dir: &Path, cgroups: &[PathBuf], now_ms: u64) -> Result<()> {
    let mark = ResumeMark::begin(id, dir, false)?;
    let freezer = Freezer::of(cgroups).ok_or_else(|| no_freezer(id))?;
    thaw(&freezer)?;
    mark.finish(now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_files_move_the_deadline_by_every_pause() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        assert_eq!(PausedTime::read(d, 1000), PausedTime::default());
        fs::write(d.join(PAUSED_TOTAL_FILE), "500").unwrap();
        fs::write(d.join(PAUSED_FILE), "1000").unwrap();
        let p = PausedTime::read(d, 1300);
        assert_eq!(p.since_ms, Some(1000));
        assert_eq!(p.total_ms, 800);
        assert_eq!(p.deadline(10_000), 10_800);
    }
}
