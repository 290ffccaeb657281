//! How a spec maps onto a WASI sandbox: the wasm-specific refusals, and what is
//! reported as applied.

use std::path::{Path, PathBuf};

use stockade_core::{Error, Result, ValidatedSpec, Wall, WallKind};
use stockade_spec::{SpecError, SpecErrors, format_size};

use crate::module::ModuleEntry;
use crate::{TMP_DIR, WasmProvider};

pub(crate) fn spec_error(field: &str, message: String) -> Error {
    Error::InvalidSpec(SpecErrors::one(field, message))
}

/// `path` with its longest existing ancestor resolved (links, `..`): where it is or
/// will be once made.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    loop {
        if let Ok(real) = std::fs::canonicalize(&at) {
            return rest
                .iter()
                .rev()
                .fold(real, |p, c: &std::ffi::OsString| p.join(c));
        }
        match (
            at.file_name().map(std::ffi::OsStr::to_os_string),
            at.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                at = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

impl WasmProvider {
    /// The wasm-specific refusals, all listed at once.
    pub(crate) fn check_spec(&self, spec: &ValidatedSpec) -> Result<()> {
        let mut errs = Vec::new();
        let mut bad = |field: String, message: String| errs.push(SpecError { field, message });
        if spec.limits.cpus < 1.0 {
            bad(
                "limits.cpus".into(),
                format!(
                    "the wasm provider cannot throttle an exec below one cpu (asked {})",
                    spec.limits.cpus
                ),
            );
        }
        for (i, m) in spec.mounts.iter().enumerate() {
            if m.target == Path::new(TMP_DIR) {
                bad(
                    format!("mounts[{i}].target"),
                    "target /tmp is the sandbox's own /tmp on the wasm provider".into(),
                );
            }
            match std::fs::metadata(&m.host) {
                Ok(md) if md.is_dir() => {
                    if let Some(private) = self.overlaps_private(&m.host) {
                        bad(
                            format!("mounts[{i}].host"),
                            format!(
                                "mount source {} would give the sandbox {}, which holds Stockade's compiled code or its key; mount a directory that neither holds it nor lies in it",
                                m.host.display(),
                                private.display()
                            ),
                        );
                    }
                }
                Ok(_) => bad(
                    format!("mounts[{i}].host"),
                    format!(
                        "mount source {} is a file; the wasm provider mounts directories only",
                        m.host.display()
                    ),
                ),
                Err(e) => bad(
                    format!("mounts[{i}].host"),
                    format!("mount source {} cannot be used: {e}", m.host.display()),
                ),
            }
        }
        let workdir = spec.effective_workdir();
        let covered = workdir.starts_with(TMP_DIR)
            || spec.mounts.iter().any(|m| workdir.starts_with(&m.target));
        if !covered {
            bad(
                "workdir".into(),
                format!(
                    "workdir {} is not in /tmp or a mount; the wasm sandbox has no other directories",
                    workdir.display()
                ),
            );
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidSpec(SpecErrors(errs)))
        }
    }

    /// The directory of the artifact cache or of its key that a mount of `host` would
    /// reach (`host` is one of them, lies in one, or holds one), if any.
    fn overlaps_private(&self, host: &Path) -> Option<PathBuf> {
        let host = std::fs::canonicalize(host).ok()?;
        let config = &self.inner.config;
        let key_dir = config.key_file.parent().unwrap_or(Path::new("/"));
        [config.cache_dir.as_path(), key_dir]
            .into_iter()
            .map(canonical_prefix)
            .find(|d| d.starts_with(&host) || host.starts_with(d))
    }

    pub(crate) fn applied(&self, spec: &ValidatedSpec, module: &ModuleEntry) -> Vec<Wall> {
        use WallKind as K;
        let fuel = self.inner.config.fuel_per_exec;
        let mut a = vec![
            Wall::on(
                K::Isolation,
                format!(
                    "module {} (sha256 {}), WASI preview 1",
                    module.source.display(),
                    module.sha256
                ),
            ),
            Wall::on(K::Network, "none (no sockets granted)"),
            Wall::on(
                K::Limits,
                format!(
                    "memory {} for all execs together (linear memory growth past it fails in the guest)",
                    format_size(spec.limits.memory_bytes)
                ),
            ),
            Wall::on(
                K::Tmp,
                format!(
                    "private host directory capped at {} and {} entries, removed at destroy",
                    format_size(spec.limits.tmp_bytes),
                    self.inner.config.tmp_max_entries
                ),
            ),
            Wall::on(
                K::Limits,
                format!(
                    "pids: at most {} execs at once, one thread each",
                    spec.limits.pids
                ),
            ),
            Wall::on(K::Limits, "cpu: one host thread per exec"),
            Wall::on(
                K::Lifetime,
                format!(
                    "{} s and exec deadlines: epoch interruption",
                    spec.timeout_secs
                ),
            ),
            Wall::on(
                K::Isolation,
                "seccomp, landlock, no_new_privileges, capabilities: by construction (a module has no syscalls, reaches files only through preopens, holds no privileges)",
            ),
            Wall::on(K::User, "not applicable in WASI (nor is a hostname)"),
        ];
        for m in &spec.mounts {
            a.push(Wall::on(
                K::Mount,
                format!(
                    "{} -> {} ({})",
                    m.host.display(),
                    m.target.display(),
                    if m.writable {
                        "read-write"
                    } else {
                        "read-only"
                    }
                ),
            ));
        }
        if let Some(f) = fuel {
            a.push(Wall::on(K::Limits, format!("fuel: {f} per exec")));
        }
        a
    }
}
