//! Kernel surface a sandbox must not reach: socket address families it does not need
//! (vsock reaches the hypervisor, alg/packet/netlink are large attack surfaces) and
//! kernel resources shared with other sandboxes and the host (native AIO events are
//! machine-wide, POSIX message queues are charged per uid).

use stockade::SandboxSpec;

use crate::*;

#[tokio::test]
async fn unneeded_socket_families_and_shared_kernel_resources_are_refused() {
    if !require_root("unneeded_socket_families_and_shared_kernel_resources_are_refused") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let out = py(&sb, stockade_testkit::KERNEL_SURFACE_PROBE, 30_000).await;
    stockade_testkit::assert_kernel_surface_blocked(&text(&out.stdout), &text(&out.stderr));
    destroy_clean(sb).await;
}

#[tokio::test]
async fn one_sandbox_cannot_take_the_machines_aio_events_from_another_or_the_host() {
    if !require_root("one_sandbox_cannot_take_the_machines_aio_events_from_another_or_the_host") {
        return;
    }
    // The first sandbox asks for every AIO event of the machine (fs.aio-max-nr) and
    // holds on to whatever it got while the second sandbox and the host ask for some.
    let greedy = "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n\
        got = 0\nfor _ in range(64):\n    ctx = ctypes.c_ulong(0)\n    if libc.syscall(206, 65536, ctypes.byref(ctx)) == 0: got += 1\n    else: break\n\
        print('got', got, errno.errorcode.get(ctypes.get_errno(), 0))";
    let a = sandbox(SandboxSpec::default()).await;
    let b = sandbox(SandboxSpec::default()).await;
    let mut req = stockade::ExecRequest::new([
        "/usr/bin/python3",
        "-u",
        "-c",
        &format!("{greedy}\nimport time; time.sleep(30)"),
    ]);
    req.timeout_ms = Some(8_000);
    let holder = {
        let a = a.clone();
        tokio::spawn(async move { a.exec(req).await.expect("exec") })
    };
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let out_b = py(&b, greedy, 10_000).await;
    let sb_b = text(&out_b.stdout);
    assert!(
        sb_b.starts_with("got 0 ENOSYS"),
        "sandbox b: {sb_b} {}",
        text(&out_b.stderr)
    );
    // The host (root, no seccomp) can still set up an AIO context.
    let host = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nctx = ctypes.c_ulong(0)\n\
             r = libc.syscall(206, 128, ctypes.byref(ctx))\nprint(r, errno.errorcode.get(ctypes.get_errno(), 0))",
        ])
        .output()
        .expect("run the host's python3");
    let host = text(&host.stdout);
    assert!(host.starts_with("0 "), "the host's io_setup failed: {host}");
    let out_a = holder.await.unwrap();
    let sa = text(&out_a.stdout);
    assert!(
        sa.starts_with("got 0 ENOSYS"),
        "sandbox a: {sa} {}",
        text(&out_a.stderr)
    );
    destroy_clean(a).await;
    destroy_clean(b).await;
}

/// A machine on the host's LAN: a veth pair into a network namespace of its own, with a
/// TCP service on the far end. Removed on drop.
struct LanPeer {
    netns: String,
    link: String,
    server: std::process::Child,
    addr: String,
    port: u16,
}

impl LanPeer {
    /// `net` is the /24 (three octets) the host and the peer share: `.1` is the host's
    /// side, `.2` the peer.
    fn start(net: &str) -> LanPeer {
        let pid = std::process::id();
        let netns = format!("stk-lan-{pid}");
        let link = format!("stkl{}", pid % 100_000);
        let peer = format!("stkp{}", pid % 100_000);
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip")
                .args(args)
                .output()
                .expect("run ip");
            assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
        };
        ip(&["netns", "add", &netns]);
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &netns]);
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &link]);
        ip(&["link", "set", &link, "up"]);
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &peer,
        ]);
        ip(&["-n", &netns, "link", "set", &peer, "up"]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        let addr = format!("{net}.2");
        let mut server = std::process::Command::new("ip")
            .args(["netns", "exec", &netns, "python3", "-u", "-c"])
            .arg(format!(
                "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 s.bind(('{addr}', 0)); s.listen(8); print(s.getsockname()[1], flush=True)\n\
                 while True:\n    c, _ = s.accept(); c.sendall(b'LAN SECRET\\n'); c.close()"
            ))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the LAN peer's service");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(server.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port = line.trim().parse().expect("the LAN peer's port");
        LanPeer {
            netns,
            link,
            server,
            addr,
            port,
        }
    }
}

impl Drop for LanPeer {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.link])
            .output();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

#[tokio::test]
async fn network_egress_does_not_reach_the_hosts_lan() {
    if !require_root("network_egress_does_not_reach_the_hosts_lan") {
        return;
    }
    if std::process::Command::new("slirp4netns")
        .arg("--version")
        .output()
        .is_err()
    {
        let msg = "network egress needs slirp4netns: apt-get install slirp4netns";
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("SKIPPED: {msg}");
        return;
    }
    // A documentation range, like the host network of this project's machines: no
    // fixed list of private ranges covers it; only the host's routes say it is a LAN.
    let lan = LanPeer::start("198.51.100");
    // The host itself reaches the peer: the LAN is real.
    let mut probe =
        std::net::TcpStream::connect((lan.addr.as_str(), lan.port)).expect("host to peer");
    let mut got = String::new();
    std::io::Read::read_to_string(&mut probe, &mut got).unwrap();
    assert_eq!(got, "LAN SECRET\n");
    let sb = sandbox(SandboxSpec {
        network: stockade::spec::Network::Egress,
        ..Default::default()
    })
    .await;
    let code = format!(
        "import socket\n\
         s = socket.create_connection(('pypi.org', 443), timeout=10); print('egress ok'); s.close()\n\
         try:\n    c = socket.create_connection(('{}', {}), timeout=3); print('LAN REACHED', c.recv(64))\n\
         except OSError as e: print('lan blocked', e)",
        lan.addr, lan.port
    );
    let out = py(&sb, &code, 30_000).await;
    let s = text(&out.stdout);
    assert!(
        s.contains("egress ok"),
        "no egress: {s} {}",
        text(&out.stderr)
    );
    assert!(
        s.contains("lan blocked"),
        "the sandbox reached the host's LAN: {s} {}",
        text(&out.stderr)
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_sandbox_at_its_pids_cap_refuses_new_work_but_survives() {
    if !require_root("a_sandbox_at_its_pids_cap_refuses_new_work_but_survives") {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.limits.pids = 24;
    let sb = sandbox(spec).await;
    // The code takes every task the cap allows and holds them for a while.
    let hog = "import os, time\nkids = []\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(8); os._exit(0)\n    kids.append(pid)\n\
               print('holding', len(kids), flush=True)\ntime.sleep(8)";
    let mut req = stockade::ExecRequest::new(["/usr/bin/python3", "-c", hog]);
    req.timeout_ms = Some(20_000);
    let holder = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.exec(req).await })
    };
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    // New work while the cap is full: refused or failed, but the agent lives on.
    for _ in 0..3 {
        let mut r = stockade::ExecRequest::new(["/bin/true"]);
        r.timeout_ms = Some(5_000);
        let _ = sb.exec(r).await;
    }
    let held = holder.await.unwrap().expect("the holding exec finishes");
    assert!(
        text(&held.stdout).starts_with("holding"),
        "{} {}",
        text(&held.stdout),
        text(&held.stderr)
    );
    // Once the code's processes are gone the sandbox works again.
    let out = sh(&sb, "echo alive", 10_000).await;
    assert_eq!(text(&out.stdout), "alive\n", "{}", text(&out.stderr));
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_background_server_lives_on_only_when_asked() {
    if !require_root("a_background_server_lives_on_only_when_asked") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let start = |port: u16, background: bool| {
        let mut r = stockade::ExecRequest::new([
            "/bin/sh".to_string(),
            "-c".to_string(),
            format!("python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"),
        ]);
        r.timeout_ms = Some(10_000);
        r.background = background;
        r
    };
    let probe = |port: u16| {
        format!(
            "import socket, time\nfor _ in range(50):\n    try:\n        socket.create_connection(('127.0.0.1', {port}), timeout=1).close(); print('UP'); break\n    except OSError:\n        time.sleep(0.1)\nelse:\n    print('DOWN')"
        )
    };
    // Without asking: the server ends with the exec that started it.
    let out = sb.exec(start(8766, false)).await.unwrap();
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let out = py(&sb, &probe(8766), 20_000).await;
    assert_eq!(text(&out.stdout), "DOWN\n", "a server outlived its exec");
    // Asked: it lives on for later execs, while the exec itself returned at once.
    let out = sb.exec(start(8765, true)).await.unwrap();
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert!(!out.timed_out);
    let out = py(&sb, &probe(8765), 20_000).await;
    assert_eq!(text(&out.stdout), "UP\n", "{}", text(&out.stderr));
    // It is still there a few execs later, and the sandbox ends it at destroy.
    for _ in 0..3 {
        sh(&sb, "true", 5_000).await;
    }
    let out = py(&sb, &probe(8765), 20_000).await;
    assert_eq!(text(&out.stdout), "UP\n", "{}", text(&out.stderr));
    destroy_clean(sb).await;
}
