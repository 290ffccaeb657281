//! The host's side of a microVM: workspace shares and their virtiofsd, the VMM's
//! leased ids, private files, and the kills and cgroup removal of teardown.

use super::*;

/// Kills a VMM left without its supervisor: the QEMU process whose command line
/// names this sandbox's serial socket.
/// Where the shared directories of `spec` can be served from: the virtiofsd binary
/// (`None` when nothing is shared). Each must be an existing directory.
pub(crate) fn shares_check(spec: &stockade_core::ValidatedSpec) -> Result<Option<PathBuf>> {
    if spec.mounts.is_empty() {
        return Ok(None);
    }
    for m in &spec.mounts {
        match std::fs::metadata(&m.host) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::InvalidRequest(format!(
                    "mount source {} is not a directory: the microvm provider shares \
                     directories (virtiofs); mount the directory that holds it",
                    m.host.display()
                )));
            }
            Err(e) => {
                return Err(Error::InvalidRequest(format!(
                    "mount source {} cannot be used: {e}",
                    m.host.display()
                )));
            }
        }
    }
    find_virtiofsd()
        .map(Some)
        .ok_or_else(|| Error::Unavailable {
            what: "workspaces on the microvm provider".into(),
            reason: "no virtiofsd on this host (looked at STOCKADE_VIRTIOFSD, in /usr/libexec, \
                 /usr/lib/qemu, /usr/local/libexec and PATH)"
                .into(),
            fix:
                "install virtiofsd (Debian 13: apt-get install virtiofsd; Debian 12 with QEMU 7.2: \
              apt-get install qemu-system-common; otherwise cargo install virtiofsd and set \
              STOCKADE_VIRTIOFSD to it)"
                    .into(),
        })
}

/// The virtiofsd binary, if the host has one: `STOCKADE_VIRTIOFSD`, else the
/// distribution's (`/usr/libexec`), QEMU 7.2's (`/usr/lib/qemu`), one built from
/// crates.io (`/usr/local/libexec`, where the microvm setup installs it), or PATH's.
pub(crate) fn find_virtiofsd() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("STOCKADE_VIRTIOFSD") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let mut candidates = vec![
        PathBuf::from("/usr/libexec/virtiofsd"),
        PathBuf::from(C_VIRTIOFSD),
        PathBuf::from("/usr/local/libexec/virtiofsd"),
    ];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("virtiofsd")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// Where QEMU up to 7.2 installs its own virtiofsd (written in C, with the legacy
/// `-o` options). Every other virtiofsd is the Rust one (QEMU 8 dropped the C one),
/// which takes long options.
pub(crate) const C_VIRTIOFSD: &str = "/usr/lib/qemu/virtiofsd";

/// The command line serving `m` on `socket`: virtiofsd confined to the directory
/// (its own mount, pid and network namespaces, `pivot_root` into it, so no `..` or
/// symlink reaches past it); for a read-only mount, in a private mount namespace
/// where the directory is a read-only bind of itself, so the host side refuses
/// writes too, whatever the guest kernel does.
pub(crate) fn virtiofsd_command(
    virtiofsd: Option<&Path>,
    m: &stockade_spec::Mount,
    socket: &str,
) -> Vec<String> {
    let bin = virtiofsd.unwrap_or(Path::new(C_VIRTIOFSD));
    let source = m.host.display().to_string();
    let serve: Vec<String> = if bin == Path::new(C_VIRTIOFSD) {
        vec![
            bin.display().to_string(),
            format!("--socket-path={socket}"),
            "-o".into(),
            format!("source={source}"),
            "-o".into(),
            "sandbox=namespace".into(),
            "-o".into(),
            "cache=auto".into(),
            "-o".into(),
            "no_posix_lock".into(),
            "-o".into(),
            "no_xattr".into(),
        ]
    } else {
        // The Rust virtiofsd: no xattrs and no POSIX locks by default.
        vec![
            bin.display().to_string(),
            format!("--socket-path={socket}"),
            format!("--shared-dir={source}"),
            "--sandbox=namespace".into(),
            "--cache=auto".into(),
        ]
    };
    if m.writable {
        return serve;
    }
    let mut v: Vec<String> = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind -o ro \"$1\" \"$1\" && shift && exec \"$@\"",
        "sh",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    v.push(source);
    v.extend(serve);
    v
}

/// Kills a virtiofsd a crashed supervisor left, found by its socket's path.
pub(crate) fn kill_daemon_of(socket: &Path) {
    kill_matching(&format!("--socket-path={}", socket.display()));
}

/// The VMM's own directory in a sandbox's (owned by its uid: its sockets and
/// console log).
pub const VMM_DIR: &str = "vmm";

/// Where the VMM's host uid and gid come from: the native provider's id pool
/// (`STOCKADE_ID_RANGE`), one range leased per running VM.
pub(crate) fn vmm_ids() -> Result<stockade_agent_proto::launch::IdPoolPlan> {
    match stockade_linux::idpool::IdPool::from_env()?.plan() {
        stockade_agent_proto::launch::UsernsPlan::Pool(p) => Ok(p),
        stockade_agent_proto::launch::UsernsPlan::Rootless(_) => Err(Error::Internal(
            "the id pool planned a rootless user namespace".into(),
        )),
    }
}

/// Writes a root-only file (0600): the sandbox's directory is searchable by its
/// VMM's gid, and these hold the spec.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // One written before by an older version may be 0644.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

/// A file's text, empty if it is missing, unreadable or a symbolic link.
pub(crate) fn read_no_follow(path: &Path) -> String {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        let _ = f.read_to_string(&mut text);
    }
    text
}

pub(crate) fn kill_vmm_of(serial_socket: &Path) {
    kill_matching(&format!("path={},", serial_socket.display()));
}

/// SIGKILLs every process whose command line contains `needle`.
pub(crate) fn kill_matching(needle: &str) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle)
            && let Some(p) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

/// Removes the VMM's cgroups once it is killed, killing what is still listed, for up
/// to 10 s: a killed QEMU frees its guest's memory before its group can go, which on a
/// loaded host was seen to take more than 2 s.
pub(crate) async fn remove_cgroups(cgroups: Vec<PathBuf>) {
    let _ = tokio::task::spawn_blocking(move || {
        stockade_cgroup::remove(&cgroups, Duration::from_secs(10))
    })
    .await;
}
