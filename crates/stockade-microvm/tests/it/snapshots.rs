//! Pause to disk, resume, fork, and a corrupt snapshot.

use std::time::Instant;

use stockade_core::{CreateOptions, Error, ExecRequest, Provider, Sandbox};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_fork_keep_a_python_process_and_a_corrupt_snapshot_is_refused() {
    let Some(p) = provider().await else { return };
    let sb = vm(&p, spec()).await;
    let id = sb.id().to_string();
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
            let dir = std::path::Path::new("/run/stockade-microvm").join(&id);
            panic!(
                "{e}: {:?}; console: {}",
                p.inspect(&id).await.map(|i| i.applied.last().cloned()),
                std::fs::read_to_string(dir.join("console.log")).unwrap_or_default()
            );
        }
    };
    assert_eq!(out.exit_code, 0, "{out:?}");
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
        info.applied.iter().any(|l| l.starts_with("state: paused")),
        "{:?}",
        info.applied
    );
    let e = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert!(e.to_string().contains("is paused; resume it first"), "{e}");

    // Resume: same process, same variable, same open (unlinked) file.
    let t = Instant::now();
    sb.resume().await.unwrap();
    eprintln!("resume took {:?}", t.elapsed());
    let after = ask(&sb, "after").await;
    assert_eq!(x_of(&after), x, "{after}");
    assert!(
        after.contains("before\nafter\n"),
        "the open file lost its content: {after}"
    );

    // Fork 3 copies of a new snapshot; each has its own id as hostname and diverges.
    sb.pause().await.unwrap();
    let t = Instant::now();
    let forks = sb
        .fork(
            3,
            CreateOptions {
                owner_pid: Some(std::process::id()),
            },
        )
        .await
        .unwrap();
    eprintln!("fork of 3 took {:?}", t.elapsed());
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
