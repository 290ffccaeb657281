//! The daemon's state and what it does with it, one module per concern:
//!
//! - `entry`: one entry per sandbox and its state machine, pool keys, reap reasons;
//! - `create`: a create call: checks, the quota slot, then a pool or a cold creation;
//! - `acquire`: taking a warm sandbox from its pool and binding it to a caller;
//! - `pools`: warming, listing, draining, and the background creations that refill;
//! - `exec`: execs (plain and streamed with input), file operations, use marks;
//! - `sessions`: named sessions of a tenant;
//! - `reaper`: lifetimes, idle timeouts, dead owners, vanished sandboxes, health;
//! - `recovery`: adoption after a crash, and shutdown;
//! - `images`, `paths`: what a tenant may name on the host.
//!
//! The gRPC layer (`service.rs`) only translates.
//!
//! Locking: one `std::sync::Mutex` around [`entry::Inner`] (the entries, the pools,
//! the pending creations), never held across an `await`; providers are called
//! outside it, so creations and execs run concurrently. Apart from it, short
//! `std::sync::Mutex`es guard the provider registry, the running streamed execs,
//! and the image-pull locks (a `tokio::sync::Mutex` per tenant, held across the pull).
//! No code takes two of them at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stockade::{Error, Provider, Result, SandboxInfo, SandboxSpec};
use stockade_pool::PoolStats;

mod acquire;
mod create;
pub mod entry;
mod exec;
mod images;
mod made;
mod paths;
mod pools;
mod reaper;
mod recovery;
mod sessions;
mod snapshot;

pub use entry::{PoolKey, ReapReason, State};
pub use exec::{ExecEvent, InUse};
pub use made::MountMaker;
pub use paths::{MountPolicy, STAGED_LABEL, check_image, check_session_name};

use crate::metrics::{Gauges, Metrics};
use crate::store::{PoolRecord, SandboxRecord, Store};
use entry::Inner;
use stockade::now_ms;

/// The longest sandbox lifetime a spec may ask for (stockade-spec's bound).
const MAX_LIFETIME_SECS: u64 = 7 * 24 * 3600;
/// How often the reaper looks at lifetimes, idle timeouts and owners.
const REAP_EVERY: Duration = Duration::from_millis(250);
/// Every how many reaper passes it also lists the providers' sandboxes to find
/// vanished ones and sweeps staged mounts (every 5 s).
const GONE_EVERY_PASSES: u64 = 20;
/// How often the health checker looks for warm sandboxes due a check.
const HEALTH_SWEEP_EVERY: Duration = Duration::from_millis(250);
/// How often each warm sandbox is health-checked in the background.
const HEALTH_EVERY_MS: u64 = 2_000;
/// How long a health check may take before it counts as failed.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a recorded sandbox may take to answer after a restart.
const RECOVERY_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// A warm sandbox whose last passed check is older than this is checked again at
/// hand-over (the background checks fell behind).
const HEALTH_FRESH_MS: u64 = 5_000;
/// How long after a hand-over its pool is asked to refill (it waits longer while
/// acquisitions keep arriving: `Pool::to_create`).
const REFILL_AFTER_HANDOVER: Duration = Duration::from_millis(5);
/// What a warm sandbox's provider lifetime adds to its template's and the idle TTL
/// (if the daemon dies for good, the provider still ends it).
const WARM_LIFETIME_MARGIN_SECS: u64 = 60;
/// How long shutdown waits for pool creations in progress.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);
/// How long a create refused by a quota waits for destroys answered but still
/// tearing down (their slots come back when they are done).
const QUOTA_WAIT_FOR_DESTROYS: Duration = Duration::from_secs(10);
/// How often such a create looks again.
const QUOTA_POLL: Duration = Duration::from_millis(2);
/// How often shutdown looks whether those creations are done.
const SHUTDOWN_POLL: Duration = Duration::from_millis(50);

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
    /// The tenants' profiles: what each may ask for (`crate::admission`).
    pub admission: crate::admission::Admission,
    /// A process whose death ends every sandbox this daemon makes (the process an
    /// embedded daemon runs in, `crate::embedded`); `None` for `stockade serve`, whose
    /// sandboxes outlive it and are adopted by its next start.
    pub bound_to: Option<u32>,
}

/// An error of the daemon's own parts (its store, mostly): internal, but for a full
/// disk, which is the host's state, not a bug, and passes once there is room again.
fn internal(e: impl std::fmt::Display) -> Error {
    let message = e.to_string();
    if message.contains("os error 28") || message.contains("os error 122") {
        return Error::Unavailable {
            what: "the daemon's state".into(),
            reason: message,
            fix: "free space on that file system (or raise the quota); the daemon goes on \
                  once there is room, no restart needed"
                .into(),
        };
    }
    Error::Internal(message)
}

/// Teardowns of answered destroys that run at once.
const TEARDOWNS_AT_ONCE: usize = 16;

/// The daemon.
pub struct Daemon {
    limits: Limits,
    default_provider: String,
    home: PathBuf,
    daemon_id: String,
    store: Store,
    /// How providers are built (the library's own function, [`stockade::provider_with`]).
    provider_options: stockade::ProviderOptions,
    providers: Mutex<HashMap<String, Arc<dyn Provider>>>,
    inner: Mutex<Inner>,
    execs: Mutex<HashMap<String, exec::RunningExec>>,
    pub metrics: Metrics,
    started: Instant,
    stopping: AtomicBool,
    /// Destroys answered whose teardown still runs (shutdown and creates refused
    /// by a quota wait for them).
    destroys_in_flight: AtomicUsize,
    /// Teardowns that run at once (each may block a thread on the provider): a burst
    /// of destroys (`rm --all` of thousands) queues here instead of starting a
    /// thread each.
    teardowns: tokio::sync::Semaphore,
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
    /// The error of its last creation, when that one failed.
    pub last_error: Option<String>,
}

/// A template: the spec without what is bound late (env, workdir), and its id. The
/// lifetime is bound late too (it runs from acquisition), so it is not part of the
/// id; the template keeps it as the lifetime its warm sandboxes are made for.
pub fn template_of(provider: &str, spec: &SandboxSpec) -> (String, SandboxSpec) {
    template_of_kind(provider, spec, None)
}

/// [`template_of`] of sandboxes that also get host mounts of a [`MountMaker`]'s
/// `kind`: the kind is part of the id (a plain pool never serves them).
pub fn template_of_kind(
    provider: &str,
    spec: &SandboxSpec,
    kind: Option<&str>,
) -> (String, SandboxSpec) {
    use sha2::Digest;
    let mut t = spec.clone();
    t.env.clear();
    t.workdir = None;
    let keyed = SandboxSpec {
        timeout_secs: 0,
        ..t.clone()
    };
    let json = serde_json::to_string(&keyed).unwrap_or_default();
    let d = match kind {
        None => sha2::Sha256::digest(format!("{provider}\n{json}").as_bytes()),
        Some(k) => sha2::Sha256::digest(format!("{provider}\n{json}\nmounts:{k}").as_bytes()),
    };
    let id = d[..6].iter().map(|b| format!("{b:02x}")).collect();
    (id, t)
}

/// Whether `inspect` and `list` show a sandbox in this state: handed out. One being
/// destroyed is not shown: its destroy may have been answered already (teardown runs
/// in the background), and nothing may show a sandbox that is half gone.
fn shown(s: State) -> bool {
    s == State::InUse
}

impl Daemon {
    /// A daemon over the store, before recovery. Providers are built on first use
    /// with `provider_options` (native state root, id pool; `home` is set here).
    pub fn new(
        store: Store,
        home: PathBuf,
        default_provider: String,
        limits: Limits,
        provider_options: stockade::ProviderOptions,
    ) -> Result<Arc<Daemon>> {
        let daemon_id = store.daemon_id().map_err(internal)?;
        Ok(Arc::new(Daemon {
            limits,
            default_provider,
            provider_options: stockade::ProviderOptions {
                home: Some(home.clone()),
                ..provider_options
            },
            home,
            daemon_id,
            store,
            providers: Mutex::new(HashMap::new()),
            inner: Mutex::new(Inner::default()),
            execs: Mutex::new(HashMap::new()),
            metrics: Metrics::default(),
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            destroys_in_flight: AtomicUsize::new(0),
            teardowns: tokio::sync::Semaphore::new(TEARDOWNS_AT_ONCE),
            staging_in_flight: Arc::default(),
            image_locks: Mutex::default(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent-enough counters; go on.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Milliseconds since start.
    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The default provider's name.
    pub fn default_provider(&self) -> &str {
        &self.default_provider
    }

    /// The provider called `name` (empty: the default), built on first use by
    /// [`stockade::provider_with`].
    pub fn provider(&self, name: &str) -> Result<(String, Arc<dyn Provider>)> {
        let name = if name.is_empty() {
            self.default_provider.clone()
        } else {
            name.to_string()
        };
        let mut m = self
            .providers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = m.get(&name) {
            return Ok((name, p.clone()));
        }
        let p = stockade::provider_with(Some(&name), &self.provider_options)?;
        m.insert(name.clone(), p.clone());
        Ok((name, p))
    }

    /// Uses `p` as the provider called `name` (tests wrap a provider to control it).
    pub fn use_provider(&self, name: &str, p: Arc<dyn Provider>) {
        let mut m = self
            .providers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.insert(name.to_string(), p);
    }

    /// Names of the providers built so far.
    fn provider_names(&self) -> Vec<String> {
        self.providers
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Gauges for `/metrics`.
    pub fn gauges(&self) -> Gauges {
        let g = self.lock();
        let idle = g.pools.values().map(|p| p.pool.stats().idle).sum();
        Gauges {
            live: g.entries.values().filter(|e| e.is_live()).count(),
            idle,
            // Those of pools drained meanwhile too: they still run.
            creating: g.warm_creating.values().sum(),
            running_execs: self.execs.lock().map(|e| e.len()).unwrap_or(0),
        }
    }

    fn save(&self, r: &SandboxRecord) -> Result<()> {
        self.store.put_sandbox(r).map_err(internal)
    }

    fn forget(&self, id: &str) {
        if let Err(e) = self.store.remove_sandbox(id) {
            tracing::error!(sandbox = id, error = %e, "cannot forget sandbox");
        }
    }

    fn present(&self, mut info: SandboxInfo, rec: &SandboxRecord) -> SandboxInfo {
        info.spec = rec.spec.clone();
        // The lifetime does not run while paused: shown as it will be if resumed now.
        info.expires_at_ms = match rec.paused_at_ms {
            Some(at) => rec
                .expires_at_ms
                .saturating_add(now_ms().saturating_sub(at)),
            None => rec.expires_at_ms,
        };
        info.owner_pid = rec.owner_pid;
        info
    }

    async fn info_of(&self, p: &Arc<dyn Provider>, rec: &SandboxRecord) -> Result<SandboxInfo> {
        let info = p.inspect(&rec.id).await?;
        Ok(self.present(info, rec))
    }

    /// Destroys a sandbox nobody else can reach any more (its entry is claimed or
    /// was never published) and forgets its record, whatever the provider says.
    async fn destroy_quietly(&self, p: &Arc<dyn Provider>, id: &str, why: ReapReason) {
        if let Err(e) = p.destroy(id).await {
            tracing::error!(sandbox = id, error = %e, "cannot destroy sandbox");
        }
        self.lock().remove(id);
        self.forget(id);
        tracing::info!(sandbox = id, reason = %why, "destroyed");
    }

    /// Destroys a claimed entry: on success it is gone (record forgotten, pool slot
    /// given back); when the provider refuses, the entry goes back where it was.
    async fn destroy_claimed(&self, rec: &SandboxRecord) -> Result<()> {
        let done = match self.provider(&rec.provider) {
            Ok((_, p)) => p.destroy(&rec.id).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(()) => {
                self.lock().remove(&rec.id);
                self.forget(&rec.id);
                Ok(())
            }
            Err(e) => {
                self.lock().unclaim(&rec.id);
                Err(e)
            }
        }
    }

    /// The tenant's record of `id` while handed out (another tenant's id, a warm one
    /// or one being destroyed is not found): what execs and file operations use.
    fn record(&self, tenant: &str, id: &str) -> Result<SandboxRecord> {
        self.record_where(tenant, id, |s| s == State::InUse)
    }

    /// The mounts the server's own maker made for the tenant's sandbox (an E2B
    /// home's host directory, say): empty when it has none.
    pub fn made_mounts(&self, tenant: &str, id: &str) -> Result<Vec<stockade::spec::Mount>> {
        let g = self.lock();
        match g.entries.get(id) {
            Some(e) if e.state == State::InUse && e.record.tenant == tenant => Ok(e
                .made
                .as_ref()
                .map(|m| m.mounts().to_vec())
                .unwrap_or_default()),
            _ => Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            }),
        }
    }

    /// Like [`Daemon::record`], also while a destroy is under way (the sandbox still
    /// exists until the provider has destroyed it): what `inspect` and `list` show.
    fn record_shown(&self, tenant: &str, id: &str) -> Result<SandboxRecord> {
        self.record_where(tenant, id, shown)
    }

    fn record_where(
        &self,
        tenant: &str,
        id: &str,
        state_ok: impl Fn(State) -> bool,
    ) -> Result<SandboxRecord> {
        let g = self.lock();
        match g.entries.get(id) {
            Some(e) if state_ok(e.state) && e.record.tenant == tenant => Ok(e.record.clone()),
            _ => Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            }),
        }
    }

    /// Destroys a sandbox of the tenant. One being destroyed already is not found.
    ///
    /// Answers once the sandbox is claimed (no call can reach it any more: execs,
    /// file operations, `inspect` and `list` see it gone) and its destroy is durable
    /// (a daemon that dies now destroys it at its next start); the provider's
    /// teardown then runs in the background, off the caller's critical path. Its
    /// quota slot is held until the teardown is done.
    pub async fn destroy(self: &Arc<Self>, tenant: &str, id: &str) -> Result<()> {
        let claimed = self
            .lock()
            .claim(id, |e| e.state == State::InUse && e.record.tenant == tenant);
        let Some(rec) = claimed else {
            return Err(Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            });
        };
        let marked = SandboxRecord {
            destroying: true,
            ..rec.clone()
        };
        if let Err(e) = self.save(&marked) {
            self.lock().unclaim(id);
            return Err(e);
        }
        self.destroys_in_flight.fetch_add(1, Ordering::SeqCst);
        let d = self.clone();
        tokio::spawn(async move {
            let _turn = d.teardowns.acquire().await;
            if let Err(e) = d.destroy_claimed(&rec).await {
                // The provider refused: it is back in use and in `list`, where the
                // caller sees it and may destroy it again.
                tracing::error!(sandbox = %rec.id, error = %e, "cannot destroy sandbox");
                if let Err(e) = d.save(&rec) {
                    tracing::error!(sandbox = %rec.id, error = %e, "cannot save sandbox");
                }
            }
            d.destroys_in_flight.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(())
    }

    /// Waits (up to `until`) for the destroys answered but still tearing down.
    pub(super) async fn wait_destroys(&self, until: Instant) {
        while self.destroys_in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            tokio::time::sleep(SHUTDOWN_POLL).await;
        }
    }

    /// One sandbox of the tenant.
    pub async fn inspect(&self, tenant: &str, id: &str) -> Result<(SandboxInfo, bool)> {
        let rec = self.record_shown(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        Ok((self.info_of(&p, &rec).await?, rec.template.is_some()))
    }

    /// Replaces the egress policy of one sandbox of the tenant. With tenants, an
    /// allow entry may not open the daemon host's own or private ranges.
    pub async fn set_network(
        &self,
        tenant: &str,
        id: &str,
        network: &stockade::spec::Network,
    ) -> Result<()> {
        self.check_network(network)?;
        if let Some(profile) = self.profile(tenant) {
            profile.admit_network(network)?;
        }
        let rec = self.record_shown(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        let sb = stockade::Sandbox::attach(p, id).await?;
        sb.set_network(network).await?;
        // What inspect shows (the daemon's record of the spec) follows.
        let updated = {
            let mut g = self.lock();
            g.entries.get_mut(id).map(|e| {
                e.record.spec["network"] = serde_json::to_value(network).unwrap_or_default();
                e.record.clone()
            })
        };
        if let Some(r) = updated {
            self.save(&r)?;
        }
        Ok(())
    }

    /// What the egress policy of one sandbox of the tenant refused.
    pub async fn egress_denied(
        &self,
        tenant: &str,
        id: &str,
        since_ms: u64,
    ) -> Result<Vec<stockade::EgressDenial>> {
        let rec = self.record_shown(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        p.egress_denied(id, since_ms).await
    }

    /// CPU time and memory of one sandbox of the tenant, from its cgroups.
    pub async fn usage(&self, tenant: &str, id: &str) -> Result<stockade::Usage> {
        let rec = self.record_shown(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        p.usage(id).await
    }

    /// Whether a sandbox of the tenant is paused (the daemon's record says so).
    pub fn is_paused(&self, tenant: &str, id: &str) -> Result<bool> {
        Ok(self.record_shown(tenant, id)?.paused_at_ms.is_some())
    }

    /// The tenant's sandboxes.
    pub async fn list(&self, tenant: &str) -> Result<Vec<(SandboxInfo, bool)>> {
        let mine: Vec<SandboxRecord> = self
            .lock()
            .entries
            .values()
            .filter(|e| shown(e.state) && e.record.tenant == tenant)
            .map(|e| e.record.clone())
            .collect();
        let mut by_provider: std::collections::BTreeMap<String, Vec<SandboxRecord>> =
            Default::default();
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
        for n in self.provider_names() {
            let (_, p) = self.provider(&n)?;
            let r = p.gc().await?;
            report.reaped.extend(r.reaped);
            report.errors.extend(r.errors);
        }
        Ok(report)
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
}
