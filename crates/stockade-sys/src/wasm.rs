//! Loading precompiled WebAssembly (the wasm provider's artifact cache).
//!
//! wasmtime's `Module::deserialize` maps the machine code of an artifact and runs it
//! as is: whoever chose the bytes chose native code that runs in this process. So
//! bytes reach it only sealed: [`seal`] serializes a [`Module`] this process compiled
//! and authenticates the result with BLAKE3 in keyed mode (a MAC) under a secret
//! [`ArtifactKey`];
//! [`deserialize_sealed`] checks that tag (in constant time) before it hands the bytes
//! to wasmtime. Nothing else in Stockade can load precompiled code, so a file that an
//! untrusted party wrote (a `.cwasm` given as an image, a file planted in the cache,
//! an artifact from another host or home) is refused whoever owns it.
//!
//! A sealed artifact is `MAGIC`, the 32-byte tag, the context's length (u32, little
//! endian), the context, then wasmtime's artifact; the tag covers everything after
//! itself. The context names what the artifact is (the provider puts the module's
//! digest and the engine key there), so that one genuine artifact cannot be passed off
//! under another name.

use std::fmt;

use wasmtime::{Engine, Module};

/// Bytes of an [`ArtifactKey`].
pub const KEY_LEN: usize = 32;

/// Start of every sealed artifact (not an ELF header: a sealed file is nothing
/// wasmtime or anything else would load by itself).
const MAGIC: &[u8; 16] = b"stockade-cwasm2\n";
const TAG_LEN: usize = 32;
/// Longest context accepted (contexts are a digest and an engine key).
const MAX_CONTEXT: usize = 4096;

/// The secret that authenticates artifacts. Whoever knows it can make this process
/// run native code: keep it in a file only the host user can read.
pub struct ArtifactKey([u8; KEY_LEN]);

impl ArtifactKey {
    /// The key made of `bytes` (as read from the key file).
    pub fn from_bytes(bytes: &[u8; KEY_LEN]) -> ArtifactKey {
        ArtifactKey(*bytes)
    }

    /// Fresh key bytes from the system's random source.
    pub fn random_bytes() -> std::io::Result<[u8; KEY_LEN]> {
        use ring::rand::SecureRandom;
        let mut b = [0u8; KEY_LEN];
        ring::rand::SystemRandom::new()
            .fill(&mut b)
            .map_err(|_| std::io::Error::other("the system random source failed"))?;
        Ok(b)
    }
}

impl fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArtifactKey(..)")
    }
}

/// Why [`deserialize_sealed`] refused bytes.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The bytes are not a sealed artifact at all (a raw `.cwasm`, something else).
    #[error("not a sealed stockade artifact")]
    NotSealed,
    /// The tag does not match: written by someone without the key, changed since, or
    /// sealed under another key (another home or host).
    #[error("its authentication tag does not match this host's artifact key")]
    BadTag,
    /// Authentic, but for another module or engine than the caller asked for.
    #[error("it was sealed for another module or engine")]
    OtherContext,
    /// Authentic, but wasmtime refused it (another wasmtime build or configuration).
    #[error("wasmtime cannot load it: {0:#}")]
    Load(wasmtime::Error),
}

/// Serializes `module` and seals it under `key` for `context`.
pub fn seal(key: &ArtifactKey, context: &[u8], module: &Module) -> wasmtime::Result<Vec<u8>> {
    if context.len() > MAX_CONTEXT {
        wasmtime::bail!("artifact context of {} bytes is too long", context.len());
    }
    let artifact = module.serialize()?;
    let mut out = Vec::with_capacity(MAGIC.len() + TAG_LEN + 4 + context.len() + artifact.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0u8; TAG_LEN]);
    out.extend_from_slice(&(context.len() as u32).to_le_bytes());
    out.extend_from_slice(context);
    out.extend_from_slice(&artifact);
    let body = MAGIC.len() + TAG_LEN;
    let tag = blake3::keyed_hash(&key.0, &out[body..]);
    out[MAGIC.len()..body].copy_from_slice(tag.as_bytes());
    Ok(out)
}

/// Checks that `sealed` was made by [`seal`] under `key` for `context`, and only then
/// loads the module in it.
pub fn deserialize_sealed(
    engine: &Engine,
    key: &ArtifactKey,
    context: &[u8],
    sealed: &[u8],
) -> Result<Module, SealError> {
    let rest = sealed.strip_prefix(MAGIC).ok_or(SealError::NotSealed)?;
    if rest.len() < TAG_LEN + 4 {
        return Err(SealError::NotSealed);
    }
    let (tag, body) = rest.split_at(TAG_LEN);
    let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| SealError::NotSealed)?;
    // `blake3::Hash` compares in constant time.
    if blake3::keyed_hash(&key.0, body) != blake3::Hash::from(tag) {
        return Err(SealError::BadTag);
    }
    // Authentic from here on: the layout is ours.
    let (len, body) = body.split_at(4);
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > body.len() || body[..len] != *context {
        return Err(SealError::OtherContext);
    }
    let artifact = &body[len..];
    // SAFETY: `Module::deserialize` requires bytes produced by `Module::serialize` of
    // a compatible wasmtime (it checks the version and the engine configuration
    // itself, not the code). The keyed BLAKE3 tag just verified proves that `artifact` is,
    // byte for byte, what `seal` got from `Module::serialize` of a module compiled in
    // a process that holds `key`: `seal` is the only producer of tags, and it only
    // ever seals the output of `serialize`. The bytes are in our memory, so they
    // cannot change between the check and the load.
    unsafe { Module::deserialize(engine, artifact) }.map_err(SealError::Load)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(engine: &Engine) -> Module {
        // (module (func (export "f") (result i32) i32.const 42))
        let wasm: &[u8] = &[
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x00, 0x01,
            0x7f, 0x03, 0x02, 0x01, 0x00, 0x07, 0x05, 0x01, 0x01, 0x66, 0x00, 0x00, 0x0a, 0x06,
            0x01, 0x04, 0x00, 0x41, 0x2a, 0x0b,
        ];
        Module::from_binary(engine, wasm).unwrap()
    }

    #[test]
    fn only_intact_artifacts_sealed_under_the_same_key_and_context_load() {
        let engine = Engine::default();
        let key = ArtifactKey::from_bytes(&ArtifactKey::random_bytes().unwrap());
        let sealed = seal(&key, b"ctx", &module(&engine)).unwrap();
        let m = deserialize_sealed(&engine, &key, b"ctx", &sealed).unwrap();
        assert!(m.get_export("f").is_some());

        let other = ArtifactKey::from_bytes(&ArtifactKey::random_bytes().unwrap());
        assert!(matches!(
            deserialize_sealed(&engine, &other, b"ctx", &sealed),
            Err(SealError::BadTag)
        ));
        assert!(matches!(
            deserialize_sealed(&engine, &key, b"other", &sealed),
            Err(SealError::OtherContext)
        ));
        for i in [MAGIC.len() + 1, MAGIC.len() + TAG_LEN + 2, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(
                matches!(
                    deserialize_sealed(&engine, &key, b"ctx", &bad),
                    Err(SealError::BadTag)
                ),
                "byte {i} flipped"
            );
        }
        // A raw wasmtime artifact (what `wasmtime compile` writes) is not sealed.
        let raw = module(&engine).serialize().unwrap();
        assert!(matches!(
            deserialize_sealed(&engine, &key, b"ctx", &raw),
            Err(SealError::NotSealed)
        ));
    }
}
