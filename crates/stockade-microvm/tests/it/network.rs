//! Network on the microvm provider: `egress` (the public internet, never the host or
//! its networks) and egress policies, the native provider's firewall, resolver, proxy
//! and credentials around the VMM's own network namespace. Real traffic: this machine
//! reaches the package registries (every public name resolves to its egress proxy),
//! nothing else. Each case fails when the escape it tries succeeds.

use std::time::{Duration, Instant};

use stockade_core::spec::{Credential, EgressPolicy, Network};
use stockade_core::{EgressControl, Error, Provider, Snapshotting};

use super::*;

use stockade_testkit::egress::{connect_probe, line};

/// `label` was refused at once: under 1500 ms where the probe waits 3 s (TCG is slow).
fn refused_fast(out: &str, label: &str) {
    stockade_testkit::egress::refused_within(out, label, 1500);
}

fn sandbox_dir(id: &str) -> std::path::PathBuf {
    std::path::Path::new("/run/stockade-microvm").join(id)
}

/// What of a running VM's network lives on the host: its slirp4netns's pid and the
/// network namespace its QEMU runs in (`net:[inode]`).
fn net_parts(id: &str) -> (i32, String) {
    let helper: i32 = std::fs::read_to_string(sandbox_dir(id).join("net/net-helper.pid"))
        .expect("the VM's network helper pid")
        .trim()
        .parse()
        .unwrap();
    let qemu = qemu_of(id).expect("the VM's QEMU process");
    let ns = std::fs::read_link(format!("/proc/{qemu}/ns/net"))
        .unwrap()
        .display()
        .to_string();
    let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        ns,
        host_ns.display().to_string(),
        "QEMU runs in the host's network namespace"
    );
    (helper, ns)
}

fn qemu_of(id: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.starts_with("qemu-system") && cmd.contains(id)).then_some(pid)
    })
}

/// Processes still in network namespace `ns`, and the helper if it still runs.
fn net_leftovers(helper: i32, ns: &str) -> Vec<String> {
    let mut v = Vec::new();
    if std::path::Path::new(&format!("/proc/{helper}")).exists() {
        let cmd = std::fs::read(format!("/proc/{helper}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("slirp4netns") {
            v.push(format!("slirp4netns {helper}"));
        }
    }
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(l) = std::fs::read_link(e.path().join("ns/net"))
            && l.display().to_string() == ns
        {
            v.push(format!(
                "process {} in the VM's network namespace",
                e.file_name().to_string_lossy()
            ));
        }
    }
    v
}

/// Waits (20 s at most) until nothing of the VM's network is left.
async fn assert_net_gone(id: &str, helper: i32, ns: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    while (!net_leftovers(helper, ns).is_empty() || !leftovers(id).is_empty())
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(net_leftovers(helper, ns), Vec::<String>::new());
    assert_eq!(leftovers(id), Vec::<String>::new());
}

/// The host's first resolver (`/etc/resolv.conf`).
fn host_resolver() -> String {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("nameserver "))
        .map(|a| a.trim().to_string())
        .expect("a nameserver in /etc/resolv.conf")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_all_reaches_out_but_never_the_host_or_its_networks() {
    let Some(p) = provider().await else { return };
    // A service on every host address: loopback, the host's own address, docker0.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut s = spec();
    s.network = Network::Egress;
    let sb = vm(&p, s).await;
    let id = sb.id().to_string();
    let applied = sb
        .info()
        .applied
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        applied.contains("one virtio-net device")
            && applied.contains(
                "network: egress through slirp4netns from the VMM's own network namespace"
            ),
        "{applied}"
    );
    let (helper, _) = net_parts(&id);

    // The guest's interface and resolver: the VMM's, configured by PID 1.
    let out = sh(
        &sb,
        "ls /sys/class/net; cat /etc/resolv.conf; cat /proc/net/route",
        30_000,
    )
    .await;
    let o = text(&out.stdout);
    assert!(o.contains("eth0") && o.contains("lo"), "{o}");
    assert!(o.contains("nameserver 10.0.2.3"), "{o}");

    let host = stockade_testkit::host_address();
    let resolver = host_resolver();
    let code = format!(
        "import socket\nprint('resolved:', socket.gethostbyname('pypi.org'))\n{}\n\
         # The host's resolver asked directly (not through the VMM's forwarder).\n\
         q = b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x04pypi\\x03org\\x00\\x00\\x01\\x00\\x01'\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)\n\
         try:\n    u.sendto(q, ({resolver:?}, 53)); u.recv(512); print('host dns: ANSWERED')\n\
         except OSError as e:\n    print('host dns: refused', e)\n",
        connect_probe(&[
            ("pypi", "pypi.org", 80),
            ("host", &host, port),
            ("host ssh", &host, 22),
            ("gateway", "10.0.2.2", port),
            ("dns forwarder", "10.0.2.3", 80),
            ("docker0", "172.17.0.1", port),
            ("metadata", "169.254.169.254", 80),
            ("lan", "192.168.0.1", 80),
            ("ten", "10.0.0.1", 80),
        ])
    );
    let out = py(&sb, &code, 60_000).await;
    let o = text(&out.stdout);
    assert_eq!(out.exit_code, 0, "{o}\n{}", text(&out.stderr));
    assert!(o.contains("resolved: "), "{o}");
    assert_eq!(line(&o, "pypi"), "pypi: ok", "{o}");
    for l in [
        "host",
        "host ssh",
        "docker0",
        "metadata",
        "lan",
        "ten",
        // The VMM's own aliases: its gateway is the namespace's loopback (nothing
        // listens there without a policy), its DNS forwarder answers DNS only.
        "gateway",
        "dns forwarder",
    ] {
        refused_fast(&o, l);
    }
    assert!(line(&o, "host dns").contains("refused"), "{o}");
    assert!(
        listener.accept().is_err(),
        "the host's service received a connection from the VM"
    );
    // A download through the VM (the registry's simple index).
    let out = py(
        &sb,
        "import urllib.request, urllib.error\ntry:\n    r = urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=30)\n    print('status', r.status, len(r.read()))\nexcept urllib.error.HTTPError as e:\n    print('status', e.code)",
        60_000,
    )
    .await;
    let o = text(&out.stdout) + &text(&out.stderr);
    assert!(o.contains("status "), "{o}");

    // A named snapshot keeps the network: a sandbox started from it reaches out
    // through a monitor of its own, and still never the host.
    let home = tempfile::tempdir().unwrap();
    let p2 = std::sync::Arc::new(stockade_microvm::MicrovmProvider::from(
        stockade_microvm::MicrovmLauncher::new().with_home(home.path()),
    ));
    p2.launcher().snapshot(&id, "net").await.unwrap();
    // (It paused and resumed the source: a new monitor, whose namespace may have
    // the old one's number.)
    let (resumed_helper, _) = net_parts(&id);
    assert_ne!(resumed_helper, helper);
    assert!(
        net_leftovers(helper, "-").is_empty(),
        "the paused VM's slirp4netns outlived it"
    );
    let copy = stockade_core::Sandbox::from_snapshot(
        p2.clone() as std::sync::Arc<dyn Provider>,
        "net",
        stockade_core::CreateOptions {
            owner_pid: Some(std::process::id()),
        },
    )
    .await
    .unwrap();
    let (copy_helper, copy_ns) = net_parts(copy.id());
    let code = connect_probe(&[
        ("pypi", "pypi.org", 80),
        ("host", &host, port),
        ("metadata", "169.254.169.254", 80),
    ]);
    let out = py(&copy, &code, 60_000).await;
    let o = text(&out.stdout);
    assert_eq!(line(&o, "pypi"), "pypi: ok", "{o}\n{}", text(&out.stderr));
    refused_fast(&o, "host");
    refused_fast(&o, "metadata");
    let copy_id = copy.id().to_string();
    copy.destroy().await.unwrap();
    assert_net_gone(&copy_id, copy_helper, &copy_ns).await;
    p2.launcher().remove_snapshot("net").await.unwrap();

    // The source resumed after its snapshot, behind a new monitor.
    let (helper, ns) = net_parts(&id);
    let out = py(&sb, &connect_probe(&[("pypi", "pypi.org", 80)]), 60_000).await;
    assert_eq!(line(&text(&out.stdout), "pypi"), "pypi: ok", "{out:?}");
    sb.destroy().await.unwrap();
    assert_net_gone(&id, helper, &ns).await;
    assert!(
        listener.accept().is_err(),
        "the host's service received a connection from a VM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_opens_its_names_refuses_the_rest_changes_live_and_survives_pause_and_fork() {
    let Some(p) = provider().await else { return };
    let mut s = spec();
    s.network = Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into()],
        ..Default::default()
    });
    let sb = vm(&p, s).await;
    let id = sb.id().to_string();
    let out = py(&sb, &stockade_testkit::egress::pypi_only_probe(), 60_000).await;
    stockade_testkit::egress::assert_pypi_only(&out, 1500);

    // Live: the refused name opens, and inspect shows the policy in force.
    sb.set_network(&Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into(), "registry.npmjs.org".into()],
        ..Default::default()
    }))
    .await
    .unwrap();
    let resolve_npm = "import socket\nprint(socket.gethostbyname('registry.npmjs.org'))";
    let out = py(&sb, resolve_npm, 30_000).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let info = p.inspect(&id).await.unwrap();
    assert!(
        info.spec["network"]
            .to_string()
            .contains("registry.npmjs.org"),
        "{}",
        info.spec["network"]
    );
    let err = sb.set_network(&Network::None).await.unwrap_err();
    assert!(err.to_string().contains("empty allowlist"), "{err}");

    // Pause and resume: the VM comes back behind a new monitor of the policy in
    // force (the live change kept), still refusing the rest.
    let (helper, ns) = net_parts(&id);
    sb.pause().await.unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !net_leftovers(helper, &ns).is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        net_leftovers(helper, &ns),
        Vec::<String>::new(),
        "a paused VM keeps its network helper"
    );
    let e = p.launcher().egress_denied(&id, 0).await.unwrap();
    assert!(e.is_empty(), "a paused VM's monitor answered: {e:?}");
    sb.resume().await.unwrap();
    let code = format!(
        "import socket\nprint('npm', socket.gethostbyname('registry.npmjs.org'))\ntry:\n    socket.gethostbyname('deb.debian.org'); print('debian: resolved')\nexcept OSError as e:\n    print('debian: refused', e)\n{}",
        connect_probe(&[
            ("npm", "registry.npmjs.org", 443),
            ("literal", "1.1.1.1", 443)
        ])
    );
    let out = py(&sb, &code, 60_000).await;
    let o = text(&out.stdout);
    assert!(o.contains("npm "), "{o}\n{}", text(&out.stderr));
    assert!(line(&o, "debian").contains("refused"), "{o}");
    assert_eq!(line(&o, "npm"), "npm: ok", "{o}");
    refused_fast(&o, "literal");
    assert!(
        stockade_testkit::egress::denied(&out.egress_denied, "dns", "deb.debian.org"),
        "{:#?}",
        out.egress_denied
    );

    // A fork: the copy has a network of its own (its own namespace and monitor)
    // with the policy in force, and the source's goes on.
    let (helper, _) = net_parts(&id);
    sb.pause().await.unwrap();
    let copies = sb
        .fork(
            1,
            stockade_core::CreateOptions {
                owner_pid: Some(std::process::id()),
            },
        )
        .await
        .unwrap();
    let copy = &copies[0];
    // (The paused source has no namespace left: its number may be the copy's now.)
    let (copy_helper, copy_ns) = net_parts(copy.id());
    assert_ne!(
        copy_helper, helper,
        "the copy has the source's network helper"
    );
    let code = "import socket\nprint('npm', socket.gethostbyname('registry.npmjs.org'))\ntry:\n    socket.gethostbyname('deb.debian.org'); print('debian: resolved')\nexcept OSError as e:\n    print('debian: refused', e)";
    let out = py(copy, code, 60_000).await;
    let o = text(&out.stdout);
    assert!(o.contains("npm "), "{o}\n{}", text(&out.stderr));
    assert!(line(&o, "debian").contains("refused"), "{o}");
    assert!(
        p.inspect(copy.id()).await.unwrap().spec["network"]
            .to_string()
            .contains("registry.npmjs.org")
    );
    let copy_id = copy.id().to_string();
    copy.destroy().await.unwrap();
    assert_net_gone(&copy_id, copy_helper, &copy_ns).await;
    sb.destroy().await.unwrap();
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_never_enters_the_vm_and_such_a_vm_is_not_paused() {
    let Some(p) = provider().await else { return };
    let secret = format!("Bearer sk-microvm-test-{}", std::process::id());
    let mut s = spec();
    s.network = Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into()],
        credentials: vec![Credential {
            host: "pypi.org".into(),
            header: "Authorization".into(),
            value: secret.clone(),
            env: Some("PYPI_TOKEN".into()),
        }],
        ..Default::default()
    });
    let sb = vm(&p, s).await;
    let id = sb.id().to_string();
    let out = sh(
        &sb,
        "echo token=$PYPI_TOKEN; echo cert=$SSL_CERT_FILE; head -1 /etc/stockade-ca.pem; \
         grep -rs 'sk-microvm-test' /etc /tmp /proc/self/environ; echo grep=$?",
        30_000,
    )
    .await;
    let o = text(&out.stdout);
    assert!(o.contains("token=stockade-placeholder-"), "{o}");
    assert!(o.contains("cert=/etc/stockade-ca-bundle.pem"), "{o}");
    assert!(o.contains("BEGIN CERTIFICATE"), "{o}");
    assert!(!o.contains("sk-microvm-test"), "the secret is inside: {o}");
    // The guest's memory holds what its initramfs and exec policy hold: never the
    // value. Neither does anything on disk (the initrd, the records, the net dir).
    let found = std::process::Command::new("grep")
        .args(["-rl", "sk-microvm-test"])
        .arg(sandbox_dir(&id))
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "the secret is on disk: {}",
        String::from_utf8_lossy(&found.stdout)
    );
    // The placeholder sent in clear text goes nowhere.
    let out = py(
        &sb,
        "import os, socket\nip = socket.gethostbyname('pypi.org')\ns = socket.create_connection((ip, 80), timeout=10)\ns.sendall(b'GET / HTTP/1.1\\r\\nHost: pypi.org\\r\\nAuthorization: ' + os.environ['PYPI_TOKEN'].encode() + b'\\r\\nConnection: close\\r\\n\\r\\n')\nprint(s.recv(200).split(b'\\r\\n')[0].decode())",
        30_000,
    )
    .await;
    assert_eq!(
        text(&out.stdout).trim(),
        "HTTP/1.1 403 Forbidden",
        "{}",
        text(&out.stderr)
    );
    let info = p.inspect(&id).await.unwrap();
    assert!(
        !info.spec.to_string().contains("sk-microvm-test"),
        "{}",
        info.spec
    );
    // No host process's command line carries it.
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmd).contains("sk-microvm-test"),
            "a command line holds the secret"
        );
    }
    // Pausing would need the credentials again at resume: refused by name.
    let e = sb.pause().await.unwrap_err();
    assert!(
        matches!(e, Error::Unavailable { .. }) && e.to_string().contains("credentials"),
        "{e}"
    );
    assert_eq!(
        p.inspect(&id).await.unwrap().state,
        stockade_core::RunState::Running
    );
    let (helper, ns) = net_parts(&id);
    sb.destroy().await.unwrap();
    assert_net_gone(&id, helper, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_goes_when_the_owner_or_the_vm_host_is_killed() {
    let Some(p) = provider().await else { return };
    let mut owner = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let mut s = spec();
    s.network = Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into()],
        ..Default::default()
    });
    let sb = stockade_core::Sandbox::create(
        p.clone() as std::sync::Arc<dyn Provider>,
        s,
        stockade_core::CreateOptions {
            owner_pid: Some(owner.id()),
        },
    )
    .await
    .unwrap();
    let id = sb.id().to_string();
    let (helper, ns) = net_parts(&id);
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_net_gone(&id, helper, &ns).await;
    // gc finds nothing more to do.
    let report = {
        let _gc = crate::DEAD_VM.lock().await;
        p.gc().await.unwrap()
    };
    assert!(!report.reaped.contains(&id), "{report:?}");

    // The VM host itself killed (a crash): its QEMU and slirp4netns die with it, and
    // gc removes what is left.
    let mut s = spec();
    s.network = Network::Egress;
    let sb = vm(&p, s).await;
    let id = sb.id().to_string();
    let (helper, ns) = net_parts(&id);
    let host: i32 = std::fs::read_to_string(sandbox_dir(&id).join("host.pid"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !net_leftovers(helper, &ns).is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(net_leftovers(helper, &ns), Vec::<String>::new());
    let report = {
        let _gc = crate::DEAD_VM.lock().await;
        p.gc().await.unwrap()
    };
    assert!(report.reaped.contains(&id), "{report:?}");
    assert_net_gone(&id, helper, &ns).await;
}
