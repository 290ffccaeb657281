//! The OCI (and Docker v2) JSON documents the store reads: index, manifest, config.
//! Only the fields Stockade uses are typed; unknown fields are ignored, as the image
//! spec requires of readers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{Error, Result};

/// OCI image index (also a Docker manifest list).
pub const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker manifest list.
pub const MEDIA_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// OCI image manifest.
pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker v2 schema 2 manifest.
pub const MEDIA_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// OCI image config.
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Uncompressed OCI layer.
pub const MEDIA_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// Gzip-compressed OCI layer.
pub const MEDIA_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// A zstd-compressed layer.
pub const MEDIA_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
/// The annotation naming a manifest in an OCI layout's index.
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The annotation containerd and Docker 25+ write with the full image name.
pub const ANNOTATION_IMAGE_NAME: &str = "io.containerd.image.name";

/// A pointer to a blob: its media type, digest and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The media type of the blob.
    #[serde(default)]
    pub media_type: String,
    /// The blob's digest.
    pub digest: Digest,
    /// The blob's size in bytes.
    pub size: u64,
    /// The platform (in an index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Annotations (in an OCI layout index: the reference name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OS and architecture a manifest is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// `amd64`, `arm64`...
    pub architecture: String,
    /// `linux`.
    pub os: String,
    /// `v8` for arm64...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// An image index or manifest list: manifests per platform.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// The media type, when the document states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The manifests.
    pub manifests: Vec<Descriptor>,
}

/// An image manifest: a config and layers, lowest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The media type, when the document states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The image config blob.
    pub config: Descriptor,
    /// The layers, applied in order.
    pub layers: Vec<Descriptor>,
}

/// The image config blob (`application/vnd.oci.image.config.v1+json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `amd64`...
    #[serde(default)]
    pub architecture: String,
    /// `linux`.
    #[serde(default)]
    pub os: String,
    /// How to run the image.
    #[serde(default)]
    pub config: Option<RunConfig>,
    /// The uncompressed digests of the layers.
    #[serde(default)]
    pub rootfs: Option<RootFs>,
}

/// The parts of an image config that say how to run it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    /// `KEY=VALUE` entries.
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// The default working directory.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// `user`, `uid`, `uid:gid`...
    #[serde(default)]
    pub user: Option<String>,
    /// Default arguments (or command, without an entrypoint).
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// The entrypoint.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
}

/// The `rootfs` section of an image config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RootFs {
    /// `layers`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The digest of each layer's uncompressed tar, lowest first.
    #[serde(default)]
    pub diff_ids: Vec<Digest>,
}

/// Parses a JSON document, naming it in the error.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(what: &str, data: &[u8]) -> Result<T> {
    serde_json::from_slice(data).map_err(|source| Error::Json {
        what: what.to_string(),
        source,
    })
}

/// Whether a media type (or a document without one that has `manifests`) is an index.
pub(crate) fn is_index(media_type: &str, data: &[u8]) -> bool {
    if media_type == MEDIA_INDEX || media_type == MEDIA_DOCKER_LIST {
        return true;
    }
    if media_type.is_empty() {
        #[derive(Deserialize)]
        struct Probe {
            manifests: Option<serde_json::Value>,
        }
        return serde_json::from_slice::<Probe>(data)
            .map(|p| p.manifests.is_some())
            .unwrap_or(false);
    }
    false
}

/// The platform Stockade runs images for: linux and this build's architecture.
pub fn host_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    Platform {
        architecture: architecture.to_string(),
        os: "linux".to_string(),
        variant: None,
    }
}

/// Picks the manifest for `platform` from an index (the variant is not compared).
pub fn select_platform<'a>(index: &'a Index, platform: &Platform) -> Option<&'a Descriptor> {
    index.manifests.iter().find(|d| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == platform.os && p.architecture == platform.architecture)
    })
}
