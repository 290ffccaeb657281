//! A live sandbox: its id and info, its approval policy, exec (waited for or
//! streamed) and destroy. Its file operations are [`crate::files::Files`].

use std::sync::Arc;

use pyo3::prelude::*;
use stockade::{ExecInput, ExecIo, OutputChunk, Sandbox, TtySize};
use tokio::sync::mpsc;

use crate::errors::{json, to_py};
use crate::exec::{ExecOptions, ExecStream, Outcome};
use crate::files::Files;
use crate::policy::Approval;
use crate::runtime::{drive, runtime};

/// A port of a sandbox on this host's 127.0.0.1 (`Sandbox.forward`).
#[pyclass(frozen, module = "stockade._native")]
pub struct ForwardHandle {
    fwd: stockade::Forward,
}

#[pymethods]
impl ForwardHandle {
    /// The address it listens on (127.0.0.1).
    #[getter]
    fn host(&self) -> String {
        self.fwd.local_addr().ip().to_string()
    }

    /// The port it listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.fwd.local_addr().port()
    }

    /// Stops listening and ends the connections it carries.
    fn close(&self) {
        self.fwd.close();
    }
}

/// A live sandbox.
#[pyclass(frozen, module = "stockade._native")]
pub struct SandboxHandle {
    sb: Sandbox,
}

impl SandboxHandle {
    pub fn new(sb: Sandbox) -> SandboxHandle {
        SandboxHandle { sb }
    }
}

#[pymethods]
impl SandboxHandle {
    #[getter]
    fn id(&self) -> &str {
        self.sb.id()
    }

    /// What is known about the sandbox (spec, applied hardening, expiry) as JSON.
    fn info_json(&self) -> PyResult<String> {
        json(self.sb.info())
    }

    /// This sandbox with an approval policy in front of its execs and file writes.
    fn with_policy(&self, approval: Approval) -> PyResult<SandboxHandle> {
        let p = approval.into_policy()?;
        Ok(SandboxHandle::new(self.sb.clone().with_policy(Arc::new(p))))
    }

    /// The file operations of this handle (under its policy).
    fn files(&self) -> Files {
        Files::new(self.sb.clone())
    }

    /// Runs a command and waits for it; its [`Outcome`].
    /// `detach`: answered once the command has started (the outcome's `pid`), its
    /// output kept in the sandbox unless `discard_output`.
    #[pyo3(signature = (argv, opts, background=false, asynchronous=false, detach=false, discard_output=false))]
    #[allow(clippy::too_many_arguments)]
    fn exec(
        &self,
        py: Python<'_>,
        argv: Vec<String>,
        opts: ExecOptions,
        background: bool,
        asynchronous: bool,
        detach: bool,
        discard_output: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut req = opts.request(argv);
        req.background = background;
        req.detach = detach;
        req.discard_output = discard_output;
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            Ok(Outcome::from(sb.exec(req).await.map_err(to_py)?))
        })
    }

    /// Port `port` of the sandbox on this host's 127.0.0.1:`local_port` (0: a free
    /// port), until the handle is closed or dropped.
    #[pyo3(signature = (port, local_port=0, asynchronous=false))]
    fn forward(
        &self,
        py: Python<'_>,
        port: u16,
        local_port: u16,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            let fwd = sb.forward(port, local_port).await.map_err(to_py)?;
            Ok(ForwardHandle { fwd })
        })
    }

    /// Starts a command whose output is read live from the returned stream.
    fn stream(&self, argv: Vec<String>, opts: ExecOptions) -> ExecStream {
        let req = opts.request(argv);
        let sb = self.sb.clone();
        // Bounded: a reader that stops reading slows the exec, never grows memory.
        let (tx, rx) = mpsc::channel::<OutputChunk>(64);
        ExecStream::new(
            runtime().spawn(async move { sb.exec_streaming(req, tx).await }),
            rx,
            None,
        )
    }

    /// Starts a command on a terminal of `rows` x `cols`: its output (the terminal's)
    /// is read from the returned stream, keys and sizes sent through it.
    fn terminal(
        &self,
        argv: Vec<String>,
        opts: ExecOptions,
        rows: u16,
        cols: u16,
    ) -> PyResult<ExecStream> {
        let mut req = opts.request(argv);
        req.tty = Some(
            TtySize { rows, cols }
                .check()
                .map_err(|m| to_py(stockade::Error::InvalidRequest(m)))?,
        );
        req.keep_stdin_open = true;
        req.stream = true;
        let sb = self.sb.clone();
        let (tx, rx) = mpsc::channel::<OutputChunk>(64);
        let (in_tx, in_rx) = mpsc::channel::<ExecInput>(64);
        let io = ExecIo {
            output: Some(tx),
            input: Some(in_rx),
        };
        Ok(ExecStream::new(
            runtime().spawn(async move { sb.exec_with(req, io).await }),
            rx,
            Some(in_tx),
        ))
    }

    /// What the provider says of the sandbox now, as JSON (its state: running or
    /// paused; its expiry).
    #[pyo3(signature = (asynchronous=false))]
    fn inspect_json(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            json(&sb.inspect().await.map_err(to_py)?)
        })
    }

    /// What the egress policy refused at or after `since_ms` (unix ms), as JSON.
    #[pyo3(signature = (since_ms=0, asynchronous=false))]
    fn egress_denied_json(
        &self,
        py: Python<'_>,
        since_ms: u64,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            json(&sb.egress_denied(since_ms).await.map_err(to_py)?)
        })
    }

    /// Replaces the egress policy of a sandbox created with one (`network` as the
    /// spec's JSON value).
    #[pyo3(signature = (network_json, asynchronous=false))]
    fn set_network(
        &self,
        py: Python<'_>,
        network_json: String,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            let network: stockade::spec::Network = serde_json::from_str(&network_json)
                .map_err(|e| to_py(stockade::Error::InvalidRequest(format!("network: {e}"))))?;
            sb.set_network(&network).await.map_err(to_py)
        })
    }

    /// Pauses the sandbox where it is (native: the cgroup freezer; microvm: to disk).
    #[pyo3(signature = (asynchronous=false))]
    fn pause(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(
            py,
            asynchronous,
            async move { sb.pause().await.map_err(to_py) },
        )
    }

    /// Keeps this sandbox's state as the named snapshot `name`; its info as JSON.
    #[pyo3(signature = (name, asynchronous=false))]
    fn snapshot(&self, py: Python<'_>, name: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            let info = sb.snapshot(&name).await.map_err(to_py)?;
            serde_json::to_string(&info)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
        })
    }

    /// Resumes a paused sandbox where it stopped.
    #[pyo3(signature = (asynchronous=false))]
    fn resume(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(
            py,
            asynchronous,
            async move { sb.resume().await.map_err(to_py) },
        )
    }

    /// Starts `count` copies of this paused sandbox, owned by this process like the
    /// sandboxes it creates; their handles (under this handle's policy).
    #[pyo3(signature = (count, asynchronous=false))]
    fn fork(&self, py: Python<'_>, count: u32, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            let opts = stockade::CreateOptions {
                owner_pid: Some(std::process::id()),
            };
            let v = sb.fork(count, opts).await.map_err(to_py)?;
            Ok(v.into_iter().map(SandboxHandle::new).collect::<Vec<_>>())
        })
    }

    /// Destroys the sandbox (idempotent).
    #[pyo3(signature = (asynchronous=false))]
    fn destroy(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.destroy().await.map_err(to_py)
        })
    }
}
