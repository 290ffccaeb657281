//! The one error type of the provider boundary.

pub use stockade_agent_proto::ErrorCode;
use stockade_spec::SpecErrors;

/// An error from a provider or the core. Every variant has an [`ErrorCode`] and a
/// lowercase message naming the thing at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec or request is invalid (every problem listed).
    #[error(transparent)]
    InvalidSpec(#[from] SpecErrors),
    /// A request (not a spec) is malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No such object.
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A backend or host feature is missing.
    #[error("{what} is unavailable: {reason} (fix: {fix})")]
    Unavailable {
        what: String,
        reason: String,
        fix: String,
    },
    /// The sandbox went away (destroyed, its lifetime ended, killed) during a call.
    /// The message starts with the fixed form `sandbox {id} is gone` (the SDKs map it
    /// to their "sandbox gone" error).
    #[error("sandbox {id} is gone: {detail}")]
    Gone { id: String, detail: String },
    /// An operation of ours ran out of time.
    #[error("{operation} timed out after {after_ms} ms")]
    Timeout { operation: String, after_ms: u64 },
    /// A quota or size limit was reached.
    #[error("{what} exceeds the limit of {limit}")]
    LimitExceeded { what: String, limit: String },
    /// The policy forbids it.
    #[error("denied: {0}")]
    PolicyDenied(String),
    /// A host operation failed unexpectedly.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// A bug or an unexpected state; the message says which.
    #[error("internal error: {0}")]
    Internal(String),
    /// An error that crossed a process boundary (the daemon): its code and message
    /// exactly as the far side gave them.
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
}

impl Error {
    /// The code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidSpec(_) | Error::InvalidRequest(_) => ErrorCode::InvalidSpec,
            Error::NotFound { .. } => ErrorCode::NotFound,
            Error::Unavailable { .. } | Error::Gone { .. } => ErrorCode::Unavailable,
            Error::Timeout { .. } => ErrorCode::Timeout,
            Error::LimitExceeded { .. } => ErrorCode::LimitExceeded,
            Error::PolicyDenied(_) => ErrorCode::PolicyDenied,
            // A full disk or quota is the host's state, not a bug: it passes once
            // there is room.
            Error::Io { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) =>
            {
                ErrorCode::Unavailable
            }
            Error::Io { .. } | Error::Internal(_) => ErrorCode::Internal,
            Error::Remote { code, .. } => *code,
        }
    }

    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An error received over the wire (from the agent, a monitor or the daemon): its
    /// code and message reach the caller unchanged, with nothing added.
    pub fn remote(code: ErrorCode, message: impl Into<String>) -> Error {
        Error::Remote {
            code,
            message: message.into(),
        }
    }

    /// The message without its fix, and the fix: for nesting this error in another's
    /// reason, so that a message says `(fix: ...)` once (the outer error merges the
    /// fixes).
    pub fn split_fix(self) -> (String, Option<String>) {
        match self {
            Error::Unavailable { what, reason, fix } => {
                (format!("{what} is unavailable: {reason}"), Some(fix))
            }
            Error::Remote { message, .. } => match message
                .strip_suffix(')')
                .and_then(|m| m.rsplit_once(" (fix: "))
            {
                Some((text, fix)) => (text.to_string(), Some(fix.to_string())),
                None => (message, None),
            },
            e => (e.to_string(), None),
        }
    }

    /// Process exit code the CLI uses for this error (the user's code's own exit codes
    /// pass through unchanged; these sit above the range shells use for signals).
    pub fn exit_code(&self) -> i32 {
        match self.code() {
            ErrorCode::InvalidSpec => 64,
            ErrorCode::NotFound => 65,
            ErrorCode::Unavailable => 69,
            ErrorCode::Timeout => 66,
            ErrorCode::LimitExceeded => 67,
            ErrorCode::PolicyDenied => 77,
            ErrorCode::Internal => 70,
        }
    }
}

/// Result with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
