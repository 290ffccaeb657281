//! Host mounts that in-process code of the daemon makes for each sandbox (a front
//! end's per-sandbox home): made before the provider creates the sandbox, warm or
//! cold, added after the tenant's mounts are checked (the tenant's mount policy does
//! not apply to them), and released once the sandbox is gone, whoever destroyed it
//! (the caller, the reaper, a drain, a failed creation).

use std::sync::Arc;

use stockade::Result;
use stockade::spec::Mount;

/// Makes and releases the mounts of one kind of sandbox.
pub trait MountMaker: Send + Sync {
    /// The kind's name. It is part of a pool's template id, so a pool of sandboxes
    /// with these mounts serves only creates that ask for this kind, and a plain
    /// pool of the same spec never serves them.
    fn kind(&self) -> &str;
    /// Makes the host side of the mounts of one new sandbox.
    fn make(&self) -> Result<Vec<Mount>>;
    /// Releases what [`MountMaker::make`] made (the sandbox is gone).
    fn release(&self, mounts: &[Mount]);
}

/// Mounts made for one sandbox; released when dropped (off the async threads, and
/// never under the daemon's lock: the release may unmount).
pub struct Made {
    maker: Arc<dyn MountMaker>,
    mounts: Vec<Mount>,
}

impl Made {
    /// Makes the mounts of one sandbox.
    pub fn make(maker: &Arc<dyn MountMaker>) -> Result<Made> {
        Ok(Made {
            mounts: maker.make()?,
            maker: maker.clone(),
        })
    }

    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let maker = self.maker.clone();
        let mounts = std::mem::take(&mut self.mounts);
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(move || maker.release(&mounts));
            }
            Err(_) => maker.release(&mounts),
        }
    }
}
