//! The reaper (lifetimes, idle timeouts, dead owners, vanished sandboxes, warm ones
//! past the idle TTL), the staged-mount sweep, and the warm sandboxes' health checks.
//!
//! Every victim is claimed (`Warm`/`InUse -> Destroying`) under the lock before the
//! reaper awaits anything for it. The look for vanished sandboxes snapshots the
//! entries, waits for the providers' `list()`, and then claims only the entries that
//! are still in the state it saw: one that a client destroyed (or began destroying)
//! meanwhile is not reaped again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::entry::{PoolKey, ReapReason, State};
use super::{
    Daemon, GONE_EVERY_PASSES, HEALTH_EVERY_MS, HEALTH_SWEEP_EVERY, HEALTH_TIMEOUT, REAP_EVERY,
    now_ms,
};
use stockade::ErrorCode;

use crate::store::SandboxRecord;

impl Daemon {
    /// One pass of the reaper: lifetimes, idle timeouts, dead owners, and (when
    /// `check_gone`) sandboxes that vanished on their own; expired warm sandboxes.
    pub async fn reap_once(self: &Arc<Self>, check_gone: bool) -> stockade::GcReport {
        let now = now_ms();
        let mut victims: Vec<(SandboxRecord, ReapReason)> = Vec::new();
        let pool_keys: Vec<PoolKey>;
        // The owners to look at: each process once, however many sandboxes it owns
        // (one program often owns thousands), and outside the lock.
        let owners: HashSet<u32> = {
            let g = self.lock();
            g.entries
                .values()
                .filter(|e| e.state == State::InUse)
                .filter_map(|e| e.record.owner_pid)
                .collect()
        };
        let owner_gone = |pid: u32| !std::path::Path::new(&format!("/proc/{pid}")).exists();
        let dead: HashSet<u32> = owners.into_iter().filter(|&pid| owner_gone(pid)).collect();
        {
            let mut g = self.lock();
            // Still dead now, under the lock: a pid taken again meanwhile is a live
            // owner (as it would have been had the look been made here).
            let dead: HashSet<u32> = dead.into_iter().filter(|&pid| owner_gone(pid)).collect();
            let due: Vec<(String, ReapReason)> = g
                .entries
                .values()
                .filter(|e| e.state == State::InUse)
                .filter_map(|e| {
                    let r = &e.record;
                    // A paused sandbox's lifetime and idle time do not run.
                    let paused = r.paused_at_ms.is_some();
                    let why = if !paused && now >= r.expires_at_ms {
                        ReapReason::Lifetime
                    } else if !paused
                        && r.idle_timeout_ms
                            .is_some_and(|t| now.saturating_sub(e.last_used_ms) >= t)
                        && e.ops == 0
                    {
                        ReapReason::Idle
                    } else if r.owner_pid.is_some_and(|pid| dead.contains(&pid)) {
                        ReapReason::Owner
                    } else {
                        return None;
                    };
                    Some((r.id.clone(), why))
                })
                .collect();
            for (id, why) in due {
                if let Some(r) = g.claim(&id, |_| true) {
                    victims.push((r, why));
                }
            }
            pool_keys = g.pools.keys().cloned().collect();
            for k in &pool_keys {
                let expired = g
                    .pools
                    .get_mut(k)
                    .map(|e| e.pool.expired(now))
                    .unwrap_or_default();
                for id in expired {
                    if let Some(r) = g.claim(&id, |e| e.state == State::Warm) {
                        victims.push((r, ReapReason::PoolTtl));
                    }
                }
            }
        }
        if check_gone {
            victims.extend(self.claim_gone().await);
        }
        let mut report = stockade::GcReport::default();
        for (r, why) in victims {
            if let Err(e) = self.destroy_claimed(&r).await {
                report
                    .errors
                    .push(format!("cannot destroy sandbox {}: {e}", r.id));
                continue;
            }
            self.metrics.reaped(why);
            tracing::info!(sandbox = %r.id, reason = %why, "reaped");
            report.reaped.push(r.id);
        }
        if !self.stopping.load(Ordering::SeqCst) {
            for k in pool_keys {
                self.refill(&k);
            }
        }
        report
    }

    /// Claims the warm and handed-out sandboxes the providers no longer list.
    async fn claim_gone(&self) -> Vec<(SandboxRecord, ReapReason)> {
        let mut by_provider: BTreeMap<String, Vec<(String, State)>> = BTreeMap::new();
        for e in self.lock().entries.values() {
            // One that runs an exec or a file operation is not judged by a listing:
            // if it died, that call fails, and the next pass (with nothing running)
            // finds it gone.
            if matches!(e.state, State::Warm | State::InUse) && e.ops == 0 {
                by_provider
                    .entry(e.record.provider.clone())
                    .or_default()
                    .push((e.record.id.clone(), e.state));
            }
        }
        let mut gone = Vec::new();
        for (name, seen) in by_provider {
            let Ok((_, p)) = self.provider(&name) else {
                continue;
            };
            let Ok(live) = p.live_ids().await else {
                continue;
            };
            let live: HashSet<String> = live.into_iter().collect();
            for (id, state) in seen {
                if live.contains(&id) {
                    continue;
                }
                // A listing is a scan of many entries, any of which a busy host may
                // fail to read for a moment: one missing is asked about by itself
                // before it is taken for gone.
                if !matches!(p.inspect(&id).await, Err(e) if e.code() == ErrorCode::NotFound) {
                    continue;
                }
                // Still as it was before the listing: not destroyed, not being
                // destroyed, not handed over, not in use meanwhile.
                if let Some(r) = self.lock().claim(&id, |e| e.state == state && e.ops == 0) {
                    gone.push((r, ReapReason::Gone));
                }
            }
        }
        gone
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut live = HashSet::new();
        for n in self.provider_names() {
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
        let mut pass = 0u64;
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(REAP_EVERY).await;
            pass += 1;
            // Vanished sandboxes are looked for less often (it lists every sandbox).
            let full = pass.is_multiple_of(GONE_EVERY_PASSES);
            let _ = self.reap_once(full).await;
            if full {
                self.sweep_staging().await;
            }
        }
    }

    /// Health-checks warm sandboxes until the daemon stops; apart from the reaper, so
    /// a sandbox that takes the whole timeout to fail never delays a reap.
    pub async fn health_checker(self: Arc<Self>) {
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(HEALTH_SWEEP_EVERY).await;
            self.health_sweep().await;
        }
    }

    /// Health-checks the warm sandboxes not checked for `HEALTH_EVERY_MS`, so that
    /// hand-over need not wait for a check; one that fails leaves its pool and is
    /// destroyed, and the pool refills. Returns the ids that failed.
    pub async fn health_sweep(self: &Arc<Self>) -> Vec<String> {
        let now = now_ms();
        let due: Vec<(String, String, PoolKey)> = {
            let g = self.lock();
            g.entries
                .values()
                .filter(|e| e.state == State::Warm)
                .filter(|e| {
                    e.healthy_at_ms
                        .is_none_or(|t| now.saturating_sub(t) >= HEALTH_EVERY_MS)
                })
                .filter_map(|e| {
                    let key = PoolKey::of(&e.record)?;
                    Some((e.record.id.clone(), e.record.provider.clone(), key))
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
                    tokio::time::timeout(HEALTH_TIMEOUT, p.health(&id)).await,
                    Ok(Ok(()))
                );
                (id, p, key, ok)
            });
        }
        let mut failed = Vec::new();
        while let Some(Ok((id, p, key, ok))) = checks.join_next().await {
            let taken_out = {
                let mut g = self.lock();
                if ok {
                    if let Some(e) = g.entries.get_mut(&id)
                        && e.state == State::Warm
                    {
                        e.healthy_at_ms = Some(now_ms());
                    }
                    false
                } else {
                    // Out of its pool before anyone can take it (unless it was handed
                    // over or reaped while it was being checked).
                    g.claim(&id, |e| e.state == State::Warm).is_some()
                }
            };
            if taken_out {
                tracing::warn!(sandbox = %id, "warm sandbox failed its health check; replacing it");
                self.destroy_quietly(&p, &id, ReapReason::Unhealthy).await;
                self.metrics.reaped(ReapReason::Unhealthy);
                if !self.stopping.load(Ordering::SeqCst) {
                    self.refill(&key);
                }
                failed.push(id);
            }
        }
        failed
    }
}
