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
