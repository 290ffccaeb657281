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
        let Some(setup) = stockade_linux::network_setup(&spec.network, &self.dns_upstreams)? else {
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
                stockade_linux::egress::SANDBOX_CA.to_string(),
            ));
            files.push((
                write("ca-bundle.pem", bundle)?,
                stockade_linux::egress::SANDBOX_CA_BUNDLE.to_string(),
            ));
        }
        let env = setup.env;
        let applied = setup.policy_applied.unwrap_or_else(|| {
            stockade_core::Wall::on(
                stockade_core::WallKind::Network,
                "egress through slirp4netns in the container's own namespace (no docker bridge, no port forwards); host, private, link-local and metadata addresses rejected by nftables",
            )
        });
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
pub(crate) fn agent_socket(
    id: &str,
    sock: impl Into<PathBuf>,
    userns: Option<(u32, u32)>,
) -> UnixSocket {
    let s = UnixSocket::new(id, sock);
    if stockade_core::host::is_root() {
        s
    } else {
        // Under userns-remap the agent is the remapped root.
        s.with_peer_uid(userns.map_or(0, |(u, _)| u))
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
/// without capabilities. As root: `root` 0711 and `dir` 0700, root's, or the remapped
/// root's under userns-remap (`userns`). As another user (a member of the docker
/// socket's group): `root` 0700, the caller's, so no other host user reaches it; `dir`
/// 2770 for the docker socket's group, which the agent (root in the container,
/// without CAP_DAC_OVERRIDE) joins, and the group is returned; under userns-remap,
/// where that group means nothing in the container, `dir` stays 0700 with an ACL
/// letting the remapped root in and the caller reach what it makes there (sealed by
/// [`seal_private_dir`] once the agent listens).
pub(crate) fn make_private_dir(
    root: &Path,
    dir: &Path,
    docker_socket: &Path,
    userns: Option<(u32, u32)>,
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
        // Under userns-remap the agent, root inside, is the remapped root on the host:
        // the directory is its (the code, another uid, still cannot enter it).
        if let Some((u, g)) = userns
            && let Err(e) = std::os::unix::fs::chown(dir, Some(u), Some(g))
        {
            let _ = std::fs::remove_dir(dir);
            return Err(Error::io(
                format!(
                    "cannot give {} to the container's root (host uid {u})",
                    dir.display()
                ),
                e,
            ));
        }
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
    if let Some((u, _)) = userns {
        let shared = set_acl(dir, ACCESS_ACL, &[(ACL_USER, u, 7)])
            .and_then(|()| set_acl(dir, DEFAULT_ACL, &[(ACL_USER, me, 7), (ACL_USER, u, 7)]));
        if let Err(e) = shared {
            let _ = std::fs::remove_dir(dir);
            return Err(Error::Unavailable {
                what: "the docker provider".into(),
                reason: format!(
                    "cannot let the container's root (host uid {u}) into {} with an ACL: {e}",
                    dir.display()
                ),
                fix: "run as root, or keep XDG_RUNTIME_DIR on a filesystem with POSIX ACLs (tmpfs, ext4, xfs)".into(),
            });
        }
        return Ok(None);
    }
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

impl DockerLauncher {
    /// dockerd's user namespace, asked once: the host ids of uid and gid 0 in its
    /// containers, or `None` when they are the host's own.
    pub async fn userns(&self) -> Result<Option<(u32, u32)>> {
        let docker = self.docker().await?;
        self.userns
            .get_or_try_init(|| engine::userns(docker))
            .await
            .copied()
    }

    /// The host ids sandboxes run under, checked before a container is made: those of
    /// dockerd's userns-remap; without it, the host's own, only when allowed ([`HOST_IDS_ENV`]), since the code would then be
    /// the host's uid of the same number (an account of the host, often).
    pub(crate) async fn admit_ids(&self, user: stockade_spec::User) -> Result<Option<(u32, u32)>> {
        match self.userns().await? {
            Some(ids) => Ok(Some(ids)),
            None if self.allow_host_ids => Ok(None),
            None => {
                let account = stockade_core::host::account_of(user.uid)
                    .map(|n| format!(", the account {n}"))
                    .unwrap_or_default();
                Err(Error::Unavailable {
                    what: "the docker provider".into(),
                    reason: format!(
                        "dockerd runs containers in the host's user namespace, so the code (uid {}) would be the host's uid {}{account}",
                        user.uid, user.uid
                    ),
                    fix: format!(
                        "start dockerd with a user namespace: put \"userns-remap\": \"default\" in /etc/docker/daemon.json and restart dockerd; or set {HOST_IDS_ENV}=1 to accept host ids"
                    ),
                })
            }
        }
    }
}

/// Checks that the sandbox user, as host ids `uid`:`gid`, may write each of `spec`'s
/// writable mounts: under userns-remap those ids are not the ones that own the
/// caller's directories, and a write refused at the first file would say less.
pub(crate) fn check_writable_mounts(spec: &ValidatedSpec, uid: u32, gid: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    for m in spec.mounts.iter().filter(|m| m.writable) {
        let meta = std::fs::metadata(&m.host)
            .map_err(|e| Error::io(format!("cannot inspect {}", m.host.display()), e))?;
        let mode = meta.mode();
        let writable = (meta.uid() == uid && mode & 0o200 != 0)
            || (meta.gid() == gid && mode & 0o020 != 0)
            || mode & 0o002 != 0;
        if !writable {
            return Err(Error::InvalidRequest(format!(
                "the writable mount {} (owner {}:{}, mode {:o}) cannot be written by the sandbox user: dockerd's user namespace makes it host uid {uid}; give it to that user (chown {uid}:{gid} {}) or mount it read-only",
                m.host.display(),
                meta.uid(),
                meta.gid(),
                mode & 0o7777,
                m.host.display()
            )));
        }
    }
    Ok(())
}

/// The access ACL of a file (`system.posix_acl_access`).
const ACCESS_ACL: &str = "system.posix_acl_access";
/// The default ACL of a directory, inherited by what is made in it.
const DEFAULT_ACL: &str = "system.posix_acl_default";
/// The tag of a named user's entry.
const ACL_USER: u16 = 0x02;

/// Sets `path`'s ACL `name` to the owner's rwx, nothing for its group and others, and
/// `named` (tag, id, permission bits) with a mask of rwx: the kernel's xattr form
/// (version 2, entries ordered by tag, then id).
fn set_acl(path: &Path, name: &str, named: &[(u16, u32, u16)]) -> std::io::Result<()> {
    const UNDEFINED: u32 = u32::MAX;
    let mut entries = vec![(0x01u16, UNDEFINED, 7u16)];
    entries.extend_from_slice(named);
    entries.extend([
        (0x04, UNDEFINED, 0),
        (0x10, UNDEFINED, 7),
        (0x20, UNDEFINED, 0),
    ]);
    entries.sort_by_key(|&(tag, id, _)| (tag, id));
    let mut bytes = 2u32.to_le_bytes().to_vec();
    for (tag, id, perm) in entries {
        bytes.extend(tag.to_le_bytes());
        bytes.extend(perm.to_le_bytes());
        bytes.extend(id.to_le_bytes());
    }
    xattr::set(path, name, &bytes)
}

/// Seals the directory [`make_private_dir`] shared through an ACL with the remapped
/// root, once the agent listens in it: the remapped root (also what code running as
/// root in the container is) may still look names up and read, but no longer unlink or
/// bind, so it cannot replace the agent's socket; the container config, read, goes. A
/// no-op for the other layouts (as root, the agent seals its directory itself).
pub(crate) fn seal_private_dir(dir: &Path, userns: Option<(u32, u32)>) -> Result<()> {
    let (Some((u, _)), false) = (userns, stockade_core::host::is_root()) else {
        return Ok(());
    };
    // Read by the agent at its start; nothing of it is for later readers.
    let config = dir.join("config.json");
    std::fs::remove_file(&config)
        .map_err(|e| Error::io(format!("cannot remove {}", config.display()), e))?;
    set_acl(dir, ACCESS_ACL, &[(ACL_USER, u, 5)])
        .map_err(|e| Error::io(format!("cannot seal {}", dir.display()), e))
}
