//! Remote mode: the SDK driving a `stockaded` daemon instead of a provider in this
//! process. The daemon is named explicitly (`host`, else `$STOCKADE_HOST`): the SDK
//! does not pick up a default socket on its own, so `Stockade()` never depends on it.

use pyo3::prelude::*;
use stockade_client::{Host, RemoteProvider};

use crate::errors::to_py;
use crate::runtime::runtime;

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// The daemon to use: `host`, else `$STOCKADE_HOST`; `None` means embedded.
pub fn daemon_address(host: Option<String>) -> Option<String> {
    host.or_else(|| env("STOCKADE_HOST"))
}

/// Connects to the daemon at `host`, sending `token` (else `$STOCKADE_TOKEN`) on every
/// call; `backend` names the provider the daemon runs sandboxes with.
pub fn connect(
    py: Python<'_>,
    host: &str,
    token: Option<String>,
    backend: Option<String>,
) -> PyResult<RemoteProvider> {
    let token = token.or_else(|| env("STOCKADE_TOKEN"));
    let remote = py
        .detach(|| {
            runtime().block_on(async {
                let h = Host::parse(host)?;
                RemoteProvider::connect(&h, token.as_deref()).await
            })
        })
        .map_err(to_py)?;
    Ok(remote.with_backend(backend))
}
