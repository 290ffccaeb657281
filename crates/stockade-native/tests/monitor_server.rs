//! A process's monitors after its first are forked by its monitor server
//! (`stockade-agent monitor-server`): each is still that process's own child, in a
//! session of its own, and runs its sandbox as a spawned one does; the server holds
//! nothing of ours, a dead server is replaced by spawning, and the server never
//! outlives the process that started it. Its own test binary: the server is per
//! process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_native::{NativeLauncher, NativeProvider};

mod common;

fn parts() -> Option<()> {
    common::root_and_agent()
}

/// A process's parent, session and command line.
fn proc_info(pid: u32) -> Option<(u32, u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
    Some((
        rest[1].parse().ok()?,
        rest[3].parse().ok()?,
        cmd.trim().to_string(),
    ))
}

/// Live monitor servers whose parent is `parent`: the processes with the server's
/// command line that are not one of `monitors` (a forked monitor keeps it).
fn servers_of(parent: u32, monitors: &[u32]) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rfind(')')
            .is_some_and(|i| state[i + 2..].starts_with('Z'));
        if let Some((ppid, sid, cmd)) = proc_info(pid)
            && ppid == parent
            && cmd == "stockade-monitor monitor-server"
            && sid == pid
            && !zombie
            && !monitors.contains(&pid)
        {
            v.push(pid);
        }
    }
    v
}

fn monitor_pid(state: &std::path::Path, id: &str) -> u32 {
    let text = std::fs::read_to_string(state.join(id).join("state.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["monitor_pid"].as_u64().unwrap() as u32
}

async fn echo(sb: &Sandbox, word: &str) {
    let out = sb
        .exec(ExecRequest::new(["sh", "-c", &format!("echo {word}")]))
        .await
        .unwrap();
    assert_eq!(
        (out.exit_code, String::from_utf8_lossy(&out.stdout).trim()),
        (0, word),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_monitors_are_forked_stay_our_children_and_a_dead_server_is_replaced() {
    if std::env::var_os("STOCKADE_TEST_SERVER_HELPER").is_some() || parts().is_none() {
        return;
    }
    let me = std::process::id();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(state.clone()),
    ));
    let opts = || CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let mut sbs = Vec::new();
    let mut monitors = Vec::new();
    for i in 0..3 {
        let sb = Sandbox::create(provider.clone(), SandboxSpec::default(), opts())
            .await
            .unwrap();
        let pid = monitor_pid(&state, sb.id());
        monitors.push(pid);
        let (ppid, sid, cmd) = proc_info(pid).unwrap();
        // Ours, in a session of its own, however it started.
        assert_eq!((ppid, sid), (me, pid), "monitor {i}: {cmd}");
        // The first is spawned; the server starts at the second.
        let how = if i == 0 { "monitor" } else { "monitor-server" };
        assert_eq!(cmd, format!("stockade-monitor {how}"), "monitor {i}");
        echo(&sb, &format!("sandbox{i}")).await;
        sbs.push(sb);
    }
    let servers = servers_of(me, &monitors);
    assert_eq!(servers.len(), 1, "{servers:?}");
    let server = servers[0];
    // It holds stdio (/dev/null) and its socket, nothing of ours.
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{server}/fd"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_link(e.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(fds.len(), 4, "{fds:?}");
    assert_eq!(
        fds.iter().filter(|l| l.as_str() == "/dev/null").count(),
        3,
        "{fds:?}"
    );

    // A killed server: the next monitor is spawned, and works.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let sb = Sandbox::create(provider.clone(), SandboxSpec::default(), opts())
        .await
        .unwrap();
    let (ppid, _, cmd) = proc_info(monitor_pid(&state, sb.id())).unwrap();
    assert_eq!((ppid, cmd.as_str()), (me, "stockade-monitor monitor"));
    echo(&sb, "after").await;
    sbs.push(sb);
    // The sandboxes its forks run are untouched by its death.
    echo(&sbs[1], "still").await;
    for sb in sbs {
        sb.destroy().await.unwrap();
    }
    assert_eq!(provider.list().await.unwrap(), vec![]);
    let until = Instant::now() + Duration::from_secs(5);
    while !servers_of(me, &[]).is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        servers_of(me, &[]),
        Vec::<u32>::new(),
        "a second server started"
    );

    // A process that ends leaves no server: this binary again, as a helper that makes
    // two sandboxes (its server starts) and exits without a word to it.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_makes_two_sandboxes_and_exits",
            "--nocapture",
        ])
        .env("STOCKADE_TEST_SERVER_HELPER", tmp.path().join("helper"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("server "))
        .unwrap_or_else(|| panic!("the helper named no server: {text}"))
        .trim()
        .parse()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let alive = || {
        proc_info(server).is_some_and(|(_, _, cmd)| cmd == "stockade-monitor monitor-server")
            && !std::fs::read_to_string(format!("/proc/{server}/stat"))
                .unwrap_or_default()
                .contains(") Z")
    };
    while alive() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !alive(),
        "the server {server} outlived the process that started it"
    );
    // Its sandboxes ended with their owner (their monitors remove their state).
    let helper = tmp.path().join("helper");
    let left = || {
        std::fs::read_dir(&helper)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("sb-"))
                    .count()
            })
            .unwrap_or(0)
    };
    let until = Instant::now() + Duration::from_secs(10);
    while left() > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left(), 0, "the helper's sandboxes outlived it");
}

/// Run by the test above as a separate process (does nothing on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_makes_two_sandboxes_and_exits() {
    let Some(dir) = std::env::var_os("STOCKADE_TEST_SERVER_HELPER") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(dir.clone()),
    ));
    let mut monitors = Vec::new();
    for _ in 0..2 {
        let opts = CreateOptions {
            owner_pid: Some(std::process::id()),
        };
        let sb = Sandbox::create(provider.clone(), SandboxSpec::default(), opts)
            .await
            .unwrap();
        monitors.push(monitor_pid(&dir, sb.id()));
        std::mem::forget(sb);
    }
    let servers = servers_of(std::process::id(), &monitors);
    assert_eq!(servers.len(), 1, "{servers:?}");
    println!("server {}", servers[0]);
}
