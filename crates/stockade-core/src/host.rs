//! Facts about the host process every crate needs, kept once: who we run as, where
//! Stockade keeps its data and its runtime state, fresh random ids, the clock.

use std::path::PathBuf;

pub use stockade_agent_proto::now_ms;

/// The effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The spec label recording the uid that created a sandbox in-process (the CLI and
/// sessions set it), so `stockade rm --all` run by root removes only root's own.
pub const OWNER_UID_LABEL: &str = "stockade.uid";

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    euid() == 0
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Stockade's data directory (images, runtimes, caches, keys): `$STOCKADE_HOME` when
/// set; `/var/lib/stockade` for root; else `$XDG_DATA_HOME/stockade` or
/// `~/.local/share/stockade`; `/tmp/stockade-home-UID` when there is no home.
pub fn stockade_home() -> PathBuf {
    if let Some(h) = env_dir("STOCKADE_HOME") {
        return h;
    }
    if is_root() {
        return PathBuf::from("/var/lib/stockade");
    }
    if let Some(x) = env_dir("XDG_DATA_HOME") {
        return x.join("stockade");
    }
    match env_dir("HOME") {
        Some(h) => h.join(".local/share/stockade"),
        None => PathBuf::from(format!("/tmp/stockade-home-{}", euid())),
    }
}

/// The runtime directory named `name` (state that dies with the machine: sandboxes'
/// sockets and records): `/run/NAME` for root, else `$XDG_RUNTIME_DIR/NAME`, else
/// `/tmp/NAME-UID`.
pub fn runtime_dir(name: &str) -> PathBuf {
    if is_root() {
        return PathBuf::from("/run").join(name);
    }
    match env_dir("XDG_RUNTIME_DIR") {
        Some(d) => d.join(name),
        None => PathBuf::from(format!("/tmp/{name}-{}", euid())),
    }
}

/// Where the native provider keeps its sandboxes: `$STOCKADE_STATE_DIR`, else
/// [`runtime_dir`]`("stockade")`.
pub fn sandbox_state_dir() -> PathBuf {
    env_dir("STOCKADE_STATE_DIR").unwrap_or_else(|| runtime_dir("stockade"))
}

/// Where the daemon keeps its state: [`runtime_dir`]`("stockaded")`.
pub fn daemon_state_dir() -> PathBuf {
    runtime_dir("stockaded")
}

/// `n` bytes from the kernel's random source, as lowercase hex.
///
/// Panics only if the kernel's random source fails, which no supported host does: an
/// id that might repeat is worse than no id.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::getrandom(&mut b).expect("the kernel's random source (getrandom) failed");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A fresh sandbox id: `sb-` and 12 hex digits.
pub fn new_sandbox_id() -> String {
    format!("sb-{}", random_hex(6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fresh_and_plain() {
        let a = new_sandbox_id();
        let b = new_sandbox_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 15);
        assert!(a[3..].bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_eq!(random_hex(8).len(), 16);
    }

    #[test]
    fn runtime_dirs_follow_the_user() {
        let d = runtime_dir("x");
        if is_root() {
            assert_eq!(d, PathBuf::from("/run/x"));
        } else {
            assert!(
                d.ends_with("x") || d.ends_with(format!("x-{}", euid())),
                "{d:?}"
            );
        }
    }
}
