//! The image a spec names, from the local image store, as the planner needs it.

use std::path::{Path, PathBuf};

use stockade_core::Error;
use stockade_image::{Config, PullOptions, Store};

use crate::layout::Entry;
use crate::plan::{ImageRoot, SYNTHETIC_ETC};

/// Top-level names of an image that the sandbox gets from elsewhere (`.stockade` is
/// the agent's scratch directory).
const NOT_FROM_IMAGE: &[&str] = &["etc", "proc", "sys", "dev", "tmp", ".stockade"];

/// Opens the store at `store` (default `$STOCKADE_HOME/images`).
fn open_store(store: Option<&Path>) -> Result<Store, Error> {
    match store {
        Some(root) => Store::open(root),
        None => Store::open_default(),
    }
    .map_err(Error::from)
}

/// Pulls `reference` when the store does not have it (pull on first use), with the
/// credentials of the environment and the registries of the config file.
pub async fn ensure_image(reference: &str, store: Option<&Path>) -> Result<(), Error> {
    let store = open_store(store)?;
    match store.resolve(reference) {
        Ok(_) => return Ok(()),
        Err(stockade_image::Error::ImageNotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let config = Config::load()?;
    let options = PullOptions::from_env(&config);
    stockade_image::pull(&store, reference, &options, &mut |_| {})
        .await
        .map(|_| ())
        .map_err(Error::from)
}

/// Finds `reference` in the store (`store`, default `$STOCKADE_HOME/images`),
/// flattens it once, and lists its root. A missing image is `NotFound`, with how to
/// get it.
/// The returned file holds the image in use until the monitor holds it too.
pub fn image_root(
    reference: &str,
    store: Option<&Path>,
) -> Result<(ImageRoot, std::fs::File), Error> {
    let store = open_store(store)?;
    let image = store.image(reference)?;
    // In use from here on: gc keeps the tree, `image rm` refuses.
    let (in_use_lock, guard) = store.hold(&image.digest)?;
    let rootfs = store.rootfs(&image)?;
    let run = image.run_config();
    let user = match run.user.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(u) => image_user(&rootfs, u).map_err(|reason| {
            Error::InvalidRequest(format!("image {reference} names user {u:?}: {reason}"))
        })?,
    };
    let root = ImageRoot {
        root: entries(&rootfs, Path::new("/"), NOT_FROM_IMAGE)?,
        etc: entries(&rootfs, Path::new("/etc"), SYNTHETIC_ETC)?,
        rootfs,
        env: run.env.unwrap_or_default(),
        workdir: run
            .working_dir
            .filter(|w| w.starts_with('/'))
            .map(PathBuf::from),
        user,
        in_use_lock: Some(in_use_lock),
    };
    Ok((root, guard))
}

/// The uid and gid of an image config's `User` (`name`, `uid`, `name:group`,
/// `uid:gid`), looked up in the image's own `/etc/passwd` and `/etc/group`. Root is
/// `None`: the sandbox keeps its default non-root user.
pub fn image_user(rootfs: &Path, user: &str) -> Result<Option<(u32, u32)>, String> {
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    // Resolved inside the rootfs, as the sandbox would: an image's `/etc -> /` or
    // `/etc/passwd -> /etc/shadow` never reaches the host's files.
    let read = |name: &str| -> String {
        let p = Path::new("etc").join(name);
        stockade_image::inroot::read(rootfs, &p, 4 << 20)
            .map(|d| String::from_utf8_lossy(&d).into_owned())
            .unwrap_or_default()
    };
    let passwd = read("passwd");
    let lookup = |table: &str, key: &str, id_field: usize| -> Option<(u32, Option<u32>)> {
        table.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&key)).then(|| {
                let id = f.get(id_field)?.parse().ok()?;
                Some((id, f.get(id_field + 1).and_then(|g| g.parse().ok())))
            })?
        })
    };
    let (uid, primary_gid) = match u.parse::<u32>() {
        Ok(uid) => {
            let gid = passwd.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2).and_then(|x| x.parse::<u32>().ok()) == Some(uid))
                    .then(|| f.get(3).and_then(|g| g.parse().ok()))?
            });
            (uid, gid)
        }
        Err(_) => lookup(&passwd, u, 2)
            .ok_or_else(|| format!("no user {u:?} in the image's /etc/passwd"))?,
    };
    let gid = match g {
        None => primary_gid.unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => lookup(&read("group"), g, 2)
                .map(|(gid, _)| gid)
                .ok_or_else(|| format!("no group {g:?} in the image's /etc/group"))?,
        },
    };
    Ok((uid != 0).then_some((uid, gid)))
}

/// The entries of the image directory `under` (a sandbox path; none when it does not
/// exist), resolved inside `rootfs` as the sandbox would resolve it: an image's
/// `/etc -> /` lists the image's own root, never the host's.
fn entries(rootfs: &Path, under: &Path, skip: &[&str]) -> Result<Vec<(PathBuf, Entry)>, Error> {
    use stockade_image::inroot::{self, Kind};
    let rel = under.strip_prefix("/").unwrap_or(under);
    let cannot = |e| {
        Error::io(
            format!(
                "cannot read {} of image {}",
                under.display(),
                rootfs.display()
            ),
            e,
        )
    };
    let listed = match inroot::read_dir(rootfs, rel) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        // `/etc` that is a file, or a symlink loop: the image has no such directory.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::ENOTDIR | nix::libc::ELOOP)
            ) =>
        {
            return Ok(Vec::new());
        }
        Err(e) => return Err(cannot(e)),
    };
    let mut out = Vec::new();
    for (name, kind) in listed {
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        let entry = match kind {
            Kind::Symlink => match inroot::read_link(rootfs, &rel.join(&name)) {
                Ok(to) => Entry::Symlink(to.to_string_lossy().into_owned()),
                Err(_) => continue,
            },
            Kind::Dir => Entry::Dir,
            Kind::File => Entry::File,
            Kind::Other => continue,
        };
        out.push((under.join(&name), entry));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_users_resolve_from_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(
            etc.join("passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1001:1002::/home/app:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(etc.join("group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        let r = dir.path();
        assert_eq!(image_user(r, "app").unwrap(), Some((1001, 1002)));
        assert_eq!(image_user(r, "app:staff").unwrap(), Some((1001, 50)));
        assert_eq!(image_user(r, "1001").unwrap(), Some((1001, 1002)));
        assert_eq!(image_user(r, "4242").unwrap(), Some((4242, 4242)));
        assert_eq!(image_user(r, "4242:7").unwrap(), Some((4242, 7)));
        assert_eq!(image_user(r, "root").unwrap(), None);
        assert_eq!(image_user(r, "0").unwrap(), None);
        assert!(image_user(r, "ghost").unwrap_err().contains("ghost"));
        assert!(image_user(r, "app:ghosts").unwrap_err().contains("ghosts"));
        // A passwd that is a symlink (to the host's, say) is not read.
        std::fs::remove_file(etc.join("passwd")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", etc.join("passwd")).unwrap();
        assert!(image_user(r, "root").is_err());
    }
}
