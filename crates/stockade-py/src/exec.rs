//! Exec across the boundary: the options a request is built from, the outcome and
//! the live output chunks as Python objects, and the stream of a running exec.

use std::collections::BTreeMap;
use std::sync::Arc;

use pyo3::prelude::*;
use stockade::{Error, ExecInput, ExecOutcome, ExecRequest, OutputChunk, Stream, TtySize};
use tokio::sync::{Mutex, mpsc};

use crate::errors::to_py;
use crate::runtime::{Bytes, drive};

/// The options of one exec: a dict with every key (`None` for the default), as the
/// SDK's `_exec_kwargs` builds it.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct ExecOptions {
    stdin: Option<Vec<u8>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    timeout_ms: Option<u64>,
    output_limit: Option<u64>,
}

impl ExecOptions {
    /// The request running `argv` with these options.
    pub fn request(self, argv: Vec<String>) -> ExecRequest {
        let mut req = ExecRequest::new(argv);
        req.stdin = self.stdin.unwrap_or_default();
        req.env = self.env.unwrap_or_default();
        req.cwd = self.cwd;
        req.timeout_ms = self.timeout_ms;
        if let Some(limit) = self.output_limit {
            req.output_limit_bytes = limit;
        }
        req
    }
}

/// How an exec ended (the SDK's `ExecResult` is made from it).
#[pyclass(frozen, module = "stockade._native")]
pub struct Outcome {
    #[pyo3(get)]
    exit_code: i32,
    #[pyo3(get)]
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    #[pyo3(get)]
    timed_out: bool,
    #[pyo3(get)]
    oom_killed: bool,
    #[pyo3(get)]
    stdout_dropped: u64,
    #[pyo3(get)]
    stderr_dropped: u64,
    #[pyo3(get)]
    duration_ms: u64,
    /// The egress policy's refusals, as a JSON list.
    #[pyo3(get)]
    egress_denied_json: String,
    /// A detached exec's pid.
    #[pyo3(get)]
    pid: Option<u32>,
}

impl From<ExecOutcome> for Outcome {
    fn from(o: ExecOutcome) -> Outcome {
        Outcome {
            exit_code: o.exit_code,
            signal: o.signal,
            stdout: o.stdout,
            stderr: o.stderr,
            timed_out: o.timed_out,
            oom_killed: o.oom_killed,
            stdout_dropped: o.stdout_dropped,
            stderr_dropped: o.stderr_dropped,
            duration_ms: o.duration_ms,
            egress_denied_json: serde_json::to_string(&o.egress_denied)
                .unwrap_or_else(|_| "[]".into()),
            pid: o.pid,
        }
    }
}

#[pymethods]
impl Outcome {
    #[getter]
    fn stdout(&self) -> Bytes {
        Bytes(self.stdout.clone())
    }

    #[getter]
    fn stderr(&self) -> Bytes {
        Bytes(self.stderr.clone())
    }
}

/// A piece of live output: `stream` is `stdout` or `stderr`.
#[pyclass(frozen, module = "stockade._native")]
pub struct Chunk {
    #[pyo3(get)]
    stream: &'static str,
    data: Vec<u8>,
}

#[pymethods]
impl Chunk {
    #[getter]
    fn data(&self) -> Bytes {
        Bytes(self.data.clone())
    }
}

type ExecTask = tokio::task::JoinHandle<stockade::Result<ExecOutcome>>;

/// A running exec's live output (and, on a terminal, its input). Dropping it (or
/// `close`) kills the exec.
#[pyclass(frozen, module = "stockade._native")]
pub struct ExecStream {
    rx: Arc<Mutex<mpsc::Receiver<OutputChunk>>>,
    task: Arc<Mutex<Option<ExecTask>>>,
    abort: tokio::task::AbortHandle,
    /// Keys and sizes for an exec on a terminal.
    input: Option<mpsc::Sender<ExecInput>>,
}

impl ExecStream {
    /// The stream of `task`, which sends its output to `rx` (and takes `input`).
    pub fn new(
        task: ExecTask,
        rx: mpsc::Receiver<OutputChunk>,
        input: Option<mpsc::Sender<ExecInput>>,
    ) -> ExecStream {
        ExecStream {
            abort: task.abort_handle(),
            rx: Arc::new(Mutex::new(rx)),
            task: Arc::new(Mutex::new(Some(task))),
            input,
        }
    }

    /// Sends `m` to the exec's terminal.
    fn send(&self, py: Python<'_>, m: ExecInput, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let tx = self.input.clone().ok_or_else(|| {
            to_py(Error::InvalidRequest(
                "this exec has no terminal to type on: start it with terminal()".into(),
            ))
        })?;
        drive(py, asynchronous, async move {
            tx.send(m).await.map_err(|_| {
                to_py(Error::InvalidRequest(
                    "the terminal's command has ended: nothing reads what is typed".into(),
                ))
            })
        })
    }
}

#[pymethods]
impl ExecStream {
    /// The next [`Chunk`], or `None` when the exec has ended.
    #[pyo3(signature = (asynchronous=false))]
    fn next(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let rx = self.rx.clone();
        drive(py, asynchronous, async move {
            Ok(rx.lock().await.recv().await.map(|c| Chunk {
                stream: match c.stream {
                    Stream::Stdout => "stdout",
                    Stream::Stderr => "stderr",
                },
                data: c.data,
            }))
        })
    }

    /// Waits for the exec to end; its [`Outcome`].
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
            Ok(Outcome::from(outcome))
        })
    }

    /// Kills the exec (everything it started) if it is still running.
    fn close(&self) {
        self.abort.abort();
    }

    /// Types `data` on the exec's terminal.
    #[pyo3(signature = (data, asynchronous=false))]
    fn write(&self, py: Python<'_>, data: Vec<u8>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        self.send(py, ExecInput::Stdin(data), asynchronous)
    }

    /// Types end-of-file (Ctrl-D) on the exec's terminal.
    #[pyo3(signature = (asynchronous=false))]
    fn close_stdin(&self, py: Python<'_>, asynchronous: bool) -> PyResult<Py<PyAny>> {
        self.send(py, ExecInput::CloseStdin, asynchronous)
    }

    /// Sets the size of the exec's terminal.
    #[pyo3(signature = (rows, cols, asynchronous=false))]
    fn resize(
        &self,
        py: Python<'_>,
        rows: u16,
        cols: u16,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let size = TtySize { rows, cols }
            .check()
            .map_err(|m| to_py(Error::InvalidRequest(m)))?;
        self.send(py, ExecInput::Resize(size), asynchronous)
    }
}

impl Drop for ExecStream {
    fn drop(&mut self) {
        self.abort.abort();
    }
}
