//! Warm pool logic for `stockaded`: which sandboxes are idle, how many to create, which
//! idle ones are too old, when to retry after failures. Pure: no I/O, no clock of its
//! own; every call that depends on time takes `now_ms`, so tests drive the clock.
//!
//! The daemon owns the side effects: it asks [`Pool::to_create`] how many creations to
//! start (and starts them concurrently), reports each end with [`Pool::created`] or
//! [`Pool::create_failed`] (and then asks again), hands out [`Pool::acquire`]d items
//! once, and destroys what [`Pool::expired`], [`Pool::drain`] and a refused
//! [`Pool::created`] return.
//!
//! Refills are paced so they do not compete with hand-overs: while acquisitions keep
//! arriving (the last one less than [`PoolConfig::quiet_ms`] ago) a pool that still
//! holds more than [`PoolConfig::low_water`] idle items creates nothing, and
//! [`Pool::wake_at`] tells the daemon when to ask again; at most
//! [`PoolConfig::max_creating`] creations run at once.

use std::collections::VecDeque;

/// First delay after a failed creation; doubled on each further failure.
pub const RETRY_BASE_MS: u64 = 100;
/// Longest delay between creation attempts after failures.
pub const RETRY_MAX_MS: u64 = 30_000;
/// Default time an idle sandbox may wait before it is replaced by a fresh one.
pub const DEFAULT_IDLE_TTL_MS: u64 = 600_000;
/// Default quiet time after an acquisition before the pool refills.
pub const DEFAULT_QUIET_MS: u64 = 100;

/// Sizing of one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Idle items kept ready.
    pub min_idle: usize,
    /// Most items at once, idle plus being created (`>= min_idle`).
    pub max: usize,
    /// Idle items older than this are replaced (default [`DEFAULT_IDLE_TTL_MS`]).
    pub idle_ttl_ms: u64,
    /// Refills wait until no acquisition came for this long (default
    /// [`DEFAULT_QUIET_MS`]; 0: refill at once)...
    pub quiet_ms: u64,
    /// ...unless the pool holds this many idle items or fewer (default a quarter of
    /// `min_idle`): then it refills at once.
    pub low_water: usize,
    /// Most creations in progress at once (default: no bound; at least 1).
    pub max_creating: usize,
}

impl PoolConfig {
    /// `min_idle` ready, at most `max` (raised to `min_idle` when lower).
    pub fn new(min_idle: usize, max: usize) -> PoolConfig {
        PoolConfig {
            min_idle,
            max: max.max(min_idle),
            idle_ttl_ms: DEFAULT_IDLE_TTL_MS,
            quiet_ms: DEFAULT_QUIET_MS,
            low_water: min_idle / 4,
            max_creating: usize::MAX,
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
    /// The last acquisition, for the pacing of refills.
    last_acquired_ms: Option<u64>,
    /// A wake-up the daemon was asked for ([`Pool::wake_at`]) and has not reported
    /// ([`Pool::woken`]).
    wake_armed: bool,
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
            last_acquired_ms: None,
            wake_armed: false,
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
    /// hit, or counts a miss. An item is handed out once; it never comes back. Either
    /// way refills wait until acquisitions stop for [`PoolConfig::quiet_ms`] (or the
    /// pool is down to its low-water mark).
    pub fn acquire(&mut self, now_ms: u64) -> Option<T> {
        self.last_acquired_ms = Some(now_ms);
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

    /// How many creations to start now; they are counted as in progress. None while
    /// refills are deferred ([`Pool::wake_at`] says until when), at most
    /// [`PoolConfig::max_creating`] in progress: ask again when one ends.
    pub fn to_create(&mut self, now_ms: u64) -> usize {
        if self.draining || now_ms < self.retry_at_ms || self.deferred_until(now_ms).is_some() {
            return 0;
        }
        let n = self.wanted();
        // After failures, one attempt at a time until one succeeds.
        let n = if self.failing > 0 { n.min(1) } else { n };
        let n = n.min(
            self.config
                .max_creating
                .max(1)
                .saturating_sub(self.creating),
        );
        self.creating += n;
        n
    }

    /// Creations missing to reach `min_idle` within `max`.
    fn wanted(&self) -> usize {
        let have = self.idle.len() + self.creating;
        let want = self.config.min_idle.saturating_sub(have);
        let room = self.config.max.saturating_sub(have);
        want.min(room)
    }

    /// Until when refills wait for acquisitions to stop, if they do now: the pool
    /// wants creations, holds more than its low-water mark, and the last acquisition
    /// is less than the quiet time ago.
    fn deferred_until(&self, now_ms: u64) -> Option<u64> {
        let until = self.last_acquired_ms? + self.config.quiet_ms;
        (now_ms < until && self.idle.len() > self.config.low_water && self.wanted() > 0)
            .then_some(until)
    }

    /// When to call [`Pool::to_create`] again because refills are deferred now, if the
    /// daemon is to set a timer for it: `None` when they are not deferred or a
    /// wake-up asked for earlier has not been reported by [`Pool::woken`] yet (one
    /// timer per pool at a time; each acquisition only moves the time later, so a
    /// timer that fires early asks for the next one).
    pub fn wake_at(&mut self, now_ms: u64) -> Option<u64> {
        if self.wake_armed || self.draining {
            return None;
        }
        let at = self.deferred_until(now_ms)?;
        self.wake_armed = true;
        Some(at)
    }

    /// The timer [`Pool::wake_at`] asked for fired; call [`Pool::to_create`] next.
    pub fn woken(&mut self) {
        self.wake_armed = false;
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
        assert_eq!(p.acquire(3), Some(2), "newest first: most lifetime left");
        assert_eq!(p.acquire(3), Some(1));
        assert_eq!(p.acquire(3), None);
        let s = p.stats();
        assert_eq!((s.hits, s.misses, s.in_use, s.idle), (2, 1, 2, 0));
        assert_eq!(p.to_create(3), 2, "refills to the minimum");
        p.release();
        assert_eq!(p.stats().in_use, 1);
    }

    #[test]
    fn never_exceeds_max() {
        let mut p: Pool<u32> = Pool::new(PoolConfig {
            idle_ttl_ms: 1000,
            ..PoolConfig::new(4, 4)
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
            idle_ttl_ms: 100,
            ..PoolConfig::new(2, 2)
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
        assert_eq!(p.acquire(0), Some(5));
        p.acquired_broken();
        assert_eq!(p.stats().hits, 0);
    }

    /// A pool of `min` filled to `min`, refills deferred for 100 ms after an
    /// acquisition unless at most `low` are idle, at most `max_creating` creations at once.
    fn paced(min: usize, low: usize, max_creating: usize) -> Pool<u32> {
        let mut p = Pool::new(PoolConfig {
            quiet_ms: 100,
            low_water: low,
            max_creating,
            ..PoolConfig::new(min, min)
        });
        let mut started = 0;
        while p.stats().idle < min {
            let n = p.to_create(0);
            for _ in 0..n {
                p.created(1000 + started, 0);
                started += 1;
            }
        }
        p
    }

    #[test]
    fn refills_wait_until_acquisitions_stop() {
        let mut p = paced(8, 2, usize::MAX);
        assert_eq!(p.acquire(1000), Some(1007));
        assert_eq!(p.to_create(1000), 0, "an acquisition just came");
        assert_eq!(
            p.wake_at(1000),
            Some(1100),
            "ask again after the quiet time"
        );
        assert_eq!(p.wake_at(1000), None, "one timer at a time");
        p.acquire(1050);
        assert_eq!(p.to_create(1050), 0);
        assert_eq!(p.wake_at(1050), None, "the timer for 1100 is still armed");
        // The timer fires: still within 100 ms of the last acquisition.
        p.woken();
        assert_eq!(p.to_create(1100), 0);
        assert_eq!(p.wake_at(1100), Some(1150), "the next timer");
        p.woken();
        assert_eq!(p.to_create(1150), 2, "quiet: refill both");
        assert_eq!(p.wake_at(1150), None, "nothing deferred");
        assert_eq!(p.stats().creating, 2);
    }

    #[test]
    fn the_low_water_mark_refills_at_once() {
        let mut p = paced(8, 2, usize::MAX);
        for t in 0..5 {
            p.acquire(1000 + t);
        }
        assert_eq!(p.to_create(1005), 0, "3 idle: above the mark");
        p.acquire(1006);
        assert_eq!(p.stats().idle, 2);
        assert_eq!(p.wake_at(1006), None, "not deferred");
        assert_eq!(
            p.to_create(1006),
            6,
            "at the mark: everything missing, at once"
        );
        // Quiet time zero: no deferral at all.
        let mut q = Pool::new(PoolConfig {
            quiet_ms: 0,
            ..PoolConfig::new(4, 4)
        });
        assert_eq!(q.to_create(0), 4);
        for i in 0..4 {
            q.created(i, 0);
        }
        q.acquire(10);
        assert_eq!(q.to_create(10), 1);
    }

    #[test]
    fn creations_in_progress_are_bounded() {
        let mut p: Pool<u32> = Pool::new(PoolConfig {
            max_creating: 2,
            ..PoolConfig::new(5, 5)
        });
        assert_eq!(p.to_create(0), 2);
        assert_eq!(p.to_create(0), 0, "two in progress already");
        p.created(1, 0);
        assert_eq!(p.to_create(0), 1, "one ended, one more starts");
        p.create_failed(0);
        assert_eq!(
            p.to_create(RETRY_BASE_MS),
            1,
            "after a failure, one at a time"
        );
        p.created(2, 0);
        p.created(3, 0);
        assert_eq!(p.to_create(RETRY_BASE_MS), 2);
        p.created(4, 0);
        p.created(5, 0);
        assert_eq!(p.to_create(RETRY_BASE_MS), 0, "full");
        assert_eq!(p.stats().idle, 5);
        let mut zero: Pool<u32> = Pool::new(PoolConfig {
            max_creating: 0,
            ..PoolConfig::new(1, 1)
        });
        assert_eq!(zero.to_create(0), 1, "a bound of 0 is taken as 1");
    }

    #[test]
    fn a_drained_pool_asks_for_no_wake_up() {
        let mut p = paced(4, 0, usize::MAX);
        p.acquire(0);
        p.drain();
        assert_eq!(p.wake_at(0), None);
        assert_eq!(p.to_create(1000), 0);
    }

    /// A burst of 50 acquisitions, 3 ms apart, from a pool of 50 that creates at most
    /// two at once (each takes 20 ms), driven as the daemon does: `to_create` after
    /// each acquisition and each end of a creation, a timer when `wake_at` asks.
    #[test]
    fn after_a_burst_the_pool_refills_fully_with_bounded_creations() {
        let mut p = paced(50, 12, 2);
        let mut creating: Vec<u64> = Vec::new(); // end times of creations in progress
        let mut timer: Option<u64> = None;
        let mut next_item = 5000;
        let mut first_start = None;
        let mut handed = 0;
        let mut start = |p: &mut Pool<u32>, now: u64, creating: &mut Vec<u64>| {
            let n = p.to_create(now);
            for _ in 0..n {
                creating.push(now + 20);
            }
            if n > 0 && first_start.is_none() {
                first_start = Some(now);
            }
            assert!(creating.len() <= 2, "at most two creations at once");
            assert_eq!(p.stats().creating, creating.len());
        };
        for now in 0..2000u64 {
            if now % 3 == 0 && now < 150 {
                assert!(p.acquire(now).is_some(), "the pool never runs empty");
                handed += 1;
                start(&mut p, now, &mut creating);
            }
            while let Some(i) = creating.iter().position(|&end| end == now) {
                creating.swap_remove(i);
                assert_eq!(p.created(next_item, now), None);
                next_item += 1;
                start(&mut p, now, &mut creating);
            }
            if timer == Some(now) {
                timer = None;
                p.woken();
                start(&mut p, now, &mut creating);
            }
            if let Some(at) = p.wake_at(now) {
                assert!(timer.is_none(), "one timer at a time");
                timer = Some(at);
            }
        }
        assert_eq!(handed, 50);
        // The mark (12 idle) is reached at the 38th acquisition (t = 111 ms), before
        // the burst's last one (t = 147) and the quiet time after it.
        assert_eq!(first_start, Some(111));
        let s = p.stats();
        assert_eq!((s.idle, s.creating, s.hits, s.in_use), (50, 0, 50, 50));
        assert_eq!(timer, None);
    }
}
