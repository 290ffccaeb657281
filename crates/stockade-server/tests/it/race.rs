//! Races made deterministic with an in-process daemon whose provider can hold a call:
//! the reaper against a client's destroy (`list()` held until the destroy has
//! finished), and a pool's drain or the daemon's stop against a warm creation in
//! progress (`create()` held until the drain or stop has begun).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use stockade::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, ExecIo, ExecOutcome, FileOp,
    FileResult, GcReport, NativeProvider, Provider, Result, SandboxInfo, SandboxSpec,
};
use stockade_server::daemon::{MountPolicy, ReapReason};
use stockade_server::store::Store;
use stockade_server::{Daemon, Limits};
use tokio::sync::{Mutex, Notify};

use crate::harness::{eventually, require_root};

/// One call that can be held: when armed, the next call says it has started
/// (`entered`) and waits for `release`.
#[derive(Default)]
struct Hold {
    armed: Mutex<bool>,
    entered: Notify,
    release: Notify,
}

impl Hold {
    async fn arm(&self) {
        *self.armed.lock().await = true;
    }

    /// What the held call does first.
    async fn pass(&self) {
        if std::mem::take(&mut *self.armed.lock().await) {
            self.entered.notify_one();
            self.release.notified().await;
        }
    }
}

/// A native provider whose `list()` or `create()` can be held.
struct HeldList {
    inner: NativeProvider,
    list: Hold,
    create: Hold,
}

impl HeldList {
    fn new(state: &Path) -> HeldList {
        HeldList {
            inner: NativeProvider::from(stockade::NativeLauncher::with_state_root(state)),
            list: Hold::default(),
            create: Hold::default(),
        }
    }
}

#[async_trait]
impl Provider for HeldList {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn probe(&self) -> Result<Vec<Check>> {
        self.inner.probe().await
    }
    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo> {
        self.create.pass().await;
        self.inner.create(spec, opts).await
    }
    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome> {
        self.inner.exec(id, req, io).await
    }
    async fn health(&self, id: &str) -> Result<()> {
        self.inner.health(id).await
    }
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        self.list.pass().await;
        self.inner.list().await
    }
    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        self.inner.inspect(id).await
    }
    async fn gc(&self) -> Result<GcReport> {
        self.inner.gc().await
    }
    async fn file(&self, id: &str, op: FileOp) -> Result<FileResult> {
        self.inner.file(id, op).await
    }
}

/// Destroys every sandbox left in a state root when the test ends, passed or not.
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let root = self.0.clone();
        // Outside the test's runtime: a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let p = NativeProvider::from(stockade::NativeLauncher::with_state_root(&root));
                for s in p.list().await.unwrap_or_default() {
                    let _ = p.destroy(&s.id).await;
                }
                let _ = p.gc().await;
            });
        })
        .join();
    }
}

/// An in-process daemon on a [`HeldList`] in a directory of its own (under /tmp,
/// cleaned up whatever the test's end), and a 60 s template.
struct Setup {
    d: Arc<Daemon>,
    provider: Arc<HeldList>,
    template: SandboxSpec,
    _cleanup: Cleanup,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("stockade-it-race-")
        .tempdir_in("/tmp")
        .unwrap();
    let state = dir.path().join("state");
    let provider = Arc::new(HeldList::new(&state));
    Setup {
        d: daemon(dir.path(), provider.clone()),
        provider,
        template: SandboxSpec {
            timeout_secs: 60,
            ..SandboxSpec::default()
        },
        _cleanup: Cleanup(state),
        _dir: dir,
    }
}

fn daemon(dir: &Path, provider: Arc<HeldList>) -> Arc<Daemon> {
    let store = Store::open(&dir.join("state.redb")).unwrap();
    let limits = Limits {
        sandboxes_per_tenant: 16,
        pool_per_tenant: 16,
        sandboxes_total: 32,
        pool_idle_ttl: Duration::from_secs(120),
        mounts: MountPolicy::new(&[], false, dir.join("mounts")).unwrap(),
        tenants_untrusted: false,
        tenant_image_bytes: 1 << 30,
        honour_owner_pid: true,
        admission: stockade_server::admission::Admission::builtin(
            stockade_server::admission::Host::this(),
        ),
        bound_to: None,
    };
    let d = Daemon::new(
        store,
        dir.join("home"),
        "native".into(),
        limits,
        stockade::ProviderOptions {
            native_state_root: Some(dir.join("state")),
            ..Default::default()
        },
    )
    .unwrap();
    d.use_provider("native", provider);
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_during_the_reapers_listing_is_not_reaped_again() {
    if !require_root("the daemon's tests") {
        return;
    }
    // Bound in this order so that they drop in the reverse one: the daemon, then the
    // cleanup of its sandboxes, then their directory.
    let Setup {
        _dir,
        _cleanup,
        provider,
        d,
        template,
    } = setup();
    d.pool_warm("t", "", template.clone(), 2, 2).unwrap();
    eventually(30, "two warm sandboxes", || async {
        d.pool_list("t").iter().map(|p| p.stats.idle).sum::<usize>() == 2
    })
    .await;
    let (a, warm_a) = d
        .create("t", "", template.clone(), None, false)
        .await
        .unwrap();
    let (b, warm_b) = d
        .create("t", "", template.clone(), None, false)
        .await
        .unwrap();
    assert!(warm_a && warm_b, "both came from the pool");
    assert_eq!(d.pool_list("t")[0].stats.in_use, 2);

    // The reaper lists the provider's sandboxes; while it waits, `a` is destroyed.
    provider.list.arm().await;
    let reaper = tokio::spawn({
        let d = d.clone();
        async move { d.reap_once(true).await }
    });
    provider.list.entered.notified().await;
    d.destroy("t", &a.id).await.unwrap();
    provider.list.release.notify_one();
    let report = reaper.await.unwrap();

    assert!(
        !report.reaped.contains(&a.id),
        "a sandbox its client destroyed was reaped again: {report:?}"
    );
    assert_eq!(
        d.metrics.reaps(ReapReason::Gone),
        0,
        "a normal destroy counted as gone"
    );
    // `a`'s teardown ends in the background after its destroy was answered.
    eventually(15, "a's teardown", || async {
        d.pool_list("t")[0].stats.in_use == 1
    })
    .await;
    assert_eq!(
        d.pool_list("t")[0].stats.in_use,
        1,
        "the pool counts the one sandbox still held ({}) as in use",
        b.id
    );
    d.destroy("t", &b.id).await.unwrap();
    d.shutdown().await;
}

/// A pool drained, or a daemon stopped, while one of its warm sandboxes is being made:
/// the creation ends in a destroy (no pool wants it), and the drain or stop answers
/// only after it, so nothing of the pool outlives it. A stop that did not wait left
/// the sandbox behind for good (the daemon exited in the middle of its creation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_or_stop_during_a_warm_creation_leaves_nothing_behind() {
    if !require_root("the daemon's tests") {
        return;
    }
    // Bound in this order so that they drop in the reverse one: the daemon, then the
    // cleanup of its sandboxes, then their directory.
    let Setup {
        _dir,
        _cleanup,
        provider,
        d,
        template,
    } = setup();
    let on_disk = || {
        let p = provider.clone();
        async move { p.inner.list().await.unwrap() }
    };

    // A drain while the pool's one creation is held.
    provider.create.arm().await;
    d.pool_warm("t", "", template.clone(), 1, 1).unwrap();
    provider.create.entered.notified().await;
    let drain = tokio::spawn({
        let d = d.clone();
        async move { d.pool_drain("t", None).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !drain.is_finished(),
        "the drain answered while its pool was still making a sandbox"
    );
    provider.create.release.notify_one();
    let drained = drain.await.unwrap().unwrap();
    assert!(drained.is_empty(), "nothing was warm yet: {drained:?}");
    let left = on_disk().await;
    assert!(left.is_empty(), "the drained pool left {left:?}");
    assert!(d.pool_list("t").is_empty(), "the pool is gone");

    // A stop while a new pool's creation is held.
    provider.create.arm().await;
    d.pool_warm("t", "", template.clone(), 1, 1).unwrap();
    provider.create.entered.notified().await;
    let stop = tokio::spawn({
        let d = d.clone();
        async move { d.shutdown().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !stop.is_finished(),
        "the stop ended while a warm sandbox was still being made"
    );
    provider.create.release.notify_one();
    stop.await.unwrap();
    let left = on_disk().await;
    assert!(left.is_empty(), "the stop left {left:?}");
}
