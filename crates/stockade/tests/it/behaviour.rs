//! What the sandbox looks like from inside, and exec semantics.

use std::time::{Duration, Instant};

use stockade::{ExecRequest, SandboxSpec};
use tokio::sync::mpsc;

use crate::*;

#[tokio::test]
async fn defaults_inside_the_sandbox() {
    if !require_root("defaults_inside_the_sandbox") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(&sb, "id -u; id -g; hostname; pwd; cat /proc/self/status | grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):'; df -k /tmp | tail -1; cat /proc/1/comm", 5_000).await;
    let s = text(&out.stdout);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        &lines[..4],
        ["1000", "1000", "sandbox", "/tmp"],
        "{s} {}",
        text(&out.stderr)
    );
    assert!(s.contains("CapEff:\t0000000000000000"), "{s}");
    assert!(s.contains("CapBnd:\t0000000000000000"), "{s}");
    assert!(s.contains("NoNewPrivs:\t1"), "{s}");
    assert!(s.contains("Seccomp:\t2"), "{s}");
    assert!(s.contains(" 65536 "), "/tmp is 64 MiB: {s}");
    let info = sb.info();
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade::WallKind::Seccomp
                && w.enforced
                && w.detail.starts_with("allowlist")),
        "{:?}",
        info.applied
    );
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade::WallKind::Limits && w.detail.contains("memory 512MiB")),
        "{:?}",
        info.applied
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn python_runs_and_exit_codes_pass_through() {
    if !require_root("python_runs_and_exit_codes_pass_through") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let out = py(&sb, "print(sum(range(10)))", 10_000).await;
    assert_eq!(
        (out.exit_code, text(&out.stdout)),
        (0, "45\n".into()),
        "{}",
        text(&out.stderr)
    );
    let out = py(
        &sb,
        "import sys; sys.stderr.write('bad\\n'); sys.exit(3)",
        10_000,
    )
    .await;
    assert_eq!((out.exit_code, text(&out.stderr)), (3, "bad\n".into()));
    let mut req = ExecRequest::new(["/bin/cat"]);
    req.stdin = b"from stdin".to_vec();
    assert_eq!(sb.exec(req).await.unwrap().stdout, b"from stdin");
    let mut req = ExecRequest::new(["sh", "-c", "echo $GREETING; pwd"]);
    req.env.insert("GREETING".into(), "hi".into());
    req.cwd = Some("/usr".into());
    assert_eq!(text(&sb.exec(req).await.unwrap().stdout), "hi\n/usr\n");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn output_streams_live() {
    if !require_root("output_streams_live") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let (tx, mut rx) = mpsc::channel(16);
    let start = Instant::now();
    let task = tokio::spawn({
        let sb = sb.clone();
        async move {
            sb.exec_streaming(
                ExecRequest::new(["sh", "-c", "echo first; sleep 2; echo second"]),
                tx,
            )
            .await
        }
    });
    let first = rx.recv().await.expect("a chunk");
    assert_eq!(first.data, b"first\n");
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "first chunk came after {:?}",
        start.elapsed()
    );
    let out = task.await.unwrap().unwrap();
    assert_eq!(out.stdout, b"first\nsecond\n");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn writable_root_is_discarded_at_destroy() {
    if !require_root("writable_root_is_discarded_at_destroy") {
        return;
    }
    // Root inside (still without capabilities) so the root-owned /usr is writable.
    let spec = SandboxSpec {
        writable: true,
        user: stockade::spec::User { uid: 0, gid: 0 },
        ..Default::default()
    };
    let sb = sandbox(spec).await;
    if stockade_testkit::rootless() {
        // Rootless, the host's directories stay the host root's (no id inside maps to
        // it): the overlay takes new paths, not writes into /usr/bin.
        let out = sh(&sb, "echo x > /usr/bin/stockade-overlay-probe || echo DENIED; echo y > /newfile && mkdir -p /usr/local2 && cat /newfile", 5_000).await;
        assert_eq!(text(&out.stdout), "DENIED\ny\n", "{}", text(&out.stderr));
        destroy_clean(sb).await;
        return;
    }
    let out = sh(&sb, "echo x > /usr/bin/stockade-overlay-probe && echo y > /newfile && cat /usr/bin/stockade-overlay-probe /newfile", 5_000).await;
    assert_eq!(text(&out.stdout), "x\ny\n", "{}", text(&out.stderr));
    assert!(
        !std::path::Path::new("/usr/bin/stockade-overlay-probe").exists(),
        "the overlay wrote through to the host"
    );
    let out = sh(&sb, "ls /.stockade", 5_000).await;
    assert!(
        out.stdout.is_empty(),
        "overlay scratch is visible: {}",
        text(&out.stdout)
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn invalid_specs_are_refused_with_every_problem() {
    let mut spec = SandboxSpec::default();
    spec.limits.pids = 0;
    spec.limits.memory_bytes = 1;
    spec.timeout_secs = 0;
    let err = stockade::Sandbox::create(provider(), spec, Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), stockade::ErrorCode::InvalidSpec);
    let msg = err.to_string();
    for field in ["limits.pids", "limits.memory_bytes", "timeout_secs"] {
        assert!(msg.contains(field), "{field} missing from: {msg}");
    }
}

/// One exec stops what an earlier one started (`kill $(cat server.pid)`, as agents
/// do), while PID 1 (the agent) stays out of its reach.
#[tokio::test]
async fn a_later_exec_signals_what_an_earlier_one_started() {
    if !require_root("a_later_exec_signals_what_an_earlier_one_started") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let mut bg = ExecRequest::new(["sh", "-c", "sleep 60 & echo $! > /tmp/pid"]);
    bg.background = true;
    let o = sb.exec(bg).await.unwrap();
    assert_eq!(o.exit_code, 0, "{o:?}");
    let out = sh(
        &sb,
        "p=$(cat /tmp/pid); kill -0 $p && echo reach; kill -TERM $p && echo killed; \
         sleep 0.2; kill -0 $p 2>/dev/null || echo gone; kill -0 1 2>/dev/null && echo AGENT",
        10_000,
    )
    .await;
    let o = text(&out.stdout);
    assert!(
        o.contains("reach") && o.contains("killed") && o.contains("gone"),
        "an exec could not signal its sandbox's other process: {o} {}",
        text(&out.stderr)
    );
    assert!(!o.contains("AGENT"), "the code can signal the agent: {o}");
    destroy_clean(sb).await;
}

/// A caller that goes away in the middle of an exec with stdin (its future dropped,
/// as when a daemon's client disconnects) takes the exec with it.
#[tokio::test]
async fn an_exec_whose_caller_went_away_is_killed() {
    if !require_root("an_exec_whose_caller_went_away_is_killed") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let (in_tx, in_rx) = mpsc::channel(4);
    let mut req = ExecRequest::new(["sh", "-c", "echo $$ > /tmp/pid; exec sleep 60"]);
    req.timeout_ms = Some(120_000);
    let p = provider();
    let exec = p.exec(
        sb.id(),
        stockade::CheckedRequest::new(req).unwrap(),
        stockade::ExecIo {
            output: None,
            input: Some(in_rx),
        },
    );
    // The caller gives up after a second, stdin still open.
    assert!(
        tokio::time::timeout(Duration::from_secs(2), exec)
            .await
            .is_err(),
        "the sleep ended by itself"
    );
    let mut gone = false;
    for _ in 0..50 {
        let o = sb
            .exec(ExecRequest::new([
                "sh",
                "-c",
                // (/proc, not kill -0: another exec's processes may be out of its reach.)
                "p=$(cat /tmp/pid); [ -n \"$p\" ] || { echo no pid; exit; }; grep -qv '^[0-9]* ([^)]*) Z' /proc/$p/stat 2>/dev/null \
                 && echo alive || echo gone",
            ]))
            .await
            .unwrap();
        let said = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert_ne!(said, "no pid", "the exec never started");
        if said == "gone" {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(in_tx);
    assert!(gone, "the exec outlived its caller by 5 s");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_kill_sent_before_the_exec_starts_still_kills_it() {
    if !require_root("a_kill_sent_before_the_exec_starts_still_kills_it") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    // The kill is queued before the exec is asked for, so it reaches the agent while
    // the exec's shim is still starting; it must not be lost on the way.
    for _ in 0..5 {
        let (in_tx, in_rx) = mpsc::channel(4);
        in_tx.send(stockade::ExecInput::Kill).await.unwrap();
        let mut req = ExecRequest::new(["sleep", "30"]);
        req.timeout_ms = Some(60_000);
        let o = provider()
            .exec(
                sb.id(),
                stockade::CheckedRequest::new(req).unwrap(),
                stockade::ExecIo {
                    output: None,
                    input: Some(in_rx),
                },
            )
            .await
            .unwrap();
        drop(in_tx);
        // A sleep that ran out would exit 0; a lost kill shows as that.
        assert_eq!((o.signal, o.timed_out), (Some(9), false), "{o:?}");
    }
    destroy_clean(sb).await;
}
