//! Pause to disk, resume, fork, and a corrupt snapshot.

use std::time::Instant;

use stockade_core::{CreateOptions, Error, ExecRequest, Provider, Sandbox, Snapshotting};

use super::*;

/// A Python process that keeps a random number in memory and a log file open (its
/// path unlinked: only the open descriptor reaches it), answering on a unix socket.
const SERVER: &str = r#"
import os, random, socket
x = str(random.randrange(1 << 60))
f = open('/tmp/log', 'w+')
os.unlink('/tmp/log')
f.write('start x=' + x + '\n'); f.flush()
s = socket.socket(socket.AF_UNIX)
s.bind('/tmp/ctl.sock'); s.listen()
while True:
    c, _ = s.accept()
    cmd = c.recv(100).decode()
    if cmd.startswith('set '):
        x = cmd[4:]
    f.write(cmd + '\n'); f.flush(); f.seek(0)
    c.sendall(('x=' + x + ' host=' + socket.gethostname() + '\n' + f.read()).encode())
    c.close()
"#;

async fn ask(sb: &Sandbox, cmd: &str) -> String {
    let code = format!(
        "import socket\nc = socket.socket(socket.AF_UNIX)\nc.connect('/tmp/ctl.sock')\nc.send({cmd:?}.encode())\nprint(c.recv(65536).decode(), end='')"
    );
    let out = py(sb, &code, 60_000).await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    text(&out.stdout)
}

fn x_of(answer: &str) -> String {
    answer
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Starts [`SERVER`] in `sb`, in the background, and waits for its socket.
async fn start_server(p: &std::sync::Arc<stockade_microvm::MicrovmProvider>, sb: &Sandbox) {
    let mut start = ExecRequest::new([
        "/bin/sh",
        "-c",
        "python3 -c \"$SERVER\" >/dev/null 2>&1 & while [ ! -S /tmp/ctl.sock ]; do sleep 0.1; done",
    ]);
    start.env.insert("SERVER".into(), SERVER.into());
    start.background = true;
    start.timeout_ms = Some(60_000);
    let out = match sb.exec(start).await {
        Ok(o) => o,
        Err(e) => {
            let dir = std::path::Path::new("/run/stockade-microvm").join(sb.id());
            panic!(
                "{e}: {:?}; console: {}",
                p.inspect(sb.id()).await.map(|i| i.applied.last().cloned()),
                std::fs::read_to_string(dir.join("console.log")).unwrap_or_default()
            );
        }
    };
    assert_eq!(out.exit_code, 0, "{out:?}");
}

/// Runs `work` while `gc` runs over and over beside it (as `stockade gc` from another
/// shell, or the daemon's own), returning its result, the ids gc reaped meanwhile and
/// how many times it ran.
async fn with_gc_beside<T>(
    p: &stockade_microvm::MicrovmProvider,
    work: impl std::future::Future<Output = T>,
) -> (T, Vec<String>, u32) {
    let done = std::sync::atomic::AtomicBool::new(false);
    let (out, (reaped, runs)) = tokio::join!(
        async {
            let out = work.await;
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            out
        },
        async {
            let (mut reaped, mut runs) = (Vec::new(), 0);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let report = {
                    let _gc = crate::DEAD_VM.lock().await;
                    p.gc().await.unwrap()
                };
                reaped.extend(report.reaped);
                runs += 1;
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            (reaped, runs)
        }
    );
    (out, reaped, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_fork_keep_a_python_process_and_a_corrupt_snapshot_is_refused() {
    let Some(p) = provider().await else { return };
    let sb = vm(&p, spec()).await;
    let id = sb.id().to_string();
    start_server(&p, &sb).await;
    let before = ask(&sb, "before").await;
    let x = x_of(&before);
    assert!(before.contains("start x="), "{before}");

    // Pause: the state goes to disk and the VM process ends.
    let t = Instant::now();
    sb.pause().await.unwrap();
    eprintln!("pause took {:?}", t.elapsed());
    let info = p.inspect(&id).await.unwrap();
    assert_eq!(info.state, stockade_core::RunState::Paused);
    assert!(
        info.applied
            .iter()
            .any(|w| w.to_string().starts_with("state: paused")),
        "{:?}",
        info.applied
    );
    let e = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert!(e.to_string().contains("is paused; resume it first"), "{e}");

    // Resume: same process, same variable, same open (unlinked) file. gc runs all
    // the while: between the old VM host's end and the new one's start the sandbox
    // has no supervisor, and is still not dead.
    let t = Instant::now();
    let (resumed, reaped, runs) = with_gc_beside(&p, sb.resume()).await;
    resumed.unwrap();
    eprintln!("resume took {:?} ({runs} gc runs beside it)", t.elapsed());
    assert!(runs >= 2, "gc ran {runs} times beside the resume");
    assert!(
        !reaped.contains(&id),
        "gc reaped the resuming sandbox: {reaped:?}"
    );
    let after = ask(&sb, "after").await;
    assert_eq!(x_of(&after), x, "{after}");
    assert!(
        after.contains("before\nafter\n"),
        "the open file lost its content: {after}"
    );

    // Fork 3 copies of a new snapshot; each has its own id as hostname and diverges.
    sb.pause().await.unwrap();
    let t = Instant::now();
    let (forks, reaped, runs) = with_gc_beside(
        &p,
        sb.fork(
            3,
            CreateOptions {
                owner_pid: Some(std::process::id()),
            },
        ),
    )
    .await;
    let forks = forks.unwrap();
    eprintln!(
        "fork of 3 took {:?} ({runs} gc runs beside it)",
        t.elapsed()
    );
    assert!(runs >= 2, "gc ran {runs} times beside the fork");
    assert!(
        !reaped.contains(&id),
        "gc reaped the forked sandbox: {reaped:?}"
    );
    for f in &forks {
        assert!(
            !reaped.iter().any(|r| r == f.id()),
            "gc reaped a starting copy: {reaped:?}"
        );
    }
    assert_eq!(forks.len(), 3);
    for (i, f) in forks.iter().enumerate() {
        let a = ask(f, &format!("set fork{i}")).await;
        assert!(
            a.starts_with(&format!("x=fork{i} host={}\n", f.id())),
            "{a}"
        );
        assert!(a.contains("before\nafter\n"), "{a}");
    }
    for (i, f) in forks.iter().enumerate() {
        let a = ask(f, "check").await;
        assert_eq!(
            x_of(&a),
            format!("x=fork{i}"),
            "the copies share state: {a}"
        );
        assert!(!a.contains(&format!("set fork{}", (i + 1) % 3)), "{a}");
    }
    let ids: std::collections::BTreeSet<_> = forks.iter().map(|f| f.id().to_string()).collect();
    assert_eq!(ids.len(), 3);
    assert!(!ids.contains(&id));

    // A snapshot changed on disk is refused on restore.
    let state = std::path::Path::new("/run/stockade-microvm")
        .join(&id)
        .join("snapshot/vm.state");
    let mut bytes = std::fs::read(&state).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&state, bytes).unwrap();
    let e = sb.resume().await.unwrap_err();
    assert!(matches!(e, Error::PolicyDenied(_)), "{e:?}");
    assert!(e.to_string().contains("is corrupt"), "{e}");
    let e = sb.fork(1, CreateOptions::default()).await.unwrap_err();
    assert!(e.to_string().contains("is corrupt"), "{e}");

    // Destroy removes the VMs, their sockets and the snapshot files.
    for f in &forks {
        f.destroy().await.unwrap();
        assert_eq!(leftovers(f.id()), Vec::<String>::new());
    }
    sb.destroy().await.unwrap();
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

/// Sandbox directories of the microvm provider now.
fn vm_dirs() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/run/stockade-microvm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_snapshot_starts_new_sandboxes_is_digest_checked_and_outlives_gc() {
    let Some(_) = provider().await else { return };
    let home = tempfile::tempdir().unwrap();
    let p = std::sync::Arc::new(stockade_microvm::MicrovmProvider::from(
        stockade_microvm::MicrovmLauncher::new().with_home(home.path()),
    ));
    let store = home.path().join("snapshots/microvm");
    let sb = vm(&p, spec()).await;
    let id = sb.id().to_string();
    start_server(&p, &sb).await;
    let x = x_of(&ask(&sb, "before").await);

    // Bad names are refused before anything is saved.
    for bad in [
        "",
        "../escape",
        "a/b",
        ".hidden",
        "-dash",
        "sp ace",
        &"n".repeat(65),
    ] {
        let e = sb.snapshot(bad).await.unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{bad:?}: {e:?}");
        assert!(e.to_string().contains("is not valid"), "{e}");
    }
    let e = p.launcher().snapshot(&id, "../escape").await.unwrap_err();
    assert!(e.to_string().contains("is not valid"), "{e}");
    assert!(!home.path().join("snapshots/escape").exists());
    assert!(!store.exists() || std::fs::read_dir(&store).unwrap().count() == 0);

    // A running sandbox is kept and runs on.
    let t = Instant::now();
    let snap = sb.snapshot("base").await.unwrap();
    eprintln!("snapshot of a running VM took {:?}", t.elapsed());
    assert_eq!(
        (snap.name.as_str(), snap.source.as_str()),
        ("base", id.as_str())
    );
    assert_eq!(snap.sha256.len(), 64);
    assert!(snap.bytes > 1 << 20, "{snap:?}");
    assert_eq!(
        p.inspect(&id).await.unwrap().state,
        stockade_core::RunState::Running
    );
    let after = ask(&sb, "after-snapshot").await;
    assert_eq!(x_of(&after), x, "{after}");
    let e = sb.snapshot("base").await.unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    let listed = p.launcher().snapshots().await.unwrap();
    assert_eq!(listed, vec![snap.clone()]);

    // A new sandbox from it: the process and its open file as they were at the
    // snapshot, its own hostname; it dies with its owner.
    let mut owner = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let t = Instant::now();
    let copy = Sandbox::from_snapshot(
        p.clone() as std::sync::Arc<dyn Provider>,
        "base",
        CreateOptions {
            owner_pid: Some(owner.id()),
        },
    )
    .await
    .unwrap();
    eprintln!("start from the named snapshot took {:?}", t.elapsed());
    assert_ne!(copy.id(), id);
    let a = ask(&copy, "in-copy").await;
    assert!(
        a.starts_with(&format!("x={} host={}\n", &x[2..], copy.id())),
        "{a}"
    );
    assert!(a.contains("before\nin-copy\n"), "{a}");
    assert!(!a.contains("after-snapshot"), "{a}");
    assert!(
        copy.info()
            .applied
            .iter()
            .any(|w| w.detail.starts_with("started from snapshot base")),
        "{:?}",
        copy.info().applied
    );

    // gc keeps named snapshots, removes a half-made one whose maker is dead, and
    // the paused copy's own saved state once its owner is gone.
    let partial = store.join(".partial-999999999-1-dead");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("vm.state"), b"half").unwrap();
    copy.pause().await.unwrap();
    let copy_state = std::path::Path::new("/run/stockade-microvm")
        .join(copy.id())
        .join("snapshot/vm.state");
    assert!(copy_state.exists());
    owner.kill().unwrap();
    owner.wait().unwrap();
    let report = {
        let _gc = crate::DEAD_VM.lock().await;
        p.gc().await.unwrap()
    };
    assert!(report.reaped.contains(&copy.id().to_string()), "{report:?}");
    assert!(!partial.exists(), "{report:?}");
    assert!(!copy_state.exists());
    assert_eq!(leftovers(copy.id()), Vec::<String>::new());
    assert_eq!(p.launcher().snapshots().await.unwrap(), vec![snap.clone()]);
    assert!(store.join("base/vm.state").exists());

    // A changed snapshot is refused and nothing is started, also when its record's
    // digests are rewritten to match the change: the record is sealed with a key only
    // this host's Stockade reads.
    let state = store.join("base/vm.state");
    let mut bytes = std::fs::read(&state).unwrap();
    let mid = bytes.len() / 3;
    bytes[mid] ^= 0x5a;
    std::fs::write(&state, bytes).unwrap();
    let record = store.join("base/snapshot.json");
    let original = std::fs::read(&record).unwrap();
    let sum = std::process::Command::new("sha256sum")
        .arg(&state)
        .output()
        .unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    let mut forged: serde_json::Value = serde_json::from_slice(&original).unwrap();
    forged["info"]["sha256"] = sum.split_whitespace().next().unwrap().into();
    std::fs::write(&record, serde_json::to_vec_pretty(&forged).unwrap()).unwrap();
    let dirs = vm_dirs();
    let refused = |also: &'static str| {
        let p = p.clone();
        async move {
            let e = Sandbox::from_snapshot(
                p as std::sync::Arc<dyn Provider>,
                "base",
                CreateOptions::default(),
            )
            .await
            .unwrap_err();
            assert!(matches!(e, Error::PolicyDenied(_)), "{e:?}");
            let e = e.to_string();
            assert!(
                e.contains("snapshot base is corrupt")
                    && e.contains("stockade snapshot rm base")
                    && e.contains(also),
                "{e}"
            );
        }
    };
    refused("seal").await;
    std::fs::write(&record, &original).unwrap();
    refused("vm.state").await;
    // (Other tests make VMs meanwhile: only one started from this snapshot counts.)
    for id in vm_dirs().difference(&dirs) {
        if let Ok(info) = p.inspect(id).await {
            assert!(
                !info
                    .applied
                    .iter()
                    .any(|w| w.detail.starts_with("started from snapshot base")),
                "{id} was started from a corrupt snapshot"
            );
        }
    }

    // rm removes it; then it is not found.
    p.launcher().remove_snapshot("base").await.unwrap();
    assert!(!store.join("base").exists());
    assert_eq!(p.launcher().snapshots().await.unwrap(), Vec::new());
    let e = p.launcher().remove_snapshot("base").await.unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    let e = Sandbox::from_snapshot(
        p.clone() as std::sync::Arc<dyn Provider>,
        "base",
        CreateOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");

    sb.destroy().await.unwrap();
    assert_eq!(leftovers(&id), Vec::<String>::new());
}
