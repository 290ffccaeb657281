//! `stockade-agent container`: PID 1 of a docker sandbox.
//!
//! The docker provider mounts a private directory at
//! [`CONTAINER_DIR`](stockade_agent_proto::launch::CONTAINER_DIR) (host side 0700,
//! root's) holding this binary, `config.json` and the socket this role listens on. The
//! container keeps only the capabilities an exec needs to drop to the sandbox user
//! (SETUID, SETGID, SETPCAP) and to kill what the exec started (KILL), and CHOWN for
//! [`seal`], given up once the socket is bound; every exec and
//! file operation then runs exactly as on the native provider (`server.rs`, `shim.rs`,
//! `fileop.rs`): the code ends up non-root with no capabilities at all, under
//! no_new_privs, landlock and the seccomp allowlist, and the socket's directory is
//! closed to it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stockade_agent_proto::launch::{CONTAINER_DIR, ContainerConfig, PausedTime};

use crate::server::{self, OomCounter};

/// Where the container's OOM kill counter is: cgroup v2 (own namespace), then v1.
const OOM_COUNTERS: &[(&str, &str)] = &[
    ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
];

/// Entry point of `stockade-agent container`.
pub fn main() -> i32 {
    match setup() {
        Ok((listener, config, oom)) => {
            lifetime_watchdog(config.expires_at_ms);
            server::serve(listener, config.exec, oom)
        }
        Err(e) => {
            // Shown by `docker logs` and reported by the provider.
            eprintln!("stockade-agent container: {e}");
            1
        }
    }
}

fn setup() -> Result<
    (
        std::os::unix::net::UnixListener,
        ContainerConfig,
        Option<OomCounter>,
    ),
    String,
> {
    if std::process::id() != 1 {
        return Err("this role runs as PID 1 of a container started by stockade".into());
    }
    let dir = Path::new(CONTAINER_DIR);
    let path = dir.join("config.json");
    let text = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let config: ContainerConfig = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a container config: {e}", path.display()))?;
    root_enterable(config.exec.uid, config.exec.gid)?;
    let oom = OOM_COUNTERS
        .iter()
        .find_map(|(p, key)| OomCounter::open(Path::new(p), key).ok());
    let sock = dir.join("agent.sock");
    let _ = fs::remove_file(&sock);
    let listener = std::os::unix::net::UnixListener::bind(&sock)
        .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
    // 0660: when the caller is not root, the directory is its and the docker group's
    // (setgid), so the socket is the group's and the caller connects through it. As
    // root, the directory is root's alone.
    if let Err(e) = fs::set_permissions(&sock, fs::Permissions::from_mode(0o660)) {
        // A host socket made through gVisor (`--host-uds=create`) refuses chmod; in a
        // directory only its owner enters, the socket's own mode guards nothing.
        let private = fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o077 == 0);
        if !private {
            return Err(format!("cannot restrict {}: {e}", sock.display()));
        }
    }
    seal(dir, &sock, config.exec.drop_caps)?;
    Ok((listener, config, oom))
}

/// Who the agent's directory belongs to once its socket is bound: not uid 0.
const SEALED_OWNER: u32 = 65534;

/// Hands the agent's directory (and, where the kernel allows, its socket) from uid 0
/// to [`SEALED_OWNER`] once the socket is bound, then gives up CAP_CHOWN for good
/// (the container grants it for this step only). Code running as root inside has no
/// capabilities: while uid 0 owned the directory it could unlink the socket and bind
/// its own, so that the host's next exec reached the code instead of the agent; now
/// it may only look names up there, and `config.json` is gone (read at start; it
/// would be found by name). A directory of a non-root caller is not uid 0's
/// inside, and stays as it is. With capabilities kept (the opt-out), CAP_CHOWN stays.
fn seal(dir: &Path, sock: &Path, drop_caps: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(dir).map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
    if m.uid() == 0 {
        // Read already; the directory will let any uid look names up.
        fs::remove_file(dir.join("config.json"))
            .map_err(|e| format!("cannot remove {}/config.json: {e}", dir.display()))?;
        let o = Some(SEALED_OWNER);
        fs::set_permissions(dir, fs::Permissions::from_mode(0o711))
            .map_err(|e| format!("cannot seal {}: {e}", dir.display()))?;
        // A host socket made through gVisor refuses chown, like chmod: the directory
        // alone keeps the code from replacing it.
        let _ = std::os::unix::fs::chown(sock, o, o);
        std::os::unix::fs::chown(dir, o, o).map_err(|e| {
            format!(
                "cannot hand {} to uid {SEALED_OWNER} (the container needs CAP_CHOWN): {e}",
                dir.display()
            )
        })?;
    }
    if drop_caps {
        stockade_sys::caps::drop_one("chown").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether the sandbox user (`uid`, `gid`) may search `/`, which every exec and file
/// operation needs; if not, why, with what `/` is (mode, owner, filesystem), so that a
/// container started without its image's root fails at once, clearly, instead of at
/// its first exec.
fn root_enterable(uid: u32, gid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if uid == 0 {
        return Ok(());
    }
    let m = fs::metadata("/").map_err(|e| format!("cannot stat /: {e}"))?;
    if searchable(m.mode(), m.uid(), m.gid(), uid, gid) {
        return Ok(());
    }
    let fs_type = rustix::fs::statfs("/")
        .map(|s| format!("{:#x}", s.f_type))
        .unwrap_or_else(|e| e.to_string());
    let entries = fs::read_dir("/").map(Iterator::count).unwrap_or(0);
    Err(format!(
        "{}: / is owner {}:{} mode {:o} on filesystem type {fs_type} with {entries} entries; \
         the sandbox user is {uid}:{gid}",
        stockade_agent_proto::launch::ROOT_NOT_ENTERABLE,
        m.uid(),
        m.gid(),
        m.mode() & 0o7777
    ))
}

/// Whether a directory of `mode` owned by `owner`:`group` may be searched by a user
/// without capabilities whose only group is `gid` (the sandbox user: each exec drops
/// every supplementary group).
fn searchable(mode: u32, owner: u32, group: u32, uid: u32, gid: u32) -> bool {
    let bit = if owner == uid {
        0o100
    } else if group == gid {
        0o010
    } else {
        0o001
    };
    mode & bit != 0
}

/// Ends the container (PID 1 exits) when its lifetime passes, even when no Stockade
/// process is left to destroy it.
fn lifetime_watchdog(expires_at_ms: u64) {
    std::thread::spawn(move || {
        // SIGCHLD belongs to the server's reaper thread (it blocks it before spawning
        // its own threads); a thread that left it unblocked would swallow it, and
        // every exec's shim would stay a zombie, holding a pid of the cap.
        let mut chld = nix::sys::signal::SigSet::empty();
        chld.add(nix::sys::signal::Signal::SIGCHLD);
        let _ = chld.thread_block();
        loop {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            // The time the sandbox was paused does not count (the provider's pause
            // files, in the directory the host shares with us); while paused, this
            // thread is stopped with the rest, and reads them once it runs again.
            let due = PausedTime::read(Path::new(CONTAINER_DIR), now).deadline(expires_at_ms);
            if now >= due {
                stockade_sys::process::exit_now(0);
            }
            std::thread::sleep(Duration::from_millis((due - now).min(1000)));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::searchable;

    #[test]
    fn search_permission_is_the_class_the_user_falls_in() {
        // The usual root, and the bare 0700 directory a container must not start on.
        assert!(searchable(0o755, 0, 0, 1000, 1000));
        assert!(!searchable(0o700, 0, 0, 1000, 1000));
        // Owner and group classes decide alone, as the kernel does: an owner without
        // the owner bit is refused even when others may search.
        assert!(searchable(0o700, 1000, 0, 1000, 1000));
        assert!(!searchable(0o071, 1000, 1000, 1000, 1000));
        assert!(searchable(0o710, 0, 1000, 1000, 1000));
        assert!(!searchable(0o701, 0, 1000, 1000, 1000));
    }
}
