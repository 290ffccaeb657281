//! The Connect protocol's JSON codec, as the E2B SDKs speak it to envd: unary calls
//! (`application/json` in and out) and server-streamed calls (`application/connect+json`,
//! each message an envelope: one flags byte, a big-endian u32 length, the JSON). The
//! envelope is five bytes of framing; the messages are serde types mirroring E2B's
//! published protos (`process.proto`, `filesystem.proto`) in proto3's JSON mapping.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Flags of an envelope carrying the end of a stream.
const END_STREAM: u8 = 0x02;
/// Flags of a compressed envelope (never sent by the SDKs; refused).
const COMPRESSED: u8 = 0x01;

/// A Connect error: a lowercase code name and a message.
#[derive(Debug, Clone)]
pub struct ConnectError {
    pub code: &'static str,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: &'static str, message: impl Into<String>) -> ConnectError {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> ConnectError {
        ConnectError::new("invalid_argument", message)
    }

    pub fn not_found(message: impl Into<String>) -> ConnectError {
        ConnectError::new("not_found", message)
    }

    /// The HTTP status of a unary error (Connect's table).
    pub fn status(&self) -> StatusCode {
        let n = match self.code {
            "canceled" => 499,
            "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
            "deadline_exceeded" => 504,
            "not_found" => 404,
            "already_exists" | "aborted" => 409,
            "permission_denied" => 403,
            "resource_exhausted" => 429,
            "unimplemented" => 501,
            "unavailable" => 503,
            "unauthenticated" => 401,
            _ => 500,
        };
        StatusCode::from_u16(n).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code, "message": self.message})
    }
}

impl From<stockade::Error> for ConnectError {
    fn from(e: stockade::Error) -> ConnectError {
        use stockade::ErrorCode as C;
        let code = match e.code() {
            C::NotFound => "not_found",
            C::InvalidSpec => "invalid_argument",
            C::Timeout => "deadline_exceeded",
            C::LimitExceeded => "resource_exhausted",
            C::PolicyDenied => "permission_denied",
            C::Unavailable => "unavailable",
            _ => "internal",
        };
        ConnectError::new(code, e.to_string())
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.json().to_string(),
        )
            .into_response()
    }
}

/// Decodes a unary request body (`{}` for an empty body).
pub fn unary_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, ConnectError> {
    let body = if body.is_empty() {
        b"{}" as &[u8]
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        ConnectError::invalid(format!(
            "the request message is not valid JSON for this method: {e}"
        ))
    })
}

/// A unary success answer.
pub fn unary_response<T: Serialize>(msg: &T) -> Response {
    let body = serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec());
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The one message of a server-streaming request (exactly one data envelope).
pub fn stream_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, ConnectError> {
    let mut msgs = envelopes(body)?;
    if msgs.len() != 1 {
        return Err(ConnectError::invalid(format!(
            "a server-streaming request carries exactly one message envelope; this one has {}",
            msgs.len()
        )));
    }
    let (flags, payload) = msgs.remove(0);
    if flags != 0 {
        return Err(ConnectError::invalid(format!(
            "the request envelope has flags {flags:#04x}; only uncompressed data (0x00) is accepted"
        )));
    }
    serde_json::from_slice(&payload).map_err(|e| {
        ConnectError::invalid(format!(
            "the request message is not valid JSON for this method: {e}"
        ))
    })
}

/// Splits a body into envelopes, refusing truncated or compressed ones.
pub fn envelopes(mut body: &[u8]) -> Result<Vec<(u8, Vec<u8>)>, ConnectError> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(ConnectError::invalid(format!(
                "truncated envelope: {} bytes where a 5-byte header (flags, u32 length) is due",
                body.len()
            )));
        }
        let flags = body[0];
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if flags & COMPRESSED != 0 {
            return Err(ConnectError::new(
                "unimplemented",
                "compressed envelopes are not accepted: send Connect-Content-Encoding: identity",
            ));
        }
        if body.len() - 5 < len {
            return Err(ConnectError::invalid(format!(
                "truncated envelope: its header says {len} bytes, {} follow",
                body.len() - 5
            )));
        }
        out.push((flags, body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    Ok(out)
}

/// One data envelope.
pub fn data_frame<T: Serialize>(msg: &T) -> Bytes {
    frame(
        0,
        &serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec()),
    )
}

/// The end-of-stream envelope: `{}` or the error.
pub fn end_frame(err: Option<&ConnectError>) -> Bytes {
    let body = match err {
        None => b"{}".to_vec(),
        Some(e) => serde_json::json!({"error": e.json()})
            .to_string()
            .into_bytes(),
    };
    frame(END_STREAM, &body)
}

fn frame(flags: u8, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(flags);
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.freeze()
}

/// Not an envelope: ends a streamed answer by dropping it mid-body, as a connection to
/// a sandbox that was killed under the request drops (the SDKs then probe the
/// sandbox, find it gone and say it was killed or reached its end of life).
pub const ABORT: Bytes = Bytes::new();

/// Whether `frame` is [`ABORT`] or the end envelope: the last of a stream.
pub fn is_last(frame: &Bytes) -> bool {
    frame.is_empty() || frame.first() == Some(&END_STREAM)
}

/// A streamed answer: HTTP 200 with the envelopes as they come, cut off at [`ABORT`].
pub fn stream_response(
    frames: impl futures_util::Stream<Item = Bytes> + Send + 'static,
) -> Response {
    use futures_util::StreamExt;
    let body = Body::from_stream(frames.map(|f| {
        if f.is_empty() {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the sandbox is gone",
            ))
        } else {
            Ok(f)
        }
    }));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/connect+json")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A streamed answer that fails at once (HTTP 200, the error in the end envelope).
pub fn stream_error(e: ConnectError) -> Response {
    let f = end_frame(Some(&e));
    stream_response(futures_util::stream::iter([f]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_bad_ones_are_named() {
        let f = data_frame(&serde_json::json!({"a": 1}));
        let got = envelopes(&f).unwrap();
        assert_eq!(got, vec![(0, b"{\"a\":1}".to_vec())]);
        let e = envelopes(&f[..f.len() - 1]).unwrap_err();
        assert!(e.message.contains("truncated"), "{}", e.message);
        let e = envelopes(&[0, 0]).unwrap_err();
        assert!(e.message.contains("5-byte header"), "{}", e.message);
        let mut c = f.to_vec();
        c[0] = 1;
        assert_eq!(envelopes(&c).unwrap_err().code, "unimplemented");
        let end = end_frame(Some(&ConnectError::not_found("x")));
        assert_eq!(end[0], 2);
        assert!(String::from_utf8_lossy(&end[5..]).contains("not_found"));
    }

    #[test]
    fn unary_errors_map_to_connect_statuses() {
        assert_eq!(ConnectError::not_found("x").status(), 404);
        assert_eq!(ConnectError::new("unauthenticated", "x").status(), 401);
        assert_eq!(ConnectError::new("already_exists", "x").status(), 409);
    }
}
