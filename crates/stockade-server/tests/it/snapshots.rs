//! Named snapshots through the daemon, tenant by tenant: an in-process daemon whose
//! native provider is given snapshots (kept in memory; a start from one is a new
//! native sandbox), so what is tested is the daemon's scoping, not a VM. A tenant
//! that sees, starts, removes or overwrites another's snapshot fails these tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use stockade::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, Error, ErrorCode, ExecIo,
    ExecOutcome, FileOp, FileResult, GcReport, NativeProvider, Provider, Result, SandboxInfo,
    SandboxSpec, SnapshotInfo,
};
use stockade_server::daemon::MountPolicy;
use stockade_server::store::Store;
use stockade_server::{Daemon, Limits};

use crate::harness::require_root;

/// A native provider that keeps "snapshots" as records under the name it is given.
struct WithSnapshots {
    inner: NativeProvider,
    kept: Mutex<BTreeMap<String, SnapshotInfo>>,
}

#[async_trait]
impl Provider for WithSnapshots {
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
    async fn destroy(&self, id: &str) -> Result<()> {
        self.inner.destroy(id).await
    }
    async fn list(&self) -> Result<Vec<SandboxInfo>> {
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
    fn snapshotting(&self) -> Option<&dyn stockade::Snapshotting> {
        Some(self)
    }
}

#[async_trait]
impl stockade::Snapshotting for WithSnapshots {
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        stockade::check_snapshot_key(name)?;
        let info = self.inner.inspect(id).await?;
        let mut kept = self.kept.lock().unwrap();
        if kept.contains_key(name) {
            return Err(Error::InvalidRequest(format!(
                "snapshot {name} already exists"
            )));
        }
        let s = SnapshotInfo {
            name: name.to_string(),
            provider: "native".into(),
            source: id.to_string(),
            created_at_ms: stockade::now_ms(),
            bytes: 1,
            sha256: "0".repeat(64),
            spec: info.spec,
        };
        kept.insert(name.to_string(), s.clone());
        Ok(s)
    }
    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.kept.lock().unwrap().values().cloned().collect())
    }
    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.kept
            .lock()
            .unwrap()
            .remove(name)
            .map(drop)
            .ok_or_else(|| Error::NotFound {
                kind: "snapshot",
                id: name.to_string(),
            })
    }
    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo> {
        if !self.kept.lock().unwrap().contains_key(name) {
            return Err(Error::NotFound {
                kind: "snapshot",
                id: name.to_string(),
            });
        }
        let spec = SandboxSpec {
            timeout_secs: 60,
            ..SandboxSpec::default()
        };
        let v = CheckedSpec::new(spec.validate()?, &self.inner)?;
        self.inner.create(v, opts).await
    }
}

fn daemon(dir: &Path, provider: Arc<WithSnapshots>) -> Arc<Daemon> {
    let store = Store::open(&dir.join("state.redb")).unwrap();
    let limits = Limits {
        sandboxes_per_tenant: 2,
        pool_per_tenant: 2,
        sandboxes_total: 8,
        pool_idle_ttl: Duration::from_secs(120),
        mounts: MountPolicy::new(&[], false, dir.join("mounts")).unwrap(),
        tenants_untrusted: true,
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
async fn a_tenant_sees_starts_and_removes_only_its_own_snapshots() {
    if !require_root("the daemon's tests") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("stockade-it-snap-")
        .tempdir_in("/tmp")
        .unwrap();
    let provider = Arc::new(WithSnapshots {
        inner: NativeProvider::from(stockade::NativeLauncher::with_state_root(
            dir.path().join("state"),
        )),
        kept: Mutex::default(),
    });
    let d = daemon(dir.path(), provider.clone());
    let spec = SandboxSpec {
        timeout_secs: 60,
        ..SandboxSpec::default()
    };
    let (a_sb, _) = d
        .create("alice", "", spec.clone(), None, true)
        .await
        .unwrap();
    let (b_sb, _) = d.create("bob", "", spec.clone(), None, true).await.unwrap();

    // Bad names are refused before the provider is asked.
    for bad in ["", "../x", ".x", "a/b"] {
        let e = d.snapshot("alice", &a_sb.id, bad).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSpec, "{bad:?}: {e}");
    }
    // Another tenant's sandbox is not found.
    let e = d.snapshot("bob", &a_sb.id, "base").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");

    let s = d.snapshot("alice", &a_sb.id, "base").await.unwrap();
    assert_eq!(
        (s.name.as_str(), s.source.as_str()),
        ("base", a_sb.id.as_str())
    );
    let e = d.snapshot("alice", &a_sb.id, "base").await.unwrap_err();
    assert!(
        e.to_string().contains("snapshot base already exists"),
        "{e}"
    );
    // Bob sees none of Alice's, cannot start or remove hers, and may have his own
    // "base" beside it.
    assert!(d.snapshots("bob").await.unwrap().is_empty());
    let e = d
        .create_from_snapshot("bob", "", "base", None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    assert!(e.to_string().contains("snapshot base not found"), "{e}");
    let e = d
        .create_from_snapshot("bob", "native", "base", None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    assert!(!e.to_string().contains("--"), "the stored key leaked: {e}");
    let e = d.remove_snapshot("bob", "base").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    d.snapshot("bob", &b_sb.id, "base").await.unwrap();
    let names = |v: Vec<SnapshotInfo>| {
        v.into_iter()
            .map(|s| (s.name, s.source))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(d.snapshots("alice").await.unwrap()),
        [("base".into(), a_sb.id.clone())]
    );
    assert_eq!(
        names(d.snapshots("bob").await.unwrap()),
        [("base".into(), b_sb.id.clone())]
    );
    // The provider keeps them apart under tenant-scoped keys.
    let keys: Vec<String> = provider.kept.lock().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.iter()
            .all(|k| k.ends_with("--base") && k.len() == 16 + 2 + 4),
        "{keys:?}"
    );

    // A start is the tenant's sandbox, counted against its quota (2 here).
    let started = d
        .create_from_snapshot("alice", "", "base", None)
        .await
        .unwrap();
    let ids = |t: &'static str| {
        let d = d.clone();
        async move {
            d.list(t)
                .await
                .unwrap()
                .into_iter()
                .map(|(i, _)| i.id)
                .collect::<Vec<_>>()
        }
    };
    assert!(ids("alice").await.contains(&started.id));
    assert!(!ids("bob").await.contains(&started.id));
    let e = d
        .create_from_snapshot("alice", "", "base", None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitExceeded, "{e}");

    d.remove_snapshot("alice", "base").await.unwrap();
    assert!(d.snapshots("alice").await.unwrap().is_empty());
    assert_eq!(
        names(d.snapshots("bob").await.unwrap()).len(),
        1,
        "bob's went too"
    );
    for (t, id) in [
        ("alice", &a_sb.id),
        ("alice", &started.id),
        ("bob", &b_sb.id),
    ] {
        d.destroy(t, id).await.unwrap();
    }
    d.shutdown().await;
}
