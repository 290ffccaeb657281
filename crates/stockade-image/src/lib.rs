//! OCI images for Stockade: a content-addressed store, import of `docker save`
//! archives and OCI layouts, new images of a layer on top of one (`Store::commit`),
//! and safe unpacking of layers into a read-only root filesystem the native provider
//! can mount.
//!
//! ```no_run
//! let store = stockade_image::Store::open_default()?;
//! stockade_image::import(&store, "python.tar".as_ref(), Some("python:3.12"))?;
//! let image = store.image("python:3.12")?;
//! let rootfs = store.rootfs(&image)?; // flattened once, cached by manifest digest
//! # Ok::<(), stockade_image::Error>(())
//! ```

mod commit;
mod config;
mod digest;
mod error;
#[cfg(feature = "pull")]
pub mod guard;
mod import;
pub mod inroot;
mod names;
pub mod oci;
#[cfg(feature = "pull")]
mod pull;
mod reference;
mod store;
mod unpack;

pub use commit::Commit;
pub use config::{
    Config, ENV_MAX_IMAGE_BYTES, ENV_MAX_IMAGE_ENTRIES, ENV_MAX_TOTAL_BYTES, GvisorConfig,
    GvisorPlatform, Registries, StoreConfig, TEMPLATE_NAME_MAX, TemplateConfig,
    check_template_name, parse_size,
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

pub use stockade_core::host::stockade_home;
