//! Pause, resume and fork of a tenant's sandbox.
//!
//! A paused sandbox stays `InUse` (never back in a pool, never health-checked as a
//! warm one); its record carries `paused_at_ms`, committed before the answer so a
//! daemon that restarts adopts it paused instead of destroying it for not answering
//! a ping. Its lifetime and idle timeout do not run while it is paused: the reaper
//! skips both, and resume moves the expiry by the pause's length (as E2B's timeout).
//! A dead owner still ends it.

use stockade::{CreateOptions, Error, Result, RunState, SandboxInfo, SnapshotInfo};

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
            slots.push(
                self.reserve_after_destroys(tenant, crate::admission::Usage::of_json(&rec.spec))
                    .await?,
            );
        }
        let infos = p
            .fork(
                id,
                count,
                CreateOptions {
                    owner_pid: self.limits.bound_to,
                },
            )
            .await?;
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

/// The name tenant `tenant`'s snapshot `name` has on the provider: behind a tag of
/// the tenant (16 hex digits of its SHA-256), so one tenant's names never meet
/// another's and listing shows a tenant only its own.
fn scoped(tenant: &str, name: &str) -> String {
    format!("{}{name}", tenant_prefix(tenant))
}

fn tenant_prefix(tenant: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(tenant.as_bytes());
    let tag: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{tag}--")
}

/// The snapshot as its tenant knows it (its own name).
fn unscoped(tenant: &str, mut s: SnapshotInfo) -> Option<SnapshotInfo> {
    s.name = s.name.strip_prefix(&tenant_prefix(tenant))?.to_string();
    Some(s)
}

impl Daemon {
    /// Keeps a sandbox of the tenant as the tenant's named snapshot `name`. A running
    /// sandbox is paused while its state is saved and resumed after, so its record is
    /// unchanged; a paused one stays paused.
    pub async fn snapshot(&self, tenant: &str, id: &str, name: &str) -> Result<SnapshotInfo> {
        stockade::check_snapshot_name(name)?;
        let rec = self.record(tenant, id)?;
        let (_, p) = self.provider(&rec.provider)?;
        let s = p.snapshot(id, &scoped(tenant, name)).await.map_err(|e| {
            // The provider names the key it stores; the tenant knows its own name.
            rename_error(e, &scoped(tenant, name), name)
        })?;
        tracing::info!(sandbox = id, tenant, snapshot = name, "snapshot kept");
        unscoped(tenant, s).ok_or_else(|| Error::Internal("the snapshot lost its name".into()))
    }

    /// The tenant's named snapshots on every provider the daemon has built (and its
    /// default), by name. Providers without snapshots have none.
    pub async fn snapshots(&self, tenant: &str) -> Result<Vec<SnapshotInfo>> {
        let mut names = self.provider_names();
        names.push(String::new());
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for n in names {
            let (pname, p) = self.provider(&n)?;
            if !seen.insert(pname) {
                continue;
            }
            match p.snapshots().await {
                Ok(v) => out.extend(v.into_iter().filter_map(|s| unscoped(tenant, s))),
                Err(Error::Unavailable { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes the tenant's named snapshot `name` (another tenant's is not found).
    pub async fn remove_snapshot(&self, tenant: &str, name: &str) -> Result<()> {
        stockade::check_snapshot_name(name)?;
        let provider = self
            .snapshots(tenant)
            .await?
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.provider)
            .ok_or_else(|| Error::NotFound {
                kind: "snapshot",
                id: name.to_string(),
            })?;
        let (_, p) = self.provider(&provider)?;
        p.remove_snapshot(&scoped(tenant, name))
            .await
            .map_err(|e| rename_error(e, &scoped(tenant, name), name))?;
        tracing::info!(tenant, snapshot = name, "snapshot removed");
        Ok(())
    }

    /// Starts a sandbox of the tenant from its named snapshot `name` on `provider`
    /// (empty: the provider that keeps it), counted against its quota, with the
    /// snapshot's spec and lifetime.
    pub async fn create_from_snapshot(
        &self,
        tenant: &str,
        provider: &str,
        name: &str,
        owner_pid: Option<u32>,
    ) -> Result<SandboxInfo> {
        stockade::check_snapshot_name(name)?;
        let provider = if provider.is_empty() {
            self.snapshots(tenant)
                .await?
                .into_iter()
                .find(|s| s.name == name)
                .map(|s| s.provider)
                .ok_or_else(|| Error::NotFound {
                    kind: "snapshot",
                    id: name.to_string(),
                })?
        } else {
            provider.to_string()
        };
        let (pname, p) = self.provider(&provider)?;
        // The snapshot's spec is known once it runs: its sandbox counts in the
        // tenant's totals from then on, like every live one.
        let _slot = self
            .reserve_after_destroys(tenant, crate::admission::Usage::default())
            .await?;
        let info = p
            .create_from_snapshot(&scoped(tenant, name), CreateOptions { owner_pid: None })
            .await
            .map_err(|e| rename_error(e, &scoped(tenant, name), name))?;
        let now = now_ms();
        let rec = SandboxRecord {
            id: info.id.clone(),
            tenant: tenant.to_string(),
            provider: pname,
            spec: info.spec.clone(),
            template: None,
            idle: false,
            env: Default::default(),
            workdir: None,
            created_at_ms: info.created_at_ms,
            expires_at_ms: info.expires_at_ms,
            idle_timeout_ms: info
                .spec
                .get("idle_timeout_secs")
                .and_then(serde_json::Value::as_u64)
                .map(|s| s * 1000),
            owner_pid: owner_pid.filter(|_| self.limits.honour_owner_pid),
            destroying: false,
            paused_at_ms: None,
        };
        if let Err(e) = self.save(&rec) {
            let _ = p.destroy(&info.id).await;
            return Err(e);
        }
        let mut e = Entry::new(rec.clone(), State::InUse, now);
        e.last_used_ms = now;
        self.lock().entries.insert(rec.id.clone(), e);
        tracing::info!(sandbox = %rec.id, snapshot = name, tenant, "created from snapshot");
        Ok(self.present(info, &rec))
    }
}

/// An error about the stored key `key` as the tenant's `name`.
fn rename_error(e: Error, key: &str, name: &str) -> Error {
    match e {
        Error::NotFound { kind, id } if id == key => Error::NotFound {
            kind,
            id: name.to_string(),
        },
        Error::InvalidRequest(m) => Error::InvalidRequest(m.replace(key, name)),
        Error::PolicyDenied(m) => Error::PolicyDenied(m.replace(key, name)),
        Error::Unavailable { what, reason, fix } => Error::Unavailable {
            what: what.replace(key, name),
            reason: reason.replace(key, name),
            fix: fix.replace(key, name),
        },
        e => e,
    }
}
