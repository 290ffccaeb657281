//! Blobs, references and gc.

use stockade_image::{Digest, Error, Reference};

use crate::support::{Layer, build, store, store_image};

#[test]
fn blobs_are_verified_before_they_are_stored() {
    let (_d, store) = store();
    let good = Digest::of(b"hello");
    assert_eq!(store.put_blob_bytes(b"hello", Some(&good)).unwrap(), good);
    assert_eq!(std::fs::read(store.blob_path(&good)).unwrap(), b"hello");

    let claimed = Digest::of(b"something else");
    let e = store.put_blob_bytes(b"hello", Some(&claimed)).unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
    assert!(e.to_string().contains(&claimed.to_string()));
    assert!(!store.has_blob(&claimed));
    // Truncated content: the size announced is not the size read.
    let e = store
        .put_blob(&b"hel"[..], Some(&good), Some(5))
        .unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
    let e = store.put_blob(&b"hello!"[..], None, Some(5)).unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(store.root().join("blobs/sha256"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn references_resolve_list_and_remove_with_gc() {
    let (_d, store) = store();
    let a = build(&[Layer::new().file("a", b"1").into_tar()], true);
    let b = build(&[Layer::new().file("b", b"2").into_tar()], true);
    let ia = store_image(&store, &a, "python:3.12");
    let ib = store_image(&store, &b, "127.0.0.1:5000/t/b:1");
    store.rootfs(&ia).unwrap();
    store.unpack_layer(&ia.manifest.layers[0].digest).unwrap();
    store.rootfs(&ib).unwrap();

    assert_eq!(store.resolve("python:3.12").unwrap(), ia.digest);
    assert_eq!(
        store.resolve("docker.io/library/python:3.12").unwrap(),
        ia.digest
    );
    assert_eq!(store.resolve(&ia.digest.to_string()).unwrap(), ia.digest);
    assert_eq!(
        store.resolve(&format!("anything@{}", ib.digest)).unwrap(),
        ib.digest
    );
    assert!(matches!(
        store.resolve("python:3.11"),
        Err(Error::ImageNotFound { .. })
    ));
    let list = store.list().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list["docker.io/library/python:3.12"], ia.digest);

    let img = store.image("python:3.12").unwrap();
    let rc = img.run_config();
    assert_eq!(rc.working_dir.as_deref(), Some("/srv"));
    assert_eq!(rc.cmd, Some(vec!["python3".to_string()]));

    // Another name for the same image keeps it alive when the first goes.
    store
        .tag(&Reference::parse("alias:1").unwrap(), &ia.digest)
        .unwrap();
    store.remove("python:3.12").unwrap();
    assert!(store.has_blob(&ia.digest));
    store.remove("alias:1").unwrap();
    assert!(!store.has_blob(&ia.digest));
    assert!(!store.has_blob(&ia.config_digest));
    assert!(!store.has_blob(&ia.manifest.layers[0].digest));
    assert!(!store.root().join("rootfs").join(ia.digest.hex()).exists());
    assert!(
        !store
            .root()
            .join("layers")
            .join(ia.manifest.layers[0].digest.hex())
            .exists()
    );
    // The other image is untouched.
    assert!(store.root().join("rootfs").join(ib.digest.hex()).is_dir());
    assert_eq!(
        store.image("127.0.0.1:5000/t/b:1").unwrap().digest,
        ib.digest
    );
    assert!(matches!(
        store.remove("alias:1"),
        Err(Error::ImageNotFound { .. })
    ));
    // By digest.
    store.remove(&ib.digest.to_string()).unwrap();
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        std::fs::read_dir(store.root().join("blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn gc_removes_read_only_trees() {
    let (_d, store) = store();
    let l = Layer::new()
        .dir_mode("ro", 0o555)
        .file("ro/f", b"x")
        .into_tar();
    let img = store_image(&store, &build(&[l], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    store.remove("t/x:1").unwrap();
    assert!(!root.exists());
}

#[test]
fn tagging_a_missing_manifest_is_refused() {
    let (_d, store) = store();
    let e = store
        .tag(&Reference::parse("x:1").unwrap(), &Digest::of(b"nothing"))
        .unwrap_err();
    assert!(matches!(e, Error::BlobNotFound { .. }), "{e}");
}
