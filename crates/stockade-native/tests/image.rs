//! `--image` end to end: the Debian test image (built by stockade-image's
//! ci-setup.sh) plus a layer of our own is imported into a private store, and Python
//! runs from its root in a real native sandbox, with the image's Env and WorkingDir.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_image::Digest;
use stockade_native::NativeProvider;

/// In CI (`CI` set) a missing part fails with how to fix it; elsewhere the test says
/// SKIPPED, loudly.
fn require<T>(part: &str, found: Result<T, String>, fix: &str) -> Option<T> {
    match found {
        Ok(v) => Some(v),
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("{part} is missing: {why}\nfix: {fix}")
        }
        Err(why) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: {part} is missing: {why}\n*** fix: {fix} (in CI this fails)\n"
            );
            None
        }
    }
}

fn debian_tar() -> Result<PathBuf, String> {
    let script = include_bytes!("../../stockade-image/ci-setup.sh");
    let digest = Digest::of(script);
    let key = &digest.hex()[..16];
    let p = Path::new("/var/cache/stockade/test-images")
        .join(key)
        .join("debian-python.tar");
    p.is_file()
        .then_some(p.clone())
        .ok_or_else(|| format!("{} does not exist", p.display()))
}

/// A one-file layer tar: `srv/hello.py`.
fn hello_layer() -> Vec<u8> {
    let body =
        b"import os\nprint('hello', os.getcwd(), os.environ['IMAGE_GREETING'], os.getuid())\n";
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "srv/hello.py", &body[..]).unwrap();
    b.into_inner().unwrap()
}

/// An OCI layout of the Debian tar + the hello layer.
fn write_layout(dir: &Path, base: &Path) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| {
        let d = Digest::of(data);
        std::fs::write(blobs.join(d.hex()), data).unwrap();
        (d, data.len())
    };
    let base = std::fs::read(base).unwrap();
    let layers = [put(&base), put(&hello_layer())];
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin", "IMAGE_GREETING=from-image"], "WorkingDir": "/srv"},
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.0.to_string()).collect::<Vec<_>>()},
    }))
    .unwrap();
    let (cd, cs) = put(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd.to_string(), "size": cs},
        "layers": layers.iter().map(|(d, n)| serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d.to_string(), "size": n})).collect::<Vec<_>>(),
    }))
    .unwrap();
    let (md, ms) = put(&manifest);
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md.to_string(), "size": ms,
        "annotations": {"org.opencontainers.image.ref.name": "localhost/stockade-test/debian:1"}}]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

#[tokio::test]
async fn python_runs_from_an_image_root() {
    let root = rustix::process::geteuid().is_root();
    if require::<()>(
        "root",
        if root { Ok(()) } else { Err("not root".into()) },
        "run as root",
    )
    .is_none()
    {
        return;
    }
    let Some(_agent) = require(
        "the stockade agent",
        stockade_native::find_agent().map_err(|e| e.to_string()),
        "cargo build -p stockade-agent (cargo test --workspace builds it)",
    ) else {
        return;
    };
    let Some(base) = require(
        "the Debian test image",
        debian_tar(),
        "run crates/stockade-image/ci-setup.sh as root",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    write_layout(&layout, &base);
    let store = stockade_image::Store::open(tmp.path().join("images")).unwrap();
    stockade_image::import(&store, &layout, None).unwrap();

    let provider: Arc<dyn Provider> = Arc::new(
        NativeProvider::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    );
    let spec = SandboxSpec {
        image: Some("localhost/stockade-test/debian:1".into()),
        ..Default::default()
    };
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let sb = Sandbox::create(provider.clone(), spec, opts).await.unwrap();
    let out = sb.exec(ExecRequest::new(["python3", "hello.py"])).await;
    let probe = sb
        .exec(ExecRequest::new([
            "/usr/bin/python3",
            "-c",
            "import os; print(os.path.exists('/srv/hello.py'), os.access('/usr', os.W_OK))",
        ]))
        .await;
    sb.destroy().await.unwrap();
    let out = out.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello /srv from-image 1000\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&probe.unwrap().stdout),
        "True False\n"
    );

    // A missing image is NotFound, naming it.
    let spec = SandboxSpec {
        image: Some("localhost/stockade-test/missing:1".into()),
        ..Default::default()
    };
    let e = Sandbox::create(provider, spec, CreateOptions::default())
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("missing:1"), "{e}");
}
