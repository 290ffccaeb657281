//! Loading precompiled WebAssembly (the wasm provider's artifact cache).

use std::path::Path;

use wasmtime::{Engine, Module};

/// Maps a precompiled module artifact written by `Module::serialize`.
///
/// The caller must only pass files it trusts as much as a native binary: artifacts it
/// wrote itself into a directory nobody else can write (the wasm provider checks
/// ownership and modes before calling this). wasmtime checks the header, its version
/// and the engine configuration, but cannot check the machine code.
pub fn deserialize_trusted(engine: &Engine, path: &Path) -> wasmtime::Result<Module> {
    // SAFETY: per this function's contract the file is an artifact produced by
    // `Module::serialize` of this wasmtime version and was not writable by anyone
    // else since; that is exactly `Module::deserialize_file`'s requirement.
    unsafe { Module::deserialize_file(engine, path) }
}
