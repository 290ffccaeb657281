//! A create call: the spec's checks, the tenant's quota slot, then a warm sandbox
//! from a pool of its template (`acquire.rs`) or a cold creation on the provider.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use stockade::{CheckedSpec, CreateOptions, Error, Provider, Result, SandboxInfo, SandboxSpec};

use super::entry::{Entry, PoolKey, ReapReason, State};
use super::made::{Made, MountMaker};
use super::{
    DAEMON_LABEL, Daemon, QUOTA_POLL, QUOTA_WAIT_FOR_DESTROYS, TENANT_LABEL, check_image, internal,
    now_ms, template_of_kind,
};
use crate::admission::{PROFILE_LABEL, Profile, Usage};
use crate::auth::LOCAL_TENANT;
use crate::store::SandboxRecord;

/// Releases a creation slot on drop.
pub(super) struct Pending<'a> {
    d: &'a Daemon,
    tenant: String,
    usage: Usage,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut g = self.d.lock();
        if let Some(n) = g.pending.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
        }
        if let Some(u) = g.pending_usage.get_mut(&self.tenant) {
            u.memory_bytes = u.memory_bytes.saturating_sub(self.usage.memory_bytes);
            u.cpus = (u.cpus - self.usage.cpus).max(0.0);
        }
    }
}

/// What a caller asked for, checked, with what the daemon binds to it.
pub(super) struct Request {
    pub tenant: String,
    pub provider: String,
    pub spec: SandboxSpec,
    pub spec_json: serde_json::Value,
    pub owner_pid: Option<u32>,
    /// What makes the host mounts the daemon itself gives this sandbox (not the
    /// tenant's: they skip the tenant's mount policy).
    pub maker: Option<Arc<dyn MountMaker>>,
}

impl Request {
    /// When the caller's lifetime ends if it starts now.
    pub fn expires_at_ms(&self) -> u64 {
        now_ms() + self.spec.timeout_secs * 1000
    }

    pub fn idle_timeout_ms(&self) -> Option<u64> {
        self.spec.idle_timeout_secs.map(|s| s * 1000)
    }
}

impl Daemon {
    /// Creates a sandbox for `tenant`, warm from a pool of its template when there
    /// is one (unless `no_pool`). Returns the info and whether it was warm.
    pub async fn create(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        owner_pid: Option<u32>,
        no_pool: bool,
    ) -> Result<(SandboxInfo, bool)> {
        self.create_inner(tenant, provider, spec, owner_pid, no_pool, None)
            .await
    }

    /// [`Daemon::create`] for a sandbox that also gets host mounts in-process code
    /// of the daemon makes and vouches for (a per-sandbox home directory, say):
    /// `maker` makes them for each sandbox, cold or warm, and releases them when the
    /// sandbox is gone; they are added after the tenant's mounts are checked and
    /// staged, so the tenant's mount policy does not apply to them. The sandbox comes
    /// from the tenant's pool of the spec and `maker`'s kind when there is one
    /// ([`Daemon::pool_warm_made`]), never from a plain pool of the spec.
    pub async fn create_made(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        owner_pid: Option<u32>,
        maker: Arc<dyn MountMaker>,
    ) -> Result<(SandboxInfo, bool)> {
        self.create_inner(tenant, provider, spec, owner_pid, false, Some(maker))
            .await
    }

    async fn create_inner(
        self: &Arc<Self>,
        tenant: &str,
        provider: &str,
        spec: SandboxSpec,
        owner_pid: Option<u32>,
        no_pool: bool,
        maker: Option<Arc<dyn MountMaker>>,
    ) -> Result<(SandboxInfo, bool)> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                what: "stockaded".into(),
                reason: "it is shutting down".into(),
                fix: "retry when it is back".into(),
            });
        }
        let (pname, p) = self.provider(provider)?;
        self.check_spec(tenant, p.as_ref(), &spec)?;
        let _slot = self
            .reserve_after_destroys(tenant, Usage::of(&spec))
            .await?;
        self.charge_image(tenant, &pname, &spec).await?;
        let (template, _) = template_of_kind(&pname, &spec, maker.as_ref().map(|m| m.kind()));
        let key = PoolKey::new(tenant, &template);
        let mut spec_json = serde_json::to_value(&spec).map_err(internal)?;
        if let Some(p) = self.profile(tenant) {
            // What inspect shows: the profile that admitted it.
            spec_json["labels"][PROFILE_LABEL] = p.name.clone().into();
        }
        let req = Request {
            tenant: tenant.to_string(),
            spec_json,
            spec,
            provider: pname,
            owner_pid: owner_pid.filter(|_| self.limits.honour_owner_pid),
            maker,
        };
        if !no_pool {
            if let Some(info) = self.acquire(&p, &key, &req).await? {
                return Ok((info, true));
            }
            if self.lock().pools.contains_key(&key) {
                self.metrics.pool_misses.fetch_add(1, Ordering::Relaxed);
                self.refill(&key);
            }
        }
        self.create_cold(&p, req).await.map(|i| (i, false))
    }

    /// Creates a sandbox on the provider for the caller and records it as in use.
    async fn create_cold(&self, p: &Arc<dyn Provider>, req: Request) -> Result<SandboxInfo> {
        let labelled = self.labelled(req.spec.clone(), &req.tenant);
        let made = match &req.maker {
            Some(m) => Some(Made::make(m)?),
            None => None,
        };
        let own = made
            .as_ref()
            .map(|m| m.mounts().to_vec())
            .unwrap_or_default();
        let t0 = Instant::now();
        let info = match self.create_on(p, labelled, own).await {
            Ok(i) => i,
            Err(e) => {
                self.metrics.creates_failed.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        self.metrics.create_seconds.observe(t0.elapsed());
        self.metrics.creates_ok.fetch_add(1, Ordering::Relaxed);
        let rec = SandboxRecord {
            id: info.id.clone(),
            tenant: req.tenant.clone(),
            provider: req.provider.clone(),
            spec: req.spec_json.clone(),
            template: None,
            idle: false,
            env: BTreeMap::new(),
            workdir: None,
            created_at_ms: info.created_at_ms,
            expires_at_ms: req.expires_at_ms(),
            idle_timeout_ms: req.idle_timeout_ms(),
            owner_pid: req.owner_pid,
            destroying: false,
            paused_at_ms: None,
        };
        let mut entry = Entry::new(rec.clone(), State::Creating, now_ms());
        entry.made = made;
        self.lock().entries.insert(rec.id.clone(), entry);
        if let Err(e) = self.save(&rec) {
            self.destroy_quietly(p, &rec.id, ReapReason::Unsaved).await;
            return Err(e);
        }
        if let Some(e) = self.lock().entries.get_mut(&rec.id) {
            e.state = State::InUse;
            e.last_used_ms = now_ms();
        }
        tracing::info!(sandbox = %rec.id, tenant = %req.tenant, "created");
        Ok(self.present(info, &rec))
    }

    /// Creates on the provider, with the spec's host mounts staged when tenants'
    /// mounts are restricted (the provider never walks a tenant's path).
    pub(super) async fn create_on(
        &self,
        p: &Arc<dyn Provider>,
        spec: SandboxSpec,
        own_mounts: Vec<stockade::spec::Mount>,
    ) -> Result<SandboxInfo> {
        let (mut spec, staging) = self.limits.mounts.stage(self, spec)?;
        spec.mounts.extend(own_mounts);
        let v = CheckedSpec::new(spec.validate()?, p.as_ref())?;
        let info = p
            .create(
                v,
                CreateOptions {
                    owner_pid: self.limits.bound_to,
                },
            )
            .await?;
        staging.commit();
        Ok(info)
    }

    /// The profile that admits `tenant`: none for the daemon's one local caller
    /// (no tokens, no socket group; or the daemon's own uid on its socket).
    pub(super) fn profile(&self, tenant: &str) -> Option<&Profile> {
        (self.limits.tenants_untrusted && tenant != LOCAL_TENANT)
            .then(|| self.limits.admission.profile_of(tenant))
    }

    /// The checks a spec passes before anything is created: host mounts and images
    /// a tenant may name, the tenant's profile, validity, and what the provider can
    /// honour.
    pub(super) fn check_spec(
        &self,
        tenant: &str,
        provider: &dyn Provider,
        spec: &SandboxSpec,
    ) -> Result<()> {
        // Names only, checked before anything touches the file system.
        self.limits.mounts.check(spec)?;
        if self.limits.tenants_untrusted {
            check_image(provider.name(), spec.image.as_deref())?;
        }
        if let Some(profile) = self.profile(tenant) {
            profile.admit(provider.name(), spec)?;
        }
        self.check_network(&spec.network)?;
        let v = spec.clone().validate()?;
        provider.capabilities().check(provider.name(), &v)?;
        Ok(())
    }

    /// With tenants, an egress policy may not open the daemon host's private ranges
    /// (its LAN, its metadata service) to a sandbox: only names and public ranges.
    pub(super) fn check_network(&self, network: &stockade::spec::Network) -> Result<()> {
        let Some(p) = network.policy() else {
            return Ok(());
        };
        if !self.limits.tenants_untrusted {
            return Ok(());
        }
        // This host's own addresses and its LAN (connected networks, gateways,
        // resolvers), read now, whatever their range: a tenant's sandbox never opens
        // them (the sandbox's firewall fences them off unless a range opens them).
        let host: Vec<String> = stockade::linux::layout::read_host_addresses()
            .into_iter()
            .chain(stockade::linux::layout::read_host_networks())
            .collect();
        let errs = tenant_network_refusals(&p.allow, &host);
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidSpec(stockade::spec::SpecErrors(errs)))
        }
    }

    /// The spec with the labels naming this daemon and the tenant.
    pub(super) fn labelled(&self, mut spec: SandboxSpec, tenant: &str) -> SandboxSpec {
        spec.labels
            .insert(DAEMON_LABEL.into(), self.daemon_id.clone());
        spec.labels.insert(TENANT_LABEL.into(), tenant.into());
        if let Some(p) = self.profile(tenant) {
            spec.labels.insert(PROFILE_LABEL.into(), p.name.clone());
        }
        spec
    }

    /// Like [`Daemon::reserve`], but a create refused only because destroys already
    /// answered still hold their slots waits for those teardowns (up to
    /// [`QUOTA_WAIT_FOR_DESTROYS`]): destroy-then-create at the quota works as it
    /// did when a destroy answered only after its teardown.
    pub(super) async fn reserve_after_destroys(
        &self,
        tenant: &str,
        usage: Usage,
    ) -> Result<Pending<'_>> {
        let until = Instant::now() + QUOTA_WAIT_FOR_DESTROYS;
        loop {
            match self.reserve(tenant, usage) {
                Err(Error::LimitExceeded { .. })
                    if self.destroys_in_flight.load(Ordering::SeqCst) > 0
                        && Instant::now() < until =>
                {
                    tokio::time::sleep(QUOTA_POLL).await;
                }
                r => return r,
            }
        }
    }

    /// A creation slot of the tenant, refused past its quota, its profile's totals
    /// or the daemon's quota.
    pub(super) fn reserve(&self, tenant: &str, usage: Usage) -> Result<Pending<'_>> {
        let mut g = self.lock();
        if let Some(profile) = self.profile(tenant) {
            profile.admit_totals(usage, g.usage_of(tenant))?;
        }
        let live = g.live_of(tenant);
        if live >= self.limits.sandboxes_per_tenant {
            return Err(Error::LimitExceeded {
                what: format!("sandbox for tenant {tenant} ({live} live)"),
                limit: format!(
                    "{} live sandboxes per tenant",
                    self.limits.sandboxes_per_tenant
                ),
            });
        }
        let total = g.total();
        if total >= self.limits.sandboxes_total {
            return Err(Error::LimitExceeded {
                what: format!("sandbox on this daemon ({total} exist)"),
                limit: format!("{} sandboxes in all", self.limits.sandboxes_total),
            });
        }
        *g.pending.entry(tenant.to_string()).or_default() += 1;
        let u = g.pending_usage.entry(tenant.to_string()).or_default();
        *u = u.plus(usage);
        Ok(Pending {
            d: self,
            tenant: tenant.to_string(),
            usage,
        })
    }
}

/// What of a tenant's allowlist reaches where tenants may not: private, link-local
/// or loopback ranges, and `host` (the daemon host's addresses and networks).
fn tenant_network_refusals(allow: &[String], host: &[String]) -> Vec<stockade::spec::SpecError> {
    allow
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let r = stockade::spec::NetRule::parse(e).ok()?;
            let why = if r.opens_private() {
                "private, link-local or loopback addresses".to_string()
            } else {
                let h = host.iter().find(|h| r.overlaps(h))?;
                format!("this daemon's host or its network ({h})")
            };
            Some(stockade::spec::SpecError {
                field: format!("network.allow[{i}]"),
                message: format!(
                    "{} reaches {why}, which tenants of this daemon may not open; allow \
                     names or public ranges",
                    r.text
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_open_neither_private_ranges_nor_the_hosts_own() {
        // A host whose own address and LAN are public ranges (as on many servers).
        let host = ["198.51.100.2".to_string(), "198.51.100.0/24".to_string()];
        let allow: Vec<String> = [
            "pypi.org",
            "203.0.113.0/24:443",
            "198.51.100.2:8080",
            "198.51.100.0/30:22",
            "0.0.0.0/0",
            "10.1.2.3",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let errs = tenant_network_refusals(&allow, &host);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "network.allow[2]",
                "network.allow[3]",
                "network.allow[4]",
                "network.allow[5]"
            ],
            "{errs:?}"
        );
        assert!(
            errs[0]
                .message
                .contains("this daemon's host or its network (198.51.100.2)"),
            "{errs:?}"
        );
        assert!(errs[3].message.contains("private"), "{errs:?}");
    }
}
