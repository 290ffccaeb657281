//! Commits: a layer on top of an image, stored as a new image.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stockade_image::oci::{MEDIA_CONFIG, MEDIA_LAYER_GZIP, MEDIA_LAYER_TAR, MEDIA_MANIFEST};
use stockade_image::{Commit, Digest, Error, Image, Limits, Listed, Reference, Store};

use crate::support::{Layer, gzip, store, tree};

/// A base image of these layers (gzipped, with Docker media types) and this config
/// (its diff_ids set), tagged `name`.
fn base_image(store: &Store, layers: &[Vec<u8>], mut config: Value, name: &str) -> Image {
    let diff_ids: Vec<String> = layers.iter().map(|l| Digest::of(l).to_string()).collect();
    config["rootfs"] = json!({"type": "layers", "diff_ids": diff_ids});
    let config = serde_json::to_vec(&config).unwrap();
    let config_digest = store.put_blob_bytes(&config, None).unwrap();
    let blobs: Vec<Vec<u8>> = layers.iter().map(|l| gzip(l)).collect();
    for b in &blobs {
        store.put_blob_bytes(b, None).unwrap();
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": config_digest.to_string(), "size": config.len()},
        "layers": blobs.iter().map(|b| json!({
            "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
            "digest": Digest::of(b).to_string(), "size": b.len()
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    let digest = store.put_blob_bytes(&manifest, None).unwrap();
    store
        .tag(&Reference::parse(name).unwrap(), &digest)
        .unwrap();
    store.image(name).unwrap()
}

/// A config with fields the store does not type, to be carried over.
fn base_config() -> Value {
    json!({
        "architecture": "amd64", "os": "linux", "author": "someone",
        "created": "2020-01-01T00:00:00Z",
        "config": {
            "Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TZ=UTC"],
            "WorkingDir": "/srv", "User": "1000",
            "Cmd": ["python3"], "Entrypoint": ["/bin/sh", "-c"],
            "Labels": {"org.example.team": "images"},
            "ExposedPorts": {"8080/tcp": {}},
            "StopSignal": "SIGINT"
        },
        "history": [
            {"created": "2020-01-01T00:00:00Z", "created_by": "base layer 1"},
            {"created": "2020-01-01T00:00:00Z", "created_by": "base layer 2"}
        ],
        "x-stockade-test": {"kept": true}
    })
}

/// The base: `etc/{keep,change,gone}` and `var/cache/{a,b}`, then `etc/l2`.
fn base(store: &Store) -> Image {
    let l1 = Layer::new()
        .dir("etc")
        .file("etc/keep", b"keep")
        .file("etc/change", b"old")
        .file("etc/gone", b"bye")
        .dir("var")
        .dir("var/cache")
        .file("var/cache/a", b"a")
        .file("var/cache/b", b"b")
        .into_tar();
    let l2 = Layer::new().file("etc/l2", b"second").into_tar();
    base_image(store, &[l1, l2], base_config(), "base:1")
}

/// Adds a file, changes one, removes a file and a directory of the base.
fn change_layer() -> Vec<u8> {
    Layer::new()
        .dir("usr")
        .dir("usr/local")
        .dir("usr/local/bin")
        .file_mode("usr/local/bin/tool", b"#!/bin/sh\necho hi\n", 0o755)
        .file("etc/change", b"new")
        .file("etc/.wh.gone", b"")
        .file("var/.wh.cache", b"")
        .into_tar()
}

fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

fn commit() -> Commit {
    Commit {
        env: vec![
            ("LANG".into(), "en_US.UTF-8".into()),
            ("NEW".into(), "a=b".into()),
        ],
        workdir: Some("/work".into()),
        user: Some("app".into()),
        cmd: Some(vec!["sh".into(), "-c".into(), "run".into()]),
        created_by: "stockade commit sbx-1".into(),
    }
}

fn only_base(store: &Store, base: &Image) {
    assert_eq!(
        store.images().unwrap(),
        [Listed {
            reference: Some("docker.io/library/base:1".into()),
            digest: base.digest.clone()
        }]
    );
}

#[test]
fn a_commit_adds_changes_and_removes_over_the_base() {
    let (dir, store) = store();
    let base = base(&store);
    let base_root = store.rootfs(&base).unwrap();
    let base_tree = tree(&base_root);
    let tar = change_layer();
    let layer = write(dir.path(), "layer.tar", &tar);
    let new = store.commit(&base, &layer, &commit(), None).unwrap();

    let root = store.rootfs(&new).unwrap();
    assert_eq!(
        tree(&root),
        [
            "etc",
            "etc/change",
            "etc/keep",
            "etc/l2",
            "usr",
            "usr/local",
            "usr/local/bin",
            "usr/local/bin/tool",
            "var"
        ]
    );
    let tool = root.join("usr/local/bin/tool");
    assert_eq!(std::fs::read(&tool).unwrap(), b"#!/bin/sh\necho hi\n");
    let mode = std::fs::metadata(&tool).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert_eq!(std::fs::read(root.join("etc/change")).unwrap(), b"new");
    assert_eq!(std::fs::read(root.join("etc/keep")).unwrap(), b"keep");

    // The base is untouched: its tree, and the same image by its digest.
    assert_eq!(tree(&base_root), base_tree);
    assert!(base_tree.contains(&"etc/gone".to_string()));
    assert!(base_tree.contains(&"var/cache/a".to_string()));
    assert_eq!(std::fs::read(base_root.join("etc/change")).unwrap(), b"old");
    let again = store.image_by_digest(&base.digest).unwrap();
    assert_eq!(again.config_digest, base.config_digest);
    assert_eq!(store.image("base:1").unwrap().digest, base.digest);

    // An OCI manifest: the base's layers (as OCI media types), then the tar as is.
    assert_eq!(new.manifest.media_type.as_deref(), Some(MEDIA_MANIFEST));
    assert_eq!(new.manifest.config.media_type, MEDIA_CONFIG);
    assert_eq!(new.manifest.layers.len(), 3);
    for (n, b) in new.manifest.layers.iter().zip(&base.manifest.layers) {
        assert_eq!((&n.digest, n.size), (&b.digest, b.size));
        assert_eq!(n.media_type, MEDIA_LAYER_GZIP);
    }
    let top = &new.manifest.layers[2];
    assert_eq!(top.media_type, MEDIA_LAYER_TAR);
    assert_eq!(top.digest, Digest::of(&tar));
    assert_eq!(top.size, tar.len() as u64);
    assert_eq!(std::fs::read(store.blob_path(&top.digest)).unwrap(), tar);
}

#[test]
fn the_config_is_the_base_one_changed_by_the_commit() {
    let (dir, store) = store();
    let base = base(&store);
    let tar = change_layer();
    let layer = write(dir.path(), "layer.tar", &tar);
    let mut c = commit();
    c.env.push(("PATH".into(), "/opt/bin:/usr/bin".into()));
    let new = store.commit(&base, &layer, &c, None).unwrap();

    let rc = new.run_config();
    assert_eq!(
        rc.env.unwrap(),
        [
            "PATH=/opt/bin:/usr/bin",
            "LANG=en_US.UTF-8",
            "TZ=UTC",
            "NEW=a=b"
        ]
    );
    assert_eq!(rc.working_dir.as_deref(), Some("/work"));
    assert_eq!(rc.user.as_deref(), Some("app"));
    assert_eq!(rc.cmd.unwrap(), ["sh", "-c", "run"]);
    assert_eq!(rc.entrypoint, None, "a cmd clears the entrypoint");

    let diff_ids = &new.config.rootfs.as_ref().unwrap().diff_ids;
    let base_ids = &base.config.rootfs.as_ref().unwrap().diff_ids;
    assert_eq!(diff_ids.len(), 3);
    assert_eq!(&diff_ids[..2], &base_ids[..]);
    assert_eq!(diff_ids[2], Digest::of(&tar));

    // The document itself: what the store does not type is still there.
    let raw: Value =
        serde_json::from_slice(&store.read_document(&new.config_digest).unwrap()).unwrap();
    assert_eq!(raw["architecture"], "amd64");
    assert_eq!(raw["os"], "linux");
    assert_eq!(raw["author"], "someone");
    assert_eq!(raw["x-stockade-test"], json!({"kept": true}));
    assert_eq!(
        raw["config"]["Labels"],
        json!({"org.example.team": "images"})
    );
    assert_eq!(raw["config"]["ExposedPorts"], json!({"8080/tcp": {}}));
    assert_eq!(raw["config"]["StopSignal"], "SIGINT");
    assert!(raw["config"].get("Entrypoint").is_none(), "{raw}");
    assert_eq!(raw["rootfs"]["type"], "layers");
    let history = raw["history"].as_array().unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(
        history[..2],
        base_config()["history"].as_array().unwrap()[..]
    );
    assert_eq!(history[2]["created_by"], "stockade commit sbx-1");
    let created = raw["created"].as_str().unwrap();
    assert_eq!(history[2]["created"], created);
    assert_ne!(created, "2020-01-01T00:00:00Z");
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "{created}"
    );

    // A commit that sets nothing keeps the base's run config.
    let plain = store
        .commit(&base, &layer, &Commit::default(), None)
        .unwrap();
    assert_eq!(plain.run_config(), base.run_config());
}

#[test]
fn a_tagged_commit_is_named_and_an_untagged_one_is_kept() {
    let (dir, store) = store();
    let base = base(&store);
    let layer = write(dir.path(), "layer.tar", &change_layer());
    let tag = Reference::parse("app:v2").unwrap();

    let first = store.commit(&base, &layer, &commit(), Some(&tag)).unwrap();
    assert_eq!(store.image("app:v2").unwrap().digest, first.digest);
    // Tagging again replaces what the tag named.
    let mut c = commit();
    c.created_by = "second".into();
    let second = store.commit(&base, &layer, &c, Some(&tag)).unwrap();
    assert_ne!(second.digest, first.digest);
    assert_eq!(store.image("app:v2").unwrap().digest, second.digest);

    let untagged = store
        .commit(&base, &layer, &Commit::default(), None)
        .unwrap();
    store.gc().unwrap();
    assert!(!store.has_blob(&first.digest), "no name kept the first");
    let found = store.image_by_digest(&untagged.digest).unwrap();
    assert_eq!(found.config_digest, untagged.config_digest);
    assert!(store.images().unwrap().contains(&Listed {
        reference: None,
        digest: untagged.digest.clone()
    }));
    assert_eq!(tree(&store.rootfs(&found).unwrap()).len(), 9);
    // A commit on a commit.
    let top = write(
        dir.path(),
        "top.tar",
        &Layer::new().file("top", b"t").into_tar(),
    );
    let third = store
        .commit(&found, &top, &Commit::default(), None)
        .unwrap();
    assert_eq!(third.manifest.layers.len(), 4);
    assert!(tree(&store.rootfs(&third).unwrap()).contains(&"top".to_string()));
}

#[test]
fn a_layer_past_the_caps_is_refused_by_name_and_nothing_is_named() {
    let (dir, store) = store();
    let base = base(&store);
    let big = Layer::new().file("big", &vec![7u8; 2 << 20]).into_tar();
    let layer = write(dir.path(), "big.tar", &big);
    let tag = Reference::parse("big:1").unwrap();
    let blobs = || {
        std::fs::read_dir(store.root().join("blobs/sha256"))
            .unwrap()
            .count()
    };
    let before = blobs();

    // The store's total cap.
    let capped = store
        .clone()
        .with_max_store_bytes(store.usage().unwrap() + (1 << 20));
    let e = capped
        .commit(&base, &layer, &commit(), Some(&tag))
        .unwrap_err();
    assert!(matches!(e, Error::QuotaExceeded { .. }), "{e}");
    for needle in ["max_total_bytes", &layer.display().to_string()] {
        assert!(e.to_string().contains(needle), "{e} lacks {needle}");
    }

    // The per-image cap, for a file and for a pipe (its length unknown up front).
    let limited = store.clone().with_limits(Limits {
        max_entries: 100,
        max_bytes: 1 << 20,
    });
    let e = limited
        .commit(&base, &layer, &commit(), Some(&tag))
        .unwrap_err();
    assert!(
        matches!(e, Error::LimitExceeded { what: "bytes", .. }),
        "{e}"
    );
    for needle in ["max_image_bytes", &layer.display().to_string()] {
        assert!(e.to_string().contains(needle), "{e} lacks {needle}");
    }
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let writer = {
        let (fifo, big) = (fifo.clone(), big.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            // The reader stops early: a broken pipe is expected.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .and_then(|mut f| f.write_all(&big));
        })
    };
    let e = limited
        .commit(&base, &fifo, &commit(), Some(&tag))
        .unwrap_err();
    writer.join().unwrap();
    assert!(
        matches!(e, Error::LimitExceeded { what: "bytes", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("fifo"), "{e}");

    only_base(&store, &base);
    assert!(matches!(
        store.resolve("big:1"),
        Err(Error::ImageNotFound { .. })
    ));
    assert_eq!(blobs(), before, "nothing of the layer was stored");
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
}

#[test]
fn a_malformed_or_unsafe_layer_is_refused_and_nothing_is_named() {
    let (dir, store) = store();
    let base = base(&store);
    let tag = Reference::parse("bad:1").unwrap();
    let refused = |name: &str, data: &[u8]| {
        let layer = write(dir.path(), name, data);
        let e = store
            .commit(&base, &layer, &commit(), Some(&tag))
            .unwrap_err();
        assert!(
            e.to_string().contains(&layer.display().to_string()),
            "{e} does not name the layer"
        );
        only_base(&store, &base);
        assert!(matches!(
            store.resolve("bad:1"),
            Err(Error::ImageNotFound { .. })
        ));
        e
    };

    let garbage = b"this is not a tar archive at all\n".repeat(64);
    let e = refused("garbage.tar", &garbage);
    assert!(matches!(e, Error::Archive { .. }), "{e}");
    let escape = Layer::new().file("../outside", b"x").into_tar();
    let e = refused("escape.tar", &escape);
    assert!(matches!(e, Error::UnsafeEntry { .. }), "{e}");
    assert!(e.to_string().contains("'..'"), "{e}");
    let e = refused("layer.tar.gz", &gzip(&change_layer()));
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("uncompressed"), "{e}");
    std::fs::create_dir(dir.path().join("dir.tar")).unwrap();
    let e = store
        .commit(&base, &dir.path().join("dir.tar"), &commit(), Some(&tag))
        .unwrap_err();
    assert!(e.to_string().contains("not a tar file"), "{e}");

    // A bad variable name is refused before anything is read.
    let layer = write(dir.path(), "layer.tar", &change_layer());
    let mut c = commit();
    c.env.push(("A=B".into(), "x".into()));
    let e = store.commit(&base, &layer, &c, Some(&tag)).unwrap_err();
    assert!(matches!(e, Error::InvalidImage { .. }), "{e}");
    assert!(e.to_string().contains("\"A=B\""), "{e}");

    // gc removes the blobs the refused layers left; the base is whole.
    store.gc().unwrap();
    only_base(&store, &base);
    assert_eq!(tree(&store.rootfs(&base).unwrap()).len(), 9);
}
