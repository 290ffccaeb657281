//! Connecting to dockerd, and what its failures mean for the user.

use std::path::{Path, PathBuf};

use bollard::{API_DEFAULT_VERSION, Docker};
use stockade_core::Error;

/// The Engine API socket: `$DOCKER_HOST` when it is a `unix://` address, else
/// `/var/run/docker.sock`.
pub fn socket_path() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => PathBuf::from(&h["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

const INSTALL: &str = "install Docker (Debian: apt-get install docker.io) and start dockerd \
                       (systemctl start docker, or run dockerd)";

/// Connects and negotiates the API version (dockerd 20.10 speaks 1.41).
pub async fn connect(socket: &Path) -> Result<Docker, Error> {
    let unavailable = |reason: String, fix: &str| Error::Unavailable {
        what: "the docker provider".into(),
        reason,
        fix: fix.into(),
    };
    match std::fs::metadata(socket) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(unavailable(
                format!(
                    "dockerd is not running: its socket {} does not exist",
                    socket.display()
                ),
                INSTALL,
            ));
        }
        _ => {}
    }
    // Permission problems show at connect; bollard reports them late and vaguely.
    if let Err(e) = std::os::unix::net::UnixStream::connect(socket) {
        return Err(match e.kind() {
            std::io::ErrorKind::PermissionDenied => unavailable(
                format!("permission denied on {}", socket.display()),
                "run as root, or add your user to the docker group (usermod -aG docker $USER) and log in again",
            ),
            std::io::ErrorKind::ConnectionRefused => unavailable(
                format!(
                    "dockerd is stopped: nothing accepts connections on {}",
                    socket.display()
                ),
                INSTALL,
            ),
            _ => unavailable(
                format!("cannot connect to {}: {e}", socket.display()),
                INSTALL,
            ),
        });
    }
    let docker = Docker::connect_with_unix(&socket.display().to_string(), 120, API_DEFAULT_VERSION)
        .map_err(|e| unavailable(format!("cannot use {}: {e}", socket.display()), INSTALL))?;
    docker.negotiate_version().await.map_err(|e| {
        unavailable(
            format!("dockerd on {} does not answer: {e}", socket.display()),
            INSTALL,
        )
    })
}

/// The HTTP status of a dockerd error, if it is one.
pub fn status(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// A dockerd error about `what`.
pub fn docker_error(what: &str, e: bollard::errors::Error) -> Error {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => Error::Internal(format!(
            "dockerd refused to {what} ({status_code}): {message}"
        )),
        // The connection itself failed: dockerd stopped or is restarting under us.
        e @ (bollard::errors::Error::HyperLegacyError { .. }
        | bollard::errors::Error::HyperResponseError { .. }
        | bollard::errors::Error::IOError { .. }
        | bollard::errors::Error::RequestTimeoutError
        | bollard::errors::Error::SocketNotFoundError(_)) => Error::Unavailable {
            what: "the docker provider".into(),
            reason: format!("dockerd does not answer (stopped or restarting): cannot {what}: {e}"),
            fix: "start dockerd (systemctl start docker, or run dockerd), then try again".into(),
        },
        other => Error::Internal(format!("cannot {what}: {other}")),
    }
}

/// The user namespace dockerd puts its containers in: `Some((uid, gid))`, the host ids
/// of uid and gid 0 inside, when it runs with `userns-remap`; `None` when containers
/// share the host's ids (dockerd's default).
pub async fn userns(docker: &Docker) -> Result<Option<(u32, u32)>, Error> {
    let info = docker
        .info()
        .await
        .map_err(|e| docker_error("describe itself (docker info)", e))?;
    remapped_root(
        info.security_options.as_deref().unwrap_or_default(),
        info.docker_root_dir.as_deref().unwrap_or_default(),
    )
}

/// [`userns`] from `docker info`'s security options and root directory: with
/// `userns-remap`, dockerd keeps its state in `ROOT/UID.GID`, named for the host ids of
/// the remapped root.
pub fn remapped_root(
    security_options: &[String],
    root_dir: &str,
) -> Result<Option<(u32, u32)>, Error> {
    let remapped = security_options
        .iter()
        .any(|o| o.split(',').any(|kv| kv == "name=userns"));
    if !remapped {
        return Ok(None);
    }
    let last = Path::new(root_dir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ids = last
        .split_once('.')
        .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)))
        .filter(|&(u, g)| u != 0 && g != 0);
    ids.map(Some).ok_or_else(|| Error::Unavailable {
        what: "the docker provider".into(),
        reason: format!(
            "dockerd says it remaps user namespaces, but its root directory {root_dir:?} does not \
             end in UID.GID, so the host ids of its containers are unknown"
        ),
        fix: "start dockerd with --userns-remap and its default --data-root layout".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: &[&str]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_remapped_dockerd_names_its_root_in_its_directory() {
        let remapped = opts(&[
            "name=apparmor",
            "name=seccomp,profile=default",
            "name=userns",
        ]);
        assert_eq!(
            remapped_root(&remapped, "/var/lib/docker/231072.231072").unwrap(),
            Some((231_072, 231_072))
        );
        assert_eq!(
            remapped_root(&remapped, "/srv/docker/100000.200000/").unwrap(),
            Some((100_000, 200_000))
        );
        // Without the option, the host's ids, whatever the directory.
        let plain = opts(&["name=seccomp,profile=default", "name=cgroupns"]);
        assert_eq!(remapped_root(&plain, "/var/lib/docker").unwrap(), None);
        assert_eq!(remapped_root(&[], "/var/lib/docker/1.1").unwrap(), None);
        // Remapped, but the ids cannot be read: refused, not guessed.
        for dir in ["/var/lib/docker", "/var/lib/docker/0.0", "/x/a.b", ""] {
            let e = remapped_root(&remapped, dir).unwrap_err().to_string();
            assert!(e.contains("UID.GID"), "{dir}: {e}");
        }
    }
}
