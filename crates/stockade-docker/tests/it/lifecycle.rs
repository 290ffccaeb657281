//! Create, exec, destroy; reporting; images; errors; gc.

use crate::*;
use stockade_core::ExecRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_exec_destroy_and_report() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let out = sh(&sb, "id -u; id -g; echo $HOME; pwd; hostname", 30_000).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1000\n1000\n/tmp\n/tmp\nsandbox\n");
    let walls = &sb.info().applied;
    assert!(walls.iter().all(|w| w.enforced), "{walls:?}");
    let applied = walls
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    for want in [
        "read-only",
        "network: none",
        "no swap",
        "pids 64",
        "capabilities: the code has none",
        "seccomp",
        "landlock",
        "0700",
    ] {
        assert!(applied.contains(want), "applied lacks {want:?}: {applied}");
    }
    let id = sb.id().to_string();
    let again = provider().inspect(&id).await.unwrap();
    assert_eq!(again.applied, sb.info().applied);
    assert!(provider().list().await.unwrap().iter().any(|i| i.id == id));
    sb.destroy().await.unwrap();
    sb.destroy().await.expect("destroy is idempotent");
    assert!(!container_exists(&id), "container of {id} left behind");
    assert!(
        !std::path::Path::new("/run/stockade-docker")
            .join(&id)
            .exists()
    );
}

/// A socket file in `dir` that nobody listens on (a stopped dockerd's), made by another
/// process: a listener bound here could be inherited for a moment by a child another
/// test forks, and accept.
fn stopped_socket(dir: &std::path::Path) -> std::path::PathBuf {
    let stopped = dir.join("stopped.sock");
    let made = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
        ])
        .arg(&stopped)
        .status()
        .unwrap();
    assert!(made.success() && stopped.exists());
    stopped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_missing_or_stopped_is_unavailable_with_a_fix() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("docker.sock");
    let stopped = stopped_socket(dir.path());
    for (sock, want) in [
        (missing, "dockerd is not running"),
        (stopped, "dockerd is stopped"),
    ] {
        let p = Arc::new(DockerProvider::from(
            DockerLauncher::new().with_socket(&sock),
        ));
        let err = Sandbox::create(p.clone(), spec("debian"), CreateOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), stockade_core::ErrorCode::Unavailable, "{err}");
        let msg = err.to_string();
        assert!(msg.contains(want) && msg.contains("start dockerd"), "{msg}");
        let checks = p.probe().await.unwrap();
        assert!(
            checks
                .iter()
                .any(|c| c.name == "dockerd" && !c.ok && c.detail.contains(want)),
            "{checks:?}"
        );
    }
}

/// An exec that ran to its end keeps its outcome when dockerd stops answering: after
/// the exec only the sandbox's own state is asked (its egress denials), not dockerd.
/// (A provider on a socket nobody listens on, with the real provider's state, is the
/// host whose dockerd went away; stopping the real one would stop every other test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_keeps_its_outcome_when_dockerd_stops_answering() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let dir = tempfile::tempdir().unwrap();
    let stopped = stopped_socket(dir.path());
    let blind = DockerProvider::from(
        DockerLauncher::new()
            .with_socket(&stopped)
            .with_state_root(stockade_core::host::runtime_dir("stockade-docker")),
    );
    let out = blind
        .exec(
            sb.id(),
            stockade_core::CheckedRequest::new(ExecRequest::new(["/bin/sh", "-c", "echo ran"]))
                .unwrap(),
            stockade_core::ExecIo::none(),
        )
        .await
        .expect("the exec ran; its outcome is not lost to an unreachable dockerd");
    assert_eq!(text(&out.stdout), "ran\n");
    assert_eq!(out.exit_code, 0);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_without_image_is_refused_clearly() {
    let Some(_image) = image() else { return };
    let err = Sandbox::create(provider(), SandboxSpec::default(), CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), stockade_core::ErrorCode::InvalidSpec);
    // Names the field, not a CLI flag: SDK users see this message too.
    assert!(
        err.to_string()
            .contains("image: the docker provider cannot run without an image"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_killed_under_an_exec_is_reported_not_hung() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let name = stockade_docker::container_name(sb.id());
    let killer = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        std::process::Command::new("/usr/bin/docker")
            .args(["kill", &name])
            .output()
            .unwrap()
    });
    let mut req = ExecRequest::new(["/bin/sh", "-c", "sleep 60"]);
    req.timeout_ms = Some(60_000);
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(std::time::Duration::from_secs(20), sb.exec(req))
        .await
        .expect("the exec hung after its container was killed")
        .unwrap_err();
    assert!(killer.await.unwrap().status.success());
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let msg = err.to_string();
    assert!(
        msg.contains("died under us") && msg.contains("signal 9"),
        "{msg}"
    );
    // Later calls say the same; gc reaps the dead container by its label.
    let again = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
    assert!(again.to_string().contains("died under us"), "{again}");
    let report = provider().gc().await.unwrap();
    assert!(report.reaped.contains(&sb.id().to_string()), "{report:?}");
    assert!(!container_exists(sb.id()));
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_death_and_lifetime_remove_the_container() {
    let Some(image) = image() else { return };
    let mut owner = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let p = provider();
    let a = Sandbox::create(
        p.clone(),
        spec(&image),
        CreateOptions {
            owner_pid: Some(owner.id()),
        },
    )
    .await
    .unwrap();
    let mut short = spec(&image);
    short.timeout_secs = 2;
    let b = Sandbox::create(p.clone(), short, CreateOptions::default())
        .await
        .unwrap();
    owner.kill().unwrap();
    owner.wait().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (container_exists(a.id()) || container_exists(b.id()))
        && std::time::Instant::now() < until
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        !container_exists(a.id()),
        "owner died but {} lives on",
        a.id()
    );
    assert!(
        !container_exists(b.id()),
        "lifetime passed but {} lives on",
        b.id()
    );
    for id in [a.id(), b.id()] {
        assert!(
            !std::path::Path::new("/run/stockade-docker")
                .join(id)
                .exists()
        );
    }
    a.destroy().await.unwrap();
    b.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_missing_from_dockerd_is_loaded_from_the_stockade_store() {
    let Some(_) = image() else { return };
    let Some(base) = require(
        "the Debian test rootfs",
        stockade_testkit::debian_test_image(),
        stockade_testkit::DEBIAN_FIX,
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    stockade_testkit::oci_layout(
        &layout,
        &base,
        &[("srv/marker", b"from the store\n")],
        serde_json::json!({"Env": ["FROM_IMAGE=yes"], "WorkingDir": "/srv"}),
        "v1",
    );
    let store = stockade_image::Store::open(dir.path().join("images")).unwrap();
    let reference = format!("stockade-test/from-store:{}", std::process::id());
    stockade_image::import(&store, &layout, Some(&reference)).unwrap();
    let p = Arc::new(DockerProvider::from(
        DockerLauncher::new().with_image_store(dir.path().join("images")),
    ));
    let mut lines = Vec::new();
    let source = p
        .launcher()
        .ensure_image(&reference, &mut |l: &str| lines.push(l.to_string()))
        .await
        .unwrap();
    assert_eq!(source, stockade_docker::image::Source::Store, "{lines:?}");
    assert!(lines[0].contains("image store"), "{lines:?}");
    let sb = Sandbox::create(
        p.clone(),
        spec(&reference),
        CreateOptions {
            owner_pid: Some(std::process::id()),
        },
    )
    .await
    .unwrap();
    let out = sh(&sb, "cat marker; echo $FROM_IMAGE", 30_000).await;
    assert_eq!(
        text(&out.stdout),
        "from the store\nyes\n",
        "{}",
        text(&out.stderr)
    );
    sb.destroy().await.unwrap();
    let rmi = std::process::Command::new("/usr/bin/docker")
        .args(["rmi", &reference])
        .output()
        .unwrap();
    assert!(
        rmi.status.success(),
        "{}",
        String::from_utf8_lossy(&rmi.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_execs_leak_no_pids() {
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    // The pids cgroup counts the agent's threads too (one per connection, which may
    // linger a moment under load), so the cap leaves room for them; 40 execs still
    // exceed it, so a shim leaked per exec would stop this loop early.
    s.limits.pids = 32;
    let sb = sandbox(s).await;
    // Each exec's shim must be reaped.
    for i in 0..40 {
        let mut req = ExecRequest::new(["/bin/true"]);
        req.timeout_ms = Some(10_000);
        let out = tokio::time::timeout(std::time::Duration::from_secs(15), sb.exec(req))
            .await
            .unwrap_or_else(|_| panic!("exec {i} hung"))
            .unwrap_or_else(|e| panic!("exec {i}: {e}"));
        assert_eq!(out.exit_code, 0, "exec {i}: {}", text(&out.stderr));
    }
    // Only the agent and this check (shim, sh, ls, wc; a shim of the last exec may
    // still await its reaping) are left. Under load PID 1 may not have reaped the last
    // few shims yet, so the count gets 10 s to settle; a leaked process never does.
    let mut seen = String::new();
    for _ in 0..20 {
        let out = sh(
            &sb,
            "ls -d /proc/[0-9]* | wc -l; cat /proc/[0-9]*/stat 2>/dev/null | cut -d' ' -f2,3 | tr '\\n' ' '",
            10_000,
        )
        .await;
        seen = text(&out.stdout);
        let n: u32 = seen.lines().next().unwrap_or("").trim().parse().unwrap();
        if n <= 6 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let n: u32 = seen.lines().next().unwrap_or("").trim().parse().unwrap();
    assert!(
        n <= 6,
        "{n} processes in the sandbox after 40 execs: {seen}"
    );
    sb.destroy().await.unwrap();
}
