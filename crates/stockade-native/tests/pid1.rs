//! What an idle native sandbox's PID 1 holds, and that it still reaps: one thread (its
//! accept loop reaps orphans on a signalfd; a reaper thread was one task more per idle
//! sandbox), and no zombie left by code that orphans its children.

use std::sync::Arc;
use std::time::Duration;

use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_native::{NativeLauncher, NativeProvider};

mod common;

/// The threads of `pid`, and its children that are zombies.
fn threads_and_zombies(pid: u32) -> (usize, Vec<u32>) {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
    let zombies = common::zombie_children_of(pid)
        .into_iter()
        .map(|(z, _)| z)
        .collect();
    (threads, zombies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid1_is_one_thread_and_reaps_orphans() {
    if common::root_and_agent().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(state.clone()),
    ));
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let sb = Sandbox::create(provider.clone(), SandboxSpec::default(), opts)
        .await
        .expect("create sandbox");
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join(sb.id()).join("state.json")).unwrap())
            .unwrap();
    let init = st["init_pid"].as_u64().unwrap() as u32;
    assert_eq!(threads_and_zombies(init), (1, vec![]), "an idle PID 1");
    // The daemon's cheap look for vanished sandboxes names what `list` names.
    let listed: Vec<String> = provider
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(provider.live_ids().await.unwrap(), listed);
    assert_eq!(listed, [sb.id().to_string()]);
    // Orphans: each subshell's child outlives its parent and ends up with PID 1.
    for _ in 0..3 {
        let out = sb
            .exec(ExecRequest::new([
                "/bin/sh",
                "-c",
                "for i in 1 2 3 4 5 6; do (sleep 0.05 &); done; echo started",
            ]))
            .await
            .unwrap();
        assert_eq!(out.exit_code, 0, "{out:?}");
    }
    let mut seen = threads_and_zombies(init);
    for _ in 0..50 {
        if seen.1.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = threads_and_zombies(init);
    }
    assert_eq!(seen.1, Vec::<u32>::new(), "orphans left unreaped by PID 1");
    // Its connection threads are gone once their execs answered.
    let mut threads = seen.0;
    for _ in 0..50 {
        if threads == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        threads = threads_and_zombies(init).0;
    }
    assert_eq!(threads, 1, "PID 1's threads after the execs");
    let out = sb
        .exec(ExecRequest::new(["/bin/echo", "still serving"]))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "still serving\n");
    sb.destroy().await.unwrap();
    assert_eq!(provider.live_ids().await.unwrap(), Vec::<String>::new());
}
