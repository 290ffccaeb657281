//! Acquisition: taking a warm sandbox from its pool for a caller. The entry goes
//! `Warm -> Acquiring` as the pool hands it out (one step under the lock, so
//! nothing else can take or reap it), is checked (deadline, health), gets the
//! caller's late-bound env, workdir, lifetime and owner, is committed, and only then
//! becomes `InUse`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use stockade::{FileOp, Provider, Result, SandboxInfo};

use super::create::Request;
use super::entry::{PoolKey, ReapReason, State};
use super::{Daemon, HEALTH_FRESH_MS, HEALTH_TIMEOUT, REFILL_AFTER_HANDOVER, now_ms};

/// One warm sandbox taken from its pool.
struct Taken {
    id: String,
    /// The provider's own deadline of the sandbox.
    deadline_ms: u64,
    created_at_ms: u64,
    /// Its last passed health check.
    healthy_at_ms: Option<u64>,
}

impl Daemon {
    /// A warm sandbox of the pool `key` bound to the caller, or `None` when the pool
    /// has none fit for it (or there is no such pool).
    pub(super) async fn acquire(
        self: &Arc<Self>,
        p: &Arc<dyn Provider>,
        key: &PoolKey,
        req: &Request,
    ) -> Result<Option<SandboxInfo>> {
        let t0 = Instant::now();
        while let Some(t) = self.take(key) {
            // The provider's own deadline of a warm sandbox must cover the caller's
            // lifetime; if it does not, the sandbox goes back.
            if req.expires_at_ms() > t.deadline_ms {
                self.put_back(key, &t);
                return Ok(None);
            }
            // Warm sandboxes are health-checked in the background (`health_sweep`);
            // one whose last check is not recent is checked here, before hand-over.
            let fresh = t
                .healthy_at_ms
                .is_some_and(|at| now_ms().saturating_sub(at) <= HEALTH_FRESH_MS);
            if !fresh
                && !matches!(
                    tokio::time::timeout(HEALTH_TIMEOUT, p.health(&t.id)).await,
                    Ok(Ok(()))
                )
            {
                tracing::warn!(sandbox = %t.id, "warm sandbox failed its health check; replacing it");
                {
                    let mut g = self.lock();
                    if let Some(e) = g.pools.get_mut(key) {
                        e.pool.acquired_broken();
                    }
                    if let Some(e) = g.entries.get_mut(&t.id) {
                        e.pool_in_use = false;
                    }
                }
                self.destroy_quietly(p, &t.id, ReapReason::Broken).await;
                continue;
            }
            // A workdir that is the target of one of the daemon's own mounts of the
            // sandbox (an E2B home) exists: no file operation (a process in the
            // sandbox) for it.
            let mounted = req.spec.workdir.as_ref().is_some_and(|w| {
                self.lock()
                    .entries
                    .get(&t.id)
                    .and_then(|e| e.made.as_ref())
                    .is_some_and(|m| m.mounts().iter().any(|x| x.target == *w))
            });
            if let Some(w) = req.spec.workdir.as_ref().filter(|_| !mounted) {
                // A workdir the sandbox user cannot create shows as the exec's error.
                let _ = p
                    .file(
                        &t.id,
                        FileOp::Mkdir {
                            path: w.display().to_string(),
                            parents: true,
                        },
                    )
                    .await;
            }
            let (rec, cached) = {
                let mut g = self.lock();
                let Some(e) = g.entries.get_mut(&t.id) else {
                    continue;
                };
                let r = &mut e.record;
                r.idle = false;
                r.tenant = req.tenant.clone();
                r.spec = req.spec_json.clone();
                r.env = req.spec.env.clone();
                r.workdir = req.spec.workdir.as_ref().map(|w| w.display().to_string());
                r.expires_at_ms = req.expires_at_ms();
                r.idle_timeout_ms = req.idle_timeout_ms();
                r.owner_pid = req.owner_pid;
                e.last_used_ms = now_ms();
                e.healthy_at_ms = None;
                (e.record.clone(), e.warm_info.take())
            };
            // Committed before the answer: a crash must not give it to another tenant.
            if let Err(err) = self.save(&rec) {
                self.destroy_quietly(p, &rec.id, ReapReason::Unsaved).await;
                return Err(err);
            }
            if let Some(e) = self.lock().entries.get_mut(&rec.id) {
                e.state = State::InUse;
            }
            self.metrics.pool_hits.fetch_add(1, Ordering::Relaxed);
            self.metrics.acquire_seconds.observe(t0.elapsed());
            // The replacement is asked for once the answer is on its way, so creating it
            // (a process launch) does not compete with this hand-over; the pool then
            // waits for acquisitions to stop (`PoolConfig::quiet_ms`) unless it is down
            // to its low-water mark, so a burst of hand-overs does not compete with its
            // refills either.
            let d = self.clone();
            let k = key.clone();
            tokio::spawn(async move {
                tokio::time::sleep(REFILL_AFTER_HANDOVER).await;
                d.refill(&k);
            });
            let info = match cached {
                Some(i) => self.present(i, &rec),
                None => self.info_of(p, &rec).await?,
            };
            return Ok(Some(info));
        }
        Ok(None)
    }

    /// Takes the pool's newest warm sandbox: `Warm -> Acquiring`, counted in use.
    fn take(&self, key: &PoolKey) -> Option<Taken> {
        let mut g = self.lock();
        loop {
            let id = g.pools.get_mut(key)?.pool.acquire(now_ms())?;
            match g.entries.get_mut(&id) {
                Some(e) if e.state == State::Warm => {
                    e.state = State::Acquiring;
                    e.pool_in_use = true;
                    return Some(Taken {
                        deadline_ms: e.record.expires_at_ms,
                        created_at_ms: e.record.created_at_ms,
                        healthy_at_ms: e.healthy_at_ms,
                        id,
                    });
                }
                // Not a warm entry (cannot happen: the pool holds only warm ones).
                _ => {
                    tracing::error!(sandbox = %id, "pool held a sandbox that is not warm");
                    if let Some(e) = g.pools.get_mut(key) {
                        e.pool.acquired_broken();
                    }
                }
            }
        }
    }

    /// Puts a taken sandbox back into its pool unused: `Acquiring -> Warm`.
    fn put_back(&self, key: &PoolKey, t: &Taken) {
        let mut g = self.lock();
        if let Some(e) = g.pools.get_mut(key) {
            e.pool.acquired_broken();
            e.pool.adopt_idle(t.id.clone(), t.created_at_ms);
        }
        if let Some(e) = g.entries.get_mut(&t.id) {
            e.state = State::Warm;
            e.pool_in_use = false;
        }
    }
}
