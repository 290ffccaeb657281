//! The errors of the image store, import and unpacking.

use std::path::PathBuf;

/// What went wrong with an image, a blob or a layer. Messages are lowercase and name
/// the object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system call failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done (`create`, `rename`, `read`...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// A string is not a `sha256:<64 hex>` digest.
    #[error("invalid digest {digest:?}: expected sha256:<64 lowercase hex digits>")]
    InvalidDigest {
        /// The string given.
        digest: String,
    },
    /// Content does not hash to the digest it was announced with.
    #[error("{what} is corrupt: expected digest {expected}, got {actual}")]
    DigestMismatch {
        /// What was checked (a blob, a layer's uncompressed content).
        what: String,
        /// The digest it should have.
        expected: String,
        /// The digest it has.
        actual: String,
    },
    /// Content is not the size it was announced with.
    #[error("{what} has {actual} bytes, expected {expected}")]
    SizeMismatch {
        /// What was checked.
        what: String,
        /// The size announced.
        expected: u64,
        /// The size found (possibly only a lower bound when too long).
        actual: u64,
    },
    /// An image reference cannot be parsed.
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference {
        /// The string given.
        reference: String,
        /// Why it is refused.
        reason: String,
    },
    /// No image with this reference is in the store.
    #[error("image {reference} is not in the store")]
    ImageNotFound {
        /// The reference asked for.
        reference: String,
    },
    /// A blob an image needs is not in the store.
    #[error("blob {digest} is not in the store")]
    BlobNotFound {
        /// Its digest.
        digest: String,
    },
    /// A JSON document (manifest, index, config) is malformed.
    #[error("invalid {what}: {source}")]
    Json {
        /// The document.
        what: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// An image or archive is well-formed JSON but not a usable image.
    #[error("invalid {what}: {reason}")]
    InvalidImage {
        /// The thing refused (an archive path, a manifest digest).
        what: String,
        /// Why.
        reason: String,
    },
    /// The image is used by a running sandbox.
    #[error("image {reference} is in use by a running sandbox; destroy the sandbox first")]
    InUse {
        /// The reference asked to be removed.
        reference: String,
    },
    /// The configuration file does not parse.
    #[error("config file {}: {reason}", path.display())]
    Config {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A media type or compression the store does not handle.
    #[error("unsupported {what}: {kind}")]
    Unsupported {
        /// The thing refused.
        what: String,
        /// Its media type or format.
        kind: String,
    },
    /// An index names no manifest for this platform.
    #[error("image {reference} has no manifest for {platform}")]
    NoMatchingPlatform {
        /// The image.
        reference: String,
        /// The platform wanted (`linux/amd64`).
        platform: String,
    },
    /// A layer entry would write outside the layer root, through a symlink, or is
    /// otherwise refused; nothing of the layer is kept.
    #[error("layer {layer}: entry {entry:?} refused: {reason}")]
    UnsafeEntry {
        /// The layer's digest.
        layer: String,
        /// The entry's path as written in the archive.
        entry: String,
        /// Why it is refused.
        reason: String,
    },
    /// A layer is larger than the unpacking limits allow (a decompression bomb, or a
    /// genuinely huge image).
    #[error("layer {layer}: more than {limit} {what}; {}", limit_fix(what))]
    LimitExceeded {
        /// The layer's digest.
        layer: String,
        /// `entries` or `bytes`.
        what: &'static str,
        /// The limit that was passed.
        limit: u64,
    },
    /// Writing more would pass the store's total cap or the caller's budget; nothing
    /// of what was being written is kept.
    #[error(
        "{what}: it would pass the image store's {cap} of {limit} bytes ({used} bytes in use); {fix}"
    )]
    QuotaExceeded {
        /// What was being written (a blob, an image's root filesystem).
        what: String,
        /// Which cap: `total cap (max_total_bytes)` or `budget of this caller`.
        cap: &'static str,
        /// The cap in bytes.
        limit: u64,
        /// What counted against it before this write.
        used: u64,
        /// How to make room or raise the cap.
        fix: String,
    },
    /// The registry refused or failed a request.
    #[cfg(feature = "pull")]
    #[error("cannot pull {reference}: {source}")]
    Registry {
        /// The image being pulled.
        reference: String,
        /// What the registry client reported.
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// A tar stream cannot be read.
    #[error("cannot read archive {what}: {source}")]
    Archive {
        /// The archive (a path or a layer digest).
        what: String,
        /// The read error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }
}

/// How to raise a per-image limit.
fn limit_fix(what: &str) -> &'static str {
    match what {
        "entries" => {
            "an image this large needs `max_image_entries` raised in the [store] table of the \
             config file or STOCKADE_IMAGE_MAX_ENTRIES"
        }
        _ => {
            "an image this large needs `max_image_bytes` raised in the [store] table of the \
             config file or STOCKADE_IMAGE_MAX_BYTES (default 4 GiB)"
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The image store's errors as Stockade's, with the code each one means for the caller:
/// the one conversion every surface (CLI, daemon, SDKs, MCP) uses.
impl From<Error> for stockade_core::Error {
    fn from(e: Error) -> Self {
        use stockade_core::Error as E;
        match e {
            Error::ImageNotFound { ref reference } => E::NotFound {
                kind: "image",
                id: format!(
                    "{} (get it with `stockade image pull {reference}` or \
                     `stockade image import`)",
                    crate::Reference::parse(reference)
                        .map(|r| r.to_string())
                        .unwrap_or_else(|_| reference.clone())
                ),
            },
            Error::InvalidReference { .. }
            | Error::InvalidDigest { .. }
            | Error::InvalidImage { .. }
            | Error::Unsupported { .. }
            | Error::InUse { .. }
            | Error::Config { .. } => E::InvalidRequest(e.to_string()),
            Error::LimitExceeded { .. } => E::LimitExceeded {
                what: e.to_string(),
                limit: "the unpacking limits".into(),
            },
            Error::QuotaExceeded { .. } => E::LimitExceeded {
                what: e.to_string(),
                limit: "the image store's cap".into(),
            },
            Error::UnsafeEntry { .. } => E::PolicyDenied(e.to_string()),
            #[cfg(feature = "pull")]
            Error::Registry { ref reference, .. } => pull_failed(reference.clone(), &e),
            Error::NoMatchingPlatform { ref reference, .. } => pull_failed(reference.clone(), &e),
            // A full disk is the host's state (unavailable), any other failure a fault.
            Error::Io { op, path, source } => {
                E::io(format!("cannot {op} {}", path.display()), source)
            }
            e @ (Error::DigestMismatch { .. }
            | Error::SizeMismatch { .. }
            | Error::BlobNotFound { .. }
            | Error::Json { .. }
            | Error::Archive { .. }) => E::Internal(e.to_string()),
        }
    }
}

/// A pull that failed, with what to check.
fn pull_failed(reference: String, e: &Error) -> stockade_core::Error {
    stockade_core::Error::Unavailable {
        what: format!("image {reference}"),
        reason: format!("it is not in the image store and pulling it failed: {e}"),
        fix: "check the reference, the network and STOCKADE_REGISTRY_* credentials; \
              plain-HTTP registries need `insecure` in the config file (the daemon's, \
              for the daemon's pulls); or `stockade image import` an archive"
            .into(),
    }
}
