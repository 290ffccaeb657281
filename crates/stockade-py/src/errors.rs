//! Errors and JSON across the boundary: a Stockade error becomes the exception class
//! of its code (`stockade.errors`); specs arrive and listings leave as JSON.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use stockade::{Error, SandboxSpec};

/// A Stockade error as the exception class of its code (`stockade.errors`).
pub fn to_py(e: Error) -> PyErr {
    let (code, message) = (e.code().as_str(), e.to_string());
    Python::attach(|py| {
        py.import("stockade.errors")
            .and_then(|m| m.getattr("from_code"))
            .and_then(|f| f.call1((code, message.as_str())))
            .map(PyErr::from_value)
            .unwrap_or_else(|_| PyRuntimeError::new_err(message))
    })
}

pub fn json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

pub fn spec_from_json(spec_json: &str) -> PyResult<SandboxSpec> {
    // The path names the field at fault (`limits.memory_bytes: unknown size unit`).
    let de = &mut serde_json::Deserializer::from_str(spec_json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let (path, inner) = (e.path().to_string(), e.into_inner());
        // Positions in the JSON the SDK wrote mean nothing to the caller.
        let at = format!(" at line {} column {}", inner.line(), inner.column());
        let text = inner.to_string();
        let text = text.strip_suffix(&at).unwrap_or(&text);
        to_py(Error::InvalidRequest(format!(
            "sandbox spec field {path}: {text}"
        )))
    })
}
