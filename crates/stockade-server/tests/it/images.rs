//! A tenant fills the host's image store through the daemon: every image it names is
//! pulled and unpacked on the host. Each tenant has an image budget; the test tries to
//! go over it and fails if the daemon lets it.

use std::path::Path;
use std::sync::Arc;

use stockade::{ErrorCode, Sandbox, SandboxSpec};
use stockade_testkit::Registry;
use stockade_testkit::peer::Peer;

use crate::harness::{TestDaemon, require_root};
use crate::{TOKEN_A, TOKEN_B, token_file};

/// A base layer holding only `srv/hello` (enough to build a sandbox's root from).
fn tiny_base(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("tiny");
    std::fs::create_dir_all(src.join("srv")).unwrap();
    std::fs::write(src.join("srv/hello"), b"hi").unwrap();
    let tar = dir.join("tiny.tar");
    let st = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .arg("srv")
        .status()
        .unwrap();
    assert!(st.success(), "tar");
    tar
}

/// `n` bytes no compressor shrinks (xorshift from `seed`).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Pushes the tiny base plus `srv/blob` of `blob` bytes as `name`; returns its
/// reference on the registry.
fn push(reg: &Registry, dir: &Path, base: &Path, name: &str, blob: &[u8]) -> String {
    let layout = dir.join(format!("layout-{name}"));
    stockade_testkit::oci_layout(
        &layout,
        base,
        &[("srv/blob", blob)],
        serde_json::json!({}),
        "v1",
    );
    reg.push(&layout, "v1", &format!("quota/{name}:1"), false);
    format!("{}/quota/{name}:1", reg.addr)
}

fn with_image(image: &str) -> SandboxSpec {
    SandboxSpec {
        image: Some(image.into()),
        timeout_secs: 60,
        ..SandboxSpec::default()
    }
}

async fn try_create(c: &stockade_client::RemoteProvider, image: &str) -> stockade::Result<Sandbox> {
    Sandbox::create(Arc::new(c.clone()), with_image(image), Default::default()).await
}

/// The error of a create that must be refused; panics with `why` when it is not.
async fn refused(c: &stockade_client::RemoteProvider, image: &str, why: &str) -> stockade::Error {
    match try_create(c, image).await {
        Ok(sb) => {
            sb.destroy().await.unwrap();
            panic!("{why}");
        }
        Err(e) => e,
    }
}

/// A profiles file whose tenant profile lists `registries`, and a configuration file
/// that lets them be spoken to over plain HTTP: (`--profiles=FILE`, the config path).
fn listing(tmp: &tempfile::TempDir, registries: &[&str]) -> (String, String) {
    let list = registries
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let profiles = tmp.path().join("profiles.toml");
    std::fs::write(
        &profiles,
        format!("[profile.tenant]\nregistries = [{list}]\n"),
    )
    .unwrap();
    let config = tmp.path().join("stockade.toml");
    std::fs::write(&config, format!("[registries]\ninsecure = [{list}]\n")).unwrap();
    (
        format!("--profiles={}", profiles.display()),
        config.display().to_string(),
    )
}

/// What the store holds in `tmp/` (partial downloads, trees being built).
fn scratch(images: &Path) -> Vec<String> {
    std::fs::read_dir(images.join("tmp"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("partial-") || n.starts_with("tree-"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_fill_the_image_store_past_its_budget() {
    if !require_root("the daemon's tests") {
        return;
    }
    let Some(peer) = Peer::start() else { return };
    let Some(reg) = Registry::start_on(&peer) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let base = tiny_base(tmp.path());
    let tiny = push(&reg, tmp.path(), &base, "tiny", b"small");
    // Each image costs its blobs and its unpacked root: about twice its layer. A
    // budget of 3 MiB takes the tiny image and one 1.25 MiB image, not two.
    let big = push(&reg, tmp.path(), &base, "big", &noise(4 << 20, 1));
    let mid1 = push(&reg, tmp.path(), &base, "mid1", &noise(1280 << 10, 2));
    let mid2 = push(&reg, tmp.path(), &base, "mid2", &noise(1280 << 10, 3));
    let mid3 = push(&reg, tmp.path(), &base, "mid3", &noise(1280 << 10, 4));

    let tokens = token_file(&tmp);
    let (profiles, config) = listing(&tmp, &[&reg.addr]);
    let mut d = TestDaemon::start_with_env(
        &[
            &format!("--token-file={tokens}"),
            "--tenant-image-bytes=3M",
            &profiles,
        ],
        &[("STOCKADE_CONFIG", &config)],
    );
    let images = d.dir.join("home/images");
    let a = d.client(Some(TOKEN_A)).await;
    let b = d.client(Some(TOKEN_B)).await;

    // A small image fits the budget.
    let sb = try_create(&a, &tiny)
        .await
        .unwrap_or_else(|e| panic!("a small image fits: {e}\n{}", d.log()));
    sb.destroy().await.unwrap();

    // An image larger than what is left: refused before anything is fetched, naming
    // the budget and the operator's flag; nothing is left in the store.
    let store = stockade_image::Store::open(&images).unwrap();
    let before = store.usage().unwrap();
    let e = refused(
        &a,
        &big,
        "the daemon pulled an image past the tenant's budget",
    )
    .await;
    assert_eq!(e.code(), ErrorCode::LimitExceeded, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("image budget"), "{msg}");
    assert!(msg.contains("3145728"), "names the budget: {msg}");
    assert!(
        msg.contains("--tenant-image-bytes"),
        "says how to raise it: {msg}"
    );
    assert!(
        store.resolve(&big).is_err(),
        "the refused image is not kept"
    );
    assert_eq!(store.usage().unwrap(), before, "a refused pull added bytes");
    assert!(scratch(&images).is_empty(), "{:?}", scratch(&images));

    // What it pulls is charged: a second image no longer fits.
    let sb = try_create(&a, &mid1).await.expect("fits the budget");
    sb.destroy().await.unwrap();
    let e = refused(&a, &mid2, "the tenant's earlier pull was not charged").await;
    assert_eq!(e.code(), ErrorCode::LimitExceeded, "{e}");

    // Another tenant is unaffected; once the image is in the store, it costs nothing.
    let sb = try_create(&b, &mid2)
        .await
        .expect("tenant B has its own budget");
    sb.destroy().await.unwrap();
    let sb = try_create(&a, &mid2)
        .await
        .expect("an image already in the store costs nothing");
    sb.destroy().await.unwrap();

    // The charge survives a restart of the daemon.
    d.restart();
    let a = d.client(Some(TOKEN_A)).await;
    let e = refused(&a, &mid3, "a restart reset the tenant's image charge").await;
    assert_eq!(e.code(), ErrorCode::LimitExceeded, "{e}");
    assert!(scratch(&images).is_empty(), "{:?}", scratch(&images));
    d.assert_none_left().await;
}

/// The operator's registry credentials go only to the registry they are for, never
/// to one a tenant names (here a registry on another host that the tenant's profile
/// lists, that asks for them and names a token realm of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_registry_credentials_never_reach_a_tenants_registry() {
    if !require_root("the daemon's tests") {
        return;
    }
    let Some(peer) = Peer::start() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("seen.log");
    let server = r#"
import http.server, sys
log = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        with open(log, 'a') as f:
            f.write('%s %s\n' % (self.path, self.headers.get('Authorization')))
        if self.path.startswith('/token'):
            body = b'{"token": "tenant-token"}'
            self.send_response(200)
        else:
            body = b'{}'
            self.send_response(401)
            self.send_header('WWW-Authenticate', 'Bearer realm="http://%s/token",service="x"' % self.headers.get('Host'))
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_HEAD = do_GET
s = http.server.HTTPServer((sys.argv[2], 8000), H)
print(8000, flush=True)
s.serve_forever()
"#;
    let mut child = peer
        .command("python3")
        .arg("-c")
        .arg(server)
        .arg(&log)
        .arg(peer.addr.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let registry = format!("{}:{port}", peer.addr);
    // Killed however the test ends.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(child);
    let tokens = token_file(&tmp);
    let (profiles, config_file) = listing(&tmp, &[&registry]);
    for env in [
        &[("STOCKADE_REGISTRY_TOKEN", "operator-bearer-secret")][..],
        &[
            ("STOCKADE_REGISTRY_USERNAME", "operator"),
            ("STOCKADE_REGISTRY_PASSWORD", "operator-basic-secret"),
        ],
        &[
            ("STOCKADE_REGISTRY", "registry.example.com"),
            ("STOCKADE_REGISTRY_TOKEN", "operator-bearer-secret"),
        ],
    ] {
        let env: Vec<(&str, &str)> = env
            .iter()
            .copied()
            .chain([("STOCKADE_CONFIG", config_file.as_str())])
            .collect();
        let d = TestDaemon::start_with_env(&[&format!("--token-file={tokens}"), &profiles], &env);
        let a = d.client(Some(TOKEN_A)).await;
        let _ = refused(
            &a,
            &format!("{registry}/tenant/app:1"),
            "a registry that serves nothing gave an image",
        )
        .await;
        let seen = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !seen.is_empty(),
            "the registry was never asked: {}",
            d.log()
        );
        for secret in [
            "operator-bearer-secret",
            "b3BlcmF0b3I6b3BlcmF0b3ItYmFzaWMtc2VjcmV0",
        ] {
            assert!(
                !seen.contains(secret),
                "{env:?}: the operator's credential reached the tenant's registry: {seen}"
            );
        }
        std::fs::remove_file(&log).unwrap();
    }
    // The operator's `docker login` for that very registry (a docker config.json's
    // `auths`): a tenant's pull from it is anonymous too, while the local caller's
    // sends it, to that registry alone.
    let config = tmp.path().join("config.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"auths": {{"{registry}": {{"auth": "b3BlcmF0b3I6ZG9ja2VyLWxvZ2luLXNlY3JldA=="}}}}}}"#
        ),
    )
    .unwrap();
    let file = config.display().to_string();
    let auth_env = [
        ("STOCKADE_REGISTRY_AUTH_FILE", file.as_str()),
        ("STOCKADE_CONFIG", config_file.as_str()),
    ];
    let d = TestDaemon::start_with_env(&[&format!("--token-file={tokens}"), &profiles], &auth_env);
    let a = d.client(Some(TOKEN_A)).await;
    let _ = refused(&a, &format!("{registry}/tenant/app:1"), "an image").await;
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !seen.is_empty(),
        "the registry was never asked: {}",
        d.log()
    );
    assert!(
        !seen.contains("b3BlcmF0b3I6ZG9ja2VyLWxvZ2luLXNlY3JldA=="),
        "the operator's docker login reached a tenant's pull: {seen}"
    );
    std::fs::remove_file(&log).unwrap();
    drop(d);
    let d = TestDaemon::start_with_env(&[], &auth_env);
    let local = d.client(None).await;
    let _ = refused(&local, &format!("{registry}/own/app:1"), "an image").await;
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        seen.contains("Basic b3BlcmF0b3I6ZG9ja2VyLWxvZ2luLXNlY3JldA=="),
        "the local caller's docker login was not sent to its registry: {seen}"
    );
}

/// A tenant's pull never reaches into the daemon's host, whatever names the address:
/// the tenant itself (a loopback registry, refused as unlisted before any
/// connection), or a registry on another host that its profile lists, through its
/// token realm or a redirect to this host's loopback or its own address. The old code
/// pulled from any registry a tenant named, and followed realms and redirects
/// anywhere: a service on this host's loopback was asked for every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_pull_never_reaches_this_host() {
    if !require_root("the daemon's tests") {
        return;
    }
    let Some(peer) = Peer::start() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // This host's service, on every address of it: it logs whoever reaches it.
    let inside_log = tmp.path().join("inside.log");
    let logger = r#"
import http.server, sys
log = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        with open(log, 'a') as f:
            f.write('%s %s\n' % (self.path, self.headers.get('Authorization')))
        self.send_response(200)
        self.send_header('Content-Length', '2')
        self.end_headers()
        self.wfile.write(b'{}')
    do_HEAD = do_GET
s = http.server.HTTPServer(('0.0.0.0', 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
    // The registry on the other host: 8001 names a token realm on this host's
    // loopback, 8002 one on this host's own address (its end of the peer's link),
    // 8003 redirects the manifest to this host's loopback.
    let outside = r#"
import http.server, sys, threading
inside = sys.argv[2]
own = sys.argv[3]
def handler(mode):
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            if mode == 'redirect':
                if self.path == '/v2/' or self.path == '/v2':
                    self.send_response(200)
                    self.send_header('Content-Length', '2')
                    self.end_headers()
                    self.wfile.write(b'{}')
                    return
                self.send_response(307)
                self.send_header('Location', 'http://127.0.0.1:%s/blob' % inside)
                self.send_header('Content-Length', '0')
                self.end_headers()
                return
            host = '127.0.0.1' if mode == 'loopback' else own
            self.send_response(401)
            self.send_header('WWW-Authenticate', 'Bearer realm="http://%s:%s/token",service="x"' % (host, inside))
            self.send_header('Content-Length', '2')
            self.end_headers()
            self.wfile.write(b'{}')
        do_HEAD = do_GET
    return H
for port, mode in [(8001, 'loopback'), (8002, 'own'), (8003, 'redirect')]:
    s = http.server.HTTPServer((sys.argv[1], port), handler(mode))
    threading.Thread(target=s.serve_forever, daemon=True).start()
print('up', flush=True)
threading.Event().wait()
"#;
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let first_line = |c: &mut std::process::Child| {
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(c.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        line.trim().to_string()
    };
    let mut inside = std::process::Command::new("python3")
        .arg("-c")
        .arg(logger)
        .arg(&inside_log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let inside_port = first_line(&mut inside);
    let _inside = Kill(inside);
    let own = std::net::Ipv4Addr::from(u32::from(peer.addr) - 1).to_string();
    let mut outside = peer
        .command("python3")
        .arg("-c")
        .arg(outside)
        .arg(peer.addr.to_string())
        .arg(&inside_port)
        .arg(&own)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut outside), "up");
    let _outside = Kill(outside);

    let registries: Vec<String> = (8001..=8003)
        .map(|p| format!("{}:{p}", peer.addr))
        .collect();
    let refs: Vec<&str> = registries.iter().map(String::as_str).collect();
    let (profiles, config) = listing(&tmp, &refs);
    let tokens = token_file(&tmp);
    let d = TestDaemon::start_with_env(
        &[&format!("--token-file={tokens}"), &profiles],
        &[("STOCKADE_CONFIG", &config)],
    );
    let a = d.client(Some(TOKEN_A)).await;

    // The tenant names this host's loopback itself: not a listed registry.
    let e = refused(
        &a,
        &format!("127.0.0.1:{inside_port}/x/app:1"),
        "a tenant pulled from this host's loopback",
    )
    .await;
    assert_eq!(e.code(), ErrorCode::PolicyDenied, "{e}");
    assert!(e.to_string().contains("registries"), "{e}");

    // A listed registry leads the pull back to this host.
    for (registry, want) in [
        (&registries[0], "loopback"),
        (&registries[1], "an address of this host"),
        (&registries[2], "loopback"),
    ] {
        let e = refused(
            &a,
            &format!("{registry}/x/app:1"),
            "a pull led into this host gave an image",
        )
        .await;
        assert_eq!(
            e.code(),
            ErrorCode::PolicyDenied,
            "{registry}: {e}\n{}",
            d.log()
        );
        assert!(e.to_string().contains(want), "{registry}: {e}");
    }
    let seen = std::fs::read_to_string(&inside_log).unwrap_or_default();
    assert!(
        seen.is_empty(),
        "a tenant's pull reached this host's service: {seen}"
    );
    d.assert_none_left().await;
}

/// A tenant runs only the images its profile shares and those it pulled itself: an
/// image the operator brought into the store is not another tenant's to run, and an
/// image tenant A pulled is pulled again for tenant B (so B must be able to fetch it
/// itself). The old code ran any image the host had for any tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_runs_only_images_shared_with_it_or_pulled_by_it() {
    if !require_root("the daemon's tests") {
        return;
    }
    let Some(peer) = Peer::start() else { return };
    let Some(reg) = Registry::start_on(&peer) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let base = tiny_base(tmp.path());
    let pulled = push(&reg, tmp.path(), &base, "pulled", b"pulled");
    let tokens = token_file(&tmp);
    let (profiles, config) = listing(&tmp, &[&reg.addr]);
    let mut d = TestDaemon::start_with_env(
        &[&format!("--token-file={tokens}"), &profiles],
        &[("STOCKADE_CONFIG", &config)],
    );
    // The operator's own image, in the daemon's store, on no registry.
    let store = stockade_image::Store::open(d.dir.join("home/images")).unwrap();
    let layout = tmp.path().join("layout-operator");
    stockade_testkit::oci_layout(
        &layout,
        &base,
        &[("srv/blob", b"the operator's")],
        serde_json::json!({}),
        "v1",
    );
    stockade_image::import(&store, &layout, Some("local.test/operator/secret:1")).unwrap();
    // ...and its root, as after the operator's own first run of it.
    store
        .rootfs(&store.image("local.test/operator/secret:1").unwrap())
        .unwrap();
    let a = d.client(Some(TOKEN_A)).await;
    let b = d.client(Some(TOKEN_B)).await;

    let e = refused(
        &a,
        "local.test/operator/secret:1",
        "a tenant ran an image the operator brought in and did not share",
    )
    .await;
    assert_eq!(e.code(), ErrorCode::PolicyDenied, "{e}");
    // Said as it is: on the host, not shared (and how the operator shares it).
    assert!(
        e.to_string().contains("on this host but not shared")
            && e.to_string().contains("shared_images"),
        "{e}"
    );

    // A pulls an image; B's create of the same reference is B's own pull: with the
    // registry gone it fails for B, while A still runs what it pulled.
    try_create(&a, &pulled)
        .await
        .unwrap_or_else(|e| panic!("a tenant's own pull: {e}\n{}", d.log()))
        .destroy()
        .await
        .unwrap();
    drop(reg);
    d.assert_none_left().await;
    let e = refused(
        &b,
        &pulled,
        "tenant B ran the image tenant A pulled without fetching it itself",
    )
    .await;
    assert_ne!(e.code(), ErrorCode::Internal, "{e}");
    try_create(&a, &pulled)
        .await
        .expect("what a tenant pulled stays its own")
        .destroy()
        .await
        .unwrap();

    // Named by one of the operator's templates: shared with every tenant.
    drop(d);
    let templates = tmp.path().join("templates.toml");
    std::fs::write(
        &templates,
        format!(
            "{}\n[templates.op]\nimage = \"local.test/operator/secret:1\"\n",
            std::fs::read_to_string(&config).unwrap()
        ),
    )
    .unwrap();
    d = TestDaemon::start_with_env(
        &[&format!("--token-file={tokens}"), &profiles],
        &[("STOCKADE_CONFIG", templates.to_str().unwrap())],
    );
    let store = stockade_image::Store::open(d.dir.join("home/images")).unwrap();
    stockade_image::import(&store, &layout, Some("local.test/operator/secret:1")).unwrap();
    let a = d.client(Some(TOKEN_A)).await;
    try_create(&a, "local.test/operator/secret:1")
        .await
        .unwrap_or_else(|e| panic!("a template's image: {e}\n{}", d.log()))
        .destroy()
        .await
        .unwrap();

    // Shared by the operator's profile: every tenant runs it from the store.
    drop(d);
    let shared = tmp.path().join("shared.toml");
    std::fs::write(
        &shared,
        format!(
            "[profile.tenant]\nregistries = [{:?}]\nshared_images = [\"local.test/operator/*\"]\n",
            format!("{}:5000", peer.addr)
        ),
    )
    .unwrap();
    d = TestDaemon::start_with_env(
        &[
            &format!("--token-file={tokens}"),
            &format!("--profiles={}", shared.display()),
        ],
        &[("STOCKADE_CONFIG", &config)],
    );
    let store = stockade_image::Store::open(d.dir.join("home/images")).unwrap();
    stockade_image::import(&store, &layout, Some("local.test/operator/secret:1")).unwrap();
    let b = d.client(Some(TOKEN_B)).await;
    try_create(&b, "local.test/operator/secret:1")
        .await
        .unwrap_or_else(|e| panic!("a shared image: {e}\n{}", d.log()))
        .destroy()
        .await
        .unwrap();
    d.assert_none_left().await;
}
