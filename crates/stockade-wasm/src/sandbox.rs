//! Live sandboxes: their entries, lookup, and the end of each (destroy, lifetime,
//! owner death).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use stockade_core::{Error, Result, SandboxInfo, ValidatedSpec};
use tokio::sync::{Semaphore, watch};

use crate::module::ModuleEntry;
use crate::provider::Inner;
use crate::quota::{MemoryBudget, TmpQuota};
use crate::{WasmProvider, lock};

/// A guest directory backed by a host directory.
#[derive(Clone, Debug)]
pub(crate) struct Preopen {
    pub(crate) guest: String,
    pub(crate) host: PathBuf,
    pub(crate) writable: bool,
}

/// A live sandbox.
pub(crate) struct SandboxEntry {
    pub(crate) info: SandboxInfo,
    pub(crate) spec: ValidatedSpec,
    pub(crate) module: Arc<ModuleEntry>,
    /// This sandbox's host directory (holds `tmp/`); removed at destroy.
    pub(crate) dir: PathBuf,
    pub(crate) preopens: Vec<Preopen>,
    pub(crate) workdir: String,
    pub(crate) quota: Arc<TmpQuota>,
    pub(crate) memory: Arc<MemoryBudget>,
    pub(crate) exec_slots: Arc<Semaphore>,
    pub(crate) expires_at: Instant,
    /// Set when the sandbox is destroyed: running execs stop.
    pub(crate) dead: watch::Sender<bool>,
    pub(crate) dead_flag: Arc<AtomicBool>,
}

impl Drop for SandboxEntry {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn new_id() -> String {
    format!("wasm-{}", stockade_core::host::random_hex(6))
}

pub(crate) fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl WasmProvider {
    pub(crate) fn sandbox(&self, id: &str) -> Result<Arc<SandboxEntry>> {
        lock(&self.inner.sandboxes)
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                kind: "sandbox",
                id: id.to_string(),
            })
    }

    /// The host directory behind a sandbox's `/tmp` (for tests and diagnostics).
    pub fn tmp_host_path(&self, id: &str) -> Result<PathBuf> {
        Ok(self.sandbox(id)?.dir.join("tmp"))
    }

    /// Bytes used in a sandbox's `/tmp` and its cap.
    pub fn tmp_usage(&self, id: &str) -> Result<(u64, u64)> {
        let sb = self.sandbox(id)?;
        Ok((sb.quota.used(), sb.quota.cap()))
    }

    /// Waits until sandbox `id` has ended (destroyed, its lifetime over, its owner
    /// gone); at once when there is no such sandbox.
    pub async fn ended(&self, id: &str) {
        let Ok(sb) = self.sandbox(id) else {
            return;
        };
        let mut dead = sb.dead.subscribe();
        drop(sb);
        let _ = dead.wait_for(|d| *d).await;
    }

    pub(crate) fn end_sandbox(&self, id: &str) -> Option<Arc<SandboxEntry>> {
        let sb = lock(&self.inner.sandboxes).remove(id)?;
        sb.dead_flag
            .store(true, std::sync::atomic::Ordering::Release);
        let _ = sb.dead.send(true);
        let _ = std::fs::remove_dir_all(&sb.dir);
        Some(sb)
    }

    /// This process's directory of sandbox directories.
    pub(crate) fn process_dir(&self) -> PathBuf {
        self.inner
            .config
            .scratch_dir
            .join(std::process::id().to_string())
    }
}

/// Ends a sandbox at its lifetime or when its owner process dies. Holds only a weak
/// reference, so a dropped provider is not kept alive by its sandboxes' timers.
pub(crate) async fn watch_lifetime(
    provider: Weak<Inner>,
    id: String,
    expires_at: Instant,
    owner: Option<u32>,
    mut dead: watch::Receiver<bool>,
) {
    let deadline = tokio::time::Instant::from_std(expires_at);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = dead.wait_for(|d| *d) => return,
            _ = tokio::time::sleep(Duration::from_secs(1)), if owner.is_some() => {
                if owner.is_some_and(|p| !pid_alive(p)) {
                    break;
                }
            }
        }
    }
    if let Some(inner) = provider.upgrade() {
        WasmProvider { inner }.end_sandbox(&id);
    }
}
