//! Shared test parts: the guest module, the Python runtime, providers with their own
//! scratch directories in the test home, and `require`, which fails in CI and skips
//! loudly elsewhere.
//!
//! Tests never use the host's `STOCKADE_HOME`: they share one home of their own in the
//! target directory (its artifact cache survives between runs, so Python is compiled
//! once), and tests that tamper with a cache make a home of their own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use stockade_core::{CreateOptions, ExecOutcome, ExecRequest, Provider, SandboxSpec};
use stockade_wasm::{WasmConfig, WasmProvider};

pub use stockade_testkit::require;

/// The directories of a test build: `<target>/<profile>/deps/it-*` -> `<target>`.
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn build_guest() -> Result<PathBuf, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/Cargo.toml");
    let out = target_dir().join("wasm-guest");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let result = Command::new(cargo)
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip1"])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&out)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !result.status.success() {
        return Err(format!(
            "cargo build of the guest failed: {}",
            String::from_utf8_lossy(&result.stderr)
        ));
    }
    Ok(out.join("wasm32-wasip1/release"))
}

fn guest_dir() -> Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(build_guest).clone()
}

/// The test guest module (`tests/guest`), built once per run for wasm32-wasip1.
pub fn guest() -> Option<PathBuf> {
    require(
        "the wasm32-wasip1 test guest",
        guest_dir().map(|d| d.join("stockade-wasm-guest.wasm")),
        "rustup target add wasm32-wasip1 (crates/stockade-wasm/ci-setup.sh does it)",
    )
}

/// The home the tests share (`<target>/stockade-wasm-test-home`): runtimes, the
/// artifact cache and its key. Several runs of the tests may use it at once.
pub fn test_home() -> PathBuf {
    let home = target_dir().join("stockade-wasm-test-home");
    std::fs::create_dir_all(&home).expect("test home");
    home
}

fn installed_in(home: &Path) -> Result<bool, String> {
    let list = stockade_wasm::runtime::list_runtimes_in(home).map_err(|e| e.to_string())?;
    Ok(list
        .runtimes
        .iter()
        .any(|r| r.name == "python-wasm" && r.installed))
}

/// Copies the Python runtime from the host's home (where ci-setup.sh installs it) into
/// the test home, once, under a lock that concurrent test runs share.
fn install_python() -> Result<(), String> {
    let home = test_home();
    let lock = std::fs::File::create(home.join(".install.lock")).map_err(|e| e.to_string())?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| e.to_string())?;
    if installed_in(&home)? {
        return Ok(());
    }
    let host_home = stockade_wasm::stockade_home();
    if !installed_in(&host_home)? {
        return Err(format!("not installed under {}", host_home.display()));
    }
    let module = stockade_wasm::RuntimeSpec::find("python-wasm")
        .expect("python-wasm is known")
        .module_in(&host_home);
    stockade_wasm::runtime::install_runtime_from_file_in(&home, "python-wasm", &module)
        .map(drop)
        .map_err(|e| format!("cannot install it into {}: {e}", home.display()))
}

/// The Python runtime, installed in the test home.
pub fn python() -> Option<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    require(
        "the python-wasm runtime",
        DONE.get_or_init(install_python).clone(),
        "cargo run -p stockade-wasm --example install-runtime (crates/stockade-wasm/ci-setup.sh does it)",
    )
}

/// A provider using the test home (runtimes, artifact cache) and a scratch directory
/// of its own, so that tests can check what is left behind.
pub fn provider() -> (WasmProvider, tempfile::TempDir) {
    provider_with(|_| {})
}

/// [`provider`] with a configuration change.
pub fn provider_with(change: impl FnOnce(&mut WasmConfig)) -> (WasmProvider, tempfile::TempDir) {
    provider_in(&test_home(), change)
}

/// [`provider_with`] on the home `home`.
pub fn provider_in(
    home: &Path,
    change: impl FnOnce(&mut WasmConfig),
) -> (WasmProvider, tempfile::TempDir) {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let mut config = WasmConfig {
        scratch_dir: scratch.path().to_path_buf(),
        ..WasmConfig::in_home(home)
    };
    change(&mut config);
    (
        WasmProvider::with_config(config).expect("wasm provider"),
        scratch,
    )
}

/// A default spec running `image`.
pub fn spec(image: &Path) -> SandboxSpec {
    SandboxSpec {
        image: Some(image.to_string_lossy().into_owned()),
        ..SandboxSpec::default()
    }
}

/// Creates a sandbox from `spec` (validated and checked like `Sandbox::create` does).
pub async fn create(p: &dyn Provider, spec: SandboxSpec) -> String {
    let spec = spec.validate().expect("valid spec");
    p.create(
        stockade_core::CheckedSpec::new(spec, p).unwrap(),
        CreateOptions::default(),
    )
    .await
    .expect("create")
    .id
}

/// Runs `argv` in sandbox `id`.
pub async fn run(p: &dyn Provider, id: &str, argv: &[&str]) -> ExecOutcome {
    exec_req(p, id, ExecRequest::new(argv.iter().copied()))
        .await
        .expect("exec")
}

/// Runs `req` (checked like `Sandbox::exec` does) in sandbox `id`, without streams.
pub async fn exec_req(
    p: &dyn Provider,
    id: &str,
    req: ExecRequest,
) -> stockade_core::Result<ExecOutcome> {
    p.exec(
        id,
        stockade_core::CheckedRequest::new(req).unwrap(),
        stockade_core::ExecIo::none(),
    )
    .await
}

/// Stdout as text.
pub use stockade_testkit::text;
