//! The artifact cache as files: how an artifact is named, and listing them. Loading
//! and sealing artifacts is the engine's (the runner's) alone.

use std::path::{Path, PathBuf};

use stockade_core::{Error, Result};

/// The artifact file for a module digest under `cache`, compiled by the engine `key`.
pub fn artifact_path(cache: &Path, sha256: &str, key: &str) -> PathBuf {
    cache.join(format!("{sha256}-{key}.cwasm"))
}

/// One compiled artifact in the cache.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CachedArtifact {
    /// The artifact file.
    pub path: PathBuf,
    /// SHA-256 of the module it was compiled from.
    pub module_sha256: String,
    /// Key of the engine configuration it was compiled for.
    pub engine_key: String,
    /// Size in bytes.
    pub size: u64,
    /// The runtime it belongs to, when it is one.
    pub runtime: Option<String>,
    /// Whether the default engine of this build can load it.
    pub current: bool,
}

/// The artifacts in `cache`; `current` marks those of the engine `key`.
pub fn list(cache: &Path, key: &str) -> Result<Vec<CachedArtifact>> {
    let rd = match std::fs::read_dir(cache) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("cannot list {}", cache.display()), e)),
    };
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".cwasm") else {
            continue;
        };
        let Some((sha, engine_key)) = stem.split_once('-') else {
            continue;
        };
        out.push(CachedArtifact {
            path: entry.path(),
            module_sha256: sha.to_string(),
            engine_key: engine_key.to_string(),
            size: entry.metadata().map(|m| m.len()).unwrap_or(0),
            runtime: None,
            current: engine_key == key,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
