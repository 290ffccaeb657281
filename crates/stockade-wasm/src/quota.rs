//! Caps that WASI itself does not have: the size and the number of entries of a
//! sandbox's `/tmp`, and one memory budget shared by all the execs of a sandbox.
//!
//! `/tmp` is a host directory, so the kernel would let the guest fill the host's
//! disk, or its inodes with empty files (which take no blocks). Every WASI call that
//! can allocate disk space or add an entry goes through [`TmpQuota::reserve`] first
//! (see `exec::add_quota_shims`): it charges a conservative estimate and, when the
//! estimate would pass a cap, measures what the directory really holds. What would
//! pass a cap fails with `ENOSPC` inside the guest, as on a full tmpfs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use wasmtime::ResourceLimiter;

use crate::lock;

/// Disk block size used for estimates.
const BLOCK: u64 = 4096;

/// The caps of one sandbox's `/tmp`: bytes on disk and entries.
#[derive(Debug)]
pub(crate) struct TmpQuota {
    root: PathBuf,
    cap: u64,
    max_entries: u64,
    state: Mutex<Usage>,
}

#[derive(Debug, Default)]
struct Usage {
    /// What the directory held when last measured.
    measured: Measured,
    /// Upper bound of the bytes added since.
    pending: u64,
    /// Upper bound of the entries added since.
    pending_entries: u64,
}

/// What a directory holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Measured {
    /// Bytes allocated on disk.
    pub bytes: u64,
    /// Files, directories and links below it (not itself).
    pub entries: u64,
}

impl TmpQuota {
    /// A quota of `cap` bytes and `max_entries` entries over the directory `root`
    /// (empty at start).
    pub fn new(root: PathBuf, cap: u64, max_entries: u64) -> TmpQuota {
        TmpQuota {
            root,
            cap,
            max_entries,
            state: Mutex::new(Usage::default()),
        }
    }

    /// The cap in bytes.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The cap in entries.
    pub fn max_entries(&self) -> u64 {
        self.max_entries
    }

    /// What a write of `bytes` may add on disk at most (partial blocks at both ends).
    pub fn write_cost(bytes: u64) -> u64 {
        bytes.div_ceil(BLOCK) * BLOCK + BLOCK
    }

    /// What creating a directory entry may add on disk at most.
    pub fn entry_cost() -> u64 {
        BLOCK
    }

    /// Charges `bytes` and `entries`; false when they do not fit under the caps.
    pub fn reserve(&self, bytes: u64, entries: u64) -> bool {
        let mut u = lock(&self.state);
        let fits = |u: &Usage| {
            u.measured.bytes + u.pending + bytes <= self.cap
                && u.measured.entries + u.pending_entries + entries <= self.max_entries
        };
        if !fits(&u) {
            u.measured = measure(&self.root);
            u.pending = 0;
            u.pending_entries = 0;
            if !fits(&u) {
                return false;
            }
        }
        u.pending += bytes;
        u.pending_entries += entries;
        true
    }

    /// Bytes the directory holds now.
    pub fn used(&self) -> u64 {
        measure(&self.root).bytes
    }
}

/// Bytes allocated on disk under `dir` (like `du`) and the entries there, without
/// following symlinks.
fn measure(dir: &Path) -> Measured {
    use std::os::unix::fs::MetadataExt;
    let mut total = Measured::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            total.entries += 1;
            let Ok(md) = entry.metadata() else { continue };
            total.bytes += md.blocks() * 512;
            if md.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// A memory budget shared by every exec of one sandbox: the spec's memory cap holds
/// for the sandbox as a whole, as a cgroup's would.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    cap: u64,
    used: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `cap` bytes.
    pub fn new(cap: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            cap,
            used: AtomicU64::new(0),
        })
    }

    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(bytes).filter(|n| *n <= self.cap)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// The memory limiter of one exec's store: charges linear memory to the sandbox's
/// budget and remembers whether a growth was refused (the exec then ran out of
/// memory, which its outcome reports).
#[derive(Debug)]
pub(crate) struct Limiter {
    budget: Arc<MemoryBudget>,
    held: u64,
    refused: Arc<AtomicBool>,
}

/// Most table elements one exec may have (tables hold function references; this is
/// far above what compilers emit, and bounds the host memory they take).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl Limiter {
    /// A limiter charging `budget`; `refused` is set when a growth is refused.
    pub fn new(budget: Arc<MemoryBudget>, refused: Arc<AtomicBool>) -> Limiter {
        Limiter {
            budget,
            held: 0,
            refused,
        }
    }
}

impl Drop for Limiter {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let delta = desired.saturating_sub(current) as u64;
        if self.budget.take(delta) {
            self.held += delta;
            Ok(true)
        } else {
            self.refused.store(true, Ordering::Release);
            Ok(false)
        }
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        4
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_measures_before_refusing() {
        let dir = tempfile::tempdir().unwrap();
        let q = TmpQuota::new(dir.path().to_path_buf(), 64 << 10, 1000);
        // Estimates alone would pass the cap, but the directory is empty: allowed.
        for _ in 0..100 {
            assert!(q.reserve(8 << 10, 0));
        }
        std::fs::write(dir.path().join("big"), vec![1u8; 60 << 10]).unwrap();
        // Estimates still fit for a while; once they do not, the measurement sees
        // the big file and refuses.
        let mut granted = 0;
        while q.reserve(TmpQuota::write_cost(16 << 10), 0) {
            granted += 1;
            assert!(granted <= 3, "the cap must hold");
        }
        std::fs::remove_file(dir.path().join("big")).unwrap();
        assert!(q.reserve(TmpQuota::write_cost(16 << 10), 0));
    }

    #[test]
    fn entries_are_capped_even_when_they_take_no_space() {
        let dir = tempfile::tempdir().unwrap();
        let q = TmpQuota::new(dir.path().to_path_buf(), 1 << 30, 10);
        let mut made = 0;
        while q.reserve(0, 1) {
            std::fs::write(dir.path().join(format!("f{made}")), b"").unwrap();
            made += 1;
            assert!(made <= 10, "the entry cap must hold");
        }
        assert_eq!(made, 10);
        // Writes that add no entry still go through.
        assert!(q.reserve(TmpQuota::write_cost(100), 0));
        std::fs::remove_file(dir.path().join("f0")).unwrap();
        assert!(q.reserve(0, 1), "a freed entry can be used again");
    }

    #[test]
    fn budget_is_shared_and_returned() {
        let budget = MemoryBudget::new(100);
        let refused = Arc::new(AtomicBool::new(false));
        let mut a = Limiter::new(budget.clone(), refused.clone());
        let mut b = Limiter::new(budget.clone(), refused.clone());
        assert!(a.memory_growing(0, 60, None).unwrap());
        assert!(!b.memory_growing(0, 60, None).unwrap());
        assert!(refused.load(Ordering::Acquire));
        drop(a);
        assert!(b.memory_growing(0, 60, None).unwrap());
    }
}
