//! Stockade reaps what it starts: a burst of native sandboxes, created and destroyed,
//! leaves no zombie.
//!
//! This test binary makes itself a child subreaper, standing in for a PID 1 that never
//! reaps (Stockade inside a container): a process Stockade started and then orphaned
//! becomes a child of this process, and nothing here waits for orphans, so each one
//! left to "init" shows up as a zombie child of ours. It is its own test binary because
//! the subreaper flag holds for the whole process.

use std::sync::Arc;

use stockade_core::{CreateOptions, Provider, Sandbox, SandboxSpec};
use stockade_native::{NativeLauncher, NativeProvider};

mod common;

const BURST: usize = 24;

/// Our zombie children: pid and command name.
fn zombie_children() -> Vec<(u32, String)> {
    common::zombie_children_of(std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sandboxes_leaves_no_zombie() {
    if common::root_and_agent().is_none() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
    assert_eq!(zombie_children(), vec![], "zombies before the test");
    let tmp = tempfile::tempdir().unwrap();
    let provider = Arc::new(NativeProvider::from(NativeLauncher::with_state_root(
        tmp.path().join("state"),
    )));
    let mut creates = tokio::task::JoinSet::new();
    for _ in 0..BURST {
        let p: Arc<dyn Provider> = provider.clone();
        creates.spawn(async move {
            let opts = CreateOptions {
                owner_pid: Some(std::process::id()),
            };
            let sb = Sandbox::create(p, SandboxSpec::default(), opts).await;
            sb.expect("create sandbox").id().to_string()
        });
    }
    let ids = creates.join_all().await;
    assert_eq!(provider.list().await.unwrap().len(), BURST);
    let mut destroys = tokio::task::JoinSet::new();
    for id in ids {
        let p = provider.clone();
        destroys.spawn(async move { p.destroy(&id).await.expect("destroy sandbox") });
    }
    destroys.join_all().await;
    assert_eq!(provider.list().await.unwrap(), vec![]);
    // Reaping runs on the runtime's own tasks: give a zombie of the last moment the
    // time to be reaped; one that stays is left behind.
    let mut left = zombie_children();
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = zombie_children();
    }
    assert_eq!(
        left,
        vec![],
        "processes Stockade started were left unreaped (pid, name)"
    );
}
