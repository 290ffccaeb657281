//! E2B's lifecycle of a sandbox: pause and resume (through the daemon's cgroup
//! freezer), what its timeout does, and whether a request wakes it.

use crate::state::{E2b, MAX_TIMEOUT_SECS, Sbx};

/// E2B's lifecycle of a sandbox (`autoPause`, `autoResume` at create).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// At its timeout it is paused (and kept) instead of killed.
    pub pause_on_timeout: bool,
    /// While paused, a request to it (envd, the interpreter, a port) resumes it.
    pub auto_resume: bool,
}

impl E2b {
    /// Pauses the tenant's sandbox through the daemon (its cgroup freezer); its E2B
    /// timeout stops. `Ok(false)`: it was paused already.
    pub async fn pause(&self, s: &Sbx) -> stockade::Result<bool> {
        let _one = s.freezing.lock().await;
        if s.paused_at().is_some() {
            return Ok(false);
        }
        self.daemon.pause(&s.tenant, &s.daemon_id).await?;
        *crate::state::lock(&s.paused_at_ms) = Some(stockade::now_ms());
        Ok(true)
    }

    /// Resumes `s` when it is paused and traffic may wake it (`autoResume`), with the
    /// timeout it was created with. A failed resume is left for the call to meet.
    pub async fn wake(&self, s: &Sbx) {
        if s.lifecycle.auto_resume && s.paused_at().is_some() {
            match self.resume(s, Some(s.timeout_secs)).await {
                Ok(_) => tracing::info!(sandbox = %s.id, "resumed by a request (autoResume)"),
                Err(e) => tracing::warn!(sandbox = %s.id, "autoResume failed: {e}"),
            }
        }
    }

    /// Resumes the tenant's paused sandbox; its timeout runs again for what was
    /// left of it at the pause, or `timeout_secs` when that is longer. `Ok(false)`:
    /// it was running.
    pub async fn resume(&self, s: &Sbx, timeout_secs: Option<u64>) -> stockade::Result<bool> {
        let _one = s.freezing.lock().await;
        let Some(at) = s.paused_at() else {
            return Ok(false);
        };
        self.daemon.resume(&s.tenant, &s.daemon_id).await?;
        let now = stockade::now_ms();
        let left = s.end_ms().saturating_sub(at);
        let asked = timeout_secs.map_or(0, |t| t.min(MAX_TIMEOUT_SECS) * 1000);
        s.set_end_ms(now + left.max(asked));
        *crate::state::lock(&s.paused_at_ms) = None;
        *crate::state::lock(&s.cpu_sample) = None;
        Ok(true)
    }
}
