//! The runner: `stockade-wasm-runner`, the program that holds the wasm engine
//! (wasmtime and cranelift). Each wasm sandbox is one runner process, so a module's
//! memory, its compiled code and a fault in the engine stay out of the process that
//! asked for the sandbox (the CLI, the daemon), and the `stockade` binary does not
//! carry the engine.
//!
//! How a runner is started (`stockade-wasm-runner serve`): the host writes one
//! [`Launch`] as a JSON line to its stdin and keeps stdin open; the runner creates the
//! sandbox, binds the agent protocol's socket in the sandbox's private directory and
//! answers one [`Ready`] JSON line on stdout. From then on the host speaks the agent
//! protocol to that socket, as to every Linux sandbox's agent. The sandbox ends when
//! its lifetime or its owner does, when the host closes the runner's stdin (destroy,
//! or the host process died), or when the runner is killed.
//!
//! `stockade-wasm-runner precompile --home DIR MODULE` compiles a module into the
//! artifact cache; `stockade-wasm-runner engine-key --home DIR` prints the key of
//! the engine's artifacts.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stockade_core::{Error, ErrorCode, Result, SandboxInfo, SandboxSpec};

use crate::WasmConfig;

/// The runner's program name.
pub const RUNNER: &str = "stockade-wasm-runner";

/// How to get the runner when it is missing.
pub const BUILD_RUNNER: &str = "build it with `cargo build --release -p stockade-wasm --bin \
     stockade-wasm-runner` (./run.sh does when its arguments name the wasm provider; \
     ./run.sh install installs it), or set STOCKADE_WASM_RUNNER to the binary";

/// What the host sends a runner it starts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Launch {
    /// The engine's configuration.
    pub config: WasmConfig,
    /// The sandbox's spec (validated again by the runner).
    pub spec: SandboxSpec,
    /// The host process whose death ends the sandbox.
    pub owner_pid: Option<u32>,
}

/// What a runner answers once its sandbox exists, or why it does not.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ready {
    /// The sandbox runs; its agent protocol is served at `socket`.
    Ok {
        /// The sandbox.
        info: Box<SandboxInfo>,
        /// The agent protocol's socket.
        socket: PathBuf,
    },
    /// The sandbox could not be made.
    Err {
        /// The error's code.
        code: ErrorCode,
        /// The error's message.
        message: String,
    },
}

/// Finds the runner: `$STOCKADE_WASM_RUNNER`, next to this program (or its parent
/// directory), in `../libexec/stockade/` from it, then `PATH`.
pub fn find_runner() -> Result<PathBuf> {
    stockade_agent_host::find_helper(
        RUNNER,
        "STOCKADE_WASM_RUNNER",
        "the wasm provider's runner",
        BUILD_RUNNER,
    )
}

/// Runs the runner's `args` to completion and returns its stdout; a failure carries
/// what it printed on stderr.
fn run(runner: &Path, args: &[&std::ffi::OsStr]) -> Result<String> {
    let out = std::process::Command::new(runner)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("cannot run {}", runner.display()), e))?;
    if !out.status.success() {
        return Err(Error::Internal(format!(
            "{} {} failed ({}): {}",
            runner.display(),
            args.first()
                .map(|a| a.to_string_lossy())
                .unwrap_or_default(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Compiles `module` into the artifact cache under `home`, so the first sandbox of it
/// starts at once. `Ok(false)` when there is no runner to compile it with: the first
/// sandbox that runs it (which needs a runner anyway) compiles it then.
pub fn precompile(home: &Path, module: &Path) -> Result<bool> {
    let Ok(runner) = find_runner() else {
        return Ok(false);
    };
    run(
        &runner,
        &[
            "precompile".as_ref(),
            "--home".as_ref(),
            home.as_os_str(),
            module.as_os_str(),
        ],
    )?;
    Ok(true)
}

/// The key of the runner's engine in artifact names (see [`crate::artifact`]).
pub fn engine_key(home: &Path) -> Result<String> {
    let runner = find_runner()?;
    run(
        &runner,
        &["engine-key".as_ref(), "--home".as_ref(), home.as_os_str()],
    )
}
