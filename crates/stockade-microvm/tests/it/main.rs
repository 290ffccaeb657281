//! The microvm provider with real QEMU (TCG where KVM is unusable): boot, exec and
//! files through the agent host, attacks that fail the test when they succeed,
//! pause/resume/fork, a corrupt snapshot, a VM killed from the host, cleanup, and
//! network egress through the native provider's filter (`network.rs`).
//!
//! Needs root, qemu-system-x86, the Debian cloud kernel, erofs-utils and the static
//! agent (crates/stockade-microvm/ci-setup.sh, scripts/build-agent.sh). In CI a
//! missing part fails the tests; elsewhere they are skipped loudly. VMs are slow to
//! boot under TCG, so each test reuses one VM for many checks.

mod jail;
mod network;
mod snapshots;
mod vm;

use std::sync::Arc;

use stockade_core::{CreateOptions, Provider, Sandbox, SandboxSpec};
use stockade_microvm::MicrovmProvider;
use stockade_testkit::require;

pub use stockade_testkit::{py, sh, text};

/// Held by a test while a VM it killed from the host must stay on record, and by
/// each `gc()` call: tests run in parallel, and gc rightly reaps any VM whose host
/// is gone, so without it another test's gc turns the dead VM's answer into
/// `NotFound` before the killing test has read it.
pub static DEAD_VM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The provider, or `None` (after a SKIPPED line) when a part is missing outside CI.
pub async fn provider() -> Option<Arc<MicrovmProvider>> {
    require("root", stockade_testkit::root(), "run the tests as root")?;
    let p = Arc::new(MicrovmProvider::new());
    let checks = p.probe().await.expect("probe");
    let missing: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    require(
        "the microvm provider's parts",
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("; "))
        },
        "run crates/stockade-microvm/ci-setup.sh and scripts/build-agent.sh debug",
    )?;
    // Where KVM is unusable the suite says so and runs under TCG.
    if let Some(c) = checks.iter().find(|c| c.name == "acceleration") {
        eprintln!("microvm tests run under {}", c.detail);
    }
    Some(p)
}

/// A small VM owned by this test process.
pub async fn vm(p: &Arc<MicrovmProvider>, spec: SandboxSpec) -> Sandbox {
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    Sandbox::create(p.clone() as Arc<dyn Provider>, spec, opts)
        .await
        .expect("create a microVM")
}

/// The spec the tests use: 256 MiB for the code (smaller snapshots).
pub fn spec() -> SandboxSpec {
    let mut s = SandboxSpec::default();
    s.limits.memory_bytes = 256 << 20;
    s
}

/// Whether anything of sandbox `id` is left on the host: its directory, a QEMU
/// process, a host cgroup.
pub fn leftovers(id: &str) -> Vec<String> {
    let mut v = Vec::new();
    let dir = std::path::Path::new("/run/stockade-microvm").join(id);
    if dir.exists() {
        v.push(dir.display().to_string());
    }
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.contains(id) {
            v.push(format!(
                "process {}: {}",
                e.file_name().to_string_lossy(),
                cmd.replace('\0', " ")
            ));
        }
    }
    for cg in [
        "/sys/fs/cgroup/stockade-microvm",
        "/sys/fs/cgroup/memory/stockade-microvm",
        "/sys/fs/cgroup/cpu/stockade-microvm",
        "/sys/fs/cgroup/cpuacct/stockade-microvm",
    ] {
        let p = std::path::Path::new(cg).join(id);
        if p.exists() {
            v.push(p.display().to_string());
        }
    }
    v
}
