//! CPython 3.12 for WASI as a sandbox runtime.

use std::time::{Duration, Instant};

use stockade_core::{ExecRequest, SandboxSpec};
use stockade_spec::Mount;

use crate::support::{create, exec_req, provider, python, run, text};

fn py_spec() -> SandboxSpec {
    SandboxSpec {
        image: Some("python".into()),
        ..SandboxSpec::default()
    }
}

#[tokio::test]
async fn python_prints() {
    let Some(()) = python() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, py_spec()).await;
    let out = run(&p, &id, &["python3", "-c", "print(1+1)"]).await;
    assert_eq!(
        (out.exit_code, text(&out.stdout)),
        (0, "2\n".into()),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &p,
        &id,
        &[
            "python3",
            "-c",
            "import sys; print(sys.version_info[:2]); sys.exit(7)",
        ],
    )
    .await;
    assert_eq!((out.exit_code, text(&out.stdout)), (7, "(3, 12)\n".into()));
    let out = run(&p, &id, &["python3", "-c", "raise ValueError('boom')"]).await;
    assert_eq!(out.exit_code, 1);
    assert!(text(&out.stderr).contains("ValueError: boom"));
}

#[tokio::test]
async fn python_sees_files_and_env_and_no_network() {
    let Some(()) = python() else { return };
    let (p, _scratch) = provider();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("n.txt"), "21").unwrap();
    let mut s = py_spec();
    s.mounts = vec![Mount {
        host: data.path().to_path_buf(),
        target: "/data".into(),
        writable: false,
    }];
    s.env.insert("GREETING".into(), "hej".into());
    let id = create(&p, s).await;
    let code = r#"
import os
n = int(open('/data/n.txt').read())
open('out.txt', 'w').write(str(n * 2))
print(open('/tmp/out.txt').read(), os.environ['GREETING'], 'USER' in os.environ)
try:
    open('/data/n.txt', 'w').write('x')
except OSError as e:
    print('ro:', type(e).__name__)
try:
    import socket
    socket.create_connection(('1.1.1.1', 80), timeout=1)
    print('net: open')
except Exception as e:
    print('net: refused')
"#;
    let out = run(&p, &id, &["python3", "-c", code]).await;
    assert_eq!(
        text(&out.stdout),
        "42 hej False\nro: PermissionError\nnet: refused\n",
        "{}",
        text(&out.stderr)
    );
    assert_eq!(p.read_file(&id, "/tmp/out.txt").await.unwrap(), b"42");
}

#[tokio::test]
async fn python_while_true_stops_at_the_deadline() {
    let Some(()) = python() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, py_spec()).await;
    let started = Instant::now();
    let req = ExecRequest {
        timeout_ms: Some(1000),
        ..ExecRequest::new(["python3", "-c", "while True: pass"])
    };
    let out = exec_req(&p, &id, req).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn python_memory_bomb_is_contained() {
    let Some(()) = python() else { return };
    let (p, _scratch) = provider();
    let mut s = py_spec();
    s.limits.memory_bytes = 128 << 20;
    let id = create(&p, s).await;
    let out = run(
        &p,
        &id,
        &[
            "python3",
            "-c",
            "x = []\nwhile True: x.append(bytearray(8 << 20))",
        ],
    )
    .await;
    assert_ne!(out.exit_code, 0);
    assert!(out.oom_killed, "{out:?}");
    assert!(
        text(&out.stderr).contains("MemoryError"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&p, &id, &["python3", "-c", "print('alive')"]).await;
    assert_eq!(text(&out.stdout), "alive\n");
}
