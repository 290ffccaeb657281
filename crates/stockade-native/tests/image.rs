//! `--image` end to end: the Debian test image (built by stockade-image's
//! ci-setup.sh) plus a layer of our own is imported into a private store, and Python
//! runs from its root in a real native sandbox, with the image's Env and WorkingDir.

use std::path::Path;
use std::sync::Arc;

use stockade_core::{CreateOptions, Error, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_native::NativeProvider;
use stockade_testkit::{DEBIAN_FIX, Registry, debian_test_image, require};

const HELLO: &[u8] =
    b"import os\nprint('hello', os.getcwd(), os.environ['IMAGE_GREETING'], os.getuid())\n";

/// An OCI layout of the Debian tar + a hello layer, its config naming user nobody.
fn write_layout(dir: &Path, base: &Path) {
    write_layout_as(dir, base, "nobody", IMAGE)
}

/// The same, with config `User` `user`, named `name`.
fn write_layout_as(dir: &Path, base: &Path, user: &str, name: &str) {
    let config = serde_json::json!({
        "Env": ["PATH=/usr/bin:/bin", "IMAGE_GREETING=from-image"],
        "WorkingDir": "/srv", "User": user,
    });
    stockade_testkit::oci_layout(dir, base, &[("srv/hello.py", HELLO)], config, name);
}

/// Root, the agent and the Debian test image, or `None` after a SKIPPED line.
fn parts() -> Option<std::path::PathBuf> {
    require("root", stockade_testkit::root(), "run the tests as root")?;
    require(
        "the stockade agent",
        stockade_native::find_agent().map_err(|e| e.to_string()),
        "cargo build -p stockade-agent (cargo test --workspace builds it)",
    )?;
    require("the Debian test image", debian_test_image(), DEBIAN_FIX)
}

fn owned() -> CreateOptions {
    CreateOptions {
        owner_pid: Some(std::process::id()),
    }
}

const IMAGE: &str = "localhost/stockade-test/debian:1";

#[tokio::test]
async fn python_runs_from_an_image_root() {
    let Some(base) = parts() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    write_layout(&layout, &base);
    let store = stockade_image::Store::open(tmp.path().join("images")).unwrap();
    stockade_image::import(&store, &layout, None).unwrap();

    let provider: Arc<dyn Provider> = Arc::new(
        NativeProvider::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    );
    let spec = SandboxSpec {
        image: Some(IMAGE.into()),
        ..Default::default()
    };
    let sb = Sandbox::create(provider.clone(), spec, owned())
        .await
        .unwrap();
    let out = sb.exec(ExecRequest::new(["python3", "hello.py"])).await;
    let probe = sb
        .exec(ExecRequest::new([
            "/usr/bin/python3",
            "-c",
            "import os; print(os.path.exists('/srv/hello.py'), os.access('/usr', os.W_OK))",
        ]))
        .await;
    // While the sandbox runs from it, the image's last reference cannot be removed
    // and gc keeps its tree.
    let removed = store.remove(IMAGE);
    let gc = store.gc().unwrap();
    let trees_while_running = std::fs::read_dir(store.root().join("rootfs"))
        .unwrap()
        .count();
    sb.destroy().await.unwrap();
    let out = out.unwrap();
    // The image's `User` (nobody) applies: the spec keeps the default user.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello /srv from-image 65534\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&probe.unwrap().stdout),
        "True False\n"
    );
    assert!(
        matches!(removed, Err(stockade_image::Error::InUse { .. })),
        "removing an image in use: {removed:?}"
    );
    assert_eq!(gc.trees, 0, "gc removed a tree in use");
    assert_eq!(trees_while_running, 1);
    // Once the sandbox is gone, the image goes.
    store.remove(IMAGE).unwrap();
    assert_eq!(
        std::fs::read_dir(store.root().join("rootfs"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn the_spec_user_overrides_the_image_user_and_root_images_run_unprivileged() {
    let Some(base) = parts() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    write_layout(&layout, &base);
    let store = stockade_image::Store::open(tmp.path().join("images")).unwrap();
    stockade_image::import(&store, &layout, None).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(
        NativeProvider::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    );
    let spec = SandboxSpec {
        image: Some(IMAGE.into()),
        user: stockade_spec::User {
            uid: 2000,
            gid: 2000,
        },
        ..Default::default()
    };
    let sb = Sandbox::create(provider.clone(), spec, owned())
        .await
        .unwrap();
    let out = sb.exec(ExecRequest::new(["/usr/bin/id", "-u"])).await;
    sb.destroy().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.unwrap().stdout), "2000\n");

    // An image whose config says `User: root` still runs as the default uid 1000.
    let root_layout = tmp.path().join("root-layout");
    write_layout_as(
        &root_layout,
        &base,
        "root",
        "localhost/stockade-test/root:1",
    );
    stockade_image::import(&store, &root_layout, None).unwrap();
    let spec = SandboxSpec {
        image: Some("localhost/stockade-test/root:1".into()),
        ..Default::default()
    };
    let sb = Sandbox::create(provider.clone(), spec, owned())
        .await
        .unwrap();
    let out = sb.exec(ExecRequest::new(["/usr/bin/id", "-u"])).await;
    sb.destroy().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.unwrap().stdout), "1000\n");

    let spec = SandboxSpec {
        image: Some(IMAGE.into()),
        user: stockade_spec::User { uid: 0, gid: 0 },
        ..Default::default()
    };
    // `--user 0` is an explicit opt-in and is honoured (still without capabilities).
    let sb = Sandbox::create(provider.clone(), spec, owned())
        .await
        .unwrap();
    let out = sb
        .exec(ExecRequest::new([
            "/usr/bin/python3",
            "-c",
            "import os; print(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])",
        ]))
        .await;
    sb.destroy().await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.unwrap().stdout),
        "0 0000000000000000\n"
    );
}

#[tokio::test]
async fn a_missing_image_is_pulled_on_first_use() {
    let Some(base) = parts() else { return };
    let Some(reg) = Registry::start("127.0.0.1", None) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    write_layout(&layout, &base);
    reg.push(&layout, IMAGE, "stockade-test/debian:1", false);
    let store = stockade_image::Store::open(tmp.path().join("images")).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(
        NativeProvider::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    );
    let reference = format!("{}/stockade-test/debian:1", reg.addr);
    assert!(store.resolve(&reference).is_err(), "the store starts empty");
    let spec = SandboxSpec {
        image: Some(reference.clone()),
        ..Default::default()
    };
    let sb = Sandbox::create(provider.clone(), spec, owned())
        .await
        .unwrap();
    let out = sb.exec(ExecRequest::new(["python3", "hello.py"])).await;
    sb.destroy().await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.unwrap().stdout),
        "hello /srv from-image 65534\n"
    );
    assert!(
        store.resolve(&reference).is_ok(),
        "the pulled image is kept"
    );

    // An image no registry has: Unavailable, naming it and how to get it; nothing
    // is left in the state dir.
    let missing = format!("{}/stockade-test/missing:1", reg.addr);
    let spec = SandboxSpec {
        image: Some(missing.clone()),
        ..Default::default()
    };
    let e = Sandbox::create(provider, spec, owned())
        .await
        .err()
        .unwrap();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains(&missing), "{e}");
    assert_eq!(
        std::fs::read_dir(tmp.path().join("state")).unwrap().count(),
        0,
        "a failed create left state behind"
    );
}
