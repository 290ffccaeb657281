//! Execs (waited for, or streamed with input and cancel), file operations, and the
//! mark that a sandbox is in use while one runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use stockade::{
    CheckedRequest, Error, ExecInput, ExecIo, ExecOutcome, ExecRequest, FileOp, FileResult,
    OutputChunk, Provider, Result,
};
use tokio::sync::mpsc;

use super::{Daemon, now_ms};
use crate::store::{SandboxRecord, random_hex};

/// How many events of a streamed exec wait for a slow client before the exec waits.
const STREAM_BUFFER: usize = 16;

/// A running streamed exec that takes input.
pub(super) struct RunningExec {
    tenant: String,
    input: mpsc::Sender<ExecInput>,
}

/// What a streamed exec sends, in order: `Started`, output, then one `Outcome`.
#[derive(Debug)]
pub enum ExecEvent {
    /// The exec's id, for [`Daemon::exec_input`].
    Started(String),
    Output(OutputChunk),
    Outcome(Result<ExecOutcome>),
}

/// Marks a sandbox in use while it lives (an exec or file operation runs); on drop
/// the use ends now, which is when idleness starts counting.
pub struct InUse {
    d: Arc<Daemon>,
    id: String,
}

impl Drop for InUse {
    fn drop(&mut self) {
        if let Some(e) = self.d.lock().entries.get_mut(&self.id) {
            e.ops = e.ops.saturating_sub(1);
            e.last_used_ms = now_ms();
        }
    }
}

/// Joins relative paths of a file operation onto a late-bound workdir.
fn rebase(op: FileOp, workdir: &str) -> FileOp {
    let fix = |p: String| {
        if p.starts_with('/') {
            p
        } else {
            format!("{}/{p}", workdir.trim_end_matches('/'))
        }
    };
    op.map_paths(fix)
}

/// The request with the sandbox's late-bound env and workdir applied.
fn bind(rec: &SandboxRecord, mut req: ExecRequest) -> ExecRequest {
    if rec.template.is_some() {
        let mut env = rec.env.clone();
        env.extend(std::mem::take(&mut req.env));
        req.env = env;
        if req.cwd.is_none() {
            req.cwd = rec.workdir.clone();
        }
    }
    req
}

impl Daemon {
    /// The sandbox is in use until the guard drops (the reaper never takes a busy
    /// sandbox for idle: an exec longer than the idle timeout is use, not idleness).
    pub fn in_use(self: &Arc<Self>, id: &str) -> InUse {
        if let Some(e) = self.lock().entries.get_mut(id) {
            e.ops += 1;
            e.last_used_ms = now_ms();
        }
        InUse {
            d: self.clone(),
            id: id.to_string(),
        }
    }

    /// What an exec needs: the provider, the request (bound), and the mark that the
    /// sandbox is in use (hold it until the exec ends).
    fn prepare_exec(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        req: ExecRequest,
    ) -> Result<(Arc<dyn Provider>, CheckedRequest, InUse)> {
        let rec = self.record(tenant, id)?;
        let req = CheckedRequest::new(bind(&rec, req))?;
        let busy = self.in_use(id);
        let (_, p) = self.provider(&rec.provider)?;
        Ok((p, req, busy))
    }

    /// Runs an exec and waits (dropping the future kills it).
    pub async fn exec(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        req: ExecRequest,
    ) -> Result<ExecOutcome> {
        if req.keep_stdin_open {
            return Err(Error::InvalidRequest(
                "keep_stdin_open needs a streamed exec (ExecStream)".into(),
            ));
        }
        let (p, req, _busy) = self.prepare_exec(tenant, id, req)?;
        let t0 = Instant::now();
        let r = p.exec(id, req, ExecIo::none()).await;
        self.exec_done(id, t0, &r);
        r
    }

    /// Runs an exec with the caller's own live output and input (an in-process front
    /// end's streams: [`crate::embedded::TenantProvider`]); dropping the future kills it.
    pub async fn exec_io(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        req: ExecRequest,
        io: ExecIo,
    ) -> Result<ExecOutcome> {
        let (p, req, _busy) = self.prepare_exec(tenant, id, req)?;
        let t0 = Instant::now();
        let r = p.exec(id, req, io).await;
        self.exec_done(id, t0, &r);
        r
    }

    /// Starts a streamed exec that takes input ([`Daemon::exec_input`]) and returns
    /// its events. Dropping the receiver (the client went away) kills the exec.
    pub fn exec_stream(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        req: ExecRequest,
    ) -> Result<mpsc::Receiver<ExecEvent>> {
        let (p, req, busy) = self.prepare_exec(tenant, id, req)?;
        let (in_tx, in_rx) = mpsc::channel(STREAM_BUFFER);
        let exec_id = self.register_exec(tenant, in_tx);
        let (ev_tx, ev_rx) = mpsc::channel(STREAM_BUFFER);
        let d = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            // In use until the exec ends (and its last output is sent).
            let _busy = busy;
            if ev_tx
                .send(ExecEvent::Started(exec_id.clone()))
                .await
                .is_ok()
            {
                let (out_tx, mut out_rx) = mpsc::channel(STREAM_BUFFER);
                let t0 = Instant::now();
                let io = ExecIo {
                    output: Some(out_tx),
                    input: Some(in_rx),
                };
                let exec = p.exec(&id, req, io);
                tokio::pin!(exec);
                let result = loop {
                    tokio::select! {
                        r = &mut exec => break Some(r),
                        Some(c) = out_rx.recv() => {
                            if ev_tx.send(ExecEvent::Output(c)).await.is_err() {
                                // The client went away: dropping the exec kills it.
                                break None;
                            }
                        }
                        _ = ev_tx.closed() => break None,
                    }
                };
                if let Some(r) = result {
                    d.exec_done(&id, t0, &r);
                    while let Ok(c) = out_rx.try_recv() {
                        let _ = ev_tx.send(ExecEvent::Output(c)).await;
                    }
                    let _ = ev_tx.send(ExecEvent::Outcome(r)).await;
                }
            }
            d.unregister_exec(&exec_id);
        });
        Ok(ev_rx)
    }

    /// Counts a finished exec.
    fn exec_done(&self, id: &str, t0: Instant, r: &Result<ExecOutcome>) {
        if let Some(e) = self.lock().entries.get_mut(id) {
            e.last_used_ms = now_ms();
        }
        self.metrics.execs.fetch_add(1, Ordering::Relaxed);
        self.metrics.exec_seconds.observe(t0.elapsed());
        if r.is_err() {
            self.metrics.exec_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Registers a streamed exec taking input; returns its id.
    fn register_exec(&self, tenant: &str, input: mpsc::Sender<ExecInput>) -> String {
        let id = format!("ex-{}", random_hex(8));
        if let Ok(mut m) = self.execs.lock() {
            m.insert(
                id.clone(),
                RunningExec {
                    tenant: tenant.to_string(),
                    input,
                },
            );
        }
        id
    }

    /// Forgets a finished streamed exec.
    fn unregister_exec(&self, exec_id: &str) {
        if let Ok(mut m) = self.execs.lock() {
            m.remove(exec_id);
        }
    }

    /// Sends input to a running exec of the tenant.
    pub async fn exec_input(
        &self,
        tenant: &str,
        exec_id: &str,
        msgs: Vec<ExecInput>,
    ) -> Result<()> {
        let not_found = || Error::NotFound {
            kind: "exec",
            id: exec_id.to_string(),
        };
        let tx = self
            .execs
            .lock()
            .ok()
            .and_then(|m| {
                m.get(exec_id)
                    .filter(|e| e.tenant == tenant)
                    .map(|e| e.input.clone())
            })
            .ok_or_else(not_found)?;
        for m in msgs {
            tx.send(m).await.map_err(|_| not_found())?;
        }
        Ok(())
    }

    /// A file operation as the sandbox user.
    pub async fn file(self: &Arc<Self>, tenant: &str, id: &str, op: FileOp) -> Result<FileResult> {
        self.file_by(tenant, id, None, op).await
    }

    /// [`Daemon::file`] as `uid` of the sandbox (root of its own user namespace for 0).
    pub async fn file_as(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        uid: u32,
        op: FileOp,
    ) -> Result<FileResult> {
        self.file_by(tenant, id, Some(uid), op).await
    }

    /// A connection to TCP `port` on the loopback of a tenant's sandbox (a server its
    /// code started): the E2B API's ports. The sandbox counts as in use while the
    /// connection lives.
    pub async fn connect_port(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        port: u16,
    ) -> Result<stockade::PortStream> {
        let rec = self.record(tenant, id)?;
        let busy = self.in_use(id);
        let (_, p) = self.provider(&rec.provider)?;
        let inner = p.connect_port(id, port).await?;
        Ok(Box::new(HeldPort { inner, _busy: busy }))
    }

    async fn file_by(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        uid: Option<u32>,
        op: FileOp,
    ) -> Result<FileResult> {
        let rec = self.record(tenant, id)?;
        let _busy = self.in_use(id);
        let (_, p) = self.provider(&rec.provider)?;
        let op = match (&rec.template, &rec.workdir) {
            (Some(_), Some(w)) => rebase(op, w),
            _ => op,
        };
        match uid {
            None => p.file(id, op).await,
            Some(u) => p.file_as(id, u, op).await,
        }
    }
}

/// A port connection that keeps its sandbox in use.
struct HeldPort {
    inner: stockade::PortStream,
    _busy: InUse,
}

impl tokio::io::AsyncRead for HeldPort {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for HeldPort {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_rebased_onto_the_late_workdir() {
        let op = rebase(
            FileOp::Write {
                path: "a/b.txt".into(),
                data: vec![],
                mode: None,
            },
            "/work/",
        );
        assert_eq!(op.path(), "/work/a/b.txt");
        assert_eq!(
            rebase(
                FileOp::Ls {
                    path: "/etc".into()
                },
                "/w"
            )
            .path(),
            "/etc"
        );
        let g = rebase(
            FileOp::Glob {
                pattern: "*.py".into(),
                root: ".".into(),
            },
            "/w",
        );
        assert_eq!(g.path(), "/w/.");
    }
}
