//! The client: a provider chosen by name in this process, or a daemon (remote mode);
//! creating and finding sandboxes, preparing code for a language, and sessions. The
//! logic is `stockade_bindings`' (shared with the Node bindings); this is its Python
//! face.

use std::path::PathBuf;

use pyo3::prelude::*;
use stockade::{Sandbox, SandboxSpec};
use stockade_bindings::{create_options, daemon_address};

use crate::errors::{json, spec_from_json, to_py};
use crate::runtime::{drive, runtime};
use crate::sandbox::SandboxHandle;

/// A provider, chosen by name, with its image store and sessions under `home`; or a
/// `stockaded` daemon (remote mode) running that provider.
#[pyclass(frozen, module = "stockade._native")]
pub struct Client {
    inner: stockade_bindings::Client,
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
        let inner = match daemon_address(host) {
            Some(host) => py
                .detach(|| {
                    runtime().block_on(stockade_bindings::Client::connect(
                        &host, token, provider, home,
                    ))
                })
                .map_err(to_py)?,
            None => {
                stockade_bindings::Client::embedded(provider.as_deref(), home).map_err(to_py)?
            }
        };
        Ok(Client { inner })
    }

    /// The provider that runs the sandboxes.
    #[getter]
    fn provider(&self) -> String {
        self.inner.backend.clone()
    }

    /// The daemon's address in remote mode, else `None`.
    #[getter]
    fn remote(&self) -> Option<String> {
        self.inner.remote_host()
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
        let provider = self.inner.provider.clone();
        let opts = create_options(owned);
        drive(py, asynchronous, async move {
            let sb = Sandbox::create(provider, spec, opts).await.map_err(to_py)?;
            Ok(SandboxHandle::new(sb))
        })
    }

    /// A handle to an existing sandbox.
    #[pyo3(signature = (id, asynchronous=false))]
    fn attach(&self, py: Python<'_>, id: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.inner.provider.clone();
        drive(py, asynchronous, async move {
            let sb = Sandbox::attach(provider, &id).await.map_err(to_py)?;
            Ok(SandboxHandle::new(sb))
        })
    }

    /// The live sandboxes, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn list(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.inner.provider.clone();
        drive(py, asynchronous, async move {
            json(&provider.list().await.map_err(to_py)?)
        })
    }

    /// The named snapshots the provider keeps, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn snapshots(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.inner.provider.clone();
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
        let client = self.inner.clone();
        drive(py, asynchronous, async move {
            client.remove_snapshot(&name).await.map_err(to_py)
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
        let provider = self.inner.provider.clone();
        let opts = create_options(owned);
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
        let provider = self.inner.provider.clone();
        drive(py, asynchronous, async move {
            json(&provider.gc().await.map_err(to_py)?)
        })
    }

    /// The provider's host checks as JSON; raises `UnavailableError` when unusable.
    #[pyo3(signature = (asynchronous=false))]
    fn probe(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.inner.provider.clone();
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
        let prepared = self
            .inner
            .prepare_code(language, code, spec_from_json(spec_json)?);
        drive(py, asynchronous, async move {
            let (argv, spec) = prepared.await.map_err(to_py)?;
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
        let sessions = self
            .inner
            .sessions(spec_from_json(spec_json)?, idle_timeout_secs);
        drive(py, asynchronous, async move {
            Ok(SandboxHandle::new(sessions.get(name).await.map_err(to_py)?))
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
        let sessions = self.inner.sessions(SandboxSpec::default(), 0);
        drive(py, asynchronous, async move {
            sessions.end(name, delete).await.map_err(to_py)
        })
    }

    /// The sessions, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn sessions_json(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sessions = self.inner.sessions(SandboxSpec::default(), 0);
        drive(py, asynchronous, async move {
            sessions.list_json().await.map_err(to_py)
        })
    }
}
