//! Named sessions of a tenant: a workspace under the daemon's home per tenant, and a
//! sandbox on it while in use (recorded like any handed-out sandbox).

use std::collections::BTreeMap;

use stockade::{Result, SandboxInfo, SandboxSpec};

use super::entry::{Entry, State};
use super::{Daemon, check_session_name, now_ms};
use crate::store::SandboxRecord;

impl Daemon {
    fn sessions(&self, tenant: &str) -> Result<stockade::SessionManager> {
        let (_, p) = self.provider("")?;
        let mut cfg = stockade::SessionConfig::new(self.home.join("tenants").join(tenant));
        cfg.spec = self.labelled(SandboxSpec::default(), tenant);
        Ok(stockade::SessionManager::new(p, cfg))
    }

    /// The session's sandbox (created on its workspace when none is live).
    pub async fn session_get(&self, tenant: &str, name: &str) -> Result<SandboxInfo> {
        check_session_name(name)?;
        let spec = SandboxSpec::default();
        self.check_spec(tenant, self.provider("")?.1.as_ref(), &spec)?;
        let _slot = self
            .reserve_after_destroys(tenant, crate::admission::Usage::of(&spec))
            .await?;
        let sb = self.sessions(tenant)?.get_or_create(name).await?;
        let info = sb.info().clone();
        let known = self.lock().entries.contains_key(&info.id);
        if !known {
            let rec = SandboxRecord {
                id: info.id.clone(),
                tenant: tenant.to_string(),
                provider: self.default_provider.clone(),
                spec: info.spec.clone(),
                template: None,
                idle: false,
                env: BTreeMap::new(),
                workdir: None,
                created_at_ms: info.created_at_ms,
                expires_at_ms: info.expires_at_ms,
                idle_timeout_ms: None,
                owner_pid: None,
                destroying: false,
                paused_at_ms: None,
            };
            self.save(&rec)?;
            self.lock()
                .entries
                .entry(rec.id.clone())
                .or_insert_with(|| Entry::new(rec, State::InUse, now_ms()));
        }
        Ok(info)
    }

    async fn session_sandbox(&self, tenant: &str, name: &str) -> Result<Option<String>> {
        Ok(self
            .sessions(tenant)?
            .list()
            .await?
            .into_iter()
            .find(|s| s.name == name)
            .and_then(|s| s.sandbox_id))
    }

    /// Destroys the session's sandbox, keeps its workspace.
    pub async fn session_release(&self, tenant: &str, name: &str) -> Result<()> {
        check_session_name(name)?;
        let id = self.session_sandbox(tenant, name).await?;
        let claimed = self.claim_session(tenant, id.as_deref());
        let done = self.sessions(tenant)?.release(name).await;
        self.session_ended(claimed, &done);
        done
    }

    /// Destroys the session's sandbox and workspace.
    pub async fn session_delete(&self, tenant: &str, name: &str) -> Result<()> {
        check_session_name(name)?;
        let id = self.session_sandbox(tenant, name).await?;
        let claimed = self.claim_session(tenant, id.as_deref());
        let done = self.sessions(tenant)?.delete(name).await;
        self.session_ended(claimed, &done);
        done
    }

    /// Claims the session's sandbox before the session manager destroys it, so the
    /// reaper never takes it for one that vanished.
    fn claim_session(&self, tenant: &str, id: Option<&str>) -> Option<String> {
        let id = id?;
        self.lock()
            .claim(id, |e| e.state == State::InUse && e.record.tenant == tenant)
            .map(|r| r.id)
    }

    /// Forgets the claimed sandbox once the session manager destroyed it, or puts
    /// it back when that failed.
    fn session_ended(&self, claimed: Option<String>, done: &Result<()>) {
        let Some(id) = claimed else { return };
        if done.is_ok() {
            self.lock().remove(&id);
            self.forget(&id);
        } else {
            self.lock().unclaim(&id);
        }
    }

    /// The tenant's sessions. A tenant is told where its workspace is inside its
    /// sandboxes, not where the daemon keeps it on the host.
    pub async fn session_list(&self, tenant: &str) -> Result<Vec<stockade::SessionInfo>> {
        let mut list = self.sessions(tenant)?.list().await?;
        if self.profile(tenant).is_some() {
            for s in &mut list {
                s.workspace = stockade::WORKSPACE_TARGET.into();
            }
        }
        Ok(list)
    }
}
