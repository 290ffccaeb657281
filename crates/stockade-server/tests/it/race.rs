//! The reaper against a client's destroy, made deterministic: an in-process daemon
//! whose provider holds `list()` until the destroy has finished, so the reaper's
//! look for vanished sandboxes always runs across a destroy.

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

/// A native provider whose `list()` can be held: when armed, the next `list()` says
/// it has started and waits for `release` before it asks the real provider.
struct HeldList {
    inner: NativeProvider,
    armed: Mutex<bool>,
    entered: Notify,
    release: Notify,
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
        let held = std::mem::take(&mut *self.armed.lock().await);
        if held {
            self.entered.notify_one();
            self.release.notified().await;
        }
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
    let dir = tempfile::Builder::new()
        .prefix("stockade-it-race-")
        .tempdir_in("/tmp")
        .unwrap();
    let _cleanup = Cleanup(dir.path().join("state"));
    let provider = Arc::new(HeldList {
        inner: NativeProvider::from(stockade::NativeLauncher::with_state_root(
            dir.path().join("state"),
        )),
        armed: Mutex::new(false),
        entered: Notify::new(),
        release: Notify::new(),
    });
    let d = daemon(dir.path(), provider.clone());
    let template = SandboxSpec {
        timeout_secs: 60,
        ..SandboxSpec::default()
    };
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
    *provider.armed.lock().await = true;
    let reaper = tokio::spawn({
        let d = d.clone();
        async move { d.reap_once(true).await }
    });
    provider.entered.notified().await;
    d.destroy("t", &a.id).await.unwrap();
    provider.release.notify_one();
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
