//! Pause and resume (`docker pause`), and fork refused. A pause that does not really
//! stop the code fails these tests.

use std::time::Duration;

use stockade_core::{ErrorCode, ExecRequest, Pausing, RunState};

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

fn parse(s: &str) -> Option<(u64, f64)> {
    let mut it = s.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// docker's own view: `State.Paused`.
fn docker_paused(id: &str) -> bool {
    let out = std::process::Command::new("/usr/bin/docker")
        .args([
            "inspect",
            "--format",
            "{{.State.Paused}}",
            &stockade_docker::container_name(id),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// The container's PID 1 on the host (its `/tmp` is readable through
/// `/proc/PID/root` without asking the frozen sandbox).
fn host_pid(id: &str) -> u32 {
    let out = std::process::Command::new("/usr/bin/docker")
        .args([
            "inspect",
            "--format",
            "{{.State.Pid}}",
            &stockade_docker::container_name(id),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_every_process_resume_continues_and_a_paused_one_is_destroyed() {
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    s.timeout_secs = 120;
    let sb = sandbox(s).await;
    let id = sb.id().to_string();
    sb.write("/tmp/counter.py", COUNTER).await.expect("write");
    let mut req = ExecRequest::new(["/bin/sh", "-c", "python3 /tmp/counter.py >/dev/null 2>&1 &"]);
    req.background = true;
    req.timeout_ms = Some(110_000);
    assert_eq!(sb.exec(req).await.unwrap().exit_code, 0);
    let pid = host_pid(&id);
    let read = || {
        std::fs::read_to_string(format!("/proc/{pid}/root/tmp/c"))
            .ok()
            .and_then(|t| parse(&t))
    };
    let mut tries = 0;
    while read().is_none_or(|(n, _)| n < 5) {
        tries += 1;
        assert!(tries < 500, "the counter never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    sb.pause().await.expect("pause");
    assert!(docker_paused(&id), "docker does not say {id} is paused");
    let p = provider();
    assert_eq!(p.inspect(&id).await.unwrap().state, RunState::Paused);
    let listed = p.list().await.unwrap();
    assert_eq!(
        listed.iter().find(|i| i.id == id).map(|i| i.state),
        Some(RunState::Paused),
        "a paused sandbox is listed, as paused"
    );
    let (a, _) = read().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (b, _) = read().unwrap();
    assert_eq!(a, b, "the counter advanced while paused: {a} -> {b}");
    // gc leaves a paused sandbox alone (its owner lives, its lifetime runs).
    let report = p.gc().await.unwrap();
    assert!(!report.reaped.contains(&id), "gc reaped paused {id}");

    // Execs and file operations are refused, naming the state; so are a second
    // pause and fork.
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
    let e = sb
        .fork(1, stockade_core::CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
    assert!(
        e.to_string().contains("fork on the docker provider")
            && e.to_string().contains("cannot copy"),
        "{e}"
    );

    // Resume: the same process goes on, and it saw the pause as a gap.
    sb.resume().await.expect("resume");
    assert!(!docker_paused(&id));
    assert_eq!(p.inspect(&id).await.unwrap().state, RunState::Running);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = sh(&sb, "cat /tmp/c", 10_000).await;
    let (c, gap) = parse(&text(&out.stdout)).expect("counter");
    assert!(c > b, "the counter did not go on after resume: {b} -> {c}");
    assert!(gap >= 1.4, "the process saw no stop (longest gap {gap} s)");
    let e = sb.resume().await.unwrap_err();
    assert!(e.to_string().contains("is not paused"), "{e}");

    // Destroy while paused: nothing is left.
    sb.pause().await.expect("pause again");
    sb.destroy().await.expect("destroy a paused sandbox");
    assert!(!container_exists(&id), "container of {id} left behind");
    assert!(
        !std::path::Path::new("/run/stockade-docker")
            .join(&id)
            .exists()
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z'))),
        "PID 1 of the paused container outlived its destroy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_of_an_unknown_or_bad_id_are_refused_clearly() {
    let Some(_image) = image() else { return };
    let p = provider();
    let e = p.launcher().pause("sb-000000000000").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    let e = p.launcher().resume("sb-000000000000").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    let e = p.launcher().pause("../etc").await.unwrap_err();
    assert!(e.to_string().contains("is not valid"), "{e}");
}

/// The lifetime does not run while paused, as on native: past its planned end a paused
/// sandbox is still there (PID 1's watchdog and the host watcher both add the pause),
/// runs on after resume, and ends once the rest of its lifetime has run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sandbox_lifetime_does_not_run() {
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    s.timeout_secs = 3;
    let sb = sandbox(s).await;
    let id = sb.id().to_string();
    let planned = sb.info().expires_at_ms;
    sb.pause().await.expect("pause");
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let info = provider().inspect(&id).await.expect("alive while paused");
    assert_eq!(info.state, RunState::Paused);
    assert!(
        info.expires_at_ms >= planned + 3500,
        "the deadline did not move: {} vs {planned}",
        info.expires_at_ms
    );
    assert!(container_exists(&id), "the paused container was removed");
    sb.resume().await.expect("resume");
    let out = sh(&sb, "echo alive", 10_000).await;
    assert_eq!(text(&out.stdout), "alive\n", "{out:?}");
    // The rest of its lifetime then runs out, and the watcher removes it.
    let mut gone = false;
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !container_exists(&id) {
            gone = true;
            break;
        }
    }
    assert!(gone, "sandbox {id} outlived its lifetime after resume");
}
