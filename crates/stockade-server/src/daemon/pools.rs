//! Warm pools of the daemon: warming, listing, draining, and the concurrent
//! background creations that refill them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stockade::{Error, Result, SandboxSpec};
use stockade_pool::{Pool, PoolConfig};

use super::entry::{Entry, PoolEntry, PoolKey, ReapReason, State};
use super::made::{Made, MountMaker};
use super::{
    Daemon, MAX_LIFETIME_SECS, PoolView, SHUTDOWN_POLL, SHUTDOWN_WAIT, WARM_LIFETIME_MARGIN_SECS,
    internal, now_ms, template_of_kind,
};
use crate::store::{PoolRecord, SandboxRecord};

impl Daemon {
    /// Creates or resizes the tenant's pool of the template `spec`.
    pub fn pool_warm(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        size: u32,
        max: u32,
    ) -> Result<PoolView> {
        self.pool_warm_inner(tenant, provider, spec, size, max, None)
    }

    /// Creates or resizes the tenant's pool of sandboxes of `spec` that get the host
    /// mounts `maker` makes (what [`Daemon::create_made`] with a maker of the same
    /// kind takes from). Such a pool is the caller's: it is not saved, so a restart
    /// neither refills it nor keeps its warm sandboxes. Unchanged sizes cost nothing
    /// but a lookup, so a front end may call this at every create.
    pub fn pool_warm_made(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        size: u32,
        max: u32,
        maker: Arc<dyn MountMaker>,
    ) -> Result<PoolView> {
        self.pool_warm_inner(tenant, provider, spec, size, max, Some(maker))
    }

    fn pool_warm_inner(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        size: u32,
        max: u32,
        maker: Option<Arc<dyn MountMaker>>,
    ) -> Result<PoolView> {
        let (pname, p) = self.provider(provider)?;
        self.check_spec(tenant, p.as_ref(), &spec)?;
        if size == 0 {
            return Err(Error::InvalidRequest(
                "pool size must be at least 1 (use `pool drain` to empty a pool)".into(),
            ));
        }
        let asked_max = max;
        let max = if max == 0 {
            size.saturating_mul(2)
        } else {
            max
        };
        if max < size {
            return Err(Error::InvalidRequest(format!(
                "pool max {max} is below its size {size}"
            )));
        }
        // A pool that could never be full (the global cap is smaller than its size).
        if size as usize > self.limits.sandboxes_total {
            return Err(Error::LimitExceeded {
                what: format!("a pool of {size} idle sandboxes"),
                limit: format!(
                    "{} sandboxes in all (the daemon's --max-sandboxes)",
                    self.limits.sandboxes_total
                ),
            });
        }
        let (template_id, tspec) =
            template_of_kind(&pname, &spec, maker.as_ref().map(|m| m.kind()));
        let key = PoolKey::new(tenant, &template_id);
        let record = PoolRecord {
            template_id: template_id.clone(),
            tenant: tenant.to_string(),
            provider: pname,
            spec: serde_json::to_value(&tspec).map_err(internal)?,
            min_idle: size,
            max,
        };
        let config = self.pool_config(size, max);
        {
            let mut g = self.lock();
            let others: usize = g
                .pools
                .iter()
                .filter(|(k, e)| e.record.tenant == tenant && **k != key)
                .map(|(_, e)| e.record.max as usize)
                .sum();
            if others + max as usize > self.limits.pool_per_tenant {
                // The max is what counts; say where it came from when not asked for.
                let of = if asked_max == 0 {
                    format!("up to {max} (twice its size {size}: give a smaller --max)")
                } else {
                    format!("up to {max}")
                };
                return Err(Error::LimitExceeded {
                    what: format!(
                        "a pool of {of} for tenant {tenant} ({others} pooled in other pools)"
                    ),
                    limit: format!(
                        "{} pooled sandboxes per tenant",
                        self.limits.pool_per_tenant
                    ),
                });
            }
            match g.pools.get_mut(&key) {
                // Already so: nothing to save or start.
                Some(e)
                    if maker.is_some()
                        && e.record == record
                        && e.pool.config() == config
                        && !e.pool.is_draining() =>
                {
                    return Ok(PoolView {
                        record,
                        stats: e.pool.stats(),
                        last_error: e.last_error.clone(),
                    });
                }
                Some(e) => {
                    e.pool.resize(config);
                    e.record = record.clone();
                    e.maker.clone_from(&maker);
                }
                None => {
                    g.pools.insert(
                        key.clone(),
                        PoolEntry {
                            record: record.clone(),
                            spec: tspec,
                            pool: Pool::new(config),
                            maker: maker.clone(),
                            last_error: None,
                        },
                    );
                }
            }
        }
        if maker.is_none() {
            self.store.put_pool(&record).map_err(internal)?;
        }
        self.refill(&key);
        let (stats, last_error) = self
            .lock()
            .pools
            .get(&key)
            .map(|e| (e.pool.stats(), e.last_error.clone()))
            .unwrap_or_default();
        Ok(PoolView {
            record,
            stats,
            last_error,
        })
    }

    /// The tenant's pools.
    pub fn pool_list(&self, tenant: &str) -> Vec<PoolView> {
        let g = self.lock();
        let mut v: Vec<PoolView> = g
            .pools
            .values()
            .filter(|e| e.record.tenant == tenant)
            .map(|e| PoolView {
                record: e.record.clone(),
                stats: e.pool.stats(),
                last_error: e.last_error.clone(),
            })
            .collect();
        v.sort_by(|a, b| a.record.template_id.cmp(&b.record.template_id));
        v
    }

    /// Drains and removes the tenant's pool (or all its pools); returns what was destroyed.
    pub async fn pool_drain(&self, tenant: &str, template_id: Option<&str>) -> Result<Vec<String>> {
        let mut victims = Vec::new();
        let mut found = false;
        {
            let mut g = self.lock();
            let keys: Vec<PoolKey> = g
                .pools
                .keys()
                .filter(|k| k.tenant == tenant && template_id.is_none_or(|t| k.template == t))
                .cloned()
                .collect();
            for k in keys {
                found = true;
                let Some(mut e) = g.pools.remove(&k) else {
                    continue;
                };
                if let Err(err) = self.store.remove_pool(tenant, &k.template) {
                    tracing::error!(error = %err, "cannot forget pool");
                }
                for id in e.pool.drain() {
                    // Out of the pool already; claiming makes it this drain's alone.
                    if let Some(r) = g.claim(&id, |_| true) {
                        victims.push((r.provider, id));
                    }
                }
            }
        }
        if let Some(t) = template_id
            && !found
        {
            return Err(Error::NotFound {
                kind: "pool",
                id: t.to_string(),
            });
        }
        let mut destroyed = Vec::new();
        for (pname, id) in victims {
            let (_, p) = self.provider(&pname)?;
            self.destroy_quietly(&p, &id, ReapReason::Drained).await;
            destroyed.push(id);
        }
        // Creations the drained pools had started end in a destroy (no pool wants
        // them): wait for those too, so that nothing of the pool outlives the answer
        // (and a stop right after it leaves nothing behind).
        self.wait_warm_creations(Instant::now() + SHUTDOWN_WAIT, |k| {
            k.tenant == tenant && template_id.is_none_or(|t| k.template == t)
        })
        .await;
        Ok(destroyed)
    }

    /// The sizing and pacing of a pool of `size` (at most `max`): refills wait
    /// [`stockade_pool::DEFAULT_QUIET_MS`] after an acquisition unless a quarter of the
    /// pool or less is left, and at most one creation per CPU runs at once, so a burst
    /// of hand-overs does not compete with as many creations.
    pub(super) fn pool_config(&self, size: u32, max: u32) -> PoolConfig {
        PoolConfig {
            idle_ttl_ms: self.limits.pool_idle_ttl.as_millis() as u64,
            max_creating: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            ..PoolConfig::new(size as usize, max as usize)
        }
    }

    /// Starts the creations the pool `key` wants now, each in its own task (at most
    /// the pool's `max_creating` at once: each one's end calls this again), or, while
    /// its refills wait for acquisitions to stop, a timer that calls this again.
    pub(super) fn refill(self: &Arc<Self>, key: &PoolKey) {
        let (n, wake, spec, tenant, pname, maker) = {
            let mut guard = self.lock();
            // Reborrowed, so that the pool and the counts are borrowed apart.
            let g = &mut *guard;
            let total = g.total();
            let Some(e) = g.pools.get_mut(key) else {
                return;
            };
            let room = self.limits.sandboxes_total.saturating_sub(total);
            // What `pool warm` shows while the cap holds the pool back (the reaper's
            // passes ask again, so the pool fills when room is made).
            let capped = || {
                format!(
                    "the daemon holds its most sandboxes ({} in all, --max-sandboxes): \
                     the pool fills as others are destroyed",
                    self.limits.sandboxes_total
                )
            };
            if room == 0 {
                if e.pool.stats().idle < e.record.min_idle as usize {
                    e.last_error = Some(capped());
                }
                return;
            }
            // Never ask for more than the global cap leaves.
            let now = now_ms();
            let n = e.pool.to_create(now);
            let extra = n.saturating_sub(room);
            for _ in 0..extra {
                e.pool.create_failed(now);
            }
            if extra > 0 {
                e.last_error = Some(capped());
            }
            let n = n - extra;
            if n > 0 {
                *g.warm_creating.entry(key.clone()).or_default() += n;
            }
            (
                n,
                e.pool.wake_at(now),
                e.spec.clone(),
                e.record.tenant.clone(),
                e.record.provider.clone(),
                e.maker.clone(),
            )
        };
        if let Some(at) = wake {
            let d = self.clone();
            let key = key.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
                if let Some(e) = d.lock().pools.get_mut(&key) {
                    e.pool.woken();
                }
                if !d.stopping.load(Ordering::SeqCst) {
                    d.refill(&key);
                }
            });
        }
        for _ in 0..n {
            let d = self.clone();
            let key = key.clone();
            let spec = spec.clone();
            let tenant = tenant.clone();
            let pname = pname.clone();
            let maker = maker.clone();
            // Counted in `warm_creating` above; the count ends when this is dropped,
            // with the task or with the task never run.
            let counted = WarmCreating {
                daemon: self.clone(),
                key: key.clone(),
            };
            tokio::spawn(async move {
                d.create_warm(key, tenant, pname, spec, maker, counted)
                    .await;
            });
        }
    }

    async fn create_warm(
        self: Arc<Self>,
        key: PoolKey,
        tenant: String,
        pname: String,
        spec: SandboxSpec,
        maker: Option<Arc<dyn MountMaker>>,
        _counted: WarmCreating,
    ) {
        let template = spec.clone();
        let mut spec = self.labelled(spec, &tenant);
        // The caller's lifetime starts at acquisition (the daemon enforces it); the
        // provider's own deadline covers the wait in the pool too, in case the daemon dies.
        spec.timeout_secs =
            (spec.timeout_secs + self.limits.pool_idle_ttl.as_secs() + WARM_LIFETIME_MARGIN_SECS)
                .min(MAX_LIFETIME_SECS);
        // Idle timeouts are enforced by the daemon from acquisition on.
        spec.idle_timeout_secs = None;
        let made = async {
            let (_, p) = self.provider(&pname)?;
            self.charge_image(&tenant, &pname, &template).await?;
            let made = match &maker {
                Some(m) => Some(Made::make(m)?),
                None => None,
            };
            let own = made
                .as_ref()
                .map(|m| m.mounts().to_vec())
                .unwrap_or_default();
            let t0 = Instant::now();
            let info = self.create_on(&p, spec, own).await?;
            self.metrics.create_seconds.observe(t0.elapsed());
            // Its first exec, after hand-over, is then as fast as a later one. Only a
            // speed-up: a sandbox that cannot is still a good one.
            if let Err(e) = p.warm(&info.id).await {
                tracing::debug!(sandbox = %info.id, error = %e, "cannot warm a pooled sandbox");
            }
            Ok::<_, Error>((p, info, made))
        }
        .await;
        let (p, info, made) = match made {
            Ok(x) => x,
            Err(e) => {
                self.metrics.creates_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(pool = %key, error = %e, "cannot create a warm sandbox");
                if let Some(en) = self.lock().pools.get_mut(&key) {
                    en.pool.create_failed(now_ms());
                    en.last_error = Some(e.to_string());
                }
                self.schedule_refill(key);
                return;
            }
        };
        self.metrics.creates_ok.fetch_add(1, Ordering::Relaxed);
        let rec = SandboxRecord {
            id: info.id.clone(),
            tenant: tenant.clone(),
            provider: pname,
            spec: serde_json::to_value(&template).unwrap_or_default(),
            template: Some(key.template.clone()),
            idle: true,
            env: BTreeMap::new(),
            workdir: None,
            created_at_ms: info.created_at_ms,
            expires_at_ms: info.expires_at_ms,
            idle_timeout_ms: None,
            owner_pid: None,
            destroying: false,
            paused_at_ms: None,
        };
        let mut entry = Entry::new(rec.clone(), State::Creating, now_ms());
        entry.made = made;
        self.lock().entries.insert(rec.id.clone(), entry);
        if self.save(&rec).is_err() {
            if let Some(en) = self.lock().pools.get_mut(&key) {
                en.pool.create_failed(now_ms());
            }
            self.destroy_quietly(&p, &rec.id, ReapReason::Unsaved).await;
            self.schedule_refill(key);
            return;
        }
        let refused = {
            let mut g = self.lock();
            let refused = match g.pools.get_mut(&key) {
                Some(en) => {
                    en.last_error = None;
                    en.pool.created(rec.id.clone(), now_ms())
                }
                None => Some(rec.id.clone()),
            };
            if refused.is_none()
                && let Some(e) = g.entries.get_mut(&rec.id)
            {
                e.state = State::Warm;
                // Creation ends with the agent answering: that is a passed check.
                e.healthy_at_ms = Some(now_ms());
                e.warm_info = Some(info.clone());
            }
            refused
        };
        match refused {
            Some(id) => self.destroy_quietly(&p, &id, ReapReason::NotWanted).await,
            // The next creation, if more are missing than may run at once.
            None => self.refill(&key),
        }
    }

    /// Waits (up to `until`) until no warm creation of a pool `pick` names is left
    /// (with the destroy of the ones no pool wants any more).
    pub(super) async fn wait_warm_creations(
        &self,
        until: Instant,
        pick: impl Fn(&PoolKey) -> bool,
    ) {
        loop {
            let left: usize = self
                .lock()
                .warm_creating
                .iter()
                .filter(|(k, _)| pick(k))
                .map(|(_, n)| *n)
                .sum();
            if left == 0 || Instant::now() > until {
                return;
            }
            tokio::time::sleep(SHUTDOWN_POLL).await;
        }
    }

    fn schedule_refill(self: &Arc<Self>, key: PoolKey) {
        let retry = self
            .lock()
            .pools
            .get(&key)
            .map(|e| e.pool.retry_at_ms())
            .unwrap_or(0);
        let d = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(retry.saturating_sub(now_ms()))).await;
            d.refill(&key);
        });
    }
}

/// One warm creation counted in [`super::entry::Inner::warm_creating`]; dropping it
/// ends the count, whichever way its task ends.
struct WarmCreating {
    daemon: Arc<Daemon>,
    key: PoolKey,
}

impl Drop for WarmCreating {
    fn drop(&mut self) {
        let mut g = self.daemon.lock();
        if let Some(n) = g.warm_creating.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                g.warm_creating.remove(&self.key);
            }
        }
    }
}
