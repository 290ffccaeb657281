//! Pause, resume and fork of a tenant's sandbox.
//!
//! A paused sandbox stays `InUse` (never back in a pool, never health-checked as a
//! warm one); its record carries `paused_at_ms`, committed before the answer so a
//! daemon that restarts adopts it paused instead of destroying it for not answering
//! a ping. Its lifetime and idle timeout do not run while it is paused: the reaper
//! skips both, and resume moves the expiry by the pause's length (as E2B's timeout).
//! A dead owner still ends it.

use stockade::{CreateOptions, Error, Result, RunState, SandboxInfo};

use super::entry::{Entry, State};
use super::{Daemon, now_ms};
use crate::store::SandboxRecord;

/// The most copies one fork may ask for.
pub const MAX_FORK: u32 = 64;

impl Daemon {
    /// Pauses a sandbox of the tenant (another tenant's is not found).
    pub async fn pause(&self, tenant: &str, id: &str) -> Result<()> {
        let rec = self.record(tenant, id)?;
        if rec.paused_at_ms.is_some() {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is already paused; resume it"
            )));
        }
        let (_, p) = self.provider(&rec.provider)?;
        p.pause(id).await?;
        let now = now_ms();
        let updated = {
            let mut g = self.lock();
            g.entries.get_mut(id).map(|e| {
                e.record.paused_at_ms = Some(now);
                e.record.clone()
            })
        };
        if let Some(r) = updated {
            self.save(&r)?;
        }
        tracing::info!(sandbox = id, tenant, "paused");
        Ok(())
    }

    /// Resumes a paused sandbox of the tenant; its expiry moves by the time paused.
    pub async fn resume(&self, tenant: &str, id: &str) -> Result<()> {
        let rec = self.record(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        p.resume(id).await?;
        let now = now_ms();
        let updated = {
            let mut g = self.lock();
            g.entries.get_mut(id).map(|e| {
                if let Some(at) = e.record.paused_at_ms.take() {
                    e.record.expires_at_ms = e
                        .record
                        .expires_at_ms
                        .saturating_add(now.saturating_sub(at));
                }
                e.last_used_ms = now;
                e.record.clone()
            })
        };
        if let Some(r) = updated {
            self.save(&r)?;
        }
        tracing::info!(sandbox = id, tenant, "resumed");
        Ok(())
    }

    /// Starts `count` copies of a paused sandbox of the tenant, each a sandbox of the
    /// tenant's own (counted against its quota), with the source's spec, late-bound
    /// env and workdir, and what was left of its lifetime.
    pub async fn fork(&self, tenant: &str, id: &str, count: u32) -> Result<Vec<SandboxInfo>> {
        if count == 0 || count > MAX_FORK {
            return Err(Error::InvalidRequest(format!(
                "fork count {count} is out of range; give 1 to {MAX_FORK}"
            )));
        }
        let rec = self.record(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        let mut slots = Vec::new();
        for _ in 0..count {
            slots.push(self.reserve_after_destroys(tenant).await?);
        }
        let infos = p.fork(id, count, CreateOptions { owner_pid: None }).await?;
        let now = now_ms();
        let left = match rec.paused_at_ms {
            Some(at) => rec.expires_at_ms.saturating_sub(at),
            None => rec.expires_at_ms.saturating_sub(now),
        };
        let mut out = Vec::new();
        let mut infos = infos.into_iter();
        while let Some(info) = infos.next() {
            let new = SandboxRecord {
                id: info.id.clone(),
                tenant: tenant.to_string(),
                provider: rec.provider.clone(),
                spec: rec.spec.clone(),
                template: None,
                idle: false,
                env: rec.env.clone(),
                workdir: rec.workdir.clone(),
                created_at_ms: info.created_at_ms,
                expires_at_ms: now + left,
                idle_timeout_ms: rec.idle_timeout_ms,
                owner_pid: None,
                destroying: false,
                paused_at_ms: (info.state == RunState::Paused).then_some(now),
            };
            if let Err(e) = self.save(&new) {
                // Not recorded, so nobody could reach or reap them: gone at once.
                for i in std::iter::once(info).chain(infos) {
                    let _ = p.destroy(&i.id).await;
                }
                return Err(e);
            }
            let mut e = Entry::new(new.clone(), State::InUse, now);
            e.last_used_ms = now;
            self.lock().entries.insert(new.id.clone(), e);
            tracing::info!(sandbox = %new.id, from = id, tenant, "forked");
            out.push(self.present(info, &new));
        }
        drop(slots);
        Ok(out)
    }
}
