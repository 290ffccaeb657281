//! Cgroups on a Linux host, v1 and v2, for every process of Stockade that touches them:
//! the providers on the host (native, docker's pause, gvisor, microvm) and the agent's
//! monitor, which builds a native sandbox's groups and removes them at its end.
//!
//! Nothing here knows of sandboxes, plans or error policies: paths in, facts out. The
//! callers decide what a failure means (the host layer turns them into `Error`s; the
//! monitor reports them on its control socket).
//!
//! - [`Layout`]: how the hierarchies are mounted ([`Layout::parse`] reads a mountinfo);
//!   [`mount_points`] every cgroup mount, v1 and v2.
//! - [`Freezer`]: a group's freezer, `cgroup.freeze` (v2) or `freezer.state` (v1).
//! - [`usage`]: CPU time and memory from `cpu.stat`/`cpuacct.usage` and the memory files.
//! - [`kill`] and [`remove`]: every process of a set of groups SIGKILLed, and the groups
//!   removed once their tasks have exited.

mod freezer;
mod layout;

pub use freezer::{FreezeTimeout, Freezer};
pub use layout::{Layout, mount_points};

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The value of `key` in a `key value` file (`cpu.stat`, `memory.stat`,
/// `memory.events`).
pub fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// The processes listed in a group's `cgroup.procs` (none when it cannot be read).
pub fn procs(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
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

/// Kills every process in `dirs`: `first` (the one that makes the others, a sentry or
/// a VMM) before the rest, then `cgroup.kill` where the kernel has it (v2), then each
/// listed process SIGKILLed. A frozen group (a paused sandbox: the v1 freezer holds
/// even SIGKILL until thawed) is thawed after the kill, so none of its code runs again.
/// No freeze first: a v1 freeze of ptrace-stopped tasks can stay `FREEZING`.
pub fn kill(dirs: &[PathBuf], first: Option<u32>) {
    if let Some(pid) = first {
        sigkill(pid);
    }
    for d in dirs {
        let f = d.join("cgroup.kill");
        if f.exists() {
            let _ = fs::write(&f, "1");
        }
    }
    for d in dirs {
        for pid in procs(d) {
            sigkill(pid);
        }
    }
    thaw_all(dirs);
}

/// Thaws each of `dirs` that has a freezer (v2 or v1); the others are left alone.
pub fn thaw_all(dirs: &[PathBuf]) {
    for d in dirs {
        if let Some(f) = Freezer::of(std::slice::from_ref(d)) {
            let _ = f.thaw();
        }
    }
}

/// Removes `dirs` (missing ones count as removed), SIGKILLing what is still listed in
/// one that cannot be removed yet, until all are gone or `timeout` passes. A group can
/// be removed once its tasks have exited (zombies waiting for their parent no longer
/// count). Returns one line for each group left.
pub fn remove(dirs: &[PathBuf], timeout: Duration) -> Vec<String> {
    let until = Instant::now() + timeout;
    let mut left: Vec<(PathBuf, String)> =
        dirs.iter().map(|d| (d.clone(), String::new())).collect();
    loop {
        left.retain_mut(|(d, why)| match fs::remove_dir(&*d) {
            Ok(()) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                for pid in procs(d) {
                    sigkill(pid);
                }
                *why = format!("cannot remove cgroup {}: {e}", d.display());
                true
            }
        });
        if left.is_empty() || Instant::now() > until {
            return left.into_iter().map(|(_, why)| why).collect();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What a set of groups says of their CPU time and memory; `None` where none of them
/// keeps the counter (a rootless sandbox on a v1 host has no CPU counter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time in microseconds: v2 `cpu.stat` `usage_usec`, else v1 `cpuacct.usage`.
    pub cpu_us: Option<u64>,
    /// Memory `(used, page cache, limit)` in bytes (limit 0: none).
    pub memory: Option<(u64, u64, u64)>,
}

fn num(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn cpu_us(d: &Path) -> Option<u64> {
    if let Ok(t) = fs::read_to_string(d.join("cpu.stat"))
        && let Some(v) = counter(&t, "usage_usec")
    {
        return Some(v);
    }
    num(&d.join("cpuacct.usage")).map(|ns| ns / 1000)
}

fn memory(d: &Path) -> Option<(u64, u64, u64)> {
    if let Some(cur) = num(&d.join("memory.current")) {
        let stat = fs::read_to_string(d.join("memory.stat")).unwrap_or_default();
        // "max" (no cap) reads as 0: unknown.
        let max = num(&d.join("memory.max")).unwrap_or(0);
        return Some((cur, counter(&stat, "file").unwrap_or(0), max));
    }
    let used = num(&d.join("memory.usage_in_bytes"))?;
    let stat = fs::read_to_string(d.join("memory.stat")).unwrap_or_default();
    let cache = counter(&stat, "total_cache")
        .or_else(|| counter(&stat, "cache"))
        .unwrap_or(0);
    Some((
        used,
        cache,
        num(&d.join("memory.limit_in_bytes")).unwrap_or(0),
    ))
}

/// The CPU time and memory of the groups `dirs`, each from the first group that keeps it.
pub fn usage(dirs: &[PathBuf]) -> Usage {
    Usage {
        cpu_us: dirs.iter().find_map(|d| cpu_us(d)),
        memory: dirs.iter().find_map(|d| memory(d)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_key() {
        let t = "usage_usec 1234\nuser_usec 1000\noom_kill 3\n";
        assert_eq!(counter(t, "usage_usec"), Some(1234));
        assert_eq!(counter(t, "oom_kill"), Some(3));
        assert_eq!(counter(t, "usage"), None);
        assert_eq!(counter("", "oom_kill"), None);
    }

    #[test]
    fn v2_and_v1_usage_is_read() {
        let t = tempfile::tempdir().unwrap();
        let (v2, mem1) = (t.path().join("u"), t.path().join("m"));
        fs::create_dir(&v2).unwrap();
        fs::create_dir(&mem1).unwrap();
        fs::write(v2.join("cpu.stat"), "usage_usec 1234\nuser_usec 1000\n").unwrap();
        fs::write(mem1.join("memory.usage_in_bytes"), "4096\n").unwrap();
        fs::write(mem1.join("memory.stat"), "cache 10\ntotal_cache 1024\n").unwrap();
        fs::write(mem1.join("memory.limit_in_bytes"), "8192\n").unwrap();
        let u = usage(&[mem1.clone(), v2.clone()]);
        assert_eq!(u.cpu_us, Some(1234));
        assert_eq!(u.memory, Some((4096, 1024, 8192)));
        fs::write(v2.join("memory.current"), "100\n").unwrap();
        fs::write(v2.join("memory.stat"), "anon 50\nfile 40\n").unwrap();
        fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(usage(std::slice::from_ref(&v2)).memory, Some((100, 40, 0)));
        assert_eq!(usage(&[mem1]).cpu_us, None);
        assert_eq!(usage(&[]), Usage::default());
    }

    #[test]
    fn removing_counts_missing_groups_as_gone_and_names_what_stays() {
        let t = tempfile::tempdir().unwrap();
        let (gone, full) = (t.path().join("gone"), t.path().join("full"));
        fs::create_dir(&full).unwrap();
        // A plain directory with a file in it cannot be removed by rmdir: it stands for
        // a group whose tasks do not exit.
        fs::write(full.join("x"), "").unwrap();
        let left = remove(&[gone, full.clone()], Duration::from_millis(20));
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].contains(&full.display().to_string()), "{left:?}");
        fs::remove_file(full.join("x")).unwrap();
        assert!(remove(std::slice::from_ref(&full), Duration::ZERO).is_empty());
        assert!(!full.exists());
    }
}
