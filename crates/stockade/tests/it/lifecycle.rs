//! Lifetimes, destroy, crash cleanup and concurrency. Nothing may leak.

use std::time::Duration;

use stockade::{CreateOptions, Sandbox, SandboxSpec};

use crate::*;

#[tokio::test]
async fn lifetime_end_kills_everything_and_removes_all_state() {
    if !require_root("lifetime_end_kills_everything_and_removes_all_state") {
        return;
    }
    let sb = sandbox(SandboxSpec {
        timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let id = sb.id().to_string();
    let _ = sh(&sb, "(sleep 1000 &); true", 5_000).await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let err = provider().inspect(&id).await.unwrap_err();
    assert_eq!(err.code(), stockade::ErrorCode::NotFound);
    assert_no_trace(&id);
}

#[tokio::test]
async fn owner_death_destroys_the_sandbox() {
    if !require_root("owner_death_destroys_the_sandbox") {
        return;
    }
    let mut owner = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let sb = Sandbox::create(
        provider(),
        SandboxSpec::default(),
        CreateOptions {
            owner_pid: Some(owner.id()),
        },
    )
    .await
    .unwrap();
    let id = sb.id().to_string();
    owner.kill().unwrap();
    owner.wait().unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if !state_root().join(&id).exists() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "sandbox {id} outlived its owner");
    assert_no_trace(&id);
}

#[tokio::test]
async fn gc_reaps_what_a_killed_monitor_left() {
    if !require_root("gc_reaps_what_a_killed_monitor_left") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let id = sb.id().to_string();
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_root().join(&id).join("state.json")).unwrap())
            .unwrap();
    let monitor = state["monitor_pid"].as_i64().unwrap();
    let init = state["init_pid"].as_i64().unwrap();
    // A crash: the monitor dies without cleaning up; gc removes what it left.
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &monitor.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // PID 1 has a parent-death signal: the sandbox dies with its monitor, before gc.
    let mut died = false;
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{init}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            died = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(died, "the sandbox's init {init} outlived its monitor");
    let report = provider().gc().await.unwrap();
    assert!(report.reaped.contains(&id), "{report:?}");
    assert_no_trace(&id);
    let mut init_gone = false;
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{init}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            init_gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(init_gone, "the sandbox's init {init} survived gc");
    // Destroying what gc already reaped is fine.
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn unknown_ids_are_not_found_and_bad_ids_refused() {
    if !require_root("unknown_ids_are_not_found_and_bad_ids_refused") {
        return;
    }
    let p = provider();
    assert_eq!(
        p.inspect("sb-000000000000").await.unwrap_err().code(),
        stockade::ErrorCode::NotFound
    );
    let err = p
        .exec(
            "sb-000000000000",
            stockade::CheckedRequest::new(stockade::ExecRequest::new(["true"])).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), stockade::ErrorCode::NotFound);
    p.destroy("sb-000000000000").await.unwrap();
    assert_eq!(
        p.destroy("../../etc").await.unwrap_err().code(),
        stockade::ErrorCode::InvalidSpec
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_sandboxes_at_once_all_work_and_all_clean_up() {
    if !require_root("fifty_sandboxes_at_once_all_work_and_all_clean_up") {
        return;
    }
    let mut tasks = Vec::new();
    for i in 0..50 {
        tasks.push(tokio::spawn(async move {
            let sb = sandbox(SandboxSpec::default()).await;
            let out = py(&sb, &format!("print({i} * 2)"), 60_000).await;
            let id = sb.id().to_string();
            sb.destroy().await.unwrap();
            (i, id, out)
        }));
    }
    for t in tasks {
        let (i, id, out) = t.await.unwrap();
        assert_eq!(
            text(&out.stdout),
            format!("{}\n", i * 2),
            "sandbox {i}: {}",
            text(&out.stderr)
        );
        assert_no_trace(&id);
    }
}

/// A native state root that is full: a create fails with the disk's error and
/// leaves no empty `sb-*` directory behind (one that `rm` would call unknown and
/// only `gc` removed).
#[tokio::test]
async fn a_full_state_root_fails_the_create_and_leaves_no_directory() {
    if !require_root("a_full_state_root_fails_the_create_and_leaves_no_directory")
        || on_gvisor()
        || on_microvm()
        || std::env::var_os("STOCKADE_TEST_ROOTLESS").is_some()
    {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let _fs = stockade_testkit::Tmpfs::mount(root.path(), "4k");
    let p: std::sync::Arc<dyn stockade::Provider> = std::sync::Arc::new(
        stockade::NativeProvider::from(stockade::NativeLauncher::with_state_root(root.path())),
    );
    let r = Sandbox::create(
        p.clone(),
        SandboxSpec::default(),
        CreateOptions {
            owner_pid: Some(std::process::id()),
        },
    )
    .await;
    match r {
        Ok(sb) => {
            let _ = sb.destroy().await;
            panic!("a sandbox was made in a 4 KiB state root");
        }
        Err(e) => assert!(
            e.to_string().to_lowercase().contains("space"),
            "the error does not name the full disk: {e}"
        ),
    }
    let left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sb-"))
        .collect();
    assert!(left.is_empty(), "left in the full state root: {left:?}");
}
