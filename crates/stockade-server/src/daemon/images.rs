//! Tenants' image budgets: an image a tenant names that the host does not have yet is
//! pulled (and, for native, unpacked) by the daemon itself, through a store handle
//! capped at what is left of the tenant's budget, and what it added is charged to the
//! tenant in the state store. The provider then finds the image in place.

use std::sync::Arc;

use stockade::{Error, Result, SandboxSpec};
use stockade_image::Error as ImageError;

use super::{Daemon, internal};

impl Daemon {
    /// The image store providers read (under the daemon's home).
    pub fn image_store(&self) -> Result<stockade_image::Store> {
        Ok(stockade_image::Store::open(self.home.join("images"))?)
    }

    /// Records an image this daemon made for `tenant` (an E2B template build) as the
    /// tenant's own to run, by its manifest digest (`sha256:...`), and charges the
    /// `bytes` it added to the tenant's image budget: refused past the budget.
    pub fn own_image(&self, tenant: &str, digest: &str, bytes: u64) -> Result<()> {
        if self.profile(tenant).is_none() {
            return Ok(());
        }
        let budget = self.limits.tenant_image_bytes;
        let used = self.store.image_bytes(tenant).map_err(internal)?;
        if used.saturating_add(bytes) > budget {
            return Err(Error::LimitExceeded {
                what: format!(
                    "image {digest} for tenant {tenant} ({bytes} bytes more; it has added {used})"
                ),
                limit: format!(
                    "the image budget of {budget} bytes per tenant (the operator raises it \
                     with stockaded --tenant-image-bytes SIZE)"
                ),
            });
        }
        self.store
            .set_tenant_image(tenant, digest, digest)
            .map_err(internal)?;
        self.store
            .add_image_bytes(tenant, bytes)
            .map_err(internal)?;
        Ok(())
    }

    /// The tenant's lock for image pulls: one budgeted pull per tenant at a time, so
    /// two concurrent pulls cannot both spend what is left.
    fn image_lock(&self, tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self
            .image_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.entry(tenant.to_string()).or_default().clone()
    }

    /// Makes sure the spec's image is on the host, and the tenant's to run, before
    /// the provider is asked for it, charging what fetching and unpacking it adds to
    /// the tenant's image budget. An image the host has already costs nothing; a
    /// tenant runs one only when its profile shares it or it pulled it itself, else
    /// it is pulled again for the tenant (blobs the host has are not fetched again).
    pub(super) async fn charge_image(
        &self,
        tenant: &str,
        provider: &str,
        spec: &SandboxSpec,
    ) -> Result<()> {
        let Some(reference) = spec.image.as_deref() else {
            return Ok(());
        };
        // What the provider reads of an image in the store: its flattened root, or
        // its blobs (docker loads them into dockerd; microvm builds its disk from
        // them).
        let native = match provider {
            "native" | "gvisor" => true,
            "docker" | "microvm" => false,
            // wasm images are runtimes, installed by the provider.
            _ => return Ok(()),
        };
        let profile = self.profile(tenant);
        let config =
            stockade_image::Config::load().map_err(|e| Error::InvalidRequest(e.to_string()))?;
        // Shared: by the tenant's profile, or named by one of the operator's templates
        // (`[templates.NAME] image`, which E2B creates and pools use).
        let shared = profile.is_none_or(|p| p.shares(reference))
            || config
                .templates
                .values()
                .any(|t| t.image.as_deref() == Some(reference));
        let own = || -> Result<Option<String>> {
            if profile.is_none() {
                return Ok(None);
            }
            self.store.tenant_image(tenant, reference).map_err(internal)
        };
        if provider == "docker" && docker_has(reference).await? {
            // dockerd's copy: the operator's, or one loaded from the store for a
            // tenant that pulled it (by name: dockerd's ids are not the manifest's).
            if shared || own()?.is_some() {
                return Ok(());
            }
        }
        let store = stockade_image::Store::open(self.home.join("images"))?;
        // The tenant's to run: in the store, and shared with it or resolved to what
        // its own pull recorded.
        let visible = |store: &stockade_image::Store| -> Result<bool> {
            let now = match store.resolve(reference) {
                Ok(d) => d,
                Err(ImageError::ImageNotFound { .. }) => return Ok(false),
                Err(e) => return Err(e.into()),
            };
            Ok(shared || own()?.as_deref() == Some(now.to_string().as_str()))
        };
        if visible(&store)? && present(&store, reference, native)? {
            return Ok(());
        }
        let lock = self.image_lock(tenant);
        let _held = lock.lock().await;
        // Another call of this tenant may have brought it while this one waited.
        let seen = visible(&store)?;
        if seen && present(&store, reference, native)? {
            return Ok(());
        }
        let budget = self.limits.tenant_image_bytes;
        let used = self.store.image_bytes(tenant).map_err(internal)?;
        let left = budget.saturating_sub(used);
        let over = || Error::LimitExceeded {
            what: format!(
                "image {reference} for tenant {tenant} (it has added {used} bytes to the \
                 image store)"
            ),
            limit: format!(
                "the image budget of {budget} bytes per tenant (the operator raises it \
                 with stockaded --tenant-image-bytes SIZE)"
            ),
        };
        if left == 0 {
            return Err(over());
        }
        let mut options = stockade_image::PullOptions::from_env(&config);
        let mut guard = None;
        if seen {
            // Only its root is missing: nothing to pull.
        } else if let Some(profile) = self.profile(tenant) {
            // Only from a registry the tenant's profile lists, anonymously (the
            // operator's credentials and `docker login`s are not a tenant's), and
            // through the address guard: no connection of the pull reaches this
            // host's loopback, link-local or own addresses, whatever the registry,
            // its token realm or a redirect names.
            let registry = stockade_image::Reference::parse(reference)
                .map_err(|e| Error::InvalidRequest(e.to_string()))?
                .registry;
            if let Err(e) = profile.admit_registry(reference, &registry) {
                // On the host already, but not the tenant's: say so, not "not here".
                if store.resolve(reference).is_ok() {
                    return Err(Error::PolicyDenied(format!(
                        "image {reference} is on this host but not shared with tenants of \
                         profile {:?}, and their pulls may not use {registry}: the operator \
                         shares it in the profile's `shared_images`, or names it in a \
                         `[templates.NAME] image` table of the configuration file",
                        profile.name
                    )));
                }
                return Err(e);
            }
            options.auth = stockade_image::Auth::Anonymous;
            options.auth_registry = None;
            options.registry_auths.clear();
            let own = stockade::linux::layout::read_host_addresses()
                .iter()
                .filter_map(|a| a.split('/').next()?.parse().ok())
                .collect();
            let g = stockade_image::guard::Guard::start(stockade_image::guard::refuse_local(own))
                .await
                .map_err(|e| Error::io("cannot start the pull's address guard", e))?;
            options.proxy = Some(g.proxy_url());
            guard = Some(g);
        } else if self.limits.tenants_untrusted {
            // A tenant names the registry: the operator's credentials go only to the
            // one STOCKADE_REGISTRY names, never to one a tenant chose; and the
            // operator's `docker login`s are not a tenant's to use.
            if options.auth_registry.is_none() {
                options.auth = stockade_image::Auth::Anonymous;
            }
            options.registry_auths.clear();
        }
        let h = store.with_budget(left);
        let mut result = if seen {
            Ok(())
        } else {
            stockade_image::pull(&h, reference, &options, &mut |_| {})
                .await
                .map(|_| ())
        };
        let refused = guard.as_ref().and_then(|g| g.refused().into_iter().next());
        drop(guard);
        if result.is_ok() && !seen && profile.is_some() {
            // What this tenant's own pull resolved the reference to: it may run that.
            let digest = h.resolve(reference)?.to_string();
            self.store
                .set_tenant_image(tenant, reference, &digest)
                .map_err(internal)?;
        }
        if result.is_ok() && native {
            let hb = h.clone();
            let r = reference.to_string();
            result = tokio::task::spawn_blocking(move || {
                let image = hb.image(&r)?;
                hb.rootfs(&image).map(|_| ())
            })
            .await
            .map_err(internal)?;
        }
        // Whatever was kept counts, even when a later step failed.
        let added = h.added_bytes();
        if added > 0 {
            let total = self
                .store
                .add_image_bytes(tenant, added)
                .map_err(internal)?;
            tracing::info!(
                tenant,
                image = reference,
                added,
                total,
                budget,
                "image charged"
            );
        }
        result.map_err(|e| match e {
            _ if refused.is_some() => Error::PolicyDenied(format!(
                "pulling image {reference} for a tenant reached for an address tenants' \
                 pulls never reach: {} (the registry, its token realm or a redirect named \
                 it); use a registry on another host",
                refused.as_deref().unwrap_or_default()
            )),
            // The budget (the handle's `limit` is what was left of it), not the
            // store's own cap, refused the write.
            ImageError::QuotaExceeded { limit, .. } if limit == left => over(),
            e => e.into(),
        })
    }
}

/// Whether the host has what the provider needs of `reference`: for native, the
/// image's flattened root; for docker, its blobs (dockerd loads them from the store).
fn present(store: &stockade_image::Store, reference: &str, native: bool) -> Result<bool> {
    match store.resolve(reference) {
        Ok(d) => Ok(!native || store.root().join("rootfs").join(d.hex()).is_dir()),
        Err(ImageError::ImageNotFound { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether dockerd has the image already (then the docker provider uses its copy).
async fn docker_has(reference: &str) -> Result<bool> {
    let p = stockade::DockerLauncher::new();
    let docker = p.docker().await?;
    Ok(stockade::docker::image::facts(docker, reference)
        .await?
        .is_some())
}
