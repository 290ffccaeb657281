//! Compiled-module cache: a module is compiled once and kept as an artifact named
//! `<module sha256>-<engine key>.cwasm`, so that a later process loads it in a few
//! milliseconds instead of compiling for seconds.
//!
//! wasmtime runs the machine code of an artifact as it finds it, so only artifacts
//! this cache made are ever loaded: each is sealed with a MAC (keyed BLAKE3) under the home's
//! artifact key when it is written and checked before wasmtime sees it (see
//! `stockade_sys::wasm`). One that fails the check (changed, planted, made under
//! another home's key) is deleted and the module compiled again. What a caller names
//! as a module must be WebAssembly, which we compile: a precompiled file is refused
//! whoever wrote it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use stockade_core::{Error, Result};
use stockade_sys::wasm::{ArtifactKey, SealError};
use wasmtime::{Engine, Module};

use crate::home;

/// The magic number of a WebAssembly binary module.
const WASM_MAGIC: &[u8; 4] = b"\0asm";
/// How many times a cache write starts over when its directory vanished under it.
const WRITE_ATTEMPTS: usize = 3;

/// How a module got into memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadPath {
    /// Loaded from the artifact cache (after checking its seal).
    Cached,
    /// Compiled now (and written to the cache).
    Compiled,
}

/// A module and where it came from.
pub(crate) struct Loaded {
    pub module: Module,
    pub sha256: String,
    pub path: LoadPath,
    pub load_ms: f64,
}

/// The artifact cache of one engine.
pub(crate) struct Cache<'a> {
    pub dir: &'a Path,
    pub engine_key: &'a str,
    pub key: &'a ArtifactKey,
}

/// A key for the engine configuration: artifacts compiled under another key cannot be
/// loaded. Stable for one build of wasmtime and one configuration.
pub(crate) fn engine_key(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

pub(crate) use stockade_wasm_host::artifact::artifact_path;

/// What a sealed artifact says it is: the module's digest and the engine's key.
fn context(sha256: &str, engine_key: &str) -> Vec<u8> {
    format!("stockade-wasm module sha256:{sha256} engine:{engine_key}").into_bytes()
}

/// Refuses `source` unless it starts as a WebAssembly module does, saying what to
/// pass instead.
fn check_is_wasm(source: &Path, file: &File) -> Result<()> {
    let mut head = [0u8; 16];
    let n = file
        .read_at(&mut head, 0)
        .map_err(|e| Error::io(format!("cannot read module {}", source.display()), e))?;
    let head = &head[..n];
    if head.starts_with(WASM_MAGIC) {
        return Ok(());
    }
    if head.starts_with(b"\x7fELF") || head.starts_with(b"stockade-cwasm") {
        return Err(Error::InvalidRequest(format!(
            "{} is precompiled code (a .cwasm artifact), not a WebAssembly module; Stockade never loads precompiled code it did not compile itself: pass the .wasm module instead (it is compiled once and cached)",
            source.display()
        )));
    }
    Err(Error::InvalidRequest(format!(
        "{} is not a WebAssembly module (it does not start with \\0asm); pass a .wasm file",
        source.display()
    )))
}

/// Loads the module in `file` (opened from `source`): from the cache when a sealed
/// artifact for its digest and this engine is there, else by compiling its bytes and
/// writing the artifact. `known_sha256` (installed runtimes, verified at install)
/// skips reading the module on a cache hit; on a miss the bytes are checked against it.
pub(crate) fn load(
    engine: &Engine,
    cache: &Cache<'_>,
    source: &Path,
    file: &File,
    known_sha256: Option<&str>,
) -> Result<Loaded> {
    let start = Instant::now();
    check_is_wasm(source, file)?;
    let read = || {
        let mut bytes = Vec::new();
        (&*file)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("cannot read module {}", source.display()), e))?;
        Ok::<_, Error>(bytes)
    };
    let mut bytes = None;
    let sha256 = match known_sha256 {
        Some(s) => s.to_string(),
        None => {
            let b = read()?;
            let sha = sha256_hex(&b);
            bytes = Some(b);
            sha
        }
    };
    let ctx = context(&sha256, cache.engine_key);
    let artifact = artifact_path(cache.dir, &sha256, cache.engine_key);
    if let Some(module) = load_cached(engine, cache.key, &ctx, &artifact) {
        return Ok(Loaded {
            module,
            sha256,
            path: LoadPath::Cached,
            load_ms: start.elapsed().as_secs_f64() * 1e3,
        });
    }
    let bytes = match bytes {
        Some(b) => b,
        None => read()?,
    };
    if let Some(known) = known_sha256 {
        let got = sha256_hex(&bytes);
        if got != known {
            return Err(Error::PolicyDenied(format!(
                "{} has sha256 {got}, not the {known} recorded when it was installed; install it again",
                source.display()
            )));
        }
    }
    let module = Module::from_binary(engine, &bytes).map_err(|e| {
        Error::InvalidRequest(format!("cannot compile {}: {e:#}", source.display()))
    })?;
    let sealed = stockade_sys::wasm::seal(cache.key, &ctx, &module)
        .map_err(|e| Error::Internal(format!("cannot serialize module: {e:#}")))?;
    write_artifact(cache.dir, &artifact, &sealed)?;
    Ok(Loaded {
        module,
        sha256,
        path: LoadPath::Compiled,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    home::hex(&sha2::Sha256::digest(bytes))
}

/// The module in the artifact at `path` if it is there and its seal holds. An artifact
/// that fails the check is deleted (the caller compiles and writes a good one).
fn load_cached(engine: &Engine, key: &ArtifactKey, ctx: &[u8], path: &Path) -> Option<Module> {
    let mut file = match home::open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        // A symlink (ELOOP) or something else we will not read: replace it.
        Err(_) => {
            let _ = std::fs::remove_file(path);
            return None;
        }
    };
    let mut sealed = Vec::new();
    let ok = file.metadata().is_ok_and(|m| m.is_file()) && file.read_to_end(&mut sealed).is_ok();
    let loaded = if ok {
        stockade_sys::wasm::deserialize_sealed(engine, key, ctx, &sealed)
    } else {
        Err(SealError::NotSealed)
    };
    match loaded {
        Ok(m) => Some(m),
        Err(_) => {
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

/// Writes `bytes` as `artifact` in `dir` atomically: into a fresh temporary file
/// there, then renamed over the name, so a reader sees a whole artifact or none and
/// writers racing on one module (same bytes) all succeed. Starts over when the
/// directory vanished meanwhile.
fn write_artifact(dir: &Path, artifact: &Path, bytes: &[u8]) -> Result<()> {
    let attempt = || -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".artifact.")
            .suffix(".tmp")
            .tempfile_in(dir)?;
        tmp.write_all(bytes)?;
        tmp.persist(artifact).map(drop).map_err(|e| e.error)
    };
    let mut result = attempt();
    for _ in 1..WRITE_ATTEMPTS {
        match &result {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => result = attempt(),
            _ => break,
        }
    }
    result.map_err(|e| Error::io(format!("cannot write artifact {}", artifact.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_survives_its_directory_vanishing_and_racing_writers() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache/wasm");
        let artifact = dir.join("a.cwasm");
        // No directory at all: made.
        write_artifact(&dir, &artifact, b"one").unwrap();
        std::fs::remove_dir_all(root.path().join("cache")).unwrap();
        write_artifact(&dir, &artifact, b"two").unwrap();
        assert_eq!(std::fs::read(&artifact).unwrap(), b"two");
        // Many writers of the same artifact at once, in one process: all succeed.
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (dir, artifact) = (dir.clone(), artifact.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        write_artifact(&dir, &artifact, &[7u8; 100_000]).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::fs::read(&artifact).unwrap(), [7u8; 100_000]);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.cwasm"], "no temporary files left");
    }
}
