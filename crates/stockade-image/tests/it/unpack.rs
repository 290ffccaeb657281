//! Malicious and tricky layers, flattened through the store: each refused case must
//! leave nothing outside the tree and no rootfs behind.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use stockade_image::{Error, Limits};

use crate::support::{Layer, build, gzip, store, store_image, tree};

/// Flattens one layer; returns the store's temp dir (holding `outside/`) and result.
fn flatten_one(layer: Layer, check_outside: impl Fn(&Path)) -> Result<Vec<String>, Error> {
    let (dir, store) = store();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"host secret").unwrap();
    let img = store_image(&store, &build(&[layer.into_tar()], true), "t/x:1");
    let result = store.rootfs(&img).map(|p| tree(&p));
    check_outside(&outside);
    if result.is_err() {
        // No tree stays behind: neither the rootfs nor its temp dir.
        assert!(!store.root().join("rootfs").join(img.digest.hex()).exists());
        assert_eq!(
            std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
            0
        );
    }
    result
}

fn assert_refused(result: Result<Vec<String>, Error>, needle: &str) {
    match result {
        Err(e @ Error::UnsafeEntry { .. }) => {
            assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
        }
        other => panic!("expected a refused entry, got {other:?}"),
    }
}

fn untouched(outside: &Path) {
    assert_eq!(
        std::fs::read(outside.join("secret")).unwrap(),
        b"host secret"
    );
    assert_eq!(
        std::fs::read_dir(outside).unwrap().count(),
        1,
        "a file appeared outside"
    );
}

#[test]
fn dotdot_entry_is_refused() {
    let l = Layer::new().file("ok", b"1").file("../outside/pwned", b"x");
    assert_refused(flatten_one(l, untouched), "'..'");
    let l = Layer::new().file("a/../../outside/pwned", b"x");
    assert_refused(flatten_one(l, untouched), "'..'");
}

#[test]
fn absolute_entry_is_refused() {
    let (dir, _store) = store();
    let target = format!("{}/outside/pwned", dir.path().display());
    let l = Layer::new().file(&target, b"x");
    assert_refused(flatten_one(l, untouched), "absolute");
}

#[test]
fn write_through_a_symlinked_directory_is_refused() {
    // The link points at a real directory outside: a follower would write there.
    let probe = tempfile::tempdir().unwrap();
    let l = Layer::new()
        .symlink("evil", probe.path().to_str().unwrap())
        .file("evil/pwned", b"x");
    assert_refused(flatten_one(l, untouched), "symlink");
    assert_eq!(std::fs::read_dir(probe.path()).unwrap().count(), 0);
    // Relative links, and a link as a middle component.
    let l = Layer::new()
        .dir("a")
        .symlink("a/up", "../..")
        .file("a/up/outside/pwned", b"x");
    assert_refused(flatten_one(l, untouched), "symlink");
    let l = Layer::new()
        .symlink("d", "/")
        .dir("d/etc")
        .file("d/etc/x", b"x");
    assert_refused(flatten_one(l, untouched), "symlink");
}

#[test]
fn symlink_in_a_lower_layer_is_not_followed_by_an_upper_layer() {
    let (dir, store) = store();
    let probe = dir.path().join("probe");
    std::fs::create_dir(&probe).unwrap();
    let lower = Layer::new()
        .symlink("lib", probe.to_str().unwrap())
        .into_tar();
    let upper = Layer::new().file("lib/pwned", b"x").into_tar();
    let img = store_image(&store, &build(&[lower, upper], false), "t/x:1");
    let e = store.rootfs(&img).unwrap_err();
    assert!(matches!(e, Error::UnsafeEntry { .. }), "{e}");
    assert_eq!(std::fs::read_dir(&probe).unwrap().count(), 0);
}

#[test]
fn a_file_replaces_a_symlink_instead_of_writing_through_it() {
    let (dir, _s) = store();
    let _ = dir;
    let probe = tempfile::tempdir().unwrap();
    let secret = probe.path().join("secret");
    std::fs::write(&secret, b"host secret").unwrap();
    let l = Layer::new()
        .symlink("f", secret.to_str().unwrap())
        .file("f", b"image content");
    let (d2, store) = store();
    let _ = d2;
    let img = store_image(&store, &build(&[l.into_tar()], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    assert_eq!(std::fs::read(&secret).unwrap(), b"host secret");
    let m = std::fs::symlink_metadata(root.join("f")).unwrap();
    assert!(m.is_file());
    assert_eq!(std::fs::read(root.join("f")).unwrap(), b"image content");
    // A directory entry over a symlink replaces it too.
    let l = Layer::new()
        .symlink("d", probe.path().to_str().unwrap())
        .dir("d");
    let img = store_image(&store, &build(&[l.into_tar()], false), "t/y:1");
    let root = store.rootfs(&img).unwrap();
    assert!(std::fs::symlink_metadata(root.join("d")).unwrap().is_dir());
}

#[test]
fn symlinks_are_stored_as_is() {
    let l = Layer::new()
        .symlink("abs", "/etc/shadow")
        .symlink("rel", "../../../../etc/passwd");
    let (_d, store) = store();
    let img = store_image(&store, &build(&[l.into_tar()], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    assert_eq!(
        std::fs::read_link(root.join("abs")).unwrap(),
        Path::new("/etc/shadow")
    );
    assert_eq!(
        std::fs::read_link(root.join("rel")).unwrap(),
        Path::new("../../../../etc/passwd")
    );
}

#[test]
fn hardlinks_stay_inside_the_tree() {
    let l = Layer::new()
        .file("a", b"1")
        .hardlink("x", "../outside/secret");
    assert_refused(flatten_one(l, untouched), "'..'");
    let (dir, _s) = store();
    let abs = format!("{}/outside/secret", dir.path().display());
    let l = Layer::new().hardlink("x", &abs);
    assert_refused(flatten_one(l, untouched), "absolute");
    // Through a symlink to a directory outside.
    let probe = tempfile::tempdir().unwrap();
    std::fs::write(probe.path().join("secret"), b"s").unwrap();
    let l = Layer::new()
        .symlink("l", probe.path().to_str().unwrap())
        .hardlink("x", "l/secret");
    assert_refused(flatten_one(l, untouched), "symlink");
    assert_eq!(
        std::fs::metadata(probe.path().join("secret"))
            .unwrap()
            .nlink(),
        1
    );
    // A valid one shares the inode.
    let l = Layer::new()
        .dir("d")
        .file("d/a", b"data")
        .hardlink("b", "d/a");
    let (_d, store) = store();
    let img = store_image(&store, &build(&[l.into_tar()], true), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    let (a, b) = (
        std::fs::metadata(root.join("d/a")).unwrap(),
        std::fs::metadata(root.join("b")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino());
    assert_eq!(std::fs::read(root.join("b")).unwrap(), b"data");
}

#[test]
fn hardlink_to_a_symlink_links_the_symlink_itself() {
    let probe = tempfile::tempdir().unwrap();
    std::fs::write(probe.path().join("secret"), b"s").unwrap();
    let l = Layer::new()
        .symlink("s", probe.path().join("secret").to_str().unwrap())
        .hardlink("h", "s");
    let (_d, store) = store();
    let img = store_image(&store, &build(&[l.into_tar()], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    assert!(
        std::fs::symlink_metadata(root.join("h"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::metadata(probe.path().join("secret"))
            .unwrap()
            .nlink(),
        1
    );
}

#[test]
fn devices_and_fifos_are_skipped_and_setuid_stripped() {
    let l = Layer::new()
        .special(tar::EntryType::Char, "dev/mem")
        .special(tar::EntryType::Block, "dev/sda")
        .special(tar::EntryType::Fifo, "fifo")
        .file_mode("usr/bin/su", b"#!", 0o4755)
        .file_mode("usr/bin/wall", b"#!", 0o2755)
        .dir_mode("shared", 0o2775)
        .dir_mode("tmp", 0o1777);
    let (_d, store) = store();
    let img = store_image(&store, &build(&[l.into_tar()], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    assert!(!root.join("dev/mem").exists() && !root.join("dev/sda").exists());
    assert!(std::fs::symlink_metadata(root.join("fifo")).is_err());
    let mode = |p: &str| {
        std::fs::metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("usr/bin/su"), 0o755);
    assert_eq!(mode("usr/bin/wall"), 0o755);
    assert_eq!(mode("shared"), 0o775);
    assert_eq!(mode("tmp"), 0o1777);
    assert_eq!(
        mode(""),
        0o755,
        "the rootfs itself is readable by the sandbox user"
    );
}

#[test]
fn entry_count_limit_stops_a_flood() {
    let mut l = Layer::new();
    for i in 0..50 {
        l = l.file(&format!("f{i}"), b"");
    }
    let (_d, store) = store();
    let store = store.with_limits(Limits {
        max_entries: 20,
        max_bytes: 1 << 20,
    });
    let img = store_image(&store, &build(&[l.into_tar()], true), "t/x:1");
    let e = store.rootfs(&img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::LimitExceeded {
                what: "entries",
                ..
            }
        ),
        "{e}"
    );
    assert!(!store.root().join("rootfs").join(img.digest.hex()).exists());
}

#[test]
fn gzip_bomb_stops_at_the_byte_limit() {
    let zeros = vec![0u8; 64 << 20];
    let l = Layer::new().file("bomb", &zeros).into_tar();
    let (_d, store) = store();
    let store = store.with_limits(Limits {
        max_entries: 100,
        max_bytes: 1 << 20,
    });
    let built = build(&[l], true);
    assert!(
        built.layers[0].1.len() < 1 << 20,
        "the layer compresses well"
    );
    let img = store_image(&store, &built, "t/x:1");
    let e = store.rootfs(&img).unwrap_err();
    assert!(
        matches!(e, Error::LimitExceeded { what: "bytes", .. }),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
    // Also when the header lies about the size being small: content is counted.
    let _ = gzip;
}

#[test]
fn whiteouts_and_opaque_directories_apply_to_lower_layers_only() {
    let lower = Layer::new()
        .dir("a")
        .file("a/x", b"x")
        .file("a/y", b"y")
        .dir("b")
        .file("b/old", b"o")
        .dir("b/sub")
        .file("b/sub/deep", b"d")
        .dir("c")
        .file("c/gone", b"g")
        .into_tar();
    let upper = Layer::new()
        .file("a/.wh.x", b"")
        .file("b/new", b"n") // before the marker, in the same layer: kept
        .file("b/.wh..wh..opq", b"")
        .file(".wh.c", b"")
        .file("a/.wh.never-existed", b"")
        .file(".wh..wh.plnk", b"")
        .into_tar();
    let (_d, store) = store();
    let img = store_image(
        &store,
        &build(&[lower.clone(), upper.clone()], true),
        "t/x:1",
    );
    let root = store.rootfs(&img).unwrap();
    assert_eq!(tree(&root), ["a", "a/y", "b", "b/new"]);
    // One layer alone keeps its markers as plain files.
    let layer = store.unpack_layer(&img.manifest.layers[1].digest).unwrap();
    assert!(layer.join("b/.wh..wh..opq").is_file() && layer.join("a/.wh.x").is_file());
    assert!(layer.starts_with(store.root().join("layers")));
}

#[test]
fn a_later_layer_replaces_files_and_directories() {
    let lower = Layer::new()
        .dir("d")
        .file("d/f", b"1")
        .file("g", b"old")
        .into_tar();
    let upper = Layer::new()
        .file("d", b"now a file")
        .dir("g")
        .file("g/h", b"h")
        .into_tar();
    let (_d, store) = store();
    let img = store_image(&store, &build(&[lower, upper], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    assert_eq!(std::fs::read(root.join("d")).unwrap(), b"now a file");
    assert_eq!(std::fs::read(root.join("g/h")).unwrap(), b"h");
}

#[test]
fn read_only_directories_are_filled_before_their_mode_applies() {
    let l = Layer::new().dir_mode("ro", 0o555).file("ro/f", b"x");
    let (_d, store) = store();
    let img = store_image(&store, &build(&[l.into_tar()], false), "t/x:1");
    let root = store.rootfs(&img).unwrap();
    assert_eq!(std::fs::read(root.join("ro/f")).unwrap(), b"x");
    let m = std::fs::metadata(root.join("ro"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o777, 0o555);
}

#[test]
fn a_layer_that_does_not_match_its_diff_id_is_refused() {
    let (_d, store) = store();
    let mut built = build(&[Layer::new().file("a", b"1").into_tar()], false);
    // Swap in another layer; the config still names the first one's diff_id.
    let other = Layer::new().file("a", b"2").into_tar();
    let manifest = String::from_utf8(built.manifest.1.clone())
        .unwrap()
        .replace(
            &built.layers[0].0.to_string(),
            &stockade_image::Digest::of(&other).to_string(),
        )
        .replace(
            &format!("\"size\":{}", built.layers[0].1.len()),
            &format!("\"size\":{}", other.len()),
        )
        .into_bytes();
    built.layers[0] = (stockade_image::Digest::of(&other), other);
    built.manifest = (stockade_image::Digest::of(&manifest), manifest);
    let img = store_image(&store, &built, "t/x:1");
    let e = store.rootfs(&img).unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
}

#[test]
fn concurrent_flattening_yields_one_tree() {
    let l = Layer::new()
        .dir("d")
        .file("d/f", &vec![7u8; 1 << 20])
        .into_tar();
    let (_d, store) = store();
    let img = store_image(&store, &build(&[l], true), "t/x:1");
    let paths: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| store.rootfs(&img).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(std::fs::read(paths[0].join("d/f")).unwrap().len(), 1 << 20);
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
}

/// Whiteouts naming `.`, `..` or nothing (`.wh.`, `.wh..`, `.wh...`) would remove the
/// directory holding the whiteout or its parent: at the top of a layer that is the
/// tree being built and the store's `tmp/` (with every import and partial pull in
/// it). They are refused, and nothing of the store is touched.
#[test]
fn whiteouts_of_dot_and_dotdot_cannot_remove_the_store() {
    for name in [".wh...", ".wh..", ".wh.", "a/.wh...", "a/.wh..", "a/.wh."] {
        let lower = Layer::new().dir("a").file("a/keep", b"k").into_tar();
        let upper = Layer::new().file(name, b"").into_tar();
        let (dir, store) = store();
        // A partial download of another pull, in progress.
        let partial = store.root().join("tmp/partial-other");
        std::fs::write(&partial, b"half a blob").unwrap();
        let beside = dir.path().join("beside");
        std::fs::write(&beside, b"x").unwrap();
        let img = store_image(&store, &build(&[lower, upper], true), "t/x:1");
        let result = store.rootfs(&img);
        assert!(
            std::fs::read(&partial).is_ok_and(|d| d == b"half a blob"),
            "{name}: the store's tmp/ was damaged"
        );
        assert!(beside.exists() && store.root().join("blobs/sha256").is_dir());
        match result {
            Err(e @ Error::UnsafeEntry { .. }) => {
                assert!(e.to_string().contains("whiteout"), "{name}: {e}");
            }
            other => panic!("{name}: expected a refused whiteout, got {other:?}"),
        }
        assert!(!store.root().join("rootfs").join(img.digest.hex()).exists());
        let left: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            ["partial-other"],
            "{name}: a failed flatten left a tree"
        );
    }
}

/// A whiteout can only remove what is inside the tree, never through a symlink of
/// a lower layer.
#[test]
fn a_whiteout_through_a_symlink_is_refused() {
    let (dir, store) = store();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"s").unwrap();
    let lower = Layer::new()
        .symlink("out", outside.to_str().unwrap())
        .symlink("up", "../../..")
        .into_tar();
    for name in ["out/.wh.secret", "up/.wh.outside", "out/.wh..wh..opq"] {
        let upper = Layer::new().file(name, b"").into_tar();
        let img = store_image(
            &store,
            &build(&[lower.clone(), upper], true),
            &format!("t/x:{}", name.len()),
        );
        let e = store.rootfs(&img).unwrap_err();
        assert!(matches!(e, Error::UnsafeEntry { .. }), "{name}: {e}");
        assert!(
            outside.join("secret").exists(),
            "{name} removed a host file"
        );
    }
}

/// The per-image cap names itself and how to raise it.
#[test]
fn the_per_image_cap_is_named_with_how_to_raise_it() {
    let l = Layer::new().file("big", &vec![7u8; 2 << 20]).into_tar();
    let (_d, store) = store();
    let store = store.with_limits(Limits {
        max_entries: 100,
        max_bytes: 1 << 20,
    });
    let img = store_image(&store, &build(&[l], true), "t/x:1");
    let e = store.rootfs(&img).unwrap_err().to_string();
    for needle in ["1048576", "max_image_bytes", "STOCKADE_IMAGE_MAX_BYTES"] {
        assert!(e.contains(needle), "{e} lacks {needle}");
    }
    assert_eq!(Limits::default().max_bytes, 4 << 30, "per-image default");
}

/// The store's total cap counts what is already stored: a second image that would
/// pass it is refused while flattening, naming the cap, and leaves nothing behind;
/// a handle with a budget reports what it added and stops at the budget.
#[test]
fn the_store_total_cap_counts_what_is_stored() {
    let (_d, store) = store();
    let a = Layer::new().file("a", &vec![1u8; 3 << 20]).into_tar();
    let b = Layer::new().file("b", &vec![2u8; 3 << 20]).into_tar();
    let store = store.with_max_store_bytes(5 << 20);
    let img_a = store_image(&store, &build(&[a], true), "t/a:1");
    store.rootfs(&img_a).unwrap();
    let used = store.usage().unwrap();
    assert!(used >= 3 << 20, "usage counts the unpacked tree: {used}");
    let img_b = store_image(&store, &build(std::slice::from_ref(&b), true), "t/b:1");
    let e = store.rootfs(&img_b).unwrap_err();
    assert!(matches!(e, Error::QuotaExceeded { .. }), "{e}");
    let msg = e.to_string();
    for needle in [
        "5242880",
        "max_total_bytes",
        "STOCKADE_IMAGE_STORE_MAX_BYTES",
    ] {
        assert!(msg.contains(needle), "{msg} lacks {needle}");
    }
    assert!(
        !store
            .root()
            .join("rootfs")
            .join(img_b.digest.hex())
            .exists()
    );
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
    // A blob write is held to the cap too.
    let e = store.put_blob_bytes(&vec![0u8; 6 << 20], None).unwrap_err();
    assert!(matches!(e, Error::QuotaExceeded { .. }), "{e}");

    // A per-caller budget: what this handle adds is counted and capped.
    let (_d2, fresh) = crate::support::store();
    let budget = fresh.with_budget(2 << 20);
    let img = store_image(&budget, &build(&[b], true), "t/b:1");
    let added_blobs = budget.added_bytes();
    assert!(added_blobs > 0 && added_blobs < 1 << 20, "{added_blobs}");
    let e = budget.rootfs(&img).unwrap_err();
    assert!(matches!(e, Error::QuotaExceeded { .. }), "{e}");
    assert!(e.to_string().contains("budget"), "{e}");
    assert_eq!(
        budget.added_bytes(),
        added_blobs,
        "a failed flatten adds nothing"
    );
}
