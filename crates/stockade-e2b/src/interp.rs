//! The code interpreter (sandbox port 49999): `POST /execute` runs a cell in its
//! context's long-lived interpreter (started on first use as a streamed exec with
//! stdin kept open) and streams the E2B NDJSON lines back; the interpreter keeps its
//! state between cells. One cell runs at a time per context. Three languages:
//!
//! - Python (`interp.py`, standard library only): requests on stdin, the NDJSON on a
//!   copy of its fd 1; an interrupt is a request line (KeyboardInterrupt).
//! - JavaScript (`interp.js`, on the image's `node`): the same protocol on fds 4 and
//!   3; cells run in the Node's own global scope; an interrupt is SIGINT
//!   (`breakOnSigint`), which keeps the state.
//! - bash (one `bash` per context, `BASH_DRIVER`): each cell is `eval`ed in that shell
//!   (variables, functions and the working directory stay); its raw stdout and stderr
//!   are streamed and the end of a cell is a random per-context marker on both
//!   streams, after which the exit status comes (not 0: an error). bash cannot stop a
//!   foreground command and keep going, so an interrupt ends that shell; the next
//!   cell starts a fresh one.
//!
//! A runtime missing from the image is a clear error naming it.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use stockade::{ExecInput, ExecRequest, Stream};
use stockade_server::daemon::ExecEvent;
use tokio::sync::mpsc;

use crate::api::error;
use crate::envd::resolve;
use crate::state::{E2b, Sbx};

const SCRIPT: &str = include_str!("interp.py");
const JS_SCRIPT: &str = include_str!("interp.js");
/// The bash context's driver; `SENTINEL` is replaced by the context's marker. fds 5
/// and 6 keep the exec's stdout and stderr for the markers, whatever a cell does to
/// its own fd 1 and 2; requests come on fd 4, a cell's stdin is /dev/null. A request
/// is three parts, each ended by a marker line: what sets the call's env vars, the
/// cell, and what restores them.
const BASH_DRIVER: &str = r#"exec 4<&0 0</dev/null 5>&1 6>&2
__stk_s=SENTINEL
__stk_read() {
  __stk_buf=
  while IFS= read -r __stk_l <&4; do
    if [ "$__stk_l" = "$__stk_s" ]; then return 0; fi
    __stk_buf+=$__stk_l$'\n'
  done
  exit 0
}
printf '%s ready\n' "$__stk_s" >&5
while :; do
  __stk_read; __stk_pre=$__stk_buf
  __stk_read; __stk_code=$__stk_buf
  __stk_read; __stk_post=$__stk_buf
  eval "$__stk_pre"
  eval "$__stk_code"
  __stk_rc=$?
  eval "$__stk_post"
  printf '%s %d\n' "$__stk_s" "$__stk_rc" >&5
  printf '%s\n' "$__stk_s" >&6
done
"#;
/// What interrupts a JavaScript cell.
const SIGINT: i32 = 2;
/// Buffered output of a bash cell without a newline, flushed past this size.
const BASH_LINE_MAX: usize = 64 << 10;
/// How much of a failed bash cell's stderr its error's traceback keeps.
const BASH_ERR_TAIL: usize = 2048;

/// A context's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Python,
    JavaScript,
    Bash,
}

impl Lang {
    /// The names the SDKs send (`python`, `javascript`/`js`, `bash`); the others
    /// E2B knows are refused by name.
    pub fn parse(name: &str) -> Result<Lang, String> {
        match name.to_ascii_lowercase().as_str() {
            "python" | "python3" => Ok(Lang::Python),
            "javascript" | "js" => Ok(Lang::JavaScript),
            "bash" => Ok(Lang::Bash),
            "typescript" | "ts" => Err(format!(
                "language {name:?} is not served: contexts run python, javascript (js, on the \
                 image's node) or bash; run TypeScript compiled to JavaScript"
            )),
            _ => Err(format!(
                "language {name:?} is not served: contexts run python, javascript (js) or bash"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
            Lang::Bash => "bash",
        }
    }

    /// The program the image must have.
    fn runtime(self) -> &'static str {
        match self {
            Lang::Python => "python3",
            Lang::JavaScript => "node",
            Lang::Bash => "bash",
        }
    }
}
/// Output the interpreter may stream over its life (head of its streams; see
/// `ExecRequest::output_limit_bytes`).
const OUTPUT_LIMIT: u64 = 64 << 20;
const MAX_EXECUTE_BODY: usize = 4 << 20;

/// A code-interpreter context: its own interpreter, started on first use.
pub struct Context {
    pub id: String,
    pub cwd: String,
    pub lang: Lang,
    /// The bash driver's end-of-cell marker (random, per context).
    marker: String,
    slot: tokio::sync::Mutex<Option<Interp>>,
    /// Its place in the order contexts were made (the order they are listed in).
    made: u64,
}

/// Counts the contexts made, for [`Context::made`].
static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Context {
    pub fn new(id: String, cwd: String) -> Context {
        Context::of(id, cwd, Lang::Python)
    }

    pub fn of(id: String, cwd: String, lang: Lang) -> Context {
        Context {
            id,
            cwd,
            lang,
            marker: format!("__stockade_{}", stockade::host::random_hex(16)),
            slot: tokio::sync::Mutex::new(None),
            made: MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn json(&self) -> Value {
        json!({"id": self.id, "language": self.lang.name(), "cwd": self.cwd})
    }
}

#[derive(Deserialize)]
struct NewContext {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

fn context(s: &Sbx, id: &str) -> Option<Arc<Context>> {
    s.contexts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(id)
        .cloned()
}

/// `/contexts`: create, list, remove and restart contexts.
async fn contexts(s: &Sbx, method: &Method, path: &str, body: &[u8]) -> Response {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let all = || {
        s.contexts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    match (method, parts.as_slice()) {
        (&Method::POST, ["contexts"]) => {
            let b: NewContext =
                match serde_json::from_slice(if body.is_empty() { b"{}" } else { body }) {
                    Ok(b) => b,
                    Err(e) => {
                        return error(
                            400,
                            &format!("the body is not {{\"language\", \"cwd\"}}: {e}"),
                        );
                    }
                };
            let lang = match b.language.as_deref().map(Lang::parse) {
                None => Lang::Python,
                Some(Ok(l)) => l,
                Some(Err(e)) => return error(400, &e),
            };
            let cwd = b
                .cwd
                .map_or_else(|| "/home/user".to_string(), |c| resolve(&c));
            let c = Arc::new(Context::of(stockade::host::random_hex(8), cwd, lang));
            all().insert(c.id.clone(), c.clone());
            axum::Json(c.json()).into_response()
        }
        (&Method::GET, ["contexts"]) => {
            let mut v: Vec<Arc<Context>> = all().values().cloned().collect();
            // The defaults first, then in the order they were made.
            v.sort_by_key(|c| (!c.id.starts_with("default"), c.made));
            let v: Vec<Value> = v.iter().map(|c| c.json()).collect();
            axum::Json(Value::Array(v)).into_response()
        }
        (&Method::DELETE, ["contexts", id]) => match all().remove(*id) {
            // Dropping its interpreter ends it.
            Some(_) => StatusCode::NO_CONTENT.into_response(),
            None => error(404, &format!("context {id:?} not found")),
        },
        (&Method::POST, ["contexts", id, "restart"]) => match context(s, id) {
            Some(c) => {
                *c.slot.lock().await = None;
                StatusCode::NO_CONTENT.into_response()
            }
            None => error(404, &format!("context {id:?} not found")),
        },
        _ => error(
            404,
            &format!(
                "no code-interpreter route {method} {path} (it serves /execute and /contexts)"
            ),
        ),
    }
}

/// A running interpreter.
pub struct Interp {
    exec_id: String,
    events: mpsc::Receiver<ExecEvent>,
    /// Protocol bytes after the last full line (bash: stdout not sent yet).
    partial: Vec<u8>,
    /// bash: stderr not sent yet.
    err_partial: Vec<u8>,
    /// bash: cells run (the others count their own).
    count: u64,
}

#[derive(Deserialize)]
struct ExecuteBody {
    code: Option<String>,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<Value>,
}

pub async fn handle(e2b: Arc<E2b>, id: &str, req: Request) -> Response {
    let path = req.uri().path().to_string();
    // The SDKs send the access token to /execute only, the traffic token to every
    // interpreter call: either one is enough.
    let s = match crate::envd::reach_either(&e2b, id, req.headers()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Err(r) = crate::conn::authenticated(&req, &e2b.conns, &s.tenant) {
        return *r;
    }
    e2b.wake(&s).await;
    if path == "/health" {
        return (StatusCode::OK, "\"OK\"").into_response();
    }
    if path.starts_with("/contexts") {
        let method = req.method().clone();
        let Ok(body) = to_bytes(req.into_body(), MAX_EXECUTE_BODY).await else {
            return error(413, "the body is over 4 MiB");
        };
        return contexts(&s, &method, &path, &body).await;
    }
    if req.method() != Method::POST || path != "/execute" {
        return error(
            404,
            &format!(
                "no code-interpreter route {} {path} (it serves /execute and /contexts)",
                req.method()
            ),
        );
    }
    let Ok(body) = to_bytes(req.into_body(), MAX_EXECUTE_BODY).await else {
        return error(413, "the cell is over 4 MiB");
    };
    let b: ExecuteBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(400, &format!("the body is not {{\"code\": ...}}: {e}")),
    };
    let Some(code) = b.code else {
        return error(400, "the body needs \"code\"");
    };
    if b.context_id.is_some() && b.language.is_some() {
        return error(400, "give context_id or language, not both");
    }
    let ctx = match (
        b.context_id.as_deref(),
        b.language.as_deref().map(Lang::parse),
    ) {
        (_, Some(Err(e))) => return error(400, &e),
        (Some(_), Some(Ok(_))) => return error(400, "give context_id or language, not both"),
        (Some(cid), None) => match context(&s, cid) {
            Some(c) => c,
            None => return error(404, &format!("context {cid:?} not found")),
        },
        (None, None | Some(Ok(Lang::Python))) => match context(&s, "default") {
            Some(c) => c,
            None => return error(404, "context \"default\" not found"),
        },
        // The language's default context, made on first use.
        (None, Some(Ok(lang))) => {
            let id = format!("default-{}", lang.name());
            s.contexts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(id.clone())
                .or_insert_with(|| Arc::new(Context::of(id, "/home/user".into(), lang)))
                .clone()
        }
    };
    let line = if ctx.lang == Lang::Bash {
        match bash_request(&ctx.marker, &code, b.env_vars.as_ref()) {
            Ok(r) => r,
            Err(e) => return error(400, &e),
        }
    } else {
        json!({"code": code, "env_vars": b.env_vars}).to_string() + "\n"
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(run_cell(e2b, s, ctx, line, tx));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let body = Body::from_stream(futures_util::StreamExt::map(stream, |l| {
        if l.is_empty() {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the sandbox is gone",
            ))
        } else {
            Ok(l)
        }
    }));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn line(v: &Value) -> Bytes {
    Bytes::from(v.to_string() + "\n")
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Starts the context's interpreter and waits until it is ready for a cell. A
/// runtime the image lacks is an error naming it.
async fn start(e2b: &E2b, s: &Sbx, ctx: &Context) -> stockade::Result<Interp> {
    let lang = ctx.lang;
    let missing = |rt: &str| {
        format!(
            "command -v {rt} >/dev/null 2>&1 || {{ echo \"no {rt} on the sandbox's PATH ($PATH)\" >&2; exit 127; }}; "
        )
    };
    let mut req = match lang {
        Lang::Python => ExecRequest::new(["python3", "-u", "-c", SCRIPT]),
        Lang::JavaScript => ExecRequest::new([
            "/bin/sh".to_string(),
            "-c".to_string(),
            missing("node") + "exec 3>&1 4<&0 1>&2 0</dev/null; exec node -e \"$0\"",
            JS_SCRIPT.to_string(),
        ]),
        Lang::Bash => ExecRequest::new([
            "/bin/sh".to_string(),
            "-c".to_string(),
            missing("bash") + "exec bash --noprofile --norc -c \"$0\"",
            BASH_DRIVER.replace("SENTINEL", &ctx.marker),
        ]),
    };
    req.cwd = Some(ctx.cwd.clone());
    req.stream = true;
    req.keep_stdin_open = true;
    req.output_limit_bytes = OUTPUT_LIMIT;
    let mut events = e2b.daemon.exec_stream(&s.tenant, &s.daemon_id, req)?;
    let exec_id = match events.recv().await {
        Some(ExecEvent::Started(id)) => id,
        Some(ExecEvent::Outcome(Err(e))) => return Err(e),
        _ => {
            return Err(stockade::Error::Internal(
                "the interpreter did not start".into(),
            ));
        }
    };
    let mut it = Interp {
        exec_id,
        events,
        partial: Vec::new(),
        err_partial: Vec::new(),
        count: 0,
    };
    // Ready: `{"type": "ready"}` (python, javascript) or `MARKER ready` (bash) on stdout.
    let bash_ready = format!("{} ready\n", ctx.marker);
    let mut stderr = Vec::new();
    loop {
        match it.events.recv().await {
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stdout => {
                it.partial.extend_from_slice(&c.data);
                if lang == Lang::Bash {
                    if let Some(at) = find(&it.partial, bash_ready.as_bytes()) {
                        it.partial.drain(..at + bash_ready.len());
                        return Ok(it);
                    }
                    continue;
                }
                while let Some(n) = it.partial.iter().position(|b| *b == b'\n') {
                    let l: Vec<u8> = it.partial.drain(..=n).collect();
                    if serde_json::from_slice::<Value>(&l).is_ok_and(|v| v["type"] == "ready") {
                        return Ok(it);
                    }
                }
            }
            Some(ExecEvent::Output(c)) => {
                if stderr.len() < 4096 {
                    stderr.extend_from_slice(&c.data);
                }
            }
            Some(ExecEvent::Started(_)) => {}
            Some(ExecEvent::Outcome(r)) => {
                let said = String::from_utf8_lossy(&stderr).trim().to_string();
                return Err(match r {
                    Ok(o) if o.exit_code == 127 => stockade::Error::Unavailable {
                        what: format!("a {} context", lang.name()),
                        reason: format!("the sandbox's image has no `{}` ({said})", lang.runtime()),
                        fix: format!(
                            "use a template whose image has {} on its PATH",
                            lang.runtime()
                        ),
                    },
                    Ok(o) => stockade::Error::Internal(format!(
                        "the {} interpreter exited at start (code {}, signal {:?}): {said}",
                        lang.name(),
                        o.exit_code,
                        o.signal
                    )),
                    Err(e) => e,
                });
            }
            None => {
                return Err(stockade::Error::Internal(
                    "the interpreter did not start".into(),
                ));
            }
        }
    }
}

/// Where `needle` starts in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A bash context's request: what sets the call's env vars, the cell, and what
/// restores them, each ended by the marker line. A name that is no shell variable
/// name is refused.
fn bash_request(marker: &str, code: &str, env: Option<&Value>) -> Result<String, String> {
    let mut names = Vec::new();
    let mut sets = Vec::new();
    match env {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let ok = k
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !ok {
                    return Err(format!("env_vars: {k:?} is not a shell variable name"));
                }
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                names.push(k.clone());
                sets.push(format!(
                    "{k}='{}'",
                    v.replace('\0', "").replace('\'', r"'\''")
                ));
            }
        }
        Some(_) => return Err("env_vars is not an object of names and values".into()),
    }
    let (pre, post) = if names.is_empty() {
        (String::new(), String::new())
    } else {
        let names = names.join(" ");
        (
            format!(
                "__stk_saved=$(declare -p {names} 2>/dev/null)\nexport {}\n",
                sets.join(" ")
            ),
            format!("unset {names}\neval \"$__stk_saved\"\n"),
        )
    };
    let mut code = code.replace('\0', "");
    if !code.is_empty() && !code.ends_with('\n') {
        code.push('\n');
    }
    Ok(format!("{pre}{marker}\n{code}{marker}\n{post}{marker}\n"))
}

/// Runs one cell; the lines go to `tx` (a gone client does not stop the cell, which
/// must finish for the next one to start).
async fn run_cell(
    e2b: Arc<E2b>,
    s: Arc<Sbx>,
    ctx: Arc<Context>,
    request: String,
    tx: mpsc::Sender<Bytes>,
) {
    let mut slot = ctx.slot.lock().await;
    if slot.is_none() {
        match start(&e2b, &s, &ctx).await {
            Ok(i) => *slot = Some(i),
            Err(e) => {
                let msg = format!("the {} interpreter could not start: {e}", ctx.lang.name());
                let _ = tx.send(line(&json!({"type": "error", "name": "InterpreterError", "value": msg, "traceback": msg}))).await;
                let _ = tx.send(line(&json!({"type": "end_of_execution"}))).await;
                return;
            }
        }
    }
    let Some(it) = slot.as_mut() else { return };
    let sent = e2b
        .daemon
        .exec_input(
            &s.tenant,
            &it.exec_id,
            vec![ExecInput::Stdin(request.into_bytes())],
        )
        .await;
    if let Err(e) = sent {
        *slot = None;
        let _ = tx.send(line(&json!({"type": "error", "name": "InterpreterError", "value": format!("the interpreter is gone: {e}"), "traceback": ""}))).await;
        return;
    }
    if ctx.lang == Lang::Bash {
        let ended = bash_cell(&e2b, &s, &ctx.marker, it, &tx).await;
        if !ended {
            *slot = None;
        }
        return;
    }
    let mut interrupted = false;
    loop {
        let ev = tokio::select! {
            ev = it.events.recv() => ev,
            _ = tx.closed(), if !interrupted => {
                // The client went away (its timeout, say): interrupt the cell, then
                // read on to its end so the next cell finds the interpreter idle.
                interrupted = true;
                let stop = match ctx.lang {
                    Lang::JavaScript => ExecInput::Signal(SIGINT),
                    _ => ExecInput::Stdin(b"{\"interrupt\": true}\n".to_vec()),
                };
                let _ = e2b
                    .daemon
                    .exec_input(&s.tenant, &it.exec_id, vec![stop])
                    .await;
                continue;
            }
        };
        match ev {
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stdout => {
                it.partial.extend_from_slice(&c.data);
                while let Some(n) = it.partial.iter().position(|b| *b == b'\n') {
                    let l: Vec<u8> = it.partial.drain(..=n).collect();
                    let done = l.starts_with(b"{\"type\": \"end_of_execution\"")
                        || l.starts_with(b"{\"type\":\"end_of_execution\"");
                    let _ = tx.send(Bytes::from(l)).await;
                    if done {
                        return;
                    }
                }
            }
            Some(ExecEvent::Output(c)) => {
                let text = String::from_utf8_lossy(&c.data).into_owned();
                let _ = tx
                    .send(line(
                        &json!({"type": "stderr", "text": text, "timestamp": now()}),
                    ))
                    .await;
            }
            Some(ExecEvent::Started(_)) => {}
            Some(ExecEvent::Outcome(r)) => {
                *slot = None;
                // The sandbox killed under the cell: the answer is cut off, as E2B's
                // is, and the SDK raises instead of returning an execution.
                if e2b.is_gone(&s).await {
                    let _ = tx.send(crate::connect::ABORT).await;
                    return;
                }
                let why = match r {
                    Ok(o) => format!(
                        "the interpreter exited (code {}, signal {:?}); its state is lost and the next cell starts a fresh one",
                        o.exit_code, o.signal
                    ),
                    Err(e) => format!("the interpreter failed: {e}"),
                };
                let _ = tx.send(line(&json!({"type": "error", "name": "InterpreterExited", "value": why, "traceback": why}))).await;
                let _ = tx.send(line(&json!({"type": "end_of_execution"}))).await;
                *slot = None;
                return;
            }
            None => {
                *slot = None;
                return;
            }
        }
    }
}

/// Sends stdout or stderr text of a bash cell as its NDJSON line.
async fn send_text(tx: &mpsc::Sender<Bytes>, kind: &str, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(bytes);
    let _ = tx
        .send(line(
            &json!({"type": kind, "text": text, "timestamp": now()}),
        ))
        .await;
}

/// What of `buf` can go out now: up to the marker when it is there (then also
/// whether it was found), else whole lines, else (past [`BASH_LINE_MAX`]) all but
/// what could be the start of the marker.
fn bash_take(buf: &mut Vec<u8>, marker: &[u8]) -> (Vec<u8>, bool) {
    if let Some(at) = find(buf, marker) {
        let out: Vec<u8> = buf.drain(..at).collect();
        return (out, true);
    }
    let upto = match buf.iter().rposition(|b| *b == b'\n') {
        Some(n) => n + 1,
        None if buf.len() > BASH_LINE_MAX => buf.len() - marker.len(),
        None => 0,
    };
    (buf.drain(..upto).collect(), false)
}

/// Runs one bash cell whose request was sent: streams its stdout and stderr until
/// the marker came on both, then sends its error (exit status not 0), count and end.
/// False when the shell is gone (it exited, or was ended for an interrupt).
async fn bash_cell(
    e2b: &E2b,
    s: &Sbx,
    marker: &str,
    it: &mut Interp,
    tx: &mpsc::Sender<Bytes>,
) -> bool {
    let out_marker = format!("{marker} ");
    let err_marker = format!("{marker}\n");
    let mut status: Option<i32> = None;
    let mut err_done = false;
    let mut err_tail: Vec<u8> = Vec::new();
    let mut interrupted = false;
    it.count += 1;
    loop {
        if let Some(rc) = status
            && err_done
        {
            if rc != 0 {
                let tail = String::from_utf8_lossy(&err_tail).into_owned();
                let _ = tx
                    .send(line(&json!({
                        "type": "error",
                        "name": "ExitStatusError",
                        "value": format!("the cell's last command exited with status {rc}"),
                        "traceback": if tail.is_empty() { format!("exit status {rc}") } else { tail },
                    })))
                    .await;
            }
            let _ = tx
                .send(line(
                    &json!({"type": "number_of_executions", "execution_count": it.count}),
                ))
                .await;
            let _ = tx.send(line(&json!({"type": "end_of_execution"}))).await;
            return true;
        }
        let ev = tokio::select! {
            ev = it.events.recv() => ev,
            _ = tx.closed(), if !interrupted => {
                // bash cannot stop a foreground command and go on: its shell ends.
                interrupted = true;
                let _ = e2b
                    .daemon
                    .exec_input(&s.tenant, &it.exec_id, vec![ExecInput::Kill])
                    .await;
                continue;
            }
        };
        match ev {
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stdout && status.is_none() => {
                it.partial.extend_from_slice(&c.data);
                let (text, found) = bash_take(&mut it.partial, out_marker.as_bytes());
                send_text(tx, "stdout", &text).await;
                if found {
                    // `MARKER <status>\n`
                    if let Some(nl) = it.partial.iter().position(|b| *b == b'\n') {
                        let l: Vec<u8> = it.partial.drain(..=nl).collect();
                        let rc = String::from_utf8_lossy(&l[out_marker.len()..])
                            .trim()
                            .parse()
                            .unwrap_or(-1);
                        status = Some(rc);
                    }
                }
            }
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stdout => {
                // Output of what the cell left running in the background.
                it.partial.extend_from_slice(&c.data);
            }
            Some(ExecEvent::Output(c)) if !err_done => {
                it.err_partial.extend_from_slice(&c.data);
                let (text, found) = bash_take(&mut it.err_partial, err_marker.as_bytes());
                err_tail.extend_from_slice(&text);
                if err_tail.len() > BASH_ERR_TAIL {
                    err_tail.drain(..err_tail.len() - BASH_ERR_TAIL);
                }
                send_text(tx, "stderr", &text).await;
                if found {
                    it.err_partial.drain(..err_marker.len());
                    err_done = true;
                }
            }
            Some(ExecEvent::Output(c)) => it.err_partial.extend_from_slice(&c.data),
            Some(ExecEvent::Started(_)) => {}
            Some(ExecEvent::Outcome(r)) => {
                let rest = std::mem::take(&mut it.partial);
                send_text(tx, "stdout", &rest).await;
                let rest = std::mem::take(&mut it.err_partial);
                send_text(tx, "stderr", &rest).await;
                let why = match r {
                    _ if interrupted => "the cell was interrupted: its bash was ended (bash cannot stop a running command and keep its state); the next cell starts a fresh shell".to_string(),
                    Ok(o) => format!(
                        "the bash of this context exited (code {}, signal {:?}): its state is lost and the next cell starts a fresh shell",
                        o.exit_code, o.signal
                    ),
                    Err(e) => format!("the bash of this context failed: {e}"),
                };
                let _ = tx.send(line(&json!({"type": "error", "name": "InterpreterExited", "value": why, "traceback": why}))).await;
                let _ = tx
                    .send(line(
                        &json!({"type": "number_of_executions", "execution_count": it.count}),
                    ))
                    .await;
                let _ = tx.send(line(&json!({"type": "end_of_execution"}))).await;
                return false;
            }
            None => return false,
        }
    }
}
