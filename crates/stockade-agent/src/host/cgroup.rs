//! Cgroup creation, joining, killing and removal for a launch plan.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stockade_agent_proto::launch::{CgroupDir, CgroupPlan};

/// Settings whose name starts with `?` are optional: skipped when the file is missing
/// (e.g. `memory.memsw.limit_in_bytes` without swap accounting).
fn write_settings(dir: &CgroupDir) -> Result<(), String> {
    for (file, value) in &dir.settings {
        let (optional, file) = match file.strip_prefix('?') {
            Some(f) => (true, f),
            None => (false, file.as_str()),
        };
        let path = dir.path.join(file);
        if optional && !path.exists() {
            continue;
        }
        fs::write(&path, value)
            .map_err(|e| format!("cannot set {} = {value:?}: {e}", path.display()))?;
    }
    Ok(())
}

/// Creates the parents (if missing) and the sandbox's own groups with their limits.
pub fn create(plan: &CgroupPlan) -> Result<(), String> {
    for p in &plan.parents {
        fs::create_dir_all(&p.path)
            .map_err(|e| format!("cannot create cgroup {}: {e}", p.path.display()))?;
        write_settings(p)?;
    }
    for (i, d) in plan.dirs.iter().enumerate() {
        if let Err(e) = fs::create_dir(&d.path)
            .map_err(|e| format!("cannot create cgroup {}: {e}", d.path.display()))
            .and_then(|_| write_settings(d))
        {
            remove(&plan.dirs[..=i]);
            return Err(e);
        }
    }
    Ok(())
}

/// Moves `pid` into every group of the sandbox.
pub fn join(plan: &CgroupPlan, pid: u32) -> Result<(), String> {
    for d in &plan.dirs {
        let procs = d.path.join("cgroup.procs");
        fs::write(&procs, pid.to_string())
            .map_err(|e| format!("cannot move pid {pid} into {}: {e}", procs.display()))?;
    }
    Ok(())
}

/// The group of the sandbox that `pid` (its PID 1) is no longer in, if any: each
/// line of `/proc/PID/cgroup` names its group in one hierarchy, and each of the
/// sandbox's groups must hold it (or a group below). `None` also when `pid` is gone
/// or its groups cannot be read (then there is nothing to tell).
pub fn lost(plan: &CgroupPlan, pid: i32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let unified = if Path::new("/sys/fs/cgroup/unified").is_dir() {
        "/sys/fs/cgroup/unified"
    } else {
        "/sys/fs/cgroup"
    };
    let held: Vec<std::path::PathBuf> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let rel = path.trim_start_matches('/');
            let mount = if controllers.is_empty() {
                unified.to_string()
            } else {
                format!("/sys/fs/cgroup/{}", controllers.trim_start_matches("name="))
            };
            // Co-mounted controllers (`cpu,cpuacct`) are reached through links too.
            fs::canonicalize(Path::new(&mount).join(rel)).ok()
        })
        .collect();
    plan.dirs
        .iter()
        .find(|d| {
            // A group that is gone was emptied first: lost as well.
            fs::canonicalize(&d.path).map_or(true, |dir| !held.iter().any(|h| h.starts_with(&dir)))
        })
        .map(|d| d.path.display().to_string())
}

/// Kills every process of the sandbox through `cgroup.kill`, when there is one.
pub fn kill(plan: &CgroupPlan) -> bool {
    match &plan.kill_file {
        Some(f) => fs::write(f, "1").is_ok(),
        None => false,
    }
}

/// Thaws the sandbox's groups if paused (cgroup v2 `cgroup.freeze`, v1
/// `freezer.state`); groups without a freezer are left alone.
pub fn thaw(plan: &CgroupPlan) {
    stockade_cgroup::thaw_all(&paths(&plan.dirs));
}

fn paths(dirs: &[CgroupDir]) -> Vec<PathBuf> {
    dirs.iter().map(|d| d.path.clone()).collect()
}

/// Removes the groups, killing what is still listed in them, until they are gone
/// (up to 2 s). Returns the ones that could not be removed.
pub fn remove(dirs: &[CgroupDir]) -> Vec<String> {
    stockade_cgroup::remove(&paths(dirs), Duration::from_secs(2))
}
