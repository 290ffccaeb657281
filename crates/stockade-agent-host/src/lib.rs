//! The host side of the Stockade agent, shared by every Linux provider.
//!
//! Native and docker sandboxes (and the microVM next) run the same `stockade-agent` as
//! PID 1 and speak the same protocol; they differ only in how a sandbox is launched
//! and torn down. This crate holds what they share:
//!
//! - [`transport`]: how the host reaches an agent ([`Transport`]: a byte stream per
//!   request; [`UnixSocket`] today);
//! - [`client`]: the protocol over a transport (ping, exec streamed or interactive,
//!   file operations);
//! - [`binary`]: finding the agent binary, the host's and the static one;
//! - [`Launcher`]: what a provider does itself (launch, destroy, list, inspect, gc, the
//!   transport of a sandbox);
//! - [`AgentProvider`]: a `stockade_core::Provider` made of a launcher and the agent
//!   host, so a Linux provider is "a launcher + the agent host";
//! - [`reap`]: waiting for the helper processes a launcher starts.

pub mod binary;
pub mod client;
mod launcher;
mod provider;
pub mod reap;
pub mod transport;

pub use binary::{BUILD_STATIC_AGENT, find_agent, find_helper, find_static_agent, is_static};
pub use launcher::Launcher;
pub use provider::AgentProvider;
pub use transport::{AgentStream, Connection, Transport, UnixSocket};
