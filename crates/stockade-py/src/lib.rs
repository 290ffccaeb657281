//! Python bindings: the `stockade._native` module behind the `stockade` package
//! (`sdk/python`). The Python layer (`stockade/_client.py`) builds the spec, shapes
//! results into dataclasses and maps error codes to exception classes; this module
//! only moves calls to the Rust core, with typed objects both ways.
//!
//! Every operation has one implementation, a Rust future. The sync API runs it on a
//! shared tokio runtime with the GIL released (checking for Ctrl-C every 100 ms, which
//! drops the future: an interrupted exec is killed in the sandbox); the async API
//! hands the same future to asyncio as an awaitable, so nothing blocks the event loop.
//!
//! - [`runtime`]: the runtime and `drive`; [`errors`]: errors and JSON;
//! - [`client`]: the client, embedded or a daemon, and sessions (their logic is
//!   `stockade_bindings`', shared with the Node bindings);
//! - [`sandbox`]: a sandbox handle, its [`policy`] and [`exec`];
//! - [`files`]: file operations, and unpacking a download on the host.

mod client;
mod errors;
mod exec;
mod files;
mod policy;
mod runtime;
mod sandbox;

use pyo3::prelude::*;

/// The languages of the table on `provider` (default: `$STOCKADE_PROVIDER` or
/// native) with the image store and runtimes of `home` (default: the Stockade home),
/// as a JSON array: how each runs here and whether it runs now (`stockade languages`).
#[pyfunction]
#[pyo3(signature = (provider=None, home=None))]
fn languages(provider: Option<String>, home: Option<std::path::PathBuf>) -> PyResult<String> {
    let provider = provider.unwrap_or_else(stockade::default_provider_name);
    let home = home.unwrap_or_else(stockade::host::stockade_home);
    let store = stockade_image::Store::open(home.join("images"))
        .map_err(|e| errors::to_py(stockade::Error::from(e)))?;
    let rows = stockade::languages::languages(&provider, &store, &home).map_err(errors::to_py)?;
    errors::json(&rows)
}

/// The file in the sandbox a detached exec of pid `pid` writes its output to.
#[pyfunction]
fn detached_log(pid: u32) -> String {
    stockade::detached_log(pid)
}

/// The `stockade._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<client::PreparedCode>()?;
    m.add_class::<sandbox::SandboxHandle>()?;
    m.add_class::<sandbox::ForwardHandle>()?;
    m.add_class::<files::Files>()?;
    m.add_class::<exec::ExecStream>()?;
    m.add_class::<exec::Outcome>()?;
    m.add_class::<exec::Chunk>()?;
    m.add_function(wrap_pyfunction!(files::unpack_on_host, m)?)?;
    m.add_function(wrap_pyfunction!(languages, m)?)?;
    m.add_function(wrap_pyfunction!(detached_log, m)?)?;
    m.add("PROVIDERS", stockade::PROVIDERS.to_vec())?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
