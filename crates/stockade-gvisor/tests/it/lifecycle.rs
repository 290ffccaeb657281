//! Bad input, deaths and cleanup: a missing or broken runsc, a gVisor kernel killed
//! mid-exec, the owner killed with SIGKILL, destroy and gc leaving nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ErrorCode, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_gvisor::{GvisorLauncher, GvisorProvider};

use crate::*;

async fn create_with(launcher: GvisorLauncher) -> stockade_core::Error {
    let p: Arc<dyn Provider> = Arc::new(GvisorProvider::from(launcher));
    Sandbox::create(p, SandboxSpec::default(), CreateOptions::default())
        .await
        .map(|sb| sb.id().to_string())
        .expect_err("created a sandbox without a working runsc")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_broken_runsc_is_unavailable_with_the_fix() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-runsc");
    // A state root of its own: the other tests create sandboxes in the shared one
    // meanwhile, and "nothing was made" is checked below.
    let own_root = dir.path().join("state");
    let launcher = || launcher().with_state_root(&own_root);
    let e = create_with(launcher().with_runsc(&missing)).await;
    assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("does not exist")
            && msg.contains("apt-get install runsc")
            && msg.contains("STOCKADE_RUNSC"),
        "{msg}"
    );
    for broken in ["/bin/false", "/bin/true"] {
        let e = create_with(launcher().with_runsc(broken)).await;
        assert_eq!(e.code(), ErrorCode::Unavailable, "{broken}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(broken) && msg.contains("runsc"), "{msg}");
    }
    // doctor says the same.
    let checks = GvisorProvider::from(launcher().with_runsc(&missing))
        .probe()
        .await
        .unwrap();
    let c = checks.iter().find(|c| c.name == "runsc").unwrap();
    assert!(
        !c.ok && c.fix.as_deref().unwrap().contains("runsc"),
        "{c:?}"
    );
    // Nothing was made.
    assert!(
        std::fs::read_dir(&own_root)
            .map(|d| d
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with("sb-")))
            .unwrap_or(true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_version_age_and_platform() {
    if !ready() {
        return;
    }
    let checks = provider().probe().await.unwrap();
    let runsc = checks.iter().find(|c| c.name == "runsc").unwrap();
    assert!(
        runsc.ok && runsc.detail.contains("runsc version"),
        "{runsc:?}"
    );
    // Debian's build is from 2022-12: more than a year old.
    if runsc.detail.contains("20221219") {
        assert!(runsc.detail.contains("WARNING"), "{runsc:?}");
    }
    let platform = checks.iter().find(|c| c.name == "gvisor platform").unwrap();
    assert!(
        ["ptrace", "systrap", "kvm"]
            .iter()
            .any(|p| platform.detail.starts_with(p)),
        "{platform:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gvisor_kernel_killed_mid_exec_is_reported_not_hung() {
    if !ready() {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let id = sb.id().to_string();
    let pid = init_pid(&id);
    let running = tokio::spawn({
        let sb = sb.clone();
        async move {
            let mut req = ExecRequest::new(["/bin/sleep", "60"]);
            req.timeout_ms = Some(60_000);
            sb.exec(req).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .expect("the exec hung after its sandbox died")
        .unwrap();
    let e = r.expect_err("an exec whose sandbox died succeeded");
    assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // The next call says why (or that it is gone, once the watcher cleaned up).
    let next = sb.exec(ExecRequest::new(["/bin/true"])).await.unwrap_err();
    assert!(
        matches!(next.code(), ErrorCode::Unavailable | ErrorCode::NotFound),
        "{next}"
    );
    sb.destroy().await.unwrap();
    assert!(eventually(10, || processes_of(&id).is_empty()).await);
    assert_no_trace(&id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_leaves_nothing_and_is_idempotent() {
    if !ready() {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let id = sb.id().to_string();
    assert!(!processes_of(&id).is_empty());
    let p = provider();
    assert!(p.list().await.unwrap().iter().any(|i| i.id == id));
    let started = std::time::Instant::now();
    sb.destroy().await.unwrap();
    let took = started.elapsed();
    p.destroy(&id).await.unwrap();
    // At once: the sentry, the gofer and the watcher are dead when destroy returns
    // (zombies awaiting the host's init have no command line), nothing lingers.
    assert_eq!(processes_of(&id), Vec::<String>::new());
    assert_no_trace(&id);
    // No `runsc delete` (which waits for the host's init to reap the sandbox).
    assert!(took < Duration::from_secs(1), "destroy took {took:?}");
    assert_eq!(
        p.inspect(&id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_owner_leaves_nothing() {
    if !ready() {
        return;
    }
    // The owner: a process of its own, killed with SIGKILL (it cannot clean up).
    let mut owner = Owner::spawn();
    let sb = Sandbox::create(
        provider(),
        SandboxSpec::default(),
        CreateOptions {
            owner_pid: Some(owner.pid()),
        },
    )
    .await
    .unwrap();
    let id = sb.id().to_string();
    assert_eq!(text(&sh(&sb, "echo up", 10_000).await.stdout), "up\n");
    owner.kill();
    assert!(
        eventually(15, || processes_of(&id).is_empty()
            && !state_root().join(&id).exists())
        .await,
        "left after the owner died: {:?}",
        processes_of(&id)
    );
    assert_no_trace(&id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_owner_of_a_paused_sandbox_leaves_nothing() {
    if !ready() {
        return;
    }
    let mut owner = Owner::spawn();
    let sb = Sandbox::create(
        provider(),
        SandboxSpec::default(),
        CreateOptions {
            owner_pid: Some(owner.pid()),
        },
    )
    .await
    .unwrap();
    let id = sb.id().to_string();
    sb.pause().await.expect("pause");
    let e = sh_err(&sb).await;
    assert!(e.contains("is paused; resume it first"), "{e}");
    owner.kill();
    assert!(
        eventually(15, || processes_of(&id).is_empty()
            && !state_root().join(&id).exists())
        .await,
        "left after the owner of a paused sandbox died: {:?}",
        processes_of(&id)
    );
    assert_no_trace(&id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_fork_of_unknown_or_bad_ids_are_refused_clearly() {
    if !ready() {
        return;
    }
    let p = provider();
    for e in [
        p.pause("sb-000000000000").await.unwrap_err(),
        p.resume("sb-000000000000").await.unwrap_err(),
    ] {
        assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    }
    let e = p.pause("../etc").await.unwrap_err();
    assert!(e.to_string().contains("is not valid"), "{e}");
    // Fork of a live sandbox: refused, naming the provider and why.
    let sb = sandbox(SandboxSpec::default()).await;
    let e = sb.fork(1, CreateOptions::default()).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
    assert!(
        e.to_string().contains("fork on the gvisor provider")
            && e.to_string().contains("runsc checkpoint"),
        "{e}"
    );
    let id = sb.id().to_string();
    sb.destroy().await.unwrap();
    assert_no_trace(&id);
}

async fn sh_err(sb: &Sandbox) -> String {
    sb.exec(ExecRequest::new(["/bin/true"]))
        .await
        .unwrap_err()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_reaps_a_sandbox_whose_watcher_and_owner_died() {
    if !ready() {
        return;
    }
    let mut owner = Owner::spawn();
    let sb = Sandbox::create(
        provider(),
        SandboxSpec::default(),
        CreateOptions {
            owner_pid: Some(owner.pid()),
        },
    )
    .await
    .unwrap();
    let id = sb.id().to_string();
    // A crash took the watcher: nothing watches the owner any more.
    for p in processes_of(&id) {
        if p.contains("gvisor-watch") {
            let pid = p.split(':').next().unwrap();
            std::process::Command::new("kill")
                .args(["-KILL", pid])
                .status()
                .unwrap();
        }
    }
    owner.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        state_root().join(&id).exists(),
        "nothing should have cleaned up yet"
    );
    let report = provider().gc().await.unwrap();
    assert!(report.reaped.contains(&id), "{report:?}");
    assert!(eventually(10, || processes_of(&id).is_empty()).await);
    assert_no_trace(&id);
}

/// An owner process for a sandbox: `sleep`, killed with SIGKILL by the test or when
/// the test ends (a failing test must not leave it holding the test's output).
struct Owner(std::process::Child);

impl Owner {
    fn spawn() -> Owner {
        Owner(
            std::process::Command::new("/bin/sleep")
                .arg("600")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.kill();
    }
}
