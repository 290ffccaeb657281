//! Escape attempts against the docker provider. Each is written so that a breach
//! fails the test.

use std::time::{Duration, Instant};

use stockade_core::{ErrorCode, ExecRequest};

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_is_unprivileged_with_no_capabilities() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let out = sh(
        &sb,
        "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
        30_000,
    )
    .await;
    let s = text(&out.stdout);
    for want in [
        "Uid:\t1000\t1000\t1000\t1000",
        "Gid:\t1000\t1000\t1000\t1000",
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(s.contains(want), "missing {want:?} in:\n{s}");
    }
    // setuid(0) and friends fail; so does any setuid binary the image has.
    let out = py(
        &sb,
        "import os\nfor f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0])):\n    try:\n        f(); print('ESCALATED')\n    except PermissionError:\n        print('refused')",
        30_000,
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "refused\nrefused\nrefused\n",
        "{}",
        text(&out.stderr)
    );
    let out = sh(
        &sb,
        "for b in /bin/su /usr/bin/su /usr/bin/passwd /usr/bin/newgrp /bin/mount; do [ -x $b ] && $b -c id root </dev/null 2>&1; done; id -u",
        30_000,
    )
    .await;
    assert!(
        text(&out.stdout).trim_end().ends_with("1000") && !text(&out.stdout).contains("uid=0"),
        "a setuid binary gave root: {}",
        text(&out.stdout)
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_socket_config_and_process_are_out_of_reach() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    // The socket would let the code start an exec without a deadline, as root's child.
    let code = r#"
import os, socket, signal
def tryit(name, f):
    try:
        f(); print('BREACH', name)
    except OSError as e:
        print('refused', name, type(e).__name__)
def connect():
    s = socket.socket(socket.AF_UNIX); s.connect('/.stockade/agent.sock')
tryit('connect', connect)
tryit('listdir', lambda: os.listdir('/.stockade'))
tryit('config', lambda: open('/.stockade/config.json').read())
tryit('write', lambda: open('/.stockade/x', 'w'))
tryit('agent-environ', lambda: open('/proc/1/environ').read())
tryit('agent-mem', lambda: open('/proc/1/mem', 'rb').read(1))
tryit('agent-root', lambda: os.listdir('/proc/1/root/.stockade'))
tryit('agent-fd', lambda: os.listdir('/proc/1/fd'))
tryit('kill-agent', lambda: os.kill(1, signal.SIGKILL))
tryit('stop-agent', lambda: os.kill(1, signal.SIGSTOP))
tryit('kill-shim', lambda: os.kill(os.getppid(), signal.SIGKILL))
"#;
    let out = py(&sb, code, 30_000).await;
    let s = text(&out.stdout);
    assert!(!s.contains("BREACH"), "{s}\n{}", text(&out.stderr));
    assert_eq!(
        s.matches("refused").count(),
        11,
        "{s}\n{}",
        text(&out.stderr)
    );
    // ptrace (strace/gdb are not in the image; python has no ptrace): the agent is not
    // dumpable and runs as another uid, and seccomp refuses ptrace anyway.
    let out = sh(&sb, "cat /proc/1/status | grep -E '^(Uid|State)'", 30_000).await;
    assert!(
        text(&out.stdout).contains("Uid:\t0"),
        "{}",
        text(&out.stdout)
    );
    // File operations run as the sandbox user too.
    for op in [
        sb.read("/.stockade/config.json").await.map(drop),
        sb.ls("/.stockade").await.map(drop),
        sb.write("/.stockade/evil", "x").await,
        sb.download("/.stockade").await.map(drop),
    ] {
        let err = op.expect_err("a file operation reached the agent's directory");
        assert!(
            matches!(
                err.code(),
                ErrorCode::PolicyDenied | ErrorCode::NotFound | ErrorCode::InvalidSpec
            ),
            "{err}"
        );
    }
    // The agent still serves.
    assert_eq!(text(&sh(&sb, "echo alive", 30_000).await.stdout), "alive\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_kills_the_whole_process_tree() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let start = Instant::now();
    // Detached children (setsid, double fork, ignoring SIGTERM/SIGHUP) must die too.
    let out = sh(
        &sb,
        "trap '' TERM HUP; (setsid sh -c 'trap \"\" TERM HUP; while :; do sleep 1; done' &) ; (sh -c 'sleep 1000' &) ; while :; do :; done",
        1_000,
    )
    .await;
    assert!(out.timed_out, "{out:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // Only the agent and this check's own processes are left.
    let out = sh(
        &sb,
        "for p in /proc/[0-9]*; do [ -r $p/cmdline ] && tr '\\0' ' ' < $p/cmdline && echo; done",
        30_000,
    )
    .await;
    let s = text(&out.stdout);
    assert!(
        !s.contains("sleep"),
        "processes outlived the deadline:\n{s}"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_hits_the_pids_cap_and_the_sandbox_survives() {
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    s.limits.pids = 32;
    let sb = sandbox(s).await;
    let out = py(
        &sb,
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(600); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('capped at', n, type(e).__name__, flush=True)\ntime.sleep(600)",
        5_000,
    )
    .await;
    // The deadline takes the whole tree down, freeing the pids for the next exec.
    assert!(out.timed_out, "{out:?}");
    let s = text(&out.stdout);
    let n: u32 = s
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no cap reached: {s} {}", text(&out.stderr)));
    assert!(n < 32, "forked {n} processes past a cap of 32");
    assert_eq!(text(&sh(&sb, "echo alive", 30_000).await.stdout), "alive\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_writes_outside_tmp_no_network_no_host_secrets() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let code = r#"
import os, socket
for p in ('/pwned', '/usr/pwned', '/etc/passwd', '/proc/sys/kernel/hostname', '/sys/fs/cgroup/pwned', '/dev/shm/../pwned'):
    try:
        open(p, 'w').write('x'); print('WROTE', p)
    except OSError:
        print('refused', p)
for h in ('172.17.0.1', '10.0.2.2', '1.1.1.1'):
    try:
        socket.create_connection((h, 80), timeout=1); print('CONNECTED', h)
    except OSError:
        print('blocked', h)
print(sorted(i[1] for i in socket.if_nameindex()))
for p in ('/run/stockade-docker', '/var/run/docker.sock', '/root'):
    print('exists' if os.path.exists(p) else 'absent', p)
"#;
    let out = py(&sb, code, 30_000).await;
    let s = text(&out.stdout);
    assert!(!s.contains("WROTE") && !s.contains("CONNECTED"), "{s}");
    assert!(s.contains("['lo']"), "interfaces beyond loopback: {s}");
    assert!(
        s.contains("absent /run/stockade-docker") && s.contains("absent /var/run/docker.sock"),
        "{s}"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_flood_is_capped_on_both_streams() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let mut req = ExecRequest::new([
        "/bin/sh",
        "-c",
        "head -c 5000000 /dev/zero; head -c 3000000 /dev/zero >&2",
    ]);
    req.timeout_ms = Some(30_000);
    req.output_limit_bytes = 1 << 16;
    let out = sb.exec(req).await.unwrap();
    assert_eq!(out.stdout.len(), 1 << 16);
    assert_eq!(out.stderr.len(), 1 << 16);
    assert_eq!(out.stdout_dropped, 5_000_000 - (1 << 16));
    assert_eq!(out.stderr_dropped, 3_000_000 - (1 << 16));
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_copies_refuse_traversal() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    // `set_path` refuses `..`; write the name bytes directly.
    h.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"../../etc/pwn");
    h.set_cksum();
    b.append(&h, &b"x"[..]).unwrap();
    let err = sb
        .upload("/tmp", b.into_inner().unwrap())
        .await
        .unwrap_err();
    assert!(err.to_string().contains(".."), "{err}");
    for path in ["/tmp/../etc/pwn", "/tmp/../../.stockade/x"] {
        assert!(sb.write(path, "x").await.is_err(), "wrote {path}");
    }
    let out = sh(&sb, "ls /etc/pwn /.stockade/x 2>&1; true", 30_000).await;
    assert!(
        !text(&out.stdout).contains("/etc/pwn\n"),
        "{}",
        text(&out.stdout)
    );
    sb.destroy().await.unwrap();
}

// Issue 14, finding 11: code running as root (`--user 0`) reaches the agent's
// socket directory; the agent must refuse connections from inside the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_running_as_root_cannot_use_the_agent_socket() {
    use stockade_agent_proto::{ClientMsg, PROTOCOL_VERSION, codec};
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    s.user = stockade_core::spec::User { uid: 0, gid: 0 };
    let sb = sandbox(s).await;
    let mut frames = codec::encode(&ClientMsg::Hello {
        version: PROTOCOL_VERSION,
    })
    .unwrap();
    frames.extend(
        codec::encode(&ClientMsg::Exec(ExecRequest::new([
            "/bin/sh",
            "-c",
            "echo escaped > /tmp/inner-exec",
        ])))
        .unwrap(),
    );
    let hex: String = frames.iter().map(|b| format!("{b:02x}")).collect();
    let code = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(10)\n\
         try:\n    s.connect('/.stockade/agent.sock')\nexcept OSError as e:\n    print('unreachable', e); raise SystemExit\n\
         got = b''\n\
         try:\n    s.sendall(bytes.fromhex('{hex}'))\n    while len(got) < 4096:\n        b = s.recv(4096)\n        if not b: break\n        got += b\nexcept OSError as e:\n    print('error', e)\n\
         print('answered', len(got))"
    );
    let out = py(&sb, &code, 30_000).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("unreachable") || stdout.contains("answered 0"),
        "the agent served a connection from inside the container:\n{stdout}{}",
        text(&out.stderr)
    );
    let check = sh(&sb, "cat /tmp/inner-exec 2>/dev/null || echo none", 30_000).await;
    assert_eq!(
        text(&check.stdout),
        "none\n",
        "an exec ran through the agent socket"
    );
    // The agent still serves the provider.
    assert_eq!(text(&sh(&sb, "echo alive", 30_000).await.stdout), "alive\n");
    sb.destroy().await.unwrap();
}

// Issue 14, finding 11: what the code can read of PID 1 names no host path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid1_reveals_no_host_path() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let out = sh(
        &sb,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        30_000,
    )
    .await;
    let s = text(&out.stdout);
    for host in [
        "/run/stockade-docker",
        "/var/cache",
        "/target/",
        "/work/",
        "/root/",
    ] {
        assert!(
            !s.contains(host),
            "a command line inside names {host}:\n{s}"
        );
    }
    sb.destroy().await.unwrap();
}

// Issue 14, finding 7: what an exec leaves in the background ends with it, and the
// exec's tree dies with its shim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_processes_end_with_their_exec() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let out = sh(
        &sb,
        "sleep 1000 & (setsid sleep 999 &) ; nohup sleep 998 >/dev/null 2>&1 & echo started",
        30_000,
    )
    .await;
    assert_eq!(text(&out.stdout), "started\n", "{out:?}");
    let ps = sh(
        &sb,
        "for p in /proc/[0-9]*; do [ $p = /proc/$$ ] || cat $p/comm; done 2>/dev/null",
        30_000,
    )
    .await;
    assert!(
        !text(&ps.stdout).contains("sleep"),
        "processes outlived their exec's result:\n{}",
        text(&ps.stdout)
    );
    let adj = sh(
        &sb,
        "cat /proc/$PPID/oom_score_adj /proc/self/oom_score_adj",
        30_000,
    )
    .await;
    let adj: Vec<i32> = text(&adj.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(
        adj.len() == 2 && adj[0] < adj[1] && adj[1] == 1000,
        "the shim (the exec's parent) must be the least likely OOM victim, the code the most: {adj:?}"
    );
    sb.destroy().await.unwrap();
}

/// Images whose `etc`, `tmp`, `proc`, `dev` or nested entries are symlinks to `/`,
/// `/proc` or `../../..`, loaded from the stockade image store: python inside reads
/// through each and finds neither the host's secret file nor the test process. A
/// runtime that refuses such an image (runc refuses some mount destinations that are
/// symlinks) fails closed, which is fine; one that runs it must show no host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_symlinks_never_reach_the_host() {
    use std::os::unix::fs::PermissionsExt;
    use stockade_testkit::LayerEntry::{Dir, Symlink};
    if image().is_none() {
        return;
    }
    let Some(debian) = require(
        "the Debian test image",
        stockade_testkit::debian_test_image(),
        stockade_testkit::DEBIAN_FIX,
    ) else {
        return;
    };
    let host = tempfile::tempdir().unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = format!("host-secret-{}", std::process::id());
    let secret_path = host.path().join("secret.txt");
    std::fs::write(&secret_path, &secret).unwrap();
    std::fs::set_permissions(&secret_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = stockade_image::Store::open(host.path().join("images")).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(DockerProvider::from(
        DockerLauncher::new().with_image_store(store.root()),
    ));
    let pid = std::process::id();
    // (name, attack layer, whether python can still run in it)
    let images: Vec<(String, Vec<stockade_testkit::LayerEntry>, bool)> = vec![
        (
            format!("localhost/stockade-attack-{pid}/etc:1"),
            vec![
                Symlink("etc", "/"),
                Symlink("usr/local", "/proc"),
                Dir("srv"),
                Symlink("srv/deep", "../../.."),
            ],
            true,
        ),
        (
            format!("localhost/stockade-attack-{pid}/top:1"),
            vec![
                Symlink("proc", "/proc"),
                Symlink("dev", "../../.."),
                Symlink("etc", "/proc"),
                Symlink("bin", "/"),
            ],
            true,
        ),
        // runc refuses this one (its /tmp tmpfs target does not resolve): fine.
        (
            format!("localhost/stockade-attack-{pid}/tmp:1"),
            vec![Symlink("tmp", "/")],
            true,
        ),
        // No python without /usr: probed with the (static) agent's file operations.
        (
            format!("localhost/stockade-attack-{pid}/usr:1"),
            vec![Symlink("usr", "/"), Symlink("bin", "../../..")],
            false,
        ),
    ];
    let secret_rel = secret_path.strip_prefix("/").unwrap().display().to_string();
    let own_cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let probe = format!(
        r#"
import os
pid = {pid}
leaks = []
for pre in ["", "/etc", "/etc/etc", "/tmp", "/proc", "/dev", "/usr/local", "/srv/deep"]:
    for p in [pre + "{secret}", pre + "/secret.txt", pre + "/proc/%d/cmdline" % pid, pre + "/%d/cmdline" % pid]:
        try:
            data = open(p, "rb").read()
        except OSError:
            continue
        if b"host-secret" in data or data == bytes.fromhex("{own}"):
            leaks.append(p)
print("leaks", leaks)
"#,
        secret = secret_path.display(),
        own = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    for (name, entries, python) in &images {
        let layout = host.path().join(name.replace([':', '/'], "-"));
        stockade_testkit::oci_layout_entries(
            &layout,
            &debian,
            entries,
            serde_json::json!({"Env": ["PATH=/usr/bin:/bin"]}),
            name,
        );
        stockade_image::import(&store, &layout, None).unwrap();
        let created = Sandbox::create(
            provider.clone(),
            spec(name),
            CreateOptions {
                owner_pid: Some(pid),
            },
        )
        .await;
        let outcome = match created {
            Ok(sb) => {
                let out = if *python {
                    Some(py(&sb, &probe, 30_000).await)
                } else {
                    None
                };
                let mut found = Vec::new();
                for pre in [
                    "",
                    "/etc",
                    "/usr",
                    "/bin",
                    "/tmp",
                    "/proc",
                    "/dev",
                    "/usr/local",
                ] {
                    for suffix in [
                        secret_rel.clone(),
                        "secret.txt".into(),
                        format!("proc/{pid}/cmdline"),
                        format!("{pid}/cmdline"),
                    ] {
                        let p = format!("{pre}/{suffix}");
                        if let Ok(data) = sb.read(&p).await
                            && (data == secret.as_bytes() || data == own_cmdline)
                        {
                            found.push(p);
                        }
                    }
                }
                // File operations work in this image (else the probe proves nothing).
                let listed = sb
                    .file(stockade_core::FileOp::Ls { path: "/".into() })
                    .await;
                let seen = if listed.is_err() && *python {
                    let o = sh(&sb, "id; ls -lad / /bin /etc /tmp; ls -la / | head", 10_000).await;
                    format!("{}{}", text(&o.stdout), text(&o.stderr))
                } else {
                    String::new()
                };
                sb.destroy().await.unwrap();
                assert!(
                    found.is_empty(),
                    "{name}: host files reached through {found:?}"
                );
                assert!(
                    listed.is_ok(),
                    "{name}: file operations fail: {listed:?}\n{seen}"
                );
                out
            }
            Err(e) => {
                eprintln!("{name}: refused by the runtime: {e}");
                None
            }
        };
        let _ = std::process::Command::new("/usr/bin/docker")
            .args(["image", "rm", "-f", name])
            .output();
        if let Some(out) = outcome {
            let s = text(&out.stdout);
            assert!(
                s.contains("leaks []"),
                "{name}: {s} stderr: {}",
                text(&out.stderr)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_inside_cannot_replace_the_agents_socket() {
    let Some(image) = image() else { return };
    let mut spec = spec(&image);
    spec.user = stockade_core::spec::User { uid: 0, gid: 0 };
    let sb = sandbox(spec).await;
    stockade_testkit::assert_agent_socket_cannot_be_replaced(&sb).await;
    sb.destroy().await.unwrap();
}
