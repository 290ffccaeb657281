//! `--image` end to end: the Debian test image (built by stockade-image's
//! ci-setup.sh) plus a layer of our own is imported into a private store, and Python
//! runs from its root in a real native sandbox, with the image's Env and WorkingDir.

use std::path::Path;
use std::sync::Arc;

use stockade_core::{CreateOptions, Error, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_native::{NativeLauncher, NativeProvider};
use stockade_testkit::{DEBIAN_FIX, Registry, debian_test_image, require};

mod common;

const HELLO: &[u8] =
    b"import os\nprint('hello', os.getcwd(), os.environ['IMAGE_GREETING'], os.getuid())\n";

/// An OCI layout of the Debian tar + a hello layer, its config naming user nobody.
fn write_layout(dir: &Path, base: &Path) {
    write_layout_as(dir, base, "nobody", IMAGE);
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
    common::root_and_agent()?;
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

    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    ));
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
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    ));
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
    // `--user 0` is an explicit opt-in and is honoured: root of the sandbox's own user
    // namespace, with only the capabilities over its own files (chown, dac_override,
    // fowner, kill, setgid, setuid = 0xeb).
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
        "0 00000000000000eb\n"
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
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(tmp.path().join("state")).with_image_store(store.root()),
    ));
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

/// A tar holding only `srv/hello`: an image no code can run in, enough to build a
/// sandbox's root from.
fn tiny_base(dir: &Path) -> std::path::PathBuf {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    h.set_cksum();
    b.append_data(&mut h, "srv", std::io::empty()).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(2);
    h.set_cksum();
    b.append_data(&mut h, "srv/hello", &b"hi"[..]).unwrap();
    let p = dir.join("tiny.tar");
    std::fs::write(&p, b.into_inner().unwrap()).unwrap();
    p
}

/// A host directory the sandbox user could read if it reached it, holding a secret;
/// the store lives beside it, so `../../..` from an image rootfs lands here.
struct Host {
    dir: tempfile::TempDir,
    secret: String,
}

impl Host {
    fn new() -> Host {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret = format!("host-secret-{}", std::process::id());
        std::fs::write(dir.path().join("secret.txt"), &secret).unwrap();
        std::fs::set_permissions(
            dir.path().join("secret.txt"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        Host { dir, secret }
    }
}

/// Reads every path through which the host's secret file or the test process's own
/// /proc entry would show if a symlink were followed on the host: `prefix` + the
/// secret's host path, + `secret.txt` (a `../../..` landing beside the store), +
/// `proc/<pid>` and `<pid>` (host /proc). Returns what leaked.
async fn leaks(sb: &Sandbox, host: &Host, prefixes: &[&str]) -> Vec<String> {
    let pid = std::process::id();
    let own_cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let secret_path = host.dir.path().join("secret.txt");
    let secret_rel = secret_path.strip_prefix("/").unwrap().display().to_string();
    let mut found = Vec::new();
    for prefix in prefixes {
        for suffix in [
            secret_rel.clone(),
            "secret.txt".into(),
            format!("proc/{pid}/cmdline"),
            format!("{pid}/cmdline"),
        ] {
            let path = format!("{prefix}/{suffix}");
            if let Ok(data) = sb.read(&path).await
                && (data == host.secret.as_bytes() || data == own_cmdline)
            {
                found.push(path);
            }
        }
    }
    found
}

/// The sandbox paths tried for each image below.
const PREFIXES: &[&str] = &[
    "",
    "/etc",
    "/usr",
    "/bin",
    "/tmp",
    "/proc",
    "/dev",
    "/srv/deep",
    "/usr/local",
    "/usr/share/nested",
    "/etc/ssl",
    "/etc/nested",
    "/etc/hostproc",
    "/etc/etc",
    "/etc/usr",
];

/// Images may hold any symlink, but the host never follows one: `etc`, `bin`,
/// `tmp`, `proc`, `dev` and nested entries (`usr/local`, `srv/deep`) pointing at `/`, `/proc` and
/// `../../..` (read-only and writable roots alike) show the sandbox's own tree, never
/// the host's files or processes. Before the fix, `/etc -> /` bound the host's root
/// entries (its /proc included) under the sandbox's /etc.
#[tokio::test]
async fn image_symlinks_never_reach_the_host() {
    use stockade_testkit::LayerEntry::{Dir, File, Symlink};
    // The native agent is dynamically linked: its file operations need the image's
    // libc, so the images are the Debian test image plus the attack layer (and `usr`
    // itself cannot be a symlink here; the docker test covers that).
    let Some(base) = parts() else { return };
    let host = Host::new();
    let store = stockade_image::Store::open(host.dir.path().join("images")).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(host.dir.path().join("state"))
            .with_image_store(store.root()),
    ));
    let mut images = Vec::new();
    for (i, to) in ["/", "/proc", "../../.."].into_iter().enumerate() {
        let entries = [
            Symlink("etc", to),
            Symlink("bin", to),
            Symlink("tmp", to),
            Symlink("proc", to),
            Symlink("dev", to),
            Symlink(".stockade", to),
            Dir("srv"),
            File("srv/hello", b"hi"),
            Symlink("srv/deep", to),
            Symlink("usr/local", to),
            Symlink("usr/share/nested", to),
        ];
        images.push((format!("localhost/attack/top:{i}"), entries.to_vec()));
    }
    // A real /etc whose entries point out.
    images.push((
        "localhost/attack/nested:1".into(),
        vec![
            Dir("etc"),
            Symlink("etc/ssl", "/"),
            Symlink("etc/nested", "../../../.."),
            Symlink("etc/hostproc", "/proc"),
            Dir("srv"),
            File("srv/hello", b"hi"),
            Symlink("srv/deep", "../../../../.."),
        ],
    ));
    for (name, entries) in &images {
        let layout = host
            .dir
            .path()
            .join(format!("layout-{}", name.replace([':', '/'], "-")));
        stockade_testkit::oci_layout_entries(&layout, &base, entries, serde_json::json!({}), name);
        stockade_image::import(&store, &layout, None).unwrap();
        for writable in [false, true] {
            let spec = SandboxSpec {
                image: Some(name.clone()),
                writable,
                ..Default::default()
            };
            let sb = Sandbox::create(provider.clone(), spec, owned())
                .await
                .unwrap_or_else(|e| panic!("{name} (writable {writable}): {e}"));
            let found = leaks(&sb, &host, PREFIXES).await;
            // The image's own content is still there.
            let hello = sb.read("/srv/hello").await;
            sb.destroy().await.unwrap();
            assert!(
                found.is_empty(),
                "{name} (writable {writable}): host files reached through {found:?}"
            );
            assert_eq!(hello.unwrap(), b"hi", "{name}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(host.dir.path().join("secret.txt")).unwrap(),
        host.secret
    );
}

/// An image's top-level symlink is a parent of the spec's working directory: the
/// agent creates it inside the sandbox's root (where the link resolves), never on
/// the host, and changes no host directory's mode.
#[tokio::test]
async fn a_workdir_below_an_image_symlink_stays_inside() {
    use std::os::unix::fs::PermissionsExt;
    use stockade_testkit::LayerEntry::Symlink;
    if require("root", stockade_testkit::root(), "run the tests as root").is_none() {
        return;
    }
    let host = Host::new();
    let target = host.dir.path().join("private");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let base = tiny_base(host.dir.path());
    let store = stockade_image::Store::open(host.dir.path().join("images")).unwrap();
    let layout = host.dir.path().join("layout");
    let to = target.display().to_string();
    stockade_testkit::oci_layout_entries(
        &layout,
        &base,
        &[Symlink("home", &to), Symlink("work", "/")],
        serde_json::json!({}),
        "localhost/attack/home:1",
    );
    stockade_image::import(&store, &layout, None).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(host.dir.path().join("state"))
            .with_image_store(store.root()),
    ));
    for workdir in ["/home/made-by-sandbox", "/work/home/x"] {
        let spec = SandboxSpec {
            image: Some("localhost/attack/home:1".into()),
            workdir: Some(workdir.into()),
            ..Default::default()
        };
        let sb = Sandbox::create(provider.clone(), spec, owned())
            .await
            .unwrap_or_else(|e| panic!("{workdir}: {e}"));
        sb.destroy().await.unwrap();
    }
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "a directory was created on the host"
    );
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777,
        0o700,
        "a host directory's mode changed"
    );
}

/// Python inside an image whose `/etc` is `/` (and `/usr/local` is `/proc`) tries
/// to read the host's secret and to see the test process: neither is there.
#[tokio::test]
async fn code_in_an_image_with_etc_to_root_sees_no_host() {
    use stockade_testkit::LayerEntry::Symlink;
    let Some(debian) = parts() else { return };
    let host = Host::new();
    let store = stockade_image::Store::open(host.dir.path().join("images")).unwrap();
    let layout = host.dir.path().join("layout");
    stockade_testkit::oci_layout_entries(
        &layout,
        &debian,
        &[Symlink("etc", "/"), Symlink("usr/local", "/proc")],
        serde_json::json!({"Env": ["PATH=/usr/bin:/bin"]}),
        "localhost/attack/etc-root:1",
    );
    stockade_image::import(&store, &layout, None).unwrap();
    let provider: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(host.dir.path().join("state"))
            .with_image_store(store.root()),
    ));
    let spec = SandboxSpec {
        image: Some("localhost/attack/etc-root:1".into()),
        ..Default::default()
    };
    let sb = Sandbox::create(provider, spec, owned()).await.unwrap();
    let secret = host.dir.path().join("secret.txt");
    let probe = format!(
        r#"
import os
pid = {pid}
leaks = []
for p in ["/etc{secret}", "/etc/etc{secret}", "{secret}", "/etc/proc/%d/cmdline" % pid,
          "/proc/%d/cmdline" % pid, "/usr/local/%d/cmdline" % pid]:
    try:
        leaks.append((p, open(p, "rb").read()[:40]))
    except OSError:
        pass
pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
print("leaks", leaks)
print("max pid", max(pids), "host pid visible", pid in pids and b"image" in open("/proc/%d/cmdline" % pid, "rb").read())
"#,
        pid = std::process::id(),
        secret = secret.display()
    );
    let out = sb
        .exec(ExecRequest::new(["/usr/bin/python3", "-c", &probe]))
        .await
        .unwrap();
    sb.destroy().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.exit_code,
        0,
        "stdout: {stdout} stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("leaks []"), "{stdout}");
    assert!(stdout.contains("host pid visible False"), "{stdout}");
}
