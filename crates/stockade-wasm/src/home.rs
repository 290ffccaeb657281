//! Where stockade keeps its data, and the secret key of the artifact cache.

use std::path::Path;

use stockade_core::Result;
use stockade_sys::wasm::ArtifactKey;

pub(crate) use stockade_wasm_host::home::{hex, make_private_dir};

/// The secret that authenticates the artifact cache (see `stockade_sys::wasm`): the
/// file `path`, 32 random bytes, mode 0600, made on first use
/// (`stockade_core::host::secret_key`).
pub(crate) fn artifact_key(path: &Path) -> Result<ArtifactKey> {
    let bytes = stockade_core::host::secret_key(
        path,
        "the artifact key",
        "and the artifact cache is compiled again",
    )?;
    Ok(ArtifactKey::from_bytes(&bytes))
}

pub(crate) use stockade_core::host::open_nofollow;

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use stockade_sys::wasm::KEY_LEN;

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
