//! Pause and resume, and fork refused: on the native provider (the cgroup freezer)
//! and on gvisor (`STOCKADE_TEST_PROVIDER=gvisor`: `runsc pause`). A pause that does
//! not really stop the code fails these tests.

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

/// Whether the sandbox is stopped as its provider's mechanism says: native's cgroup
/// freezer is frozen, runsc says gvisor's is `paused`.
fn stopped(id: &str) -> bool {
    if on_gvisor() {
        let out = std::process::Command::new(stockade_testkit::runsc().expect("runsc"))
            .arg(format!(
                "--root={}/runsc",
                stockade::gvisor::DEFAULT_STATE_ROOT
            ))
            .args(["state", id])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runsc state");
        v["status"] == "paused"
    } else {
        let cgroups: Vec<PathBuf> =
            serde_json::from_value(state_of(id)["cgroups"].clone()).unwrap();
        stockade::linux::freezer::Freezer::of(&cgroups)
            .expect("a freezer")
            .is_frozen()
    }
}

/// The sandbox's host processes (its cgroup's): native's PID 1 and the code; gvisor's
/// sentry, gofer and stubs.
fn host_pids(id: &str) -> Vec<u32> {
    let cgroups: Vec<PathBuf> = if on_gvisor() {
        stockade::gvisor::cgroup::dirs("stockade", id)
    } else {
        serde_json::from_value(state_of(id)["cgroups"].clone()).unwrap()
    };
    let mut pids: Vec<u32> = cgroups
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The counter's file, read with an exec (gVisor's `/tmp` is inside its own kernel,
/// out of the host's sight).
async fn exec_read(sb: &stockade::Sandbox) -> Option<(u64, f64)> {
    let out = sh(sb, "cat /tmp/c 2>/dev/null", 10_000).await;
    let t = text(&out.stdout);
    let mut it = t.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
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
    let gvisor = on_gvisor();
    // On gvisor an exec's background processes do not outlive it (PID 1 sweeps the
    // orphans gVisor hands it): the counter runs as an exec in flight instead, which
    // ends with the sandbox.
    let _in_flight = if gvisor {
        let sb = sb.clone();
        Some(tokio::spawn(async move {
            let mut req = ExecRequest::new(["python3", "/tmp/counter.py"]);
            req.timeout_ms = Some(110_000);
            sb.exec(req).await
        }))
    } else {
        let mut req =
            ExecRequest::new(["/bin/sh", "-c", "python3 /tmp/counter.py >/dev/null 2>&1 &"]);
        req.background = true;
        req.timeout_ms = Some(110_000);
        assert_eq!(sb.exec(req).await.unwrap().exit_code, 0);
        None
    };
    let init_pid = if gvisor {
        0
    } else {
        state_of(&id)["init_pid"].as_u64().unwrap() as u32
    };
    let mut tries = 0;
    loop {
        let now = if gvisor {
            exec_read(&sb).await
        } else {
            parse_opt(&format!("/proc/{init_pid}/root/tmp/c"))
        };
        if now.is_some_and(|(n, _)| n >= 5) {
            break;
        }
        tries += 1;
        if tries == if gvisor { 150 } else { 500 } {
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
    // Stopped: its freezer (runsc) says so, and the counter does not move (on
    // gvisor, which keeps /tmp in its own kernel, the gap the counter saw after
    // resume shows it).
    assert!(stopped(&id), "sandbox {id} is not stopped");
    let b = if gvisor {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        0
    } else {
        let (a, _) = parse(&host_read(init_pid));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (b, _) = parse(&host_read(init_pid));
        assert_eq!(a, b, "the counter advanced while paused: {a} -> {b}");
        b
    };

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
    // Fork is refused with the reason, paused or not.
    let e = sb
        .fork(1, stockade::CreateOptions::default())
        .await
        .unwrap_err();
    let name = provider().name();
    assert_eq!(e.code(), stockade::ErrorCode::Unavailable, "{e}");
    assert!(
        e.to_string()
            .contains(&format!("fork on the {name} provider"))
            && (e.to_string().contains("cannot copy") || e.to_string().contains("copying")),
        "{e}"
    );

    // Resume: the same process goes on, and it saw the pause as a gap.
    sb.resume().await.expect("resume");
    assert!(!stopped(&id));
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
    let pids = host_pids(&id);
    assert!(pids.len() >= 2, "the sandbox's processes: {pids:?}");
    sb.pause().await.expect("pause again");
    destroy_clean(sb).await;
    for pid in pids {
        // Dead: gone, or a zombie waiting for its parent (gVisor's sentry and gofer
        // are orphans of `runsc run --detach`, reaped by the host's init).
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        assert!(
            state.is_empty() || zombie,
            "process {pid} of the paused sandbox outlived its destroy: {state}"
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
    // The end of a lifetime is the monitor's work on native (the watcher's on gvisor): its
    // removal finishes moments after the sandbox is gone, and on a loaded host (the suites
    // side by side) a moment can be seconds. Only a trace that stays fails.
    if !on_microvm() {
        let dir = if on_gvisor() {
            std::path::Path::new(stockade::gvisor::DEFAULT_STATE_ROOT).join(&id)
        } else {
            state_root().join(&id)
        };
        for _ in 0..200 {
            if !dir.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
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
            m.contains(&format!("on the {} provider", p.name()))
                && m.contains("use the microvm provider"),
            "{m}"
        );
    }
    // A bad name is refused as such before any provider is asked.
    let e = sb.snapshot("../base").await.unwrap_err();
    assert!(e.to_string().contains("is not valid"), "{e}");
    destroy_clean(sb).await;
}
