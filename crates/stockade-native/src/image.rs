//! The image a spec names, from the local image store, as the planner needs it.

use std::path::{Path, PathBuf};

use stockade_core::Error;
use stockade_image::{Reference, Store};

use crate::layout::Entry;
use crate::plan::{ImageRoot, SYNTHETIC_ETC};

/// Top-level names of an image that the sandbox gets from elsewhere.
const NOT_FROM_IMAGE: &[&str] = &["etc", "proc", "sys", "dev", "tmp"];

/// Finds `reference` in the store (`store`, default `$STOCKADE_HOME/images`),
/// flattens it once, and lists its root. A missing image is `NotFound`, with how to
/// get it.
pub fn image_root(reference: &str, store: Option<&Path>) -> Result<ImageRoot, Error> {
    let internal = |e: stockade_image::Error| Error::Internal(e.to_string());
    let store = match store {
        Some(root) => Store::open(root),
        None => Store::open_default(),
    }
    .map_err(internal)?;
    let image = store.image(reference).map_err(|e| match e {
        stockade_image::Error::ImageNotFound { .. } => Error::NotFound {
            kind: "image",
            id: format!(
                "{} (get it with `stockade image pull {reference}` or `stockade image import`)",
                Reference::parse(reference)
                    .map(|r| r.to_string())
                    .unwrap_or(reference.into())
            ),
        },
        stockade_image::Error::InvalidReference { .. } => Error::InvalidRequest(e.to_string()),
        e => internal(e),
    })?;
    let rootfs = store.rootfs(&image).map_err(internal)?;
    let run = image.run_config();
    Ok(ImageRoot {
        root: entries(&rootfs, Path::new("/"), NOT_FROM_IMAGE)?,
        etc: entries(&rootfs.join("etc"), Path::new("/etc"), SYNTHETIC_ETC)?,
        rootfs,
        env: run.env.unwrap_or_default(),
        workdir: run
            .working_dir
            .filter(|w| w.starts_with('/'))
            .map(PathBuf::from),
    })
}

/// The entries of `dir` (none when it does not exist) as paths under `under`.
fn entries(dir: &Path, under: &Path, skip: &[&str]) -> Result<Vec<(PathBuf, Entry)>, Error> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("cannot read {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Error::io(format!("cannot read {}", dir.display()), e))?;
        let name = e.file_name();
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        let Ok(t) = e.file_type() else { continue };
        let entry = if t.is_symlink() {
            match std::fs::read_link(e.path()) {
                Ok(to) => Entry::Symlink(to.to_string_lossy().into_owned()),
                Err(_) => continue,
            }
        } else if t.is_dir() {
            Entry::Dir
        } else if t.is_file() {
            Entry::File
        } else {
            continue;
        };
        out.push((under.join(&name), entry));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
