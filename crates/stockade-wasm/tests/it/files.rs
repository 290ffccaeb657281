//! The sandbox's files as the guest sees them: mounts, /tmp, and escape attempts.

use std::os::unix::fs::symlink;

use stockade_core::ErrorCode;
use stockade_spec::Mount;

use crate::support::{create, exec_req, guest, provider, run, spec, text};

fn mount(host: &std::path::Path, target: &str, writable: bool) -> Mount {
    Mount {
        host: host.to_path_buf(),
        target: target.into(),
        writable,
    }
}

#[tokio::test]
async fn reads_and_writes_preopened_directories() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let ro = tempfile::tempdir().unwrap();
    let rw = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("input.txt"), "from the host\n").unwrap();
    let mut s = spec(&g);
    s.mounts = vec![
        mount(ro.path(), "/data", false),
        mount(rw.path(), "/out", true),
    ];
    let id = create(&p, s).await;

    let out = run(&p, &id, &["g", "cat", "/data/input.txt"]).await;
    assert_eq!(
        (out.exit_code, text(&out.stdout)),
        (0, "from the host\n".into())
    );

    let out = run(&p, &id, &["g", "write", "/out/result.txt", "42"]).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(rw.path().join("result.txt")).unwrap(),
        "42"
    );

    // /tmp is writable and keeps its files across execs of one sandbox.
    let out = run(&p, &id, &["g", "write", "/tmp/note", "kept"]).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let out = run(&p, &id, &["g", "cat", "/tmp/note"]).await;
    assert_eq!(text(&out.stdout), "kept");
    let out = run(&p, &id, &["g", "ls", "/data"]).await;
    assert_eq!(text(&out.stdout), "input.txt\n");
}

#[tokio::test]
async fn writes_to_read_only_mounts_are_refused() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let ro = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("input.txt"), "original").unwrap();
    let mut s = spec(&g);
    s.mounts = vec![mount(ro.path(), "/data", false)];
    let id = create(&p, s).await;

    for path in ["/data/input.txt", "/data/new.txt"] {
        let out = run(&p, &id, &["g", "write", path, "overwritten"]).await;
        assert_eq!(out.exit_code, 1, "write to {path} must fail");
        assert!(
            text(&out.stderr).contains("cannot write"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        std::fs::read_to_string(ro.path().join("input.txt")).unwrap(),
        "original"
    );
    assert!(!ro.path().join("new.txt").exists());

    // The host-side file API holds the same line.
    let err = p
        .write_file(&id, "/data/input.txt", b"x")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
    assert_eq!(
        std::fs::read_to_string(ro.path().join("input.txt")).unwrap(),
        "original"
    );
}

#[tokio::test]
async fn escapes_through_dotdot_and_symlinks_are_refused() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    // A host secret next to the mounted directory, and links planted inside it.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let shared = outside.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    symlink(&secret, shared.join("abs-link")).unwrap();
    symlink("../secret.txt", shared.join("rel-link")).unwrap();
    symlink(outside.path(), shared.join("dir-link")).unwrap();
    symlink("/etc/passwd", shared.join("passwd")).unwrap();
    let mut s = spec(&g);
    s.mounts = vec![mount(&shared, "/shared", true)];
    let id = create(&p, s).await;

    for path in [
        "/shared/../secret.txt",
        "/tmp/../../etc/passwd",
        "/shared/abs-link",
        "/shared/rel-link",
        "/shared/dir-link/secret.txt",
        "/shared/passwd",
        "/etc/passwd",
    ] {
        let out = run(&p, &id, &["g", "cat", path]).await;
        assert_ne!(out.exit_code, 0, "guest read {path}: {}", text(&out.stdout));
        assert!(!text(&out.stdout).contains("host secret") && !text(&out.stdout).contains("root:"));

        let host_side = p.read_file(&id, path).await;
        assert!(
            host_side.is_err(),
            "host-side read of {path} must be refused"
        );
    }
    // Writing through a link to a directory outside must not create anything there.
    let out = run(&p, &id, &["g", "write", "/shared/dir-link/planted", "x"]).await;
    assert_ne!(out.exit_code, 0);
    let err = p
        .write_file(&id, "/shared/dir-link/planted2", b"x")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
    let err = p
        .write_file(&id, "/tmp/../../etc/stockade-escape", b"x")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
    assert!(!outside.path().join("planted").exists());
    assert!(!outside.path().join("planted2").exists());
    assert!(!std::path::Path::new("/etc/stockade-escape").exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host secret");
}

#[tokio::test]
async fn relative_paths_start_in_the_working_directory() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let outside = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("in.txt"), "data").unwrap();
    let mut s = spec(&g);
    s.mounts = vec![mount(data.path(), "/data", false)];
    let id = create(&p, s).await;
    let out = run(&p, &id, &["g", "write", "rel.txt", "r"]).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert_eq!(p.read_file(&id, "/tmp/rel.txt").await.unwrap(), b"r");

    // An exec's own cwd, in a subdirectory and in a read-only mount.
    p.mkdir(&id, "/tmp/sub").await.unwrap();
    let req = stockade_core::ExecRequest {
        cwd: Some("/tmp/sub".into()),
        ..stockade_core::ExecRequest::new(["g", "write", "here.txt", "h"])
    };
    assert_eq!(exec_req(&p, &id, req).await.unwrap().exit_code, 0);
    assert_eq!(p.read_file(&id, "/tmp/sub/here.txt").await.unwrap(), b"h");
    let req = stockade_core::ExecRequest {
        cwd: Some("/data".into()),
        ..stockade_core::ExecRequest::new(["g", "cat", "in.txt"])
    };
    assert_eq!(text(&exec_req(&p, &id, req).await.unwrap().stdout), "data");

    // A cwd that is a link leading out of the sandbox is refused, not followed.
    std::os::unix::fs::symlink(outside.path(), p.tmp_host_path(&id).unwrap().join("out")).unwrap();
    let req = stockade_core::ExecRequest {
        cwd: Some("/tmp/out".into()),
        ..stockade_core::ExecRequest::new(["g", "write", "planted", "x"])
    };
    let err = exec_req(&p, &id, req).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
    assert!(!outside.path().join("planted").exists());
}
