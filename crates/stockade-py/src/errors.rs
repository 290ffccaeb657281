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
    stockade_bindings::json(v).map_err(to_py)
}

/// A spec from the SDK's JSON, the field at fault named.
pub fn spec_from_json(spec_json: &str) -> PyResult<SandboxSpec> {
    stockade_bindings::spec_from_json(spec_json).map_err(to_py)
}
