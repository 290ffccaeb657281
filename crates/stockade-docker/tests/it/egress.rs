//! Network on the docker provider (issue 18): `egress` (the public internet, never the
//! host's networks) and egress policies, with the native provider's firewall, resolver,
//! proxy and credentials in the container's own network namespace. Real traffic: the
//! machine reaches the package registries.

use std::time::Duration;

use stockade_core::EgressDenial;
use stockade_core::spec::{Credential, EgressPolicy, Network};

use crate::*;

/// Processes on the host whose command line contains `needle`.
fn host_processes(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && !cmd.contains("/proc/self") {
                found.push(cmd);
            }
        }
    }
    found
}

/// A probe run inside: each `(label, host, port)` is tried with a 3 s timeout and
/// printed as `label: ok` or `label: refused ERRNO MS`.
fn connect_probe(targets: &[(&str, &str, u16)]) -> String {
    let mut code = String::from(
        "import socket, time\ndef probe(label, host, port):\n    t = time.monotonic()\n    try:\n        socket.create_connection((host, port), timeout=3).close()\n        print(label + ': ok')\n    except OSError as e:\n        print('%s: refused %s %d' % (label, e.errno, (time.monotonic() - t) * 1000))\n",
    );
    for (label, host, port) in targets {
        code.push_str(&format!("probe({label:?}, {host:?}, {port})\n"));
    }
    code
}

fn line<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{label}:")))
        .unwrap_or_else(|| panic!("{label} missing from: {out}"))
}

fn refused_fast(out: &str, label: &str) {
    let l = line(out, label);
    assert!(l.contains("refused"), "{label} got through: {out}");
    let ms: u64 = l.split_whitespace().last().unwrap().parse().unwrap();
    assert!(
        ms < 1000,
        "{label} took {ms} ms (a hang, not a refusal): {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_all_reaches_out_but_never_the_host_or_its_networks() {
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    s.network = Network::Egress;
    let sb = sandbox(s).await;
    assert!(
        sb.info()
            .applied
            .iter()
            .any(|l| l.contains("slirp4netns") && l.contains("no docker bridge")),
        "{:?}",
        sb.info().applied
    );
    let host = stockade_testkit::host_address();
    let code = format!(
        "import socket\nprint('resolved:', socket.gethostbyname('pypi.org'))\n{}",
        connect_probe(&[
            ("pypi", "pypi.org", 80),
            ("host", &host, 22),
            ("gateway", "10.0.2.2", 80),
            ("docker0", "172.17.0.1", 80),
            ("metadata", "169.254.169.254", 80),
        ])
    );
    let out = py(&sb, &code, 30_000).await;
    let o = text(&out.stdout);
    assert_eq!(out.exit_code, 0, "{o}\n{}", text(&out.stderr));
    assert!(o.contains("resolved: "), "{o}");
    assert_eq!(line(&o, "pypi"), "pypi: ok", "{o}");
    for l in ["host", "gateway", "docker0", "metadata"] {
        refused_fast(&o, l);
    }
    let id = sb.id().to_string();
    sb.destroy().await.unwrap();
    // Its slirp4netns ended with its watcher.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left: Vec<String> = host_processes("slirp4netns")
        .into_iter()
        .filter(|c| c.contains(&id))
        .collect();
    assert!(left.is_empty(), "left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_opens_its_names_refuses_the_rest_and_changes_live() {
    let Some(image) = image() else { return };
    let mut s = spec(&image);
    s.network = Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into()],
        ..Default::default()
    });
    let sb = sandbox(s).await;
    let net_dir = format!("/run/stockade-docker/.net/{}", sb.id());
    assert!(std::path::Path::new(&net_dir).is_dir());
    // The monitor's socket is not in the directory the container sees.
    let out = sh(&sb, "ls -a /.stockade 2>&1; cat /etc/resolv.conf", 10_000).await;
    assert!(
        !text(&out.stdout).contains("net.sock"),
        "{}",
        text(&out.stdout)
    );
    let code = format!(
        "import socket\nip = socket.gethostbyname('pypi.org')\nprint('pypi resolved')\ntry:\n    socket.gethostbyname('registry.npmjs.org'); print('npm: resolved')\nexcept OSError as e:\n    print('npm: refused', e)\ns = socket.create_connection((ip, 80), timeout=10)\ns.sendall(b'HEAD / HTTP/1.1\\r\\nHost: registry.npmjs.org\\r\\nConnection: close\\r\\n\\r\\n')\nprint('host npm:', s.recv(200).split(b'\\r\\n')[0].decode())\n{}",
        connect_probe(&[("pypi", "pypi.org", 80), ("literal", "1.1.1.1", 443)])
    );
    let out = py(&sb, &code, 30_000).await;
    let o = text(&out.stdout);
    assert!(o.contains("pypi resolved"), "{o}\n{}", text(&out.stderr));
    assert!(line(&o, "npm").contains("refused"), "{o}");
    assert_eq!(
        line(&o, "host npm"),
        "host npm: HTTP/1.1 403 Forbidden",
        "{o}"
    );
    assert_eq!(line(&o, "pypi"), "pypi: ok", "{o}");
    refused_fast(&o, "literal");
    // The refusals reach the caller with the exec's result, named.
    let has = |d: &[EgressDenial], proto: &str, dest: &str| {
        d.iter()
            .any(|x| x.protocol == proto && x.destination == dest)
    };
    assert!(
        has(&out.egress_denied, "dns", "registry.npmjs.org"),
        "{:#?}",
        out.egress_denied
    );
    assert!(
        has(&out.egress_denied, "tcp", "1.1.1.1"),
        "{:#?}",
        out.egress_denied
    );
    // Live: the refused name opens, and inspect shows the policy in force.
    sb.set_network(&Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into(), "registry.npmjs.org".into()],
        ..Default::default()
    }))
    .await
    .unwrap();
    let out = py(
        &sb,
        "import socket\nprint(socket.gethostbyname('registry.npmjs.org'))",
        10_000,
    )
    .await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let info = crate::provider().inspect(sb.id()).await.unwrap();
    assert!(
        info.spec["network"]
            .to_string()
            .contains("registry.npmjs.org"),
        "{}",
        info.spec["network"]
    );
    // Replacing a policy by `none` is refused with the reason.
    let err = sb.set_network(&Network::None).await.unwrap_err();
    assert!(err.to_string().contains("empty allowlist"), "{err}");
    sb.destroy().await.unwrap();
    assert!(!std::path::Path::new(&net_dir).exists(), "{net_dir} left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_never_enters_the_container_or_its_labels() {
    let Some(image) = image() else { return };
    let secret = format!("Bearer sk-docker-test-{}", std::process::id());
    let mut s = spec(&image);
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
    let sb = sandbox(s).await;
    let out = sh(
        &sb,
        "echo token=$PYPI_TOKEN; echo cert=$SSL_CERT_FILE; head -1 /etc/stockade-ca.pem; \
         grep -rs 'sk-docker-test' /etc /tmp /proc/self/environ /proc/1/environ /.stockade; \
         echo grep=$?",
        10_000,
    )
    .await;
    let o = text(&out.stdout);
    assert!(o.contains("token=stockade-placeholder-"), "{o}");
    assert!(o.contains("cert=/etc/stockade-ca-bundle.pem"), "{o}");
    assert!(o.contains("BEGIN CERTIFICATE"), "{o}");
    assert!(!o.contains("sk-docker-test"), "the secret is inside: {o}");
    // The placeholder sent in clear text goes nowhere.
    let out = py(
        &sb,
        "import os, socket\nip = socket.gethostbyname('pypi.org')\ns = socket.create_connection((ip, 80), timeout=10)\ns.sendall(b'GET / HTTP/1.1\\r\\nHost: pypi.org\\r\\nAuthorization: ' + os.environ['PYPI_TOKEN'].encode() + b'\\r\\nConnection: close\\r\\n\\r\\n')\nprint(s.recv(200).split(b'\\r\\n')[0].decode())",
        10_000,
    )
    .await;
    assert_eq!(
        text(&out.stdout).trim(),
        "HTTP/1.1 403 Forbidden",
        "{}",
        text(&out.stderr)
    );
    // Neither the container's labels (anyone with the docker socket reads them) nor
    // inspect hold the value.
    let labels = std::process::Command::new("/usr/bin/docker")
        .args(["inspect", &stockade_docker::container_name(sb.id())])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&labels.stdout).contains("sk-docker-test"));
    let info = crate::provider().inspect(sb.id()).await.unwrap();
    assert!(
        !info.spec.to_string().contains("sk-docker-test"),
        "{}",
        info.spec
    );
    // The monitor's stdin carried it; its command line does not.
    assert!(host_processes("sk-docker-test").is_empty());
    sb.destroy().await.unwrap();
}
