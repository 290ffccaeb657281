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
    stockade_bindings::json(v).map_err(to_js)
}

/// A spec from the SDK's JSON, the field at fault named.
pub fn spec_from_json(spec_json: &str) -> napi::Result<SandboxSpec> {
    stockade_bindings::spec_from_json(spec_json).map_err(to_js)
}
