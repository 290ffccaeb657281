//! A real Debian bookworm image (built by ci-setup.sh with mmdebstrap) plus a
//! hand-made layer with whiteouts: imported as an OCI layout, flattened, and Python
//! run from the flattened root.

use std::path::PathBuf;
use std::process::Command;

use sha2::Digest as _;
use stockade_image::{Digest, import};

use crate::support::{Layer, build, require, store, write_layout};

/// The tar ci-setup.sh builds, keyed by the script's hash.
fn debian_tar() -> Result<PathBuf, String> {
    let script = include_bytes!("../../ci-setup.sh");
    let hex = format!("{:x}", sha2::Sha256::digest(script));
    let path = PathBuf::from("/var/cache/stockade/test-images")
        .join(&hex[..16])
        .join("debian-python.tar");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} does not exist", path.display()))
    }
}

#[test]
fn debian_image_with_whiteouts_runs_python_from_its_rootfs() {
    let Some(base) = require(
        "the Debian test image",
        debian_tar(),
        "run crates/stockade-image/ci-setup.sh (as root; it installs mmdebstrap)",
    ) else {
        return;
    };
    let base = std::fs::read(&base).unwrap();
    let top = Layer::new()
        .file("usr/share/.wh.doc", b"")
        .file("etc/apt/.wh..wh..opq", b"")
        .file("etc/apt/only-this", b"x")
        .dir("srv")
        .file(
            "srv/hello.py",
            b"import sys\nprint('hello from', sys.version_info[:2])\n",
        )
        .into_tar();
    let built = build(&[base, top], false);
    let (dir, store) = store();
    let layout = dir.path().join("layout");
    write_layout(
        &layout,
        &built,
        "127.0.0.1:5000/stockade-test/debian-python:bookworm",
    );
    let out = import(&store, &layout, None).unwrap();
    assert_eq!(
        out[0].references,
        ["127.0.0.1:5000/stockade-test/debian-python:bookworm"]
    );
    assert_eq!(out[0].digest, Digest::of(&built.manifest.1));

    let img = store
        .image("127.0.0.1:5000/stockade-test/debian-python:bookworm")
        .unwrap();
    let root = store.rootfs(&img).unwrap();
    assert!(
        root.join("usr/bin/python3").exists(),
        "python3 in the image"
    );
    assert!(!root.join("usr/share/doc").exists(), "whited out");
    let apt: Vec<_> = std::fs::read_dir(root.join("etc/apt"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(apt, ["only-this"], "opaque directory");
    // Merged /usr: /bin is the image's symlink, stored as is.
    assert_eq!(
        std::fs::read_link(root.join("bin")).unwrap(),
        PathBuf::from("usr/bin")
    );
    assert!(!root.join("dev/null").exists(), "device nodes are skipped");

    if !rustix::process::geteuid().is_root() {
        require::<()>(
            "root",
            Err("chroot needs root".into()),
            "run the tests as root",
        );
        return;
    }
    let run = Command::new("/usr/sbin/chroot")
        .arg(&root)
        .args(["/usr/bin/python3", "/srv/hello.py"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), "hello from (3, 11)\n");
}
