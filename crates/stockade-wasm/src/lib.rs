//! The wasm engine: sandboxes that run WASI (preview 1) modules on wasmtime, in the
//! process that holds them. Stockade runs it only in `stockade-wasm-runner`, one
//! process per sandbox ([`serve`]); the provider the rest of Stockade uses is
//! `stockade_wasm_host::WasmProvider`, which starts runners and speaks the agent
//! protocol to them. [`WasmProvider`] here is the engine in-process, for the runner
//! and for this crate's tests.
//!
//! A sandbox is a module (`spec.image`: a `.wasm` file, or a runtime name such as
//! `python`) plus its files: a private writable `/tmp` (a host directory that is
//! deleted at destroy, capped at `limits.tmp_bytes` and [`WasmConfig::tmp_max_entries`]
//! entries) and the spec's mounts as
//! preopened directories. Each exec runs the module's `_start` in a fresh instance,
//! made from an `InstancePre` that was linked once per module, with the exec's
//! arguments, environment and stdin.
//!
//! # How the spec maps onto WASI
//!
//! | spec | here |
//! |---|---|
//! | `network: none` | no socket is granted (WASI p1 can only use sockets it is given); `egress` is refused |
//! | `mounts` | preopened directories, read-only unless `writable`; file mounts are refused |
//! | `/tmp`, `limits.tmp_bytes` | a host directory per sandbox; writes past the cap, and new entries past [`WasmConfig::tmp_max_entries`], fail with `ENOSPC` |
//! | `limits.memory_bytes` | one budget for the linear memories of all the sandbox's execs; growth past it fails inside the guest |
//! | `limits.pids` | at most this many execs run at once in the sandbox (an exec is one instance with one thread; WASI has no fork) |
//! | `limits.cpus` | each exec runs on one host thread at a time; values below 1 are refused, since nothing can throttle below that |
//! | `timeout_secs`, `timeout_ms` | epoch interruption (every [`WasmConfig::tick`]) plus the host-side deadline: the exec ends with `timed_out` |
//! | `hardening.*` | met by construction: a module has no syscalls to filter (seccomp), reaches files only through preopens (landlock), and has no privileges, capabilities or identity to drop |
//! | `user`, `hostname` | not applicable: WASI has no users and no host name; accepted and reported |
//! | `writable` (root) | refused: there is no root file system to make writable |
//!
//! Compiled modules are cached as artifacts (see [`WasmProvider::precompile`]), sealed
//! with a key only the host can read and checked before they are loaded; a module
//! named by a caller is always WebAssembly that Stockade compiles itself, never
//! precompiled code (a `.cwasm` image is refused).

mod artifact;
mod exec;
mod fs;
mod home;
mod module;
mod output;
mod provider;
mod quota;
mod sandbox;
pub mod serve;
mod spec;

use std::sync::{Mutex, MutexGuard};

pub use artifact::LoadPath;
pub use fs::{FileEntry, FileKind, GrepMatch, MAX_READ_BYTES};
pub use provider::WasmProvider;
pub use stockade_wasm_host::{
    CachedArtifact, DEFAULT_TMP_MAX_ENTRIES, InstalledRuntime, RuntimeList, RuntimeSpec,
    RuntimeStatus, TMP_DIR, WasmConfig, image_for_language, install_runtime,
    install_runtime_from_file, list_runtimes, runtime, stockade_home,
};

/// Locks `m`, going on past a panic of another holder: the maps it guards stay
/// consistent between statements, so a poisoned lock holds nothing half-done.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
