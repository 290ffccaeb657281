//! Running a command: the request under the policy's deadline and output cap, the
//! exec with progress notifications and cancellation, and its result for the model.
//! Also the image fetcher that reports pulls as progress.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use serde_json::json;
use stockade::code::{ImageFetcher, QuietFetcher};
use stockade::{Action, ExecInput, ExecOutcome, ExecRequest, Provider};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Handler;
use super::error::{ToolError, ok};

/// How often a running exec reports progress when nothing else happens.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Least time between two progress notifications about output.
const OUTPUT_PROGRESS_EVERY: Duration = Duration::from_millis(250);

impl Handler {
    /// An exec request with the policy's deadline and output cap.
    pub(super) fn request(
        &self,
        argv: Vec<String>,
        timeout: Option<f64>,
        stdin: Option<String>,
    ) -> Result<ExecRequest, ToolError> {
        let t = self.shared().policy.exec_timeout(timeout)?;
        let mut req = ExecRequest::new(argv);
        req.timeout_ms = Some((t * 1000.0).ceil() as u64);
        req.stdin = stdin.unwrap_or_default().into_bytes();
        req.output_limit_bytes = self.shared().policy.output_limit_bytes;
        Ok(req)
    }

    /// Runs `req` in sandbox `id`: approval first, then the exec with progress
    /// notifications (when the client asked for them) and cancellation (which kills
    /// everything the command started).
    pub(super) async fn exec(
        &self,
        provider: &Arc<dyn Provider>,
        id: &str,
        mut req: ExecRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ExecOutcome, ToolError> {
        self.shared()
            .policy
            .approval
            .check(id, &Action::Exec(&req))?;
        let progress = Progress::new(ctx);
        let (out_tx, mut out_rx) = mpsc::channel(64);
        let (in_tx, in_rx) = mpsc::channel(4);
        req.stream = progress.is_some();
        let req = stockade::CheckedRequest::new(req)?;
        let io = stockade::ExecIo {
            output: progress.is_some().then_some(out_tx),
            input: Some(in_rx),
        };
        let exec = provider.exec(id, req, io);
        tokio::pin!(exec);
        let started = Instant::now();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.tick().await;
        let mut last_output = Instant::now() - OUTPUT_PROGRESS_EVERY;
        let mut bytes = 0usize;
        let mut last_line = String::new();
        let mut killed = false;
        let cancelled: CancellationToken = ctx.ct.clone();
        loop {
            tokio::select! {
                r = &mut exec => {
                    if killed {
                        return Err(ToolError::new(
                            "cancelled",
                            "the call was cancelled; everything the command started was killed",
                            "run it again if you still need it",
                        ));
                    }
                    return Ok(r?);
                }
                _ = cancelled.cancelled(), if !killed => {
                    killed = true;
                    let _ = in_tx.send(ExecInput::Kill).await;
                }
                chunk = out_rx.recv(), if progress.is_some() => {
                    if let Some(c) = chunk {
                        bytes += c.data.len();
                        if let Some(l) = String::from_utf8_lossy(&c.data).lines().rfind(|l| !l.trim().is_empty()) {
                            last_line = l.chars().take(200).collect();
                        }
                        if last_output.elapsed() >= OUTPUT_PROGRESS_EVERY {
                            last_output = Instant::now();
                            progress.send(format!("{bytes} bytes of output; last line: {last_line}")).await;
                        }
                    }
                }
                _ = heartbeat.tick(), if progress.is_some() => {
                    progress.send(format!(
                        "running for {} s; {bytes} bytes of output",
                        started.elapsed().as_secs()
                    )).await;
                }
            }
        }
    }
}

/// The argv that runs `command` with `/bin/sh -c`.
pub(super) fn shell(command: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), command.into()]
}

/// An exec's outcome: structured, and a short text for the model.
pub(super) fn exec_result(o: &ExecOutcome, sandbox: Option<&str>) -> CallToolResult {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let mut s = json!({
        "exit_code": o.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": o.truncated(),
        "timed_out": o.timed_out,
        "oom_killed": o.oom_killed,
        "signal": o.signal,
        "duration_ms": o.duration_ms,
    });
    if let Some(id) = sandbox {
        s["sandbox_id"] = json!(id);
    }
    let mut text = format!("exit code {} ({} ms)", o.exit_code, o.duration_ms);
    if o.timed_out {
        text.push_str(
            "\nTIMED OUT: the deadline passed and everything it started was killed; pass a \
             larger timeout or make it faster",
        );
    }
    if o.oom_killed {
        text.push_str(
            "\nOUT OF MEMORY: the memory limit was hit; use less memory (or create a sandbox \
             with more, if the operator allows)",
        );
    }
    if o.truncated() {
        text.push_str(&format!(
            "\nTRUNCATED: {} bytes of stdout and {} of stderr were cut from the middle; \
             print less, or write to a file and read parts of it",
            o.stdout_dropped, o.stderr_dropped
        ));
    }
    if !stdout.is_empty() {
        text.push_str("\n--- stdout ---\n");
        text.push_str(&stdout);
    }
    if !stderr.is_empty() {
        text.push_str("\n--- stderr ---\n");
        text.push_str(&stderr);
    }
    ok(s, text)
}

/// Progress notifications for one request, when the client sent a progress token.
struct Progress {
    target: Option<(ProgressToken, rmcp::Peer<RoleServer>)>,
    n: AtomicU64,
}

impl Progress {
    fn new(ctx: &RequestContext<RoleServer>) -> Progress {
        Progress {
            target: ctx.meta.get_progress_token().map(|t| (t, ctx.peer.clone())),
            n: AtomicU64::new(0),
        }
    }

    fn is_some(&self) -> bool {
        self.target.is_some()
    }

    async fn send(&self, message: String) {
        if let Some((token, peer)) = &self.target {
            let n = self.n.fetch_add(1, Ordering::Relaxed) + 1;
            let p = ProgressNotificationParam::new(token.clone(), n as f64).with_message(message);
            let _ = peer.notify_progress(p).await;
        }
    }
}

/// Pulls images quietly, telling the client through progress notifications.
pub(super) struct NotifyingFetcher(Progress);

impl NotifyingFetcher {
    /// A fetcher that reports to the client of request `ctx`.
    pub(super) fn new(ctx: &RequestContext<RoleServer>) -> NotifyingFetcher {
        NotifyingFetcher(Progress::new(ctx))
    }
}

#[async_trait::async_trait]
impl ImageFetcher for NotifyingFetcher {
    async fn fetch(
        &self,
        store: &stockade_image::Store,
        reference: &str,
    ) -> stockade::Result<stockade_image::Image> {
        if store.image(reference).is_err() {
            self.0.send(format!("pulling image {reference}")).await;
        }
        let img = QuietFetcher.fetch(store, reference).await?;
        self.0.send(format!("image {reference} ready")).await;
        Ok(img)
    }
}
