//! Integration tests of the wasm provider against real modules: the Rust test guest
//! (`tests/guest`, built for wasm32-wasip1 on first use) and CPython for WASI.

mod artifacts;
mod basics;
mod files;
mod fsops;
mod lifecycle;
mod limits;
mod python;
mod runner;
mod support;
