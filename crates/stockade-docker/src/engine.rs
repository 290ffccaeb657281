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
