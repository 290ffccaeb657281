//! Network on the docker provider (issue 18): `egress` (the public internet, never the
//! host's networks) and egress policies, with the native provider's firewall, resolver,
//! proxy and credentials in the container's own network namespace. Real traffic: the
//! machine reaches the package registries.

use std::time::Duration;

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

use stockade_testkit::egress::{connect_probe, line};

/// `label` was refused at once: under 1000 ms where the probe waits 3 s.
fn refused_fast(out: &str, label: &str) {
    stockade_testkit::egress::refused_within(out, label, 1000);
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
            .any(|w| w.kind == stockade_core::WallKind::Network
                && w.detail.contains("slirp4netns")
                && w.detail.contains("no docker bridge")),
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
    let out = py(&sb, &stockade_testkit::egress::pypi_only_probe(), 30_000).await;
    stockade_testkit::egress::assert_pypi_only(&out, 1000);
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
