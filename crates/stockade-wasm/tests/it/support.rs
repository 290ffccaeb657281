//! Shared test parts: the guest module, the Python runtime, providers with their own
//! scratch directories, and `require`, which fails in CI and skips loudly elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use stockade_core::{CreateOptions, ExecOutcome, ExecRequest, Provider, SandboxSpec};
use stockade_wasm::{WasmConfig, WasmProvider};

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// A part a test needs. In CI (`CI` set) a missing part fails the test with how to
/// fix it; on a developer machine the test says SKIPPED, loudly, and returns `None`.
pub fn require<T>(part: &str, found: Result<T, String>, fix: &str) -> Option<T> {
    match found {
        Ok(v) => Some(v),
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("{part} is missing: {why}\nfix: {fix}")
        }
        Err(why) => {
            let n = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
            let test = std::thread::current()
                .name()
                .unwrap_or("this test")
                .to_string();
            // Straight to stderr: the test harness would swallow eprintln! of a
            // passing test, and a skip must be seen.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED #{n}: {test}: {part} is missing: {why}\n*** fix: {fix} (in CI this fails)\n"
            );
            None
        }
    }
}

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

/// The Python runtime, installed under the default `STOCKADE_HOME`.
pub fn python() -> Option<()> {
    let home = stockade_wasm::stockade_home();
    let found = stockade_wasm::list_runtimes()
        .map_err(|e| e.to_string())
        .and_then(|l| {
            l.runtimes
                .iter()
                .any(|r| r.name == "python-wasm" && r.installed)
                .then_some(())
                .ok_or_else(|| format!("not installed under {}", home.display()))
        });
    require(
        "the python-wasm runtime",
        found,
        "cargo run -p stockade-wasm --example install-runtime (crates/stockade-wasm/ci-setup.sh does it)",
    )
}

/// A provider using the default home (runtimes, artifact cache) and a scratch
/// directory of its own, so that tests can check what is left behind.
pub fn provider() -> (WasmProvider, tempfile::TempDir) {
    provider_with(|_| {})
}

/// [`provider`] with a configuration change.
pub fn provider_with(change: impl FnOnce(&mut WasmConfig)) -> (WasmProvider, tempfile::TempDir) {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let mut config = WasmConfig {
        scratch_dir: scratch.path().to_path_buf(),
        ..WasmConfig::default()
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
pub async fn create(p: &WasmProvider, spec: SandboxSpec) -> String {
    let spec = spec.validate().expect("valid spec");
    p.create(spec, CreateOptions::default())
        .await
        .expect("create")
        .id
}

/// Runs `argv` in sandbox `id`.
pub async fn run(p: &WasmProvider, id: &str, argv: &[&str]) -> ExecOutcome {
    p.exec(id, ExecRequest::new(argv.iter().copied()), None)
        .await
        .expect("exec")
}

/// Stdout as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
