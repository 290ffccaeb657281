//! The only Linux FFI of Stockade. Everything here wraps one kernel facility with a
//! narrow, safe interface; every `unsafe` block says why it is sound. Errors name the
//! call and its arguments.
//!
//! The one crate allowed `unsafe` (the workspace denies it everywhere else); every
//! other lint is the workspace's.
#![allow(unsafe_code)]

pub mod caps;
pub mod forkserver;
pub mod idmap;
pub mod ipc;
pub mod landlock;
pub mod net;
#[cfg(feature = "tokio")]
pub mod pidfd;
pub mod process;
pub mod seccomp;
#[cfg(feature = "wasmtime")]
pub mod wasm;

/// A failed system call, naming the call and what it was applied to.
#[derive(Debug, thiserror::Error)]
#[error("{call}({args}): {source}")]
pub struct SysError {
    pub call: &'static str,
    pub args: String,
    #[source]
    pub source: std::io::Error,
}

impl SysError {
    /// Wraps the current `errno`.
    pub fn last(call: &'static str, args: impl Into<String>) -> SysError {
        SysError {
            call,
            args: args.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// Wraps a nix errno.
    pub fn nix(call: &'static str, args: impl Into<String>, e: nix::Error) -> SysError {
        SysError {
            call,
            args: args.into(),
            source: std::io::Error::from_raw_os_error(e as i32),
        }
    }

    /// Wraps any error as an I/O error of `call`.
    pub fn other(
        call: &'static str,
        args: impl Into<String>,
        msg: impl std::fmt::Display,
    ) -> SysError {
        SysError {
            call,
            args: args.into(),
            source: std::io::Error::other(msg.to_string()),
        }
    }
}

/// Result with [`SysError`].
pub type Result<T> = std::result::Result<T, SysError>;
