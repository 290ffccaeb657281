//! Integration tests of the image store: hand-built malicious layers, whiteouts,
//! imports of every archive format, and a real Debian image built by ci-setup.sh.

mod commit;
mod debian;
mod import;
#[cfg(feature = "pull")]
mod registry;
mod store;
mod support;
mod unpack;
