//! Node.js bindings: the native module behind `@stockade/sdk` (`sdk/typescript`). The
//! TypeScript layer builds the spec, shapes results and maps error codes to error
//! classes; this module only moves calls to the Rust core.
//!
//! Every operation is one Rust future that napi runs on its tokio runtime and hands
//! to JavaScript as a promise, so nothing blocks the event loop. An exec runs as a
//! task of its own ([`exec::ExecHandle`]): closing the handle aborts the task, and
//! dropping the exec's future kills the command in the sandbox (`AbortSignal`).
//!
//! - [`errors`]: errors (`stockade:<code>: <message>`) and JSON;
//! - [`client`]: the client, embedded or a daemon, and sessions (their logic is
//!   `stockade_bindings`', shared with the Python bindings);
//! - [`sandbox`]: a sandbox handle and its file operations; [`exec`]: exec.

mod client;
mod errors;
mod exec;
mod sandbox;

use napi::Result;
use napi_derive::napi;

/// The languages of the table on `provider` (default: `$STOCKADE_PROVIDER` or
/// native) with the image store and runtimes of `home` (default: the Stockade home),
/// as a JSON array: how each runs here and whether it runs now.
#[napi]
pub fn languages(provider: Option<String>, home: Option<String>) -> Result<String> {
    let provider = provider.unwrap_or_else(stockade::default_provider_name);
    let home = home.map_or_else(stockade::host::stockade_home, Into::into);
    let store = stockade_image::Store::open(home.join("images"))
        .map_err(|e| errors::to_js(stockade::Error::from(e)))?;
    let rows = stockade::languages::languages(&provider, &store, &home).map_err(errors::to_js)?;
    errors::json(&rows)
}

/// The providers this build knows, by name.
#[napi]
pub fn providers() -> Vec<String> {
    stockade::PROVIDERS
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The version of the native module (the workspace's).
/// The file in the sandbox a detached exec of pid `pid` writes its output to.
#[napi]
pub fn detached_log(pid: u32) -> String {
    stockade::detached_log(pid)
}

#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
