//! Python bindings: the `stockade._native` module behind the `stockade` package
//! (`sdk/python`). The Python layer (`stockade/_client.py`) builds the spec, shapes
//! results into dataclasses and maps error codes to exception classes; this module
//! only moves calls to the Rust core.
//!
//! Every operation has one implementation, a Rust future. The sync API runs it on a
//! shared tokio runtime with the GIL released (checking for Ctrl-C every 100 ms, which
//! drops the future: an interrupted exec is killed in the sandbox); the async API
//! hands the same future to asyncio as an awaitable, so nothing blocks the event loop.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::BoundObject;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use stockade::code::{QuietFetcher, Source};
use stockade::spec::LanguagePreset;
use stockade::{
    Action, CreateOptions, Error, ExecOutcome, ExecRequest, OutputChunk, Policy, Provider, Rule,
    RuleTarget, Sandbox, SandboxSpec, SessionConfig, SessionManager, Stream, Verdict,
};
use stockade_client::{Host, RemoteProvider};
use tokio::sync::{Mutex, mpsc};

/// Bytes that become Python `bytes` (a `Vec<u8>` would become a list).
struct Bytes(Vec<u8>);

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// An exec outcome as a tuple: (exit_code, signal, stdout, stderr, timed_out,
/// oom_killed, stdout_dropped, stderr_dropped, duration_ms).
type OutcomeTuple = (i32, Option<i32>, Bytes, Bytes, bool, bool, u64, u64, u64);

fn outcome_tuple(o: ExecOutcome) -> OutcomeTuple {
    (
        o.exit_code,
        o.signal,
        Bytes(o.stdout),
        Bytes(o.stderr),
        o.timed_out,
        o.oom_killed,
        o.stdout_dropped,
        o.stderr_dropped,
        o.duration_ms,
    )
}

/// A Stockade error as the exception class of its code (`stockade.errors`).
fn to_py(e: Error) -> PyErr {
    let (code, message) = (e.code().as_str(), e.to_string());
    Python::attach(|py| {
        py.import("stockade.errors")
            .and_then(|m| m.getattr("from_code"))
            .and_then(|f| f.call1((code, message.as_str())))
            .map(PyErr::from_value)
            .unwrap_or_else(|_| PyRuntimeError::new_err(message))
    })
}

fn json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `fut`: to completion with the GIL released, or as an asyncio awaitable.
fn drive<F, T>(py: Python<'_>, asynchronous: bool, fut: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    if asynchronous {
        return Ok(pyo3_async_runtimes::tokio::future_into_py(py, fut)?.unbind());
    }
    // The future runs on a runtime worker, which drives its I/O itself; this thread
    // only waits for the result (one wake-up, instead of one per I/O event when the
    // future is polled here by `block_on`).
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    let value = py.detach(move || {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(v) => return v,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    // Ctrl-C raises here; aborting the task drops the future, which
                    // ends the operation.
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        task.abort();
                        return Err(e);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "the operation ended without a result",
                    ));
                }
            }
        }
    })?;
    Ok(value
        .into_pyobject(py)
        .map_err(Into::into)?
        .into_any()
        .unbind())
}

/// An approval policy from Python: rules `(name, target, regex, verdict)` with target
/// `exec`, `write` or `any` and verdict `allow`, `deny` or `ask`; `ask` calls
/// `callback(sandbox_id, kind, subject) -> bool` (an exception denies).
fn policy(
    default: &str,
    rules: Vec<(String, String, String, String)>,
    callback: Option<Py<PyAny>>,
) -> PyResult<Policy> {
    let verdict = |v: &str| match v {
        "allow" => Ok(Verdict::Allow),
        "deny" => Ok(Verdict::Deny),
        "ask" => Ok(Verdict::Ask),
        other => Err(to_py(Error::InvalidRequest(format!(
            "approval verdict {other:?} is not allow, deny or ask"
        )))),
    };
    let mut p = Policy::new(verdict(default)?);
    for (name, target, regex, v) in rules {
        let target = match target.as_str() {
            "exec" => RuleTarget::Exec,
            "write" => RuleTarget::FileWrite,
            "any" => RuleTarget::Any,
            other => {
                return Err(to_py(Error::InvalidRequest(format!(
                    "approval rule {name:?} has target {other:?}; use exec, write or any"
                ))));
            }
        };
        p = p.rule(Rule::new(&name, target, &regex, verdict(&v)?).map_err(to_py)?);
    }
    if let Some(cb) = callback {
        p = p.ask_with(move |sandbox, action| {
            let kind = match action {
                Action::Exec(_) => "exec",
                Action::FileWrite(_) => "write",
            };
            Python::attach(|py| {
                cb.call1(py, (sandbox, kind, action.subject()))
                    .and_then(|v| v.is_truthy(py))
                    .unwrap_or_else(|e| {
                        e.print(py);
                        false
                    })
            })
        });
    }
    Ok(p)
}

fn spec_from_json(spec_json: &str) -> PyResult<SandboxSpec> {
    // The path names the field at fault (`limits.memory_bytes: unknown size unit`).
    let de = &mut serde_json::Deserializer::from_str(spec_json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let (path, inner) = (e.path().to_string(), e.into_inner());
        to_py(Error::InvalidRequest(format!(
            "sandbox spec field {path}: {inner}"
        )))
    })
}

/// A provider, chosen by name, with its image store and sessions under `home`; or a
/// `stockaded` daemon (remote mode) running that provider.
#[pyclass(frozen, module = "stockade._native")]
struct Client {
    provider: Arc<dyn Provider>,
    /// The daemon, in remote mode.
    remote: Option<RemoteProvider>,
    /// The provider that runs the sandboxes (the daemon's backend in remote mode).
    backend: String,
    home: PathBuf,
}

#[pymethods]
impl Client {
    /// Embedded unless a daemon is named (`host`, else `$STOCKADE_HOST`): the SDK does
    /// not pick up a default socket on its own, so `Stockade()` never depends on a
    /// daemon. `token` (else `$STOCKADE_TOKEN`) is sent on every call.
    #[new]
    #[pyo3(signature = (provider=None, home=None, host=None, token=None))]
    fn new(
        py: Python<'_>,
        provider: Option<String>,
        home: Option<PathBuf>,
        host: Option<String>,
        token: Option<String>,
    ) -> PyResult<Client> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let home_dir = home.clone().unwrap_or_else(stockade_image::stockade_home);
        if let Some(host) = host.or_else(|| env("STOCKADE_HOST")) {
            let token = token.or_else(|| env("STOCKADE_TOKEN"));
            let remote = py
                .detach(|| {
                    runtime().block_on(async {
                        let h = Host::parse(&host)?;
                        RemoteProvider::connect(&h, token.as_deref()).await
                    })
                })
                .map_err(to_py)?
                .with_backend(provider.clone());
            return Ok(Client {
                provider: Arc::new(remote.clone()),
                remote: Some(remote),
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
            Ok(SandboxHandle { sb })
        })
    }

    /// A handle to an existing sandbox.
    #[pyo3(signature = (id, asynchronous=false))]
    fn attach(&self, py: Python<'_>, id: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let provider = self.provider.clone();
        drive(py, asynchronous, async move {
            let sb = Sandbox::attach(provider, &id).await.map_err(to_py)?;
            Ok(SandboxHandle { sb })
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

    /// Resolves `language` for this provider: returns `(argv, spec_json)`, the argv
    /// that runs `code` and the spec adjusted for it (the image the interpreter comes
    /// from when the host lacks it).
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
            Ok((argv, json(&spec)?))
        })
    }

    /// The session called `name`: its sandbox, created from `spec_json` with the
    /// workspace mounted at /work when none is live.
    #[pyo3(signature = (name, spec_json, idle_timeout_secs, asynchronous=false))]
    fn session(
        &self,
        py: Python<'_>,
        name: String,
        spec_json: &str,
        idle_timeout_secs: u64,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        if let Some(remote) = self.remote.clone() {
            // The daemon's sessions use its own session spec.
            let provider = self.provider.clone();
            return drive(py, asynchronous, async move {
                let info = remote.session_get(&name).await.map_err(to_py)?;
                let sb = Sandbox::attach(provider, &info.id).await.map_err(to_py)?;
                Ok(SandboxHandle { sb })
            });
        }
        let manager = self.sessions(spec_from_json(spec_json)?, idle_timeout_secs);
        drive(py, asynchronous, async move {
            let sb = manager.get_or_create(&name).await.map_err(to_py)?;
            Ok(SandboxHandle { sb })
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
        if let Some(remote) = self.remote.clone() {
            return drive(py, asynchronous, async move {
                if delete {
                    remote.session_delete(&name).await.map_err(to_py)
                } else {
                    remote.session_release(&name).await.map_err(to_py)
                }
            });
        }
        let manager = self.sessions(SandboxSpec::default(), 0);
        drive(py, asynchronous, async move {
            if delete {
                manager.delete(&name).await.map_err(to_py)
            } else {
                manager.release(&name).await.map_err(to_py)
            }
        })
    }

    /// The sessions, as JSON.
    #[pyo3(signature = (asynchronous=false))]
    fn sessions_json(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        if let Some(remote) = self.remote.clone() {
            return drive(py, asynchronous, async move {
                json(&remote.session_list().await.map_err(to_py)?)
            });
        }
        let manager = self.sessions(SandboxSpec::default(), 0);
        drive(py, asynchronous, async move {
            json(&manager.list().await.map_err(to_py)?)
        })
    }
}

impl Client {
    fn sessions(&self, spec: SandboxSpec, idle_timeout_secs: u64) -> SessionManager {
        let mut config = SessionConfig::new(&self.home);
        config.spec = spec;
        if idle_timeout_secs > 0 {
            config.idle_timeout_secs = idle_timeout_secs;
        }
        SessionManager::new(self.provider.clone(), config)
    }
}

/// A live sandbox.
#[pyclass(frozen, module = "stockade._native")]
struct SandboxHandle {
    sb: Sandbox,
}

/// Builds an exec request from the Python arguments.
fn request(
    argv: Vec<String>,
    stdin: Option<&[u8]>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    timeout_ms: Option<u64>,
    output_limit: Option<u64>,
) -> ExecRequest {
    let mut req = ExecRequest::new(argv);
    req.stdin = stdin.map(<[u8]>::to_vec).unwrap_or_default();
    req.env = env.unwrap_or_default();
    req.cwd = cwd;
    req.timeout_ms = timeout_ms;
    if let Some(limit) = output_limit {
        req.output_limit_bytes = limit;
    }
    req
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

    /// Puts an approval policy in front of this handle's execs and file writes.
    #[pyo3(signature = (default, rules, callback=None))]
    fn with_policy(
        &self,
        default: &str,
        rules: Vec<(String, String, String, String)>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<SandboxHandle> {
        let p = policy(default, rules, callback)?;
        Ok(SandboxHandle {
            sb: self.sb.clone().with_policy(Arc::new(p)),
        })
    }

    /// Runs a command and waits for it; the outcome as a tuple.
    #[pyo3(signature = (argv, stdin=None, env=None, cwd=None, timeout_ms=None, output_limit=None, asynchronous=false, background=false))]
    #[allow(clippy::too_many_arguments)]
    fn exec(
        &self,
        py: Python<'_>,
        argv: Vec<String>,
        stdin: Option<&[u8]>,
        env: Option<BTreeMap<String, String>>,
        cwd: Option<String>,
        timeout_ms: Option<u64>,
        output_limit: Option<u64>,
        asynchronous: bool,
        background: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut req = request(argv, stdin, env, cwd, timeout_ms, output_limit);
        req.background = background;
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            Ok(outcome_tuple(sb.exec(req).await.map_err(to_py)?))
        })
    }

    /// Starts a command whose output is read live from the returned stream.
    #[pyo3(signature = (argv, stdin=None, env=None, cwd=None, timeout_ms=None, output_limit=None))]
    fn stream(
        &self,
        argv: Vec<String>,
        stdin: Option<&[u8]>,
        env: Option<BTreeMap<String, String>>,
        cwd: Option<String>,
        timeout_ms: Option<u64>,
        output_limit: Option<u64>,
    ) -> ExecStream {
        let req = request(argv, stdin, env, cwd, timeout_ms, output_limit);
        let sb = self.sb.clone();
        // Bounded: a reader that stops reading slows the exec, never grows memory.
        let (tx, rx) = mpsc::channel::<OutputChunk>(64);
        let task = runtime().spawn(async move { sb.exec_streaming(req, tx).await });
        ExecStream {
            abort: task.abort_handle(),
            rx: Arc::new(Mutex::new(rx)),
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    /// Writes a file (parents created).
    #[pyo3(signature = (path, data, asynchronous=false))]
    fn write(
        &self,
        py: Python<'_>,
        path: String,
        data: &[u8],
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let (sb, data) = (self.sb.clone(), data.to_vec());
        drive(py, asynchronous, async move {
            sb.write(&path, data).await.map_err(to_py)
        })
    }

    /// Reads a whole file.
    #[pyo3(signature = (path, asynchronous=false))]
    fn read(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            Ok(Bytes(sb.read(&path).await.map_err(to_py)?))
        })
    }

    /// Replaces `old` by `new`; returns the number of replacements.
    #[pyo3(signature = (path, old, new, replace_all, asynchronous=false))]
    fn edit(
        &self,
        py: Python<'_>,
        path: String,
        old: String,
        new: String,
        replace_all: bool,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.edit(&path, &old, &new, replace_all).await.map_err(to_py)
        })
    }

    /// A directory's entries as JSON.
    #[pyo3(signature = (path, asynchronous=false))]
    fn ls(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            json(&sb.ls(&path).await.map_err(to_py)?)
        })
    }

    /// One path's entry as JSON.
    #[pyo3(signature = (path, asynchronous=false))]
    fn stat(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            json(&sb.stat(&path).await.map_err(to_py)?)
        })
    }

    /// Paths below `root` matching `pattern`.
    #[pyo3(signature = (pattern, root, asynchronous=false))]
    fn glob(
        &self,
        py: Python<'_>,
        pattern: String,
        root: String,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.glob(&pattern, &root).await.map_err(to_py)
        })
    }

    /// Matching lines below `root` as JSON.
    #[pyo3(signature = (regex, root, include=None, max_matches=0, asynchronous=false))]
    fn grep(
        &self,
        py: Python<'_>,
        regex: String,
        root: String,
        include: Option<String>,
        max_matches: u32,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            let m = sb
                .grep(&regex, &root, include.as_deref(), max_matches)
                .await
                .map_err(to_py)?;
            json(&m)
        })
    }

    /// Creates a directory and its parents.
    #[pyo3(signature = (path, asynchronous=false))]
    fn mkdir(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.mkdir(&path).await.map_err(to_py)
        })
    }

    /// Removes a file or directory tree.
    #[pyo3(signature = (path, asynchronous=false))]
    fn rm(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.rm(&path).await.map_err(to_py)
        })
    }

    /// Unpacks a tar (or tar.gz) archive into `dest`.
    #[pyo3(signature = (dest, archive, asynchronous=false))]
    fn upload(
        &self,
        py: Python<'_>,
        dest: String,
        archive: &[u8],
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let (sb, archive) = (self.sb.clone(), archive.to_vec());
        drive(py, asynchronous, async move {
            sb.upload(&dest, archive).await.map_err(to_py)
        })
    }

    /// Packs a file or directory into a tar archive.
    #[pyo3(signature = (path, asynchronous=false))]
    fn download(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            Ok(Bytes(sb.download(&path).await.map_err(to_py)?))
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

type ExecTask = tokio::task::JoinHandle<stockade::Result<ExecOutcome>>;

/// A running exec's live output. Dropping it (or `close`) kills the exec.
#[pyclass(frozen, module = "stockade._native")]
struct ExecStream {
    rx: Arc<Mutex<mpsc::Receiver<OutputChunk>>>,
    task: Arc<Mutex<Option<ExecTask>>>,
    abort: tokio::task::AbortHandle,
}

#[pymethods]
impl ExecStream {
    /// The next chunk as `(stream, data)` with stream `stdout` or `stderr`, or `None`
    /// when the exec has ended.
    #[pyo3(signature = (asynchronous=false))]
    fn next(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let rx = self.rx.clone();
        drive(py, asynchronous, async move {
            Ok(rx.lock().await.recv().await.map(|c| {
                let name = match c.stream {
                    Stream::Stdout => "stdout",
                    Stream::Stderr => "stderr",
                };
                (name, Bytes(c.data))
            }))
        })
    }

    /// Waits for the exec to end; the outcome as a tuple (like `exec`).
    #[pyo3(signature = (asynchronous=false))]
    fn outcome(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let (rx, task) = (self.rx.clone(), self.task.clone());
        drive(py, asynchronous, async move {
            // Output nobody reads any more must not hold the exec up.
            rx.lock().await.close();
            let task = task.lock().await.take().ok_or_else(|| {
                to_py(Error::InvalidRequest(
                    "the outcome was already taken".into(),
                ))
            })?;
            let outcome = task
                .await
                .map_err(|e| to_py(Error::Internal(format!("exec task: {e}"))))?
                .map_err(to_py)?;
            Ok(outcome_tuple(outcome))
        })
    }

    /// Kills the exec (everything it started) if it is still running.
    fn close(&self) {
        self.abort.abort();
    }
}

impl Drop for ExecStream {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// The `stockade._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<SandboxHandle>()?;
    m.add_class::<ExecStream>()?;
    m.add("PROVIDERS", stockade::PROVIDERS.to_vec())?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
