//! envd's `/files`: download (`GET`, raw bytes) and upload (`POST`, multipart with
//! each part's filename the full target path, or a raw body with `?path=`), through
//! the agent's file operations (the same caps and path safety as everywhere).

use std::collections::BTreeMap;

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

/// Whether `query` carries a valid signature of `op` (`read` or `write`) made with
/// the sandbox's `token`: `signature=v1_<base64 sha256("PATH:OP:USER:TOKEN[:EXP]")>`
/// with the optional `signature_expiration` (unix seconds) not passed `now_s`.
pub fn signature_ok(token: &str, op: &str, query: &str, now_s: u64) -> bool {
    use base64::Engine;
    use sha2::Digest;
    let get = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let Some(sig) = get("signature") else {
        return false;
    };
    let Some(sig) = sig.strip_prefix("v1_") else {
        return false;
    };
    let path = get("path").unwrap_or_default();
    let user = get("username").unwrap_or_default();
    let raw = match get("signature_expiration") {
        None => format!("{path}:{op}:{user}:{token}"),
        Some(exp) => {
            match exp.parse::<u64>() {
                Ok(e) if e >= now_s => {}
                _ => return false,
            }
            format!("{path}:{op}:{user}:{token}:{exp}")
        }
    };
    let want = base64::engine::general_purpose::STANDARD_NO_PAD
        .encode(sha2::Sha256::digest(raw.as_bytes()));
    crate::state::ct_eq(want.as_bytes(), sig.as_bytes())
}

fn file_error(path: &str, e: &stockade::Error) -> Response {
    match e.code() {
        // The SDKs raise FileNotFound on this message's form.
        stockade::ErrorCode::NotFound => error(404, &format!("path '{path}' does not exist")),
        code => error(
            crate::api::status_of(code, crate::api::Route::Files),
            &e.to_string(),
        ),
    }
}

pub async fn handle(e2b: &E2b, s: &Sbx, req: Request) -> Response {
    let user = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "username")
            .map(|(_, v)| v.into_owned())
    });
    // "root": root of the sandbox's own user namespace (uid 0 there).
    let uid = match user.as_deref() {
        Some("root") => Some(0),
        None | Some("") => s.default_uid,
        Some("user") => None,
        Some(u) => {
            return error(
                401,
                &format!(
                    "invalid username {u:?}: Stockade's E2B sandboxes have the users \"user\" \
                     (uid 1000, home /home/user) and \"root\" (root of the sandbox's own user \
                     namespace, no host privilege)"
                ),
            );
        }
    };
    let path = query_path(&req).map(|p| resolve(&p));
    // Files travel whole: a bounded number at a time keeps a burst of large
    // transfers from holding the daemon's memory (the rest wait their turn).
    let Some(_slot) = e2b.transfer(&s.tenant).await else {
        return error(503, "the server is shutting down");
    };
    match *req.method() {
        Method::GET => {
            let Some(path) = path else {
                return error(400, "GET /files needs ?path=FILE");
            };
            download(e2b, s, uid, &path).await
        }
        Method::POST => upload(e2b, s, uid, path, req).await,
        ref m => error(405, &format!("/files takes GET or POST, not {m}")),
    }
}

async fn download(e2b: &E2b, s: &Sbx, uid: Option<u32>, path: &str) -> Response {
    let op = FileOp::Read {
        path: path.into(),
        offset: 0,
        limit: stockade::files::MAX_FILE_BYTES,
    };
    match crate::envd::file_op(e2b, s, uid, op).await {
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

/// Where E2B keeps a file's metadata: extended attributes `user.e2b.KEY`.
pub const METADATA_XATTR: &str = "user.e2b.";

/// An upload's `X-Metadata-KEY: VALUE` headers (keys lowercased), checked as the
/// extended attributes they become.
fn metadata_of(headers: &axum::http::HeaderMap) -> Result<BTreeMap<String, String>, Box<Response>> {
    let mut out = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix("x-metadata-") else {
            continue;
        };
        let Ok(value) = value.to_str() else {
            return Err(Box::new(error(
                400,
                &format!("metadata {key:?}: its value is not visible ASCII text"),
            )));
        };
        if key.is_empty() {
            return Err(Box::new(error(
                400,
                "an X-Metadata- header names no key: send X-Metadata-KEY: VALUE",
            )));
        }
        out.insert(format!("{METADATA_XATTR}{key}"), value.to_string());
    }
    stockade::files::check_xattrs(&out).map_err(|e| Box::new(error(400, &e)))?;
    Ok(out)
}

async fn write(
    e2b: &E2b,
    s: &Sbx,
    uid: Option<u32>,
    path: &str,
    data: Vec<u8>,
    metadata: &BTreeMap<String, String>,
) -> Result<Value, Box<Response>> {
    let op = FileOp::Write {
        path: path.into(),
        data,
        mode: None,
    };
    crate::envd::file_op(e2b, s, uid, op)
        .await
        .map_err(|e| Box::new(file_error(path, &e)))?;
    let name = path.rsplit('/').next().unwrap_or("").to_string();
    let mut v = json!({"path": path, "name": name, "type": "file"});
    if !metadata.is_empty() {
        let op = FileOp::SetXattrs {
            path: path.into(),
            xattrs: metadata.clone(),
        };
        crate::envd::file_op(e2b, s, uid, op)
            .await
            .map_err(|e| Box::new(file_error(path, &e)))?;
        v["metadata"] = metadata
            .iter()
            .map(|(k, val)| (k[METADATA_XATTR.len()..].to_string(), json!(val)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    Ok(v)
}

async fn upload(
    e2b: &E2b,
    s: &Sbx,
    uid: Option<u32>,
    path: Option<String>,
    req: Request,
) -> Response {
    let metadata = match metadata_of(req.headers()) {
        Ok(m) => m,
        Err(r) => return *r,
    };
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
            match write(e2b, s, uid, &target, data, &metadata).await {
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
    match write(e2b, s, uid, &path, data, &metadata).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The SDK's own example: `get_signature("a.txt", "read", None, "T")`.
    fn sign(raw: &str) -> String {
        use base64::Engine;
        use sha2::Digest;
        let d = sha2::Sha256::digest(raw.as_bytes());
        format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(d)
        )
    }

    #[test]
    fn signed_urls_are_checked_for_path_operation_token_and_expiry() {
        let q = |sig: &str, extra: &str| {
            format!(
                "path=a.txt&signature={}{extra}",
                form_urlencoded::byte_serialize(sig.as_bytes()).collect::<String>()
            )
        };
        let read = sign("a.txt:read::T");
        assert!(signature_ok("T", "read", &q(&read, ""), 100));
        assert!(
            !signature_ok("T", "write", &q(&read, ""), 100),
            "read signature used to write"
        );
        assert!(
            !signature_ok("U", "read", &q(&read, ""), 100),
            "another sandbox's token"
        );
        assert!(!signature_ok(
            "T",
            "read",
            &q(&read, "").replace("a.txt", "b.txt"),
            100
        ));
        assert!(!signature_ok("T", "read", "path=a.txt", 100));
        let exp = sign("a.txt:read::T:200");
        assert!(signature_ok(
            "T",
            "read",
            &q(&exp, "&signature_expiration=200"),
            150
        ));
        assert!(
            !signature_ok("T", "read", &q(&exp, "&signature_expiration=200"), 201),
            "expired"
        );
        assert!(
            !signature_ok("T", "read", &q(&exp, "&signature_expiration=300"), 150),
            "expiry changed"
        );
        let user = sign("a.txt:read:user:T");
        assert!(signature_ok("T", "read", &q(&user, "&username=user"), 0));
        assert!(!signature_ok("T", "read", &q(&user, ""), 0));
    }
}
