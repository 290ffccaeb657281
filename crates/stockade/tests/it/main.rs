//! Behaviour and attack tests, run against a provider through the `Provider` trait.
//! Every escape test is written so that a breach fails it.
//!
//! Needs root (the native provider creates cgroups and namespaces). Without root the
//! tests fail when `CI` is set, and are skipped loudly otherwise.

mod attacks;
mod behaviour;
mod conformance;
mod files;
mod kernel;
mod lifecycle;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use stockade::{
    CreateOptions, ExecOutcome, ExecRequest, NativeProvider, Provider, Sandbox, SandboxSpec,
};

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// Returns true when the test can run. A missing part fails the test in CI (with how
/// to fix it) and is skipped loudly elsewhere.
pub fn require_root(test: &str) -> bool {
    if nix_is_root() {
        return true;
    }
    let msg = format!(
        "{test}: needs root (the native provider creates cgroups and namespaces); run the suite as root, e.g. sudo -E cargo test"
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    let n = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
    eprintln!("SKIPPED ({n} so far): {msg}");
    false
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// A state root shared by the tests of this binary, so leftovers can be checked.
pub fn state_root() -> PathBuf {
    let p = std::env::temp_dir().join(format!("stockade-it-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

pub fn provider() -> Arc<dyn Provider> {
    match std::env::var("STOCKADE_TEST_PROVIDER").as_deref() {
        Ok("native") | Err(_) => Arc::new(NativeProvider::from(
            stockade::NativeLauncher::with_state_root(state_root()),
        )),
        Ok(other) => stockade::provider(Some(other)).expect("test provider"),
    }
}

pub async fn sandbox(spec: SandboxSpec) -> Sandbox {
    // Owned by the test process: a test that panics before destroy leaks nothing
    // past the test binary.
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    Sandbox::create(provider(), spec, opts)
        .await
        .expect("create sandbox")
}

/// Runs `sh -c script` with a deadline.
pub async fn sh(sb: &Sandbox, script: &str, timeout_ms: u64) -> ExecOutcome {
    let mut req = ExecRequest::new(["/bin/sh", "-c", script]);
    req.timeout_ms = Some(timeout_ms);
    sb.exec(req).await.expect("exec")
}

/// Runs python3 code.
pub async fn py(sb: &Sandbox, code: &str, timeout_ms: u64) -> ExecOutcome {
    let mut req = ExecRequest::new(["/usr/bin/python3", "-c", code]);
    req.timeout_ms = Some(timeout_ms);
    sb.exec(req).await.expect("exec")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Destroys the sandbox and checks nothing of it is left: no state dir, no cgroup,
/// no process of its monitor.
pub async fn destroy_clean(sb: Sandbox) {
    let id = sb.id().to_string();
    sb.destroy().await.expect("destroy");
    sb.destroy().await.expect("destroy is idempotent");
    assert_no_trace(&id);
}

pub fn assert_no_trace(id: &str) {
    assert!(
        !state_root().join(id).exists(),
        "state dir of {id} left behind"
    );
    for base in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/unified",
    ] {
        let cg = PathBuf::from(base).join("stockade").join(id);
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
}
