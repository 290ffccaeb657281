//! The daemon's lifecycle: the reaper (lifetimes, idle timeouts, dead owners,
//! vanished sandboxes, stale warm ones), recovery after a crash, and shutdown.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stockade::{Result, SandboxSpec};
use stockade_pool::{Pool, PoolConfig};

use super::{DAEMON_LABEL, Daemon, PoolEntry, internal, now_ms};
use crate::store::SandboxRecord;

impl Daemon {
    /// One pass of the reaper: lifetimes, idle timeouts, dead owners, and (when
    /// `check_gone`) sandboxes that vanished on their own; expired warm sandboxes.
    pub async fn reap_once(self: &Arc<Self>, check_gone: bool) -> stockade::GcReport {
        let now = now_ms();
        let mut victims: Vec<(SandboxRecord, &'static str)> = Vec::new();
        let mut pool_keys = Vec::new();
        {
            let mut g = self.lock();
            for r in g.sandboxes.values().filter(|r| !r.idle) {
                let last = g.last_used.get(&r.id).copied().unwrap_or(now);
                let why = if now >= r.expires_at_ms {
                    Some("lifetime")
                } else if r
                    .idle_timeout_ms
                    .is_some_and(|t| now.saturating_sub(last) >= t)
                    && !g.busy.contains_key(&r.id)
                {
                    Some("idle")
                } else if r
                    .owner_pid
                    .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
                {
                    Some("owner")
                } else {
                    None
                };
                if let Some(why) = why {
                    victims.push((r.clone(), why));
                }
            }
            let keys: Vec<String> = g.pools.keys().cloned().collect();
            for k in keys {
                if let Some(e) = g.pools.get_mut(&k) {
                    let expired = e.pool.expired(now);
                    for id in expired {
                        if let Some(r) = g.sandboxes.get(&id) {
                            victims.push((r.clone(), "pool-ttl"));
                        }
                    }
                }
                pool_keys.push(k);
            }
            for (r, _) in &victims {
                if r.idle {
                    g.sandboxes.remove(&r.id);
                }
            }
            let super::Inner {
                warm_info,
                healthy_at,
                sandboxes,
                ..
            } = &mut *g;
            warm_info.retain(|id, _| sandboxes.get(id).is_some_and(|r| r.idle));
            healthy_at.retain(|id, _| sandboxes.get(id).is_some_and(|r| r.idle));
        }
        if check_gone {
            let mut by_provider: BTreeMap<String, Vec<SandboxRecord>> = BTreeMap::new();
            for r in self.lock().sandboxes.values() {
                by_provider
                    .entry(r.provider.clone())
                    .or_default()
                    .push(r.clone());
            }
            for (name, recs) in by_provider {
                let Ok((_, p)) = self.provider(&name) else {
                    continue;
                };
                let Ok(live) = p.list().await else {
                    continue;
                };
                let live: HashSet<String> = live.into_iter().map(|i| i.id).collect();
                for r in recs {
                    if !live.contains(&r.id) && !victims.iter().any(|(v, _)| v.id == r.id) {
                        victims.push((r, "gone"));
                    }
                }
            }
        }
        let mut report = stockade::GcReport::default();
        for (r, why) in victims {
            let Ok((_, p)) = self.provider(&r.provider) else {
                continue;
            };
            if let Err(e) = p.destroy(&r.id).await {
                report
                    .errors
                    .push(format!("cannot destroy sandbox {}: {e}", r.id));
                continue;
            }
            if r.idle {
                self.forget(&r.id);
                let mut g = self.lock();
                if why == "gone"
                    && let Some(t) = &r.template
                    && let Some(e) = g.pools.get_mut(&format!("{}/{t}", r.tenant))
                {
                    // A warm sandbox that died while waiting: take it out of its pool.
                    e.pool.remove_idle(&r.id);
                }
                g.sandboxes.remove(&r.id);
            } else {
                self.drop_record(&r);
            }
            self.metrics.reaped(why);
            tracing::info!(sandbox = %r.id, reason = why, "reaped");
            report.reaped.push(r.id);
        }
        if !self.stopping.load(Ordering::SeqCst) {
            for k in pool_keys {
                self.refill(&k);
            }
        }
        report
    }

    /// Unmounts the staged mounts of sandboxes that are gone (destroyed, reaped,
    /// ended on their own, or never created because the daemon died mid-way).
    pub async fn sweep_staging(self: &Arc<Self>) {
        let candidates = self.limits.mounts.staged();
        if candidates.is_empty() {
            return;
        }
        let in_flight = self
            .staging_in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let names: Vec<String> = self
            .providers
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let mut live = HashSet::new();
        for n in names {
            let Ok((_, p)) = self.provider(&n) else {
                continue;
            };
            // Without a full listing nothing can be known gone.
            let Ok(infos) = p.list().await else {
                return;
            };
            live.extend(infos.iter().filter_map(|i| {
                i.spec
                    .get("labels")?
                    .get(super::STAGED_LABEL)?
                    .as_str()
                    .map(str::to_string)
            }));
        }
        self.limits.mounts.sweep(&candidates, &in_flight, &live);
    }

    /// Runs the reaper until the daemon stops.
    pub async fn reaper(self: Arc<Self>) {
        let mut tick = 0u64;
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            tick += 1;
            // Vanished sandboxes are looked for every 5 s (it lists every sandbox).
            let _ = self.reap_once(tick.is_multiple_of(20)).await;
            if tick.is_multiple_of(20) {
                self.sweep_staging().await;
            }
        }
    }

    /// Health-checks warm sandboxes until the daemon stops; apart from the reaper, so
    /// a sandbox that takes the whole timeout to fail never delays a reap.
    pub async fn health_checker(self: Arc<Self>) {
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.health_sweep().await;
        }
    }

    /// Health-checks the warm sandboxes not checked for `HEALTH_EVERY_MS`, so that
    /// hand-over need not wait for a check; one that fails leaves its pool and is
    /// destroyed, and the pool refills. Returns the ids that failed.
    pub async fn health_sweep(self: &Arc<Self>) -> Vec<String> {
        let now = now_ms();
        let due: Vec<(String, String, String)> = {
            let g = self.lock();
            g.sandboxes
                .values()
                .filter(|r| r.idle)
                .filter(|r| {
                    g.healthy_at
                        .get(&r.id)
                        .is_none_or(|&t| now.saturating_sub(t) >= super::HEALTH_EVERY_MS)
                })
                .filter_map(|r| {
                    let key = format!("{}/{}", r.tenant, r.template.as_ref()?);
                    Some((r.id.clone(), r.provider.clone(), key))
                })
                .collect()
        };
        let mut checks = tokio::task::JoinSet::new();
        for (id, pname, key) in due {
            let Ok((_, p)) = self.provider(&pname) else {
                continue;
            };
            checks.spawn(async move {
                let ok = matches!(
                    tokio::time::timeout(Duration::from_secs(2), p.health(&id)).await,
                    Ok(Ok(()))
                );
                (id, p, key, ok)
            });
        }
        let mut failed = Vec::new();
        while let Some(Ok((id, p, key, ok))) = checks.join_next().await {
            let taken_out = {
                let mut g = self.lock();
                if !g.sandboxes.get(&id).is_some_and(|r| r.idle) {
                    // Handed over (or reaped) while it was being checked.
                    continue;
                }
                if ok {
                    g.healthy_at.insert(id.clone(), now_ms());
                    false
                } else {
                    // Out of its pool before anyone can take it.
                    let taken = g
                        .pools
                        .get_mut(&key)
                        .is_some_and(|e| e.pool.remove_idle(&id));
                    if taken {
                        g.sandboxes.remove(&id);
                        g.healthy_at.remove(&id);
                        g.warm_info.remove(&id);
                    }
                    taken
                }
            };
            if taken_out {
                tracing::warn!(sandbox = %id, "warm sandbox failed its health check; replacing it");
                self.destroy_quietly(&p, &id, "unhealthy").await;
                self.metrics.reaped("unhealthy");
                if !self.stopping.load(Ordering::SeqCst) {
                    self.refill(&key);
                }
                failed.push(id);
            }
        }
        failed
    }

    /// After a start: adopts the saved sandboxes that are alive and healthy, reaps
    /// the rest and anything labelled by this daemon that it has no record of.
    pub async fn recover(self: &Arc<Self>) -> Result<stockade::GcReport> {
        let (records, pools) = self.store.load().map_err(internal)?;
        let mut report = stockade::GcReport::default();
        {
            let mut g = self.lock();
            for r in pools {
                let spec: SandboxSpec = match serde_json::from_value(r.spec.clone()) {
                    Ok(s) => s,
                    Err(e) => {
                        report.errors.push(format!(
                            "pool {} has an unreadable template ({e}); dropped",
                            r.template_id
                        ));
                        let _ = self.store.remove_pool(&r.tenant, &r.template_id);
                        continue;
                    }
                };
                let config = PoolConfig {
                    idle_ttl_ms: self.limits.pool_idle_ttl.as_millis() as u64,
                    ..PoolConfig::new(r.min_idle as usize, r.max as usize)
                };
                g.pools.insert(
                    format!("{}/{}", r.tenant, r.template_id),
                    PoolEntry {
                        record: r,
                        spec,
                        pool: Pool::new(config),
                    },
                );
            }
        }
        let mut names: HashSet<String> = records.iter().map(|r| r.provider.clone()).collect();
        names.insert(self.default_provider.clone());
        let mut known: HashMap<String, SandboxRecord> =
            records.into_iter().map(|r| (r.id.clone(), r)).collect();
        for name in names {
            let p = match self.provider(&name) {
                Ok((_, p)) => p,
                Err(e) => {
                    report
                        .errors
                        .push(format!("provider {name} is unusable: {e}"));
                    continue;
                }
            };
            let live = p.list().await.unwrap_or_default();
            for info in live {
                let ours = info
                    .spec
                    .get("labels")
                    .and_then(|l| l.get(DAEMON_LABEL))
                    .and_then(|v| v.as_str())
                    == Some(self.daemon_id.as_str());
                match known.remove(&info.id) {
                    Some(rec) if rec.provider == name => {
                        let healthy = matches!(
                            tokio::time::timeout(Duration::from_secs(5), p.health(&rec.id)).await,
                            Ok(Ok(()))
                        );
                        if healthy && self.adopt(rec.clone()) {
                            tracing::info!(sandbox = %rec.id, "adopted");
                        } else {
                            self.destroy_quietly(&p, &rec.id, "recovery").await;
                            self.metrics.reaped("recovery");
                            report.reaped.push(rec.id);
                        }
                    }
                    Some(rec) => {
                        known.insert(rec.id.clone(), rec);
                    }
                    None if ours => {
                        // Created, but the daemon died before saving it.
                        self.destroy_quietly(&p, &info.id, "orphan").await;
                        self.metrics.reaped("orphan");
                        report.reaped.push(info.id);
                    }
                    None => {}
                }
            }
            if let Ok(r) = p.gc().await {
                report.reaped.extend(r.reaped);
                report.errors.extend(r.errors);
            }
        }
        // Records of sandboxes that are gone.
        for (id, _) in known {
            self.forget(&id);
            self.metrics.reaped("gone");
        }
        self.sweep_staging().await;
        let keys: Vec<String> = self.lock().pools.keys().cloned().collect();
        for k in keys {
            self.refill(&k);
        }
        Ok(report)
    }

    fn adopt(&self, rec: SandboxRecord) -> bool {
        let mut g = self.lock();
        let key = rec.template.as_ref().map(|t| format!("{}/{t}", rec.tenant));
        match (&key, rec.idle) {
            (Some(k), true) => match g.pools.get_mut(k) {
                Some(e) => e.pool.adopt_idle(rec.id.clone(), rec.created_at_ms),
                // Its pool was drained: not wanted.
                None => return false,
            },
            (Some(k), false) => {
                if let Some(e) = g.pools.get_mut(k) {
                    e.pool.adopt_in_use();
                }
            }
            (None, true) => return false,
            (None, false) => {}
        }
        g.last_used.insert(rec.id.clone(), now_ms());
        g.sandboxes.insert(rec.id.clone(), rec);
        true
    }

    /// Stops refills and new creations, drains every pool and waits (up to 30 s) for
    /// creations in progress. Handed-out sandboxes are kept: a restart adopts them.
    pub async fn shutdown(self: &Arc<Self>) {
        self.stopping.store(true, Ordering::SeqCst);
        let tenants: HashSet<String> = self
            .lock()
            .pools
            .values()
            .map(|e| e.record.tenant.clone())
            .collect();
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let creating: usize = self
                .lock()
                .pools
                .values()
                .map(|e| e.pool.stats().creating)
                .sum();
            if creating == 0 || Instant::now() > until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Drain without forgetting the pools: a restart fills them again.
        let mut victims = Vec::new();
        {
            let mut g = self.lock();
            for e in g.pools.values_mut() {
                for id in e.pool.drain() {
                    victims.push((e.record.provider.clone(), id));
                }
            }
            for (_, id) in &victims {
                g.sandboxes.remove(id);
            }
        }
        for (pname, id) in victims {
            if let Ok((_, p)) = self.provider(&pname) {
                self.destroy_quietly(&p, &id, "shutdown").await;
            }
        }
        tracing::info!(tenants = tenants.len(), "pools drained");
    }
}
