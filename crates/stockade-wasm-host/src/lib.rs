//! The wasm provider as the rest of Stockade sees it: sandboxes that run WASI
//! (preview 1) modules, each in a runner process of its own.
//!
//! The engine (wasmtime, cranelift, the WASI host, the quotas) is the
//! `stockade-wasm` crate, and it runs only in `stockade-wasm-runner`, one process per
//! sandbox (see [`runner`]). This crate starts runners and speaks the agent protocol
//! to them like to any Linux sandbox's agent ([`WasmProvider`] is an
//! [`AgentProvider`] over a [`WasmLauncher`]); it also installs and lists the
//! language runtimes. So the `stockade` binary carries no engine, and a module's
//! memory or a fault of the engine stays in its runner.

pub mod artifact;
mod config;
pub mod home;
mod launcher;
pub mod runner;
pub mod runtime;

use stockade_agent_host::AgentProvider;

pub use artifact::CachedArtifact;
pub use config::{DEFAULT_TMP_MAX_ENTRIES, WasmConfig};
pub use home::stockade_home;
pub use launcher::{VERBS, WasmLauncher, capabilities, file_checks, sweep_dead};
pub use runtime::{
    InstalledRuntime, RuntimeList, RuntimeSpec, RuntimeStatus, image_for_language, install_runtime,
    install_runtime_from_file, list_runtimes,
};

/// The wasm provider: a runner process per sandbox, reached over the agent protocol.
pub type WasmProvider = AgentProvider<WasmLauncher>;

/// Guest path of the sandbox's private writable directory.
pub const TMP_DIR: &str = "/tmp";

/// The wasm provider with `config` (the default: [`WasmProvider::new`]).
pub fn provider(config: WasmConfig) -> WasmProvider {
    AgentProvider::from(WasmLauncher::with_config(config))
}
