//! Errors and JSON across the boundary. A Stockade error crosses as a JavaScript
//! `Error` whose message is `stockade:<code>: <message>`; the TypeScript layer
//! (`errors.ts`) turns it into the class of its code. Specs arrive and listings leave
//! as JSON.

use stockade::{Error, SandboxSpec};

/// A Stockade error as a JavaScript error carrying its code.
pub fn to_js(e: Error) -> napi::Error {
    napi::Error::from_reason(format!("stockade:{}: {e}", e.code().as_str()))
}

pub fn internal(what: &str, e: impl std::fmt::Display) -> napi::Error {
    to_js(Error::Internal(format!("{what}: {e}")))
}

pub fn json<T: serde::Serialize>(v: &T) -> napi::Result<String> {
    serde_json::to_string(v).map_err(|e| internal("json", e))
}

pub fn spec_from_json(spec_json: &str) -> napi::Result<SandboxSpec> {
    // The path names the field at fault (`limits.memory_bytes: unknown size unit`).
    let de = &mut serde_json::Deserializer::from_str(spec_json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let (path, inner) = (e.path().to_string(), e.into_inner());
        // Positions in the JSON the SDK wrote mean nothing to the caller.
        let at = format!(" at line {} column {}", inner.line(), inner.column());
        let text = inner.to_string();
        let text = text.strip_suffix(&at).unwrap_or(&text);
        to_js(Error::InvalidRequest(format!(
            "sandbox spec field {path}: {text}"
        )))
    })
}
