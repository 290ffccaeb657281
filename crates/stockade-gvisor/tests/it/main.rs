//! The gvisor provider against a real runsc: the second wall seen from inside,
//! attacks that fail the test when they succeed, bad input, lifecycle and cleanup.
//! (The shared conformance cases run on gvisor from `crates/stockade/tests/it`.)
//!
//! Needs root and runsc (crates/stockade-gvisor/ci-setup.sh). In CI a missing part
//! fails the tests; elsewhere they are skipped loudly.

mod lifecycle;
mod wall;

use std::path::PathBuf;
use std::sync::Arc;

use stockade_core::{CreateOptions, Provider, Sandbox, SandboxSpec};
use stockade_gvisor::{GvisorLauncher, GvisorProvider};
use stockade_testkit::{GVISOR_FIX, require, root, runsc};

pub use stockade_testkit::{py, sh, text};

/// Whether root and runsc are here (else a SKIPPED line, or a panic in CI).
pub fn ready() -> bool {
    require("root", root(), "run the tests as root").is_some()
        && require("runsc (gVisor)", runsc(), GVISOR_FIX).is_some()
}

/// A state root of these tests' own, so leftovers can be checked.
pub fn state_root() -> PathBuf {
    PathBuf::from("/run/stockade-gvisor-it")
}

pub fn launcher() -> GvisorLauncher {
    GvisorLauncher::new().with_state_root(state_root())
}

pub fn provider() -> Arc<dyn Provider> {
    Arc::new(GvisorProvider::from(launcher()))
}

pub async fn sandbox(spec: SandboxSpec) -> Sandbox {
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    Sandbox::create(provider(), spec, opts)
        .await
        .expect("create sandbox")
}

/// The pid of the sandbox's gVisor kernel (`runsc-sandbox`), from its record.
pub fn init_pid(id: &str) -> u32 {
    let text = std::fs::read(state_root().join(id).join("sandbox.json")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    v["init_pid"].as_u64().unwrap() as u32
}

/// Nothing of sandbox `id` is left: no state directory, no runsc container, no cgroup,
/// no process.
pub fn assert_no_trace(id: &str) {
    assert!(
        !state_root().join(id).exists(),
        "state dir of {id} left behind"
    );
    let list = std::process::Command::new(runsc().unwrap())
        .arg(format!("--root={}", state_root().join("runsc").display()))
        .args(["list", "-quiet"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(id),
        "runsc still knows {id}"
    );
    // Not even a lock file (destroy removes runsc's files itself).
    let left: Vec<String> = std::fs::read_dir(state_root().join("runsc"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(id) || *n == format!("runsc-{id}.sock"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "runsc files of {id} left: {left:?}");
    for base in ["memory", "pids", "cpu"] {
        let cg = PathBuf::from("/sys/fs/cgroup")
            .join(base)
            .join("stockade")
            .join(id);
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
    assert_eq!(
        processes_of(id),
        Vec::<String>::new(),
        "processes of {id} left"
    );
}

/// Host processes whose command line names sandbox `id` (runsc's sandbox and gofer,
/// the watcher).
pub fn processes_of(id: &str) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(id) {
                v.push(format!("{name}: {cmd}"));
            }
        }
    }
    v
}

/// Waits up to `secs` for `f` to hold.
pub async fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    f()
}
