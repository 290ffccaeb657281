//! What a tenant may name on the daemon's host: host mounts inside the directories
//! the operator allows (`--allow-mount`), images by name only, sessions by name only.
//!
//! A tenant's mount source is never opened by its path. It is resolved with
//! `openat2(allowed_dir, rest, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: every
//! component is walked from the allowed directory's descriptor, no symlink is
//! followed (one anywhere refuses the mount), `..` cannot climb out. The resulting
//! descriptor (`O_PATH`) is bind-mounted from `/proc/self/fd/N` onto a staging point
//! in the daemon's own state directory, and the provider is given that point. So
//! what the sandbox gets is exactly the object that was checked: a tenant that can
//! write inside the allowed directory (through another sandbox) and swaps a
//! component for a symlink after the check cannot redirect the mount (the provider
//! never walks the tenant's path). Canonicalizing and then checking the prefix
//! would leave that window open, since the provider would walk the path again.
//!
//! A path outside every allowed directory is refused before the file system is
//! touched, so the error is the same whether it exists or not.

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

use stockade::{Error, Result, SandboxSpec};

use super::Daemon;
use crate::store::random_hex;

/// The label naming a sandbox's staged mounts (a directory under the staging root).
pub const STAGED_LABEL: &str = "stockade.staged-mounts";

/// Which host paths specs may mount.
#[derive(Clone, Debug)]
pub struct MountPolicy {
    /// `None`: any host path (one local, trusted caller); else the allowed directories,
    /// canonical.
    allowed: Option<Vec<PathBuf>>,
    /// Where tenants' mount sources are staged (`STATE/mounts`).
    staging: PathBuf,
}

impl MountPolicy {
    /// `dirs` as allowed (each must be an existing directory); with no `dirs`,
    /// anything when there are no tenants and nothing when there are.
    pub fn new(dirs: &[PathBuf], tenants: bool, staging: PathBuf) -> anyhow::Result<MountPolicy> {
        if dirs.is_empty() && !tenants {
            return Ok(MountPolicy {
                allowed: None,
                staging,
            });
        }
        let mut allowed = Vec::new();
        for d in dirs {
            // The operator's own paths: following their symlinks is what they mean.
            let c = std::fs::canonicalize(d).map_err(|e| {
                anyhow::anyhow!(
                    "--allow-mount {}: {e} (name an existing directory)",
                    d.display()
                )
            })?;
            if !c.is_dir() {
                anyhow::bail!("--allow-mount {}: not a directory", d.display());
            }
            allowed.push(c);
        }
        Ok(MountPolicy {
            allowed: Some(allowed),
            staging,
        })
    }

    fn refuse(&self, host: &Path) -> Error {
        let allowed = self.allowed.as_deref().unwrap_or_default();
        let dirs = if allowed.is_empty() {
            "none".to_string()
        } else {
            allowed
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        Error::PolicyDenied(format!(
            "mount source {} is not inside a directory this daemon lets tenants mount \
             (allowed: {dirs}; the operator adds one with `--allow-mount DIR`)",
            host.display()
        ))
    }

    /// The allowed directory `host` is lexically inside, and the rest of the path.
    /// Touches no file system.
    fn place<'a>(&'a self, host: &'a Path) -> Result<(&'a Path, &'a Path)> {
        let lexical_ok = host.is_absolute()
            && host
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !lexical_ok {
            return Err(self.refuse(host));
        }
        self.allowed
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find_map(|d| host.strip_prefix(d).ok().map(|rest| (d.as_path(), rest)))
            .ok_or_else(|| self.refuse(host))
    }

    /// Checks every mount of `spec` without staging (pool templates): refuses what
    /// lies outside the allowed directories.
    pub fn check(&self, spec: &SandboxSpec) -> Result<()> {
        if self.allowed.is_none() {
            return Ok(());
        }
        for m in &spec.mounts {
            self.place(&m.host)?;
        }
        Ok(())
    }

    /// Resolves each mount of `spec` safely and stages it; returns the spec with the
    /// staged sources and the staging (to commit once the sandbox exists).
    pub fn stage(&self, d: &Daemon, mut spec: SandboxSpec) -> Result<(SandboxSpec, Staging)> {
        // Only the daemon names stagings (a caller's label would keep another's alive).
        spec.labels.remove(STAGED_LABEL);
        let mut staging = Staging {
            dir: None,
            token: String::new(),
            in_flight: d.staging_in_flight.clone(),
        };
        if self.allowed.is_none() || spec.mounts.is_empty() {
            return Ok((spec, staging));
        }
        let token = random_hex(8);
        let dir = self.staging.join(&token);
        staging.token = token.clone();
        d.staging_in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token.clone());
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        staging.dir = Some(dir.clone());
        for (i, m) in spec.mounts.iter_mut().enumerate() {
            let fd = self.open_beneath(&m.host)?;
            let point = dir.join(i.to_string());
            let kind = rustix::fs::fstat(&fd)
                .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode))
                .map_err(|e| Error::io(format!("cannot stat {}", m.host.display()), e.into()))?;
            let is_dir = kind.is_dir();
            if !is_dir && !kind.is_file() {
                return Err(Error::PolicyDenied(format!(
                    "mount source {} is neither a directory nor a regular file",
                    m.host.display()
                )));
            }
            if is_dir {
                std::fs::create_dir(&point)
            } else {
                std::fs::File::create(&point).map(|_| ())
            }
            .map_err(|e| Error::io(format!("cannot create {}", point.display()), e))?;
            bind(&format!("/proc/self/fd/{}", fd.as_raw_fd()), &point).map_err(|e| {
                Error::Internal(format!("cannot stage mount {}: {e}", m.host.display()))
            })?;
            m.host = point;
        }
        spec.labels.insert(STAGED_LABEL.into(), token);
        Ok((spec, staging))
    }

    /// Opens `host` beneath its allowed directory without following any symlink.
    fn open_beneath(&self, host: &Path) -> Result<rustix::fd::OwnedFd> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let (dir, rest) = self.place(host)?;
        let root = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io(format!("cannot open {}", dir.display()), e.into()))?;
        let rest = if rest.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rest
        };
        rustix::fs::openat2(
            &root,
            rest,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => {
                Error::InvalidRequest(format!("mount source {} does not exist", host.display()))
            }
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => Error::PolicyDenied(format!(
                "mount source {} goes through a symbolic link (refused: name the real path \
                 inside {})",
                host.display(),
                dir.display()
            )),
            e => Error::io(format!("cannot open {}", host.display()), e.into()),
        })
    }

    /// Unmounts and removes staged mounts no live sandbox names. `live` are the
    /// staging labels of every live sandbox, listed AFTER `candidates` were read and
    /// `in_flight` snapshotted (so a staging that starts meanwhile is not a candidate).
    pub fn sweep(
        &self,
        candidates: &[String],
        in_flight: &HashSet<String>,
        live: &HashSet<String>,
    ) {
        for t in candidates {
            if in_flight.contains(t) || live.contains(t) {
                continue;
            }
            unstage(&self.staging.join(t));
        }
    }

    /// The staging directories that exist now.
    pub fn staged(&self) -> Vec<String> {
        if self.allowed.is_none() {
            return Vec::new();
        }
        std::fs::read_dir(&self.staging)
            .map(|rd| {
                rd.filter_map(std::result::Result::ok)
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `mount --bind SOURCE TARGET` (not recursive), then private, so nothing mounted
/// later propagates into or out of it.
fn bind(source: &str, target: &Path) -> nix::Result<()> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_PRIVATE,
        None::<&str>,
    )
}

/// Detaches every staged mount under `dir` and removes it.
fn unstage(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(&p).or_else(|_| std::fs::remove_file(&p));
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The staged mounts of one creation: removed on drop unless committed (then the
/// sandbox's label keeps them until the sweep finds it gone).
pub struct Staging {
    dir: Option<PathBuf>,
    token: String,
    in_flight: std::sync::Arc<std::sync::Mutex<HashSet<String>>>,
}

impl Staging {
    /// The sandbox exists: keep its mounts.
    pub fn commit(mut self) {
        self.dir = None;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            unstage(&dir);
        }
        if !self.token.is_empty() {
            self.in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&self.token);
        }
    }
}

/// A tenant's image names something the provider resolves itself: a runtime name
/// for wasm (never a module file), an image reference for the others (never an
/// archive or a directory). Touches no file system, so the answer is the same
/// whether a path exists or not.
pub fn check_image(provider: &str, image: Option<&str>) -> Result<()> {
    let Some(image) = image else {
        return Ok(());
    };
    if provider == "wasm" {
        if stockade::wasm::runtime::RuntimeSpec::find(image).is_some() {
            return Ok(());
        }
        let names: Vec<String> = stockade::wasm::runtime::RUNTIMES
            .iter()
            .flat_map(|r| std::iter::once(r.name).chain(r.aliases.iter().copied()))
            .map(str::to_string)
            .collect();
        return Err(Error::PolicyDenied(format!(
            "image {image:?} is not a runtime: a tenant of the daemon names a wasm module \
             by runtime name ({}), never by a host path",
            names.join(", ")
        )));
    }
    let path_like = image.starts_with(['/', '.', '~']) || image.contains("..");
    if path_like || stockade_image::Reference::parse(image).is_err() {
        return Err(Error::PolicyDenied(format!(
            "image {image:?} is not an image reference (like python:3.12 or \
             ghcr.io/org/repo@sha256:...): a tenant of the daemon names images, never host \
             paths or archives"
        )));
    }
    Ok(())
}

/// A session name is a plain name (never a path): the core's own check.
pub use stockade::check_session_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_lexical_and_refuse_dotdot_and_outside_alike() {
        let p = MountPolicy {
            allowed: Some(vec!["/srv/data".into()]),
            staging: "/x".into(),
        };
        assert!(p.place(Path::new("/srv/data/a/b")).is_ok());
        assert!(p.place(Path::new("/srv/data")).is_ok());
        let outside = |h: &str| {
            p.place(Path::new(h))
                .unwrap_err()
                .to_string()
                .replace(h, "P")
        };
        let e = outside("/etc");
        for h in [
            "/nonexistent-x",
            "/srv/data/../../etc",
            "/srv/database",
            "rel",
            "/srv/data/./..",
        ] {
            assert_eq!(outside(h), e, "{h}");
        }
        let none = MountPolicy {
            allowed: Some(vec![]),
            staging: "/x".into(),
        };
        assert!(
            none.place(Path::new("/tmp"))
                .unwrap_err()
                .to_string()
                .contains("allowed: none")
        );
    }

    #[test]
    fn images_from_tenants_are_names_only() {
        for ok in ["python", "python3", "py", "python-wasm"] {
            check_image("wasm", Some(ok)).unwrap();
        }
        let msg = |i: &str| {
            check_image("wasm", Some(i))
                .unwrap_err()
                .to_string()
                .replace(i, "I")
        };
        let e = msg("/etc/passwd");
        for bad in ["/nonexistent/x.wasm", "m.wasm", "./m.cwasm", "../x"] {
            assert_eq!(msg(bad), e, "{bad}");
        }
        for ok in [
            "python:3.12",
            "debian",
            "ghcr.io/o/r:1",
            "127.0.0.1:5000/x/y:t",
        ] {
            check_image("native", Some(ok)).unwrap();
        }
        for bad in ["/tmp/img.tar", "./layout", "../x", "~/img", "a/../../b"] {
            assert!(check_image("docker", Some(bad)).is_err(), "{bad}");
            assert!(check_image("native", Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn session_names_are_not_paths() {
        check_session_name("proj-1.a_b").unwrap();
        for bad in [
            "",
            "..",
            "../x",
            "a/b",
            "/etc",
            ".hidden",
            "a\0b",
            &"x".repeat(65),
        ] {
            assert!(check_session_name(bad).is_err(), "{bad:?}");
        }
    }
}
