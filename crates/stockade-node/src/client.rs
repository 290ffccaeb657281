//! The client: a provider chosen by name in this process, or a `stockaded` daemon
//! (remote mode); creating and finding sandboxes, and preparing code for a language.

use std::path::PathBuf;
use std::sync::Arc;

use napi::Result;
use napi_derive::napi;
use stockade::code::{QuietFetcher, Source};
use stockade::spec::LanguagePreset;
use stockade::{
    CreateOptions, Error, Provider, Sandbox, SandboxSpec, SessionConfig, SessionManager,
};
use stockade_client::{Host, RemoteProvider};

use crate::errors::{json, spec_from_json, to_js};
use crate::sandbox::SandboxHandle;
use crate::sessions::Sessions;

/// A provider, chosen by name, with its image store under `home`; or a daemon.
#[napi]
pub struct Client {
    provider: Arc<dyn Provider>,
    /// The daemon, in remote mode.
    remote: Option<RemoteProvider>,
    /// The provider that runs the sandboxes (the daemon's backend in remote mode).
    backend: String,
    home: PathBuf,
}

/// What `runCode` runs: the argv, and the spec adjusted for the language (the image
/// its interpreter comes from when the host lacks it) as JSON.
#[napi(object)]
pub struct PreparedCode {
    pub argv: Vec<String>,
    pub spec_json: String,
}

fn home_dir(home: Option<String>) -> PathBuf {
    home.map_or_else(stockade_image::stockade_home, Into::into)
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
    let h = Host::parse(&host).map_err(to_js)?;
    let daemon = RemoteProvider::connect(&h, token.as_deref())
        .await
        .map_err(to_js)?
        .with_backend(provider.clone());
    Ok(Client {
        provider: Arc::new(daemon.clone()),
        remote: Some(daemon),
        backend: provider.unwrap_or_else(stockade::default_provider_name),
        home: home_dir(home),
    })
}

#[napi]
impl Client {
    /// The provider `provider` (default: `$STOCKADE_PROVIDER` or native) in this
    /// process, with its image store and state under `home`.
    #[napi(constructor)]
    pub fn new(provider: Option<String>, home: Option<String>) -> Result<Client> {
        let p = stockade::provider_with_home(
            provider.as_deref(),
            home.as_deref().map(std::path::Path::new),
        )
        .map_err(to_js)?;
        Ok(Client {
            backend: p.name().to_string(),
            provider: p,
            remote: None,
            home: home_dir(home),
        })
    }

    /// The provider that runs the sandboxes.
    #[napi(getter)]
    pub fn provider(&self) -> String {
        self.backend.clone()
    }

    /// The daemon's address in remote mode, else `null`.
    #[napi(getter)]
    pub fn remote(&self) -> Option<String> {
        self.remote.as_ref().map(|r| r.host().to_string())
    }

    /// Creates a sandbox from a JSON spec. `owned`: it dies with this process.
    #[napi]
    pub async fn create(&self, spec_json: String, owned: bool) -> Result<SandboxHandle> {
        let spec = spec_from_json(&spec_json)?;
        let opts = CreateOptions {
            owner_pid: owned.then(std::process::id),
        };
        let sb = Sandbox::create(self.provider.clone(), spec, opts)
            .await
            .map_err(to_js)?;
        Ok(SandboxHandle::new(sb))
    }

    /// A handle to an existing sandbox.
    #[napi]
    pub async fn attach(&self, id: String) -> Result<SandboxHandle> {
        let sb = Sandbox::attach(self.provider.clone(), &id)
            .await
            .map_err(to_js)?;
        Ok(SandboxHandle::new(sb))
    }

    /// The live sandboxes, as JSON.
    #[napi]
    pub async fn list(&self) -> Result<String> {
        json(&self.provider.list().await.map_err(to_js)?)
    }

    /// The named snapshots the provider keeps, as JSON.
    #[napi]
    pub async fn snapshots(&self) -> Result<String> {
        json(&self.provider.snapshots().await.map_err(to_js)?)
    }

    /// Removes the named snapshot `name`.
    #[napi]
    pub async fn remove_snapshot(&self, name: String) -> Result<()> {
        stockade::check_snapshot_name(&name).map_err(to_js)?;
        self.provider.remove_snapshot(&name).await.map_err(to_js)
    }

    /// Starts a new sandbox from the named snapshot `name` (digest-checked first).
    /// `owned`: it dies with this process.
    #[napi]
    pub async fn create_from_snapshot(&self, name: String, owned: bool) -> Result<SandboxHandle> {
        let opts = CreateOptions {
            owner_pid: owned.then(std::process::id),
        };
        let sb = Sandbox::from_snapshot(self.provider.clone(), &name, opts)
            .await
            .map_err(to_js)?;
        Ok(SandboxHandle::new(sb))
    }

    /// Reaps expired and orphaned sandboxes; the report as JSON.
    #[napi]
    pub async fn gc(&self) -> Result<String> {
        json(&self.provider.gc().await.map_err(to_js)?)
    }

    /// The provider's host checks as JSON; fails (`unavailable`) when unusable.
    #[napi]
    pub async fn probe(&self) -> Result<String> {
        json(&self.provider.probe().await.map_err(to_js)?)
    }

    /// Resolves `language` for this provider: the [`PreparedCode`] that runs `code`.
    #[napi]
    pub async fn prepare_code(
        &self,
        language: String,
        code: String,
        spec_json: String,
    ) -> Result<PreparedCode> {
        let mut spec = spec_from_json(&spec_json)?;
        let preset =
            LanguagePreset::find(&language).map_err(|e| to_js(Error::InvalidRequest(e)))?;
        let store = stockade_image::Store::open(self.home.join("images"))
            .map_err(|e| to_js(stockade::code::image_error(e)))?;
        // In remote mode the interpreter is looked up as the daemon's backend would
        // (exact for a daemon on this host, which the unix socket implies).
        let argv = stockade::code::prepare(
            &self.backend,
            preset,
            Source::Code(&code),
            &mut spec,
            &store,
            &QuietFetcher,
        )
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
        let sessions = self.sessions(spec_from_json(&spec_json)?, idle_timeout_secs.into());
        Ok(SandboxHandle::new(sessions.get(name).await?))
    }

    /// Ends the session's sandbox and keeps its workspace (`delete`: removes both).
    #[napi]
    pub async fn end_session(&self, name: String, delete: bool) -> Result<()> {
        self.sessions(SandboxSpec::default(), 0)
            .end(name, delete)
            .await
    }

    /// The sessions, as JSON.
    #[napi]
    pub async fn sessions_json(&self) -> Result<String> {
        self.sessions(SandboxSpec::default(), 0).list_json().await
    }
}

impl Client {
    fn sessions(&self, spec: SandboxSpec, idle_timeout_secs: u64) -> Sessions {
        if let Some(daemon) = self.remote.clone() {
            return Sessions::Remote {
                daemon,
                provider: self.provider.clone(),
            };
        }
        let mut config = SessionConfig::new(&self.home);
        config.spec = spec;
        if idle_timeout_secs > 0 {
            config.idle_timeout_secs = idle_timeout_secs;
        }
        Sessions::Local(SessionManager::new(self.provider.clone(), config))
    }
}
