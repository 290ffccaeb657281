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
    pub token: String,
    /// The traffic token: the code interpreter's `/contexts` calls carry only it.
    pub traffic: String,
    pub metadata: BTreeMap<String, String>,
    pub started_ms: u64,
    pub end_ms: Mutex<u64>,
    pub home: PathBuf,
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
}

/// The front end's state.
pub struct E2b {
    pub daemon: Arc<Daemon>,
    /// `--e2b-domain`: named in create answers (the SDKs then build
    /// `https://<port>-<id>.<domain>`), and routed by host.
    pub domain: Option<String>,
    auth: Auth,
    homes: PathBuf,
    sandboxes: Mutex<HashMap<String, Arc<Sbx>>>,
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
    /// No such sandbox (or another tenant's): the proxy's 502 "not found".
    Gone,
    /// A missing or wrong access token.
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
            auth,
            homes,
            sandboxes: Mutex::new(HashMap::new()),
        })
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

    /// The sandbox of an envd or interpreter call, checked against its token.
    pub fn reach(&self, id: &str, token: Option<&str>) -> Result<Arc<Sbx>, Reach> {
        let s = self.table().get(id).cloned().ok_or(Reach::Gone)?;
        match token {
            Some(t) if ct_eq(t.as_bytes(), s.token.as_bytes()) => Ok(s),
            _ => Err(Reach::Unauthorized),
        }
    }

    /// The sandbox of a code-interpreter call: its access token or its traffic token
    /// (the SDKs send only the latter to `/contexts`).
    pub fn reach_interp(
        &self,
        id: &str,
        token: Option<&str>,
        traffic: Option<&str>,
    ) -> Result<Arc<Sbx>, Reach> {
        let s = self.table().get(id).cloned().ok_or(Reach::Gone)?;
        let access = token.is_some_and(|t| ct_eq(t.as_bytes(), s.token.as_bytes()));
        let traffic = traffic.is_some_and(|t| ct_eq(t.as_bytes(), s.traffic.as_bytes()));
        if access || traffic {
            Ok(s)
        } else {
            Err(Reach::Unauthorized)
        }
    }

    /// The sandbox of a call that needs no token (`/health`, signed `/files`).
    pub fn reach_untokened(&self, id: &str) -> Result<Arc<Sbx>, Reach> {
        self.table().get(id).cloned().ok_or(Reach::Gone)
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
        internet: bool,
    ) -> stockade::Result<Arc<Sbx>> {
        let id = format!("i{}", stockade::host::random_hex(10));
        let home = self.homes.join(&id);
        let mut spec = SandboxSpec {
            timeout_secs: MAX_TIMEOUT_SECS,
            workdir: Some("/home/user".into()),
            ..SandboxSpec::default()
        };
        if internet {
            spec.network = Network::Egress;
        }
        if let Some(t) = custom {
            spec.image.clone_from(&t.image);
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
        spec.env.insert("E2B_SANDBOX_ID".into(), id.clone());
        spec.env.extend(env_vars);
        spec.labels.insert("e2b.sandbox-id".into(), id.clone());
        spec.labels.insert("e2b.template".into(), template.into());
        make_home(&home, spec.limits.tmp_bytes)?;
        let memory_mb = spec.limits.memory_bytes >> 20;
        let cpus = spec.limits.cpus.ceil() as u64;
        let own = vec![Mount {
            host: home.clone(),
            target: "/home/user".into(),
            writable: true,
        }];
        let created = self
            .daemon
            .create_with_mounts(tenant, "", spec, None, true, own)
            .await;
        let info = match created {
            Ok((info, _)) => info,
            Err(e) => {
                remove_home(&home);
                return Err(e);
            }
        };
        let now = stockade::now_ms();
        let s = Arc::new(Sbx {
            id: id.clone(),
            daemon_id: info.id,
            tenant: tenant.into(),
            template: template.into(),
            token: stockade::host::random_hex(16),
            traffic: stockade::host::random_hex(16),
            metadata,
            started_ms: now,
            end_ms: Mutex::new(now + timeout_secs * 1000),
            home,
            memory_mb,
            cpus,
            procs: Mutex::new(HashMap::new()),
            contexts: Mutex::new(BTreeMap::from([(
                "default".to_string(),
                Arc::new(Context::new("default".into(), "/home/user".into())),
            )])),
            watchers: Mutex::new(HashMap::new()),
            paused_at_ms: Mutex::new(None),
            cpu_sample: Mutex::new(None),
        });
        self.table().insert(id, s.clone());
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
        if let Err(e) = self.daemon.destroy(&s.tenant, &s.daemon_id).await {
            tracing::debug!(sandbox = %s.id, "destroy: {e}");
        }
        remove_home(&s.home);
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
            let expired: Vec<Arc<Sbx>> = {
                let mut t = self.table();
                let ids: Vec<String> = t
                    .values()
                    // A paused sandbox's timeout does not run (E2B's semantics).
                    .filter(|s| s.paused_at().is_none() && s.end_ms() <= now)
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
                remove_home(&s.home);
            }
        }
    }
}

/// A sandbox's home on the host: a tmpfs of `size` bytes (as the sandbox's `/tmp`),
/// so what the sandbox writes there is capped and never reaches the host's disk.
fn make_home(home: &std::path::Path, size: u64) -> stockade::Result<()> {
    use nix::mount::{MsFlags, mount};
    std::fs::create_dir_all(home)
        .map_err(|e| stockade::Error::io(format!("cannot create {}", home.display()), e))?;
    let opts = format!("size={size},mode=0700");
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if let Err(e) = mount(
        Some("tmpfs"),
        home,
        Some("tmpfs"),
        flags,
        Some(opts.as_str()),
    ) {
        let _ = std::fs::remove_dir(home);
        return Err(stockade::Error::Unavailable {
            what: "an E2B sandbox's home".into(),
            reason: format!(
                "cannot mount a size-capped tmpfs on {}: {e}",
                home.display()
            ),
            fix: "run stockade serve as root for --e2b-listen".into(),
        });
    }
    Ok(())
}

/// Unmounts and removes a home made by [`make_home`].
fn remove_home(home: &std::path::Path) {
    let _ = nix::mount::umount2(home, nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir_all(home);
}

impl E2b {
    /// Pauses the tenant's sandbox through the daemon (its cgroup freezer); its E2B
    /// timeout stops. `Ok(false)`: it was paused already.
    pub async fn pause(&self, s: &Sbx) -> stockade::Result<bool> {
        if s.paused_at().is_some() {
            return Ok(false);
        }
        self.daemon.pause(&s.tenant, &s.daemon_id).await?;
        *lock(&s.paused_at_ms) = Some(stockade::now_ms());
        Ok(true)
    }

    /// Resumes the tenant's paused sandbox; its timeout runs again for what was
    /// left of it at the pause, or `timeout_secs` when that is longer. `Ok(false)`:
    /// it was running.
    pub async fn resume(&self, s: &Sbx, timeout_secs: Option<u64>) -> stockade::Result<bool> {
        let Some(at) = s.paused_at() else {
            return Ok(false);
        };
        self.daemon.resume(&s.tenant, &s.daemon_id).await?;
        let now = stockade::now_ms();
        let left = s.end_ms().saturating_sub(at);
        let asked = timeout_secs.map_or(0, |t| t.min(MAX_TIMEOUT_SECS) * 1000);
        s.set_end_ms(now + left.max(asked));
        *lock(&s.paused_at_ms) = None;
        *lock(&s.cpu_sample) = None;
        Ok(true)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
