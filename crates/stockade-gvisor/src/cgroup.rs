//! A gVisor sandbox's host cgroups (runsc makes `<parent>/<id>` in every hierarchy
//! from the bundle's `cgroupsPath`): finding them, killing everything in them and
//! removing them (destroy).
//!
//! runsc puts the whole sandbox in them: the sentry (`runsc-sandbox`), the gofer and,
//! on the ptrace platform, the sentry's stub processes. Nothing inside gVisor makes a
//! host process itself (the sentry does, for it), so once the sentry and then every
//! listed process are SIGKILLed, nothing of the sandbox runs again.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stockade_native::freezer::Freezer;

/// How long the killed processes may take to die before the removal gives up.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Mount points of the host's cgroup hierarchies (v1 and v2), from a mountinfo text.
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = right.split(' ').next().unwrap_or("");
        if (fstype == "cgroup" || fstype == "cgroup2")
            && let Some(m) = left.split(' ').nth(4)
        {
            v.push(PathBuf::from(m));
        }
    }
    v
}

/// The existing cgroup directories of sandbox `id` (`<mount>/<parent>/<id>` in each
/// hierarchy).
pub fn dirs(parent: &str, id: &str) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mount_points(&mountinfo)
        .into_iter()
        .map(|m| m.join(parent).join(id))
        .filter(|d| d.is_dir())
        .collect()
}

/// The sandbox's freezer: its cgroup v2 group, else its v1 `freezer` group.
pub fn freezer(dirs: &[PathBuf]) -> Option<Freezer> {
    Freezer::of(dirs)
}

fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn sigkill(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Kills every process in `dirs`: `cgroup.kill` where the kernel has it (v2), and
/// each listed process SIGKILLed, `first` (the sentry) before the rest: only the
/// sentry makes host processes (the ptrace platform's stubs, which also die with
/// it as their tracer), so nothing new appears once it is dead, and [`remove`] kills
/// whatever is still listed until the groups are empty. A group found frozen (v1
/// freezer: its tasks die only once thawed) is thawed after the kill. No freeze
/// first: a v1 freeze of ptrace-stopped tasks can stay `FREEZING` (measured: one
/// destroy in 40 waited out a 10 s freeze timeout).
pub fn kill(dirs: &[PathBuf], first: Option<u32>) {
    if let Some(pid) = first {
        sigkill(pid);
    }
    for d in dirs {
        let f = d.join("cgroup.kill");
        if f.exists() {
            let _ = std::fs::write(&f, "1");
        }
    }
    for d in dirs {
        for pid in procs(d) {
            sigkill(pid);
        }
    }
    if let Some(f) = freezer(dirs) {
        let _ = f.thaw();
    }
}

/// Removes the (killed) groups, killing what is still listed, until all are gone or
/// [`REMOVE_TIMEOUT`] passes. A group can be removed once its tasks have exited
/// (zombies waiting for their parent no longer count). Returns what could not be
/// removed.
pub fn remove(dirs: &[PathBuf]) -> Option<String> {
    let until = Instant::now() + REMOVE_TIMEOUT;
    let mut left: Vec<PathBuf> = dirs.to_vec();
    loop {
        let mut last = None;
        left.retain(|d| match std::fs::remove_dir(d) {
            Ok(()) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                for pid in procs(d) {
                    sigkill(pid);
                }
                last = Some(format!("cannot remove cgroup {}: {e}", d.display()));
                true
            }
        });
        if left.is_empty() {
            return None;
        }
        if Instant::now() > until {
            return last;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_and_v2_hierarchies_only() {
        let mi = "25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw\n\
                  32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                  33 31 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                  40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                  41 31 0:38 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n";
        assert_eq!(
            mount_points(mi),
            vec![
                PathBuf::from("/sys/fs/cgroup/cpu"),
                PathBuf::from("/sys/fs/cgroup/systemd"),
                PathBuf::from("/sys/fs/cgroup/unified"),
            ]
        );
        assert!(mount_points("").is_empty());
    }
}
