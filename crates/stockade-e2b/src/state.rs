//! What the E2B front end keeps per sandbox beside the daemon's record: the E2B id,
//! its envd access token, template, metadata, E2B timeout, its home directory on the
//! host, and its running processes and interpreter.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockade::SandboxSpec;
use stockade::spec::{Mount, Network};
use stockade_server::Daemon;
use stockade_server::auth::Auth;

use crate::home::{HomeMaker, remove_home};
use crate::interp::Context;
use crate::process::Proc;

/// The envd version reported to the SDKs (they gate features on it; WIRE.md 5.10).
pub const ENVD_VERSION: &str = "0.6.13";
/// E2B's default sandbox timeout.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// The longest E2B timeout accepted (and the daemon lifetime of every E2B sandbox,
/// which the front end's own clock cuts short).
pub const MAX_TIMEOUT_SECS: u64 = 24 * 3600;
/// The templates built in.
pub const TEMPLATES: [&str; 2] = ["base", "code-interpreter-v1"];

/// One E2B sandbox.
pub struct Sbx {
    pub id: String,
    /// The daemon's id of it.
    pub daemon_id: String,
    pub tenant: String,
    pub template: String,
    /// Who a command or file operation that names no user runs as: the sandbox user
    /// (`None`), or root of the sandbox (`Some(0)`: a built template whose last USER
    /// is root).
    pub default_uid: Option<u32>,
    pub token: String,
    /// The traffic token: the code interpreter's `/contexts` calls carry only it.
    pub traffic: String,
    pub metadata: BTreeMap<String, String>,
    pub started_ms: u64,
    pub end_ms: Mutex<u64>,
    pub memory_mb: u64,
    pub cpus: u64,
    pub procs: Mutex<HashMap<u32, Arc<Proc>>>,
    /// Code-interpreter contexts by id (`default` always there).
    pub contexts: Mutex<BTreeMap<String, Arc<Context>>>,
    /// Watchers of the unary watch API by id.
    pub watchers: crate::watch::Watchers,
    /// When it was paused (unix ms), while it is: its E2B timeout does not run.
    pub paused_at_ms: Mutex<Option<u64>>,
    /// The last CPU sample for metrics: (unix ms, CPU time used in µs).
    pub cpu_sample: Mutex<Option<(u64, u64)>>,
    /// Metrics taken every [`METRICS_EVERY`] while it runs, oldest first (the last
    /// [`METRICS_KEPT`]): what `get_metrics(start, end)` picks from.
    pub samples: Mutex<std::collections::VecDeque<serde_json::Value>>,
    /// What its timeout does, and whether traffic wakes it when paused.
    pub lifecycle: Lifecycle,
    /// The timeout it was created with, in seconds (what an automatic resume gives it).
    pub timeout_secs: u64,
    /// What it was made from, as a snapshot of it keeps.
    pub source: Source,
    /// Held while a snapshot is taken, a pause or a resume made: one at a time.
    pub freezing: tokio::sync::Mutex<()>,
}

/// What an E2B sandbox was made from: its template's configuration (image, limits,
/// environment, allowlist), working directory, and whether its root is writable.
#[derive(Clone, Debug, Default)]
pub struct Source {
    pub config: Option<stockade_image::TemplateConfig>,
    pub workdir: String,
    pub writable: bool,
}

pub use crate::lifecycle::Lifecycle;

/// How often a running sandbox's metrics are taken (E2B's interval).
pub const METRICS_EVERY: Duration = Duration::from_secs(5);

/// How many are kept per sandbox (an hour's).
pub const METRICS_KEPT: usize = 720;

/// Takes the metrics of `s` every [`METRICS_EVERY`] while it is there and runs
/// (not while paused), until it is gone.
async fn sample_metrics(daemon: Arc<Daemon>, s: std::sync::Weak<Sbx>) {
    loop {
        tokio::time::sleep(METRICS_EVERY).await;
        let Some(s) = s.upgrade() else { return };
        if s.paused_at().is_some() {
            continue;
        }
        match s.metric(&daemon).await {
            Ok(m) => {
                let mut kept = lock(&s.samples);
                if kept.len() == METRICS_KEPT {
                    kept.pop_front();
                }
                kept.push_back(m);
            }
            // Gone (killed, its lifetime over): the next upgrade fails.
            Err(_) => continue,
        }
    }
}

/// The front end's state.
pub struct E2b {
    pub daemon: Arc<Daemon>,
    /// `--e2b-domain`: named in create answers (the SDKs then build
    /// `https://<port>-<id>.<domain>`), and routed by host.
    pub domain: Option<String>,
    /// The host ids each home is given: the sandbox user's (uid 1000) as the daemon's
    /// default provider maps it ([`stockade::Provider::host_ids`]); `None`: root's (the
    /// native provider shows a mount's host owner as the sandbox user, whoever it is).
    pub home_owner: Option<(u32, u32)>,
    auth: Auth,
    homes: PathBuf,
    sandboxes: Mutex<HashMap<String, Arc<Sbx>>>,
    /// The daemon's pool (template id) of each tenant's pooled template, by (tenant,
    /// template name): a pool whose template changed or lost its `pool` is drained.
    pools: Mutex<HashMap<(String, String), Result<String, String>>>,
    /// File transfers (`/files` uploads and downloads) in flight at once: each holds
    /// up to `MAX_BODY_BYTES` (and its copies on the way to or from the agent), so
    /// more wait; each tenant has a few of them, so one that sends slowly holds up
    /// only its own.
    transfers: tokio::sync::Semaphore,
    tenant_transfers: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Each tenant's authenticated connections (capped per tenant).
    pub conns: crate::conn::TenantConns,
    /// Each tenant's process output queued for readers (see `process::Queued`).
    output: Mutex<HashMap<String, Arc<crate::process::Queued>>>,
    /// Template builds and the templates the tenants built.
    pub templates: crate::templates::Templates,
    /// Whether the listener speaks TLS (the scheme of the URLs this server hands out).
    pub tls: bool,
    /// Whether a template's image root is writable (an overlay discarded with the
    /// sandbox, as an E2B sandbox's root is): where the default provider has writable
    /// roots (not gVisor's).
    pub writable_images: bool,
}

impl E2b {
    /// The tenant's count of process output queued for readers.
    pub fn queued_output(&self, tenant: &str) -> Arc<crate::process::Queued> {
        lock(&self.output)
            .entry(tenant.to_string())
            .or_default()
            .clone()
    }
}

/// File transfers in flight at once, in all and per tenant (see `E2b::transfer`).
pub const TRANSFERS_AT_ONCE: usize = 8;
pub const TENANT_TRANSFERS_AT_ONCE: usize = 2;

impl E2b {
    /// A slot for one file transfer of `tenant`, waited for (`None` at shutdown).
    pub async fn transfer(
        &self,
        tenant: &str,
    ) -> Option<(
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::SemaphorePermit<'_>,
    )> {
        let mine = self
            .tenant_transfers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(TENANT_TRANSFERS_AT_ONCE)))
            .clone();
        let own = mine.acquire_owned().await.ok()?;
        let all = self.transfers.acquire().await.ok()?;
        Some((own, all))
    }
}

/// Compares two byte strings without stopping at the first difference.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a sandbox could not be reached through envd or the interpreter.
pub enum Reach {
    /// No such sandbox, or a token that is not its own: the proxy's 502 "not found",
    /// the same for both, so a token of one sandbox tells nothing of other ids.
    Gone,
    /// No token at all (whatever the id).
    Unauthorized,
}

impl E2b {
    pub fn new(daemon: Arc<Daemon>, auth: Auth, dir: PathBuf) -> anyhow::Result<E2b> {
        let homes = dir.join("homes");
        std::fs::create_dir_all(&homes)?;
        // Homes of sandboxes from an earlier run of the daemon are not reachable
        // through this front end any more (its table lives in memory): drop them.
        if let Ok(rd) = std::fs::read_dir(&homes) {
            for e in rd.flatten() {
                remove_home(&e.path());
            }
        }
        Ok(E2b {
            daemon,
            domain: None,
            home_owner: None,
            auth,
            homes,
            sandboxes: Mutex::new(HashMap::new()),
            transfers: tokio::sync::Semaphore::new(TRANSFERS_AT_ONCE),
            tenant_transfers: Mutex::new(HashMap::new()),
            pools: Mutex::new(HashMap::new()),
            conns: crate::conn::TenantConns::default(),
            output: Mutex::new(HashMap::new()),
            templates: crate::templates::Templates::open(dir.join("templates"))?,
            tls: false,
            writable_images: false,
        })
    }

    fn maker(
        &self,
        spec: &SandboxSpec,
        seed: Option<PathBuf>,
    ) -> Arc<dyn stockade_server::daemon::MountMaker> {
        // A writable root sees its image read-only too: a snapshot's layer is what
        // differs from it.
        let base = match (&spec.image, spec.writable) {
            (Some(image), true) => self
                .daemon
                .image_store()
                .ok()
                .map(|store| (store, image.clone())),
            _ => None,
        };
        Arc::new(HomeMaker {
            homes: self.homes.clone(),
            size: spec.limits.tmp_bytes,
            owner: self.home_owner,
            seed,
            extra: Vec::new(),
            base,
        })
    }

    /// Starts a template build's sandbox for the tenant (with a home, as its
    /// sandboxes will have, and the server's `extra` mounts); its daemon id.
    pub async fn build_sandbox(
        &self,
        tenant: &str,
        spec: SandboxSpec,
        extra: Vec<Mount>,
    ) -> stockade::Result<String> {
        let maker = Arc::new(HomeMaker {
            homes: self.homes.clone(),
            size: spec.limits.tmp_bytes,
            owner: self.home_owner,
            seed: None,
            extra,
            base: None,
        });
        let (info, _) = self
            .daemon
            .create_made(tenant, "", spec, None, maker)
            .await?;
        Ok(info.id)
    }

    /// Warms the pools the configuration file asks for (`pool = N` in a
    /// `[templates.NAME]` table), for every tenant of the token file: at start, so
    /// the first creates are warm too. Problems are logged; creates then start cold.
    pub fn warm_configured(&self) {
        let config = match stockade_image::Config::load() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("E2B pools: the configuration file is not valid: {e}");
                return;
            }
        };
        for tenant in self.auth.tenants() {
            for (name, t) in &config.templates {
                if t.pool.unwrap_or(0) > 0 {
                    self.ensure_pool(&tenant, name, Some(t));
                }
            }
        }
    }

    /// Makes the tenant's pool of a template what its table says (`pool = N`):
    /// warmed, resized, replaced when the template changed, drained when `pool` went.
    /// Cheap when nothing changed (the daemon compares and returns).
    pub fn ensure_pool(
        &self,
        tenant: &str,
        template: &str,
        custom: Option<&stockade_image::TemplateConfig>,
    ) {
        let size = custom.and_then(|t| t.pool).unwrap_or(0);
        let key = (tenant.to_string(), template.to_string());
        let want: Option<Result<String, String>> = if size == 0 {
            None
        } else {
            let spec = template_spec(template, custom, Network::None, self.writable_images);
            let maker = self.maker(&spec, None);
            Some(
                self.daemon
                    .pool_warm_made(tenant, "", spec, size, size, maker)
                    .map(|v| v.record.template_id)
                    .map_err(|e| e.to_string()),
            )
        };
        let old = {
            let mut pools = lock(&self.pools);
            let old = match &want {
                Some(w) => pools.insert(key, w.clone()),
                None => pools.remove(&key),
            };
            if let Some(Err(e)) = &want
                && old.as_ref().and_then(|o| o.as_ref().err()) != Some(e)
            {
                tracing::warn!(
                    template,
                    tenant,
                    "the E2B pool of {size} was refused (creates start cold): {e}"
                );
            }
            let live = want.as_ref().and_then(|w| w.as_ref().ok());
            old.and_then(Result::ok).filter(|o| Some(o) != live)
        };
        if let Some(old) = old {
            let d = self.daemon.clone();
            let tenant = tenant.to_string();
            tokio::spawn(async move {
                if let Err(e) = d.pool_drain(&tenant, Some(&old)).await {
                    tracing::debug!("drain of the E2B pool {old}: {e}");
                }
            });
        }
    }

    /// Whether `s` was killed (by the API, its timeout, or under the daemon): a call
    /// that failed on it is cut off as the connection to a dead sandbox would be.
    pub async fn is_gone(&self, s: &Sbx) -> bool {
        let listed = self
            .table()
            .get(&s.id)
            .is_some_and(|t| std::ptr::eq(t.as_ref(), s));
        !listed
            || self
                .daemon
                .inspect(&s.tenant, &s.daemon_id)
                .await
                .is_err_and(|e| e.code() == stockade::ErrorCode::NotFound)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Sbx>>> {
        self.sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The tenant of an `X-API-KEY`.
    pub fn tenant(&self, key: Option<&str>) -> Option<String> {
        self.auth.tenant_of_token(key?.as_bytes())
    }

    /// The tenant's sandbox `id`.
    pub fn get(&self, tenant: &str, id: &str) -> Option<Arc<Sbx>> {
        self.table().get(id).filter(|s| s.tenant == tenant).cloned()
    }

    /// The sandbox of an envd or interpreter call, checked against its token. No
    /// token is `Unauthorized` before the id is looked at; a token that is not the
    /// sandbox's is `Gone`, as a missing sandbox is.
    pub fn reach(&self, id: &str, token: Option<&str>) -> Result<Arc<Sbx>, Reach> {
        let token = token.ok_or(Reach::Unauthorized)?;
        let s = self.table().get(id).cloned();
        match s {
            Some(s) if ct_eq(token.as_bytes(), s.token.as_bytes()) => Ok(s),
            _ => Err(Reach::Gone),
        }
    }

    /// The sandbox of a call that may show its access token or its traffic token
    /// (the code interpreter, whose `/contexts` calls carry only the latter, and the
    /// sandbox's own ports), as [`E2b::reach`] otherwise.
    pub fn reach_either(
        &self,
        id: &str,
        token: Option<&str>,
        traffic: Option<&str>,
    ) -> Result<Arc<Sbx>, Reach> {
        if token.is_none() && traffic.is_none() {
            return Err(Reach::Unauthorized);
        }
        let s = self.table().get(id).cloned().ok_or(Reach::Gone)?;
        let access = token.is_some_and(|t| ct_eq(t.as_bytes(), s.token.as_bytes()));
        let traffic = traffic.is_some_and(|t| ct_eq(t.as_bytes(), s.traffic.as_bytes()));
        if access || traffic {
            Ok(s)
        } else {
            Err(Reach::Gone)
        }
    }

    /// The sandbox of a `/files` call that carries a signature instead of a token;
    /// the caller checks the signature, and answers a bad one as `Gone` too.
    pub fn reach_signed(&self, id: &str) -> Result<Arc<Sbx>, Reach> {
        self.table().get(id).cloned().ok_or(Reach::Gone)
    }

    /// The sandbox whose access token signed a `/files` URL that names none (the
    /// SDKs' `download_url`/`upload_url` on one origin, `E2B_SANDBOX_URL`: the URL
    /// carries the path, the user and the signature, not the sandbox). Only the
    /// holder of a sandbox's token can sign for it, so the one whose token checks out
    /// is the one meant.
    pub fn find_signed(&self, op: &str, query: &str, now_s: u64) -> Option<Arc<Sbx>> {
        let all: Vec<Arc<Sbx>> = self.table().values().cloned().collect();
        all.into_iter()
            .find(|s| crate::files::signature_ok(&s.token, op, query, now_s))
    }

    /// The tenant's sandboxes.
    pub fn list(&self, tenant: &str) -> Vec<Arc<Sbx>> {
        let mut v: Vec<_> = self
            .table()
            .values()
            .filter(|s| s.tenant == tenant)
            .cloned()
            .collect();
        v.sort_by_key(|s| s.started_ms);
        v
    }

    /// Creates a sandbox of a template for the tenant: a built-in one, or `custom`
    /// (a `[templates.NAME]` table of the configuration file) over the defaults.
    #[allow(clippy::too_many_arguments)]
    pub async fn create(
        &self,
        tenant: &str,
        template: &str,
        custom: Option<&stockade_image::TemplateConfig>,
        timeout_secs: u64,
        metadata: BTreeMap<String, String>,
        env_vars: BTreeMap<String, String>,
        network: Network,
        lifecycle: Lifecycle,
        built: Option<&crate::templates::Built>,
    ) -> stockade::Result<Arc<Sbx>> {
        let id = format!("i{}", stockade::host::random_hex(10));
        if built.is_none() {
            self.ensure_pool(tenant, template, custom);
        }
        let mut spec = template_spec(template, custom, network, self.writable_images);
        // Bound per create (a warm sandbox gets them at hand-over, as late-bound env).
        spec.env.insert("E2B_SANDBOX_ID".into(), id.clone());
        spec.env.extend(env_vars);
        let memory_mb = spec.limits.memory_bytes >> 20;
        let cpus = spec.limits.cpus.ceil() as u64;
        // A snapshot's home, or a built template's: its image's /home/user.
        let seed = match built {
            Some(b) if b.home.is_some() => {
                spec.workdir = Some(b.workdir.clone().into());
                b.home.clone()
            }
            Some(b) => {
                spec.workdir = Some(b.workdir.clone().into());
                let store = self.daemon.image_store()?;
                let image = b.image.clone();
                let root = tokio::task::spawn_blocking(move || {
                    let i = store.image(&image)?;
                    store.rootfs(&i)
                })
                .await
                .map_err(|e| stockade::Error::Internal(e.to_string()))??;
                Some(root.join("home/user")).filter(|h| h.is_dir())
            }
            None => None,
        };
        let source = Source {
            config: custom.cloned(),
            workdir: spec.effective_workdir().display().to_string(),
            writable: spec.writable,
        };
        let maker = self.maker(&spec, seed);
        let (info, _warm) = self
            .daemon
            .create_made(tenant, "", spec, None, maker)
            .await?;
        if let Some(b) = built
            && let Err(m) = crate::templates::started(self, tenant, &info.id, b).await
        {
            let _ = self.daemon.destroy(tenant, &info.id).await;
            return Err(stockade::Error::InvalidRequest(format!(
                "template {template:?}: its start command did not get ready: {m}"
            )));
        }
        let now = stockade::now_ms();
        let s = Arc::new(Sbx {
            id: id.clone(),
            daemon_id: info.id,
            tenant: tenant.into(),
            template: template.into(),
            default_uid: built.and_then(|b| (b.user == "root").then_some(0)),
            token: stockade::host::random_hex(16),
            traffic: stockade::host::random_hex(16),
            metadata,
            started_ms: now,
            end_ms: Mutex::new(now + timeout_secs * 1000),
            memory_mb,
            cpus,
            procs: Mutex::new(HashMap::new()),
            // Python's and JavaScript's default contexts, as E2B's code interpreter
            // has them (each interpreter starts at its first cell).
            contexts: Mutex::new(BTreeMap::from([
                (
                    "default".to_string(),
                    Arc::new(Context::new("default".into(), "/home/user".into())),
                ),
                (
                    "default-javascript".to_string(),
                    Arc::new(Context::of(
                        "default-javascript".into(),
                        "/home/user".into(),
                        crate::interp::Lang::JavaScript,
                    )),
                ),
            ])),
            watchers: Mutex::new(HashMap::new()),
            paused_at_ms: Mutex::new(None),
            cpu_sample: Mutex::new(None),
            samples: Mutex::new(std::collections::VecDeque::new()),
            lifecycle,
            timeout_secs,
            source,
            freezing: tokio::sync::Mutex::new(()),
        });
        self.table().insert(id, s.clone());
        tokio::spawn(sample_metrics(self.daemon.clone(), Arc::downgrade(&s)));
        Ok(s)
    }

    /// Destroys the tenant's sandbox; false when it has none of that id.
    pub async fn kill(&self, tenant: &str, id: &str) -> bool {
        let s = {
            let mut t = self.table();
            match t.get(id) {
                Some(s) if s.tenant == tenant => t.remove(id),
                _ => None,
            }
        };
        let Some(s) = s else { return false };
        self.teardown(&s).await;
        true
    }

    /// Destroys every sandbox of the front end (at shutdown).
    pub async fn kill_all(&self) {
        let all: Vec<Arc<Sbx>> = self.table().drain().map(|(_, s)| s).collect();
        for s in all {
            self.teardown(&s).await;
        }
    }

    async fn teardown(&self, s: &Sbx) {
        s.watchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        // The daemon releases its home once it is gone.
        if let Err(e) = self.daemon.destroy(&s.tenant, &s.daemon_id).await {
            tracing::debug!(sandbox = %s.id, "destroy: {e}");
        }
    }

    /// Kills sandboxes whose E2B timeout passed, and forgets those the daemon lost
    /// (its lifetime or a crash); runs for the daemon's life.
    pub async fn expirer(self: Arc<Self>) {
        let mut round: u64 = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            round += 1;
            if round.is_multiple_of(10) {
                self.forget_lost().await;
            }
            let now = stockade::now_ms();
            // A paused sandbox's timeout does not run (E2B's semantics).
            let due = |s: &Sbx| s.paused_at().is_none() && s.end_ms() <= now;
            let to_pause: Vec<Arc<Sbx>> = self
                .table()
                .values()
                .filter(|s| s.lifecycle.pause_on_timeout && due(s))
                .cloned()
                .collect();
            for s in to_pause {
                match self.pause(&s).await {
                    Ok(_) => tracing::info!(sandbox = %s.id, "E2B timeout passed: paused"),
                    Err(e) => {
                        tracing::warn!(sandbox = %s.id, "E2B timeout passed, pause failed: {e}");
                    }
                }
            }
            let expired: Vec<Arc<Sbx>> = {
                let mut t = self.table();
                let ids: Vec<String> = t
                    .values()
                    .filter(|s| !s.lifecycle.pause_on_timeout && due(s))
                    .map(|s| s.id.clone())
                    .collect();
                ids.iter().filter_map(|i| t.remove(i)).collect()
            };
            for s in expired {
                tracing::info!(sandbox = %s.id, "E2B timeout passed: killed");
                self.teardown(&s).await;
            }
        }
    }
}

impl E2b {
    /// Drops the sandboxes the daemon no longer has (reaped for its own reasons).
    async fn forget_lost(&self) {
        let all: Vec<Arc<Sbx>> = self.table().values().cloned().collect();
        for s in all {
            if let Err(e) = self.daemon.inspect(&s.tenant, &s.daemon_id).await
                && e.code() == stockade::ErrorCode::NotFound
            {
                tracing::info!(sandbox = %s.id, "the daemon no longer has it: forgotten");
                self.table().remove(&s.id);
            }
        }
    }
}

/// The spec of a template's sandboxes: a built-in one, or `custom` (a
/// `[templates.NAME]` table of the configuration file) over the defaults; without
/// what each create binds (the sandbox's id, the caller's env vars), so sandboxes of
/// one template share a pool.
fn template_spec(
    template: &str,
    custom: Option<&stockade_image::TemplateConfig>,
    network: Network,
    writable_images: bool,
) -> SandboxSpec {
    let mut spec = SandboxSpec {
        timeout_secs: MAX_TIMEOUT_SECS,
        workdir: Some("/home/user".into()),
        network,
        ..SandboxSpec::default()
    };
    if let Some(t) = custom {
        spec.image.clone_from(&t.image);
        spec.writable = t.image.is_some() && writable_images;
        if let Some(m) = t.memory {
            spec.limits.memory_bytes = m;
        }
        if let Some(c) = t.cpus {
            spec.limits.cpus = c;
        }
        if let Some(p) = t.pids {
            spec.limits.pids = p;
        }
        spec.env.extend(t.env.clone());
        // The operator's allowlist holds whatever the caller asks.
        if !t.allow.is_empty() {
            spec.network = Network::Policy(stockade::spec::EgressPolicy {
                allow: t.allow.clone(),
                ..Default::default()
            });
        }
    }
    spec.env.insert("HOME".into(), "/home/user".into());
    spec.env.insert("USER".into(), "user".into());
    spec.env.insert("LOGNAME".into(), "user".into());
    spec.env.insert("E2B_SANDBOX".into(), "true".into());
    spec.labels.insert("e2b.template".into(), template.into());
    spec
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Sbx {
    /// When it was paused, while it is.
    pub fn paused_at(&self) -> Option<u64> {
        *lock(&self.paused_at_ms)
    }

    /// The E2B end of a paused sandbox moves with the clock (its timeout does not
    /// run): what `endAt` shows.
    pub fn shown_end_ms(&self) -> u64 {
        match self.paused_at() {
            Some(at) => self.end_ms() + stockade::now_ms().saturating_sub(at),
            None => self.end_ms(),
        }
    }

    /// One metrics sample: CPU use since the last sample (or over the next 100 ms
    /// when there is none recent), memory now.
    pub async fn metric(&self, daemon: &Daemon) -> stockade::Result<serde_json::Value> {
        let usage = daemon.usage(&self.tenant, &self.daemon_id).await?;
        let mut now = stockade::now_ms();
        let prev = *lock(&self.cpu_sample);
        let (prev, usage) = match prev {
            Some((t, u)) if now.saturating_sub(t) >= 100 && now - t < 60_000 => ((t, u), usage),
            _ => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let first = (now, usage.cpu_usage_us);
                let u = daemon.usage(&self.tenant, &self.daemon_id).await?;
                now = stockade::now_ms();
                (first, u)
            }
        };
        *lock(&self.cpu_sample) = Some((now, usage.cpu_usage_us));
        let wall_us = now.saturating_sub(prev.0).max(1) * 1000 * self.cpus.max(1);
        let used = usage.cpu_usage_us.saturating_sub(prev.1);
        let pct = (used as f64 / wall_us as f64 * 100.0).clamp(0.0, 100.0);
        let total = if usage.memory_limit_bytes > 0 {
            usage.memory_limit_bytes
        } else {
            self.memory_mb << 20
        };
        Ok(serde_json::json!({
            "timestamp": chrono::DateTime::from_timestamp_millis(now as i64)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "timestampUnix": now / 1000,
            "cpuCount": self.cpus,
            "cpuUsedPct": (pct * 100.0).round() / 100.0,
            "memUsed": usage.memory_bytes,
            "memTotal": total,
            "memCache": usage.memory_cache_bytes,
            "diskUsed": 0,
            "diskTotal": 0,
        }))
    }

    pub fn end_ms(&self) -> u64 {
        *self
            .end_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn set_end_ms(&self, ms: u64) {
        *self
            .end_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ms;
    }
}
