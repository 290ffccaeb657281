//! Pause, resume and fork through the daemon: tenant-checked like every verb, a
//! paused sandbox really frozen and refusing execs, never reaped for a lifetime that
//! does not run while it is paused, destroyed cleanly while paused.

use std::time::Duration;

use stockade::{ErrorCode, Forking, Pausing, Provider, RunState};

use crate::harness::{TestDaemon, require_root};
use crate::{TOKEN_A, TOKEN_B, create, sh, spec, token_file};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_fork_through_the_daemon_are_the_tenants_own() {
    if !require_root("the daemon's tests") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(&tmp);
    let d = TestDaemon::start(&[&format!("--token-file={tokens}")]);
    let a = d.client(Some(TOKEN_A)).await;
    let b = d.client(Some(TOKEN_B)).await;

    // A lifetime of 3 s: paused for longer, it must not be reaped.
    let sa = create(&a, spec(3)).await;
    let id = sa.id().to_string();
    let mut req =
        sh("(i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.02; done) >/dev/null 2>&1 &");
    req.background = true;
    sa.exec(req).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Another tenant can neither pause, resume nor fork it: not found.
    for e in [
        b.pause(&id).await.unwrap_err(),
        b.resume(&id).await.unwrap_err(),
        b.fork(&id, 1, Default::default()).await.unwrap_err(),
    ] {
        assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    }
    assert_eq!(a.inspect(&id).await.unwrap().state, RunState::Running);

    a.pause(&id).await.unwrap();
    let info = a.inspect(&id).await.unwrap();
    assert_eq!(info.state, RunState::Paused);
    assert_eq!(
        a.list()
            .await
            .unwrap()
            .iter()
            .find(|i| i.id == id)
            .map(|i| i.state),
        Some(RunState::Paused)
    );
    let e = sa.exec(sh("cat /tmp/n")).await.unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("sandbox {id} is paused; resume it first")),
        "{e}"
    );
    let e = a.pause(&id).await.unwrap_err();
    assert!(e.to_string().contains("already paused"), "{e}");
    // B's resume did nothing: still paused.
    assert_eq!(a.inspect(&id).await.unwrap().state, RunState::Paused);
    // Fork on native is refused with the reason.
    let e = a.fork(&id, 2, Default::default()).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
    assert!(e.to_string().contains("fork on the native provider"), "{e}");
    let e = a.fork(&id, 0, Default::default()).await.unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");

    // Past its 3 s lifetime while paused: neither the daemon nor the monitor ends it.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert_eq!(a.inspect(&id).await.unwrap().state, RunState::Paused);

    a.resume(&id).await.unwrap();
    let n1: u64 = String::from_utf8_lossy(&sa.exec(sh("cat /tmp/n")).await.unwrap().stdout)
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n2: u64 = String::from_utf8_lossy(&sa.exec(sh("cat /tmp/n")).await.unwrap().stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(n2 > n1, "the loop did not go on after resume: {n1} -> {n2}");
    let e = a.resume(&id).await.unwrap_err();
    assert!(e.to_string().contains("is not paused"), "{e}");

    // Paused again, then destroyed: nothing left.
    a.pause(&id).await.unwrap();
    sa.destroy().await.unwrap();
    assert_eq!(
        a.inspect(&id).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    d.assert_none_left().await;
}
