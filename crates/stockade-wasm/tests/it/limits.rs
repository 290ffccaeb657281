//! Caps: deadlines, memory, output, /tmp size, concurrent execs, fuel.

use std::time::{Duration, Instant};

use stockade_core::{ErrorCode, ExecRequest, Provider};

use crate::support::{create, exec_req, guest, provider, provider_with, run, spec, text};

#[tokio::test]
async fn an_infinite_loop_stops_at_the_deadline() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    let started = Instant::now();
    let req = ExecRequest {
        timeout_ms: Some(300),
        ..ExecRequest::new(["g", "spin"])
    };
    let out = exec_req(&p, &id, req).await.unwrap();
    let took = started.elapsed();
    assert!(out.timed_out, "{out:?}");
    assert_eq!((out.exit_code, out.signal), (137, Some(9)));
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // A guest blocked in the host (a long sleep) is stopped too.
    let started = Instant::now();
    let req = ExecRequest {
        timeout_ms: Some(200),
        ..ExecRequest::new(["g", "sleep", "30000"])
    };
    let out = exec_req(&p, &id, req).await.unwrap();
    assert!(out.timed_out);
    assert!(started.elapsed() < Duration::from_secs(3));

    // The sandbox still works afterwards.
    assert_eq!(run(&p, &id, &["g", "hello"]).await.exit_code, 0);
}

#[tokio::test]
async fn a_memory_bomb_fails_inside_the_guest() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let mut s = spec(&g);
    s.limits.memory_bytes = 64 << 20;
    let id = create(&p, s).await;
    let out = run(&p, &id, &["g", "bomb"]).await;
    assert_ne!(out.exit_code, 0);
    assert!(out.oom_killed, "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("memory allocation"), "{stderr}");
    let held = text(&out.stdout).lines().count();
    assert!(
        (1..=4).contains(&held),
        "held {held} x 16 MiB under a 64 MiB cap"
    );
    // Its memory went back to the sandbox: the next exec gets 32 MiB.
    let out = run(&p, &id, &["g", "alloc", "32"]).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert!(!out.oom_killed);
}

#[tokio::test]
async fn hundred_megabytes_of_output_are_capped_and_flagged() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    let total: u64 = 100 << 20;
    let n = total.to_string();
    let out = run(&p, &id, &["g", "flood", &n]).await;
    assert_eq!(out.exit_code, 0);
    assert!(out.truncated());
    assert_eq!(out.stdout.len(), 1 << 20);
    assert_eq!(out.stdout_dropped, total + 4 - (1 << 20));
    assert!(out.stdout.starts_with(b"yyyy"));
    assert!(out.stdout.ends_with(b"yyyyEND\n"), "the tail is kept");

    let req = ExecRequest {
        output_limit_bytes: 1000,
        ..ExecRequest::new(["g", "flood-err", "5000"])
    };
    let out = exec_req(&p, &id, req).await.unwrap();
    assert_eq!(out.stderr.len(), 1000);
    assert_eq!(out.stderr_dropped, 5004 - 1000);
    assert_eq!(out.stdout_dropped, 0);
}

#[tokio::test]
async fn tmp_is_capped() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let mut s = spec(&g);
    s.limits.tmp_bytes = 4 << 20;
    let id = create(&p, s).await;
    let out = run(
        &p,
        &id,
        &["g", "fill", "/tmp/big", &(100u64 << 20).to_string()],
    )
    .await;
    assert_eq!(out.exit_code, 1, "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let (used, cap) = p.tmp_usage(&id).unwrap();
    assert_eq!(cap, 4 << 20);
    assert!(used <= cap, "used {used} > cap {cap}");
    assert!(used >= 2 << 20, "it did write until nearly full: {used}");

    // The host-side API counts against the same cap.
    let err = p
        .write_file(&id, "/tmp/more", &vec![0u8; 3 << 20])
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    // Space comes back when files go.
    p.remove(&id, "/tmp/big", false).await.unwrap();
    let out = run(
        &p,
        &id,
        &["g", "fill", "/tmp/again", &(2u64 << 20).to_string()],
    )
    .await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
}

/// What `g touch-many` says it made.
fn made(out: &stockade_core::ExecOutcome) -> u64 {
    let stdout = text(&out.stdout);
    stdout
        .trim()
        .strip_prefix("made ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"))
}

#[tokio::test]
async fn tmp_caps_the_number_of_entries() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    // Empty files take no disk blocks: only a count can stop them.
    let out = run(&p, &id, &["g", "touch-many", "/tmp/many", "20000"]).await;
    assert_eq!(out.exit_code, 1, "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(
        made(&out),
        9_999,
        "the directory and 9999 files make the default 10000 entries"
    );

    // The sandbox keeps working; the host-side API meets the same cap.
    assert_eq!(run(&p, &id, &["g", "hello"]).await.exit_code, 0);
    let out = run(&p, &id, &["g", "write", "/tmp/many/f1", "rewritten"]).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let err = p.write_file(&id, "/tmp/one-more", b"x").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    assert!(err.to_string().contains("10000 entries"), "{err}");
    // Entries come back when files go.
    p.remove(&id, "/tmp/many", true).await.unwrap();
    let out = run(&p, &id, &["g", "touch-many", "/tmp/again", "100"]).await;
    assert_eq!(
        (out.exit_code, made(&out)),
        (0, 100),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn the_entry_cap_is_configurable() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider_with(|c| c.tmp_max_entries = 50);
    let id = create(&p, spec(&g)).await;
    let out = run(&p, &id, &["g", "touch-many", "/tmp/d", "500"]).await;
    assert_eq!(
        (out.exit_code, made(&out)),
        (1, 49),
        "{}",
        text(&out.stderr)
    );
    let info = p.inspect(&id).await.unwrap();
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade_core::WallKind::Tmp && w.detail.contains("50 entries")),
        "{:?}",
        info.applied
    );
}

#[tokio::test]
async fn concurrent_execs_are_capped_by_pids() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let mut s = spec(&g);
    s.limits.pids = 1;
    let id = create(&p, s).await;
    let slow = {
        let (p, id) = (p.clone(), id.clone());
        tokio::spawn(async move { run(&p, &id, &["g", "sleep", "1500"]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = exec_req(&p, &id, ExecRequest::new(["g", "hello"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    assert_eq!(slow.await.unwrap().exit_code, 0);
    assert_eq!(run(&p, &id, &["g", "hello"]).await.exit_code, 0);
}

#[tokio::test]
async fn fuel_ends_a_runaway_exec() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider_with(|c| c.fuel_per_exec = Some(50_000_000));
    let id = create(&p, spec(&g)).await;
    assert_eq!(run(&p, &id, &["g", "hello"]).await.exit_code, 0);
    let out = run(&p, &id, &["g", "spin"]).await;
    assert!(out.timed_out, "{out:?}");
    assert!(text(&out.stderr).contains("fuel"), "{}", text(&out.stderr));
}
