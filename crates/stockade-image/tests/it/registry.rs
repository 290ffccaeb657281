//! Pulls from real registries: Debian's `docker-registry` on loopback (one per
//! test, in a temp dir), test images pushed with `skopeo`.

use stockade_image::{Auth, Digest, Error, PullOptions, PullProgress, Store, pull};

use stockade_testkit::Registry;

use crate::support::{Built, Layer, build, store, tree, write_layout};

fn image() -> Built {
    build(
        &[
            Layer::new()
                .dir("etc")
                .file("etc/os", b"debian")
                .file("etc/tmp", b"t")
                .into_tar(),
            Layer::new()
                .file("etc/.wh.tmp", b"")
                .file("hello", b"hi")
                .into_tar(),
        ],
        true,
    )
}

fn layout_of(built: &Built) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_layout(dir.path(), built, "v1");
    dir
}

async fn pull_quiet(store: &Store, r: &str, opts: &PullOptions) -> Result<Digest, Error> {
    pull(store, r, opts, &mut |_| {}).await
}

#[tokio::test]
async fn pull_by_tag_and_by_digest() {
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    let built = image();
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/img:1", false);

    let (_d, store) = store();
    let r = format!("{}/test/img:1", reg.addr);
    let mut events = Vec::new();
    let digest = pull(&store, &r, &PullOptions::default(), &mut |e| events.push(e))
        .await
        .unwrap();
    assert_eq!(
        digest, built.manifest.0,
        "the manifest arrives byte for byte"
    );
    assert!(
        matches!(&events[0], PullProgress::Resolved { missing_bytes, .. } if *missing_bytes > 0)
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, PullProgress::Bytes { .. }))
    );
    let img = store.image(&r).unwrap();
    assert_eq!(img.run_config().working_dir.as_deref(), Some("/srv"));
    assert_eq!(
        tree(&store.rootfs(&img).unwrap()),
        ["etc", "etc/os", "hello"]
    );

    // Again: nothing is missing, nothing is fetched.
    let mut events = Vec::new();
    pull(&store, &r, &PullOptions::default(), &mut |e| events.push(e))
        .await
        .unwrap();
    assert!(matches!(
        &events[..],
        [PullProgress::Resolved {
            missing_bytes: 0,
            ..
        }]
    ));

    // By digest, into another store: no tag is written, the digest resolves.
    let (_d2, store2) = crate::support::store();
    let by_digest = format!("{}/test/img@{digest}", reg.addr);
    assert_eq!(
        pull_quiet(&store2, &by_digest, &PullOptions::default())
            .await
            .unwrap(),
        digest
    );
    assert!(store2.list().unwrap().is_empty());
    assert_eq!(store2.image(&by_digest).unwrap().digest, digest);

    // A digest the registry does not have.
    let missing = format!("{}/test/img@{}", reg.addr, Digest::of(b"nope"));
    let e = pull_quiet(&store2, &missing, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Registry { .. }), "{e}");
    let e = pull_quiet(
        &store2,
        &format!("{}/test/img:2", reg.addr),
        &PullOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("test/img:2"), "{e}");
}

#[tokio::test]
async fn multi_platform_index_pulls_this_platform() {
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    let amd = build(&[Layer::new().file("arch", b"amd64").into_tar()], true);
    let arm = build(&[Layer::new().file("arch", b"arm64").into_tar()], true);
    let dir = tempfile::tempdir().unwrap();
    write_layout(dir.path(), &arm, "unused");
    let blobs = dir.path().join("blobs/sha256");
    for (d, b) in amd.layers.iter().chain([&amd.config, &amd.manifest]) {
        std::fs::write(blobs.join(d.hex()), b).unwrap();
    }
    let index = serde_json::json!({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json",
         "digest": arm.manifest.0.to_string(), "size": arm.manifest.1.len(),
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json",
         "digest": amd.manifest.0.to_string(), "size": amd.manifest.1.len(),
         "platform": {"architecture": "amd64", "os": "linux"}},
    ]});
    let index = serde_json::to_vec(&index).unwrap();
    let index_d = Digest::of(&index);
    std::fs::write(blobs.join(index_d.hex()), &index).unwrap();
    let top = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": index_d.to_string(), "size": index.len(),
        "annotations": {"org.opencontainers.image.ref.name": "multi"}}]});
    std::fs::write(
        dir.path().join("index.json"),
        serde_json::to_vec(&top).unwrap(),
    )
    .unwrap();
    reg.push(dir.path(), "multi", "test/multi:1", true);

    let (_d, store) = store();
    let r = format!("{}/test/multi:1", reg.addr);
    let digest = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap();
    let (want_digest, want) = if cfg!(target_arch = "x86_64") {
        (&amd.manifest.0, "amd64")
    } else {
        (&arm.manifest.0, "arm64")
    };
    assert_eq!(&digest, want_digest);
    let root = store.rootfs(&store.image(&r).unwrap()).unwrap();
    assert_eq!(std::fs::read_to_string(root.join("arch")).unwrap(), want);
    // The other platform's layers were not fetched.
    let other = if want == "amd64" { &arm } else { &amd };
    assert!(!store.has_blob(&other.layers[0].0));
}

#[tokio::test]
async fn corrupt_and_truncated_blobs_are_refused_and_not_stored() {
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    let built = image();
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/img:1", false);
    let victim = reg.blob_file(built.layers[1].0.hex());
    let mut data = std::fs::read(&victim).unwrap();
    let n = data.len();
    data[n / 2] ^= 0xff;
    std::fs::write(&victim, &data).unwrap();

    let (_d, store) = store();
    let r = format!("{}/test/img:1", reg.addr);
    let e = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DigestMismatch { .. } | Error::Archive { .. } | Error::Registry { .. }
        ),
        "{e}"
    );
    assert!(
        !store.has_blob(&built.layers[1].0),
        "the corrupt blob was kept"
    );
    assert!(
        !store.has_blob(&built.manifest.0),
        "a manifest without its blobs was kept"
    );
    assert!(store.list().unwrap().is_empty());

    // Truncated: shorter than the manifest says.
    std::fs::write(&victim, &data[..n / 2]).unwrap();
    let e = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(!store.has_blob(&built.layers[1].0), "{e}");
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_of_one_image_share_the_work() {
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    let big = Layer::new().file("big", &vec![3u8; 8 << 20]).into_tar();
    let built = build(&[big], true);
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/big:1", false);
    let (_d, store) = store();
    let other = Store::open(store.root()).unwrap();
    let r = format!("{}/test/big:1", reg.addr);
    let fetched = |events: &[PullProgress]| {
        events
            .iter()
            .filter_map(|e| match e {
                PullProgress::Resolved { missing_bytes, .. } => Some(*missing_bytes),
                _ => None,
            })
            .sum::<u64>()
    };
    let (mut e1, mut e2) = (Vec::new(), Vec::new());
    let opts = PullOptions::default();
    let (mut p1, mut p2) = (|e| e1.push(e), |e| e2.push(e));
    let (a, b) = tokio::join!(
        pull(&store, &r, &opts, &mut p1),
        pull(&other, &r, &opts, &mut p2),
    );
    assert_eq!(a.unwrap(), b.unwrap());
    // One of them found everything already there.
    assert!(fetched(&e1) == 0 || fetched(&e2) == 0, "both fetched blobs");
    assert!(fetched(&e1) + fetched(&e2) > 0);
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
}

#[tokio::test]
async fn plain_http_only_for_loopback_or_insecure_registries() {
    let Some(reg) = Registry::start("127.0.0.2", None) else {
        return;
    };
    let built = image();
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/img:1", false);
    let (_d, store) = store();
    let r = format!("{}/test/img:1", reg.addr);
    let e = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Registry { .. }), "{e}");
    assert!(store.list().unwrap().is_empty());
    let opts = PullOptions {
        insecure_registries: vec![reg.addr.clone()],
        ..Default::default()
    };
    assert_eq!(
        pull_quiet(&store, &r, &opts).await.unwrap(),
        built.manifest.0
    );
}

#[tokio::test]
async fn basic_auth() {
    let Some(reg) = Registry::start("127.0.0.1", Some(("alice", "s3cret"))) else {
        return;
    };
    let built = image();
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/img:1", false);
    let (_d, store) = store();
    let r = format!("{}/test/img:1", reg.addr);
    let e = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Registry { .. }), "{e}");
    let wrong = PullOptions {
        auth: Auth::Basic {
            username: "alice".into(),
            password: "guess".into(),
        },
        ..Default::default()
    };
    assert!(pull_quiet(&store, &r, &wrong).await.is_err());
    let right = PullOptions {
        auth: Auth::Basic {
            username: "alice".into(),
            password: "s3cret".into(),
        },
        ..Default::default()
    };
    assert_eq!(
        pull_quiet(&store, &r, &right).await.unwrap(),
        built.manifest.0
    );
    assert!(
        !format!("{right:?}").contains("s3cret"),
        "credentials are not printed"
    );
}

#[tokio::test]
async fn an_image_larger_than_the_limit_is_not_fetched() {
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    // Incompressible (skopeo gzips layers on push).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..4 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let big = Layer::new().file("big", &noise).into_tar();
    let built = build(&[big], false);
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/big:1", false);
    let (_d, store) = store();
    let store = store.with_limits(stockade_image::Limits {
        max_entries: 100,
        max_bytes: 1 << 20,
    });
    let r = format!("{}/test/big:1", reg.addr);
    let e = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::LimitExceeded { what: "bytes", .. }),
        "{e}"
    );
    assert!(!store.has_blob(&built.layers[0].0));
}

/// A TCP proxy in front of a registry that forwards at most `budget` bytes of
/// responses in all, then cuts every connection (a network that drops mid-pull);
/// `forwarded` counts what it passed on.
struct CuttingProxy {
    addr: String,
    budget: std::sync::Arc<std::sync::atomic::AtomicI64>,
    forwarded: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CuttingProxy {
    fn start(upstream: &str, budget: i64) -> CuttingProxy {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let budget = Arc::new(AtomicI64::new(budget));
        let forwarded = Arc::new(AtomicU64::new(0));
        let (b, f, up) = (budget.clone(), forwarded.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&up) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut s_out);
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                let (b, f) = (b.clone(), f.clone());
                std::thread::spawn(move || {
                    let (mut server, mut client) = (server, client);
                    let mut buf = [0u8; 16 << 10];
                    loop {
                        let n = match server.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let left = b.fetch_sub(n as i64, Ordering::SeqCst);
                        if left <= 0 {
                            break;
                        }
                        let m = n.min(left as usize);
                        if client.write_all(&buf[..m]).is_err() {
                            break;
                        }
                        f.fetch_add(m as u64, Ordering::SeqCst);
                        if m < n {
                            break;
                        }
                    }
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                });
            }
        });
        CuttingProxy {
            addr,
            budget,
            forwarded,
        }
    }
}

#[tokio::test]
async fn an_interrupted_pull_resumes_where_it_stopped() {
    use std::sync::atomic::Ordering;
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    // 4 MiB that do not compress, in a plain (uncompressed) layer.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let noise: Vec<u8> = (0..4 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let built = build(&[Layer::new().file("noise", &noise).into_tar()], false);
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/noise:1", false);

    // The network drops after 1.5 MiB: the pull fails, the partial blob stays.
    let proxy = CuttingProxy::start(&reg.addr, 3 << 19);
    let r = format!("{}/test/noise:1", proxy.addr);
    let (_d, store) = store();
    let e = pull_quiet(&store, &r, &PullOptions::default()).await;
    assert!(e.is_err(), "the cut pull succeeded");
    // (skopeo compressed the layer on push: the registry's blob is not ours.)
    let partials: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("partial-")
        })
        .collect();
    assert_eq!(partials.len(), 1, "{partials:?}");
    let partial = partials[0].clone();
    let hex = partial.file_name().unwrap().to_string_lossy()["partial-".len()..].to_string();
    let layer_size = std::fs::metadata(reg.blob_file(&hex)).unwrap().len();
    let kept = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
    assert!(
        kept > 0 && kept < layer_size,
        "partial file has {kept} bytes"
    );
    assert!(store.resolve(&r).is_err(), "a failed pull tagged the image");

    // The network is back: the retry fetches only the rest, and the result verifies.
    proxy.budget.store(i64::MAX, Ordering::SeqCst);
    proxy.forwarded.store(0, Ordering::SeqCst);
    pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap();
    let second = proxy.forwarded.load(Ordering::SeqCst);
    assert!(
        second < layer_size - kept / 2,
        "the retry fetched {second} bytes of a {layer_size}-byte layer with {kept} already here"
    );
    let img = store.image(&r).unwrap();
    let root = store.rootfs(&img).unwrap();
    assert_eq!(std::fs::read(root.join("noise")).unwrap(), noise);
    assert!(!partial.exists());

    // A partial file that does not belong to the blob (corrupted on disk) makes the
    // result fail verification: refused, dropped, and the next pull starts over.
    let (_d2, store2) = store_with_bad_partial(&hex);
    let r2 = format!("{}/test/noise:1", reg.addr);
    let e = pull_quiet(&store2, &r2, &PullOptions::default()).await;
    assert!(matches!(e, Err(Error::DigestMismatch { .. })), "{e:?}");
    assert!(
        !store2
            .root()
            .join("tmp")
            .join(format!("partial-{hex}"))
            .exists()
    );
    pull_quiet(&store2, &r2, &PullOptions::default())
        .await
        .unwrap();
}

/// A store whose tmp/ holds 1 KiB of garbage as the partial download of the layer.
fn store_with_bad_partial(hex: &str) -> (tempfile::TempDir, Store) {
    let (d, store) = store();
    std::fs::write(
        store.root().join("tmp").join(format!("partial-{hex}")),
        vec![0xEEu8; 1024],
    )
    .unwrap();
    (d, store)
}

/// A token server for the registry's bearer-token auth (the Docker token spec): it
/// gives a JWT, signed RS256 by `openssl` with a key whose self-signed certificate
/// the registry trusts, for whatever scope is asked, to `user:password` only.
struct TokenServer {
    addr: String,
    issued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Percent-decodes a query value.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl TokenServer {
    fn start(dir: &std::path::Path, user: &str, password: &str) -> TokenServer {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        use std::io::{BufRead, BufReader, Write};
        use std::process::{Command, Stdio};
        let key = dir.join("token.key");
        let cert = dir.join("token.crt");
        let out = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=stockade-test-token"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl (apt-get install openssl)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let der = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&cert)
            .output()
            .unwrap()
            .stdout;
        let x5c = STANDARD.encode(der);
        let expected = format!("Basic {}", STANDARD.encode(format!("{user}:{password}")));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let issued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = issued.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut auth = String::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':')
                        && k.eq_ignore_ascii_case("authorization")
                    {
                        auth = v.trim().to_string();
                    }
                }
                if auth != expected {
                    let _ = conn.write_all(
                        b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    continue;
                }
                let query = target.split_once('?').map(|x| x.1).unwrap_or("");
                let mut access = Vec::new();
                for (k, v) in query.split('&').filter_map(|kv| kv.split_once('=')) {
                    if k == "scope" {
                        let scope = unescape(v);
                        let parts: Vec<&str> = scope.split(':').collect();
                        if parts.len() == 3 {
                            access.push(serde_json::json!({
                                "type": parts[0], "name": parts[1],
                                "actions": parts[2].split(',').collect::<Vec<_>>(),
                            }));
                        }
                    }
                }
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "x5c": [x5c]});
                let claims = serde_json::json!({
                    "iss": "stockade-test-issuer", "sub": "alice", "aud": "stockade-registry",
                    "exp": now + 300, "nbf": now - 10, "iat": now, "jti": format!("t{now}"),
                    "access": access,
                });
                let input = format!(
                    "{}.{}",
                    URL_SAFE_NO_PAD.encode(header.to_string()),
                    URL_SAFE_NO_PAD.encode(claims.to_string())
                );
                let mut sign = Command::new("openssl")
                    .args(["dgst", "-sha256", "-sign"])
                    .arg(&key)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                sign.stdin
                    .take()
                    .unwrap()
                    .write_all(input.as_bytes())
                    .unwrap();
                let sig = sign.wait_with_output().unwrap().stdout;
                let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig));
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = serde_json::json!({"token": token, "expires_in": 300}).to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        TokenServer { addr, issued }
    }
}

#[tokio::test]
async fn bearer_token_auth_against_a_token_server() {
    if stockade_testkit::require(
        "openssl",
        which("openssl"),
        "apt-get install openssl (crates/stockade-image/ci-setup.sh does)",
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = TokenServer::start(dir.path(), "alice", "s3cret");
    let auth = format!(
        "auth:\n  token:\n    realm: http://{}/token\n    service: stockade-registry\n    \
         issuer: stockade-test-issuer\n    rootcertbundle: {}\n",
        tokens.addr,
        dir.path().join("token.crt").display()
    );
    if stockade_testkit::require(
        "a registry and skopeo",
        Registry::available(),
        stockade_testkit::REGISTRY_FIX,
    )
    .is_none()
    {
        return;
    }
    let reg = Registry::start_with(
        "127.0.0.1",
        tempfile::tempdir().unwrap(),
        &auth,
        Some(("alice".into(), "s3cret".into())),
    );
    let built = image();
    let layout = layout_of(&built);
    reg.push(layout.path(), "v1", "test/img:1", false);
    let r = format!("{}/test/img:1", reg.addr);
    let (_d, store) = store();

    // Anonymous: the token server refuses, so does the registry.
    let e = pull_quiet(&store, &r, &PullOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Registry { .. }), "{e}");
    // Wrong password: refused.
    let wrong = PullOptions {
        auth: Auth::Basic {
            username: "alice".into(),
            password: "guess".into(),
        },
        ..Default::default()
    };
    assert!(pull_quiet(&store, &r, &wrong).await.is_err());
    // Basic credentials exchanged for a bearer token: the pull works.
    let before = tokens.issued.load(std::sync::atomic::Ordering::SeqCst);
    let right = PullOptions {
        auth: Auth::Basic {
            username: "alice".into(),
            password: "s3cret".into(),
        },
        ..Default::default()
    };
    assert_eq!(
        pull_quiet(&store, &r, &right).await.unwrap(),
        built.manifest.0
    );
    assert!(
        tokens.issued.load(std::sync::atomic::Ordering::SeqCst) > before,
        "no token was issued: the registry did not ask for one"
    );
    assert!(store.list().unwrap().contains_key(&r));
}

fn which(tool: &str) -> Result<(), String> {
    std::process::Command::new(tool)
        .arg("version")
        .output()
        .map(|_| ())
        .map_err(|e| format!("{tool}: {e}"))
}
