//! Imports: OCI layout directories and tars (plain and gzip), docker save archives,
//! multi-platform indexes, corrupt archives.

use std::io::Write;

use stockade_image::{Digest, Error, import};

use crate::support::{
    Built, Compression, Layer, build, build_compressed, store, tar_dir, tree, write_layout,
};

fn two_layers() -> Built {
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

#[test]
fn oci_layout_directory() {
    let (dir, store) = store();
    let built = two_layers();
    let layout = dir.path().join("layout");
    write_layout(&layout, &built, "127.0.0.1:5000/test/img:1");
    let out = import(&store, &layout, Some("mine:latest")).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].digest, built.manifest.0);
    assert_eq!(
        out[0].references,
        ["127.0.0.1:5000/test/img:1", "docker.io/library/mine:latest"]
    );
    let img = store.image("mine").unwrap();
    assert_eq!(
        img.run_config().env.unwrap(),
        ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
    );
    assert_eq!(img.run_config().user.as_deref(), Some("1000"));
    assert_eq!(img.run_config().entrypoint.unwrap(), ["/bin/sh", "-c"]);
    let root = store.rootfs(&img).unwrap();
    assert_eq!(tree(&root), ["etc", "etc/os", "hello"]);
}

#[test]
fn oci_layout_tar_plain_and_gzip() {
    let (dir, store) = store();
    let built = two_layers();
    let layout = dir.path().join("layout");
    write_layout(&layout, &built, "latest"); // a bare tag names nothing
    let tarball = dir.path().join("img.tar");
    tar_dir(&layout, &tarball);
    let out = import(&store, &tarball, None).unwrap();
    assert_eq!(out[0].digest, built.manifest.0);
    assert!(out[0].references.is_empty());
    assert_eq!(
        store.resolve(&built.manifest.0.to_string()).unwrap(),
        built.manifest.0
    );

    let gz = dir.path().join("img.tar.gz");
    std::fs::write(&gz, crate::support::gzip(&std::fs::read(&tarball).unwrap())).unwrap();
    let (_d2, store2) = crate::support::store();
    let out = import(&store2, &gz, Some("x/y:z")).unwrap();
    assert_eq!(out[0].references, ["docker.io/x/y:z"]);
    let img = store2.image("x/y:z").unwrap();
    assert_eq!(
        tree(&store2.rootfs(&img).unwrap()),
        ["etc", "etc/os", "hello"]
    );
}

#[test]
fn docker_save_archive() {
    let (dir, store) = store();
    let l1 = Layer::new().file("a", b"1").into_tar();
    let l2 = Layer::new().file("b", b"2").into_tar();
    let built = build(&[l1.clone(), l2.clone()], false);
    let path = dir.path().join("save.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data).unwrap();
    };
    let config_name = format!("{}.json", built.config.0.hex());
    add(&config_name, &built.config.1);
    add("aaaa/layer.tar", &l1);
    add("bbbb/layer.tar", &l2);
    add("aaaa/json", b"{}");
    let manifest = serde_json::json!([{
        "Config": config_name, "RepoTags": ["saved:1", "other/saved:2"],
        "Layers": ["aaaa/layer.tar", "cccc/layer.tar"],
    }]);
    add("manifest.json", &serde_json::to_vec(&manifest).unwrap());
    // Older docker save links a repeated layer.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "cccc/layer.tar", "../bbbb/layer.tar")
        .unwrap();
    b.finish().unwrap();
    drop(b);

    let out = import(&store, &path, None).unwrap();
    assert_eq!(
        out[0].references,
        ["docker.io/library/saved:1", "docker.io/other/saved:2"]
    );
    let img = store.image("other/saved:2").unwrap();
    assert_eq!(img.manifest.layers.len(), 2);
    assert_eq!(img.manifest.layers[1].digest, Digest::of(&l2));
    assert_eq!(img.config_digest, built.config.0);
    assert_eq!(tree(&store.rootfs(&img).unwrap()), ["a", "b"]);
}

#[test]
fn multi_platform_index_resolves_to_this_platform() {
    let (dir, store) = store();
    let amd = build(&[Layer::new().file("arch", b"amd64").into_tar()], true);
    let arm = build(&[Layer::new().file("arch", b"arm64").into_tar()], true);
    let layout = dir.path().join("layout");
    write_layout(&layout, &arm, "unused");
    let blobs = layout.join("blobs/sha256");
    for (d, b) in amd.layers.iter().chain([&amd.config, &amd.manifest]) {
        std::fs::write(blobs.join(d.hex()), b).unwrap();
    }
    let inner = serde_json::to_vec(&serde_json::json!({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json",
         "digest": arm.manifest.0.to_string(), "size": arm.manifest.1.len(),
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json",
         "digest": amd.manifest.0.to_string(), "size": amd.manifest.1.len(),
         "platform": {"architecture": "amd64", "os": "linux"}},
    ]}))
    .unwrap();
    let inner_d = Digest::of(&inner);
    std::fs::write(blobs.join(inner_d.hex()), &inner).unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": inner_d.to_string(), "size": inner.len(),
        "annotations": {"io.containerd.image.name": "docker.io/library/multi:1"}}]});
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();

    let out = import(&store, &layout, None).unwrap();
    let img = store.image("multi:1").unwrap();
    assert_eq!(out[0].digest, img.digest);
    let want = if cfg!(target_arch = "x86_64") {
        "amd64"
    } else {
        "arm64"
    };
    let root = store.rootfs(&img).unwrap();
    assert_eq!(std::fs::read_to_string(root.join("arch")).unwrap(), want);
}

#[test]
fn corrupt_blob_in_a_layout_is_refused_and_not_stored() {
    let (dir, store) = store();
    let built = two_layers();
    let layout = dir.path().join("layout");
    write_layout(&layout, &built, "x:1");
    let victim = layout.join("blobs/sha256").join(built.layers[1].0.hex());
    let mut data = std::fs::read(&victim).unwrap();
    let n = data.len();
    data[n / 2] ^= 0xff;
    std::fs::write(&victim, &data).unwrap();
    let e = import(&store, &layout, None).unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
    assert!(!store.has_blob(&built.layers[1].0));
    assert!(store.list().unwrap().is_empty());

    // The same corruption inside a tar: the blob's name is its digest.
    let tarball = dir.path().join("img.tar");
    tar_dir(&layout, &tarball);
    let e = import(&store, &tarball, None).unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
    assert!(!store.has_blob(&built.layers[1].0));

    // Truncated: the blob is missing from the archive altogether.
    std::fs::remove_file(&victim).unwrap();
    tar_dir(&layout, &tarball);
    let e = import(&store, &tarball, None).unwrap_err();
    assert!(e.to_string().contains("not in the archive"), "{e}");
}

#[test]
fn not_an_image_archive() {
    let (dir, store) = store();
    let path = dir.path().join("junk.tar");
    std::fs::write(&path, Layer::new().file("hello", b"x").into_tar()).unwrap();
    let e = import(&store, &path, None).unwrap_err();
    assert!(e.to_string().contains("neither an OCI layout"), "{e}");
    let path = dir.path().join("text");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(b"not a tar at all, really")
        .unwrap();
    assert!(import(&store, &path, None).is_err());
}

#[test]
fn an_archive_bomb_stops_at_the_byte_limit() {
    let (dir, store) = store();
    let store = store.with_limits(stockade_image::Limits {
        max_entries: 100,
        max_bytes: 1 << 20,
    });
    let zeros = vec![0u8; 8 << 20];
    let tarball = Layer::new().file("layer/big.bin", &zeros).into_tar();
    let path = dir.path().join("bomb.tar.gz");
    std::fs::write(&path, crate::support::gzip(&tarball)).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20);
    let e = import(&store, &path, None).unwrap_err();
    assert!(
        matches!(e, Error::LimitExceeded { what: "bytes", .. }),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(store.root().join("blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn zstd_layers_are_imported_and_unpacked() {
    let (dir, store) = store();
    let layers = [
        Layer::new().dir("etc").file("etc/os", b"debian").into_tar(),
        Layer::new().file("hello", &[7u8; 100_000]).into_tar(),
    ];
    let built = build_compressed(&layers, Compression::Zstd);
    assert!(built.layers[0].1.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]));
    let layout = dir.path().join("layout");
    write_layout(&layout, &built, "zstd:1");
    import(&store, &layout, None).unwrap();
    let img = store.image("zstd:1").unwrap();
    let root = store.rootfs(&img).unwrap();
    assert_eq!(tree(&root), ["etc", "etc/os", "hello"]);
    assert_eq!(
        std::fs::read(root.join("hello")).unwrap(),
        vec![7u8; 100_000]
    );
}

// Issue 15: an import whose index names the image by a bare tag only printed a
// digest, then the image was not listed, and gc would have removed it.
#[test]
fn an_image_without_a_name_is_listed_kept_and_reached_by_digest() {
    let (dir, store) = store();
    let built = two_layers();
    let layout = dir.path().join("layout");
    write_layout(&layout, &built, "1");
    let out = import(&store, &layout, None).unwrap();
    let d = built.manifest.0.clone();
    assert_eq!(out[0].references, Vec::<String>::new());
    let listed = store.images().unwrap();
    assert_eq!(
        listed,
        [stockade_image::Listed {
            reference: None,
            digest: d.clone()
        }]
    );
    store.gc().unwrap();
    let hex = d.hex().to_string();
    for by in [
        d.to_string(),
        format!("sha256:{}", &hex[..6]),
        hex[..stockade_image::MIN_BARE_PREFIX].to_string(),
    ] {
        assert_eq!(store.image(&by).unwrap().digest, d, "{by}");
    }
    // Too short to be taken for a digest: a name, and there is none.
    assert!(matches!(
        store.resolve(&hex[..6]),
        Err(Error::ImageNotFound { .. })
    ));
    // Tagged later, it is listed by its name only; removed by digest, it is gone.
    store
        .tag(&stockade_image::Reference::parse("named:1").unwrap(), &d)
        .unwrap();
    let listed = store.images().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].reference.as_deref(),
        Some("docker.io/library/named:1")
    );
    assert_eq!(store.remove(&format!("sha256:{}", &hex[..8])).unwrap(), d);
    assert!(store.images().unwrap().is_empty());
    assert!(!store.has_blob(&d), "gc removed what no image needs");
}

#[test]
fn an_ambiguous_digest_prefix_names_the_candidates() {
    let (dir, store) = store();
    let mut digests = Vec::new();
    // 17 images: two share their first hex digit.
    for i in 0..17 {
        let built = build(
            &[Layer::new().file("n", format!("{i}").as_bytes()).into_tar()],
            false,
        );
        let layout = dir.path().join(format!("l{i}"));
        write_layout(&layout, &built, "latest");
        digests.push(import(&store, &layout, None).unwrap()[0].digest.clone());
    }
    let first = |d: &Digest| d.hex().as_bytes()[0];
    let c = digests
        .iter()
        .map(first)
        .find(|c| digests.iter().filter(|d| first(d) == *c).count() > 1)
        .unwrap();
    let prefix = format!("sha256:{}", c as char);
    let e = store.resolve(&prefix).unwrap_err();
    assert!(matches!(e, Error::InvalidReference { .. }), "{e}");
    for d in digests.iter().filter(|d| first(d) == c) {
        assert!(e.to_string().contains(&d.to_string()), "{d} not in {e}");
    }
    assert!(
        store.remove(&prefix).is_err(),
        "an ambiguous prefix removes nothing"
    );
    assert_eq!(store.images().unwrap().len(), 17);
}
