//! The client: a provider chosen by name in this process, or a daemon (remote mode);
//! creating and finding sandboxes, preparing code for a language, and sessions.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use stockade::code::{QuietFetcher, Source};
use stockade::spec::LanguagePreset;
use stockade::{
    CreateOptions, Error, Provider, Sandbox, SandboxSpec, SessionConfig, SessionManager,
};
use stockade_client::RemoteProvider;

use crate::errors::{json, spec_from_json, to_py};
use crate::remote;
use crate::runtime::drive;
use crate::sandbox::SandboxHandle;
use crate::sessions::Sessions;

/// A provider, chosen by name, with its image store and sessions under `home`; or a
/// `stockaded` daemon (remote mode) running that provider.
#[pyclass(frozen, module = "stockade._native")]
pub struct Client {
    provider: Arc<dyn Provider>,
    /// The daemon, in remote mode.
    remote: Option<RemoteProvider>,
    /// The provider that runs the sandboxes (the daemon's backend in remote mode).
    backend: String,
    home: PathBuf,
}

/// What `run_code` runs: the argv, and the spec adjusted for the language (the
/// image its interpreter comes from when the host lacks it) as JSON.
#[pyclass(frozen, get_all, module = "stockade._native")]
pub struct PreparedCode {
    argv: Vec<String>,
    spec_json: String,
}

#[pymethods]
impl Client {
    /// Embedded unless a daemon is named (`host`, else `$STOCKADE_HOST`); `token`
    /// (else `$STOCKADE_TOKEN`) is sent on every call to it.
    #[new]
    #[pyo3(signature = (provider=None, home=None, host=None, token=None))]
    fn new(
        py: Python<'_>,
        provider: Option<String>,
        home: Option<PathBuf>,
        host: Option<String>,
        token: Option<String>,
    ) -> PyResult<Client> {
        let home_dir = home.clone().unwrap_or_else(stockade_image::stockade_home);
        if let Some(host) = remote::daemon_address(host) {
            let daemon = remote::connect(py, &host, token, provider.clone())?;
            return Ok(Client {
                provider: Arc::new(daemon.clone()),
                remote: Some(daemon),
                backend: provider.unwrap_or_else(stockade::default_provider_name),
                home: home_dir,
            });
        }
        let p =
            stockade::provider_with_home(provider.as_deref(), home.as_deref()).map_err(to_py)?;
        Ok(Client {
            backend: p.name().to_string(),
            provider: p,
            remote: None,
            home: home_dir,
        })
    }

    /// The provider that runs the sandboxes.
    #[getter]
    fn provider(&self) -> String {
        self.backend.clone()
    }

    /// The daemon's address in remote mode, else `None`.
    #[getter]
    fn remote(&self) -> Option<String> {
        self.remote.as_ref().map(|r| r.host().to_string())
    }

    /// Creates a sandbox from a JSON spec. `owned`: it dies with this process.
    #[pyo3(signature = (spec_json, owned, asynchronous=false))]
    fn create(
        &self,
        py: Python<'_>,
        spec_json: &str,
        owned: bool,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let spec = spec_from_json(spec_json)?;
        let provider = self.provider.clone();
        let opts = CreateOptions {
            owner_pid: owned.then(std::process::id),
        };
        drive(py, asynchronous, async move {
            let sb = Sandbox::create(provider, spec, opts).await.map_err(to_py)?;
            Ok(SandboxHandle::new(sb))
        })
    }

    /// A handle to an existing sandbox.
    #[pyo3(signature = (id, asynchronous=false))]
    fn attach(&self, py: Python<'_>, id: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            let sb = Sandbox::attach(provider, &id).await.map_err(to_py)?;
            Ok(SandboxHandle::new(sb))
        })
    }

    /// The live sandboxes, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn list(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            json(&provider.list().await.map_err(to_py)?)
        })
    }

    /// The named snapshots the provider keeps, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn snapshots(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            json(&provider.snapshots().await.map_err(to_py)?)
        })
    }

    /// Removes the named snapshot `name`.
    #[pyo3(signature = (name, asynchronous=false))]
    fn remove_snapshot(
        &self,
        py: Python<'_>,
        name: String,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            stockade::check_snapshot_name(&name).map_err(to_py)?;
            provider.remove_snapshot(&name).await.map_err(to_py)
        })
    }

    /// Starts a new sandbox from the named snapshot `name` (digest-checked first).
    #[pyo3(signature = (name, owned, asynchronous=false))]
    fn create_from_snapshot(
        &self,
        py: Python<'_>,
        name: String,
        owned: bool,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        let opts = CreateOptions {
            owner_pid: owned.then(std::process::id),
        };
        drive(py, asynchronous, async move {
            let sb = Sandbox::from_snapshot(provider, &name, opts)
                .await
                .map_err(to_py)?;
            Ok(SandboxHandle::new(sb))
        })
    }

    /// Reaps expired and orphaned sandboxes; the report as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn gc(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            json(&provider.gc().await.map_err(to_py)?)
        })
    }

    /// The provider's host checks as JSON; raises `UnavailableError` when unusable.
    #[pyo3(signature = (asynchronous=false))]
    fn probe(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            json(&provider.probe().await.map_err(to_py)?)
        })
    }

    /// Resolves `language` for this provider: the [`PreparedCode`] that runs `code`.
    #[pyo3(signature = (language, code, spec_json, asynchronous=false))]
    fn prepare_code(
        &self,
        py: Python<'_>,
        language: String,
        code: String,
        spec_json: &str,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut spec = spec_from_json(spec_json)?;
        // In remote mode the interpreter is looked up as the daemon's backend would
        // (exact for a daemon on this host, which the unix socket implies).
        let provider = self.backend.clone();
        let images = self.home.join("images");
        drive(py, asynchronous, async move {
            let preset =
                LanguagePreset::find(&language).map_err(|e| to_py(Error::InvalidRequest(e)))?;
            let store = stockade_image::Store::open(&images)
                .map_err(|e| to_py(stockade::code::image_error(e)))?;
            let argv = stockade::code::prepare(
                &provider,
                preset,
                Source::Code(&code),
                &mut spec,
                &store,
                &QuietFetcher,
            )
            .await
            .map_err(to_py)?;
            Ok(PreparedCode {
                argv,
                spec_json: json(&spec)?,
            })
        })
    }

    /// The session called `name`: its sandbox, created from `spec_json` with the
    /// workspace mounted at /work when none is live (the daemon's own spec in remote
    /// mode).
    #[pyo3(signature = (name, spec_json, idle_timeout_secs, asynchronous=false))]
    fn session(
        &self,
        py: Python<'_>,
        name: String,
        spec_json: &str,
        idle_timeout_secs: u64,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sessions = self.sessions(spec_from_json(spec_json)?, idle_timeout_secs);
        drive(py, asynchronous, async move {
            Ok(SandboxHandle::new(sessions.get(name).await?))
        })
    }

    /// Ends the session's sandbox and keeps its workspace (`delete`: removes both).
    #[pyo3(signature = (name, delete, asynchronous=false))]
    fn end_session(
        &self,
        py: Python<'_>,
        name: String,
        delete: bool,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sessions = self.sessions(SandboxSpec::default(), 0);
        drive(py, asynchronous, sessions.end(name, delete))
    }

    /// The sessions, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn sessions_json(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sessions = self.sessions(SandboxSpec::default(), 0);
        drive(py, asynchronous, sessions.list_json())
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
