//! The daemon's state and what it does with it: tenants' sandboxes, quotas, warm
//! pools, the reaper, recovery after a crash, shutdown. The gRPC layer
//! (`service.rs`) only translates.
//!
//! Locking: one `std::sync::Mutex` around the in-memory state, never held across an
//! `await`; providers are called outside it, so creations run concurrently.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stockade::{
    CheckedRequest, CheckedSpec, CreateOptions, Error, ExecInput, ExecIo, ExecOutcome, ExecRequest,
    FileOp, FileResult, Provider, Result, SandboxInfo, SandboxSpec,
};
use stockade_pool::{Pool, PoolStats};
use tokio::sync::mpsc;

mod images;
mod lifecycle;
mod paths;
mod pools;

pub use paths::{MountPolicy, STAGED_LABEL, check_image, check_session_name};

use crate::metrics::{Gauges, Metrics};
use crate::store::{PoolRecord, SandboxRecord, Store, random_hex};
use stockade::now_ms;

/// The longest sandbox lifetime a spec may ask for (stockade-spec's bound).
const MAX_LIFETIME_SECS: u64 = 7 * 24 * 3600;
/// How often each warm sandbox is health-checked in the background.
const HEALTH_EVERY_MS: u64 = 2_000;
/// A warm sandbox whose last passed check is older than this is checked again at
/// hand-over (the background checks fell behind).
const HEALTH_FRESH_MS: u64 = 5_000;
/// How long after a hand-over its pool starts refilling.
const REFILL_AFTER_HANDOVER: Duration = Duration::from_millis(5);

/// The label naming the daemon that created a sandbox.
pub const DAEMON_LABEL: &str = "stockade.daemon";
/// The label naming the tenant that owns a sandbox.
pub const TENANT_LABEL: &str = "stockade.tenant";

/// Quotas and pool settings.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most live sandboxes per tenant (handed out, not idle in pools).
    pub sandboxes_per_tenant: usize,
    /// Most pooled sandboxes per tenant (the sum of its pools' `max`).
    pub pool_per_tenant: usize,
    /// Most sandboxes of all tenants at once, idle ones included.
    pub sandboxes_total: usize,
    /// How long a warm sandbox may wait before it is replaced.
    pub pool_idle_ttl: Duration,
    /// Which host paths specs may mount.
    pub mounts: MountPolicy,
    /// Whether callers are tenants with tokens (then images are names only).
    pub tenants_untrusted: bool,
    /// What each tenant may add to the image store in all (`--tenant-image-bytes`).
    pub tenant_image_bytes: u64,
    /// Whether `owner_pid` means a process of the caller (unix socket only).
    pub honour_owner_pid: bool,
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(e.to_string())
}

struct PoolEntry {
    record: PoolRecord,
    /// The template as a spec (env and workdir empty).
    spec: SandboxSpec,
    pool: Pool<String>,
}

#[derive(Default)]
struct Inner {
    /// Every sandbox the daemon owns, idle pool members included.
    sandboxes: HashMap<String, SandboxRecord>,
    /// Last use (exec, file operation) of handed-out sandboxes, unix ms.
    last_used: HashMap<String, u64>,
    /// Operations running now, by sandbox: a sandbox with one is in use, never idle.
    busy: HashMap<String, usize>,
    /// What the provider said about each warm sandbox when it was made (handing one
    /// over then needs no provider call for it).
    warm_info: HashMap<String, SandboxInfo>,
    /// When each warm sandbox last passed a health check (its creation counts), unix ms.
    healthy_at: HashMap<String, u64>,
    /// Pools by `tenant/template`.
    pools: HashMap<String, PoolEntry>,
    /// Creations in progress by tenant (counted against quotas).
    pending: HashMap<String, usize>,
}

impl Inner {
    fn live_of(&self, tenant: &str) -> usize {
        self.sandboxes
            .values()
            .filter(|r| !r.idle && r.tenant == tenant)
            .count()
            + self.pending.get(tenant).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.sandboxes.len()
            + self.pending.values().sum::<usize>()
            + self
                .pools
                .values()
                .map(|p| p.pool.stats().creating)
                .sum::<usize>()
    }
}

/// A running streamed exec that takes input.
struct RunningExec {
    tenant: String,
    input: mpsc::Sender<ExecInput>,
}

/// The daemon.
pub struct Daemon {
    limits: Limits,
    default_provider: String,
    home: PathBuf,
    native_state_dir: Option<PathBuf>,
    daemon_id: String,
    store: Store,
    providers: Mutex<HashMap<String, Arc<dyn Provider>>>,
    inner: Mutex<Inner>,
    execs: Mutex<HashMap<String, RunningExec>>,
    pub metrics: Metrics,
    started: Instant,
    stopping: AtomicBool,
    /// Tokens of mount stagings whose creation is under way (the sweep keeps them).
    staging_in_flight: Arc<Mutex<std::collections::HashSet<String>>>,
    /// One budgeted image pull per tenant at a time.
    image_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One pool as `pool ls` shows it.
#[derive(Clone, Debug)]
pub struct PoolView {
    pub record: PoolRecord,
    pub stats: PoolStats,
}

/// A template: the spec without what is bound late (env, workdir), and its id. The
/// lifetime is bound late too (it runs from acquisition), so it is not part of the
/// id; the template keeps it as the lifetime its warm sandboxes are made for.
pub fn template_of(provider: &str, spec: &SandboxSpec) -> (String, SandboxSpec) {
    use sha2::Digest;
    let mut t = spec.clone();
    t.env.clear();
    t.workdir = None;
    let keyed = SandboxSpec {
        timeout_secs: 0,
        ..t.clone()
    };
    let json = serde_json::to_string(&keyed).unwrap_or_default();
    let d = sha2::Sha256::digest(format!("{provider}\n{json}").as_bytes());
    let id = d[..6].iter().map(|b| format!("{b:02x}")).collect();
    (id, t)
}

/// Releases a creation slot on drop.
struct Pending<'a> {
    d: &'a Daemon,
    tenant: String,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut g = self.d.lock();
        if let Some(n) = g.pending.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Marks a sandbox in use while it lives (an exec or file operation runs); on drop
/// the use ends now, which is when idleness starts counting.
pub struct InUse {
    d: Arc<Daemon>,
    id: String,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut g = self.d.lock();
        if let Some(n) = g.busy.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                g.busy.remove(&self.id);
            }
        }
        if g.sandboxes.contains_key(&self.id) {
            g.last_used.insert(self.id.clone(), now_ms());
        }
    }
}

/// Joins relative paths of a file operation onto a late-bound workdir.
fn rebase(op: FileOp, workdir: &str) -> FileOp {
    let fix = |p: String| {
        if p.starts_with('/') {
            p
        } else {
            format!("{}/{p}", workdir.trim_end_matches('/'))
        }
    };
    match op {
        FileOp::Write { path, data, mode } => FileOp::Write {
            path: fix(path),
            data,
            mode,
        },
        FileOp::Read {
            path,
            offset,
            limit,
        } => FileOp::Read {
            path: fix(path),
            offset,
            limit,
        },
        FileOp::Edit {
            path,
            old,
            new,
            replace_all,
        } => FileOp::Edit {
            path: fix(path),
            old,
            new,
            replace_all,
        },
        FileOp::Ls { path } => FileOp::Ls { path: fix(path) },
        FileOp::Stat { path } => FileOp::Stat { path: fix(path) },
        FileOp::Glob { pattern, root } => FileOp::Glob {
            pattern,
            root: fix(root),
        },
        FileOp::Grep {
            regex,
            root,
            include,
            max_matches,
        } => FileOp::Grep {
            regex,
            root: fix(root),
            include,
            max_matches,
        },
        FileOp::Mkdir { path, parents } => FileOp::Mkdir {
            path: fix(path),
            parents,
        },
        FileOp::Rm { path, recursive } => FileOp::Rm {
            path: fix(path),
            recursive,
        },
        FileOp::Upload { dest, archive } => FileOp::Upload {
            dest: fix(dest),
            archive,
        },
        FileOp::Download { path } => FileOp::Download { path: fix(path) },
    }
}

impl Daemon {
    /// A daemon over the store, before recovery.
    pub fn new(
        store: Store,
        home: PathBuf,
        default_provider: String,
        limits: Limits,
        native_state_dir: Option<PathBuf>,
    ) -> Result<Arc<Daemon>> {
        let daemon_id = store.daemon_id().map_err(internal)?;
        Ok(Arc::new(Daemon {
            limits,
            default_provider,
            home,
            native_state_dir,
            daemon_id,
            store,
            providers: Mutex::new(HashMap::new()),
            inner: Mutex::new(Inner::default()),
            execs: Mutex::new(HashMap::new()),
            metrics: Metrics::default(),
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            staging_in_flight: Arc::default(),
            image_locks: Mutex::default(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent-enough counters; go on.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Milliseconds since start.
    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The default provider's name.
    pub fn default_provider(&self) -> &str {
        &self.default_provider
    }

    /// The provider called `name` (empty: the default).
    pub fn provider(&self, name: &str) -> Result<(String, Arc<dyn Provider>)> {
        let name = if name.is_empty() {
            self.default_provider.clone()
        } else {
            name.to_string()
        };
        let mut m = self.providers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = m.get(&name) {
            return Ok((name, p.clone()));
        }
        let p: Arc<dyn Provider> = match (name.as_str(), &self.native_state_dir) {
            ("native", Some(root)) => Arc::new(stockade::NativeProvider::from(
                stockade::NativeLauncher::with_state_root(root)
                    .with_image_store(self.home.join("images")),
            )),
            _ => stockade::provider_with_home(Some(&name), Some(&self.home))?,
        };
        m.insert(name.clone(), p.clone());
        Ok((name, p))
    }

    /// Gauges for `/metrics`.
    pub fn gauges(&self) -> Gauges {
        let g = self.lock();
        let (idle, creating) = g.pools.values().fold((0, 0), |(i, c), p| {
            let s = p.pool.stats();
            (i + s.idle, c + s.creating)
        });
        Gauges {
            live: g.sandboxes.values().filter(|r| !r.idle).count(),
            idle,
            creating,
            running_execs: self.execs.lock().map(|e| e.len()).unwrap_or(0),
        }
    }

    fn check_spec(&self, provider: &dyn Provider, spec: &SandboxSpec) -> Result<()> {
        // Names only, checked before anything touches the file system.
        self.limits.mounts.check(spec)?;
        if self.limits.tenants_untrusted {
            check_image(provider.name(), spec.image.as_deref())?;
        }
        let v = spec.clone().validate()?;
        provider.capabilities().check(provider.name(), &v)?;
        Ok(())
    }

    fn labelled(&self, mut spec: SandboxSpec, tenant: &str) -> SandboxSpec {
        spec.labels
            .insert(DAEMON_LABEL.into(), self.daemon_id.clone());
        spec.labels.insert(TENANT_LABEL.into(), tenant.into());
        spec
    }

    fn reserve(&self, tenant: &str) -> Result<Pending<'_>> {
        let mut g = self.lock();
        let live = g.live_of(tenant);
        if live >= self.limits.sandboxes_per_tenant {
            return Err(Error::LimitExceeded {
                what: format!("sandbox for tenant {tenant} ({live} live)"),
                limit: format!(
                    "{} live sandboxes per tenant",
                    self.limits.sandboxes_per_tenant
                ),
            });
        }
        let total = g.total();
        if total >= self.limits.sandboxes_total {
            return Err(Error::LimitExceeded {
                what: format!("sandbox on this daemon ({total} exist)"),
                limit: format!("{} sandboxes in all", self.limits.sandboxes_total),
            });
        }
        *g.pending.entry(tenant.to_string()).or_default() += 1;
        Ok(Pending {
            d: self,
            tenant: tenant.to_string(),
        })
    }

    fn save(&self, r: &SandboxRecord) -> Result<()> {
        self.store.put_sandbox(r).map_err(internal)
    }

    fn forget(&self, id: &str) {
        if let Err(e) = self.store.remove_sandbox(id) {
            tracing::error!(sandbox = id, error = %e, "cannot forget sandbox");
        }
    }

    /// Creates a sandbox for `tenant`, warm from a pool of its template when there
    /// is one (unless `no_pool`). Returns the info and whether it was warm.
    pub async fn create(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        owner_pid: Option<u32>,
        no_pool: bool,
    ) -> Result<(SandboxInfo, bool)> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                what: "stockaded".into(),
                reason: "it is shutting down".into(),
                fix: "retry when it is back".into(),
            });
        }
        let (pname, p) = self.provider(provider)?;
        self.check_spec(p.as_ref(), &spec)?;
        let owner_pid = owner_pid.filter(|_| self.limits.honour_owner_pid);
        let _slot = self.reserve(tenant)?;
        self.charge_image(tenant, &pname, &spec).await?;
        let (template, _) = template_of(&pname, &spec);
        let key = format!("{tenant}/{template}");
        let spec_json = serde_json::to_value(&spec).map_err(internal)?;
        let now = now_ms();
        let expires_at_ms = now + spec.timeout_secs * 1000;
        let idle_timeout_ms = spec.idle_timeout_secs.map(|s| s * 1000);
        if !no_pool {
            let t0 = Instant::now();
            while let Some(id) = {
                let mut g = self.lock();
                g.pools.get_mut(&key).and_then(|e| e.pool.acquire())
            } {
                // The provider's own deadline of a warm sandbox must cover the
                // caller's lifetime; if it does not, the sandbox goes back.
                let made = self
                    .lock()
                    .sandboxes
                    .get(&id)
                    .map(|r| (r.expires_at_ms, r.created_at_ms));
                if let Some((deadline, created)) = made
                    && now_ms() + spec.timeout_secs * 1000 > deadline
                {
                    let mut g = self.lock();
                    if let Some(e) = g.pools.get_mut(&key) {
                        e.pool.acquired_broken();
                        e.pool.adopt_idle(id.clone(), created);
                    }
                    break;
                }
                // Warm sandboxes are health-checked in the background (`health_sweep`);
                // one whose last check is not recent is checked here, before hand-over.
                let fresh = self
                    .lock()
                    .healthy_at
                    .get(&id)
                    .is_some_and(|&t| now_ms().saturating_sub(t) <= HEALTH_FRESH_MS);
                let healthy = if fresh {
                    Ok(Ok(()))
                } else {
                    tokio::time::timeout(Duration::from_secs(2), p.health(&id)).await
                };
                if !matches!(healthy, Ok(Ok(()))) {
                    tracing::warn!(sandbox = %id, "warm sandbox failed its health check; replacing it");
                    {
                        let mut g = self.lock();
                        if let Some(e) = g.pools.get_mut(&key) {
                            e.pool.acquired_broken();
                        }
                        g.sandboxes.remove(&id);
                    }
                    self.destroy_quietly(&p, &id, "broken").await;
                    continue;
                }
                if let Some(w) = &spec.workdir {
                    // A workdir the sandbox user cannot create shows as the exec's error.
                    let _ = p
                        .file(
                            &id,
                            FileOp::Mkdir {
                                path: w.display().to_string(),
                                parents: true,
                            },
                        )
                        .await;
                }
                let rec = {
                    let mut g = self.lock();
                    let Some(r) = g.sandboxes.get_mut(&id) else {
                        continue;
                    };
                    r.idle = false;
                    r.tenant = tenant.to_string();
                    r.spec = spec_json.clone();
                    r.env = spec.env.clone();
                    r.workdir = spec.workdir.as_ref().map(|w| w.display().to_string());
                    r.expires_at_ms = now_ms() + spec.timeout_secs * 1000;
                    r.idle_timeout_ms = idle_timeout_ms;
                    r.owner_pid = owner_pid;
                    let r = r.clone();
                    g.last_used.insert(id.clone(), now_ms());
                    g.healthy_at.remove(&id);
                    (r, g.warm_info.remove(&id))
                };
                let (rec, cached) = rec;
                self.save(&rec)?;
                self.metrics.pool_hits.fetch_add(1, Ordering::Relaxed);
                self.metrics.acquire_seconds.observe(t0.elapsed());
                // The replacement starts once the answer is on its way, so creating
                // it (a process launch) does not compete with this hand-over.
                let d = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(REFILL_AFTER_HANDOVER).await;
                    d.refill(&key);
                });
                let info = match cached {
                    Some(i) => self.present(i, &rec),
                    None => self.info_of(&p, &rec).await?,
                };
                return Ok((info, true));
            }
            let had_pool = self.lock().pools.contains_key(&key);
            if had_pool {
                self.metrics.pool_misses.fetch_add(1, Ordering::Relaxed);
                self.refill(&key);
            }
        }
        let labelled = self.labelled(spec.clone(), tenant);
        let t0 = Instant::now();
        let info = match self.create_on(&p, labelled).await {
            Ok(i) => i,
            Err(e) => {
                self.metrics.creates_failed.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        self.metrics.create_seconds.observe(t0.elapsed());
        self.metrics.creates_ok.fetch_add(1, Ordering::Relaxed);
        let rec = SandboxRecord {
            id: info.id.clone(),
            tenant: tenant.to_string(),
            provider: pname,
            spec: spec_json,
            template: None,
            idle: false,
            env: BTreeMap::new(),
            workdir: None,
            created_at_ms: info.created_at_ms,
            expires_at_ms,
            idle_timeout_ms,
            owner_pid,
        };
        if let Err(e) = self.save(&rec) {
            self.destroy_quietly(&p, &rec.id, "unsaved").await;
            return Err(e);
        }
        {
            let mut g = self.lock();
            g.last_used.insert(rec.id.clone(), now_ms());
            g.sandboxes.insert(rec.id.clone(), rec.clone());
        }
        tracing::info!(sandbox = %rec.id, tenant, "created");
        Ok((self.present(info, &rec), false))
    }

    /// Creates on the provider, with the spec's host mounts staged when tenants'
    /// mounts are restricted (the provider never walks a tenant's path).
    async fn create_on(&self, p: &Arc<dyn Provider>, spec: SandboxSpec) -> Result<SandboxInfo> {
        let (spec, staging) = self.limits.mounts.stage(self, spec)?;
        let v = CheckedSpec::new(spec.validate()?, p.as_ref())?;
        let info = p.create(v, CreateOptions { owner_pid: None }).await?;
        staging.commit();
        Ok(info)
    }

    fn present(&self, mut info: SandboxInfo, rec: &SandboxRecord) -> SandboxInfo {
        info.spec = rec.spec.clone();
        info.expires_at_ms = rec.expires_at_ms;
        info.owner_pid = rec.owner_pid;
        info
    }

    async fn info_of(&self, p: &Arc<dyn Provider>, rec: &SandboxRecord) -> Result<SandboxInfo> {
        let info = p.inspect(&rec.id).await?;
        Ok(self.present(info, rec))
    }

    async fn destroy_quietly(&self, p: &Arc<dyn Provider>, id: &str, why: &'static str) {
        if let Err(e) = p.destroy(id).await {
            tracing::error!(sandbox = id, error = %e, "cannot destroy sandbox");
        }
        self.forget(id);
        tracing::info!(sandbox = id, reason = why, "destroyed");
    }

    /// The tenant's record of `id` (another tenant's id, or a warm one, is not found).
    fn record(&self, tenant: &str, id: &str) -> Result<SandboxRecord> {
        let g = self.lock();
        match g.sandboxes.get(id) {
            Some(r) if !r.idle && r.tenant == tenant => Ok(r.clone()),
            _ => Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            }),
        }
    }

    fn touch(&self, id: &str) {
        self.lock().last_used.insert(id.to_string(), now_ms());
    }

    /// The sandbox is in use until the guard drops (the reaper never takes a busy
    /// sandbox for idle: an exec longer than the idle timeout is use, not idleness).
    pub fn in_use(self: &Arc<Self>, id: &str) -> InUse {
        let mut g = self.lock();
        *g.busy.entry(id.to_string()).or_default() += 1;
        g.last_used.insert(id.to_string(), now_ms());
        InUse {
            d: self.clone(),
            id: id.to_string(),
        }
    }

    /// The request with the sandbox's late-bound env and workdir applied.
    fn bind(rec: &SandboxRecord, mut req: ExecRequest) -> ExecRequest {
        if rec.template.is_some() {
            let mut env = rec.env.clone();
            env.extend(std::mem::take(&mut req.env));
            req.env = env;
            if req.cwd.is_none() {
                req.cwd = rec.workdir.clone();
            }
        }
        req
    }

    /// What `exec` needs: the provider, the request (bound), and the mark that the
    /// sandbox is in use (hold it until the exec ends).
    pub fn prepare_exec(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        req: ExecRequest,
    ) -> Result<(Arc<dyn Provider>, CheckedRequest, InUse)> {
        let rec = self.record(tenant, id)?;
        let req = CheckedRequest::new(Self::bind(&rec, req))?;
        let busy = self.in_use(id);
        let (_, p) = self.provider(&rec.provider)?;
        Ok((p, req, busy))
    }

    /// Runs an exec and waits (dropping the future kills it).
    pub async fn exec(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        req: ExecRequest,
    ) -> Result<ExecOutcome> {
        if req.keep_stdin_open {
            return Err(Error::InvalidRequest(
                "keep_stdin_open needs a streamed exec (ExecStream)".into(),
            ));
        }
        let (p, req, _busy) = self.prepare_exec(tenant, id, req)?;
        let t0 = Instant::now();
        let r = p.exec(id, req, ExecIo::none()).await;
        self.exec_done(id, t0, &r);
        r
    }

    /// Counts a finished exec.
    pub fn exec_done(&self, id: &str, t0: Instant, r: &Result<ExecOutcome>) {
        self.touch(id);
        self.metrics.execs.fetch_add(1, Ordering::Relaxed);
        self.metrics.exec_seconds.observe(t0.elapsed());
        if r.is_err() {
            self.metrics.exec_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Registers a streamed exec taking input; returns its id.
    pub fn register_exec(&self, tenant: &str, input: mpsc::Sender<ExecInput>) -> String {
        let id = format!("ex-{}", random_hex(8));
        if let Ok(mut m) = self.execs.lock() {
            m.insert(
                id.clone(),
                RunningExec {
                    tenant: tenant.to_string(),
                    input,
                },
            );
        }
        id
    }

    /// Forgets a finished streamed exec.
    pub fn unregister_exec(&self, exec_id: &str) {
        if let Ok(mut m) = self.execs.lock() {
            m.remove(exec_id);
        }
    }

    /// Sends input to a running exec of the tenant.
    pub async fn exec_input(
        &self,
        tenant: &str,
        exec_id: &str,
        msgs: Vec<ExecInput>,
    ) -> Result<()> {
        let tx = self
            .execs
            .lock()
            .ok()
            .and_then(|m| {
                m.get(exec_id)
                    .filter(|e| e.tenant == tenant)
                    .map(|e| e.input.clone())
            })
            .ok_or_else(|| Error::NotFound {
                kind: "exec",
                id: exec_id.to_string(),
            })?;
        for m in msgs {
            tx.send(m).await.map_err(|_| Error::NotFound {
                kind: "exec",
                id: exec_id.to_string(),
            })?;
        }
        Ok(())
    }

    /// A file operation as the sandbox user.
    pub async fn file(self: &Arc<Self>, tenant: &str, id: &str, op: FileOp) -> Result<FileResult> {
        let rec = self.record(tenant, id)?;
        let _busy = self.in_use(id);
        let (_, p) = self.provider(&rec.provider)?;
        let op = match (&rec.template, &rec.workdir) {
            (Some(_), Some(w)) => rebase(op, w),
            _ => op,
        };
        p.file(id, op).await
    }

    /// Destroys a sandbox of the tenant.
    pub async fn destroy(&self, tenant: &str, id: &str) -> Result<()> {
        let rec = self.record(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        p.destroy(id).await?;
        self.drop_record(&rec);
        Ok(())
    }

    fn drop_record(&self, rec: &SandboxRecord) {
        {
            let mut g = self.lock();
            g.sandboxes.remove(&rec.id);
            g.last_used.remove(&rec.id);
            if let Some(t) = &rec.template
                && !rec.idle
                && let Some(e) = g.pools.get_mut(&format!("{}/{t}", rec.tenant))
            {
                e.pool.release();
            }
        }
        self.forget(&rec.id);
    }

    /// One sandbox of the tenant.
    pub async fn inspect(&self, tenant: &str, id: &str) -> Result<(SandboxInfo, bool)> {
        let rec = self.record(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        Ok((self.info_of(&p, &rec).await?, rec.template.is_some()))
    }

    /// The tenant's sandboxes.
    pub async fn list(&self, tenant: &str) -> Result<Vec<(SandboxInfo, bool)>> {
        let mine: Vec<SandboxRecord> = self
            .lock()
            .sandboxes
            .values()
            .filter(|r| !r.idle && r.tenant == tenant)
            .cloned()
            .collect();
        let mut by_provider: BTreeMap<String, Vec<SandboxRecord>> = BTreeMap::new();
        for r in mine {
            by_provider.entry(r.provider.clone()).or_default().push(r);
        }
        let mut out = Vec::new();
        for (name, recs) in by_provider {
            let (_, p) = self.provider(&name)?;
            let live: HashMap<String, SandboxInfo> = p
                .list()
                .await?
                .into_iter()
                .map(|i| (i.id.clone(), i))
                .collect();
            for r in recs {
                if let Some(i) = live.get(&r.id) {
                    out.push((self.present(i.clone(), &r), r.template.is_some()));
                }
            }
        }
        out.sort_by_key(|(i, _)| i.created_at_ms);
        Ok(out)
    }

    /// Reaps what the providers left and what the daemon no longer wants.
    pub async fn gc(self: &Arc<Self>) -> Result<stockade::GcReport> {
        let mut report = self.reap_once(true).await;
        let names: Vec<String> = self
            .providers
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for n in names {
            let (_, p) = self.provider(&n)?;
            let r = p.gc().await?;
            report.reaped.extend(r.reaped);
            report.errors.extend(r.errors);
        }
        Ok(report)
    }

    // ----- sessions -----

    fn sessions(&self, tenant: &str) -> Result<stockade::SessionManager> {
        let (_, p) = self.provider("")?;
        let mut cfg = stockade::SessionConfig::new(self.home.join("tenants").join(tenant));
        cfg.spec = self.labelled(SandboxSpec::default(), tenant);
        Ok(stockade::SessionManager::new(p, cfg))
    }

    /// The session's sandbox (created on its workspace when none is live).
    pub async fn session_get(&self, tenant: &str, name: &str) -> Result<SandboxInfo> {
        check_session_name(name)?;
        let _slot = self.reserve(tenant)?;
        let sb = self.sessions(tenant)?.get_or_create(name).await?;
        let info = sb.info().clone();
        let known = self.lock().sandboxes.contains_key(&info.id);
        if !known {
            let rec = SandboxRecord {
                id: info.id.clone(),
                tenant: tenant.to_string(),
                provider: self.default_provider.clone(),
                spec: info.spec.clone(),
                template: None,
                idle: false,
                env: BTreeMap::new(),
                workdir: None,
                created_at_ms: info.created_at_ms,
                expires_at_ms: info.expires_at_ms,
                idle_timeout_ms: None,
                owner_pid: None,
            };
            self.save(&rec)?;
            self.lock().sandboxes.insert(rec.id.clone(), rec);
        }
        Ok(info)
    }

    async fn session_sandbox(&self, tenant: &str, name: &str) -> Result<Option<String>> {
        Ok(self
            .sessions(tenant)?
            .list()
            .await?
            .into_iter()
            .find(|s| s.name == name)
            .and_then(|s| s.sandbox_id))
    }

    /// Destroys the session's sandbox, keeps its workspace.
    pub async fn session_release(&self, tenant: &str, name: &str) -> Result<()> {
        check_session_name(name)?;
        let id = self.session_sandbox(tenant, name).await?;
        self.sessions(tenant)?.release(name).await?;
        if let Some(r) = id.and_then(|id| self.record(tenant, &id).ok()) {
            self.drop_record(&r);
        }
        Ok(())
    }

    /// Destroys the session's sandbox and workspace.
    pub async fn session_delete(&self, tenant: &str, name: &str) -> Result<()> {
        check_session_name(name)?;
        let id = self.session_sandbox(tenant, name).await?;
        self.sessions(tenant)?.delete(name).await?;
        if let Some(r) = id.and_then(|id| self.record(tenant, &id).ok()) {
            self.drop_record(&r);
        }
        Ok(())
    }

    /// The tenant's sessions.
    pub async fn session_list(&self, tenant: &str) -> Result<Vec<stockade::SessionInfo>> {
        self.sessions(tenant)?.list().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_ignore_late_bound_env_workdir_and_lifetime_only() {
        let mut a = SandboxSpec::default();
        a.env.insert("K".into(), "v".into());
        a.workdir = Some("/w".into());
        let b = SandboxSpec::default();
        assert_eq!(template_of("native", &a).0, template_of("native", &b).0);
        assert_ne!(template_of("native", &b).0, template_of("wasm", &b).0);
        let mut c = SandboxSpec::default();
        c.limits.memory_bytes /= 2;
        assert_ne!(template_of("native", &b).0, template_of("native", &c).0);
        assert!(template_of("native", &a).1.env.is_empty());
        let long = SandboxSpec {
            timeout_secs: 900,
            ..SandboxSpec::default()
        };
        assert_eq!(template_of("native", &long).0, template_of("native", &b).0);
        assert_eq!(
            template_of("native", &long).1.timeout_secs,
            900,
            "kept in the template"
        );
    }

    #[test]
    fn relative_paths_are_rebased_onto_the_late_workdir() {
        let op = rebase(
            FileOp::Write {
                path: "a/b.txt".into(),
                data: vec![],
                mode: None,
            },
            "/work/",
        );
        assert_eq!(op.path(), "/work/a/b.txt");
        assert_eq!(
            rebase(
                FileOp::Ls {
                    path: "/etc".into()
                },
                "/w"
            )
            .path(),
            "/etc"
        );
        let g = rebase(
            FileOp::Glob {
                pattern: "*.py".into(),
                root: ".".into(),
            },
            "/w",
        );
        assert_eq!(g.path(), "/w/.");
    }
}
