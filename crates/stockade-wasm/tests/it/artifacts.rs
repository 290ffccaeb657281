//! Attacks on the artifact cache: precompiled code is native code, so only artifacts
//! Stockade compiled and sealed itself may ever be loaded.

use std::path::{Path, PathBuf};

use stockade_core::{ExecRequest, Provider};
use stockade_spec::Mount;
use stockade_wasm::{LoadPath, WasmProvider};

use crate::support::{create, exec_req, guest, provider, provider_in, run, spec, text};

/// A genuine wasmtime artifact of `module` for the provider's engine configuration:
/// what `wasmtime compile` (or an attacker with wasmtime) makes. Loading it would run
/// its machine code as is.
fn raw_cwasm(module: &Path) -> Vec<u8> {
    let mut c = wasmtime::Config::new();
    c.epoch_interruption(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    let engine = wasmtime::Engine::new(&c).unwrap();
    engine
        .precompile_module(&std::fs::read(module).unwrap())
        .unwrap()
}

/// The smallest test guest (prints `hello from wasm`), built next to the main one.
fn hello(guest: &Path) -> PathBuf {
    guest.with_file_name("hello.wasm")
}

/// The only artifact in the cache of `p`.
fn only_artifact(p: &WasmProvider) -> PathBuf {
    let all: Vec<PathBuf> = std::fs::read_dir(&p.config().cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].clone()
}

async fn refusal(p: &WasmProvider, image: &Path) -> String {
    let v = spec(image).validate().unwrap();
    match p
        .create(
            stockade_core::CheckedSpec::new(v, p).unwrap(),
            Default::default(),
        )
        .await
    {
        Ok(info) => panic!(
            "{} was loaded as sandbox {}: precompiled code from outside the cache ran",
            image.display(),
            info.id
        ),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_cwasm_written_by_a_sandbox_is_never_loaded_as_an_image() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    let evil = raw_cwasm(&hello(&g));
    // Sandboxed code writes it into its own /tmp, whose host backing is owned by root
    // and not writable by others: no check of owners and modes can tell it apart.
    for name in ["evil.cwasm", "evil.wasm", "evil"] {
        let mut req = ExecRequest::new(["g", "save", &format!("/tmp/{name}")]);
        req.stdin = evil.clone();
        let out = exec_req(&p, &id, req).await.unwrap();
        assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
        let host = p.tmp_host_path(&id).unwrap().join(name);
        assert_eq!(std::fs::read(&host).unwrap(), evil);
        let err = refusal(&p, &host).await;
        assert!(
            err.contains("precompiled") && err.contains("pass the .wasm module"),
            "{err}"
        );
    }
    let ids: Vec<String> = p.list().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, [id], "no sandbox was made from it");
}

#[tokio::test]
async fn precompiled_files_are_refused_whatever_they_are_called() {
    let Some(g) = guest() else { return };
    let home = tempfile::tempdir().unwrap();
    let (p, _scratch) = provider_in(home.path(), |_| {});
    let dir = tempfile::tempdir().unwrap();
    // A native executable (any ELF), named as a module.
    let elf = dir.path().join("true.wasm");
    std::fs::copy("/bin/true", &elf).unwrap();
    let err = refusal(&p, &elf).await;
    assert!(err.contains("precompiled"), "{err}");
    // A genuine artifact of the guest, in a file the host user owns, mode 0600.
    let cwasm = dir.path().join("guest.cwasm");
    std::fs::write(&cwasm, raw_cwasm(&g)).unwrap();
    let err = refusal(&p, &cwasm).await;
    assert!(err.contains("pass the .wasm module"), "{err}");
    // Stockade's own sealed artifact, named as an image.
    assert_eq!(p.precompile(&g).unwrap(), LoadPath::Compiled);
    let own = only_artifact(&p);
    let err = refusal(&p, &own).await;
    assert!(err.contains("precompiled"), "{err}");
    let copy = dir.path().join("copy.wasm");
    std::fs::copy(&own, &copy).unwrap();
    let err = refusal(&p, &copy).await;
    assert!(err.contains("precompiled"), "{err}");
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_tampered_cache_artifact_is_compiled_again() {
    let Some(g) = guest() else { return };
    let home = tempfile::tempdir().unwrap();
    let (p, _s) = provider_in(home.path(), |_| {});
    assert_eq!(p.precompile(&g).unwrap(), LoadPath::Compiled);
    let artifact = only_artifact(&p);

    // Someone who can write the cache plants a genuine artifact of another module
    // under the guest's name.
    std::fs::write(&artifact, raw_cwasm(&hello(&g))).unwrap();
    let (p2, _s2) = provider_in(home.path(), |_| {});
    let id = create(&p2, spec(&g)).await;
    assert_eq!(p2.module_load(&id).unwrap().0, LoadPath::Compiled);
    let out = run(&p2, &id, &["g", "exit", "3"]).await;
    assert_eq!(out.exit_code, 3, "the guest runs, not what was planted");
    let (p3, _s3) = provider_in(home.path(), |_| {});
    assert_eq!(p3.precompile(&g).unwrap(), LoadPath::Cached, "rewritten");

    // One byte of the sealed artifact changes.
    let mut bytes = std::fs::read(&artifact).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&artifact, &bytes).unwrap();
    let (p4, _s4) = provider_in(home.path(), |_| {});
    let id = create(&p4, spec(&g)).await;
    assert_eq!(p4.module_load(&id).unwrap().0, LoadPath::Compiled);
    assert_eq!(
        text(&run(&p4, &id, &["g", "hello"]).await.stdout),
        "hello from wasm\n"
    );
    assert_ne!(std::fs::read(&artifact).unwrap(), bytes, "replaced");
}

#[tokio::test]
async fn an_artifact_from_another_home_is_not_trusted() {
    let Some(g) = guest() else { return };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (pa, _sa) = provider_in(a.path(), |_| {});
    assert_eq!(pa.precompile(&g).unwrap(), LoadPath::Compiled);
    let theirs = only_artifact(&pa);
    let (pb, _sb) = provider_in(b.path(), |_| {});
    std::fs::create_dir_all(&pb.config().cache_dir).unwrap();
    let ours = pb.config().cache_dir.join(theirs.file_name().unwrap());
    std::fs::copy(&theirs, &ours).unwrap();

    assert_eq!(pb.precompile(&g).unwrap(), LoadPath::Compiled);
    assert_ne!(
        std::fs::read(&ours).unwrap(),
        std::fs::read(&theirs).unwrap(),
        "sealed again under this home's key"
    );
    let (pb2, _sb2) = provider_in(b.path(), |_| {});
    let id = create(&pb2, spec(&g)).await;
    assert_eq!(pb2.module_load(&id).unwrap().0, LoadPath::Cached);
    assert_eq!(run(&pb2, &id, &["g", "exit", "5"]).await.exit_code, 5);
}

#[tokio::test]
async fn the_cache_and_its_key_cannot_be_mounted_into_a_sandbox() {
    let Some(g) = guest() else { return };
    let home = tempfile::tempdir().unwrap();
    let (p, _s) = provider_in(home.path(), |_| {});
    assert_eq!(p.precompile(&g).unwrap(), LoadPath::Compiled);
    let key_dir = p.config().key_file.parent().unwrap().to_path_buf();
    for (host, writable) in [
        (p.config().cache_dir.clone(), true),
        (key_dir, false),
        (home.path().to_path_buf(), false),
        (PathBuf::from("/"), false),
    ] {
        let mut s = spec(&g);
        s.mounts.push(Mount {
            host: host.clone(),
            target: "/m".into(),
            writable,
        });
        let err = match p
            .create(
                stockade_core::CheckedSpec::new(s.validate().unwrap(), &p).unwrap(),
                Default::default(),
            )
            .await
        {
            Ok(info) => panic!("{} was mounted in sandbox {}", host.display(), info.id),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("holds Stockade's compiled code or its key"),
            "{err}"
        );
    }
    // Before anything is cached, with the home named through a link, too.
    let real = tempfile::tempdir().unwrap();
    let link = home.path().join("link");
    std::os::unix::fs::symlink(real.path(), &link).unwrap();
    let (fresh, _s) = provider_in(&link, |_| {});
    let mut s = spec(&g);
    s.mounts.push(Mount {
        host: real.path().to_path_buf(),
        target: "/m".into(),
        writable: true,
    });
    let err = fresh
        .create(
            stockade_core::CheckedSpec::new(s.validate().unwrap(), &fresh).unwrap(),
            Default::default(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("holds Stockade's compiled code or its key"),
        "{err}"
    );
    // A directory beside them is fine.
    let other = home.path().join("data");
    std::fs::create_dir(&other).unwrap();
    let mut s = spec(&g);
    s.mounts.push(Mount {
        host: other,
        target: "/m".into(),
        writable: true,
    });
    create(&p, s).await;
}

#[test]
fn racing_processes_compile_into_one_cache() {
    let Some(g) = guest() else { return };
    let home = tempfile::tempdir().unwrap();
    // Providers of their own, as separate processes would have, all compiling the same
    // module into a cold cache at once.
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (home, g) = (home.path().to_path_buf(), g.clone());
            std::thread::spawn(move || {
                let (p, _s) = provider_in(&home, |_| {});
                p.precompile(&g)
            })
        })
        .collect();
    for t in threads {
        let how = t.join().unwrap().expect("precompile");
        assert!(matches!(how, LoadPath::Compiled | LoadPath::Cached));
    }
    let (p, _s) = provider_in(home.path(), |_| {});
    only_artifact(&p);
    assert_eq!(p.precompile(&g).unwrap(), LoadPath::Cached);
}
