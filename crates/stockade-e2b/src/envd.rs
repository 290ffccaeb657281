//! envd (sandbox port 49983): the Connect services `process.Process` and
//! `filesystem.Filesystem`, and the plain `/health` and `/files`. Every call needs
//! the sandbox's access token (`X-Access-Token`), or for `/files` a URL signed with it.

use std::sync::Arc;

use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use stockade::{ExecRequest, FileEntry, FileKind, FileOp, FileResult};

use crate::connect::{self, ConnectError};
use crate::state::{E2b, Reach, Sbx};
use crate::{api, files, process, watch};

/// Largest Connect request body (commands and paths, not file contents).
const MAX_RPC_BODY: usize = 4 << 20;
/// Deepest `ListDir`.
const MAX_DEPTH: u32 = 16;

/// The proxy's answer for a sandbox that does not exist (the SDKs match "was not found").
pub fn gone(id: &str) -> Response {
    (
        StatusCode::BAD_GATEWAY,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}).to_string(),
    )
        .into_response()
}

pub fn token(h: &HeaderMap) -> Option<&str> {
    h.get("x-access-token").and_then(|v| v.to_str().ok())
}

/// The answer to a signed `/files` URL whose signature does not hold, the same for
/// every id, so a forged signature tells nothing of which sandboxes exist.
fn gone_or_unsigned(id: &str) -> Response {
    (
        StatusCode::BAD_GATEWAY,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json!({
            "sandboxId": id,
            "message": "The sandbox was not found, or the URL's signature is not valid \
                        for this path, operation and time (sign it again with the \
                        sandbox's access token)",
            "code": 502,
        })
        .to_string(),
    )
        .into_response()
}

/// Whether a query string holds the parameter `key`.
/// A signed `/files` URL on one origin, with no sandbox named (see
/// [`E2b::find_signed`]); an unsigned one, or one no sandbox signed, gets the answer a
/// forged signature gets.
pub async fn handle_signed_anywhere(e2b: Arc<E2b>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or("").to_string();
    let op = if req.method() == Method::GET {
        "read"
    } else {
        "write"
    };
    match e2b.find_signed(op, &query, stockade::now_ms() / 1000) {
        Some(s) => {
            let id = s.id.clone();
            handle(e2b, &id, req).await
        }
        None => gone_or_unsigned("unknown"),
    }
}

/// Whether `req` is a signed `/files` URL (`download_url`/`upload_url`).
pub fn is_signed_files(req: &Request) -> bool {
    req.uri().path() == "/files"
        && token(req.headers()).is_none()
        && query_has(req.uri().query().unwrap_or(""), "signature")
}

fn query_has(query: &str, key: &str) -> bool {
    form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == key)
}

/// The sandbox of a call, or the answer refusing it: 401 without a token (whatever
/// the id), and for a token that is not the sandbox's the same 502 as for an id that
/// does not exist.
pub fn reach(e2b: &E2b, id: &str, h: &HeaderMap) -> Result<Arc<Sbx>, Box<Response>> {
    e2b.reach(id, token(h)).map_err(|r| Box::new(match r {
        Reach::Gone => gone(id),
        Reach::Unauthorized => api::error(
            401,
            "unauthorized access, please provide a valid access token (X-Access-Token: the sandbox's envdAccessToken)",
        ),
    }))
}

/// The answer to a call that needs either token and showed neither.
const NEITHER_TOKEN: &str = "unauthorized access, please provide a valid access token \
                             (X-Access-Token) or traffic token (E2B-Traffic-Access-Token) \
                             of the sandbox";

/// [`reach`] for a call where the sandbox's traffic token
/// (`E2B-Traffic-Access-Token`) stands in for its access token.
pub fn reach_either(e2b: &E2b, id: &str, h: &HeaderMap) -> Result<Arc<Sbx>, Box<Response>> {
    let traffic = h
        .get("e2b-traffic-access-token")
        .and_then(|v| v.to_str().ok());
    e2b.reach_either(id, token(h), traffic).map_err(|r| {
        Box::new(match r {
            Reach::Gone => gone(id),
            Reach::Unauthorized => api::error(401, NEITHER_TOKEN),
        })
    })
}

pub async fn handle(e2b: Arc<E2b>, id: &str, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    if path == "/files" {
        // The access token, or a URL signed with it (`download_url`/`upload_url`).
        let query = req.uri().query().unwrap_or("");
        let s = if token(req.headers()).is_none() && query_has(query, "signature") {
            let op = if method == Method::GET {
                "read"
            } else {
                "write"
            };
            match e2b.reach_signed(id) {
                Ok(s) if files::signature_ok(&s.token, op, query, stockade::now_ms() / 1000) => s,
                _ => return gone_or_unsigned(id),
            }
        } else {
            match reach(&e2b, id, req.headers()) {
                Ok(s) => s,
                Err(r) => return *r,
            }
        };
        if let Err(r) = crate::conn::authenticated(&req, &e2b.conns, &s.tenant) {
            return *r;
        }
        e2b.wake(&s).await;
        return files::handle(&e2b, &s, req).await;
    }
    let s = match reach(&e2b, id, req.headers()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Err(r) = crate::conn::authenticated(&req, &e2b.conns, &s.tenant) {
        return *r;
    }
    e2b.wake(&s).await;
    if path == "/health" {
        // A paused sandbox does not answer, as on E2B (the SDKs' `is_running()` reads
        // the 502 as "not running").
        if s.paused_at().is_some() {
            return api::error(502, &format!("sandbox {id} is paused"));
        }
        return StatusCode::NO_CONTENT.into_response();
    }
    if method != Method::POST || !path.contains('.') {
        return api::error(
            404,
            &format!(
                "no envd route {method} {path} (envd serves /health, /files and POST /process.Process/* and /filesystem.Filesystem/*)"
            ),
        );
    }
    let uid = match user_of(req.headers(), s.default_uid) {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    let timeout_ms = header_u64(req.headers(), "connect-timeout-ms");
    let keepalive = header_u64(req.headers(), "keepalive-ping-interval")
        .filter(|s| *s > 0)
        .map(std::time::Duration::from_secs);
    let Ok(body) = to_bytes(req.into_body(), MAX_RPC_BODY).await else {
        return ConnectError::new("resource_exhausted", "the RPC body is over 4 MiB")
            .into_response();
    };
    match path.as_str() {
        "/process.Process/Start" => match process::start(&e2b, &s, &body, timeout_ms, uid).await {
            Ok(st) => connect::stream_response(st),
            Err(e) => connect::stream_error(e),
        },
        "/process.Process/Connect" => match process::attach(&s, &body) {
            Ok(st) => connect::stream_response(st),
            Err(e) => connect::stream_error(e),
        },
        "/process.Process/List" => connect::unary_response(&process::list(&s)),
        "/process.Process/SendSignal" => reply(process::signal(&e2b, &s, &body).await),
        "/process.Process/SendInput" => reply(process::input(&e2b, &s, &body, false).await),
        "/process.Process/CloseStdin" => reply(process::input(&e2b, &s, &body, true).await),
        "/process.Process/Update" => reply(process::update(&e2b, &s, &body).await),
        // A client stream: one `{}` message, then the end.
        "/process.Process/StreamInput" => match process::stream_input(&e2b, &s, &body).await {
            Ok(v) => connect::stream_response(futures_util::stream::iter([
                connect::data_frame(&v),
                connect::end_frame(None),
            ])),
            Err(e) => connect::stream_error(e),
        },
        "/filesystem.Filesystem/Stat" => reply(stat(&e2b, &s, uid, &body).await),
        "/filesystem.Filesystem/ListDir" => reply(list_dir(&e2b, &s, uid, &body).await),
        "/filesystem.Filesystem/MakeDir" => reply(make_dir(&e2b, &s, uid, &body).await),
        "/filesystem.Filesystem/Remove" => reply(remove(&e2b, &s, uid, &body).await),
        "/filesystem.Filesystem/Move" => reply(rename(&e2b, &s, uid, &body).await),
        "/filesystem.Filesystem/WatchDir" => {
            let timeout = timeout_ms.map(std::time::Duration::from_millis);
            match watch::watch_dir(&e2b, &s, &body, uid, keepalive, timeout).await {
                Ok(st) => connect::stream_response(st),
                Err(e) => connect::stream_error(e),
            }
        }
        "/filesystem.Filesystem/CreateWatcher" => reply(watch::create(&e2b, &s, &body, uid).await),
        "/filesystem.Filesystem/GetWatcherEvents" => reply(watch::events(&e2b, &s, &body).await),
        "/filesystem.Filesystem/RemoveWatcher" => reply(watch::remove(&s, &body)),
        other => ConnectError::new(
            "unimplemented",
            format!("{other} is not served by Stockade's envd"),
        )
        .into_response(),
    }
}

fn header_u64(h: &HeaderMap, name: &str) -> Option<u64> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// The RPC's user (`Authorization: Basic base64("NAME:")`): `user`, the sandbox's
/// account (uid 1000; `None`), or `root`, uid 0 of the sandbox's own user namespace
/// (`Some(0)`); without the header, the sandbox's `default`. Any other name is refused.
fn user_of(h: &HeaderMap, default: Option<u32>) -> Result<Option<u32>, ConnectError> {
    use base64::Engine;
    let Some(v) = h.get(axum::http::header::AUTHORIZATION) else {
        return Ok(default);
    };
    let name = v
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .map(|s| s.split(':').next().unwrap_or("").to_string());
    match name.as_deref() {
        Some("user") => Ok(None),
        Some("root") => Ok(Some(0)),
        Some(other) => Err(ConnectError::new(
            "unauthenticated",
            format!(
                "invalid username {other:?}: Stockade's E2B sandboxes have the users \"user\" \
                 (uid 1000, home /home/user) and \"root\" (root of the sandbox's own user \
                 namespace, no host privilege)"
            ),
        )),
        None => Err(ConnectError::new(
            "unauthenticated",
            "the Authorization header is not Basic base64(\"NAME:\")",
        )),
    }
}

fn reply(r: Result<Value, ConnectError>) -> Response {
    match r {
        Ok(v) => connect::unary_response(&v),
        Err(e) => e.into_response(),
    }
}

/// A file operation as the request's user: the sandbox user (`None`), or `uid` of the
/// sandbox's own user namespace (root: 0).
pub async fn file_op(
    e2b: &E2b,
    s: &Sbx,
    uid: Option<u32>,
    op: FileOp,
) -> stockade::Result<FileResult> {
    match uid {
        None => e2b.daemon.file(&s.tenant, &s.daemon_id, op).await,
        Some(u) => e2b.daemon.file_as(&s.tenant, &s.daemon_id, u, op).await,
    }
}

/// An absolute path: relative ones are under the user's home; `~` is the home.
pub fn resolve(path: &str) -> String {
    if path == "~" {
        "/home/user".into()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("/home/user/{rest}")
    } else if path.starts_with('/') {
        path.into()
    } else {
        format!("/home/user/{path}")
    }
}

fn base_name(path: &str) -> String {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string()
}

fn perms(kind: FileKind, mode: u32) -> String {
    let mut s = String::from(match kind {
        FileKind::Dir => "d",
        FileKind::Symlink => "l",
        _ => "-",
    });
    for shift in [6, 3, 0] {
        let b = (mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// An `EntryInfo` of the entry at `path`.
pub fn entry_info(path: &str, e: &FileEntry) -> Value {
    let kind = match e.kind {
        FileKind::File => "FILE_TYPE_FILE",
        FileKind::Dir => "FILE_TYPE_DIRECTORY",
        FileKind::Symlink => "FILE_TYPE_SYMLINK",
        FileKind::Other => "FILE_TYPE_UNSPECIFIED",
    };
    let mtime = chrono::DateTime::from_timestamp(e.mtime, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut v = json!({
        "name": base_name(path),
        "type": kind,
        "path": path,
        "size": e.size.to_string(),
        "mode": e.mode & 0o7777,
        "permissions": perms(e.kind, e.mode),
        "owner": "user",
        "group": "user",
        "modifiedTime": mtime,
    });
    // A link: its target, and the mark newer SDKs read (older ones see the
    // SYMLINK type a listing gives; a stat gives the type of what it leads to).
    if let Some(t) = &e.link_target {
        v["symlinkTarget"] = json!(t);
        v["isSymlink"] = json!(true);
    }
    let metadata: serde_json::Map<String, Value> = e
        .xattrs
        .iter()
        .filter_map(|(k, val)| {
            k.strip_prefix(crate::files::METADATA_XATTR)
                .map(|k| (k.to_string(), json!(val)))
        })
        .collect();
    if !metadata.is_empty() {
        v["metadata"] = Value::Object(metadata);
    }
    v
}

#[derive(Deserialize)]
struct PathRequest {
    #[serde(default)]
    path: String,
    #[serde(default)]
    depth: Option<u32>,
}

#[derive(Deserialize)]
struct MoveRequest {
    #[serde(default)]
    source: String,
    #[serde(default)]
    destination: String,
}

fn path_of(body: &[u8]) -> Result<(String, Option<u32>), ConnectError> {
    let r: PathRequest = connect::unary_request(body)?;
    if r.path.is_empty() {
        return Err(ConnectError::invalid(
            "\"path\" is empty: name a path in the sandbox",
        ));
    }
    Ok((resolve(&r.path), r.depth))
}

pub async fn stat_path(
    e2b: &E2b,
    s: &Sbx,
    uid: Option<u32>,
    path: &str,
) -> Result<FileEntry, ConnectError> {
    match file_op(e2b, s, uid, FileOp::Stat { path: path.into() }).await {
        Ok(FileResult::Entries(mut v)) if !v.is_empty() => Ok(v.remove(0)),
        Ok(_) => Err(ConnectError::new("internal", "stat gave no entry")),
        Err(e) => Err(e.into()),
    }
}

async fn stat(e2b: &E2b, s: &Sbx, uid: Option<u32>, body: &[u8]) -> Result<Value, ConnectError> {
    let (path, _) = path_of(body)?;
    let e = stat_path(e2b, s, uid, &path).await?;
    Ok(json!({"entry": entry_info(&path, &e)}))
}

async fn list_dir(
    e2b: &E2b,
    s: &Sbx,
    uid: Option<u32>,
    body: &[u8],
) -> Result<Value, ConnectError> {
    let (path, depth) = path_of(body)?;
    let depth = depth.unwrap_or(1).clamp(1, MAX_DEPTH);
    let top = stat_path(e2b, s, uid, &path).await?;
    if top.kind != FileKind::Dir {
        return Err(ConnectError::invalid(format!(
            "path {path} is not a directory"
        )));
    }
    let mut out = Vec::new();
    // Depth-first, each directory's entries by name and each one's subtree right
    // after it, as E2B's envd walks.
    let mut stack = vec![(path.trim_end_matches('/').to_string(), 1u32)];
    let mut pending: Vec<Vec<(String, FileEntry, u32)>> = Vec::new();
    while let Some((dir, level)) = stack.pop() {
        let mut entries = match file_op(e2b, s, uid, FileOp::Ls { path: dir.clone() }).await {
            Ok(FileResult::Entries(v)) => v,
            Ok(_) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        // Reversed: the first by name is popped first.
        pending.push(
            entries
                .into_iter()
                .rev()
                .map(|e| (format!("{dir}/{}", e.name), e, level))
                .collect(),
        );
        // Emit entries until a directory to descend into comes up.
        while let Some(top) = pending.last_mut() {
            let Some((p, e, level)) = top.pop() else {
                pending.pop();
                continue;
            };
            out.push(entry_info(&p, &e));
            if e.kind == FileKind::Dir && level < depth {
                stack.push((p, level + 1));
                break;
            }
        }
    }
    Ok(json!({ "entries": out }))
}

async fn make_dir(
    e2b: &E2b,
    s: &Sbx,
    uid: Option<u32>,
    body: &[u8],
) -> Result<Value, ConnectError> {
    let (path, _) = path_of(body)?;
    if stat_path(e2b, s, uid, &path).await.is_ok() {
        return Err(ConnectError::new(
            "already_exists",
            format!("{path} already exists"),
        ));
    }
    file_op(
        e2b,
        s,
        uid,
        FileOp::Mkdir {
            path: path.clone(),
            parents: true,
        },
    )
    .await
    .map_err(ConnectError::from)?;
    let e = stat_path(e2b, s, uid, &path).await?;
    Ok(json!({"entry": entry_info(&path, &e)}))
}

async fn remove(e2b: &E2b, s: &Sbx, uid: Option<u32>, body: &[u8]) -> Result<Value, ConnectError> {
    let (path, _) = path_of(body)?;
    let op = FileOp::Rm {
        path,
        recursive: true,
    };
    match file_op(e2b, s, uid, op).await {
        Ok(_) => Ok(json!({})),
        // As envd's RemoveAll: a missing path is not an error.
        Err(e) if e.code() == stockade::ErrorCode::NotFound => Ok(json!({})),
        Err(e) => Err(e.into()),
    }
}

async fn rename(e2b: &E2b, s: &Sbx, uid: Option<u32>, body: &[u8]) -> Result<Value, ConnectError> {
    let r: MoveRequest = connect::unary_request(body)?;
    if r.source.is_empty() || r.destination.is_empty() {
        return Err(ConnectError::invalid(
            "Move needs \"source\" and \"destination\"",
        ));
    }
    let (src, dst) = (resolve(&r.source), resolve(&r.destination));
    stat_path(e2b, s, uid, &src).await?;
    // As the request's user, so its permissions decide; parents made as envd does.
    let script = "mkdir -p -- \"$(dirname -- \"$2\")\" && mv -T -- \"$1\" \"$2\"";
    let mut req = ExecRequest::new(["/bin/sh", "-c", script, "sh", &src, &dst]);
    req.uid = uid;
    let o = e2b
        .daemon
        .exec(&s.tenant, &s.daemon_id, req)
        .await
        .map_err(ConnectError::from)?;
    if o.exit_code != 0 {
        return Err(ConnectError::new(
            "permission_denied",
            format!(
                "cannot move {src} to {dst}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ));
    }
    let e = stat_path(e2b, s, uid, &dst).await?;
    Ok(json!({"entry": entry_info(&dst, &e)}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_under_the_home() {
        assert_eq!(resolve("a.txt"), "/home/user/a.txt");
        assert_eq!(resolve("~/x"), "/home/user/x");
        assert_eq!(resolve("/tmp/y"), "/tmp/y");
        assert_eq!(perms(FileKind::Dir, 0o755), "drwxr-xr-x");
    }
}
