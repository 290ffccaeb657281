//! The wasm provider as Stockade uses it: one `stockade-wasm-runner` process per
//! sandbox, driven over the agent protocol (`stockade_wasm_host::WasmProvider`).
//! These are the attacks on the host process that the runner exists for: a module's
//! memory, a module that never ends, a runner killed behind the host's back, and a
//! host that dies with live sandboxes.

use std::path::Path;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ExecRequest, Provider};
use stockade_wasm_host::{WasmConfig, WasmProvider};

use crate::support::{guest, spec, test_home};

/// The host side of the provider, on the runner this package builds, with a scratch
/// directory of its own.
fn host_provider() -> (WasmProvider, tempfile::TempDir) {
    // The runner is found beside the test binary's directory: cargo builds this
    // package's binaries for its tests.
    assert_eq!(
        stockade_wasm_host::runner::find_runner().unwrap(),
        Path::new(env!("CARGO_BIN_EXE_stockade-wasm-runner")),
    );
    let scratch = tempfile::tempdir().expect("scratch dir");
    let config = WasmConfig {
        scratch_dir: scratch.path().to_path_buf(),
        ..WasmConfig::in_home(&test_home())
    };
    (stockade_wasm_host::provider(config), scratch)
}

async fn create(p: &WasmProvider, image: &Path) -> String {
    crate::support::create(p, spec(image)).await
}

async fn run(
    p: &WasmProvider,
    id: &str,
    argv: &[&str],
) -> stockade_core::Result<stockade_core::ExecOutcome> {
    crate::support::exec_req(p, id, ExecRequest::new(argv.iter().copied())).await
}

fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for this purpose.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

async fn gone_within(pid: u32, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !alive(pid)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_modules_memory_is_held_by_its_runner_not_by_the_host() {
    let Some(module) = guest() else { return };
    let (p, scratch) = host_provider();
    let me = std::process::id();
    let id = create(&p, &module).await;
    let runner = p.launcher().runner_pid(&id).unwrap();
    assert_ne!(runner, me, "the sandbox has a process of its own");
    let before = peak_kib(me);
    // 3 x 150 MiB at once (within the sandbox's 512 MiB), touched: in the host's
    // process this raised its peak by 450 MiB.
    let execs: Vec<_> = (0..3)
        .map(|_| {
            let (p, id) = (p.clone(), id.clone());
            tokio::spawn(async move { run(&p, &id, &["guest", "alloc", "150"]).await })
        })
        .collect();
    for e in execs {
        let out = e.await.unwrap().unwrap();
        assert_eq!(out.exit_code, 0, "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("allocated 150 MiB"),
            "{out:?}"
        );
    }
    let grew = peak_kib(me).saturating_sub(before);
    assert!(
        grew < 64 << 10,
        "the host process's peak grew by {} MiB while the module allocated 450",
        grew >> 10
    );
    let tmp = p.launcher().tmp_host_path(&id).unwrap();
    assert!(tmp.is_dir());
    p.destroy(&id).await.unwrap();
    assert!(!alive(runner), "destroy returns once the runner is gone");
    assert!(!tmp.exists(), "the sandbox's files are removed");
    assert!(
        std::fs::read_dir(scratch.path()).unwrap().next().is_none(),
        "nothing is left in the scratch directory"
    );
    assert!(p.inspect(&id).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_killed_behind_the_hosts_back_is_reported_and_cleaned_up() {
    let Some(module) = guest() else { return };
    let (p, scratch) = host_provider();
    let id = create(&p, &module).await;
    let runner = p.launcher().runner_pid(&id).unwrap();
    let exec = {
        let p = p.clone();
        let id = id.clone();
        tokio::spawn(async move { run(&p, &id, &["guest", "sleep", "30000"]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(runner as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), exec)
        .await
        .expect("the exec ends when its runner dies")
        .unwrap()
        .expect_err("an exec whose runner was killed fails");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        err.to_string().contains(&id),
        "the error names the sandbox: {err}"
    );
    // The runner is reaped and forgotten, and what it left is removed.
    let started = Instant::now();
    while p.inspect(&id).await.is_ok() && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        p.inspect(&id).await.is_err(),
        "a dead runner's sandbox is not listed"
    );
    assert!(p.list().await.unwrap().is_empty());
    let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    p.destroy(&id)
        .await
        .expect("destroy of a gone sandbox is a no-op");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_module_that_never_ends_keeps_to_its_deadline_and_its_lifetime() {
    let Some(module) = guest() else { return };
    let (p, _scratch) = host_provider();
    let mut s = spec(&module);
    s.timeout_secs = 2;
    let checked = stockade_core::CheckedSpec::new(s.validate().unwrap(), &p).unwrap();
    let info = p.create(checked, CreateOptions::default()).await.unwrap();
    let runner = p.launcher().runner_pid(&info.id).unwrap();
    let mut req = ExecRequest::new(["guest", "spin"]);
    req.timeout_ms = Some(300);
    let started = Instant::now();
    let out = p
        .exec(
            &info.id,
            stockade_core::CheckedRequest::new(req).unwrap(),
            stockade_core::ExecIo::none(),
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The sandbox's lifetime ends its runner, with no call from the host.
    assert!(
        gone_within(runner, Duration::from_secs(6)).await,
        "the runner outlived its sandbox's lifetime"
    );
    let started = Instant::now();
    while p.inspect(&info.id).await.is_ok() && started.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(p.inspect(&info.id).await.is_err());
}

/// A host that dies (kill -9) takes its runners with it: they hold the other end of
/// a pipe only the host has.
#[test]
fn runners_end_with_the_host_that_started_them() {
    let Some(module) = guest() else { return };
    if std::env::var_os("STOCKADE_RUNNER_TEST_CHILD").is_some() {
        // The child: make a sandbox, say its runner's pid, then wait to be killed.
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (p, scratch) = host_provider();
            let id = create(&p, &module).await;
            println!(
                "runner {} dir {}",
                p.launcher().runner_pid(&id).unwrap(),
                scratch.path().display()
            );
            std::mem::forget(scratch);
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "runner::runners_end_with_the_host_that_started_them",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("STOCKADE_RUNNER_TEST_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the child ended without making a sandbox");
        // The harness prints the test's name on the same line, before it.
        if let Some((_, rest)) = line.split_once("runner ") {
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u32>()
                .unwrap();
        }
    };
    assert!(alive(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    let started = Instant::now();
    while alive(pid) && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(pid),
        "runner {pid} outlived the host that was killed"
    );
    // The runner ended its sandbox: its directory is empty (the runner may not remove
    // that directory itself: its landlock lets it write only below it), and gc
    // removes it.
    let dir = std::path::PathBuf::from(line.split(" dir ").nth(1).unwrap().trim());
    let own = dir.join(pid.to_string());
    let left: Vec<_> = std::fs::read_dir(&own)
        .map(Iterator::collect)
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "the runner left {left:?} in {}",
        own.display()
    );
    let p = stockade_wasm_host::provider(WasmConfig {
        scratch_dir: dir.clone(),
        ..WasmConfig::in_home(&test_home())
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(p.gc()).unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(Iterator::collect)
        .unwrap_or_default();
    assert!(left.is_empty(), "gc left {left:?} in {}", dir.display());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The wall behind wasmtime's own: code that broke out of the engine would hold a
/// process without capabilities, under seccomp and landlock.
#[tokio::test(flavor = "multi_thread")]
async fn the_runner_holds_no_privileges() {
    let Some(module) = guest() else { return };
    let (p, _scratch) = host_provider();
    let id = create(&p, &module).await;
    let runner = p.launcher().runner_pid(&id).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{runner}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(field("Seccomp:"), "2", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    for set in ["CapEff:", "CapPrm:", "CapInh:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(set), "0000000000000000", "{set} {status}");
    }
    // It holds stdio, its socket and what its engine opened, nothing of the host's:
    // a descriptor this process leaked (no close-on-exec) is not among them.
    let leaked = std::fs::File::open("/proc/self/status").unwrap();
    rustix::io::fcntl_setfd(&leaked, rustix::io::FdFlags::empty()).unwrap();
    let n = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    let id2 = create(&p, &module).await;
    let runner2 = p.launcher().runner_pid(&id2).unwrap();
    let target = std::fs::read_link(format!("/proc/{runner2}/fd/{n}"));
    drop(leaked);
    p.destroy(&id2).await.unwrap();
    assert!(
        !target.is_ok_and(|t| t.ends_with("status")),
        "the runner inherited descriptor {n}"
    );
    let info = p.inspect(&id).await.unwrap();
    assert!(
        info.applied
            .iter()
            .any(|w| w.detail.starts_with("runner:") && w.detail.contains("landlock")),
        "{:?}",
        info.applied
    );
    p.destroy(&id).await.unwrap();
}
