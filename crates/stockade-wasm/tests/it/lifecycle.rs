//! Sandboxes coming and going: destroy, lifetime, many at once, gc, the artifact cache.

use std::time::{Duration, Instant};

use stockade_core::{ErrorCode, ExecRequest, Provider};
use stockade_wasm::{LoadPath, WasmConfig, WasmProvider};

use crate::support::{create, exec_req, guest, provider, provider_in, run, spec, text};

fn entries(dir: &std::path::Path) -> usize {
    walk_count(dir)
}

fn walk_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    1 + if e.path().is_dir() {
                        walk_count(&e.path())
                    } else {
                        0
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn destroy_removes_everything_and_is_idempotent() {
    let Some(g) = guest() else { return };
    let (p, scratch) = provider();
    let id = create(&p, spec(&g)).await;
    assert_eq!(
        run(&p, &id, &["g", "write", "/tmp/x", "1"]).await.exit_code,
        0
    );
    let tmp = p.tmp_host_path(&id).unwrap();
    assert!(tmp.join("x").exists());
    let info = p.inspect(&id).await.unwrap();
    assert_eq!(info.provider, "wasm");
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade_core::WallKind::Isolation
                && w.detail.contains("by construction")),
        "{:?}",
        info.applied
    );
    assert_eq!(p.list().await.unwrap().len(), 1);

    p.destroy(&id).await.unwrap();
    p.destroy(&id).await.unwrap();
    assert!(!tmp.exists());
    assert_eq!(
        entries(scratch.path()),
        1,
        "only the per-process directory is left"
    );
    assert!(p.list().await.unwrap().is_empty());
    let err = exec_req(&p, &id, ExecRequest::new(["g", "hello"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert_eq!(
        p.inspect(&id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn the_lifetime_ends_the_sandbox_and_its_running_exec() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let mut s = spec(&g);
    s.timeout_secs = 1;
    let id = create(&p, s).await;
    let tmp = p.tmp_host_path(&id).unwrap();
    let started = Instant::now();
    let out = run(&p, &id, &["g", "spin"]).await;
    assert!(out.timed_out, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        p.inspect(&id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    assert!(!tmp.exists());
}

#[tokio::test]
async fn fifty_sandboxes_at_once() {
    let Some(g) = guest() else { return };
    let (p, scratch) = provider();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let (p, g) = (p.clone(), g.clone());
        tasks.spawn(async move {
            let id = create(&p, spec(&g)).await;
            let word = format!("sandbox-{i}");
            let out = run(&p, &id, &["g", "write", "/tmp/me", &word]).await;
            assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
            let out = run(&p, &id, &["g", "cat", "/tmp/me"]).await;
            p.destroy(&id).await.unwrap();
            (word, text(&out.stdout))
        });
    }
    let mut seen = 0;
    while let Some(r) = tasks.join_next().await {
        let (want, got) = r.unwrap();
        assert_eq!(want, got, "each sandbox sees only its own /tmp");
        seen += 1;
    }
    assert_eq!(seen, 50);
    assert!(p.list().await.unwrap().is_empty());
    assert_eq!(entries(scratch.path()), 1);
}

#[tokio::test]
async fn a_sandbox_dies_with_its_owner() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let mut owner = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let v = spec(&g).validate().unwrap();
    let opts = stockade_core::CreateOptions {
        owner_pid: Some(owner.id()),
    };
    let id = p
        .create(stockade_core::CheckedSpec::new(v, &p).unwrap(), opts)
        .await
        .unwrap()
        .id;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(p.inspect(&id).await.is_ok(), "alive while its owner is");
    owner.kill().unwrap();
    owner.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        p.inspect(&id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn gc_reaps_what_a_dead_process_left() {
    let (p, scratch) = provider();
    // A directory as a crashed process (pid that cannot be alive) would leave it.
    let dead = scratch.path().join("4194305").join("wasm-abc");
    std::fs::create_dir_all(dead.join("tmp")).unwrap();
    let report = p.gc().await.unwrap();
    assert_eq!(report.reaped, ["wasm-abc"]);
    assert!(!scratch.path().join("4194305").exists());
}

#[tokio::test]
async fn modules_are_compiled_once_and_then_loaded_from_the_cache() {
    let Some(g) = guest() else { return };
    let home = tempfile::tempdir().unwrap();
    let (p, _s1) = provider_in(home.path(), |_| {});
    let id = create(&p, spec(&g)).await;
    assert_eq!(p.module_load(&id).unwrap().0, LoadPath::Compiled);
    // The same provider reuses the module in memory.
    let id2 = create(&p, spec(&g)).await;
    assert_eq!(p.module_load(&id2).unwrap().0, LoadPath::Compiled);

    let (p2, _s2) = provider_in(home.path(), |_| {});
    let id = create(&p2, spec(&g)).await;
    let (how, ms) = p2.module_load(&id).unwrap();
    assert_eq!(how, LoadPath::Cached);
    assert!(ms < 1000.0, "{ms} ms");
    assert_eq!(run(&p2, &id, &["g", "hello"]).await.exit_code, 0);
    let cache = p2.config().cache_dir.clone();
    let artifacts: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
    assert_eq!(artifacts.len(), 1);

    // A fuel-metered engine compiles its own artifact next to it.
    let p3 = WasmProvider::with_config(WasmConfig {
        fuel_per_exec: Some(1 << 30),
        ..WasmConfig::in_home(home.path())
    })
    .unwrap();
    assert_ne!(p3.engine_key(), p2.engine_key());
    assert_eq!(p3.precompile(&g).unwrap(), LoadPath::Compiled);
    assert_eq!(p3.precompile(&g).unwrap(), LoadPath::Cached);
}
