//! Each E2B sandbox's `/home/user`: a size-capped host tmpfs of its own, made by the
//! daemon's mount maker before the sandbox starts (warm or cold), seeded from a built
//! template's image, and removed when the sandbox is gone.

use std::path::PathBuf;

use stockade::spec::Mount;

/// The kind of the daemon pools of E2B sandboxes (their homes are made per sandbox).
pub const HOME_KIND: &str = "e2b-home";

/// Makes each E2B sandbox's `/home/user`: a size-capped host tmpfs of its own, made
/// before the sandbox (warm or cold) and released by the daemon when it is gone.
pub(crate) struct HomeMaker {
    pub(crate) homes: PathBuf,
    pub(crate) size: u64,
    pub(crate) owner: Option<(u32, u32)>,
    /// What a new home starts with: a built template's `/home/user`.
    pub(crate) seed: Option<PathBuf>,
    /// The server's own mounts besides the home (a template build's base and output).
    pub(crate) extra: Vec<Mount>,
    /// A writable root's image (store, reference): seen read-only at
    /// [`crate::templates::BASE_AT`], the tree a snapshot's layer is taken against.
    pub(crate) base: Option<(stockade_image::Store, String)>,
}

impl stockade_server::daemon::MountMaker for HomeMaker {
    fn kind(&self) -> &str {
        HOME_KIND
    }

    fn make(&self) -> stockade::Result<Vec<Mount>> {
        let home = self
            .homes
            .join(format!("h{}", stockade::host::random_hex(10)));
        make_home(&home, self.size, self.owner)?;
        if let Some(seed) = &self.seed
            && let Err(e) = seed_home(seed, &home, self.owner)
        {
            remove_home(&home);
            return Err(stockade::Error::LimitExceeded {
                what: format!("the template's home ({})", seed.display()),
                limit: format!(
                    "a home of {} bytes (the sandbox's /tmp size): {e}",
                    self.size
                ),
            });
        }
        let mut mounts = vec![Mount {
            host: home.clone(),
            target: "/home/user".into(),
            writable: true,
        }];
        if let Some((store, image)) = &self.base {
            match store.image(image).and_then(|i| store.rootfs(&i)) {
                Ok(root) => mounts.push(Mount {
                    host: root,
                    target: crate::templates::BASE_AT.into(),
                    writable: false,
                }),
                Err(e) => {
                    remove_home(&home);
                    return Err(stockade::Error::InvalidRequest(format!(
                        "image {image} of the template: {e}"
                    )));
                }
            }
        }
        mounts.extend(self.extra.iter().cloned());
        Ok(mounts)
    }

    fn release(&self, mounts: &[Mount]) {
        for m in mounts {
            // Only what this maker made (a path under its directory).
            if m.host.parent() == Some(self.homes.as_path()) {
                remove_home(&m.host);
            }
        }
    }
}

/// A sandbox's home on the host: a tmpfs of `size` bytes (as the sandbox's `/tmp`),
/// so what the sandbox writes there is capped and never reaches the host's disk.
fn make_home(home: &std::path::Path, size: u64, owner: Option<(u32, u32)>) -> stockade::Result<()> {
    use nix::mount::{MsFlags, mount};
    std::fs::create_dir_all(home)
        .map_err(|e| stockade::Error::io(format!("cannot create {}", home.display()), e))?;
    let opts = format!("size={size},mode=0700");
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if let Err(e) = mount(
        Some("tmpfs"),
        home,
        Some("tmpfs"),
        flags,
        Some(opts.as_str()),
    ) {
        let _ = std::fs::remove_dir(home);
        return Err(stockade::Error::Unavailable {
            what: "an E2B sandbox's home".into(),
            reason: format!(
                "cannot mount a size-capped tmpfs on {}: {e}",
                home.display()
            ),
            fix: "run stockade serve as root for --e2b-listen".into(),
        });
    }
    if let Some((uid, gid)) = owner
        && let Err(e) = std::os::unix::fs::chown(home, Some(uid), Some(gid))
    {
        remove_home(home);
        return Err(stockade::Error::io(
            format!("cannot give {} to host uid {uid}", home.display()),
            e,
        ));
    }
    Ok(())
}

/// Copies a template's home (`from`, in the image's root, or a snapshot's) into a
/// new one, owned by the sandbox user (`owner`: its host ids; none: the server's).
/// Regular files, directories and symbolic links are copied, with their permission
/// bits (no set-id bits); the rest (FIFOs, sockets, devices) is left out. Nothing in
/// `from` may change meanwhile: a running sandbox's home is copied while it is frozen.
pub(crate) fn seed_home(
    from: &std::path::Path,
    home: &std::path::Path,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), home.join(e.file_name()));
        let m = std::fs::symlink_metadata(&src)?;
        let t = m.file_type();
        if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if t.is_dir() {
            std::fs::create_dir(&dst)?;
            seed_home(&src, &dst, owner)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(m.mode() & 0o777))?;
        } else if t.is_file() {
            std::fs::copy(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(m.mode() & 0o777))?;
        } else {
            continue;
        }
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::lchown(&dst, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// Unmounts and removes a home made by [`make_home`].
pub(crate) fn remove_home(home: &std::path::Path) {
    let _ = nix::mount::umount2(home, nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir_all(home);
}
