//! Compiled-module cache: a module is compiled once and kept as a serialized artifact
//! named `<module sha256>-<engine key>.cwasm`, so that a later process maps it in
//! about a millisecond instead of compiling for seconds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use stockade_core::{Error, Result};
use wasmtime::{Engine, Module};

use crate::home;
use crate::runtime::CachedArtifact;

/// The magic number of a WebAssembly binary module.
const WASM_MAGIC: &[u8; 4] = b"\0asm";

/// How a module got into memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadPath {
    /// Mapped from the artifact cache.
    Cached,
    /// Compiled now (and written to the cache).
    Compiled,
    /// Mapped from a `.cwasm` image the caller named.
    Precompiled,
}

/// A module and where it came from.
pub(crate) struct Loaded {
    pub module: Module,
    pub sha256: String,
    pub path: LoadPath,
    pub load_ms: f64,
}

/// A key for the engine configuration: artifacts compiled under another key cannot be
/// loaded. Stable for one build of wasmtime and one configuration.
pub(crate) fn engine_key(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The artifact file for a module digest under `cache`.
pub(crate) fn artifact_path(cache: &Path, sha256: &str, key: &str) -> PathBuf {
    cache.join(format!("{sha256}-{key}.cwasm"))
}

/// Loads the module at `source`: from the cache when an artifact for its digest and
/// this engine exists, else by compiling it and writing the artifact. `known_sha256`
/// skips hashing the file when the caller already verified it (installed runtimes).
pub(crate) fn load(
    engine: &Engine,
    key: &str,
    cache: &Path,
    source: &Path,
    known_sha256: Option<&str>,
) -> Result<Loaded> {
    let start = Instant::now();
    let mut head = [0u8; 4];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(source)
            .map_err(|e| Error::io(format!("cannot open module {}", source.display()), e))?;
        let _ = f.read(&mut head);
    }
    if &head != WASM_MAGIC {
        if head == *b"\x7fELF" {
            home::check_trusted(source)?;
            let module = deserialize_trusted(engine, source)?;
            return Ok(Loaded {
                module,
                sha256: home::sha256_file(source)?,
                path: LoadPath::Precompiled,
                load_ms: start.elapsed().as_secs_f64() * 1e3,
            });
        }
        return Err(Error::InvalidRequest(format!(
            "{} is neither a WebAssembly module nor a precompiled .cwasm artifact",
            source.display()
        )));
    }
    let sha256 = match known_sha256 {
        Some(s) => s.to_string(),
        None => home::sha256_file(source)?,
    };
    let artifact = artifact_path(cache, &sha256, key);
    if artifact.exists() {
        let loaded = home::check_trusted(cache)
            .and_then(|()| home::check_trusted(&artifact))
            .and_then(|()| deserialize_trusted(engine, &artifact));
        match loaded {
            Ok(module) => {
                return Ok(Loaded {
                    module,
                    sha256,
                    path: LoadPath::Cached,
                    load_ms: start.elapsed().as_secs_f64() * 1e3,
                });
            }
            // A stale or damaged artifact: compile again and replace it.
            Err(_) => {
                let _ = std::fs::remove_file(&artifact);
            }
        }
    }
    let module = Module::from_file(engine, source).map_err(|e| {
        Error::InvalidRequest(format!("cannot compile {}: {e:#}", source.display()))
    })?;
    write_artifact(&module, cache, &artifact)?;
    Ok(Loaded {
        module,
        sha256,
        path: LoadPath::Compiled,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

fn write_artifact(module: &Module, cache: &Path, artifact: &Path) -> Result<()> {
    home::make_private_dir(cache)?;
    let bytes = module
        .serialize()
        .map_err(|e| Error::Internal(format!("cannot serialize module: {e:#}")))?;
    let tmp = cache.join(format!(
        ".{}.{}.tmp",
        artifact
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("artifact"),
        std::process::id()
    ));
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, artifact))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(format!("cannot write artifact {}", artifact.display()), e)
        })
}

/// Maps a precompiled artifact (through `stockade-sys`, the one crate allowed
/// `unsafe`). `path` passed `home::check_trusted` (owned by us or root, writable by no
/// one else), and cache artifacts live in a 0700 directory that only this code writes,
/// after `Module::serialize` of a module it compiled.
fn deserialize_trusted(engine: &Engine, path: &Path) -> Result<Module> {
    stockade_sys::wasm::deserialize_trusted(engine, path).map_err(|e| {
        Error::InvalidRequest(format!(
            "cannot load precompiled module {}: {e:#}",
            path.display()
        ))
    })
}

/// The artifacts in `cache`; `current` marks those of the engine `key`.
pub(crate) fn list(cache: &Path, key: &str) -> Result<Vec<CachedArtifact>> {
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
