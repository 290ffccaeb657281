//! OCI images for Stockade: a content-addressed store, import of `docker save`
//! archives and OCI layouts, and safe unpacking of layers into a read-only root
//! filesystem the native provider can mount.
//!
//! ```no_run
//! let store = stockade_image::Store::open_default()?;
//! stockade_image::import(&store, "python.tar".as_ref(), Some("python:3.12"))?;
//! let image = store.image("python:3.12")?;
//! let rootfs = store.rootfs(&image)?; // flattened once, cached by manifest digest
//! # Ok::<(), stockade_image::Error>(())
//! ```

mod config;
mod digest;
mod error;
mod import;
pub mod inroot;
mod names;
pub mod oci;
#[cfg(feature = "pull")]
mod pull;
mod reference;
mod store;
mod unpack;

use std::path::PathBuf;

pub use config::{
    Config, ENV_MAX_IMAGE_BYTES, ENV_MAX_IMAGE_ENTRIES, ENV_MAX_TOTAL_BYTES, Registries,
    StoreConfig, parse_size,
};
pub use digest::Digest;
pub use error::{Error, Result};
pub use import::{Imported, import};
pub use names::{Listed, MIN_BARE_PREFIX};
pub use oci::{ImageConfig, Manifest, RunConfig};
#[cfg(feature = "pull")]
pub use pull::{Auth, PullOptions, PullProgress, is_loopback_registry, pull};
pub use reference::Reference;
pub use store::{GcReport, Image, MAX_DOCUMENT_BYTES, Store};
pub use unpack::Limits;

/// Stockade's data directory: `$STOCKADE_HOME` when set; `/var/lib/stockade` for
/// root; else `$XDG_DATA_HOME/stockade` or `~/.local/share/stockade`. The same rule
/// as the other crates that keep state.
pub fn stockade_home() -> PathBuf {
    if let Some(h) = std::env::var_os("STOCKADE_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let euid = rustix::process::geteuid();
    if euid.is_root() {
        return PathBuf::from("/var/lib/stockade");
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("stockade");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/share/stockade"),
        None => PathBuf::from(format!("/tmp/stockade-home-{}", euid.as_raw())),
    }
}
