//! Pulls from OCI and Docker registries (with `oci-client`): multi-platform indexes
//! resolved to this platform, anonymous, basic or bearer auth, plain HTTP only for
//! loopback registries and those the caller marks insecure. Every blob is verified
//! by the store before it is kept; concurrent pulls of one reference wait for each
//! other (a lock file per reference), so the second finds every blob present.

use std::io::Write;
use std::path::PathBuf;

use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::oci::{self, Descriptor, Index, Manifest, Platform};
use crate::reference::Reference;
use crate::store::Store;

/// The manifest media types a pull accepts.
const ACCEPT: [&str; 4] = [
    oci::MEDIA_MANIFEST,
    oci::MEDIA_DOCKER_MANIFEST,
    oci::MEDIA_INDEX,
    oci::MEDIA_DOCKER_LIST,
];

/// Credentials for a registry.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No credentials (the default); anonymous bearer tokens are still fetched.
    #[default]
    Anonymous,
    /// HTTP basic auth (also exchanged for a bearer token when the registry asks).
    Basic {
        /// The user name.
        username: String,
        /// The password or access token.
        password: String,
    },
    /// A bearer token as is.
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Anonymous => f.write_str("Anonymous"),
            Auth::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Credentials. Default: anonymous.
    pub auth: Auth,
    /// Registries (`host[:port]`) that may be reached over plain HTTP. Loopback
    /// registries (`127.0.0.1`, `localhost`, `[::1]`, any port) always may. Default:
    /// none.
    pub insecure_registries: Vec<String>,
    /// The platform an index is resolved to. Default: linux and this architecture.
    pub platform: Platform,
    /// The registry (`host[:port]`) the credentials are for: a pull from any other
    /// one is anonymous, so a credential never goes to a registry someone else named.
    /// `None`: whichever registry the pull names (a caller pulling for itself).
    pub auth_registry: Option<String>,
    /// Credentials per registry (`host[:port]`, lowercase), each sent to its own
    /// registry only: a docker `config.json`'s `auths` ([`registry_auths`]). Used
    /// for a registry [`PullOptions::auth`] is not for.
    pub registry_auths: std::collections::BTreeMap<String, Auth>,
    /// A proxy every connection of the pull goes through (a [`crate::guard::Guard`]'s
    /// URL, for a pull made for someone else). Default: none.
    pub proxy: Option<String>,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            auth: Auth::Anonymous,
            insecure_registries: Vec::new(),
            platform: oci::host_platform(),
            auth_registry: None,
            registry_auths: std::collections::BTreeMap::new(),
            proxy: None,
        }
    }
}

impl PullOptions {
    /// Options from the environment and the config file: `STOCKADE_REGISTRY_TOKEN`
    /// (bearer), or `STOCKADE_REGISTRY_USERNAME` with `STOCKADE_REGISTRY_PASSWORD`
    /// (basic), else anonymous, for the registry `STOCKADE_REGISTRY` names (any the
    /// pull names when it is unset); plain-HTTP registries from `[registries]
    /// insecure`.
    pub fn from_env(config: &crate::Config) -> PullOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let auth = match (
            var("STOCKADE_REGISTRY_TOKEN"),
            var("STOCKADE_REGISTRY_USERNAME"),
        ) {
            (Some(token), _) => Auth::Bearer(token),
            (None, Some(username)) => Auth::Basic {
                username,
                password: var("STOCKADE_REGISTRY_PASSWORD").unwrap_or_default(),
            },
            (None, None) => Auth::Anonymous,
        };
        // A docker config.json's `auths`, as `docker login` leaves them: one that does
        // not parse is told and skipped (pulls from its registries are anonymous).
        let file = var("STOCKADE_REGISTRY_AUTH_FILE")
            .map(std::path::PathBuf::from)
            .or_else(|| var("DOCKER_CONFIG").map(|d| std::path::Path::new(&d).join("config.json")))
            .or_else(|| var("HOME").map(|h| std::path::Path::new(&h).join(".docker/config.json")));
        let registry_auths = match file.filter(|f| f.exists()) {
            Some(f) => std::fs::read_to_string(&f)
                .map_err(|e| e.to_string())
                .and_then(|t| registry_auths(&t))
                .unwrap_or_else(|e| {
                    eprintln!(
                        "stockade: ignoring the registry credentials of {}: {e}",
                        f.display()
                    );
                    Default::default()
                }),
            None => Default::default(),
        };
        PullOptions {
            auth,
            insecure_registries: config.registries.insecure.clone(),
            auth_registry: var("STOCKADE_REGISTRY").map(|h| h.trim().to_ascii_lowercase()),
            registry_auths,
            ..Default::default()
        }
    }

    /// The credentials a pull from `registry` sends: [`PullOptions::auth`] where it
    /// is for that registry (or for whichever one is named), else that registry's own
    /// entry of [`PullOptions::registry_auths`], else none.
    pub fn auth_for(&self, registry: &str) -> &Auth {
        let registry = registry.to_ascii_lowercase();
        let env_applies = !matches!(self.auth, Auth::Anonymous)
            && self
                .auth_registry
                .as_ref()
                .is_none_or(|h| h.eq_ignore_ascii_case(&registry));
        if env_applies {
            return &self.auth;
        }
        self.registry_auths
            .get(&registry)
            .unwrap_or(&Auth::Anonymous)
    }
}

/// The registry a docker `config.json` key names: `https://ghcr.io`, `ghcr.io/v2/`
/// and `GHCR.io` are `ghcr.io`; Docker Hub's keys (`https://index.docker.io/v1/`) are
/// `docker.io`.
fn registry_key(key: &str) -> String {
    let k = key.trim();
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let host = k.split('/').next().unwrap_or("").to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            crate::reference::DEFAULT_REGISTRY.to_string()
        }
        _ => host,
    }
}

/// The `auths` of a docker `config.json`: `{"auths": {"HOST": {"auth":
/// base64("user:password")}}}` (or `username` and `password`; `registrytoken` as a
/// bearer token). Entries with nothing usable are skipped; credential helpers
/// (`credsStore`, `credHelpers`) are not run.
pub fn registry_auths(json: &str) -> Result<std::collections::BTreeMap<String, Auth>, String> {
    use base64::Engine as _;
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("not JSON ({e})"))?;
    let mut out = std::collections::BTreeMap::new();
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(out);
    };
    for (key, entry) in auths {
        let s = |k: &str| {
            entry
                .get(k)
                .and_then(|x| x.as_str())
                .filter(|x| !x.is_empty())
        };
        let auth = if let Some(b64) = s("auth") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| format!("auths.{key}.auth is not base64 ({e})"))?;
            let text = String::from_utf8(raw)
                .map_err(|_| format!("auths.{key}.auth is not user:password text"))?;
            let (username, password) = text
                .split_once(':')
                .ok_or_else(|| format!("auths.{key}.auth is not user:password"))?;
            Auth::Basic {
                username: username.to_string(),
                password: password.to_string(),
            }
        } else if let (Some(u), Some(p)) = (s("username"), s("password")) {
            Auth::Basic {
                username: u.to_string(),
                password: p.to_string(),
            }
        } else if let Some(t) = s("registrytoken") {
            Auth::Bearer(t.to_string())
        } else {
            continue;
        };
        let host = registry_key(key);
        if !host.is_empty() {
            out.insert(host, auth);
        }
    }
    Ok(out)
}

/// Progress of a pull, for progress lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullProgress {
    /// The manifest is resolved: this many blob bytes in all, this many to fetch.
    Resolved {
        /// The manifest digest.
        digest: Digest,
        /// Bytes of config and layers.
        total_bytes: u64,
        /// Bytes not already in the store.
        missing_bytes: u64,
    },
    /// Bytes of a blob arrived.
    Bytes {
        /// The blob.
        blob: Digest,
        /// Bytes of it so far.
        done: u64,
        /// Its size.
        size: u64,
    },
}

/// Whether a registry may be spoken to over plain HTTP without being marked
/// insecure: loopback only.
pub fn is_loopback_registry(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        registry.split(':').next().unwrap_or("")
    };
    matches!(host, "127.0.0.1" | "localhost" | "::1")
}

/// Pulls `reference` into the store and tags it (when it names a tag). Returns the
/// manifest digest. Blobs already in the store are not fetched again. A digest or a
/// digest prefix alone (`sha256:...`) names an image already in the store: it is
/// returned as it is, never looked up on Docker Hub as a repository `sha256`.
pub async fn pull(
    store: &Store,
    reference: &str,
    options: &PullOptions,
    progress: &mut (dyn FnMut(PullProgress) + Send),
) -> Result<Digest> {
    if reference.starts_with(crate::names::SHA256) {
        return store.resolve(reference).map_err(|e| match e {
            Error::ImageNotFound { .. } => Error::InvalidReference {
                reference: reference.to_string(),
                reason: "a digest alone names an image already in the store, and no image \
                         there has it (`stockade image ls` lists them); pull or import the \
                         image by its name"
                    .to_string(),
            },
            e => e,
        });
    }
    if crate::names::digest_prefix(reference).is_some()
        && let Ok(d) = store.resolve(reference)
    {
        return Ok(d);
    }
    let r = Reference::parse(reference)?;
    let registry_err = |source: oci_client::errors::OciDistributionError| Error::Registry {
        reference: r.to_string(),
        source: Box::new(source),
    };
    let oref = match (&r.digest, &r.tag) {
        (Some(d), _) => oci_client::Reference::with_digest(
            r.registry.clone(),
            r.repository.clone(),
            d.to_string(),
        ),
        (None, Some(t)) => {
            oci_client::Reference::with_tag(r.registry.clone(), r.repository.clone(), t.clone())
        }
        (None, None) => unreachable!("a parsed reference has a tag or a digest"),
    };
    let mut plain: Vec<String> = options.insecure_registries.clone();
    if is_loopback_registry(&r.registry) {
        plain.push(r.registry.clone());
    }
    // ring is the process's rustls provider (the daemon installs the same one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain),
        platform_resolver: None,
        http_proxy: options.proxy.clone(),
        https_proxy: options.proxy.clone(),
        ..Default::default()
    });
    let auth = match options.auth_for(&r.registry) {
        Auth::Anonymous => RegistryAuth::Anonymous,
        Auth::Basic { username, password } => {
            RegistryAuth::Basic(username.clone(), password.clone())
        }
        Auth::Bearer(t) => RegistryAuth::Bearer(t.clone()),
    };

    // One pull per reference at a time; a second one waits, then finds the blobs.
    let _pull_lock = lock_reference(store, &r).await?;
    let _store_lock = store.lock(false)?;

    let (bytes, _) = client
        .pull_manifest_raw(&oref, &auth, &ACCEPT)
        .await
        .map_err(registry_err)?;
    let mut digest = Digest::of(&bytes);
    if let Some(pinned) = &r.digest
        && *pinned != digest
    {
        return Err(Error::DigestMismatch {
            what: format!("manifest of {r}"),
            expected: pinned.to_string(),
            actual: digest.to_string(),
        });
    }
    let mut manifest_bytes = bytes.to_vec();
    if oci::is_index(&media_type_of(&manifest_bytes), &manifest_bytes) {
        store.put_blob_bytes(&manifest_bytes, Some(&digest))?;
        let index: Index = oci::parse(&format!("index {digest} of {r}"), &manifest_bytes)?;
        let chosen = oci::select_platform(&index, &options.platform).ok_or_else(|| {
            Error::NoMatchingPlatform {
                reference: r.to_string(),
                platform: format!("{}/{}", options.platform.os, options.platform.architecture),
            }
        })?;
        let by_digest = oci_client::Reference::with_digest(
            r.registry.clone(),
            r.repository.clone(),
            chosen.digest.to_string(),
        );
        let (bytes, _) = client
            .pull_manifest_raw(&by_digest, &auth, &ACCEPT)
            .await
            .map_err(registry_err)?;
        digest = Digest::of(&bytes);
        if digest != chosen.digest {
            return Err(Error::DigestMismatch {
                what: format!("manifest of {r} for {}", options.platform.architecture),
                expected: chosen.digest.to_string(),
                actual: digest.to_string(),
            });
        }
        manifest_bytes = bytes.to_vec();
    }
    let manifest: Manifest = oci::parse(&format!("manifest {digest} of {r}"), &manifest_bytes)?;
    let blobs: Vec<&Descriptor> = std::iter::once(&manifest.config)
        .chain(&manifest.layers)
        .collect();
    // Sizes come from the registry: refuse an image larger than the store takes
    // before fetching anything.
    let total: u64 = blobs.iter().map(|b| b.size).fold(0, u64::saturating_add);
    if total > store.limits().max_bytes {
        return Err(Error::LimitExceeded {
            layer: format!("image {r}"),
            what: "bytes",
            limit: store.limits().max_bytes,
        });
    }
    let missing: u64 = blobs
        .iter()
        .filter(|b| !store.has_blob(&b.digest))
        .map(|b| b.size)
        .fold(0, u64::saturating_add);
    let room = store.room(&format!("image {r}"))?;
    if missing > room.left {
        return Err((room.exceeded)());
    }
    progress(PullProgress::Resolved {
        digest: digest.clone(),
        total_bytes: blobs.iter().map(|b| b.size).sum(),
        missing_bytes: blobs
            .iter()
            .filter(|b| !store.has_blob(&b.digest))
            .map(|b| b.size)
            .sum(),
    });
    for blob in blobs {
        if store.has_blob(&blob.digest) {
            continue;
        }
        fetch_blob(store, &client, &oref, blob, progress)
            .await
            .map_err(|e| match e {
                FetchError::Registry(source) => registry_err(source),
                FetchError::Store(e) => e,
            })?;
    }
    // The manifest goes in last: a manifest in the store means its blobs are too.
    store.put_blob_bytes(&manifest_bytes, Some(&digest))?;
    if r.tag.is_some() {
        store.tag(&r, &digest)?;
    }
    Ok(digest)
}

enum FetchError {
    Registry(oci_client::errors::OciDistributionError),
    Store(Error),
}

impl From<Error> for FetchError {
    fn from(e: Error) -> Self {
        FetchError::Store(e)
    }
}

/// Streams a blob into `tmp/partial-<hex>`, then has the store verify and keep it.
/// An interrupted download leaves the partial file: the next pull asks the registry
/// for the rest only (an HTTP range request), or starts over when the registry
/// answers with the whole blob. Whatever arrived, the store checks the digest of the
/// whole; a partial file that does not add up is dropped.
async fn fetch_blob(
    store: &Store,
    client: &oci_client::Client,
    image: &oci_client::Reference,
    blob: &Descriptor,
    progress: &mut (dyn FnMut(PullProgress) + Send),
) -> std::result::Result<(), FetchError> {
    use oci_client::client::BlobResponse;
    let desc = OciDescriptor {
        media_type: blob.media_type.clone(),
        digest: blob.digest.to_string(),
        size: i64::try_from(blob.size).unwrap_or(i64::MAX),
        ..Default::default()
    };
    let path = store
        .root()
        .join("tmp")
        .join(format!("partial-{}", blob.digest.hex()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(Error::io("open", &path))?;
    // Two pulls of different images sharing this blob take turns.
    let p = path.clone();
    let mut file = tokio::task::spawn_blocking(move || file.lock().map(|()| file))
        .await
        .map_err(|e| Error::io("lock", &p)(std::io::Error::other(e)))?
        .map_err(Error::io("lock", &path))?;
    if store.has_blob(&blob.digest) {
        let _ = std::fs::remove_file(&path);
        return Ok(());
    }
    let have = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut stream = if have > 0 && have < blob.size {
        match client
            .pull_blob_stream_partial(image, &desc, have, None)
            .await
            .map_err(FetchError::Registry)?
        {
            BlobResponse::Partial(s) => {
                use std::io::Seek;
                file.seek(std::io::SeekFrom::End(0))
                    .map_err(Error::io("seek", &path))?;
                s
            }
            BlobResponse::Full(s) => {
                truncate(&mut file, &path)?;
                s
            }
        }
    } else {
        truncate(&mut file, &path)?;
        client
            .pull_blob_stream(image, &desc)
            .await
            .map_err(FetchError::Registry)?
    };
    let mut done = file.metadata().map_err(Error::io("stat", &path))?.len();
    let mut last_report = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|source| {
            // Bytes that arrived but do not verify are no base to resume from; a
            // dropped connection's bytes are.
            let bad = source.get_ref().is_some_and(
                <dyn std::error::Error + std::marker::Send + std::marker::Sync + 'static>::is::<
                    oci_client::errors::DigestError,
                >,
            );
            if bad {
                let _ = std::fs::remove_file(&path);
            }
            Error::Archive {
                what: format!("blob {} from the registry", blob.digest),
                source,
            }
        })?;
        done += chunk.len() as u64;
        // A registry sending more than announced is cut off here, not after the disk fills.
        if done > blob.size {
            let _ = std::fs::remove_file(&path);
            return Err(Error::SizeMismatch {
                what: format!("blob {}", blob.digest),
                expected: blob.size,
                actual: done,
            }
            .into());
        }
        file.write_all(&chunk).map_err(Error::io("write", &path))?;
        if done - last_report >= 1 << 20 || done == blob.size {
            last_report = done;
            progress(PullProgress::Bytes {
                blob: blob.digest.clone(),
                done,
                size: blob.size,
            });
        }
    }
    let whole = std::fs::File::open(&path).map_err(Error::io("open", &path))?;
    let kept = store.put_blob(whole, Some(&blob.digest), Some(blob.size));
    // Kept or not adding up: either way the partial file has served.
    let _ = std::fs::remove_file(&path);
    kept?;
    Ok(())
}

/// Empties a partial download to start it over.
fn truncate(file: &mut std::fs::File, path: &std::path::Path) -> Result<()> {
    use std::io::Seek;
    file.set_len(0).map_err(Error::io("truncate", path))?;
    file.seek(std::io::SeekFrom::Start(0))
        .map(|_| ())
        .map_err(Error::io("seek", path))
}

fn media_type_of(data: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        #[serde(default)]
        media_type: String,
    }
    serde_json::from_slice::<Probe>(data)
        .map(|p| p.media_type)
        .unwrap_or_default()
}

/// Takes the lock file of a reference (waiting off the async threads).
async fn lock_reference(store: &Store, r: &Reference) -> Result<std::fs::File> {
    let dir = store.root().join("locks");
    std::fs::create_dir_all(&dir).map_err(Error::io("create directory", &dir))?;
    let mut name_only = r.clone();
    name_only.digest = None;
    let key = format!("{}@{:?}", name_only, r.digest);
    let path: PathBuf = dir.join(format!("{}.lock", Digest::of(key.as_bytes()).hex()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(Error::io("open", &path))?;
    let p = path.clone();
    tokio::task::spawn_blocking(move || file.lock().map(|()| file))
        .await
        .map_err(|e| Error::io("lock", &p)(std::io::Error::other(e)))?
        .map_err(Error::io("lock", &path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_plain_http_by_default() {
        assert!(is_loopback_registry("127.0.0.1:5000"));
        assert!(is_loopback_registry("localhost"));
        assert!(is_loopback_registry("[::1]:5000"));
        assert!(!is_loopback_registry("127.0.0.2:5000"));
        assert!(!is_loopback_registry("localhost.evil.com"));
        assert!(!is_loopback_registry("docker.io"));
    }

    #[test]
    fn docker_config_auths_are_read_per_registry() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let json = format!(
            r#"{{"auths": {{
                "https://index.docker.io/v1/": {{"auth": "{}"}},
                "GHCR.io": {{"auth": "{}"}},
                "127.0.0.1:5000/v2/": {{"username": "u", "password": "p"}},
                "quay.io": {{"registrytoken": "tok"}},
                "empty.test": {{}}
            }}, "credsStore": "desktop"}}"#,
            b64("hub:pw"),
            b64("gh:ghp_secret:with:colons")
        );
        let a = registry_auths(&json).unwrap();
        let basic = |u: &str, p: &str| Auth::Basic {
            username: u.into(),
            password: p.into(),
        };
        assert_eq!(a.get("docker.io"), Some(&basic("hub", "pw")));
        assert_eq!(
            a.get("ghcr.io"),
            Some(&basic("gh", "ghp_secret:with:colons"))
        );
        assert_eq!(a.get("127.0.0.1:5000"), Some(&basic("u", "p")));
        assert_eq!(a.get("quay.io"), Some(&Auth::Bearer("tok".into())));
        assert!(!a.contains_key("empty.test"));
        assert!(registry_auths("{\"auths\": {\"x.io\": {\"auth\": \"%%%\"}}}").is_err());
        assert!(registry_auths("nope").is_err());
    }

    #[test]
    fn a_credential_goes_to_its_own_registry_only() {
        let mut o = PullOptions::default();
        o.registry_auths
            .insert("ghcr.io".into(), Auth::Bearer("gh".into()));
        assert_eq!(o.auth_for("ghcr.io"), &Auth::Bearer("gh".into()));
        assert_eq!(o.auth_for("GHCR.IO"), &Auth::Bearer("gh".into()));
        assert_eq!(o.auth_for("ghcr.io.evil.test"), &Auth::Anonymous);
        assert_eq!(o.auth_for("127.0.0.1:5000"), &Auth::Anonymous);
        // The environment's credential, scoped by STOCKADE_REGISTRY, comes first for
        // its registry and never goes to another.
        o.auth = Auth::Bearer("env".into());
        o.auth_registry = Some("registry.example".into());
        assert_eq!(o.auth_for("registry.example"), &Auth::Bearer("env".into()));
        assert_eq!(o.auth_for("ghcr.io"), &Auth::Bearer("gh".into()));
        assert_eq!(o.auth_for("evil.test"), &Auth::Anonymous);
        o.auth_registry = None;
        assert_eq!(o.auth_for("evil.test"), &Auth::Bearer("env".into()));
    }
}
