//! The Linux host layer: what every Linux provider (native, docker, gvisor, microvm)
//! needs from the host, in one place, so that no provider stands on another.
//!
//! - [`plan`]: from a validated spec and the host's [`layout`] to a launch plan (pure).
//! - [`egress`]: an egress policy's firewall, resolver and TLS interception plan, and
//!   the sandbox CA.
//! - [`network_setup`] and the live policy's change ([`set_network_via`]) and refusals
//!   ([`egress_denied_via`]) for a network namespace another provider made.
//! - [`freezer`] (pause and resume of a cgroup, with the paused time kept) and
//!   [`usage`] (CPU and memory read from cgroups).
//! - [`idpool`]: leases of host id ranges for sandboxes' user namespaces.
//! - [`rootless`]: cgroup delegation to an unprivileged user.
//! - [`ensure_image`] and [`image_root`]: an OCI image as a sandbox's root.

pub mod egress;
pub mod freezer;
pub mod idpool;
mod image;
pub mod layout;
mod netsetup;
pub mod plan;
pub mod rootless;
pub mod usage;

pub use image::{ensure_image, image_root};
pub use netsetup::*;
