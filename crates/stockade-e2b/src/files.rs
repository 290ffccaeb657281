//! envd's `/files`: download (`GET`, raw bytes) and upload (`POST`, multipart with
//! each part's filename the full target path, or a raw body with `?path=`), through
//! the agent's file operations (the same caps and path safety as everywhere).

use axum::body::to_bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use stockade::{FileOp, FileResult};

use crate::api::error;
use crate::envd::resolve;
use crate::state::{E2b, Sbx};

fn query_path(req: &Request) -> Option<String> {
    let q = req.uri().query()?;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.into_owned())
        .filter(|p| !p.is_empty())
}

fn file_error(path: &str, e: &stockade::Error) -> Response {
    match e.code() {
        stockade::ErrorCode::NotFound => error(404, &format!("path '{path}' does not exist")),
        stockade::ErrorCode::InvalidSpec => error(400, &e.to_string()),
        stockade::ErrorCode::LimitExceeded => error(413, &e.to_string()),
        stockade::ErrorCode::PolicyDenied => error(403, &e.to_string()),
        _ => error(500, &e.to_string()),
    }
}

pub async fn handle(e2b: &E2b, s: &Sbx, req: Request) -> Response {
    let path = query_path(&req).map(|p| resolve(&p));
    match *req.method() {
        Method::GET => {
            let Some(path) = path else {
                return error(400, "GET /files needs ?path=FILE");
            };
            download(e2b, s, &path).await
        }
        Method::POST => upload(e2b, s, path, req).await,
        ref m => error(405, &format!("/files takes GET or POST, not {m}")),
    }
}

async fn download(e2b: &E2b, s: &Sbx, path: &str) -> Response {
    let op = FileOp::Read {
        path: path.into(),
        offset: 0,
        limit: stockade::files::MAX_FILE_BYTES,
    };
    match e2b.daemon.file(&s.tenant, &s.daemon_id, op).await {
        Ok(FileResult::Data { data, eof, .. }) => {
            if !eof {
                return error(
                    413,
                    &format!(
                        "{path} is over {} MiB, the most one download carries",
                        stockade::files::MAX_FILE_BYTES >> 20
                    ),
                );
            }
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                data,
            )
                .into_response()
        }
        Ok(_) => error(500, "the read gave no data"),
        Err(e) => file_error(path, &e),
    }
}

async fn write(e2b: &E2b, s: &Sbx, path: &str, data: Vec<u8>) -> Result<Value, Box<Response>> {
    let op = FileOp::Write {
        path: path.into(),
        data,
        mode: None,
    };
    e2b.daemon
        .file(&s.tenant, &s.daemon_id, op)
        .await
        .map_err(|e| Box::new(file_error(path, &e)))?;
    let name = path.rsplit('/').next().unwrap_or("").to_string();
    Ok(json!({"path": path, "name": name, "type": "file"}))
}

async fn upload(e2b: &E2b, s: &Sbx, path: Option<String>, req: Request) -> Response {
    let ctype = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if ctype.starts_with("multipart/form-data") {
        let mut mp = match Multipart::from_request(req, &()).await {
            Ok(m) => m,
            Err(e) => return error(400, &format!("the multipart body is malformed: {e}")),
        };
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        loop {
            let field = match mp.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    return error(
                        e.status().as_u16(),
                        &format!("reading the upload: {}", e.body_text()),
                    );
                }
            };
            let target = match (&path, field.file_name()) {
                (Some(p), _) => p.clone(),
                (None, Some(f)) if !f.is_empty() => resolve(f),
                _ => {
                    return error(
                        400,
                        "each part needs a filename (the target path), or send ?path=",
                    );
                }
            };
            if !seen.insert(target.clone()) {
                return error(400, &format!("{target} is named twice in one upload"));
            }
            let data = match field.bytes().await {
                Ok(b) => b.to_vec(),
                Err(e) => {
                    return error(
                        e.status().as_u16(),
                        &format!("reading the upload: {}", e.body_text()),
                    );
                }
            };
            match write(e2b, s, &target, data).await {
                Ok(v) => out.push(v),
                Err(r) => return *r,
            }
        }
        if out.is_empty() {
            return error(400, "the upload has no part named file");
        }
        return axum::Json(Value::Array(out)).into_response();
    }
    let Some(path) = path else {
        return error(400, "a raw upload needs ?path=FILE");
    };
    let gzip = match req
        .headers()
        .get(header::CONTENT_ENCODING)
        .map(axum::http::HeaderValue::as_bytes)
    {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(other) => {
            let other = String::from_utf8_lossy(other);
            return error(
                415,
                &format!("Content-Encoding {other:?} is not accepted: send gzip or identity"),
            );
        }
    };
    let data = match to_bytes(req.into_body(), crate::MAX_BODY_BYTES).await {
        Ok(b) => b.to_vec(),
        Err(_) => {
            return error(
                413,
                &format!("the upload is over {} bytes", crate::MAX_BODY_BYTES),
            );
        }
    };
    let data = if gzip {
        match gunzip(&data) {
            Ok(d) => d,
            Err(r) => return *r,
        }
    } else {
        data
    };
    match write(e2b, s, &path, data).await {
        Ok(v) => axum::Json(json!([v])).into_response(),
        Err(r) => *r,
    }
}

/// Decompresses a gzip upload, at most the agent's file cap.
fn gunzip(data: &[u8]) -> Result<Vec<u8>, Box<Response>> {
    use std::io::Read;
    let cap = stockade::files::MAX_FILE_BYTES;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| Box::new(error(400, &format!("the gzip upload is corrupt: {e}"))))?;
    if out.len() as u64 > cap {
        return Err(Box::new(error(
            413,
            &format!("the upload is over {} MiB once decompressed", cap >> 20),
        )));
    }
    Ok(out)
}
