//! Exec across the boundary: the options a request is built from, the outcome and
//! live output chunks as JavaScript objects, and the handle of a running exec.

use std::collections::BTreeMap;
use std::sync::Arc;

use napi::Result;
use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use stockade::{
    Error, ExecInput, ExecIo, ExecOutcome, ExecRequest, OutputChunk, Sandbox, Stream, TtySize,
};
use tokio::sync::{Mutex, mpsc};

use crate::errors::{internal, to_js};

/// The options of one exec, as the SDK's `execOptions` builds them (every field
/// optional: absent means the default).
#[napi(object)]
pub struct ExecOptions {
    pub stdin: Option<Buffer>,
    pub env: Option<std::collections::HashMap<String, String>>,
    pub cwd: Option<String>,
    pub timeout_ms: Option<i64>,
    pub output_limit: Option<i64>,
    /// What the command leaves running lives on until the sandbox ends.
    pub background: Option<bool>,
    /// Answered once the command has started (the outcome's `pid`), left running.
    pub detach: Option<bool>,
    /// With `detach`: keep none of its output.
    pub discard_output: Option<bool>,
}

impl ExecOptions {
    /// The request running `argv` with these options; negative numbers are refused.
    pub fn request(self, argv: Vec<String>) -> Result<ExecRequest> {
        let mut req = ExecRequest::new(argv);
        req.stdin = self.stdin.map(|b| b.to_vec()).unwrap_or_default();
        req.env = self
            .env
            .map(|e| e.into_iter().collect::<BTreeMap<_, _>>())
            .unwrap_or_default();
        req.cwd = self.cwd;
        req.timeout_ms = self
            .timeout_ms
            .map(|t| non_negative("timeoutMs", t))
            .transpose()?;
        if let Some(limit) = self.output_limit {
            req.output_limit_bytes = non_negative("outputLimit", limit)?;
        }
        req.background = self.background.unwrap_or(false);
        req.detach = self.detach.unwrap_or(false);
        req.discard_output = self.discard_output.unwrap_or(false);
        Ok(req)
    }
}

fn non_negative(name: &str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| {
        to_js(Error::InvalidRequest(format!(
            "exec option {name} must not be negative, not {v}"
        )))
    })
}

/// How an exec ended (the SDK's `ExecResult` is made from it).
#[napi(object)]
pub struct Outcome {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub stdout: Buffer,
    pub stderr: Buffer,
    pub timed_out: bool,
    pub oom_killed: bool,
    pub stdout_dropped: i64,
    pub stderr_dropped: i64,
    pub duration_ms: i64,
    /// What the egress policy refused during the exec, as JSON.
    pub egress_denied_json: String,
    /// A detached exec's pid.
    pub pid: Option<u32>,
}

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl From<ExecOutcome> for Outcome {
    fn from(o: ExecOutcome) -> Outcome {
        Outcome {
            exit_code: o.exit_code,
            signal: o.signal,
            stdout: o.stdout.into(),
            stderr: o.stderr.into(),
            timed_out: o.timed_out,
            oom_killed: o.oom_killed,
            stdout_dropped: count(o.stdout_dropped),
            stderr_dropped: count(o.stderr_dropped),
            duration_ms: count(o.duration_ms),
            egress_denied_json: serde_json::to_string(&o.egress_denied)
                .unwrap_or_else(|_| "[]".into()),
            pid: o.pid,
        }
    }
}

/// A piece of live output: `stream` is `stdout` or `stderr`.
#[napi(object)]
pub struct Chunk {
    pub stream: String,
    pub data: Buffer,
}

/// Spawns `fut` on napi's tokio runtime (the one its promises are driven by).
fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    napi::bindgen_prelude::within_runtime_if_available(|| tokio::spawn(fut))
}

type ExecTask = tokio::task::JoinHandle<stockade::Result<ExecOutcome>>;

/// A running exec: its live output (when streamed) and its outcome. `close` (or the
/// handle being collected) aborts the task, and dropping the exec's future kills the
/// command and everything it started in the sandbox.
#[napi]
pub struct ExecHandle {
    rx: Option<Arc<Mutex<mpsc::Receiver<OutputChunk>>>>,
    task: Arc<Mutex<Option<ExecTask>>>,
    abort: tokio::task::AbortHandle,
    /// Keys and sizes for an exec on a terminal.
    input: Option<mpsc::Sender<ExecInput>>,
}

impl ExecHandle {
    /// Starts `req` in `sb`; with `stream`, its output is also sent live.
    pub fn start(sb: Sandbox, req: ExecRequest, stream: bool) -> ExecHandle {
        let (task, rx) = if stream {
            // Bounded: a reader that stops reading slows the exec, never grows memory.
            let (tx, rx) = mpsc::channel::<OutputChunk>(64);
            let task = spawn(async move { sb.exec_streaming(req, tx).await });
            (task, Some(Arc::new(Mutex::new(rx))))
        } else {
            (spawn(async move { sb.exec(req).await }), None)
        };
        ExecHandle {
            abort: task.abort_handle(),
            rx,
            task: Arc::new(Mutex::new(Some(task))),
            input: None,
        }
    }

    /// Starts `req` in `sb` on a terminal of `size`: its output is sent live, keys
    /// and sizes go through [`ExecHandle::write`] and [`ExecHandle::resize`].
    pub fn terminal(sb: Sandbox, mut req: ExecRequest, size: TtySize) -> ExecHandle {
        req.tty = Some(size);
        req.keep_stdin_open = true;
        req.stream = true;
        let (tx, rx) = mpsc::channel::<OutputChunk>(64);
        let (in_tx, in_rx) = mpsc::channel::<ExecInput>(64);
        let io = ExecIo {
            output: Some(tx),
            input: Some(in_rx),
        };
        let task = spawn(async move { sb.exec_with(req, io).await });
        ExecHandle {
            abort: task.abort_handle(),
            rx: Some(Arc::new(Mutex::new(rx))),
            task: Arc::new(Mutex::new(Some(task))),
            input: Some(in_tx),
        }
    }

    async fn send(&self, m: ExecInput) -> Result<()> {
        let tx = self.input.clone().ok_or_else(|| {
            to_js(Error::InvalidRequest(
                "this exec has no terminal to type on: start it with terminal()".into(),
            ))
        })?;
        tx.send(m).await.map_err(|_| {
            to_js(Error::InvalidRequest(
                "the terminal's command has ended: nothing reads what is typed".into(),
            ))
        })
    }
}

#[napi]
impl ExecHandle {
    /// The next [`Chunk`], or `null` when the exec has ended (or is not streamed).
    #[napi]
    pub async fn next(&self) -> Result<Option<Chunk>> {
        let Some(rx) = self.rx.clone() else {
            return Ok(None);
        };
        let chunk = rx.lock().await.recv().await;
        Ok(chunk.map(|c| Chunk {
            stream: match c.stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            }
            .to_string(),
            data: c.data.into(),
        }))
    }

    /// Waits for the exec to end; its [`Outcome`]. An aborted exec fails with the
    /// code `aborted`.
    #[napi]
    pub async fn outcome(&self) -> Result<Outcome> {
        if let Some(rx) = self.rx.clone() {
            // Output nobody reads any more must not hold the exec up.
            rx.lock().await.close();
        }
        let task = self.task.lock().await.take().ok_or_else(|| {
            to_js(Error::InvalidRequest(
                "the outcome was already taken".into(),
            ))
        })?;
        match task.await {
            Ok(outcome) => Ok(Outcome::from(outcome.map_err(to_js)?)),
            Err(e) if e.is_cancelled() => Err(napi::Error::from_reason(
                "stockade:aborted: the exec was aborted; the command was killed",
            )),
            Err(e) => Err(internal("exec task", e)),
        }
    }

    /// Kills the exec (everything it started) if it is still running.
    #[napi]
    pub fn close(&self) {
        self.abort.abort();
    }

    /// Types `data` on the exec's terminal.
    #[napi]
    pub async fn write(&self, data: Buffer) -> Result<()> {
        self.send(ExecInput::Stdin(data.to_vec())).await
    }

    /// Types end-of-file (Ctrl-D) on the exec's terminal.
    #[napi]
    pub async fn close_stdin(&self) -> Result<()> {
        self.send(ExecInput::CloseStdin).await
    }

    /// Sets the size of the exec's terminal.
    #[napi]
    pub async fn resize(&self, rows: u32, cols: u32) -> Result<()> {
        self.send(ExecInput::Resize(tty_size(rows, cols)?)).await
    }
}

/// A terminal size from JavaScript numbers, refused when it has no room or is past
/// 65535 cells.
pub fn tty_size(rows: u32, cols: u32) -> Result<TtySize> {
    let cells = |n: u32, what: &str| {
        u16::try_from(n).map_err(|_| {
            to_js(Error::InvalidRequest(format!(
                "a terminal of {n} {what} is too large: at most 65535"
            )))
        })
    };
    TtySize {
        rows: cells(rows, "rows")?,
        cols: cells(cols, "columns")?,
    }
    .check()
    .map_err(|m| to_js(Error::InvalidRequest(m)))
}

impl Drop for ExecHandle {
    fn drop(&mut self) {
        self.abort.abort();
    }
}
