//! How the host reaches a sandbox's agent: a [`Transport`] opens one byte stream per
//! request (the protocol is hello + one request per connection).
//!
//! Today every launcher gives a [`UnixSocket`] in a host directory the code inside
//! cannot see. Anything that yields a byte stream can be a transport: a container's or
//! a VM's stdio, a virtio-serial port, vsock.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use stockade_core::{Error, Result};
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to an agent.
pub trait AgentStream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> AgentStream for T {}

/// One open connection to an agent.
pub type Connection = Box<dyn AgentStream>;

/// Opens connections to the agent of one sandbox.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Opens one connection. A sandbox that is not there is `NotFound`.
    async fn connect(&self) -> Result<Connection>;
}

#[async_trait]
impl Transport for Box<dyn Transport> {
    async fn connect(&self) -> Result<Connection> {
        (**self).connect().await
    }
}

/// The agent's unix socket on the host (`agent.sock` in the sandbox's state dir).
#[derive(Clone, Debug)]
pub struct UnixSocket {
    id: String,
    path: PathBuf,
    peer_uid: Option<u32>,
}

impl UnixSocket {
    /// The socket at `path` of sandbox `id` (named in errors).
    pub fn new(id: impl Into<String>, path: impl Into<PathBuf>) -> UnixSocket {
        UnixSocket {
            id: id.into(),
            path: path.into(),
            peer_uid: None,
        }
    }

    /// Talks only to a listener running as host uid `uid` (`SO_PEERCRED`): where the
    /// socket's directory is reachable by the sandbox's code (a caller that is not
    /// root sharing its uid), a socket the code put in its place is refused.
    pub fn with_peer_uid(mut self, uid: u32) -> UnixSocket {
        self.peer_uid = Some(uid);
        self
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait]
impl Transport for UnixSocket {
    async fn connect(&self) -> Result<Connection> {
        match tokio::net::UnixStream::connect(&self.path).await {
            Ok(s) => {
                if let Some(want) = self.peer_uid {
                    let got = s.peer_cred().map(|c| c.uid()).map_err(|e| {
                        Error::io(format!("cannot check {}", self.path.display()), e)
                    })?;
                    if got != want {
                        return Err(Error::PolicyDenied(format!(
                            "the socket of sandbox {} ({}) is served by uid {got}, not by its \
                             agent (uid {want}): the sandbox replaced it; destroy it",
                            self.id,
                            self.path.display()
                        )));
                    }
                }
                Ok(Box::new(s))
            }
            Err(e) => Err(match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    Error::NotFound {
                        kind: "sandbox",
                        id: self.id.clone(),
                    }
                }
                _ => Error::io(format!("cannot connect to {}", self.path.display()), e),
            }),
        }
    }
}
