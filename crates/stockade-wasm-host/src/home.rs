//! Where the wasm provider keeps its files, and the small file helpers the provider
//! and its runner share.

use std::path::Path;

use stockade_core::{Error, Result};

pub use stockade_core::host::{hex, make_private_dir, stockade_home};

/// SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
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
}
