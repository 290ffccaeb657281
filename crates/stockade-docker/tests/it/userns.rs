//! The code in a docker sandbox is never an account of the host: dockerd's user
//! namespace (userns-remap) maps it to ids of its own, the files it makes in a shared
//! directory are owned by those ids, and a dockerd without one is refused by name.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use stockade_core::host::account_of;
use stockade_core::spec::Mount;
use stockade_core::{ErrorCode, Provider};
use stockade_docker::{DockerLauncher, DockerProvider};

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_code_is_never_a_host_account() {
    let Some(image) = image() else { return };
    let p = provider();
    let (uid, gid) = p.host_ids(1000, 1000).await.unwrap();
    assert_ne!(uid, 1000, "dockerd runs without a user namespace");
    assert_eq!(account_of(uid), None, "host uid {uid} is an account");

    // A directory shared with the code, given to its host ids (as a session's is).
    let ws = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(ws.path(), Some(uid), Some(gid)).unwrap();
    let mut s = spec(&image);
    s.mounts.push(Mount {
        host: ws.path().into(),
        target: "/work".into(),
        writable: true,
    });
    let sb = sandbox(s).await;
    let out = sh(
        &sb,
        "id -u; cat /proc/self/uid_map; echo hi > /work/made && mkdir /work/d && echo WROTE",
        30_000,
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("WROTE"), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout.lines().next(), Some("1000"), "{stdout}");
    // Inside, ids start at 0; on the host, at the remapped root, never at 0.
    let map: Vec<u64> = stdout
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    assert_eq!(map.len(), 3, "uid_map: {stdout}");
    assert_eq!(map[0], 0, "{stdout}");
    assert_ne!(map[1], 0, "uid 0 inside is host root: {stdout}");
    assert!(map[2] <= 65_536, "the whole host range is mapped: {stdout}");
    for made in ["made", "d"] {
        let m = std::fs::metadata(ws.path().join(made)).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{made}");
        assert_eq!(account_of(m.uid()), None, "{made} is a host account's");
    }
    // The sandbox user has no way into what host uid 1000 owns: a writable mount of
    // such a directory is refused at create, saying what to do.
    let theirs = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(theirs.path(), Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(theirs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = spec(&image);
    s.mounts.push(Mount {
        host: theirs.path().into(),
        target: "/work".into(),
        writable: true,
    });
    let err = stockade_core::Sandbox::create(
        p.clone() as std::sync::Arc<dyn Provider>,
        s,
        stockade_core::CreateOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidSpec, "{err}");
    assert!(
        err.to_string().contains(&format!("chown {uid}:{gid}")),
        "{err}"
    );
    sb.destroy().await.unwrap();
}

/// A second dockerd, without a user namespace, on a socket of its own.
struct PlainDockerd {
    child: Child,
    dir: tempfile::TempDir,
}

impl PlainDockerd {
    fn start() -> PlainDockerd {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Not /etc/docker/daemon.json, which asks for userns-remap.
        std::fs::write(d.join("daemon.json"), "{}").unwrap();
        let log = std::fs::File::create(d.join("log")).unwrap();
        let child = Command::new("/usr/sbin/dockerd")
            .arg(format!("--config-file={}", d.join("daemon.json").display()))
            .arg(format!("--data-root={}", d.join("root").display()))
            .arg(format!("--exec-root={}", d.join("exec").display()))
            .arg(format!("--pidfile={}", d.join("pid").display()))
            .arg(format!("--host=unix://{}", d.join("d.sock").display()))
            .args(["--bridge=none", "--iptables=false"])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a second dockerd");
        let d = PlainDockerd { child, dir };
        let until = Instant::now() + Duration::from_secs(60);
        while !Command::new("/usr/bin/docker")
            .arg(format!("--host=unix://{}", d.socket().display()))
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(
                Instant::now() < until,
                "the second dockerd did not answer within 60 s: {}",
                std::fs::read_to_string(d.dir.path().join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        d
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("d.sock")
    }
}

impl Drop for PlainDockerd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dockerd_without_a_user_namespace_is_refused_by_name() {
    let Some(image) = image() else { return };
    let plain = PlainDockerd::start();
    let state = tempfile::tempdir().unwrap();
    let launcher = || {
        DockerLauncher::new()
            .with_socket(plain.socket())
            .with_state_root(state.path())
    };
    let p = std::sync::Arc::new(DockerProvider::from(launcher().allow_host_ids(false)));
    let err = stockade_core::Sandbox::create(
        p.clone() as std::sync::Arc<dyn Provider>,
        spec(&image),
        stockade_core::CreateOptions::default(),
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{msg}");
    for want in [
        "host's user namespace",
        "uid 1000",
        "userns-remap",
        "STOCKADE_DOCKER_HOST_IDS=1",
    ] {
        assert!(msg.contains(want), "{want:?} missing: {msg}");
    }
    if let Some(name) = account_of(1000) {
        assert!(msg.contains(&name), "the account is not named: {msg}");
    }
    // Nothing was made for it.
    assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0);
    let checks = p.probe().await.unwrap();
    let c = checks
        .iter()
        .find(|c| c.name == "user namespace")
        .expect("a user namespace check");
    assert!(
        !c.ok
            && c.fix
                .as_deref()
                .unwrap_or_default()
                .contains("userns-remap"),
        "{c:?}"
    );
    // Allowed by name, the same dockerd passes the check (the sandbox would be the
    // host's uid 1000, as the allowed line of its report says).
    let p = DockerProvider::from(launcher().allow_host_ids(true));
    let checks = p.probe().await.unwrap();
    let c = checks.iter().find(|c| c.name == "user namespace").unwrap();
    assert!(
        c.ok && c.detail.contains("STOCKADE_DOCKER_HOST_IDS=1"),
        "{c:?}"
    );
    assert!(Path::new(&plain.socket()).exists());
}
