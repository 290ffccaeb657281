//! The docker provider for a member of the docker group who is not root: `stockade
//! run --provider docker` works as host uid 1000 (the agent's directory shared with
//! dockerd's remapped root by an ACL), and neither its sandbox nor the user reaches the
//! agent socket of root's sandbox.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Output};

use stockade_testkit::{DOCKER_FIX, docker_test_image, require, require_root};

const USER: u32 = 1000;

/// `stockade ARGS` as host uid 1000 with the docker socket's group, nothing of root's
/// environment, and its own runtime directory.
fn as_user(runtime: &std::path::Path, docker_gid: u32, args: &[&str]) -> Output {
    Command::new("setpriv")
        .arg(format!("--reuid={USER}"))
        .arg(format!("--regid={USER}"))
        .arg(format!("--groups={docker_gid}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_stockade"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", runtime)
        .env("XDG_RUNTIME_DIR", runtime)
        .output()
        .expect("run setpriv")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn docker_group_member_runs_sandboxes_that_reach_no_other_agent() {
    if !require_root("docker_group_member") {
        return;
    }
    let Some(image) = require(
        "dockerd and the docker test image",
        docker_test_image(),
        DOCKER_FIX,
    ) else {
        return;
    };
    let has_user = Command::new("getent")
        .args(["passwd", &USER.to_string()])
        .output()
        .is_ok_and(|o| o.status.success());
    if require(
        "a host account with uid 1000 and setpriv",
        if has_user && Command::new("setpriv").arg("--version").output().is_ok() {
            Ok(())
        } else {
            Err("uid 1000 has no account or setpriv is missing".to_string())
        },
        "useradd -u 1000 -m stockade-user; apt-get install util-linux",
    )
    .is_none()
    {
        return;
    }
    let docker_gid = std::fs::metadata("/var/run/docker.sock").unwrap().gid();
    let runtime = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(runtime.path(), Some(USER), Some(USER)).unwrap();
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

    // Root's sandbox, whose socket the user and the user's sandbox must not reach.
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args([
            "create",
            "--provider",
            "docker",
            "--image",
            &image,
            "--json",
        ])
        .env_remove("STOCKADE_PROVIDER")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let root_id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let root_sock = format!("/run/stockade-docker/{root_id}/agent.sock");
    assert!(std::path::Path::new(&root_sock).exists(), "{root_sock}");

    let code = format!(
        r#"
import os, socket
def tryit(name, f):
    try:
        f(); print('BREACH', name)
    except OSError as e:
        print('refused', name, type(e).__name__)
def connect(p):
    s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(p)
    s.sendall(b'\0\0\0\x10{{"hello":1}}'); got = s.recv(64)
    if not got: raise ConnectionResetError('closed')
tryit('other', lambda: connect('{root_sock}'))
tryit('own', lambda: connect('/.stockade/agent.sock'))
print('uid', os.getuid())
"#
    );
    let out = as_user(
        runtime.path(),
        docker_gid,
        &[
            "run",
            "--provider",
            "docker",
            "--image",
            &image,
            "--",
            "python3",
            "-c",
            &code,
        ],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("BREACH"), "{stdout}");
    assert_eq!(stdout.matches("refused").count(), 2, "{stdout}{stderr}");
    // The user's sandboxes live in its runtime directory, private to it.
    let dir = runtime.path().join("stockade-docker");
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (USER, 0o700));

    // From the host, the user cannot reach root's agent either.
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={USER}"),
            &format!("--regid={USER}"),
            &format!("--groups={docker_gid}"),
            "--",
            "/usr/bin/python3",
            "-c",
            &format!(
                "import socket\ntry:\n    socket.socket(socket.AF_UNIX).connect('{root_sock}'); print('BREACH')\nexcept OSError as e:\n    print('refused', e)"
            ),
        ])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).starts_with("refused"),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["rm", "--provider", "docker", &root_id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A docker sandbox whose container exited under it (dockerd restarted, or the
/// container was killed) once could not be removed: `rm` answered that it died and
/// to run `rm`, and the exited container and its host directory stayed. `rm` removes
/// both now.
#[test]
fn a_docker_sandbox_whose_container_died_is_removed_by_rm() {
    if !require_root("a_docker_sandbox_whose_container_died_is_removed_by_rm") {
        return;
    }
    let Some(image) = require(
        "dockerd and the docker test image",
        docker_test_image(),
        DOCKER_FIX,
    ) else {
        return;
    };
    let stockade = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_stockade"))
            .args(args)
            .env_remove("STOCKADE_PROVIDER")
            .env_remove("STOCKADE_HOST")
            .output()
            .unwrap()
    };
    let out = stockade(&[
        "create",
        "--provider",
        "docker",
        "--image",
        &image,
        "--timeout",
        "120",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let name = format!("stockade-{id}");
    assert!(
        Command::new("/usr/bin/docker")
            .args(["kill", &name])
            .output()
            .unwrap()
            .status
            .success()
    );
    let dir = std::path::Path::new(stockade::docker::DEFAULT_STATE_ROOT).join(&id);
    let out = stockade(&["rm", "--provider", "docker", &id]);
    assert!(
        out.status.success(),
        "rm of a sandbox whose container died: {}",
        text(&out.stderr)
    );
    let left = Command::new("/usr/bin/docker")
        .args(["inspect", &name])
        .output()
        .unwrap();
    assert!(!left.status.success(), "the exited container {name} stayed");
    assert!(!dir.exists(), "{} stayed", dir.display());
}
