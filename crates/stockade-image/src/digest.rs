//! `sha256:<hex>` digests and a hashing writer.

use std::fmt;
use std::io::{self, Read, Write};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// A content digest. Only `sha256` is accepted: it is what every registry and
/// `docker save` use, and one algorithm keeps the store's paths simple.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<64 lowercase hex digits>`.
    pub fn parse(s: &str) -> Result<Digest> {
        let bad = || Error::InvalidDigest {
            digest: s.to_string(),
        };
        let hex = s.strip_prefix("sha256:").ok_or_else(bad)?;
        Digest::from_hex(hex).map_err(|_| bad())
    }

    /// Builds a digest from its 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Result<Digest> {
        if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Digest {
                hex: hex.to_string(),
            })
        } else {
            Err(Error::InvalidDigest {
                digest: hex.to_string(),
            })
        }
    }

    /// The digest of `data`.
    pub fn of(data: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(data))
    }

    fn from_hasher(h: Sha256) -> Digest {
        let out = h.finalize();
        let mut hex = String::with_capacity(64);
        for b in out {
            hex.push_str(&format!("{b:02x}"));
        }
        Digest { hex }
    }

    /// The 64 hex digits, without the algorithm: the name of its files in the store.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Digest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Digest> {
        Digest::parse(s)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A reader that hashes and counts what passes through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads what is left (a tar stream may end before its padding does) and returns
    /// the digest and byte count of everything.
    pub(crate) fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((Digest::from_hasher(self.hasher), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts what passes through it.
pub(crate) struct HashingWriter<W> {
    pub(crate) inner: W,
    hasher: Sha256,
    pub(crate) count: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    pub(crate) fn digest(&self) -> Digest {
        Digest::from_hasher(self.hasher.clone())
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert!(Digest::parse("sha512:00").is_err());
        assert!(Digest::parse("sha256:../../etc/passwd").is_err());
        assert!(Digest::parse(&d.to_string().to_uppercase()).is_err());
    }
}
