//! Faults the daemon meets on a real host, each injected for real: its state
//! directory full (a small tmpfs), its store damaged (truncated, overwritten). Each
//! case checks what the user is told, that nothing acknowledged is lost, and that
//! nothing is left afterwards. (A monitor killed and a daemon killed mid-exec are in
//! `main.rs`; cgroups taken from a sandbox in the attack suite.)

use std::time::{Duration, Instant};

use stockade::{ErrorCode, Provider};

use stockade_testkit::Tmpfs;

use crate::harness::{TestDaemon, eventually, require_root};
use crate::{create, spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_directory_refuses_creates_clearly_and_recovers_without_a_restart() {
    if !require_root("a_full_state_directory_refuses_creates_clearly") {
        return;
    }
    let mut d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    let before = create(&c, spec(300)).await;
    // The daemon's state directory moves onto a 2 MiB tmpfs, its store with it.
    assert!(d.stop());
    let state = d.dir.join("daemon");
    let saved = d.dir.join("daemon-saved");
    std::fs::rename(&state, &saved).unwrap();
    let fs = Tmpfs::mount(&state, "2m");
    for e in std::fs::read_dir(&saved).unwrap().flatten() {
        std::fs::copy(e.path(), state.join(e.file_name())).unwrap();
    }
    d.restart();
    let c = d.client(None).await;
    assert!(
        c.inspect(before.id()).await.is_ok(),
        "a sandbox made before is adopted"
    );

    // Creates fail while the disk is full, each with an error that says so. (The
    // store may have a free page left for a first one: then the disk is filled again.)
    let mut fillers = Vec::new();
    let mut made = Vec::new();
    let mut refused = None;
    // Records of 64 KiB (an environment that size), so that the store must grow.
    let mut big = spec(300);
    big.env.insert("PAD".into(), "x".repeat(64 << 10));
    for n in 0..40 {
        fillers.push(fs.fill(&format!("filler-{n}")));
        match stockade::Sandbox::create(
            std::sync::Arc::new(c.clone()),
            big.clone(),
            Default::default(),
        )
        .await
        {
            Ok(sb) => made.push(sb),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("no create failed on a full state directory");
    let msg = e.to_string();
    // The host's state, not a bug: unavailable (exit 69), with what to do.
    assert_eq!(e.code(), ErrorCode::Unavailable, "{msg}");
    assert!(
        msg.contains("No space left") && msg.contains("free space") && msg.contains("state.redb"),
        "the error names the full disk and what to do: {msg}"
    );
    // Room again: the same daemon, not restarted, creates and lists as before.
    for f in &fillers {
        std::fs::remove_file(f).unwrap();
    }
    let after = create(&c, spec(300)).await;
    let listed: Vec<String> = c.list().await.unwrap().into_iter().map(|i| i.id).collect();
    assert!(
        listed.contains(&before.id().to_string()) && listed.contains(&after.id().to_string()),
        "{listed:?}"
    );
    // Every sandbox the daemon holds is one it lists: none was left running for a
    // create that failed.
    let live = d.live_ids();
    for id in &live {
        assert!(
            listed.contains(id),
            "{id} runs but is not listed: {listed:?}"
        );
    }
    before.destroy().await.unwrap();
    after.destroy().await.unwrap();
    for sb in made {
        sb.destroy().await.unwrap();
    }
    for id in listed {
        let _ = c.destroy(&id).await;
    }
    d.assert_none_left().await;
    assert!(d.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_store_stops_the_daemon_with_what_to_do_and_nothing_it_ran_is_left() {
    if !require_root("a_damaged_store_stops_the_daemon") {
        return;
    }
    let mut d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    let orphan = create(&c, spec(600)).await;
    let id = orphan.id().to_string();
    // The daemon dies, and its store is damaged behind it.
    d.kill9();
    let store = d.dir.join("daemon/state.redb");
    let len = std::fs::metadata(&store).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    // Started on it, the daemon exits with the file and what to do, not a panic.
    let out = TestDaemon::run_with_state(&d, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started on a damaged store: {err}");
    assert!(
        !err.contains("panicked") && out.status.code().is_some(),
        "not an abort: {:?} {err}",
        out.status
    );
    assert!(
        err.contains(&store.display().to_string()) && err.contains(".damaged"),
        "{err}"
    );
    // Moved aside as told, it starts afresh and reaps what the previous daemon ran:
    // its record is gone with the store, but the sandbox carries this host's daemon
    // id.
    std::fs::rename(&store, store.with_extension("redb.damaged")).unwrap();
    d.restart();
    let started = Instant::now();
    eventually(30, "the orphan reaped", || {
        let live = d.live_ids();
        let id = id.clone();
        async move { !live.contains(&id) }
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let c = d.client(None).await;
    assert_eq!(
        c.inspect(&id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    d.assert_none_left().await;
    assert!(d.stop());
}
