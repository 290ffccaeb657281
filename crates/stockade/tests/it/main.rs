//! Behaviour and attack tests, run against a provider through the `Provider` trait.
//! Every escape test is written so that a breach fails it.
//!
//! Needs root (the native provider creates cgroups and namespaces). Without root the
//! tests fail when `CI` is set, and are skipped loudly otherwise.

mod attacks;
mod behaviour;
mod conformance;
mod egress;
mod files;
mod kernel;
mod lifecycle;
mod pause;
mod userns;

use std::path::PathBuf;
use std::sync::Arc;

use stockade::{CreateOptions, NativeProvider, Provider, Sandbox, SandboxSpec};

pub use stockade_testkit::{py, require_root, sh, text};

/// A state root shared by the tests of this binary, so leftovers can be checked;
/// through a daemon (`STOCKADE_TEST_PROVIDER=remote`), the daemon's native state
/// root (`STOCKADE_TEST_STATE_ROOT`, its `--native-state-dir`).
pub fn state_root() -> PathBuf {
    if remote_run() {
        return std::env::var_os("STOCKADE_TEST_STATE_ROOT")
            .map(PathBuf::from)
            .expect("STOCKADE_TEST_PROVIDER=remote needs STOCKADE_TEST_STATE_ROOT (the daemon's --native-state-dir)");
    }
    let p = std::env::temp_dir().join(format!("stockade-it-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

pub fn provider() -> Arc<dyn Provider> {
    match std::env::var("STOCKADE_TEST_PROVIDER").as_deref() {
        Ok("native") | Err(_) => Arc::new(NativeProvider::from(
            stockade::NativeLauncher::with_state_root(state_root()),
        )),
        Ok("microvm") => {
            microvm_parts();
            stockade::provider(Some("microvm")).expect("microvm provider")
        }
        Ok("remote") => remote(),
        Ok(other) => stockade::provider(Some(other)).expect("test provider"),
    }
}

/// The daemon `STOCKADE_HOST` names, as the caller `STOCKADE_TOKEN` makes it (a token
/// tenant) or as this process's user (a socket-group user): test.sh runs the attack
/// suite through the daemon's front doors so. Connected once, on a runtime of its own
/// that outlives every test's.
fn remote() -> Arc<dyn Provider> {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    static P: std::sync::OnceLock<stockade_client::RemoteProvider> = std::sync::OnceLock::new();
    let p = P.get_or_init(|| {
        let rt = RT.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime for the daemon's client")
        });
        let h = rt.handle().clone();
        std::thread::spawn(move || h.block_on(stockade_client::RemoteProvider::from_env()))
            .join()
            .expect("connecting to the daemon")
            .unwrap_or_else(|e| panic!("STOCKADE_TEST_PROVIDER=remote: {e}"))
            .expect("STOCKADE_TEST_PROVIDER=remote needs STOCKADE_HOST (the daemon to test)")
    });
    Arc::new(p.clone())
}

/// Whether these suites run through a daemon (`STOCKADE_TEST_PROVIDER=remote`).
pub fn remote_run() -> bool {
    std::env::var("STOCKADE_TEST_PROVIDER").as_deref() == Ok("remote")
}

/// How to get what the microvm provider boots.
pub const MICROVM_FIX: &str = "run crates/stockade-microvm/ci-setup.sh as root (installs qemu-system-x86, \
     Debian's cloud kernel and erofs-utils) and scripts/build-agent.sh debug (the static agent)";

/// Checks the parts a microVM needs are here. The run asked for microvm by name
/// (`STOCKADE_TEST_PROVIDER=microvm`), so a missing part fails every test with how to
/// fix it, in CI and out: it is never a silent skip.
fn microvm_parts() {
    let mut missing = Vec::new();
    match std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => missing.push(format!(
            "qemu-system-x86_64 --version failed ({})",
            o.status
        )),
        Err(e) => missing.push(format!("qemu-system-x86_64 cannot run: {e}")),
    }
    if let Err(e) = stockade::microvm::assets::find_kernel() {
        missing.push(format!("the guest kernel: {e}"));
    }
    if std::process::Command::new("mkfs.erofs")
        .arg("--help")
        .output()
        .is_err()
    {
        missing.push("mkfs.erofs is not installed".into());
    }
    if let Err(e) = stockade::agent_host::find_static_agent() {
        missing.push(format!("the static agent: {e}"));
    }
    assert!(
        missing.is_empty(),
        "STOCKADE_TEST_PROVIDER=microvm: {}\nfix: {MICROVM_FIX}",
        missing.join("; ")
    );
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

/// Destroys the sandbox and checks nothing of it is left: no state dir, no cgroup,
/// no process of its monitor.
pub async fn destroy_clean(sb: Sandbox) {
    let id = sb.id().to_string();
    sb.destroy().await.expect("destroy");
    sb.destroy().await.expect("destroy is idempotent");
    assert_no_trace(&id);
}

pub fn assert_no_trace(id: &str) {
    if remote_run() {
        // The daemon answers a destroy before its teardown ends (it runs in the
        // background); the wait only bounds a hang.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < until && native_trace(id).is_some() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    if on_microvm() {
        return assert_no_vm_trace(id);
    }
    if on_gvisor() {
        return assert_no_gvisor_trace(id);
    }
    native_traces_gone(id);
}

/// Fails naming what is left of native sandbox `id`.
fn native_traces_gone(id: &str) {
    if let Some(left) = native_trace(id) {
        panic!("{left} left behind");
    }
}

/// What is left of native sandbox `id`, if anything: its state dir or a cgroup.
fn native_trace(id: &str) -> Option<String> {
    let dir = state_root().join(id);
    if dir.exists() {
        return Some(format!("state dir of {id}"));
    }
    [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/unified",
    ]
    .iter()
    .map(|base| {
        PathBuf::from(base)
            .join(stockade_testkit::cgroup_parent())
            .join(id)
    })
    .find(|cg| cg.exists())
    .map(|cg| format!("cgroup {}", cg.display()))
}

/// What is left of gVisor sandbox `id`: its directory, runsc's files of it, a
/// process naming it (sentry, gofer, the watcher, which exits moments after the
/// sandbox), its host cgroups.
fn assert_no_gvisor_trace(id: &str) {
    let root = std::path::Path::new(stockade::gvisor::DEFAULT_STATE_ROOT);
    assert!(!root.join(id).exists(), "state dir of {id} left behind");
    let runsc: Vec<String> = std::fs::read_dir(root.join("runsc"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(id))
                .collect()
        })
        .unwrap_or_default();
    assert!(runsc.is_empty(), "runsc files of {id} left: {runsc:?}");
    let procs = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                cmd.contains(id).then_some(cmd)
            })
            .collect::<Vec<_>>()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !procs().is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(procs(), Vec::<String>::new(), "processes of {id} left");
    assert!(
        stockade::gvisor::cgroup::dirs("stockade", id).is_empty(),
        "cgroups of {id} left"
    );
}

/// What is left of microVM sandbox `id`: its directory (sockets, snapshot files), a
/// process naming it (the supervisor, QEMU), a host cgroup around the VMM.
fn assert_no_vm_trace(id: &str) {
    let dir = std::path::Path::new("/run/stockade-microvm").join(id);
    assert!(!dir.exists(), "{} left behind", dir.display());
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        assert!(
            !cmd.contains(id),
            "process {} of {id} left behind: {cmd}",
            e.file_name().to_string_lossy()
        );
    }
    for base in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/cpuacct",
    ] {
        let cg = PathBuf::from(base).join("stockade-microvm").join(id);
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
}

/// Whether these suites run on the microvm provider (`STOCKADE_TEST_PROVIDER=microvm`).
pub fn on_microvm() -> bool {
    std::env::var("STOCKADE_TEST_PROVIDER").as_deref() == Ok("microvm")
}

/// Whether these suites run on the gvisor provider (`STOCKADE_TEST_PROVIDER=gvisor`).
pub fn on_gvisor() -> bool {
    std::env::var("STOCKADE_TEST_PROVIDER").as_deref() == Ok("gvisor")
}

/// Every process gVisor sandbox `id` runs, as its own kernel lists them (`runsc ps`):
/// `(uid, pid, ppid, comm)`, pids inside the sandbox. On gVisor the host's cgroup
/// counts gVisor's own tasks (the ptrace platform's stubs: many per process inside),
/// so the code's processes are counted here instead.
pub fn gvisor_ps(id: &str) -> Vec<(u32, u32, u32, String)> {
    let runsc = stockade_testkit::runsc().expect("runsc");
    let out = std::process::Command::new(runsc)
        .arg(format!(
            "--root={}/runsc",
            stockade::gvisor::DEFAULT_STATE_ROOT
        ))
        .args(["ps", id])
        .output()
        .expect("runsc ps");
    assert!(out.status.success(), "runsc ps {id}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.last()?.to_string(),
            ))
        })
        .collect()
}
