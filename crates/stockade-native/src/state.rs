//! Sandbox state on disk (`<state root>/<id>/`), destroy, and garbage collection.
//!
//! A live sandbox's monitor holds an exclusive `flock` on `<id>/lock` for its whole
//! life. A directory whose lock can be taken belongs to a dead monitor and is reaped:
//! its cgroups killed and removed, its network helper stopped, the directory deleted.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use stockade_agent_proto::launch::{LaunchPlan, SandboxState};
use stockade_core::{Error, GcReport, Result};

use crate::layout;
use crate::plan::CGROUP_PARENT;

/// How long a directory without state may be in the making before gc reaps it.
const GRACE: Duration = Duration::from_secs(30);

/// `$STOCKADE_STATE_DIR`, else `/run/stockade` for root, else
/// `$XDG_RUNTIME_DIR/stockade` (see `stockade_core::host`).
pub fn default_state_root() -> PathBuf {
    stockade_core::host::sandbox_state_dir()
}

/// Creates the state root (0700) and a sandbox directory with its empty `root/`.
pub fn make_dirs(root: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|e| Error::io(format!("cannot create {}", root.display()), e))?;
    if !stockade_core::host::is_root() {
        // Rootless, it may be in /tmp (no XDG_RUNTIME_DIR): a directory somebody else
        // made there, or a link, would hold our sandboxes' sockets. Refused.
        use std::os::unix::fs::MetadataExt;
        let me = stockade_core::host::euid();
        let meta = fs::symlink_metadata(root)
            .map_err(|e| Error::io(format!("cannot inspect {}", root.display()), e))?;
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(Error::Unavailable {
                what: "the native provider's state directory".into(),
                reason: format!(
                    "{} is not a directory of uid {me} closed to others (owner {}, mode {:o})",
                    root.display(),
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
                fix: format!(
                    "remove {} or set XDG_RUNTIME_DIR to a directory of your own",
                    root.display()
                ),
            });
        }
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    fs::DirBuilder::new()
        .mode(0o755)
        .create(dir.join("root"))
        .map_err(|e| Error::io(format!("cannot create {}/root", dir.display()), e))
}

/// Whether the monitor owning `dir` is alive (holds the lock).
fn monitor_alive(dir: &Path) -> bool {
    let Ok(f) = fs::OpenOptions::new().write(true).open(dir.join("lock")) else {
        return false;
    };
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => false,
        Err(_) => true,
    }
}

fn read_state(dir: &Path) -> Option<SandboxState> {
    serde_json::from_slice(&fs::read(dir.join("state.json")).ok()?).ok()
}

/// The pid and start ticks of the monitor of the sandbox in `dir`, when it wrote its
/// state.
pub fn monitor(dir: &Path) -> Option<(u32, u64)> {
    read_state(dir).map(|st| (st.monitor_pid, st.monitor_start_ticks))
}

/// The state of a live sandbox.
pub fn read_live(dir: &Path) -> Option<SandboxState> {
    let st = read_state(dir)?;
    monitor_alive(dir).then_some(st)
}

/// The ids of the live sandboxes under `root` (those [`live`] returns), in no order.
pub fn live_ids(root: &Path) -> Vec<String> {
    entries(root)
        .iter()
        .filter(|d| d.join("state.json").exists() && monitor_alive(d))
        .filter_map(|d| d.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .collect()
}

/// Every live sandbox under `root`, oldest first.
pub fn live(root: &Path) -> Vec<SandboxState> {
    let mut v: Vec<SandboxState> = entries(root).iter().filter_map(|d| read_live(d)).collect();
    v.sort_by_key(|s| s.created_at_ms);
    v
}

fn entries(root: &Path) -> Vec<PathBuf> {
    fs::read_dir(root)
        .map(|d| {
            d.flatten()
                // The type from the directory listing itself: no `stat` for each.
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Destroys the sandbox in `dir`: asks its monitor to tear down and waits; reaps by
/// hand what a dead monitor left. Idempotent.
pub fn destroy_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if let Some(st) = read_state(dir) {
        stop_monitor(
            st.monitor_pid,
            st.monitor_start_ticks,
            Duration::from_secs(10),
        );
    }
    if dir.exists() && !monitor_alive(dir) {
        let errors = reap_dir(dir);
        if let Some(e) = errors.first() {
            return Err(Error::Internal(e.clone()));
        }
    }
    Ok(())
}

/// Asks the monitor `pid` (started at `ticks`) to tear its sandbox down and waits up
/// to `wait` for it to end (a zombie counts). Through a pidfd where the kernel has
/// them: the signal goes to that very process and the wait is one `poll`. It used to
/// read `/proc/PID/stat` every 500 µs, which under a burst of destroys (each waiting
/// milliseconds for its teardown) was 8% of a daemon's CPU.
fn stop_monitor(pid: u32, ticks: u64, wait: Duration) {
    let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else {
        return;
    };
    // Opened first, then checked: the pidfd names the process that was checked.
    let pidfd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()).ok();
    if !stockade_sys::process::is_same_process(pid, ticks) {
        return;
    }
    let Some(pidfd) = pidfd else {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        let until = Instant::now() + wait;
        while stockade_sys::process::is_same_process(pid, ticks) && Instant::now() < until {
            std::thread::sleep(Duration::from_micros(500));
        }
        return;
    };
    if rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::TERM).is_err() {
        return; // already gone
    }
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let timeout = rustix::event::Timespec::try_from(left).ok();
        let mut fds = [rustix::event::PollFd::new(
            &pidfd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Err(rustix::io::Errno::INTR) if !left.is_zero() => continue,
            _ => return, // ended, or the wait is over
        }
    }
}

fn cgroups_of(dir: &Path) -> Vec<PathBuf> {
    if let Some(st) = read_state(dir) {
        return st.cgroups;
    }
    fs::read(dir.join("plan.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<LaunchPlan>(&b).ok())
        .map(|p| p.cgroups.dirs.into_iter().map(|d| d.path).collect())
        .unwrap_or_default()
}

/// Kills every process in a cgroup directory (a paused sandbox's too) and removes it.
fn kill_and_remove_cgroup(cg: &Path) -> Option<String> {
    if !cg.exists() {
        return None;
    }
    let cg = [cg.to_path_buf()];
    stockade_cgroup::kill(&cg, None);
    stockade_cgroup::remove(&cg, Duration::from_secs(3)).pop()
}

/// Removes everything a dead monitor left in `dir`. Returns problems met.
pub fn reap_dir(dir: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    for cg in cgroups_of(dir) {
        errors.extend(kill_and_remove_cgroup(&cg));
    }
    if let Some(pid) = fs::read_to_string(dir.join("net-helper.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        && fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "slirp4netns")
    {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    if let Err(e) = fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        errors.push(format!("cannot remove {}: {e}", dir.display()));
    }
    errors
}

fn older_than(p: &Path, age: Duration) -> bool {
    fs::metadata(p)
        .and_then(|m| m.modified())
        .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() > age)
        .unwrap_or(true)
}

/// Reaps every sandbox under `root` whose monitor is dead, and empty Stockade cgroups
/// that no sandbox owns.
pub fn gc(root: &Path) -> GcReport {
    let mut report = GcReport::default();
    let mut known = std::collections::HashSet::new();
    for dir in entries(root) {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        known.insert(id.clone());
        if monitor_alive(&dir) {
            continue;
        }
        let has_state = dir.join("state.json").exists();
        if !has_state && !older_than(&dir, GRACE) {
            continue; // being created right now
        }
        let errs = reap_dir(&dir);
        if errs.is_empty() {
            report.reaped.push(id);
        }
        report.errors.extend(errs);
    }
    // Cgroups whose sandbox directory is gone (e.g. the state root was wiped).
    for base in layout::detect().cgroups.roots() {
        let parent = if stockade_core::host::is_root() {
            CGROUP_PARENT.to_string()
        } else {
            crate::rootless::delegated_name(stockade_core::host::euid())
        };
        for cg in entries(&base.join(&parent)) {
            let id = cg
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let empty = fs::read_to_string(cg.join("cgroup.procs"))
                .map(|s| s.trim().is_empty())
                .unwrap_or(false);
            if !known.contains(&id)
                && empty
                && older_than(&cg, GRACE)
                && fs::remove_dir(&cg).is_ok()
                && !report.reaped.contains(&id)
            {
                report.reaped.push(id);
            }
        }
    }
    report
}
