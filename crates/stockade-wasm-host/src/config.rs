//! The configuration of the wasm engine (each runner gets its own copy).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::stockade_home;

/// Configuration of the wasm provider and its engine.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WasmConfig {
    /// Where runtimes are installed: `<home>/runtimes/` (default [`stockade_home`]).
    pub home: PathBuf,
    /// The artifact cache (default `<home>/cache/wasm`).
    pub cache_dir: PathBuf,
    /// The secret key that seals the artifact cache (default
    /// `<home>/keys/wasm-artifacts.key`; made on first use, mode 0600). Artifacts
    /// sealed under another key are compiled again.
    pub key_file: PathBuf,
    /// Parent of the sandboxes' host directories (default
    /// `$TMPDIR/stockade-wasm-<uid>`); each process uses `<scratch_dir>/<pid>/`.
    pub scratch_dir: PathBuf,
    /// Fuel each exec may burn (about one unit per wasm instruction); `None` (the
    /// default) meters nothing. An exec that runs out ends as `timed_out`, like a
    /// deadline counted in instructions. Turning it on changes the compiled code, so
    /// artifacts are compiled separately for it.
    pub fuel_per_exec: Option<u64>,
    /// How often running code checks its deadline (default 10 ms): the precision of
    /// exec deadlines.
    pub tick: Duration,
    /// Most entries (files, directories, links) a sandbox's `/tmp` may hold, the
    /// counterpart of a tmpfs's inode limit (default [`DEFAULT_TMP_MAX_ENTRIES`]);
    /// creating more fails with `ENOSPC` inside the guest.
    pub tmp_max_entries: u64,
}

/// Default of [`WasmConfig::tmp_max_entries`].
pub const DEFAULT_TMP_MAX_ENTRIES: u64 = 10_000;

impl Default for WasmConfig {
    fn default() -> Self {
        WasmConfig::in_home(&stockade_home())
    }
}

impl WasmConfig {
    /// The default configuration with everything under `home`.
    pub fn in_home(home: &Path) -> WasmConfig {
        WasmConfig {
            home: home.to_path_buf(),
            cache_dir: home.join("cache").join("wasm"),
            key_file: home.join("keys").join("wasm-artifacts.key"),
            scratch_dir: std::env::temp_dir()
                .join(format!("stockade-wasm-{}", stockade_core::host::euid())),
            fuel_per_exec: None,
            tick: Duration::from_millis(10),
            tmp_max_entries: DEFAULT_TMP_MAX_ENTRIES,
        }
    }
}
