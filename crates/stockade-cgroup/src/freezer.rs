//! A group's freezer: its processes stop where they are, their memory stays in RAM.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A freeze that did not finish in time (and was undone): a task in uninterruptible
/// sleep, on a hung NFS mount say, keeps a group `FREEZING`.
#[derive(Debug)]
pub struct FreezeTimeout {
    /// The group.
    pub dir: PathBuf,
    /// How long the freeze was waited for.
    pub after: Duration,
}

/// A group's freezer: one cgroup directory and which interface it speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Freezer {
    /// cgroup v2: `cgroup.freeze` (0/1) and `frozen` in `cgroup.events`.
    V2(PathBuf),
    /// cgroup v1 `freezer` controller: `freezer.state` (`THAWED`/`FREEZING`/`FROZEN`).
    V1(PathBuf),
}

impl Freezer {
    /// The freezer among a sandbox's cgroup directories: a v2 group first, else a v1
    /// freezer group; `None` when it has neither.
    pub fn of(cgroups: &[PathBuf]) -> Option<Freezer> {
        let with = |f: &str| cgroups.iter().find(|d| d.join(f).exists()).cloned();
        with("cgroup.freeze")
            .map(Freezer::V2)
            .or_else(|| with("freezer.state").map(Freezer::V1))
    }

    /// The cgroup directory.
    pub fn dir(&self) -> &Path {
        match self {
            Freezer::V2(d) | Freezer::V1(d) => d,
        }
    }

    /// The control file, and what freezes and thaws.
    fn control(&self) -> (PathBuf, &'static str, &'static str) {
        match self {
            Freezer::V2(d) => (d.join("cgroup.freeze"), "1", "0"),
            Freezer::V1(d) => (d.join("freezer.state"), "FROZEN", "THAWED"),
        }
    }

    /// Whether every process of the group is frozen now.
    pub fn is_frozen(&self) -> bool {
        match self {
            Freezer::V2(d) => fs::read_to_string(d.join("cgroup.events"))
                .is_ok_and(|t| t.lines().any(|l| l.trim() == "frozen 1")),
            Freezer::V1(d) => {
                fs::read_to_string(d.join("freezer.state")).is_ok_and(|t| t.trim() == "FROZEN")
            }
        }
    }

    /// Freezes the group and waits until every process in it is frozen; undoes the
    /// freeze when that does not happen within `timeout`. The outer error is the
    /// control file's write, which names the file.
    pub fn freeze(
        &self,
        timeout: Duration,
    ) -> Result<Result<(), FreezeTimeout>, (String, std::io::Error)> {
        let (file, on, _) = self.control();
        fs::write(&file, on)
            .map_err(|e| (format!("cannot write {on} to {}", file.display()), e))?;
        let until = Instant::now() + timeout;
        while !self.is_frozen() {
            if Instant::now() > until {
                let _ = self.thaw();
                return Ok(Err(FreezeTimeout {
                    dir: self.dir().to_path_buf(),
                    after: timeout,
                }));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(Ok(()))
    }

    /// Thaws the group; the error names the control file.
    pub fn thaw(&self) -> Result<(), (String, std::io::Error)> {
        let (file, _, off) = self.control();
        fs::write(&file, off).map_err(|e| (format!("cannot write {off} to {}", file.display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v2_group_is_preferred_to_a_v1_freezer_and_none_is_none() {
        let t = tempfile::tempdir().unwrap();
        let (v1, v2, plain) = (t.path().join("v1"), t.path().join("v2"), t.path().join("p"));
        for d in [&v1, &v2, &plain] {
            fs::create_dir(d).unwrap();
        }
        fs::write(v1.join("freezer.state"), "THAWED").unwrap();
        fs::write(v2.join("cgroup.freeze"), "0").unwrap();
        assert_eq!(
            Freezer::of(&[v1.clone(), v2.clone()]),
            Some(Freezer::V2(v2.clone()))
        );
        assert_eq!(
            Freezer::of(&[plain.clone(), v1.clone()]),
            Some(Freezer::V1(v1.clone()))
        );
        assert_eq!(Freezer::of(&[plain]), None);
    }

    #[test]
    fn a_freeze_that_does_not_take_is_undone_at_its_timeout() {
        // A v2 group whose `cgroup.events` never says `frozen 1` (a plain directory):
        // the freeze is written, waited for, then undone.
        let t = tempfile::tempdir().unwrap();
        let control = t.path().join("cgroup.freeze");
        fs::write(&control, "0").unwrap();
        let f = Freezer::of(&[t.path().to_path_buf()]).unwrap();
        let timeout = f.freeze(Duration::from_millis(5)).unwrap().unwrap_err();
        assert_eq!(
            (timeout.dir.as_path(), timeout.after),
            (t.path(), Duration::from_millis(5))
        );
        assert_eq!(fs::read_to_string(&control).unwrap(), "0");
        fs::write(t.path().join("cgroup.events"), "populated 1\nfrozen 1\n").unwrap();
        assert!(f.freeze(Duration::from_millis(5)).unwrap().is_ok());
        assert_eq!(fs::read_to_string(&control).unwrap(), "1");
        let (what, _) = Freezer::V2(t.path().join("gone")).thaw().unwrap_err();
        assert!(what.contains("gone/cgroup.freeze"), "{what}");
    }
}
