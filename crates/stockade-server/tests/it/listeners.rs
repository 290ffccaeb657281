//! Addresses, listeners and TLS: several `--listen` at once, TLS on TCP verified by
//! the client against a CA made here, plain TCP off loopback refused unless the
//! operator says so, and a call cut off by the daemon's death reported unavailable.

use std::path::{Path, PathBuf};

use stockade::{CheckedRequest, ErrorCode, ExecIo, ExecRequest, FileOp, Provider};
use stockade_client::{Address, ConnectOptions, RemoteProvider};

use crate::harness::{TestDaemon, eventually, free_port, require_root};
use crate::{TOKEN_A, create, spec, token_file};

/// A CA and a daemon certificate it signed for `127.0.0.1` and `localhost`, as PEM
/// files in `dir`: (ca, cert, key).
fn test_pki(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let path = |f: &str| dir.join(format!("{name}-{f}.pem"));
    std::fs::write(path("ca"), ca_cert.pem()).unwrap();
    std::fs::write(path("cert"), leaf.pem()).unwrap();
    std::fs::write(path("key"), key.serialize_pem()).unwrap();
    (path("ca"), path("cert"), path("key"))
}

async fn connect(addr: &str, ca: Option<&Path>) -> stockade::Result<RemoteProvider> {
    let opts = ConnectOptions {
        token: Some(TOKEN_A.into()),
        tls_ca: ca.map(Path::to_path_buf),
    };
    RemoteProvider::connect_with(&Address::parse(addr).unwrap(), &opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_on_tcp_is_verified_and_a_wrong_ca_is_refused() {
    if !require_root("the daemon's tests") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(&tmp);
    let (ca, cert, key) = test_pki(tmp.path(), "right");
    let (other_ca, _, _) = test_pki(tmp.path(), "wrong");
    let port = free_port();
    let _d = TestDaemon::start(&[
        &format!("--listen=tcp://127.0.0.1:{port}"),
        &format!("--token-file={tokens}"),
        &format!("--tls-cert={}", cert.display()),
        &format!("--tls-key={}", key.display()),
    ]);

    // The right CA: every call works over TLS (tcp:// with a CA file means TLS).
    let c = connect(&format!("tcp://127.0.0.1:{port}"), Some(&ca))
        .await
        .unwrap();
    c.health().await.unwrap();
    let sb = create(&c, spec(60)).await;
    let out = sb
        .exec(ExecRequest::new(["echo", "over tls"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"over tls\n");
    sb.destroy().await.unwrap();
    let c = connect(&format!("https://localhost:{port}"), Some(&ca))
        .await
        .unwrap();
    c.health().await.unwrap();

    // Another CA: refused at the handshake, with what to do.
    let e = connect(&format!("https://127.0.0.1:{port}"), Some(&other_ca))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::PolicyDenied, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("TLS") && msg.contains("--tls-ca") && msg.contains("certificate"),
        "{msg}"
    );

    // Plain text to a TLS listener gets nowhere either.
    let plain = connect(&format!("http://127.0.0.1:{port}"), None).await;
    if let Ok(c) = plain {
        assert!(
            c.health().await.is_err(),
            "plain text answered by a TLS listener"
        );
    }

    // A CA file that is not there says so.
    let e = connect(
        &format!("https://127.0.0.1:{port}"),
        Some(&tmp.path().join("nope.pem")),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("nope.pem"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_tcp_off_loopback_needs_insecure_plaintext() {
    if !require_root("the daemon's tests") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(&tmp);
    let port = free_port();
    let listen = format!("--listen=0.0.0.0:{port}");
    let token_arg = format!("--token-file={tokens}");
    let out = TestDaemon::run_to_exit(&[&listen, &token_arg]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("in the clear") && err.contains("--insecure-plaintext"),
        "{err}"
    );
    // https:// without a certificate, and half a certificate, are refused too.
    let out = TestDaemon::run_to_exit(&[&format!("--listen=https://127.0.0.1:{port}"), &token_arg]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--tls-cert"), "{err}");
    let out = TestDaemon::run_to_exit(&[&listen, &token_arg, "--tls-cert=/x.pem"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--tls-key"), "{err}");

    // The operator's explicit choice starts, and says so in the log.
    let d = TestDaemon::start(&[&listen, &token_arg, "--insecure-plaintext"]);
    let c = connect(&format!("http://127.0.0.1:{port}"), None)
        .await
        .unwrap();
    c.health().await.unwrap();
    assert!(d.log().contains("insecure-plaintext"), "{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_and_a_tcp_port_at_once() {
    if !require_root("the daemon's tests") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(&tmp);
    let port = free_port();
    let sock = tmp.path().join("both.sock");
    let d = TestDaemon::start(&[
        &format!("--listen=unix://{}", sock.display()),
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--token-file={tokens}"),
    ]);
    assert_eq!(d.listeners.len(), 2);
    let local = connect(&format!("{}", sock.display()), None).await.unwrap();
    let remote = connect(&format!("tcp://127.0.0.1:{port}"), None)
        .await
        .unwrap();
    assert_eq!(
        local.health().await.unwrap().tenant,
        remote.health().await.unwrap().tenant
    );
    // An owner pid counts from the unix socket only (a process on the daemon's host).
    let me = std::process::id();
    let (a, _) = local.create_spec(&spec(60), Some(me), true).await.unwrap();
    assert_eq!(a.owner_pid, Some(me));
    let (b, _) = remote.create_spec(&spec(60), Some(me), true).await.unwrap();
    assert_eq!(b.owner_pid, None, "an owner pid from TCP is ignored");
    // One daemon behind both: each sees and destroys what the other made.
    let seen: Vec<String> = remote
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert!(seen.contains(&a.id) && seen.contains(&b.id), "{seen:?}");
    remote.destroy(&a.id).await.unwrap();
    local.destroy(&b.id).await.unwrap();
    assert!(local.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_the_daemons_death_is_unavailable() {
    if !require_root("the daemon's tests") {
        return;
    }
    let mut d = TestDaemon::start(&[]);
    let c = d.client(None).await;
    let sb = create(&c, spec(120)).await;
    let id = sb.id().to_string();
    let long = |marker: &str| {
        CheckedRequest::new(ExecRequest::new([
            "/bin/sh",
            "-c",
            &format!("touch /tmp/{marker}; sleep 100"),
        ]))
        .unwrap()
    };
    let plain = tokio::spawn({
        let (c, id, req) = (c.clone(), id.clone(), long("a"));
        async move { c.exec(&id, req, ExecIo::none()).await }
    });
    let streamed = tokio::spawn({
        let (c, id, req) = (c.clone(), id.clone(), long("b"));
        async move {
            let (tx, _rx) = tokio::sync::mpsc::channel(16);
            c.exec(&id, req, ExecIo::output(tx)).await
        }
    });
    // Both execs are running once their markers exist.
    eventually(30, "both execs to run", || {
        let c = c.clone();
        let id = id.clone();
        async move {
            let mut n = 0;
            for m in ["a", "b"] {
                let op = FileOp::Stat {
                    path: format!("/tmp/{m}"),
                };
                n += usize::from(c.file(&id, op).await.is_ok());
            }
            n == 2
        }
    })
    .await;
    d.kill9();
    for (what, r) in [
        ("exec", plain.await.unwrap()),
        ("streamed exec", streamed.await.unwrap()),
    ] {
        let e = r.unwrap_err();
        assert_eq!(e.code(), ErrorCode::Unavailable, "{what}: {e}");
        assert!(e.to_string().contains("stockaded"), "{what}: {e}");
    }
    // A call after its death is unavailable too (the same code to retry on).
    let e = c.list().await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
}
