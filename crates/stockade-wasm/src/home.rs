//! Where stockade keeps its data, and the secret key of the artifact cache.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use stockade_core::{Error, Result};
use stockade_sys::wasm::{ArtifactKey, KEY_LEN};

pub(crate) use stockade_wasm_host::home::{hex, make_private_dir};

/// The secret that authenticates the artifact cache (see `stockade_sys::wasm`): the
/// file `path`, 32 random bytes, mode 0600, made on first use. Processes that start at
/// once agree on one key: each writes a candidate to a temporary file beside it and
/// links that into place, which fails for all but the first; then every one reads the
/// file. A key file that others could read or change is refused, not used.
pub(crate) fn artifact_key(path: &Path) -> Result<ArtifactKey> {
    for _ in 0..3 {
        if let Some(key) = read_key(path)? {
            return Ok(key);
        }
        create_key(path)?;
    }
    Err(Error::Internal(format!(
        "the artifact key {} keeps disappearing after it is made",
        path.display()
    )))
}

/// Opens `path` for reading without following it when it is a symlink (that fails
/// with `ELOOP`), so a link planted in the cache or key directory is never read.
pub(crate) fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// The key in `path`; `None` when there is no such file yet.
fn read_key(path: &Path) -> Result<Option<ArtifactKey>> {
    use std::io::Read;
    let mut file = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("cannot open the artifact key {}", path.display()),
                e,
            ));
        }
    };
    let md = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    let me = stockade_core::host::euid();
    let fix = "remove it: a new key is made on next use (and the artifact cache is compiled again)";
    if !md.is_file() || md.uid() != me || md.mode() & 0o077 != 0 || md.len() != KEY_LEN as u64 {
        return Err(Error::PolicyDenied(format!(
            "the artifact key {} is not a {KEY_LEN}-byte file owned by uid {me} with mode 0600 (it is owned by uid {}, mode {:o}, {} bytes); {fix}",
            path.display(),
            md.uid(),
            md.mode() & 0o7777,
            md.len()
        )));
    }
    let mut bytes = [0u8; KEY_LEN];
    file.read_exact(&mut bytes)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    Ok(Some(ArtifactKey::from_bytes(&bytes)))
}

/// Makes a key at `path` unless one is there (another process may win the race: fine).
fn create_key(path: &Path) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    make_private_dir(dir)?;
    let bytes = ArtifactKey::random_bytes()
        .map_err(|e| Error::io("cannot draw a random artifact key".to_string(), e))?;
    // tempfile creates it with O_EXCL and mode 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".artifact-key.")
        .tempfile_in(dir)
        .map_err(|e| Error::io(format!("cannot create a key file in {}", dir.display()), e))?;
    tmp.write_all(&bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::io(format!("cannot write a key file in {}", dir.display()), e))?;
    match tmp.persist_noclobber(path) {
        Ok(_) => Ok(()),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(
            format!("cannot create the artifact key {}", path.display()),
            e.error,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_is_made_once_private_and_shared_by_concurrent_creators() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("keys/artifact.key");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    artifact_key(&path).unwrap();
                    std::fs::read(&path).unwrap()
                })
            })
            .collect();
        let keys: Vec<Vec<u8>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(keys[0].len(), KEY_LEN);
        assert!(keys.iter().all(|k| *k == keys[0]), "one key for all");
        let md = std::fs::metadata(&path).unwrap();
        assert_eq!(md.mode() & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap()).unwrap().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["artifact.key"], "no temporary files left");

        // A key others can read is refused, with what to do.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = artifact_key(&path).unwrap_err().to_string();
        assert!(
            err.contains("mode 644") && err.contains("remove it"),
            "{err}"
        );
        // So is a symlink to a key.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = home.path().join("link.key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(artifact_key(&link).is_err());
    }
}
