//! The daemon inside another process: a front end that runs without `stockade serve`
//! (`stockade mcp` on stdio or its own HTTP listener) gets the daemon's admission
//! profiles, quotas, ownership records, reaper and health checks, not checks of its
//! own. [`Embedded`] is a [`Daemon`] over a state directory that lives as long as
//! the process; [`TenantProvider`] is one tenant's view of it as a
//! [`stockade::Provider`], so code written against providers (sandboxes, sessions,
//! files) runs through the daemon's calls and is held to that tenant's profile.
//!
//! Every caller of an embedded daemon is a tenant: there is no local caller with the
//! host's freedom, so a front end names even its stdio client (MCP's is
//! [`EMBEDDED_LOCAL_TENANT`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use stockade::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, EgressDenial, Error, ExecIo,
    ExecOutcome, FileOp, FileResult, GcReport, Provider, Result, SandboxInfo, SnapshotInfo, Usage,
};

use crate::admission::Admission;
use crate::daemon::{Daemon, Limits, MountPolicy};
use crate::store::{Store, random_hex};

/// The tenant an embedding front end gives a caller that presents no token.
pub const EMBEDDED_LOCAL_TENANT: &str = "local-client";

/// What an embedded daemon admits.
pub struct EmbeddedOptions {
    /// `$STOCKADE_HOME`: images, sessions (`tenants/NAME`), and the state directory
    /// (`embedded/PID-N`).
    pub home: PathBuf,
    pub default_provider: String,
    /// The profiles every tenant is admitted by.
    pub admission: Admission,
    /// Most live sandboxes per tenant (sessions' included).
    pub sandboxes_per_tenant: usize,
    /// Host directories specs may mount (each must exist).
    pub mount_dirs: Vec<PathBuf>,
}

/// A daemon in this process.
pub struct Embedded {
    daemon: Arc<Daemon>,
    state_dir: PathBuf,
}

impl Embedded {
    /// Starts the daemon (its reaper and health checks on the current runtime) over a
    /// new state directory; directories that dead processes left are removed first.
    pub async fn start(o: EmbeddedOptions) -> anyhow::Result<Embedded> {
        let root = o.home.join("embedded");
        std::fs::create_dir_all(&root)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", root.display()))?;
        sweep_dead(&root);
        let state_dir = root.join(format!("{}-{}", std::process::id(), random_hex(4)));
        stockade::host::make_private_dir(&state_dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", state_dir.display()))?;
        let store = Store::open(&state_dir.join("state.redb"))?;
        let limits = Limits {
            sandboxes_per_tenant: o.sandboxes_per_tenant,
            pool_per_tenant: 0,
            sandboxes_total: 512,
            pool_idle_ttl: Duration::from_secs(600),
            mounts: MountPolicy::new(&o.mount_dirs, true, state_dir.join("mounts"))?,
            tenants_untrusted: true,
            tenant_image_bytes: 8 << 30,
            // Callers are code of this process: its owner pid is this process's.
            honour_owner_pid: true,
            admission: o.admission,
            bound_to: Some(std::process::id()),
        };
        let id_pool = stockade::idpool::IdPool::from_env()?;
        id_pool.check_host()?;
        let daemon = Daemon::new(
            store,
            o.home,
            o.default_provider,
            limits,
            stockade::ProviderOptions {
                id_pool: Some(id_pool),
                ..Default::default()
            },
        )?;
        daemon.provider("")?;
        daemon.recover().await?;
        tokio::spawn(daemon.clone().reaper());
        tokio::spawn(daemon.clone().health_checker());
        Ok(Embedded { daemon, state_dir })
    }

    /// The daemon.
    pub fn daemon(&self) -> &Arc<Daemon> {
        &self.daemon
    }

    /// `tenant`'s view of the daemon as provider `backend` (the default for "").
    pub fn provider(&self, tenant: &str, backend: &str) -> Result<TenantProvider> {
        TenantProvider::new(self.daemon.clone(), tenant, backend)
    }

    /// Stops the daemon and removes its state. Sandboxes still handed out stay (their
    /// owner pid or lifetime ends them); sessions keep their workspaces.
    pub async fn shutdown(self) {
        self.daemon.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Removes the state directories (`PID-N`) of processes that are gone.
fn sweep_dead(root: &Path) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(p, _)| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            || pid == std::process::id() as i32;
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// One tenant's view of a daemon as a provider: every call is the daemon's for that
/// tenant (its profile admits creates, its quota counts them, it sees only its own).
pub struct TenantProvider {
    daemon: Arc<Daemon>,
    tenant: String,
    name: &'static str,
    backend: Arc<dyn Provider>,
}

impl TenantProvider {
    /// `tenant` on provider `backend` of `daemon` ("" for the daemon's default).
    pub fn new(daemon: Arc<Daemon>, tenant: &str, backend: &str) -> Result<TenantProvider> {
        let (_, p) = daemon.provider(backend)?;
        Ok(TenantProvider {
            name: p.name(),
            backend: p,
            tenant: tenant.to_string(),
            daemon,
        })
    }

    /// The tenant this view is of.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The session's sandbox (its workspace under the tenant's directory).
    pub async fn session_get(&self, name: &str) -> Result<SandboxInfo> {
        self.daemon.session_get(&self.tenant, name).await
    }

    /// How many live sandboxes the tenant holds (the count its quota is held to).
    pub async fn live(&self) -> Result<usize> {
        Ok(self.daemon.list(&self.tenant).await?.len())
    }
}

#[async_trait]
impl Provider for TenantProvider {
    fn name(&self) -> &'static str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        self.backend.probe().await
    }

    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo> {
        let spec = spec.into_inner().into_inner();
        self.daemon
            .create(&self.tenant, self.name, spec, opts.owner_pid, false)
            .await
            .map(|(info, _)| info)
    }

    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome> {
        self.daemon
            .exec_io(&self.tenant, id, req.into_inner(), io)
            .await
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        self.daemon.destroy(&self.tenant, id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        Ok(self
            .daemon
            .list(&self.tenant)
            .await?
            .into_iter()
            .map(|(info, _)| info)
            .filter(|info| info.provider == self.name)
            .collect())
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        self.daemon
            .inspect(&self.tenant, id)
            .await
            .map(|(info, _)| info)
    }

    async fn gc(&self) -> Result<GcReport> {
        Err(Error::PolicyDenied(
            "gc sweeps the whole host: a tenant of the daemon cannot run it".into(),
        ))
    }

    async fn file(&self, id: &str, op: FileOp) -> Result<FileResult> {
        self.daemon.file(&self.tenant, id, op).await
    }

    async fn host_ids(&self, uid: u32, gid: u32) -> Result<(u32, u32)> {
        self.backend.host_ids(uid, gid).await
    }

    fn pausing(&self) -> Option<&dyn stockade::Pausing> {
        self.backend
            .pausing()
            .map(|_| self as &dyn stockade::Pausing)
    }

    fn forking(&self) -> Option<&dyn stockade::Forking> {
        self.backend
            .forking()
            .map(|_| self as &dyn stockade::Forking)
    }

    fn snapshotting(&self) -> Option<&dyn stockade::Snapshotting> {
        self.backend
            .snapshotting()
            .map(|_| self as &dyn stockade::Snapshotting)
    }

    fn egress_control(&self) -> Option<&dyn stockade::EgressControl> {
        self.backend
            .egress_control()
            .map(|_| self as &dyn stockade::EgressControl)
    }

    fn usage_counters(&self) -> Option<&dyn stockade::UsageCounters> {
        self.backend
            .usage_counters()
            .map(|_| self as &dyn stockade::UsageCounters)
    }

    fn files_as_user(&self) -> Option<&dyn stockade::FilesAsUser> {
        self.backend
            .files_as_user()
            .map(|_| self as &dyn stockade::FilesAsUser)
    }

    fn terminals(&self) -> bool {
        self.backend.terminals()
    }

    fn why_not(&self, verb: stockade::Verb) -> &'static str {
        self.backend.why_not(verb)
    }
}

// A tenant's view of each facet its backend has: every call through the daemon, which
// holds the tenant to its own sandboxes.

#[async_trait]
impl stockade::Pausing for TenantProvider {
    async fn pause(&self, id: &str) -> Result<()> {
        self.daemon.pause(&self.tenant, id).await
    }

    async fn resume(&self, id: &str) -> Result<()> {
        self.daemon.resume(&self.tenant, id).await
    }
}

#[async_trait]
impl stockade::Forking for TenantProvider {
    async fn fork(&self, id: &str, count: u32, _opts: CreateOptions) -> Result<Vec<SandboxInfo>> {
        self.daemon.fork(&self.tenant, id, count).await
    }
}

#[async_trait]
impl stockade::Snapshotting for TenantProvider {
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        self.daemon.snapshot(&self.tenant, id, name).await
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.daemon.snapshots(&self.tenant).await
    }

    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.daemon.remove_snapshot(&self.tenant, name).await
    }

    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo> {
        self.daemon
            .create_from_snapshot(&self.tenant, self.name, name, opts.owner_pid)
            .await
    }
}

#[async_trait]
impl stockade::EgressControl for TenantProvider {
    async fn set_network(&self, id: &str, network: &stockade::spec::Network) -> Result<()> {
        self.daemon.set_network(&self.tenant, id, network).await
    }

    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        self.daemon.egress_denied(&self.tenant, id, since_ms).await
    }
}

#[async_trait]
impl stockade::UsageCounters for TenantProvider {
    async fn usage(&self, id: &str) -> Result<Usage> {
        self.daemon.usage(&self.tenant, id).await
    }
}

#[async_trait]
impl stockade::FilesAsUser for TenantProvider {
    async fn file_as(&self, id: &str, uid: u32, op: FileOp) -> Result<FileResult> {
        self.daemon.file_as(&self.tenant, id, uid, op).await
    }
}
