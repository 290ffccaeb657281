//! Mounts a front end makes per sandbox (`MountMaker`, what the E2B API's homes
//! are): an in-process daemon with real native sandboxes and a maker of real host
//! directories. Each sandbox, warm or cold, gets its own; a pool of them serves only
//! creates of that kind; each is released once its sandbox is gone, whoever ended it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockade::spec::Mount;
use stockade::{ExecRequest, NativeProvider, Provider, SandboxSpec};
use stockade_server::daemon::{MountMaker, MountPolicy};
use stockade_server::store::Store;
use stockade_server::{Daemon, Limits};

use crate::harness::{eventually, require_root};

/// Makes one host directory per sandbox, mounted writable at `/own`.
struct Dirs {
    root: PathBuf,
    made: Mutex<BTreeSet<PathBuf>>,
    released: Mutex<Vec<PathBuf>>,
}

impl MountMaker for Dirs {
    fn kind(&self) -> &str {
        "test-dirs"
    }

    fn make(&self) -> stockade::Result<Vec<Mount>> {
        let dir = self
            .root
            .join(format!("d{}", stockade::host::random_hex(6)));
        std::fs::create_dir_all(&dir).map_err(|e| stockade::Error::io("mkdir", e))?;
        self.made.lock().unwrap().insert(dir.clone());
        Ok(vec![Mount {
            host: dir,
            target: "/own".into(),
            writable: true,
        }])
    }

    fn release(&self, mounts: &[Mount]) {
        for m in mounts {
            let _ = std::fs::remove_dir_all(&m.host);
            self.released.lock().unwrap().push(m.host.clone());
        }
    }
}

impl Dirs {
    fn made(&self) -> BTreeSet<PathBuf> {
        self.made.lock().unwrap().clone()
    }

    fn released(&self) -> Vec<PathBuf> {
        self.released.lock().unwrap().clone()
    }
}

fn daemon(dir: &Path) -> Arc<Daemon> {
    let store = Store::open(&dir.join("state.redb")).unwrap();
    let limits = Limits {
        sandboxes_per_tenant: 16,
        pool_per_tenant: 16,
        sandboxes_total: 32,
        pool_idle_ttl: Duration::from_secs(120),
        mounts: MountPolicy::new(&[], true, dir.join("mounts")).unwrap(),
        tenants_untrusted: true,
        tenant_image_bytes: 1 << 30,
        honour_owner_pid: false,
        admission: stockade_server::admission::Admission::builtin(
            stockade_server::admission::Host::this(),
        ),
        bound_to: None,
    };
    Daemon::new(
        store,
        dir.join("home"),
        "native".into(),
        limits,
        stockade::ProviderOptions {
            native_state_root: Some(dir.join("state")),
            ..Default::default()
        },
    )
    .unwrap()
}

/// The host directory (one the maker made) holding the file a sandbox wrote to `/own`.
fn owner_of(dirs: &Dirs, file: &str) -> Vec<PathBuf> {
    dirs.made()
        .into_iter()
        .filter(|d| d.join(file).exists())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_mounts_are_per_sandbox_pooled_by_kind_and_released_once() {
    if !require_root("the daemon's tests") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("stockade-it-made-")
        .tempdir_in("/tmp")
        .unwrap();
    let d = daemon(dir.path());
    let dirs = Arc::new(Dirs {
        root: dir.path().join("own"),
        made: Mutex::default(),
        released: Mutex::default(),
    });
    let maker: Arc<dyn MountMaker> = dirs.clone();
    let spec = SandboxSpec {
        timeout_secs: 60,
        ..SandboxSpec::default()
    };
    let made_pool = d
        .pool_warm_made("t", "", spec.clone(), 2, 2, maker.clone())
        .unwrap();
    let plain_pool = d.pool_warm("t", "", spec.clone(), 1, 1).unwrap();
    assert_ne!(
        made_pool.record.template_id, plain_pool.record.template_id,
        "the kind is part of the pool's id"
    );
    eventually(30, "the pools to fill", || async {
        d.pool_list("t").iter().map(|p| p.stats.idle).sum::<usize>() == 3
    })
    .await;
    assert_eq!(
        dirs.made().len(),
        2,
        "one directory per warm sandbox of the kind"
    );
    // Unchanged: a lookup, nothing new is made.
    d.pool_warm_made("t", "", spec.clone(), 2, 2, maker.clone())
        .unwrap();

    // A create of the kind takes a warm one, with its own directory mounted.
    let (a, warm) = d
        .create_made("t", "", spec.clone(), None, maker.clone())
        .await
        .unwrap();
    assert!(warm, "it came from the pool of its kind");
    let out = d
        .exec(
            "t",
            &a.id,
            ExecRequest::new(["sh", "-c", "touch /own/a && ls -A /own"]),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a\n",
        "a fresh directory"
    );
    let a_dir = owner_of(&dirs, "a");
    assert_eq!(a_dir.len(), 1, "exactly one made directory holds it");
    // A plain create of the same spec takes the plain pool's sandbox: no `/own`.
    let (p, warm) = d.create("t", "", spec.clone(), None, false).await.unwrap();
    assert!(warm);
    let out = d
        .exec("t", &p.id, ExecRequest::new(["sh", "-c", "test -e /own"]))
        .await
        .unwrap();
    assert_ne!(out.exit_code, 0, "a plain sandbox got a made mount");

    // A cold create of the kind (no pool of it left warm) gets its own as well.
    d.pool_drain("t", Some(&made_pool.record.template_id))
        .await
        .unwrap();
    let (b, warm) = d
        .create_made("t", "", spec.clone(), None, maker.clone())
        .await
        .unwrap();
    assert!(!warm, "its pool was drained");
    let out = d
        .exec(
            "t",
            &b.id,
            ExecRequest::new(["sh", "-c", "ls -A /own; touch /own/b"]),
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "b sees nothing of a"
    );
    let b_dir = owner_of(&dirs, "b");
    assert_eq!(b_dir.len(), 1);
    assert_ne!(a_dir, b_dir);

    // Released when their sandboxes are gone: the drained warm one, then a and b.
    d.destroy("t", &a.id).await.unwrap();
    d.destroy("t", &b.id).await.unwrap();
    eventually(15, "every made directory released", || async {
        dirs.released().len() == dirs.made().len()
    })
    .await;
    let released = dirs.released();
    let once: BTreeSet<PathBuf> = released.iter().cloned().collect();
    assert_eq!(once.len(), released.len(), "released twice: {released:?}");
    assert_eq!(once, dirs.made());
    assert!(!a_dir[0].exists() && !b_dir[0].exists());
    d.destroy("t", &p.id).await.unwrap();
    d.shutdown().await;
    let _ = NativeProvider::from(stockade::NativeLauncher::with_state_root(
        dir.path().join("state"),
    ))
    .gc()
    .await;
}
