//! One entry per sandbox, its state machine, the pools' keys, and why sandboxes are
//! reaped. Everything here changes under the daemon's one state lock; nothing here
//! awaits.
//!
//! ```text
//!             provider made it        record committed
//!  (none) ───────────────────► Creating ───────┬──────────► Warm ──acquire──► Acquiring
//!                                              │              ▲                  │
//!                                              │              └──── put back ────┤
//!                                              │                                 │ bound
//!                                              └──────────► InUse ◄──────────────┘
//!   Warm, InUse ──claim (destroy, reap, drain, health)──► Destroying ──done──► gone
//!   Destroying ──provider refused──► back where it was
//! ```
//!
//! Gone is the entry's absence (its record forgotten). Only `Warm` and `InUse` may be
//! claimed for destruction, and claiming is one step under the lock: whoever claims
//! an entry is the only one to destroy it and to take it out of its pool, so a
//! destroy in progress is never reaped and a pool slot is never released twice.

use std::collections::HashMap;

use stockade::SandboxInfo;
use stockade_pool::Pool;

use crate::store::SandboxRecord;

/// Where a sandbox is in its life (see the module's diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The provider made it; its record is being committed. Counted by the
    /// reservation that made it (a tenant's pending slot or its pool's creations).
    Creating,
    /// Waiting in its pool.
    Warm,
    /// Taken from its pool for a caller: being checked and bound.
    Acquiring,
    /// Handed out to its tenant.
    InUse,
    /// A destroy is under way: never reaped, never handed out, not found by calls.
    Destroying {
        /// Where it goes back to if the provider refuses the destroy.
        from: Claimable,
    },
}

/// The states a destroy may claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claimable {
    Warm,
    InUse,
}

impl From<Claimable> for State {
    fn from(c: Claimable) -> State {
        match c {
            Claimable::Warm => State::Warm,
            Claimable::InUse => State::InUse,
        }
    }
}

/// Why the daemon destroyed a sandbox on its own (logs and `stockade_reaps_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReapReason {
    /// Its lifetime passed.
    Lifetime,
    /// Unused for its idle timeout.
    Idle,
    /// The process that owned it died.
    Owner,
    /// It ended on its own (the provider no longer lists it).
    Gone,
    /// It waited in its pool longer than the idle TTL.
    PoolTtl,
    /// A warm sandbox failed its health check.
    Unhealthy,
    /// A warm sandbox failed the check at hand-over.
    Broken,
    /// After a restart it did not answer.
    Recovery,
    /// Labelled by this daemon but never recorded (it died mid-create).
    Orphan,
    /// Its record could not be committed.
    Unsaved,
    /// Its pool was drained or full when it was ready.
    NotWanted,
    /// Its pool was drained.
    Drained,
    /// The daemon stopped (warm sandboxes only).
    Shutdown,
}

impl ReapReason {
    /// The reason as logs and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReapReason::Lifetime => "lifetime",
            ReapReason::Idle => "idle",
            ReapReason::Owner => "owner",
            ReapReason::Gone => "gone",
            ReapReason::PoolTtl => "pool-ttl",
            ReapReason::Unhealthy => "unhealthy",
            ReapReason::Broken => "broken",
            ReapReason::Recovery => "recovery",
            ReapReason::Orphan => "orphan",
            ReapReason::Unsaved => "unsaved",
            ReapReason::NotWanted => "not wanted",
            ReapReason::Drained => "drained",
            ReapReason::Shutdown => "shutdown",
        }
    }
}

impl std::fmt::Display for ReapReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pool's key: one tenant's pool of one template.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub tenant: String,
    pub template: String,
}

impl PoolKey {
    pub fn new(tenant: &str, template: &str) -> PoolKey {
        PoolKey {
            tenant: tenant.to_string(),
            template: template.to_string(),
        }
    }

    /// The pool a record came from, if any.
    pub fn of(rec: &SandboxRecord) -> Option<PoolKey> {
        rec.template
            .as_deref()
            .map(|t| PoolKey::new(&rec.tenant, t))
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.tenant, self.template)
    }
}

/// Everything the daemon knows of one sandbox.
pub struct Entry {
    /// What survives a restart (committed to the store before it is acted on).
    pub record: SandboxRecord,
    pub state: State,
    /// Last use (an exec or file operation ended or started), unix ms.
    pub last_used_ms: u64,
    /// Execs and file operations running now: an entry with any is not idle.
    pub ops: usize,
    /// What the provider said when it made this warm sandbox (hand-over needs no
    /// provider call for it).
    pub warm_info: Option<SandboxInfo>,
    /// When this warm sandbox last passed a health check (its creation counts).
    pub healthy_at_ms: Option<u64>,
    /// Counted in its pool's `in_use` (taken from the pool, or adopted in use); the
    /// count is given back exactly once, when the entry is removed.
    pub pool_in_use: bool,
    /// Host mounts the daemon made for it ([`super::MountMaker`]): released when the
    /// entry goes (the sandbox is gone).
    pub made: Option<super::made::Made>,
    /// What its spec holds of the host (memory, CPUs): counted in its tenant's
    /// totals while it is live.
    pub usage: crate::admission::Usage,
}

impl Entry {
    pub fn new(record: SandboxRecord, state: State, now_ms: u64) -> Entry {
        Entry {
            usage: crate::admission::Usage::of_json(&record.spec),
            record,
            state,
            last_used_ms: now_ms,
            ops: 0,
            warm_info: None,
            healthy_at_ms: None,
            pool_in_use: false,
            made: None,
        }
    }

    /// Handed out to its tenant (or on its way out), not waiting in a pool.
    pub fn is_live(&self) -> bool {
        !self.record.idle && self.state != State::Creating
    }
}

/// A warm pool: its durable record, its template, and the pool logic.
pub struct PoolEntry {
    pub record: crate::store::PoolRecord,
    /// The template as a spec (env and workdir empty).
    pub spec: stockade::SandboxSpec,
    pub pool: Pool<String>,
    /// What makes each of its sandboxes' own host mounts, if they have any. Such a
    /// pool belongs to the front end that made it: it is not saved (a restart
    /// finds no maker for it), and its sandboxes are reaped at a restart.
    pub maker: Option<std::sync::Arc<dyn super::MountMaker>>,
    /// The error of its last creation, when that one failed (`pool warm` shows it).
    pub last_error: Option<String>,
}

/// The daemon's in-memory state (behind its one lock).
#[derive(Default)]
pub struct Inner {
    /// Every sandbox the daemon owns, warm ones included.
    pub entries: HashMap<String, Entry>,
    pub pools: HashMap<PoolKey, PoolEntry>,
    /// Cold creations in progress by tenant (counted against quotas).
    pub pending: HashMap<String, usize>,
    /// What those cold creations hold, by tenant (counted against its totals).
    pub pending_usage: HashMap<String, crate::admission::Usage>,
    /// Warm creations in progress by pool, from their start to the end of their task
    /// (a destroy of one its pool no longer wants included). Kept apart from the
    /// pool's own count: a drained pool is gone while its creations still run, and
    /// both the cap and a drain or shutdown that waits for them must see them.
    pub warm_creating: HashMap<PoolKey, usize>,
}

impl Inner {
    /// The tenant's live sandboxes, creations in progress included.
    pub fn live_of(&self, tenant: &str) -> usize {
        self.entries
            .values()
            .filter(|e| e.is_live() && e.record.tenant == tenant)
            .count()
            + self.pending.get(tenant).copied().unwrap_or(0)
    }

    /// What the tenant's live sandboxes hold, creations in progress included.
    pub fn usage_of(&self, tenant: &str) -> crate::admission::Usage {
        self.entries
            .values()
            .filter(|e| e.is_live() && e.record.tenant == tenant)
            .fold(
                self.pending_usage.get(tenant).copied().unwrap_or_default(),
                |u, e| u.plus(e.usage),
            )
    }

    /// Every sandbox of the daemon, creations in progress included.
    pub fn total(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.state != State::Creating)
            .count()
            + self.pending.values().sum::<usize>()
            + self.warm_creating.values().sum::<usize>()
    }

    /// Claims `id` for destruction when it is in one of the claimable states and
    /// `pick` agrees; returns its record. A warm one leaves its pool here, so nobody
    /// can take it any more.
    pub fn claim(&mut self, id: &str, pick: impl FnOnce(&Entry) -> bool) -> Option<SandboxRecord> {
        let e = self.entries.get_mut(id)?;
        let from = match e.state {
            State::Warm => Claimable::Warm,
            State::InUse => Claimable::InUse,
            _ => return None,
        };
        if !pick(e) {
            return None;
        }
        e.state = State::Destroying { from };
        let rec = e.record.clone();
        if from == Claimable::Warm
            && let Some(key) = PoolKey::of(&rec)
            && let Some(p) = self.pools.get_mut(&key)
        {
            p.pool.remove_idle(&rec.id);
        }
        Some(rec)
    }

    /// A claimed destroy failed: the entry goes back to where it was (a warm one
    /// back into its pool).
    pub fn unclaim(&mut self, id: &str) {
        let Some(e) = self.entries.get_mut(id) else {
            return;
        };
        let State::Destroying { from } = e.state else {
            return;
        };
        e.state = from.into();
        if from == Claimable::Warm
            && let Some(key) = PoolKey::of(&e.record)
            && let Some(p) = self.pools.get_mut(&key)
        {
            p.pool.adopt_idle(id.to_string(), e.record.created_at_ms);
        }
    }

    /// Removes the entry (the sandbox is gone), giving its pool slot back once.
    pub fn remove(&mut self, id: &str) -> Option<Entry> {
        let e = self.entries.remove(id)?;
        if let Some(key) = PoolKey::of(&e.record)
            && let Some(p) = self.pools.get_mut(&key)
        {
            if e.pool_in_use {
                p.pool.release();
            } else {
                p.pool.remove_idle(&id.to_string());
            }
        }
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_pool::PoolConfig;

    fn rec(id: &str, idle: bool) -> SandboxRecord {
        SandboxRecord {
            id: id.into(),
            tenant: "t".into(),
            provider: "native".into(),
            spec: serde_json::Value::Null,
            template: Some("tpl".into()),
            idle,
            env: Default::default(),
            workdir: None,
            created_at_ms: 0,
            expires_at_ms: u64::MAX,
            idle_timeout_ms: None,
            owner_pid: None,
            destroying: false,
            paused_at_ms: None,
        }
    }

    fn inner_with_pool() -> (Inner, PoolKey) {
        let key = PoolKey::new("t", "tpl");
        let mut g = Inner::default();
        g.pools.insert(
            key.clone(),
            PoolEntry {
                record: crate::store::PoolRecord {
                    template_id: "tpl".into(),
                    tenant: "t".into(),
                    provider: "native".into(),
                    spec: serde_json::Value::Null,
                    min_idle: 2,
                    max: 2,
                },
                spec: Default::default(),
                last_error: None,
                pool: Pool::new(PoolConfig::new(2, 2)),
                maker: None,
            },
        );
        (g, key)
    }

    #[test]
    fn a_claimed_entry_cannot_be_claimed_again_and_releases_its_pool_once() {
        let (mut g, key) = inner_with_pool();
        for id in ["a", "b"] {
            g.pools.get_mut(&key).unwrap().pool.adopt_idle(id.into(), 0);
            g.pools.get_mut(&key).unwrap().pool.acquire(0);
            let mut e = Entry::new(rec(id, false), State::InUse, 0);
            e.pool_in_use = true;
            g.entries.insert(id.into(), e);
        }
        assert!(g.claim("a", |_| true).is_some());
        assert!(g.claim("a", |_| true).is_none(), "a destroy in progress");
        assert!(g.remove("a").is_some());
        assert!(g.claim("a", |_| true).is_none(), "gone");
        assert!(g.remove("a").is_none());
        assert_eq!(g.pools[&key].pool.stats().in_use, 1, "b is still held");
    }

    #[test]
    fn a_refused_destroy_puts_a_warm_sandbox_back_in_its_pool() {
        let (mut g, key) = inner_with_pool();
        g.pools
            .get_mut(&key)
            .unwrap()
            .pool
            .adopt_idle("w".into(), 0);
        g.entries
            .insert("w".into(), Entry::new(rec("w", true), State::Warm, 0));
        assert!(g.claim("w", |_| true).is_some());
        assert_eq!(g.pools[&key].pool.stats().idle, 0, "nobody can take it");
        g.unclaim("w");
        assert_eq!(g.entries["w"].state, State::Warm);
        assert_eq!(g.pools[&key].pool.stats().idle, 1);
    }

    #[test]
    fn creating_and_acquiring_entries_are_never_claimed() {
        let (mut g, _) = inner_with_pool();
        g.entries
            .insert("c".into(), Entry::new(rec("c", false), State::Creating, 0));
        g.entries
            .insert("q".into(), Entry::new(rec("q", true), State::Acquiring, 0));
        assert!(g.claim("c", |_| true).is_none());
        assert!(g.claim("q", |_| true).is_none());
    }
}
