//! The host side of a docker sandbox: its network prepared before the container
//! exists, the agent's socket, the container's logs, and its private directory.

use super::*;

/// A docker sandbox's network, prepared before its container exists.
pub(crate) struct NetSetup {
    /// What the container gets (files, environment, the applied line).
    pub(crate) input: plan::NetInput,
    /// The watcher's stdin: `LENGTH\n`, the network plan, the credentials if any.
    pub(crate) monitor_input: Vec<u8>,
}

impl DockerLauncher {
    /// For a spec with network: the native provider's network plan for this host (the
    /// same firewall, resolver, proxy and credentials), the files the container
    /// gets, written into the sandbox's network directory, and the monitor's input.
    pub(crate) fn prepare_network(
        &self,
        spec: &ValidatedSpec,
        id: &str,
    ) -> Result<Option<NetSetup>> {
        use std::os::unix::fs::DirBuilderExt;
        if spec.network == Network::None {
            return Ok(None);
        }
        if !stockade_core::host::is_root() {
            return Err(Error::Unavailable {
                what: "network egress on the docker provider".into(),
                reason:
                    "the container's network monitor enters its network namespace, which needs root"
                        .into(),
                fix: "run as root, or use the native provider (rootless too)".into(),
            });
        }
        let Some(setup) = stockade_native::network_setup(&spec.network, &self.dns_upstreams)?
        else {
            return Ok(None);
        };
        let dir = self.net_dir(id);
        let io = |what: &str, p: &Path, e| Error::io(format!("cannot {what} {}", p.display()), e);
        let parent = self.state_root.join(NET_DIRS);
        match std::fs::DirBuilder::new().mode(0o700).create(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("create", &parent, e)),
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io("create", &dir, e))?;
        let write = |name: &str, text: &str| -> Result<PathBuf> {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| io("write", &p, e))?;
            Ok(p)
        };
        let mut files = vec![(
            write("resolv.conf", &setup.resolv_conf)?,
            "/etc/resolv.conf".to_string(),
        )];
        // Where the monitor records a replaced policy (see `with_live_network`).
        let shown = serde_json::json!({ "spec": { "network": spec.network.redacted() } });
        write("state.json", &shown.to_string())?;
        if let Some((ca, bundle)) = &setup.ca {
            files.push((
                write("ca.pem", ca)?,
                stockade_native::egress::SANDBOX_CA.to_string(),
            ));
            files.push((
                write("ca-bundle.pem", bundle)?,
                stockade_native::egress::SANDBOX_CA_BUNDLE.to_string(),
            ));
        }
        let env = setup.env;
        let applied = setup.policy_applied.unwrap_or_else(|| "network: egress through slirp4netns in the container's own namespace (no docker bridge, no port forwards); host, private, link-local and metadata addresses rejected by nftables".to_string());
        let monitor_input = setup.monitor_input;
        Ok(Some(NetSetup {
            input: plan::NetInput {
                files,
                env,
                applied,
            },
            monitor_input,
        }))
    }
}

/// The agent's socket: when the caller is not root, its directory is the caller's, so
/// code running as the caller's uid could swap the socket; only root (the agent, PID 1
/// of the container) is talked to.
pub(crate) fn agent_socket(id: &str, sock: impl Into<PathBuf>) -> UnixSocket {
    let s = UnixSocket::new(id, sock);
    if stockade_core::host::is_root() {
        s
    } else {
        s.with_peer_uid(0)
    }
}

pub(crate) async fn logs(docker: &Docker, name: &str) -> String {
    use futures_util::StreamExt;
    let mut out = String::new();
    let mut s = docker.logs(
        name,
        Some(
            bollard::query_parameters::LogsOptionsBuilder::default()
                .stdout(true)
                .stderr(true)
                .build(),
        ),
    );
    while let Some(Ok(chunk)) = s.next().await {
        out.push_str(&chunk.to_string());
        if out.len() > 4096 {
            break;
        }
    }
    if out.is_empty() {
        "it exited without a message".into()
    } else {
        out
    }
}

/// Makes `root` and `dir`, the sandbox's directory the container sees at
/// `/.stockade`, closed to the code in the container, which runs as another uid
/// without capabilities. As root: `root` 0711 and `dir` 0700, root's. As another user
/// (a member of the docker socket's group): `root` 0700, the caller's, so no other
/// host user reaches it; `dir` 2770 for the docker socket's group, which the agent
/// (root in the container, without CAP_DAC_OVERRIDE) joins; returns that group.
pub(crate) fn make_private_dir(
    root: &Path,
    dir: &Path,
    docker_socket: &Path,
) -> Result<Option<u32>> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let io = |what: &str, p: &Path, e| Error::io(format!("cannot {what} {}", p.display()), e);
    if stockade_core::host::is_root() {
        std::fs::create_dir_all(root).map_err(|e| io("create", root, e))?;
        let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| io("create", dir, e))?;
        return Ok(None);
    }
    let me = stockade_core::host::euid();
    if let Some(parent) = root.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("create", root, e)),
    }
    // It may be in /tmp (no XDG_RUNTIME_DIR): somebody else's, or a link, is refused.
    let meta = std::fs::symlink_metadata(root).map_err(|e| io("inspect", root, e))?;
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(Error::Unavailable {
            what: "the docker provider's state directory".into(),
            reason: format!(
                "{} is not a directory private to uid {me} (owner {}, mode {:o})",
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
    let group = std::fs::metadata(docker_socket)
        .map_err(|e| io("inspect", docker_socket, e))?
        .gid();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| io("create", dir, e))?;
    let shared = std::os::unix::fs::chown(dir, None, Some(group))
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2770)));
    if let Err(e) = shared {
        let _ = std::fs::remove_dir(dir);
        return Err(Error::Unavailable {
            what: "the docker provider".into(),
            reason: format!(
                "cannot give {} to the group of {} (gid {group}): {e}",
                dir.display(),
                docker_socket.display()
            ),
            fix: "run as root, or as a member of the docker socket's group (usermod -aG docker USER, then log in again)".into(),
        });
    }
    Ok(Some(group))
}
