//! The shared tokio runtime and [`drive`], which runs one operation for the sync API
//! (GIL released, Ctrl-C checked) or hands it to asyncio as an awaitable.

use std::future::Future;
use std::time::Duration;

use pyo3::BoundObject;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Bytes that become Python `bytes` (a `Vec<u8>` would become a list).
pub struct Bytes(pub Vec<u8>);

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `fut`: to completion with the GIL released, or as an asyncio awaitable.
pub fn drive<F, T>(py: Python<'_>, asynchronous: bool, fut: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    if asynchronous {
        return Ok(pyo3_async_runtimes::tokio::future_into_py(py, fut)?.unbind());
    }
    // The future runs on a runtime worker, which drives its I/O itself; this thread
    // only waits for the result (one wake-up, instead of one per I/O event when the
    // future is polled here by `block_on`).
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    let value = py.detach(move || {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(v) => return v,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    // Ctrl-C raises here; aborting the task drops the future, which
                    // ends the operation.
                    #[allow(clippy::redundant_closure_for_method_calls)]
                    // the lifetime of `py` needs the closure
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        task.abort();
                        return Err(e);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err(
                        "the operation ended without a result",
                    ));
                }
            }
        }
    })?;
    Ok(value
        .into_pyobject(py)
        .map_err(Into::into)?
        .into_any()
        .unbind())
}
