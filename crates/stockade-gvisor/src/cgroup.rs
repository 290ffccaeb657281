//! A gVisor sandbox's host cgroups (runsc makes `<parent>/<id>` in every hierarchy
//! from the bundle's `cgroupsPath`): finding them, killing everything in them and
//! removing them (destroy).
//!
//! runsc puts the whole sandbox in them: the sentry (`runsc-sandbox`), the gofer and,
//! on the ptrace platform, the sentry's stub processes. Nothing inside gVisor makes a
//! host process itself (the sentry does, for it), so once the sentry and then every
//! listed process are SIGKILLed ([`stockade_cgroup::kill`], the sentry first), nothing
//! of the sandbox runs again.

use std::path::PathBuf;
use std::time::Duration;

pub use stockade_cgroup::kill;

/// How long the killed processes may take to die before the removal gives up.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The existing cgroup directories of sandbox `id` (`<mount>/<parent>/<id>` in each
/// hierarchy).
pub fn dirs(parent: &str, id: &str) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    stockade_cgroup::mount_points(&mountinfo)
        .into_iter()
        .map(|m| m.join(parent).join(id))
        .filter(|d| d.is_dir())
        .collect()
}

/// Removes the (killed) groups, killing what is still listed, until all are gone or
/// [`REMOVE_TIMEOUT`] passes. Returns what could not be removed.
pub fn remove(dirs: &[PathBuf]) -> Option<String> {
    stockade_cgroup::remove(dirs, REMOVE_TIMEOUT).pop()
}
