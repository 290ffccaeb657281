//! Sessions: named persistent workspaces, each with at most one live sandbox. In
//! this process a [`SessionManager`] keeps them; in remote mode the daemon does, with
//! its own session spec.

use std::sync::Arc;

use napi::Result;
use stockade::{Provider, Sandbox, SessionManager};
use stockade_client::RemoteProvider;

use crate::errors::{json, to_js};

/// Where the sessions live.
pub enum Sessions {
    Local(SessionManager),
    Remote {
        daemon: RemoteProvider,
        /// The daemon as a provider, to attach to a session's sandbox.
        provider: Arc<dyn Provider>,
    },
}

impl Sessions {
    /// The session's sandbox, created when none is live.
    pub async fn get(self, name: String) -> Result<Sandbox> {
        match self {
            Sessions::Local(manager) => manager.get_or_create(&name).await.map_err(to_js),
            Sessions::Remote { daemon, provider } => {
                let info = daemon.session_get(&name).await.map_err(to_js)?;
                Sandbox::attach(provider, &info.id).await.map_err(to_js)
            }
        }
    }

    /// Ends the session's sandbox; `delete` also removes the workspace.
    pub async fn end(self, name: String, delete: bool) -> Result<()> {
        let done = match (self, delete) {
            (Sessions::Local(m), false) => m.release(&name).await,
            (Sessions::Local(m), true) => m.delete(&name).await,
            (Sessions::Remote { daemon, .. }, false) => daemon.session_release(&name).await,
            (Sessions::Remote { daemon, .. }, true) => daemon.session_delete(&name).await,
        };
        done.map_err(to_js)
    }

    /// The sessions as JSON.
    pub async fn list_json(self) -> Result<String> {
        match self {
            Sessions::Local(m) => json(&m.list().await.map_err(to_js)?),
            Sessions::Remote { daemon, .. } => json(&daemon.session_list().await.map_err(to_js)?),
        }
    }
}
