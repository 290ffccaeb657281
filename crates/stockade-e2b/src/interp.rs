//! The code interpreter (sandbox port 49999): `POST /execute` runs a cell in the
//! sandbox's long-lived Python (`interp.py`, started on first use as a streamed exec
//! with stdin kept open) and streams the E2B NDJSON lines back; the Python keeps its
//! globals between cells. One cell runs at a time per sandbox.

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
use crate::envd::{gone, resolve, token};
use crate::state::{E2b, Reach, Sbx};

const SCRIPT: &str = include_str!("interp.py");
/// Output the interpreter may stream over its life (head of its streams; see
/// `ExecRequest::output_limit_bytes`).
const OUTPUT_LIMIT: u64 = 64 << 20;
const MAX_EXECUTE_BODY: usize = 4 << 20;

/// A code-interpreter context: its own interpreter, started on first use.
pub struct Context {
    pub id: String,
    pub cwd: String,
    slot: tokio::sync::Mutex<Option<Interp>>,
}

impl Context {
    pub fn new(id: String, cwd: String) -> Context {
        Context {
            id,
            cwd,
            slot: tokio::sync::Mutex::new(None),
        }
    }

    fn json(&self) -> Value {
        json!({"id": self.id, "language": "python", "cwd": self.cwd})
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
            if let Some(l) = b.language.as_deref()
                && l != "python"
            {
                return error(
                    400,
                    &format!("language {l:?} is not served yet: contexts run python"),
                );
            }
            let cwd = b
                .cwd
                .map_or_else(|| "/home/user".to_string(), |c| resolve(&c));
            let c = Arc::new(Context::new(stockade::host::random_hex(8), cwd));
            all().insert(c.id.clone(), c.clone());
            axum::Json(c.json()).into_response()
        }
        (&Method::GET, ["contexts"]) => {
            let v: Vec<Value> = all().values().map(|c| c.json()).collect();
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
    /// Protocol bytes after the last full line.
    partial: Vec<u8>,
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
    if path == "/health" {
        return match e2b.reach(id, None) {
            Err(Reach::Gone) => gone(id),
            _ => (StatusCode::OK, "\"OK\"").into_response(),
        };
    }
    // The SDKs send the access token to /execute only, the traffic token to every
    // interpreter call: either one is enough.
    let traffic = req
        .headers()
        .get("e2b-traffic-access-token")
        .and_then(|v| v.to_str().ok());
    let s = match e2b.reach_interp(id, token(req.headers()), traffic) {
        Ok(s) => s,
        Err(Reach::Gone) => return gone(id),
        Err(Reach::Unauthorized) => {
            return error(
                401,
                "unauthorized access, please provide a valid access token (X-Access-Token) \
                 or traffic token (E2B-Traffic-Access-Token) of the sandbox",
            );
        }
    };
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
    if let Some(l) = b.language.as_deref()
        && l != "python"
    {
        return error(
            400,
            &format!("language {l:?} is not served yet: this interpreter runs python"),
        );
    }
    let cid = b.context_id.as_deref().unwrap_or("default");
    let Some(ctx) = context(&s, cid) else {
        return error(404, &format!("context {cid:?} not found"));
    };
    let line = json!({"code": code, "env_vars": b.env_vars}).to_string() + "\n";
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(run_cell(e2b, s, ctx, line, tx));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let body = Body::from_stream(futures_util::StreamExt::map(
        stream,
        Ok::<_, std::convert::Infallible>,
    ));
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

async fn start(e2b: &E2b, s: &Sbx, cwd: &str) -> stockade::Result<Interp> {
    let mut req = ExecRequest::new(["python3", "-u", "-c", SCRIPT]);
    req.cwd = Some(cwd.to_string());
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
    Ok(Interp {
        exec_id,
        events,
        partial: Vec::new(),
    })
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
        match start(&e2b, &s, &ctx.cwd).await {
            Ok(i) => *slot = Some(i),
            Err(e) => {
                let _ = tx.send(line(&json!({"type": "error", "name": "InterpreterError", "value": format!("the interpreter could not start: {e}"), "traceback": ""}))).await;
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
    let mut interrupted = false;
    loop {
        let ev = tokio::select! {
            ev = it.events.recv() => ev,
            _ = tx.closed(), if !interrupted => {
                // The client went away (its timeout, say): interrupt the cell, then
                // read on to its end so the next cell finds the interpreter idle.
                interrupted = true;
                let stop = b"{\"interrupt\": true}\n".to_vec();
                let _ = e2b
                    .daemon
                    .exec_input(&s.tenant, &it.exec_id, vec![ExecInput::Stdin(stop)])
                    .await;
                continue;
            }
        };
        match ev {
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stdout => {
                it.partial.extend_from_slice(&c.data);
                while let Some(n) = it.partial.iter().position(|b| *b == b'\n') {
                    let l: Vec<u8> = it.partial.drain(..=n).collect();
                    let done = l.starts_with(b"{\"type\": \"end_of_execution\"");
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
