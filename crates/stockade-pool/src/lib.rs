//! Warm pool logic for `stockaded`: which sandboxes are idle, how many to create, which
//! idle ones are too old, when to retry after failures. Pure: no I/O, no clock of its
//! own; every call that depends on time takes `now_ms`, so tests drive the clock.
//!
//! The daemon owns the side effects: it asks [`Pool::to_create`] how many creations to
//! start (and starts them concurrently), reports each end with [`Pool::created`] or
//! [`Pool::create_failed`], hands out [`Pool::acquire`]d items once, and destroys what
//! [`Pool::expired`], [`Pool::drain`] and a refused [`Pool::created`] return.

use std::collections::VecDeque;

/// First delay after a failed creation; doubled on each further failure.
pub const RETRY_BASE_MS: u64 = 100;
/// Longest delay between creation attempts after failures.
pub const RETRY_MAX_MS: u64 = 30_000;
/// Default time an idle sandbox may wait before it is replaced by a fresh one.
pub const DEFAULT_IDLE_TTL_MS: u64 = 600_000;

/// Sizing of one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Idle items kept ready.
    pub min_idle: usize,
    /// Most items at once, idle plus being created (`>= min_idle`).
    pub max: usize,
    /// Idle items older than this are replaced (default [`DEFAULT_IDLE_TTL_MS`]).
    pub idle_ttl_ms: u64,
}

impl PoolConfig {
    /// `min_idle` ready, at most `max` (raised to `min_idle` when lower).
    pub fn new(min_idle: usize, max: usize) -> PoolConfig {
        PoolConfig {
            min_idle,
            max: max.max(min_idle),
            idle_ttl_ms: DEFAULT_IDLE_TTL_MS,
        }
    }
}

/// Counters and sizes of a pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub idle: usize,
    pub creating: usize,
    pub in_use: usize,
    pub hits: u64,
    pub misses: u64,
    pub failures: u64,
}

/// One pool of interchangeable items (sandbox ids in the daemon).
#[derive(Clone, Debug)]
pub struct Pool<T> {
    config: PoolConfig,
    /// Oldest first, with their creation time.
    idle: VecDeque<(T, u64)>,
    creating: usize,
    in_use: usize,
    hits: u64,
    misses: u64,
    failures: u64,
    /// Consecutive failures, for the backoff.
    failing: u32,
    retry_at_ms: u64,
    draining: bool,
}

impl<T> Pool<T> {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> Pool<T> {
        Pool {
            config,
            idle: VecDeque::new(),
            creating: 0,
            in_use: 0,
            hits: 0,
            misses: 0,
            failures: 0,
            failing: 0,
            retry_at_ms: 0,
            draining: false,
        }
    }

    /// The sizing.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Changes the sizing; a pool being drained starts filling again.
    pub fn resize(&mut self, config: PoolConfig) {
        self.config = config;
        self.draining = false;
    }

    /// Sizes and counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            idle: self.idle.len(),
            creating: self.creating,
            in_use: self.in_use,
            hits: self.hits,
            misses: self.misses,
            failures: self.failures,
        }
    }

    /// Takes the newest idle item (the one with the most lifetime left) and counts a
    /// hit, or counts a miss. An item is handed out once; it never comes back.
    pub fn acquire(&mut self) -> Option<T> {
        match self.idle.pop_back() {
            Some((item, _)) => {
                self.hits += 1;
                self.in_use += 1;
                Some(item)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// An acquired item was found broken before use: it does not count as a hit.
    pub fn acquired_broken(&mut self) {
        self.hits = self.hits.saturating_sub(1);
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// An acquired item was destroyed after use.
    pub fn release(&mut self) {
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// How many creations to start now; they are counted as in progress.
    pub fn to_create(&mut self, now_ms: u64) -> usize {
        if self.draining || now_ms < self.retry_at_ms {
            return 0;
        }
        let have = self.idle.len() + self.creating;
        let want = self.config.min_idle.saturating_sub(have);
        let room = self.config.max.saturating_sub(have);
        let n = want.min(room);
        // After failures, one attempt at a time until one succeeds.
        let n = if self.failing > 0 { n.min(1) } else { n };
        self.creating += n;
        n
    }

    /// A creation finished. Returns the item when the pool does not want it (drained
    /// or full meanwhile): the caller destroys it.
    pub fn created(&mut self, item: T, now_ms: u64) -> Option<T> {
        self.creating = self.creating.saturating_sub(1);
        self.failing = 0;
        self.retry_at_ms = 0;
        if self.draining || self.idle.len() >= self.config.max {
            return Some(item);
        }
        self.idle.push_back((item, now_ms));
        None
    }

    /// A creation failed: back off before the next attempt.
    pub fn create_failed(&mut self, now_ms: u64) {
        self.creating = self.creating.saturating_sub(1);
        self.failures += 1;
        self.failing = self.failing.saturating_add(1);
        let delay = RETRY_BASE_MS
            .saturating_mul(1u64 << (self.failing - 1).min(20))
            .min(RETRY_MAX_MS);
        self.retry_at_ms = now_ms + delay;
    }

    /// When the next creation may start after failures (0: now).
    pub fn retry_at_ms(&self) -> u64 {
        self.retry_at_ms
    }

    /// Removes idle items older than the idle TTL (the caller destroys them; the pool
    /// then creates fresh ones).
    pub fn expired(&mut self, now_ms: u64) -> Vec<T> {
        let ttl = self.config.idle_ttl_ms;
        let mut out = Vec::new();
        while let Some((_, born)) = self.idle.front() {
            if now_ms.saturating_sub(*born) < ttl {
                break;
            }
            if let Some((item, _)) = self.idle.pop_front() {
                out.push(item);
            }
        }
        out
    }

    /// Stops refilling and removes every idle item (the caller destroys them).
    /// Creations in progress are refused when they finish.
    pub fn drain(&mut self) -> Vec<T> {
        self.draining = true;
        self.idle.drain(..).map(|(item, _)| item).collect()
    }

    /// Whether the pool was drained and not resized since.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Puts an item back as idle (adopting it after a daemon restart).
    pub fn adopt_idle(&mut self, item: T, created_ms: u64) {
        self.idle.push_back((item, created_ms));
    }

    /// Counts an item handed out before a daemon restart.
    pub fn adopt_in_use(&mut self) {
        self.in_use += 1;
    }

    /// Removes one idle item (it died while waiting); whether it was there.
    pub fn remove_idle(&mut self, item: &T) -> bool
    where
        T: PartialEq,
    {
        let before = self.idle.len();
        self.idle.retain(|(t, _)| t != item);
        self.idle.len() != before
    }

    /// The idle items, oldest first.
    pub fn idle(&self) -> impl Iterator<Item = &T> {
        self.idle.iter().map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(min: usize, max: usize) -> Pool<u32> {
        Pool::new(PoolConfig::new(min, max))
    }

    #[test]
    fn fills_to_min_idle_concurrently_and_counts_creations_in_progress() {
        let mut p = pool(3, 5);
        assert_eq!(p.to_create(0), 3, "all three at once, not one by one");
        assert_eq!(p.to_create(0), 0, "in progress counts towards the minimum");
        assert_eq!(p.created(1, 10), None);
        assert_eq!(p.stats().idle, 1);
        assert_eq!(p.stats().creating, 2);
        assert_eq!(p.to_create(10), 0);
    }

    #[test]
    fn acquisition_hands_out_once_and_the_pool_refills() {
        let mut p = pool(2, 4);
        p.to_create(0);
        p.created(1, 1);
        p.created(2, 2);
        assert_eq!(p.acquire(), Some(2), "newest first: most lifetime left");
        assert_eq!(p.acquire(), Some(1));
        assert_eq!(p.acquire(), None);
        let s = p.stats();
        assert_eq!((s.hits, s.misses, s.in_use, s.idle), (2, 1, 2, 0));
        assert_eq!(p.to_create(3), 2, "refills to the minimum");
        p.release();
        assert_eq!(p.stats().in_use, 1);
    }

    #[test]
    fn never_exceeds_max() {
        let mut p: Pool<u32> = Pool::new(PoolConfig {
            min_idle: 4,
            max: 4,
            idle_ttl_ms: 1000,
        });
        assert_eq!(p.to_create(0), 4);
        for i in 0..4 {
            assert_eq!(p.created(i, 0), None);
        }
        // A fifth item (e.g. from a resize race) is refused and handed back.
        p.creating += 1;
        assert_eq!(p.created(9, 0), Some(9));
        assert_eq!(PoolConfig::new(5, 2).max, 5, "max is raised to min_idle");
    }

    #[test]
    fn failures_back_off_exponentially_and_one_at_a_time() {
        let mut p = pool(3, 3);
        assert_eq!(p.to_create(0), 3);
        p.create_failed(1000);
        assert_eq!(p.retry_at_ms(), 1000 + RETRY_BASE_MS);
        p.create_failed(1000);
        assert_eq!(p.retry_at_ms(), 1000 + 2 * RETRY_BASE_MS);
        p.create_failed(1000);
        assert_eq!(p.retry_at_ms(), 1000 + 4 * RETRY_BASE_MS);
        assert_eq!(
            p.to_create(1000 + 4 * RETRY_BASE_MS - 1),
            0,
            "still waiting"
        );
        assert_eq!(
            p.to_create(1000 + 4 * RETRY_BASE_MS),
            1,
            "one probe attempt"
        );
        p.created(7, 2000);
        assert_eq!(p.to_create(2000), 2, "back to full speed after a success");
        for _ in 0..40 {
            p.create_failed(0);
        }
        assert_eq!(p.retry_at_ms(), RETRY_MAX_MS, "capped");
        assert_eq!(p.stats().failures, 43);
    }

    #[test]
    fn idle_items_expire_oldest_first() {
        let mut p: Pool<u32> = Pool::new(PoolConfig {
            min_idle: 2,
            max: 2,
            idle_ttl_ms: 100,
        });
        p.to_create(0);
        p.created(1, 0);
        p.created(2, 50);
        assert_eq!(p.expired(99), Vec::<u32>::new());
        assert_eq!(p.expired(100), vec![1]);
        assert_eq!(p.expired(150), vec![2]);
        assert_eq!(p.to_create(150), 2, "expired items are replaced");
    }

    #[test]
    fn drain_empties_stops_refills_and_refuses_late_creations() {
        let mut p = pool(2, 3);
        p.to_create(0);
        p.created(1, 0);
        assert_eq!(p.drain(), vec![1]);
        assert!(p.is_draining());
        assert_eq!(p.to_create(0), 0);
        assert_eq!(p.created(2, 1), Some(2), "late creation handed back");
        p.resize(PoolConfig::new(1, 1));
        assert!(!p.is_draining());
        assert_eq!(p.to_create(2), 1);
    }

    #[test]
    fn adopted_items_are_counted() {
        let mut p = pool(1, 2);
        p.adopt_idle(5, 0);
        p.adopt_in_use();
        let s = p.stats();
        assert_eq!((s.idle, s.in_use), (1, 1));
        assert_eq!(p.to_create(0), 0);
        assert_eq!(p.idle().copied().collect::<Vec<_>>(), vec![5]);
        p.adopt_idle(6, 0);
        assert!(p.remove_idle(&6));
        assert!(!p.remove_idle(&6));
        assert_eq!(p.acquire(), Some(5));
        p.acquired_broken();
        assert_eq!(p.stats().hits, 0);
    }
}
