//! `process.Process`: Start (streamed), List and SendSignal, as execs through the
//! daemon. Each command runs under a tiny `sh` prologue that reports its real pid
//! (`$$`, kept by `exec`) on stderr before anything else, so the `start` event
//! carries the pid `kill -0 PID` sees inside the sandbox. A process outlives the
//! request that started it (as in envd): a task owns the exec and fans its events
//! out to whoever listens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stockade::{ExecRequest, Stream, TtySize};
use stockade_server::daemon::ExecEvent;
use tokio::sync::broadcast;

use crate::connect::{self, ConnectError};
use crate::state::{E2b, Sbx};

/// The prologue: the pid line on stderr, then the command in the shell's place.
const PROLOGUE: &str = "printf '\\036pid %s\\036\\n' \"$$\" >&2; exec \"$@\"";
/// The same on a terminal, where the line's end would come back as `\r\n`.
const TTY_PROLOGUE: &str = "printf '\\036pid %s\\036' \"$$\"; exec \"$@\"";
const PID_START: &[u8] = b"\x1epid ";
/// The terminal size when the request gives none, and the largest side accepted.
const DEFAULT_COLS: u16 = 80;
const DEFAULT_ROWS: u16 = 24;
const MAX_SIDE: u32 = 10_000;
/// Most output kept per stream of one process (head and tail; the stream sends up to
/// half of it as it comes).
const OUTPUT_LIMIT: u64 = 64 << 20;

#[derive(Deserialize, Serialize, Clone, Default)]
pub struct ProcessConfig {
    #[serde(default)]
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Deserialize)]
pub struct StartRequest {
    process: Option<ProcessConfig>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    pty: Option<Pty>,
    #[serde(default)]
    stdin: Option<bool>,
}

/// `PTY`: `{"size": {"cols": C, "rows": R}}`.
#[derive(Deserialize, Default)]
pub struct Pty {
    #[serde(default)]
    size: Option<PtySize>,
}

#[derive(Deserialize, Default)]
struct PtySize {
    #[serde(default)]
    cols: u32,
    #[serde(default)]
    rows: u32,
}

impl Pty {
    /// The terminal's size: defaults for zeros, refused when absurd.
    fn size(&self) -> Result<TtySize, ConnectError> {
        let s = self.size.as_ref();
        let pick = |v: u32, default: u16, name: &str| match v {
            0 => Ok(default),
            v if v <= MAX_SIDE => Ok(v as u16),
            v => Err(ConnectError::invalid(format!(
                "pty.size.{name} {v} is out of range: 1 to {MAX_SIDE}"
            ))),
        };
        Ok(TtySize {
            cols: pick(s.map_or(0, |s| s.cols), DEFAULT_COLS, "cols")?,
            rows: pick(s.map_or(0, |s| s.rows), DEFAULT_ROWS, "rows")?,
        })
    }
}

#[derive(Deserialize, Default)]
pub struct Selector {
    pid: Option<u32>,
    tag: Option<String>,
}

#[derive(Deserialize)]
pub struct SelectRequest {
    #[serde(default)]
    process: Selector,
    #[serde(default)]
    signal: Option<Value>,
    #[serde(default)]
    input: Option<ProcessInput>,
    #[serde(default)]
    pty: Option<Pty>,
}

#[derive(Deserialize)]
pub struct ProcessInput {
    stdin: Option<String>,
    pty: Option<String>,
}

/// One process started through `Start`.
pub struct Proc {
    pub pid: u32,
    pub config: ProcessConfig,
    pub tag: Option<String>,
    /// Runs on a pseudo-terminal (the agent's: what is sent is typed on it).
    pub pty: bool,
    /// The daemon's id of the exec (for its kill input).
    exec_id: String,
    events: broadcast::Sender<Bytes>,
}

/// Most output events one process holds for a reader that has not taken them (each
/// at most a chunk of the agent's, 64 KiB): past it the process's output waits, and
/// so, through the daemon's bounded stream, does the process.
pub const MAX_QUEUED_EVENTS: usize = 16;
/// Most output events all of one tenant's processes hold at once; past it each of
/// them may hold one.
pub const MAX_TENANT_QUEUED_EVENTS: usize = 256;

/// The output events a tenant's processes hold for their readers.
#[derive(Default)]
pub struct Queued(AtomicUsize);

impl Queued {
    pub fn now(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The sending side of one process's events, counting what it holds against its
/// tenant.
struct Outbox {
    tx: broadcast::Sender<Bytes>,
    tenant: Arc<Queued>,
    /// What this process held at its last look (counted in `tenant`).
    held: usize,
}

impl Outbox {
    /// Looks at how many events wait for a reader now, and counts that.
    fn look(&mut self) -> usize {
        let now = self.tx.len();
        if now >= self.held {
            self.tenant.0.fetch_add(now - self.held, Ordering::SeqCst);
        } else {
            self.tenant.0.fetch_sub(self.held - now, Ordering::SeqCst);
        }
        self.held = now;
        now
    }

    /// Sends an output event once there is room: in this process's queue and in its
    /// tenant's. The end of a process is sent with [`Outbox::last`], without waiting.
    async fn send(&mut self, f: Bytes) {
        loop {
            let mine = self.look();
            if self.tx.receiver_count() == 0 || mine == 0 {
                break;
            }
            if mine < MAX_QUEUED_EVENTS && self.tenant.now() < MAX_TENANT_QUEUED_EVENTS {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let _ = self.tx.send(f);
        self.look();
    }

    /// Sends the end of the process (small, and never held back).
    fn last(&mut self, f: Bytes) {
        let _ = self.tx.send(f);
        self.look();
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // What is still queued is freed with the channel's last reader; it is no
        // longer this sender's to count.
        self.tenant.0.fetch_sub(self.held, Ordering::SeqCst);
    }
}

/// A `{"event": ...}` data envelope.
fn event(v: Value) -> Bytes {
    connect::data_frame(&json!({ "event": v }))
}

fn output(stream: Stream, data: &[u8], pty: bool) -> Bytes {
    let key = match stream {
        Stream::Stdout if pty => "pty",
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    event(json!({"data": {key: B64.encode(data)}}))
}

/// `Start`: the stream of the new process's events.
pub async fn start(
    e2b: &Arc<E2b>,
    s: &Arc<Sbx>,
    body: &[u8],
    timeout_ms: Option<u64>,
    uid: Option<u32>,
) -> Result<impl futures_util::Stream<Item = Bytes> + Send + 'static, ConnectError> {
    let r: StartRequest = connect::stream_request(body)?;
    let pty = r.pty.as_ref().map(Pty::size).transpose()?;
    let cfg = r
        .process
        .ok_or_else(|| ConnectError::invalid("StartRequest needs \"process\" with \"cmd\""))?;
    if cfg.cmd.is_empty() {
        return Err(ConnectError::invalid(
            "process.cmd is empty: name the program to run",
        ));
    }
    // The shell says its pid (the process's, once it execs the command) first: on
    // stderr, or on the terminal, which is both.
    let prologue = if pty.is_some() {
        TTY_PROLOGUE
    } else {
        PROLOGUE
    };
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        prologue.into(),
        "sh".into(),
    ];
    argv.push(cfg.cmd.clone());
    argv.extend(cfg.args.iter().cloned());
    let mut req = ExecRequest::new(argv);
    if uid == Some(0) {
        req.env.insert("USER".into(), "root".into());
        req.env.insert("LOGNAME".into(), "root".into());
    }
    req.uid = uid;
    req.env.extend(cfg.envs.clone());
    // A relative cwd is below the home, as on E2B.
    req.cwd = cfg.cwd.as_deref().map(crate::envd::resolve);
    req.stream = true;
    req.timeout_ms = timeout_ms;
    req.output_limit_bytes = OUTPUT_LIMIT;
    req.tty = pty;
    // A terminal always takes input (keystrokes and resizes).
    req.keep_stdin_open = pty.is_some() || r.stdin.unwrap_or(false);
    let mut rx = e2b
        .daemon
        .exec_stream(&s.tenant, &s.daemon_id, req)
        .map_err(ConnectError::from)?;
    // Until the pid line: the exec's id, stderr and stdout held back.
    let mut held = Vec::new();
    let mut held_out = Vec::new();
    let mut exec_id = String::new();
    let pid = loop {
        match rx.recv().await {
            Some(ExecEvent::Started(id)) => exec_id = id,
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stderr => {
                held.extend_from_slice(&c.data);
                if let Some(pid) = take_pid(&mut held, b"\x1e\n") {
                    break pid;
                }
            }
            Some(ExecEvent::Output(c)) if pty.is_some() => {
                held_out.extend_from_slice(&c.data);
                if let Some(pid) = take_pid(&mut held_out, b"\x1e") {
                    break pid;
                }
            }
            Some(ExecEvent::Output(c)) => held_out.extend_from_slice(&c.data),
            Some(ExecEvent::Outcome(Ok(o))) => {
                let msg =
                    String::from_utf8_lossy(if pty.is_some() { &o.stdout } else { &o.stderr });
                let msg = msg.trim();
                return Err(ConnectError::invalid(format!(
                    "the process did not start (exit {}): {msg}",
                    o.exit_code
                )));
            }
            Some(ExecEvent::Outcome(Err(e))) => return Err(e.into()),
            None => {
                return Err(ConnectError::new(
                    "internal",
                    "the exec ended without a result",
                ));
            }
        }
    };
    let (tx, first) = broadcast::channel(MAX_QUEUED_EVENTS + 8);
    let proc = Arc::new(Proc {
        pid,
        config: cfg,
        tag: r.tag,
        pty: pty.is_some(),
        exec_id,
        events: tx.clone(),
    });
    s.procs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(pid, proc);
    let sbx = s.clone();
    let e2b = e2b.clone();
    let is_pty = pty.is_some();
    let mut out = Outbox {
        tx,
        tenant: e2b.queued_output(&s.tenant),
        held: 0,
    };
    tokio::spawn(async move {
        if !held_out.is_empty() {
            out.send(output(Stream::Stdout, &held_out, is_pty)).await;
        }
        if !held.is_empty() {
            out.send(output(Stream::Stderr, &held, is_pty)).await;
        }
        let mut signalled = false;
        let end = loop {
            match rx.recv().await {
                Some(ExecEvent::Output(c)) => {
                    out.send(output(c.stream, &c.data, is_pty)).await;
                }
                Some(ExecEvent::Started(_)) => {}
                Some(ExecEvent::Outcome(Ok(o))) if o.timed_out => {
                    // The request's deadline (`connect-timeout-ms`): Connect's
                    // deadline_exceeded, which the SDKs raise as their timeout.
                    break Err(ConnectError::new(
                        "deadline_exceeded",
                        "the command's timeout passed: it was killed",
                    ));
                }
                Some(ExecEvent::Outcome(Ok(o))) => {
                    signalled = o.signal.is_some();
                    let (code, status) = match o.signal {
                        None => (o.exit_code, format!("exit status {}", o.exit_code)),
                        Some(9) => (-1, "signal: killed".to_string()),
                        Some(15) => (-1, "signal: terminated".to_string()),
                        Some(sig) => (-1, format!("signal: {sig}")),
                    };
                    let mut end = json!({"exitCode": code, "exited": true, "status": status});
                    if code != 0 {
                        end["error"] = json!(status);
                    }
                    break Ok(event(json!({ "end": end })));
                }
                Some(ExecEvent::Outcome(Err(e))) => break Err(ConnectError::from(e)),
                None => {
                    break Err(ConnectError::new(
                        "internal",
                        "the exec ended without a result",
                    ));
                }
            }
        };
        sbx.procs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&pid);
        // The sandbox killed under the command: the stream is cut off, as E2B's is.
        if (end.is_err() || signalled) && e2b.is_gone(&sbx).await {
            out.last(connect::ABORT);
            return;
        }
        match end {
            Ok(f) => {
                out.last(f);
                out.last(connect::end_frame(None));
            }
            Err(e) => out.last(connect::end_frame(Some(&e))),
        }
    });
    let start = event(json!({"start": {"pid": pid}}));
    Ok(follow(start, Some(first)))
}

/// The events after `start`, until the end envelope.
fn follow(
    start: Bytes,
    rx: Option<broadcast::Receiver<Bytes>>,
) -> impl futures_util::Stream<Item = Bytes> + Send + 'static {
    use futures_util::StreamExt;
    let rest = futures_util::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        loop {
            match rx.recv().await {
                Ok(f) => {
                    let last = connect::is_last(&f);
                    return Some((f, if last { None } else { Some(rx) }));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    futures_util::stream::iter([start]).chain(rest)
}

/// Takes the pid line off the front of the held stderr.
fn take_pid(held: &mut Vec<u8>, end_mark: &[u8]) -> Option<u32> {
    let rest = held.strip_prefix(PID_START)?;
    let end = rest.windows(end_mark.len()).position(|w| w == end_mark)?;
    let pid = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    let consumed = PID_START.len() + end + end_mark.len();
    held.drain(..consumed);
    Some(pid)
}

/// `List`.
pub fn list(s: &Sbx) -> Value {
    let procs: Vec<Value> = s
        .procs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .values()
        .map(|p| {
            let mut v = json!({"config": p.config, "pid": p.pid});
            if let Some(t) = &p.tag {
                v["tag"] = json!(t);
            }
            v
        })
        .collect();
    json!({ "processes": procs })
}

fn select(s: &Sbx, sel: &Selector) -> Result<Arc<Proc>, ConnectError> {
    let procs = s
        .procs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let found = match (sel.pid, &sel.tag) {
        (Some(pid), _) => procs.get(&pid).cloned(),
        (None, Some(tag)) => procs
            .values()
            .find(|p| p.tag.as_ref() == Some(tag))
            .cloned(),
        (None, None) => {
            return Err(ConnectError::invalid(
                "name the process: \"process\": {\"pid\": N} or {\"tag\": T}",
            ));
        }
    };
    found.ok_or_else(|| {
        ConnectError::not_found(
            "process not found: no running process of that pid or tag was started through this API",
        )
    })
}

/// `SendSignal`, through the exec's input (a kill from another exec would cross
/// Landlock's signal scope, which keeps each exec's processes out of another's reach):
/// SIGKILL (and no signal) ends the process and everything it started; SIGTERM is
/// delivered to the process, which may trap it (it ends when the process does).
pub async fn signal(e2b: &E2b, s: &Sbx, body: &[u8]) -> Result<Value, ConnectError> {
    let r: SelectRequest = connect::unary_request(body)?;
    let p = select(s, &r.process)?;
    let input = match &r.signal {
        Some(Value::String(n)) if n == "SIGNAL_SIGTERM" => stockade::ExecInput::Signal(15),
        Some(Value::Number(n)) if n.as_u64() == Some(15) => stockade::ExecInput::Signal(15),
        Some(Value::String(n)) if n == "SIGNAL_SIGKILL" => stockade::ExecInput::Kill,
        Some(Value::Number(n)) if n.as_u64() == Some(9) => stockade::ExecInput::Kill,
        None => stockade::ExecInput::Kill,
        Some(other) => {
            return Err(ConnectError::invalid(format!(
                "signal {other} is not one of SIGNAL_SIGTERM, SIGNAL_SIGKILL"
            )));
        }
    };
    e2b.daemon
        .exec_input(&s.tenant, &p.exec_id, vec![input])
        .await
        .map_err(|_| {
            ConnectError::not_found(format!("process {} not found: it has ended", p.pid))
        })?;
    Ok(json!({}))
}

/// `SendInput` (bytes to stdin) and `CloseStdin`, through the exec's input.
pub async fn input(e2b: &E2b, s: &Sbx, body: &[u8], close: bool) -> Result<Value, ConnectError> {
    let r: SelectRequest = connect::unary_request(body)?;
    let p = select(s, &r.process)?;
    let msg = if close {
        stockade::ExecInput::CloseStdin
    } else {
        let input = r.input.ok_or_else(|| {
            ConnectError::invalid("SendInput needs \"input\": {\"stdin\": BASE64}")
        })?;
        stockade::ExecInput::Stdin(input_bytes(&p, input)?)
    };
    e2b.daemon
        .exec_input(&s.tenant, &p.exec_id, vec![msg])
        .await
        .map_err(|_| {
            ConnectError::not_found(format!("process {} not found: it has ended", p.pid))
        })?;
    Ok(json!({}))
}

/// The bytes for a process's stdin (or typed on its terminal).
fn input_bytes(p: &Proc, input: ProcessInput) -> Result<Vec<u8>, ConnectError> {
    let (field, text) = match (input.pty, input.stdin) {
        (Some(t), _) if p.pty => ("pty", t),
        (Some(_), _) => {
            return Err(ConnectError::invalid(format!(
                "process {} has no terminal: send input.stdin (start it with \"pty\" for a terminal)",
                p.pid
            )));
        }
        (None, Some(t)) => ("stdin", t),
        (None, None) => {
            return Err(ConnectError::invalid(
                "input needs \"stdin\" or \"pty\" (base64 bytes)",
            ));
        }
    };
    let data = B64
        .decode(text)
        .map_err(|e| ConnectError::invalid(format!("input.{field} is not base64: {e}")))?;
    Ok(data)
}

/// `Update`: resizes a process's terminal (the kernel signals SIGWINCH to it).
pub async fn update(e2b: &E2b, s: &Sbx, body: &[u8]) -> Result<Value, ConnectError> {
    let r: SelectRequest = connect::unary_request(body)?;
    let p = select(s, &r.process)?;
    let Some(pty) = r.pty else {
        return Ok(json!({}));
    };
    if !p.pty {
        return Err(ConnectError::invalid(format!(
            "process {} has no terminal to resize (start it with \"pty\")",
            p.pid
        )));
    }
    let size = pty.size()?;
    e2b.daemon
        .exec_input(
            &s.tenant,
            &p.exec_id,
            vec![stockade::ExecInput::Resize(size)],
        )
        .await
        .map_err(|_| {
            ConnectError::not_found(format!("process {} not found: it has ended", p.pid))
        })?;
    Ok(json!({}))
}

/// `StreamInput`: a client stream of `start` (the process), then `data` inputs.
pub async fn stream_input(e2b: &E2b, s: &Sbx, body: &[u8]) -> Result<Value, ConnectError> {
    #[derive(Deserialize)]
    struct Msg {
        #[serde(default)]
        start: Option<SelectRequest>,
        #[serde(default)]
        data: Option<DataMsg>,
    }
    #[derive(Deserialize)]
    struct DataMsg {
        input: Option<ProcessInput>,
    }
    let mut proc = None;
    for (flags, payload) in connect::envelopes(body)? {
        if flags & 0x02 != 0 {
            break;
        }
        let m: Msg = serde_json::from_slice(&payload).map_err(|e| {
            ConnectError::invalid(format!("a StreamInput message is not valid JSON: {e}"))
        })?;
        if let Some(st) = m.start {
            proc = Some(select(s, &st.process)?);
        }
        let Some(input) = m.data.and_then(|d| d.input) else {
            continue;
        };
        let p = proc.as_ref().ok_or_else(|| {
            ConnectError::invalid("StreamInput's first message must be start (the process)")
        })?;
        let data = input_bytes(p, input)?;
        e2b.daemon
            .exec_input(
                &s.tenant,
                &p.exec_id,
                vec![stockade::ExecInput::Stdin(data)],
            )
            .await
            .map_err(|_| {
                ConnectError::not_found(format!("process {} not found: it has ended", p.pid))
            })?;
    }
    Ok(json!({}))
}

/// `Connect`: follow a running process.
pub fn attach(
    s: &Sbx,
    body: &[u8],
) -> Result<impl futures_util::Stream<Item = Bytes> + Send + 'static, ConnectError> {
    let r: SelectRequest = connect::stream_request(body)?;
    let p = select(s, &r.process)?;
    let start = event(json!({"start": {"pid": p.pid}}));
    Ok(follow(start, Some(p.events.subscribe())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_line_is_taken_off_stderr() {
        let mut h = b"\x1epid 42\x1e\nerr".to_vec();
        assert_eq!(take_pid(&mut h, b"\x1e\n"), Some(42));
        assert_eq!(h, b"err");
        let mut partial = b"\x1epid 4".to_vec();
        assert_eq!(take_pid(&mut partial, b"\x1e\n"), None);
        // On a terminal: no line end, the command's first output right after.
        let mut t = b"\x1epid 7\x1e$ ".to_vec();
        assert_eq!(take_pid(&mut t, b"\x1e"), Some(7));
        assert_eq!(t, b"$ ");
    }
}
