//! Recovery after a crash (adopting what answers, reaping the rest) and shutdown
//! (draining the pools, keeping handed-out sandboxes for the next start).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use stockade::{Result, SandboxSpec};
use stockade_pool::Pool;

use super::entry::{Entry, PoolEntry, PoolKey, ReapReason, State};
use super::{DAEMON_LABEL, Daemon, RECOVERY_HEALTH_TIMEOUT, SHUTDOWN_WAIT, internal, now_ms};
use crate::store::SandboxRecord;

impl Daemon {
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
                let config = self.pool_config(r.min_idle, r.max);
                g.pools.insert(
                    PoolKey::new(&r.tenant, &r.template_id),
                    PoolEntry {
                        record: r,
                        spec,
                        pool: Pool::new(config),
                        maker: None,
                        last_error: None,
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
                    // Its destroy was answered before the daemon died: finish it.
                    Some(rec) if rec.provider == name && rec.destroying => {
                        self.destroy_quietly(&p, &rec.id, ReapReason::Recovery)
                            .await;
                        self.metrics.reaped(ReapReason::Recovery);
                        report.reaped.push(rec.id);
                    }
                    Some(rec) if rec.provider == name => {
                        // A paused sandbox is frozen, its agent too: it cannot
                        // answer a ping, and being listed paused is its health.
                        let healthy = info.state == stockade::RunState::Paused
                            || matches!(
                                tokio::time::timeout(RECOVERY_HEALTH_TIMEOUT, p.health(&rec.id))
                                    .await,
                                Ok(Ok(()))
                            );
                        if healthy && self.adopt(rec.clone()) {
                            tracing::info!(sandbox = %rec.id, "adopted");
                        } else {
                            self.destroy_quietly(&p, &rec.id, ReapReason::Recovery)
                                .await;
                            self.metrics.reaped(ReapReason::Recovery);
                            report.reaped.push(rec.id);
                        }
                    }
                    Some(rec) => {
                        known.insert(rec.id.clone(), rec);
                    }
                    None if ours => {
                        // Created, but the daemon died before saving it.
                        self.destroy_quietly(&p, &info.id, ReapReason::Orphan).await;
                        self.metrics.reaped(ReapReason::Orphan);
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
            self.metrics.reaped(ReapReason::Gone);
        }
        self.sweep_staging().await;
        let keys: Vec<PoolKey> = self.lock().pools.keys().cloned().collect();
        for k in keys {
            self.refill(&k);
        }
        Ok(report)
    }

    /// Takes a recorded sandbox that answered back into the daemon's state (a warm
    /// one into its pool); whether it is still wanted.
    fn adopt(&self, rec: SandboxRecord) -> bool {
        let mut g = self.lock();
        let key = PoolKey::of(&rec);
        let mut pool_in_use = false;
        let state = match (&key, rec.idle) {
            (Some(k), true) => match g.pools.get_mut(k) {
                Some(e) => {
                    e.pool.adopt_idle(rec.id.clone(), rec.created_at_ms);
                    State::Warm
                }
                // Its pool was drained: not wanted.
                None => return false,
            },
            (Some(k), false) => {
                if let Some(e) = g.pools.get_mut(k) {
                    e.pool.adopt_in_use();
                    pool_in_use = true;
                }
                State::InUse
            }
            (None, true) => return false,
            (None, false) => State::InUse,
        };
        let mut e = Entry::new(rec, state, now_ms());
        e.pool_in_use = pool_in_use;
        g.entries.insert(e.record.id.clone(), e);
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
        let until = Instant::now() + SHUTDOWN_WAIT;
        self.wait_destroys(until).await;
        // Those of drained pools too: their task destroys what it made.
        self.wait_warm_creations(until, |_| true).await;
        // Drain without forgetting the pools: a restart fills them again.
        let mut victims = Vec::new();
        {
            let mut g = self.lock();
            let mut drained = Vec::new();
            for e in g.pools.values_mut() {
                drained.extend(e.pool.drain());
            }
            for id in drained {
                if let Some(r) = g.claim(&id, |e| e.state == State::Warm) {
                    victims.push((r.provider, id));
                }
            }
        }
        for (pname, id) in victims {
            if let Ok((_, p)) = self.provider(&pname) {
                self.destroy_quietly(&p, &id, ReapReason::Shutdown).await;
            }
        }
        tracing::info!(tenants = tenants.len(), "pools drained");
        // The staged mounts of sandboxes already gone (the drained ones among them)
        // go now: a daemon that is not started again would leave them on the host.
        self.sweep_staging().await;
    }
}
