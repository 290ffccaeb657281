//! The client: a provider chosen by name in this process, or a `stockaded` daemon
//! (remote mode); creating and finding sandboxes, preparing code for a language, and
//! sessions. The logic is `stockade_bindings`' (shared with the Python bindings);
//! this is its JavaScript face.

use napi::Result;
use napi_derive::napi;
use stockade::{Sandbox, SandboxSpec};
use stockade_bindings::create_options;

use crate::errors::{json, spec_from_json, to_js};
use crate::sandbox::SandboxHandle;

/// A provider, chosen by name, with its image store under `home`; or a daemon.
#[napi]
pub struct Client {
    inner: stockade_bindings::Client,
}

/// What `runCode` runs: the argv, and the spec adjusted for the language (the image
/// its interpreter comes from when the host lacks it) as JSON.
#[napi(object)]
pub struct PreparedCode {
    pub argv: Vec<String>,
    pub spec_json: String,
}

/// Connects to the daemon at `host` (`unix:///path`, `host:port`, `https://...`),
/// sending `token` on every call; `provider` names the daemon's backend.
#[napi]
// napi-derive registers the function only outside `cfg(test)`.
#[cfg_attr(test, allow(dead_code))]
pub async fn connect(
    host: String,
    token: Option<String>,
    provider: Option<String>,
    home: Option<String>,
) -> Result<Client> {
    let inner = stockade_bindings::Client::connect(&host, token, provider, home.map(Into::into))
        .await
        .map_err(to_js)?;
    Ok(Client { inner })
}

#[napi]
impl Client {
    /// The provider `provider` (default: `$STOCKADE_PROVIDER` or native) in this
    /// process, with its image store and state under `home`.
    #[napi(constructor)]
    pub fn new(provider: Option<String>, home: Option<String>) -> Result<Client> {
        let inner = stockade_bindings::Client::embedded(provider.as_deref(), home.map(Into::into))
            .map_err(to_js)?;
        Ok(Client { inner })
    }

    /// The provider that runs the sandboxes.
    #[napi(getter)]
    pub fn provider(&self) -> String {
        self.inner.backend.clone()
    }

    /// The daemon's address in remote mode, else `null`.
    #[napi(getter)]
    pub fn remote(&self) -> Option<String> {
        self.inner.remote_host()
    }

    /// Creates a sandbox from a JSON spec. `owned`: it dies with this process.
    #[napi]
    pub async fn create(&self, spec_json: String, owned: bool) -> Result<SandboxHandle> {
        let spec = spec_from_json(&spec_json)?;
        let opts = create_options(owned);
        let sb = Sandbox::create(self.inner.provider.clone(), spec, opts)
            .await
            .map_err(to_js)?;
        Ok(SandboxHandle::new(sb))
    }

    /// A handle to an existing sandbox.
    #[napi]
    pub async fn attach(&self, id: String) -> Result<SandboxHandle> {
        let sb = Sandbox::attach(self.inner.provider.clone(), &id)
            .await
            .map_err(to_js)?;
        Ok(SandboxHandle::new(sb))
    }

    /// The live sandboxes, as JSON.
    #[napi]
    pub async fn list(&self) -> Result<String> {
        json(&self.inner.provider.list().await.map_err(to_js)?)
    }

    /// The named snapshots the provider keeps, as JSON.
    #[napi]
    pub async fn snapshots(&self) -> Result<String> {
        json(&self.inner.provider.snapshots().await.map_err(to_js)?)
    }

    /// Removes the named snapshot `name`.
    #[napi]
    pub async fn remove_snapshot(&self, name: String) -> Result<()> {
        self.inner.remove_snapshot(&name).await.map_err(to_js)
    }

    /// Starts a new sandbox from the named snapshot `name` (digest-checked first).
    /// `owned`: it dies with this process.
    #[napi]
    pub async fn create_from_snapshot(&self, name: String, owned: bool) -> Result<SandboxHandle> {
        let opts = create_options(owned);
        let sb = Sandbox::from_snapshot(self.inner.provider.clone(), &name, opts)
            .await
            .map_err(to_js)?;
        Ok(SandboxHandle::new(sb))
    }

    /// Reaps expired and orphaned sandboxes; the report as JSON.
    #[napi]
    pub async fn gc(&self) -> Result<String> {
        json(&self.inner.provider.gc().await.map_err(to_js)?)
    }

    /// The provider's host checks as JSON; fails (`unavailable`) when unusable.
    #[napi]
    pub async fn probe(&self) -> Result<String> {
        json(&self.inner.provider.probe().await.map_err(to_js)?)
    }

    /// Resolves `language` for this provider: the [`PreparedCode`] that runs `code`.
    #[napi]
    pub async fn prepare_code(
        &self,
        language: String,
        code: String,
        spec_json: String,
    ) -> Result<PreparedCode> {
        let (argv, spec) = self
            .inner
            .prepare_code(language, code, spec_from_json(&spec_json)?)
            .await
            .map_err(to_js)?;
        Ok(PreparedCode {
            argv,
            spec_json: json(&spec)?,
        })
    }

    /// The session called `name`: its sandbox, created from `spec_json` with the
    /// workspace mounted at /work when none is live (the daemon's own spec in remote
    /// mode). `idle_timeout_secs` 0 keeps the default.
    #[napi]
    pub async fn session(
        &self,
        name: String,
        spec_json: String,
        idle_timeout_secs: u32,
    ) -> Result<SandboxHandle> {
        let sessions = self
            .inner
            .sessions(spec_from_json(&spec_json)?, idle_timeout_secs.into());
        Ok(SandboxHandle::new(sessions.get(name).await.map_err(to_js)?))
    }

    /// Ends the session's sandbox and keeps its workspace (`delete`: removes both).
    #[napi]
    pub async fn end_session(&self, name: String, delete: bool) -> Result<()> {
        self.inner
            .sessions(SandboxSpec::default(), 0)
            .end(name, delete)
            .await
            .map_err(to_js)
    }

    /// The sessions, as JSON.
    #[napi]
    pub async fn sessions_json(&self) -> Result<String> {
        self.inner
            .sessions(SandboxSpec::default(), 0)
            .list_json()
            .await
            .map_err(to_js)
    }
}
