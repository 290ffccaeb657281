//! Modules: resolving `spec.image` to a module file, and loading it (through the
//! artifact cache) into an `InstancePre` kept in memory per file identity.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stockade_core::{Error, Result};
use stockade_sys::wasm::ArtifactKey;
use wasmtime::InstancePre;

use crate::exec::{self, ExecState};
use crate::spec::spec_error;
use crate::{LoadPath, RuntimeSpec, WasmProvider, artifact, home, lock, runtime};

/// Identity of a module file on disk: a change of any part loads it again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ModuleKey {
    pub(crate) path: PathBuf,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) len: u64,
    pub(crate) mtime_ns: i128,
}

/// A module ready to instantiate.
pub(crate) struct ModuleEntry {
    pub(crate) pre: InstancePre<ExecState>,
    pub(crate) source: PathBuf,
    pub(crate) sha256: String,
    pub(crate) load: LoadPath,
    pub(crate) load_ms: f64,
}

/// Opens a module file for reading.
fn open_module(path: &Path) -> Result<std::fs::File> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot open module {}", path.display()), e))?;
    match file.metadata() {
        Ok(md) if md.is_file() => Ok(file),
        _ => Err(Error::InvalidRequest(format!(
            "module {} is not a regular file",
            path.display()
        ))),
    }
}

impl WasmProvider {
    /// Compiles the WebAssembly module at `path` into the artifact cache (or finds it
    /// there) and says how: [`LoadPath::Compiled`] or [`LoadPath::Cached`].
    pub fn precompile(&self, path: &Path) -> Result<LoadPath> {
        let file = open_module(path)?;
        Ok(self.load(path, &file)?.path)
    }

    /// Loads the module in `file` through the artifact cache.
    fn load(&self, path: &Path, file: &std::fs::File) -> Result<artifact::Loaded> {
        let key = self.artifact_key()?;
        let cache = artifact::Cache {
            dir: &self.inner.config.cache_dir,
            engine_key: &self.inner.engine_key,
            key: &key,
        };
        let known = self.known_digest(path);
        artifact::load(&self.inner.engine, &cache, path, file, known.as_deref())
    }

    /// The artifact key of [`WasmConfig::key_file`], made on first use.
    fn artifact_key(&self) -> Result<Arc<ArtifactKey>> {
        let mut slot = lock(&self.inner.artifact_key);
        if let Some(k) = &*slot {
            return Ok(k.clone());
        }
        let key = Arc::new(home::artifact_key(&self.inner.config.key_file)?);
        *slot = Some(key.clone());
        Ok(key)
    }

    /// How the module of a sandbox was loaded and how long that took (ms).
    pub fn module_load(&self, id: &str) -> Result<(LoadPath, f64)> {
        let sb = self.sandbox(id)?;
        Ok((sb.module.load, sb.module.load_ms))
    }

    /// The pinned digest of `path` when it is an intact installed runtime (so that
    /// loading it skips hashing 26 MB).
    fn known_digest(&self, path: &Path) -> Option<String> {
        runtime::RUNTIMES.iter().find_map(|spec| {
            let inst = runtime::installed(spec, &self.inner.config.home)?;
            (inst.module == path).then_some(inst.sha256)
        })
    }

    /// Resolves `spec.image` to a module file.
    pub(crate) fn resolve_image(&self, image: &str) -> Result<PathBuf> {
        if let Some(rt) = RuntimeSpec::find(image) {
            return match runtime::installed(rt, &self.inner.config.home) {
                Some(inst) => Ok(inst.module),
                None => Err(Error::Unavailable {
                    what: format!("the {} runtime", rt.name),
                    reason: format!(
                        "it is not installed in {}",
                        rt.dir_in(&self.inner.config.home).display()
                    ),
                    fix: format!("run `stockade runtime install {}`", rt.name),
                }),
            };
        }
        if image.ends_with(".cwasm") {
            return Err(spec_error(
                "image",
                format!(
                    "image {image:?} is a precompiled .cwasm artifact; Stockade never loads precompiled code it did not compile itself: pass the .wasm module instead (it is compiled once and cached)"
                ),
            ));
        }
        let looks_like_file = image.ends_with(".wasm") || image.contains('/');
        if !looks_like_file {
            let known: Vec<_> = runtime::RUNTIMES.iter().map(|r| r.name).collect();
            return Err(spec_error(
                "image",
                format!(
                    "image {image:?} is neither a .wasm file nor a known runtime ({}); the wasm provider does not run OCI images",
                    known.join(", ")
                ),
            ));
        }
        let path = std::path::absolute(image)
            .map_err(|e| Error::io(format!("cannot resolve image path {image}"), e))?;
        if !path.is_file() {
            return Err(spec_error(
                "image",
                format!("module {} does not exist or is not a file", path.display()),
            ));
        }
        Ok(path)
    }

    /// Loads (or finds in memory) the module at `path` and links it.
    pub(crate) fn module(&self, path: &Path) -> Result<Arc<ModuleEntry>> {
        // The in-memory key and the bytes compiled come from one open file, so the
        // entry describes exactly what was loaded.
        let file = open_module(path)?;
        let md = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat module {}", path.display()), e))?;
        let key = ModuleKey {
            path: path.to_path_buf(),
            dev: md.dev(),
            ino: md.ino(),
            len: md.len(),
            mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        };
        if let Some(m) = lock(&self.inner.modules).get(&key) {
            return Ok(m.clone());
        }
        let loaded = self.load(path, &file)?;
        let pre = exec::prelink(&self.inner.linker, &loaded.module, path)?;
        let entry = Arc::new(ModuleEntry {
            pre,
            source: path.to_path_buf(),
            sha256: loaded.sha256,
            load: loaded.path,
            load_ms: loaded.load_ms,
        });
        lock(&self.inner.modules).insert(key, entry.clone());
        Ok(entry)
    }
}
