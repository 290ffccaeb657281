//! Where stockade keeps its data, and the ownership checks for files we trust.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use stockade_core::{Error, Result};

/// `$STOCKADE_HOME`, else `/var/lib/stockade` for root, else
/// `$XDG_DATA_HOME/stockade` (default `~/.local/share/stockade`).
pub fn stockade_home() -> PathBuf {
    if let Some(h) = std::env::var_os("STOCKADE_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/stockade");
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("stockade");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/share/stockade"),
        None => PathBuf::from(format!(
            "/tmp/stockade-home-{}",
            rustix::process::geteuid().as_raw()
        )),
    }
}

/// Creates `dir` and its parents, new directories with mode 0700.
pub(crate) fn make_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))
}

/// Refuses a file (or directory) that someone other than us (or root) could have
/// written: owned by another user, or writable by group or others. Used before we
/// trust a file's contents as code.
pub(crate) fn check_trusted(path: &Path) -> Result<()> {
    let md = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    let me = rustix::process::geteuid().as_raw();
    if md.uid() != me && md.uid() != 0 {
        return Err(Error::PolicyDenied(format!(
            "{} is owned by uid {}, not by us (uid {me}) or root; precompiled code is trusted only from our own files",
            path.display(),
            md.uid()
        )));
    }
    if md.mode() & 0o022 != 0 {
        return Err(Error::PolicyDenied(format!(
            "{} is writable by group or others (mode {:o}); precompiled code is trusted only from files no one else can change",
            path.display(),
            md.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// SHA-256 of a file, streamed.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_pairs() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }

    #[test]
    fn untrusted_modes_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.cwasm");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        check_trusted(&f).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = check_trusted(&f).unwrap_err().to_string();
        assert!(err.contains("writable by group or others"), "{err}");
    }
}
