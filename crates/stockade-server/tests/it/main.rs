//! `stockaded` as clients see it: real daemon processes, real native sandboxes.
//! Needs root; fails in CI without it, skips loudly elsewhere.

mod faults;
mod harness;
mod images;
mod listeners;
mod made;
mod pause;
mod peers;
mod race;
mod snapshots;
mod tenants;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{TestDaemon, eventually, free_port, require_root};
use stockade::{
    ErrorCode, ExecInput, ExecRequest, FileOp, FileResult, Provider, Sandbox, SandboxSpec, Stream,
};
use tokio::sync::mpsc;

fn spec(timeout_secs: u64) -> SandboxSpec {
    SandboxSpec {
        timeout_secs,
        ..SandboxSpec::default()
    }
}

fn sh(script: &str) -> ExecRequest {
    ExecRequest::new(["/bin/sh", "-c", script])
}

async fn create(c: &stockade_client::RemoteProvider, s: SandboxSpec) -> Sandbox {
    Sandbox::create(Arc::new(c.clone()), s, Default::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_works_over_the_unix_socket() {
    if !require_root("the daemon's tests") {
        return;
    }
    let port = free_port();
    let d = TestDaemon::start(&[&format!("--metrics-listen=127.0.0.1:{port}")]);
    let mode = std::fs::metadata(TestDaemon::socket(&d.dir))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the socket is for its owner only");
    let c = d.client(None).await;

    let h = c.health().await.unwrap();
    assert_eq!(h.tenant, "local");
    assert!(h.providers.contains(&"native".to_string()));

    let sb = create(&c, spec(120)).await;
    assert!(sb.id().starts_with("sb-"));

    // Unary exec.
    let o = sb.exec(sh("echo out; echo err >&2; exit 3")).await.unwrap();
    assert_eq!(
        (o.exit_code, &o.stdout[..], &o.stderr[..]),
        (3, &b"out\n"[..], &b"err\n"[..])
    );

    // Streamed exec: chunks of both streams, then the outcome.
    let (tx, mut rx) = mpsc::channel(16);
    let o = sb
        .exec_streaming(sh("echo first; echo second >&2"), tx)
        .await
        .unwrap();
    assert_eq!(o.exit_code, 0);
    let mut chunks = Vec::new();
    while let Ok(c) = rx.try_recv() {
        chunks.push((c.stream, c.data));
    }
    assert!(
        chunks.contains(&(Stream::Stdout, b"first\n".to_vec())),
        "{chunks:?}"
    );
    assert!(
        chunks.contains(&(Stream::Stderr, b"second\n".to_vec())),
        "{chunks:?}"
    );

    // Live: the first chunk arrives while the exec still waits for its stdin.
    let p: Arc<dyn Provider> = Arc::new(c.clone());
    let (tx, mut rx) = mpsc::channel(16);
    let (in_tx, in_rx) = mpsc::channel(4);
    let mut req = sh("echo first; read x; echo second $x >&2");
    req.keep_stdin_open = true;
    let (id, p2) = (sb.id().to_string(), p.clone());
    let run = tokio::spawn(async move {
        p2.exec(
            &id,
            stockade::CheckedRequest::new(req).unwrap(),
            stockade::ExecIo {
                output: Some(tx),
                input: Some(in_rx),
            },
        )
        .await
    });
    let first = rx.recv().await.unwrap();
    assert_eq!(
        (first.stream, &first.data[..]),
        (Stream::Stdout, &b"first\n"[..])
    );
    assert!(!run.is_finished(), "the exec cannot end before its stdin");
    in_tx
        .send(ExecInput::Stdin(b"go\n".to_vec()))
        .await
        .unwrap();
    let second = rx.recv().await.unwrap();
    assert_eq!(
        (second.stream, &second.data[..]),
        (Stream::Stderr, &b"second go\n"[..])
    );
    assert_eq!(run.await.unwrap().unwrap().exit_code, 0);

    // Stdin to a running exec, then its end.
    let (in_tx, in_rx) = mpsc::channel(4);
    let mut req = ExecRequest::new(["/bin/cat"]);
    req.keep_stdin_open = true;
    let (id, p2) = (sb.id().to_string(), p.clone());
    let run = tokio::spawn(async move {
        p2.exec(
            &id,
            stockade::CheckedRequest::new(req).unwrap(),
            stockade::ExecIo {
                output: None,
                input: Some(in_rx),
            },
        )
        .await
    });
    in_tx
        .send(ExecInput::Stdin(b"hello ".to_vec()))
        .await
        .unwrap();
    in_tx
        .send(ExecInput::Stdin(b"daemon".to_vec()))
        .await
        .unwrap();
    in_tx.send(ExecInput::CloseStdin).await.unwrap();
    let o = run.await.unwrap().unwrap();
    assert_eq!(o.stdout, b"hello daemon");

    // Cancel: the exec ends at once, killed.
    let (in_tx, in_rx) = mpsc::channel(4);
    let (id, p2) = (sb.id().to_string(), p.clone());
    let run = tokio::spawn(async move {
        p2.exec(
            &id,
            stockade::CheckedRequest::new(sh("sleep 60")).unwrap(),
            stockade::ExecIo {
                output: None,
                input: Some(in_rx),
            },
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    in_tx.send(ExecInput::Kill).await.unwrap();
    let o = run.await.unwrap().unwrap();
    // A sleep that ended by itself would exit 0; this one was killed.
    assert_eq!(o.signal, Some(9), "{o:?}");

    // File operations.
    sb.write("/tmp/d/a.txt", "alpha beta\n").await.unwrap();
    assert_eq!(sb.read("/tmp/d/a.txt").await.unwrap(), b"alpha beta\n");
    assert_eq!(
        sb.edit("/tmp/d/a.txt", "beta", "gamma", false)
            .await
            .unwrap(),
        1
    );
    assert_eq!(sb.ls("/tmp/d").await.unwrap()[0].name, "a.txt");
    assert_eq!(sb.stat("/tmp/d/a.txt").await.unwrap().size, 12);
    assert_eq!(sb.glob("*.txt", "/tmp/d").await.unwrap(), vec!["a.txt"]);
    let m = sb.grep("gam+a", "/tmp/d", None, 0).await.unwrap();
    assert_eq!((m[0].line_number, m[0].line.as_str()), (1, "alpha gamma"));
    sb.mkdir("/tmp/e/f").await.unwrap();
    let tar = sb.download("/tmp/d").await.unwrap();
    sb.upload("/tmp/e/f", tar).await.unwrap();
    assert_eq!(sb.read("/tmp/e/f/a.txt").await.unwrap(), b"alpha gamma\n");
    sb.rm("/tmp/e").await.unwrap();
    let e = sb.stat("/tmp/e").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    match c
        .file(
            sb.id(),
            FileOp::Read {
                path: "/tmp/d/a.txt".into(),
                offset: 6,
                limit: 5,
            },
        )
        .await
        .unwrap()
    {
        FileResult::Data { data, size, eof } => {
            assert_eq!((&data[..], size, eof), (&b"gamma"[..], 12, false));
        }
        other => panic!("{other:?}"),
    }

    // List, inspect.
    let list = c.list().await.unwrap();
    assert_eq!(
        list.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        vec![sb.id()]
    );
    let info = c.inspect(sb.id()).await.unwrap();
    assert_eq!(info.spec["timeout_secs"], 120);
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade::WallKind::Seccomp && w.enforced && !w.detail.is_empty()),
        "{:?}",
        info.applied
    );

    // Sessions.
    let s1 = c.session_get("proj").await.unwrap();
    let s1b = c.session_get("proj").await.unwrap();
    assert_eq!(s1.id, s1b.id, "same session, same sandbox");
    let o = c
        .exec(
            &s1.id,
            stockade::CheckedRequest::new(sh("echo kept > /work/f; pwd")).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap();
    assert_eq!(o.stdout, b"/work\n");
    let sessions = c.session_list().await.unwrap();
    assert_eq!(sessions[0].sandbox_id.as_deref(), Some(s1.id.as_str()));
    c.session_release("proj").await.unwrap();
    assert_eq!(
        c.inspect(&s1.id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    let s2 = c.session_get("proj").await.unwrap();
    assert_ne!(s2.id, s1.id);
    assert_eq!(
        c.exec(
            &s2.id,
            stockade::CheckedRequest::new(sh("cat /work/f")).unwrap(),
            stockade::ExecIo::none()
        )
        .await
        .unwrap()
        .stdout,
        b"kept\n"
    );
    c.session_delete("proj").await.unwrap();
    assert!(c.session_list().await.unwrap().is_empty());

    // Errors keep their code and message.
    let e = c
        .exec(
            "sb-000000000000",
            stockade::CheckedRequest::new(sh("true")).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert_eq!(e.to_string(), "sandbox sb-000000000000 not found");
    let mut bad = spec(10);
    bad.limits.pids = 0;
    let e = Sandbox::create(Arc::new(c.clone()), bad, Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSpec);
    assert!(e.to_string().contains("pids"), "{e}");

    // Metrics.
    let text = http_get(port, "/metrics").await;
    assert!(text.contains("stockade_sandboxes_live 1\n"), "{text}");
    assert!(
        text.contains("stockade_creates_total{result=\"ok\"}"),
        "{text}"
    );
    assert!(
        text.contains("stockade_exec_duration_seconds_count"),
        "{text}"
    );
    assert!(http_get(port, "/nope").await.starts_with("HTTP/1.1 404"));

    // Gc and destroy.
    c.gc().await.unwrap();
    sb.destroy().await.unwrap();
    assert_eq!(
        c.inspect(sb.id()).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    d.assert_none_left().await;
}

async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

const TOKEN_A: &str = "tenant-a-secret-0123456789";
const TOKEN_B: &str = "tenant-b-secret-0123456789";

fn token_file(dir: &tempfile::TempDir) -> String {
    let f = dir.path().join("tokens");
    std::fs::write(&f, format!("{TOKEN_A}\n{TOKEN_B}\n")).unwrap();
    f.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_needs_a_token_and_tenants_see_only_their_own() {
    if !require_root("the daemon's tests") {
        return;
    }
    let out = TestDaemon::run_to_exit(&["--listen=tcp:127.0.0.1:1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs --token-file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(&tmp);
    let port = free_port();
    let d = TestDaemon::start(&[
        &format!("--listen=tcp:127.0.0.1:{port}"),
        &format!("--token-file={tokens}"),
    ]);
    for token in [None, Some("wrong-token-0123456789")] {
        let c = d.client(token).await;
        let e = c.health().await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::PolicyDenied, "{token:?}: {e}");
        assert!(e.to_string().contains("token"), "{e}");
        let e = c.list().await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::PolicyDenied);
    }
    let a = d.client(Some(TOKEN_A)).await;
    let b = d.client(Some(TOKEN_B)).await;
    let (ta, tb) = (
        a.health().await.unwrap().tenant,
        b.health().await.unwrap().tenant,
    );
    assert_ne!(ta, tb);

    let sa = create(&a, spec(60)).await;
    assert_eq!(
        a.exec(
            sa.id(),
            stockade::CheckedRequest::new(sh("echo mine")).unwrap(),
            stockade::ExecIo::none()
        )
        .await
        .unwrap()
        .stdout,
        b"mine\n"
    );
    // B cannot see, run in, read, or destroy A's sandbox: it does not exist for B.
    for e in [
        b.exec(
            sa.id(),
            stockade::CheckedRequest::new(sh("true")).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap_err(),
        b.inspect(sa.id()).await.unwrap_err(),
        b.file(sa.id(), FileOp::Ls { path: "/".into() })
            .await
            .unwrap_err(),
        // Nor reach a port inside it (ConnectPort).
        match b.connect_port(sa.id(), 8000).await {
            Ok(_) => panic!("tenant B reached a port of tenant A's sandbox"),
            Err(e) => e,
        },
    ] {
        assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    }
    // A's own: a port nothing listens on is refused by name, not as missing.
    match a.connect_port(sa.id(), 8000).await {
        Ok(_) => panic!("a connection to a port nothing listens on"),
        Err(e) => {
            assert_ne!(e.code(), ErrorCode::NotFound, "{e}");
            assert!(e.to_string().contains("8000"), "{e}");
        }
    }
    // B's destroy of it is a no-op, as of any id that does not exist (destroy is
    // idempotent): A's sandbox lives on.
    b.destroy(sa.id()).await.unwrap();
    assert!(b.list().await.unwrap().is_empty());
    assert_eq!(a.list().await.unwrap().len(), 1);
    a.inspect(sa.id()).await.unwrap();

    // Host mounts are refused when there are tenants.
    let mut m = spec(10);
    m.mounts
        .push(stockade::spec::Mount::parse("/etc:/x").unwrap());
    let e = Sandbox::create(Arc::new(b.clone()), m, Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::PolicyDenied, "{e}");

    // Another tenant's streamed exec cannot be fed or cancelled.
    let (in_tx, in_rx) = mpsc::channel(1);
    let mut req = ExecRequest::new(["/bin/cat"]);
    req.keep_stdin_open = true;
    let (a2, id) = (a.clone(), sa.id().to_string());
    let run = tokio::spawn(async move {
        a2.exec(
            &id,
            stockade::CheckedRequest::new(req).unwrap(),
            stockade::ExecIo {
                output: None,
                input: Some(in_rx),
            },
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Exec ids are not guessable and not shared; a made-up one is not found.
    assert_eq!(
        b.cancel_exec("ex-0000000000000000")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::NotFound
    );
    in_tx.send(ExecInput::CloseStdin).await.unwrap();
    assert_eq!(run.await.unwrap().unwrap().exit_code, 0);
    sa.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_refuse_with_limit_exceeded() {
    if !require_root("the daemon's tests") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(&tmp);
    let d = TestDaemon::start(&[
        &format!("--token-file={tokens}"),
        "--max-sandboxes-per-tenant=2",
        "--max-sandboxes=3",
        "--max-pool-per-tenant=2",
    ]);
    let a = d.client(Some(TOKEN_A)).await;
    let b = d.client(Some(TOKEN_B)).await;
    let a1 = create(&a, spec(60)).await;
    let _a2 = create(&a, spec(60)).await;
    let e = Sandbox::create(Arc::new(a.clone()), spec(60), Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitExceeded);
    assert!(e.to_string().contains("per tenant"), "{e}");
    let _b1 = create(&b, spec(60)).await;
    let e = Sandbox::create(Arc::new(b.clone()), spec(60), Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitExceeded);
    assert!(e.to_string().contains("in all"), "global cap: {e}");
    a1.destroy().await.unwrap();
    let b2 = create(&b, spec(60)).await;
    let e = b.pool_warm(&spec(60), 2, 3).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitExceeded);
    assert!(e.to_string().contains("pooled sandboxes per tenant"), "{e}");
    // Without --max the max is twice the size: the refusal says so, and what to do.
    let e = b.pool_warm(&spec(60), 2, 0).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitExceeded);
    assert!(
        e.to_string()
            .contains("up to 4 (twice its size 2: give a smaller --max)"),
        "{e}"
    );
    let e = b.pool_warm(&spec(60), 0, 0).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSpec);
    b2.destroy().await.unwrap();
}

async fn idle_of(c: &stockade_client::RemoteProvider) -> u32 {
    c.pool_list().await.unwrap().iter().map(|p| p.idle).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_pools_hand_over_fresh_sandboxes_once_with_late_binding() {
    if !require_root("the daemon's tests") {
        return;
    }
    let d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    let template = spec(3);
    let p = c.pool_warm(&template, 2, 3).await.unwrap();
    assert_eq!((p.min_idle, p.max), (2, 3));
    eventually(30, "two warm sandboxes", || async {
        idle_of(&c).await == 2
    })
    .await;

    // Late binding: env and workdir of the caller's spec.
    let mut mine = template.clone();
    mine.env.insert("GREETING".into(), "hi".into());
    mine.workdir = Some("/tmp/w".into());
    let before = now_ms();
    let (info, pooled) = c.create_spec(&mine, None, false).await.unwrap();
    let after = now_ms();
    assert!(pooled, "a pool of this template exists and is warm");
    // Warmed in the pool: its exec zygote already runs, so the first exec is served
    // by it like any later one.
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.state_root().join(&info.id).join("state.json")).unwrap(),
    )
    .unwrap();
    let init = state["init_pid"].as_u64().unwrap().to_string();
    let zygote = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split(' ').nth(1))
            .unwrap_or_default();
        comm.trim() == "stockade-zygote" && ppid == init
    });
    assert!(
        zygote,
        "a pooled sandbox has its exec zygote before its first exec"
    );
    let o = c
        .exec(
            &info.id,
            stockade::CheckedRequest::new(sh("echo $GREETING; pwd")).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap();
    assert_eq!(
        o.stdout,
        b"hi\n/tmp/w\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    c.file(
        &info.id,
        FileOp::Write {
            path: "rel.txt".into(),
            data: b"x".to_vec(),
            mode: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        c.exec(
            &info.id,
            stockade::CheckedRequest::new(sh("cat /tmp/w/rel.txt")).unwrap(),
            stockade::ExecIo::none()
        )
        .await
        .unwrap()
        .stdout,
        b"x"
    );
    let shown = c.inspect(&info.id).await.unwrap();
    assert_eq!(
        shown.spec["env"]["GREETING"], "hi",
        "inspect shows the caller's spec"
    );
    // The caller's lifetime runs from acquisition (3 s), not from the pool's creation.
    assert!(
        (before + 3000..=after + 3000).contains(&shown.expires_at_ms),
        "expires at {} for an acquisition between {before} and {after}",
        shown.expires_at_ms
    );

    // The pool refills, and the handed-out sandbox never comes back.
    eventually(30, "the pool refilled", || async { idle_of(&c).await == 2 }).await;
    let p = &c.pool_list().await.unwrap()[0];
    assert_eq!((p.in_use, p.hits), (1, 1));
    c.destroy(&info.id).await.unwrap();
    let (again, pooled) = c.create_spec(&template, None, false).await.unwrap();
    assert!(pooled);
    assert_ne!(again.id, info.id);
    // no_pool skips the pool.
    let (cold, pooled) = c.create_spec(&template, None, true).await.unwrap();
    assert!(!pooled);

    // The reaper ends pooled and cold sandboxes at their lifetime.
    eventually(10, "the lifetime reap", || async {
        c.inspect(&again.id).await.is_err() && c.inspect(&cold.id).await.is_err()
    })
    .await;
    assert_eq!(
        c.inspect(&again.id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );

    // Drain destroys the idle ones and stops refills.
    eventually(30, "the pool refilled", || async { idle_of(&c).await == 2 }).await;
    let gone = c.pool_drain(None).await.unwrap();
    assert_eq!(gone.len(), 2);
    assert!(c.pool_list().await.unwrap().is_empty());
    eventually(10, "no sandboxes left", || async {
        d.live_ids().is_empty()
    })
    .await;
}

/// A burst that takes the whole pool at once: every create is a hit, and the refills
/// that follow (paced: at most one creation per CPU at a time) fill the pool back to
/// its size; the metrics count the burst and the refills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_refills_fully_after_a_burst_of_acquisitions() {
    if !require_root("the daemon's tests") {
        return;
    }
    let port = free_port();
    let d = TestDaemon::start(&[&format!("--metrics-listen=127.0.0.1:{port}")]);
    let c = d.client(None).await;
    let template = spec(120);
    c.pool_warm(&template, 8, 8).await.unwrap();
    eventually(60, "eight warm sandboxes", || async {
        idle_of(&c).await == 8
    })
    .await;
    let burst = futures_util::future::join_all((0..8).map(|_| {
        let (c, t) = (c.clone(), template.clone());
        async move { c.create_spec(&t, None, false).await.unwrap() }
    }))
    .await;
    assert!(
        burst.iter().all(|(_, pooled)| *pooled),
        "the whole burst comes from the pool"
    );
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    eventually(60, "the pool refilled", || async {
        let p = &c.pool_list().await.unwrap()[0];
        assert!(
            p.creating as usize <= cpus,
            "{} creations at once, more than {cpus} CPUs",
            p.creating
        );
        p.idle == 8 && p.creating == 0
    })
    .await;
    let p = &c.pool_list().await.unwrap()[0];
    assert_eq!((p.hits, p.misses, p.in_use), (8, 0, 8));
    let text = http_get(port, "/metrics").await;
    assert!(text.contains("stockade_pool_hits_total 8\n"), "{text}");
    assert!(text.contains("stockade_pool_misses_total 0\n"), "{text}");
    assert!(
        text.contains("stockade_creates_total{result=\"ok\"} 16\n"),
        "eight to fill the pool, eight to refill it: {text}"
    );
    // The handed-out sandboxes work and are the caller's.
    for (info, _) in &burst {
        let o = c
            .exec(
                &info.id,
                stockade::CheckedRequest::new(sh("echo ok")).unwrap(),
                stockade::ExecIo::none(),
            )
            .await
            .unwrap();
        assert_eq!(o.stdout, b"ok\n");
        c.destroy(&info.id).await.unwrap();
    }
    assert_eq!(c.pool_drain(None).await.unwrap().len(), 8);
    d.assert_none_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_sandbox_that_stops_answering_is_replaced_before_anyone_gets_it() {
    if !require_root("the daemon's tests") {
        return;
    }
    let d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    c.pool_warm(&spec(60), 1, 1).await.unwrap();
    eventually(30, "a warm sandbox", || async { idle_of(&c).await == 1 }).await;
    let ids = d.live_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let victim = ids[0].clone();
    // Its agent (PID 1) is frozen: the monitor lives on, so only a health check
    // that waits for an answer can tell.
    let st: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.state_root().join(&victim).join("state.json")).unwrap(),
    )
    .unwrap();
    let init = st["init_pid"].as_i64().unwrap() as i32;
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &init.to_string()])
            .status()
            .unwrap()
            .success()
    );
    eventually(30, "the frozen sandbox replaced", || async {
        let live = d.live_ids();
        !live.contains(&victim) && live.len() == 1 && idle_of(&c).await == 1
    })
    .await;
    let (got, pooled) = c.create_spec(&spec(60), None, false).await.unwrap();
    assert!(pooled);
    assert_ne!(got.id, victim);
    let o = c
        .exec(
            &got.id,
            stockade::CheckedRequest::new(sh("echo ok")).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap();
    assert_eq!(o.stdout, b"ok\n");
    c.destroy(&got.id).await.unwrap();
    c.pool_drain(None).await.unwrap();
    eventually(10, "no sandboxes left", || async {
        d.live_ids().is_empty()
    })
    .await;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn monitor_pid(d: &TestDaemon, id: &str) -> i32 {
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.state_root().join(id).join("state.json")).unwrap())
            .unwrap();
    st["monitor_pid"].as_i64().unwrap() as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_a_restart_adopts_healthy_sandboxes_and_reaps_the_rest() {
    if !require_root("the daemon's tests") {
        return;
    }
    let mut d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    let keep = create(&c, spec(120)).await;
    let lost = create(&c, spec(120)).await;
    c.pool_warm(&spec(120), 1, 1).await.unwrap();
    eventually(30, "a warm sandbox", || async { idle_of(&c).await == 1 }).await;
    let warm: Vec<String> = d
        .live_ids()
        .into_iter()
        .filter(|i| i != keep.id() && i != lost.id())
        .collect();
    assert_eq!(warm.len(), 1);

    // kill -9 in the middle of a streamed exec.
    let (tx, mut rx) = mpsc::channel(16);
    let k2 = keep.clone();
    let running =
        tokio::spawn(async move { k2.exec_streaming(sh("echo started; sleep 60"), tx).await });
    assert_eq!(rx.recv().await.unwrap().data, b"started\n");
    d.kill9();
    assert!(
        running.await.unwrap().is_err(),
        "the exec's stream broke with the daemon"
    );
    // While the daemon is down, one sandbox dies on its own (its monitor killed).
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &monitor_pid(&d, lost.id()).to_string()])
        .status();

    d.restart();
    let c = d.client(None).await;
    // The healthy one is adopted and usable; the killed exec left nothing running.
    let o = c
        .exec(
            keep.id(),
            stockade::CheckedRequest::new(sh(
                "for p in /proc/[0-9]*; do cat $p/comm; done | grep -c sleep; echo alive",
            ))
            .unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0\nalive\n");
    assert_eq!(
        c.inspect(lost.id()).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    // The warm one is back in its pool and handed out as before.
    assert_eq!(idle_of(&c).await, 1);
    let (got, pooled) = c.create_spec(&spec(120), None, false).await.unwrap();
    assert!(pooled);
    assert_eq!(got.id, warm[0], "the adopted warm sandbox");
    // Nothing of the dead sandbox is left.
    assert!(
        !d.state_root().join(lost.id()).exists(),
        "state of the dead sandbox"
    );
    let cg = std::process::Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "4", "-name", lost.id()])
        .output()
        .unwrap();
    assert!(
        cg.stdout.is_empty(),
        "cgroups left: {}",
        String::from_utf8_lossy(&cg.stdout)
    );
    assert!(d.log().contains("adopted"), "{}", d.log());

    // A clean stop drains the pool; the handed-out sandboxes stay for the next start.
    c.pool_drain(None).await.unwrap();
    c.destroy(&got.id).await.unwrap();
    c.destroy(keep.id()).await.unwrap();
    assert!(d.stop(), "clean exit");
    d.assert_none_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_load_of_concurrent_clients_has_no_errors_and_leaves_nothing() {
    if !require_root("the daemon's tests") {
        return;
    }
    // Scaled for 2 cores; raise with STOCKADE_LOAD_CLIENTS / STOCKADE_LOAD_SECS.
    let clients: usize = std::env::var("STOCKADE_LOAD_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let secs: u64 = std::env::var("STOCKADE_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let d = TestDaemon::start(&["--max-sandboxes-per-tenant=64"]);
    let c = d.client(None).await;
    // Sandboxes shared by many clients (8 each), each client with its own
    // connection. The agent's own threads count against a sandbox's pids cap: an exec
    // in flight costs up to 6 tasks (the agent's connection, stdin, client and output
    // threads, the shim, the process), and on a loaded machine those of finished
    // execs linger. 8 concurrent execs reach the default cap of 64, where the agent
    // (stockade-agent/src/server.rs) drops the connection or leaves the exec hanging
    // until the lifetime ends; so these sandboxes get the pids 8 execs need, and the
    // lifetime covers the run with room to spare.
    let shared = SandboxSpec {
        limits: stockade::spec::Limits {
            pids: 8 * 6 * 4,
            ..Default::default()
        },
        ..spec(secs + 300)
    };
    let mut sbs = Vec::new();
    for _ in 0..clients.div_ceil(8).max(4) {
        sbs.push(create(&c, shared.clone()).await.id().to_string());
    }
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let c = d.client(None).await;
        let id = sbs[i % sbs.len()].clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u32, Vec::new());
            while Instant::now() < until {
                match c
                    .exec(
                        &id,
                        stockade::CheckedRequest::new(ExecRequest::new([
                            "/bin/echo",
                            &i.to_string(),
                        ]))
                        .unwrap(),
                        stockade::ExecIo::none(),
                    )
                    .await
                {
                    Ok(o) if o.exit_code == 0 && o.stdout == format!("{i}\n").as_bytes() => ok += 1,
                    Ok(o) => errors.push(format!("bad outcome {o:?}")),
                    Err(e) => errors.push(e.to_string()),
                }
            }
            (ok, errors)
        }));
    }
    let (mut total, mut all_errors) = (0, Vec::new());
    for t in tasks {
        let (ok, errors) = t.await.unwrap();
        assert!(ok > 0, "every client got execs through: {errors:?}");
        all_errors.extend(errors);
        total += ok;
    }
    // On failure, what each sandbox's pids cgroup saw (its peak, and how often its cap
    // refused a task), to tell the sandbox's cap from the host's pid_max.
    assert!(
        all_errors.is_empty(),
        "{all_errors:?}\npids cgroups: {}",
        sbs.iter()
            .map(|id| pids_seen(id))
            .collect::<Vec<_>>()
            .join("; ")
    );
    eprintln!(
        "load: {clients} clients, {secs} s, {total} execs, {:.0}/s",
        total as f64 / secs as f64
    );
    for id in &sbs {
        c.destroy(id).await.unwrap();
    }
    d.assert_none_left().await;
}

/// The pids cgroup files of sandbox `id` (peak, current, max, events), where found.
fn pids_seen(id: &str) -> String {
    let found = std::process::Command::new("find")
        .args([
            "/sys/fs/cgroup",
            "-maxdepth",
            "5",
            "-type",
            "d",
            "-name",
            id,
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut seen = Vec::new();
    for dir in found.lines() {
        for f in ["pids.peak", "pids.current", "pids.max", "pids.events"] {
            if let Ok(v) = std::fs::read_to_string(std::path::Path::new(dir).join(f)) {
                seen.push(format!("{f}={}", v.trim().replace('\n', ",")));
            }
        }
    }
    format!("{id}: {}", seen.join(" "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_in_use_is_never_reaped_as_idle() {
    if !require_root("the daemon's tests") {
        return;
    }
    let d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    // Idle after 2 s without use. A plain exec and a streamed one start together;
    // the plain one runs for 4 s, the streamed one 3 s longer, alone: in use all
    // along, both longer than the idle timeout, with no gap between calls for a
    // loaded host to stretch past it.
    let s = SandboxSpec {
        idle_timeout_secs: Some(2),
        ..spec(120)
    };
    let sb = create(&c, s).await;
    let (tx, _rx) = mpsc::channel(16);
    let (plain, streamed) = tokio::join!(
        sb.exec(sh("sleep 4; echo still-here")),
        sb.exec_streaming(sh("sleep 7; echo streamed"), tx)
    );
    let o = plain.expect("a sandbox running an exec is in use, not idle");
    assert_eq!((o.exit_code, &o.stdout[..]), (0, &b"still-here\n"[..]));
    let o = streamed.expect("a streamed exec keeps its sandbox in use too");
    assert_eq!(
        (o.exit_code, &o.stdout[..]),
        (0, &b"streamed\n"[..]),
        "{o:?}"
    );
    // Once unused, it is reaped as idle.
    let id = sb.id().to_string();
    eventually(30, "the idle sandbox to be reaped", || {
        let c = c.clone();
        let id = id.clone();
        async move { c.inspect(&id).await.is_err() }
    })
    .await;
    d.assert_none_left().await;
}

/// Destroy answers before the teardown ends, but nothing the daemon shows ever has
/// the sandbox again: not `list`, not `inspect`, not an exec; a daemon killed right
/// after the answer finishes the destroy when it starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroyed_sandbox_is_never_shown_again_and_a_restart_finishes_its_teardown() {
    if !require_root("the daemon's tests") {
        return;
    }
    let mut d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    let p: Arc<dyn Provider> = Arc::new(c.clone());
    for _ in 0..3 {
        let (info, _) = c.create_spec(&spec(60), None, true).await.unwrap();
        c.destroy(&info.id).await.unwrap();
        let listed = p.list().await.unwrap();
        assert!(
            listed.iter().all(|i| i.id != info.id),
            "listed after its destroy: {listed:?}"
        );
        assert_eq!(
            p.inspect(&info.id).await.unwrap_err().code(),
            ErrorCode::NotFound
        );
        let e = p
            .exec(
                &info.id,
                stockade::CheckedRequest::new(sh("true")).unwrap(),
                stockade::ExecIo::none(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    }
    d.assert_none_left().await;

    // kill -9 at once after the answer: whatever the teardown had not done yet, the
    // next start does; the sandbox is not adopted back.
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(c.create_spec(&spec(60), None, true).await.unwrap().0.id);
    }
    for id in &ids {
        c.destroy(id).await.unwrap();
    }
    d.kill9();
    d.restart();
    let c = d.client(None).await;
    let p: Arc<dyn Provider> = Arc::new(c.clone());
    let listed = p.list().await.unwrap();
    assert!(listed.is_empty(), "shown after a restart: {listed:?}");
    d.assert_none_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_dies_on_its_own_is_forgotten_and_its_neighbour_kept() {
    if !require_root("the daemon's tests") {
        return;
    }
    let port = free_port();
    let d = TestDaemon::start(&[&format!("--metrics-listen=127.0.0.1:{port}")]);
    let c = d.client(None).await;
    let keep = create(&c, spec(120)).await;
    let lost = create(&c, spec(120)).await;
    // Its monitor killed, the sandbox ends (the monitor's PID 1 dies with it); the
    // daemon's look for vanished sandboxes (by their ids, every 5 s) forgets it, and
    // says so in its metrics.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &monitor_pid(&d, lost.id()).to_string()])
        .status();
    eventually(30, "the dead sandbox reaped as gone", || async {
        http_get(port, "/metrics")
            .await
            .contains("stockade_reaps_total{reason=\"gone\"} 1\n")
    })
    .await;
    assert_eq!(
        c.inspect(lost.id()).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    let listed: Vec<String> = c.list().await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(listed, [keep.id().to_string()]);
    let o = keep.exec(sh("echo alive")).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "alive\n");
    keep.destroy().await.unwrap();
}

/// A daemon whose state file was removed, emptied or moved aside (the advice for a
/// damaged one) once started with a new id and no record, and the sandboxes of the
/// one before ran unlisted until their lifetimes ended. The id is kept beside the
/// file: the daemon that starts on a fresh file reaps what it labelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_whose_state_file_was_lost_reaps_the_sandboxes_it_made() {
    if !require_root("the daemon's tests") {
        return;
    }
    for how in ["removed", "emptied"] {
        let mut d = TestDaemon::start(&[]);
        let c = d.client(None).await;
        let sb = create(&c, spec(600)).await;
        let id = sb.id().to_string();
        assert!(d.live_ids().contains(&id));
        d.kill9();
        let file = d.dir.join("daemon").join("state.redb");
        match how {
            "removed" => std::fs::remove_file(&file).unwrap(),
            _ => std::fs::write(&file, b"").unwrap(),
        }
        d.restart();
        let _ = d.client(None).await;
        // Recovery runs beside the listeners: the reap follows within moments.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while d.live_ids().contains(&id) {
            assert!(
                std::time::Instant::now() < until,
                "state file {how}: the previous daemon's sandbox {id} still runs, unlisted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
