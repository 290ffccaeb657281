//! Pause and resume through the cgroup freezer, and fork refused, on the native
//! provider. A pause that does not really stop the code fails these tests.

use std::path::PathBuf;
use std::time::Duration;

use stockade::{ExecRequest, RunState, SandboxSpec};

use crate::*;

/// A background Python that counts and records the longest wall-clock gap it saw
/// between two of its steps (it sees one only if it was stopped): `/tmp/c` holds
/// `count gap`.
const COUNTER: &str = r#"import os, time
n, last, gap = 0, time.time(), 0.0
while True:
    n += 1
    now = time.time(); gap = max(gap, now - last); last = now
    open('/tmp/c.tmp', 'w').write(f'{n} {gap:.3f}'); os.replace('/tmp/c.tmp', '/tmp/c')
    time.sleep(0.01)
"#;

fn parse(s: &str) -> (u64, f64) {
    let mut it = s.split_whitespace();
    let n = it.next().and_then(|v| v.parse().ok()).expect("count");
    let gap = it.next().and_then(|v| v.parse().ok()).expect("gap");
    (n, gap)
}

/// The counter's file read from the host, through PID 1's root: no call into the
/// (frozen) sandbox.
fn host_read(init_pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{init_pid}/root/tmp/c")).expect("read counter")
}

fn state_of(id: &str) -> serde_json::Value {
    let t = std::fs::read(state_root().join(id).join("state.json")).expect("state.json");
    serde_json::from_slice(&t).unwrap()
}

#[tokio::test]
async fn pause_freezes_every_process_resume_continues_and_destroy_of_a_paused_one_leaves_nothing() {
    if !require_root("pause_freezes_every_process") {
        return;
    }
    let sb = sandbox(SandboxSpec {
        timeout_secs: 120,
        ..Default::default()
    })
    .await;
    let id = sb.id().to_string();
    sb.write("/tmp/counter.py", COUNTER)
        .await
        .expect("write the counter");
    let mut req = ExecRequest::new(["/bin/sh", "-c", "python3 /tmp/counter.py >/dev/null 2>&1 &"]);
    req.background = true;
    req.timeout_ms = Some(110_000);
    assert_eq!(sb.exec(req).await.unwrap().exit_code, 0);
    let init_pid = state_of(&id)["init_pid"].as_u64().unwrap() as u32;
    let mut tries = 0;
    while parse_opt(&format!("/proc/{init_pid}/root/tmp/c")).is_none_or(|(n, _)| n < 5) {
        tries += 1;
        if tries == 500 {
            let out = sh(&sb, "ls -la /tmp; cat /tmp/c; ps aux 2>&1 | head", 10_000).await;
            panic!(
                "the counter never started: {} {}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    sb.pause().await.expect("pause");
    let info = provider().inspect(&id).await.unwrap();
    assert_eq!(info.state, RunState::Paused);
    let listed = provider().list().await.unwrap();
    assert_eq!(
        listed.iter().find(|i| i.id == id).map(|i| i.state),
        Some(RunState::Paused)
    );
    // Frozen: its cgroup says so, and the counter does not move.
    let cgroups: Vec<PathBuf> = serde_json::from_value(state_of(&id)["cgroups"].clone()).unwrap();
    let freezer = stockade::native::freezer::Freezer::of(&cgroups).expect("a freezer");
    assert!(
        freezer.is_frozen(),
        "{} is not frozen",
        freezer.dir().display()
    );
    let (a, _) = parse(&host_read(init_pid));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (b, _) = parse(&host_read(init_pid));
    assert_eq!(a, b, "the counter advanced while paused: {a} -> {b}");

    // Execs and file operations are refused, naming the state.
    let e = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("sandbox {id} is paused; resume it first")),
        "{e}"
    );
    let e = sb.read("/tmp/c").await.unwrap_err();
    assert!(e.to_string().contains("is paused; resume it first"), "{e}");
    let e = sb.pause().await.unwrap_err();
    assert!(e.to_string().contains("is already paused"), "{e}");
    // Fork is refused on native with the reason, paused or not.
    let e = sb
        .fork(1, stockade::CreateOptions::default())
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("fork on the native provider")
            && e.to_string().contains("cannot copy"),
        "{e}"
    );

    // Resume: the same process goes on, and it saw the pause as a gap.
    sb.resume().await.expect("resume");
    assert!(!freezer.is_frozen());
    assert_eq!(
        provider().inspect(&id).await.unwrap().state,
        RunState::Running
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = sh(&sb, "cat /tmp/c", 10_000).await;
    let (c, gap) = parse(&text(&out.stdout));
    assert!(c > b, "the counter did not go on after resume: {b} -> {c}");
    assert!(gap >= 1.4, "the process saw no stop (longest gap {gap} s)");
    let e = sb.resume().await.unwrap_err();
    assert!(e.to_string().contains("is not paused"), "{e}");

    // Destroy while paused: nothing is left, not even the frozen processes.
    let procs = std::fs::read_to_string(freezer.dir().join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<u32> = procs
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(pids.len() >= 2, "PID 1 and the counter: {pids:?}");
    sb.pause().await.expect("pause again");
    destroy_clean(sb).await;
    for pid in pids {
        assert!(
            !PathBuf::from(format!("/proc/{pid}")).exists(),
            "process {pid} of the paused sandbox outlived its destroy"
        );
    }
}

fn parse_opt(path: &str) -> Option<(u64, f64)> {
    let t = std::fs::read_to_string(path).ok()?;
    let mut it = t.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

#[tokio::test]
async fn a_paused_sandbox_lifetime_does_not_run() {
    if !require_root("a_paused_sandbox_lifetime_does_not_run") {
        return;
    }
    let sb = sandbox(SandboxSpec {
        timeout_secs: 2,
        ..Default::default()
    })
    .await;
    let id = sb.id().to_string();
    let planned = sb.info().expires_at_ms;
    sb.pause().await.expect("pause");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    // Past its planned end, still there: the time paused does not count.
    let info = provider().inspect(&id).await.expect("alive while paused");
    assert_eq!(info.state, RunState::Paused);
    assert!(
        info.expires_at_ms >= planned + 2500,
        "{} vs {planned}",
        info.expires_at_ms
    );
    sb.resume().await.expect("resume");
    let out = sh(&sb, "echo alive", 5_000).await;
    assert_eq!(text(&out.stdout).trim(), "alive");
    // The rest of its lifetime then runs out.
    let mut gone = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if provider().inspect(&id).await.is_err() {
            gone = true;
            break;
        }
    }
    assert!(gone, "sandbox {id} outlived its lifetime after resume");
    assert_no_trace(&id);
}

#[tokio::test]
async fn named_snapshots_are_refused_by_name_on_native() {
    if !require_root("named_snapshots_are_refused_by_name_on_native") || on_microvm() {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let p = provider();
    let refusals = [
        sb.snapshot("base").await.unwrap_err(),
        p.snapshots().await.unwrap_err(),
        p.remove_snapshot("base").await.unwrap_err(),
        stockade::Sandbox::from_snapshot(p.clone(), "base", Default::default())
            .await
            .unwrap_err(),
    ];
    for e in refusals {
        assert_eq!(e.code(), stockade::ErrorCode::Unavailable, "{e}");
        let m = e.to_string();
        assert!(
            m.contains("on the native provider") && m.contains("use the microvm provider"),
            "{m}"
        );
    }
    // A bad name is refused as such before any provider is asked.
    let e = sb.snapshot("../base").await.unwrap_err();
    assert!(e.to_string().contains("is not valid"), "{e}");
    destroy_clean(sb).await;
}
