//! Stockade's configuration file: which registries may be spoken to over plain HTTP,
//! and which image each language preset runs from.
//!
//! ```toml
//! # /etc/stockade/config.toml (root), else $XDG_CONFIG_HOME/stockade/config.toml;
//! # $STOCKADE_CONFIG names another file.
//! [registries]
//! insecure = ["registry.lan:5000"]
//!
//! [languages]
//! python = "registry.lan:5000/runtimes/python:3.12"
//!
//! [store]
//! max_image_bytes = "4G"     # one image unpacked (env STOCKADE_IMAGE_MAX_BYTES)
//! max_image_entries = 1000000 #                (env STOCKADE_IMAGE_MAX_ENTRIES)
//! max_total_bytes = "20G"    # the whole store (env STOCKADE_IMAGE_STORE_MAX_BYTES)
//!
//! [gvisor]
//! runsc = "/usr/local/bin/runsc"  # the gVisor provider's runsc (env STOCKADE_RUNSC)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The parsed configuration file. A missing file is the default (empty) config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Registry settings.
    #[serde(default)]
    pub registries: Registries,
    /// Language name -> image reference, overriding the presets' default images.
    #[serde(default)]
    pub languages: BTreeMap<String, String>,
    /// The image store's caps.
    #[serde(default)]
    pub store: StoreConfig,
    /// The gVisor provider's settings.
    #[serde(default)]
    pub gvisor: GvisorConfig,
}

/// The `[gvisor]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GvisorConfig {
    /// The `runsc` binary; default: `$STOCKADE_RUNSC`, else `runsc` in `PATH`.
    #[serde(default)]
    pub runsc: Option<PathBuf>,
}

/// The `[store]` table: caps on what the image store keeps. Sizes are bytes, as an
/// integer or a string with a binary suffix (`"512M"`, `"4G"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The largest one image may unpack to. Default 4 GiB.
    #[serde(default, deserialize_with = "size")]
    pub max_image_bytes: Option<u64>,
    /// The most entries one image may have. Default 1,000,000.
    #[serde(default)]
    pub max_image_entries: Option<u64>,
    /// The largest the whole store may grow. Default: the smaller of 20 GiB and what
    /// it holds plus half the free disk, measured when an image is written.
    #[serde(default, deserialize_with = "size")]
    pub max_total_bytes: Option<u64>,
}

/// Environment variables overriding the `[store]` table.
pub const ENV_MAX_IMAGE_BYTES: &str = "STOCKADE_IMAGE_MAX_BYTES";
/// See [`ENV_MAX_IMAGE_BYTES`].
pub const ENV_MAX_IMAGE_ENTRIES: &str = "STOCKADE_IMAGE_MAX_ENTRIES";
/// See [`ENV_MAX_IMAGE_BYTES`].
pub const ENV_MAX_TOTAL_BYTES: &str = "STOCKADE_IMAGE_STORE_MAX_BYTES";

impl StoreConfig {
    /// This table with the environment's overrides applied; a malformed variable is
    /// an error naming it.
    pub fn with_env(mut self) -> std::result::Result<StoreConfig, String> {
        let var = |name: &str| -> std::result::Result<Option<u64>, String> {
            match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => parse_size(&v)
                    .map(Some)
                    .map_err(|e| format!("environment variable {name}: {e}")),
                _ => Ok(None),
            }
        };
        if let Some(n) = var(ENV_MAX_IMAGE_BYTES)? {
            self.max_image_bytes = Some(n);
        }
        if let Some(n) = var(ENV_MAX_IMAGE_ENTRIES)? {
            self.max_image_entries = Some(n);
        }
        if let Some(n) = var(ENV_MAX_TOTAL_BYTES)? {
            self.max_total_bytes = Some(n);
        }
        Ok(self)
    }
}

/// `4096`, `512K`, `512M`, `4G`, `1T` (binary multiples; a trailing `B`/`iB` allowed).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("{s:?} is not a size (bytes, or a number with K, M, G or T)"))
}

fn size<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(u64),
        S(String),
    }
    match Raw::deserialize(d)? {
        Raw::N(n) => Ok(Some(n)),
        Raw::S(s) => parse_size(&s).map(Some).map_err(serde::de::Error::custom),
    }
}

/// The `[registries]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registries {
    /// Registries (`HOST[:PORT]`) that may be reached over plain HTTP.
    #[serde(default)]
    pub insecure: Vec<String>,
}

impl Config {
    /// Where the configuration file is looked for: `$STOCKADE_CONFIG`, else
    /// `/etc/stockade/config.toml` for root, else `$XDG_CONFIG_HOME/stockade/config.toml`
    /// (`~/.config/stockade/config.toml`).
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("STOCKADE_CONFIG").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        if stockade_core::host::is_root() {
            return PathBuf::from("/etc/stockade/config.toml");
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|h| !h.is_empty())
                    .map(|h| PathBuf::from(h).join(".config"))
            })
            .unwrap_or_else(|| PathBuf::from("/nonexistent"));
        base.join("stockade/config.toml")
    }

    /// Loads the file at [`Config::default_path`].
    pub fn load() -> Result<Config> {
        Config::load_from(&Config::default_path())
    }

    /// Loads `path`; a file that does not exist is the empty config, one that does
    /// not parse is an error naming the file and the problem.
    pub fn load_from(path: &Path) -> Result<Config> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(Error::io("read", path)(e)),
        };
        Config::parse(&text).map_err(|reason| Error::Config {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses a configuration text.
    pub fn parse(text: &str) -> std::result::Result<Config, String> {
        let c: Config = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
        for r in &c.registries.insecure {
            if r.is_empty() || r.contains('/') || r.contains("://") {
                return Err(format!(
                    "registries.insecure: {r:?} is not HOST[:PORT] (no scheme, no path)"
                ));
            }
        }
        for (lang, image) in &c.languages {
            crate::Reference::parse(image).map_err(|e| format!("languages.{lang}: {e}"))?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_gvisor_table() {
        let c = Config::parse("[gvisor]\nrunsc = \"/opt/runsc\"\n").unwrap();
        assert_eq!(c.gvisor.runsc.as_deref(), Some(Path::new("/opt/runsc")));
        assert!(Config::parse("[gvisor]\nrunc = \"/x\"\n").is_err());
    }

    #[test]
    fn parses_registries_and_languages() {
        let c = Config::parse(
            "[registries]\ninsecure = [\"reg.lan:5000\"]\n[languages]\npython = \"reg.lan:5000/py:3\"\n",
        )
        .unwrap();
        assert_eq!(c.registries.insecure, ["reg.lan:5000"]);
        assert_eq!(c.languages["python"], "reg.lan:5000/py:3");
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn bad_files_name_the_problem() {
        let e = Config::parse("[registries]\ninsecure = [\"http://reg.lan\"]\n").unwrap_err();
        assert!(e.contains("registries.insecure"), "{e}");
        let e = Config::parse("[registry]\n").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = Config::parse("[languages]\npython = \"UPPER/Case:1\"\n").unwrap_err();
        assert!(e.contains("languages.python"), "{e}");
    }

    #[test]
    fn store_caps_parse_as_sizes() {
        let c = Config::parse(
            "[store]\nmax_image_bytes = \"512M\"\nmax_total_bytes = 1073741824\nmax_image_entries = 10\n",
        )
        .unwrap();
        assert_eq!(c.store.max_image_bytes, Some(512 << 20));
        assert_eq!(c.store.max_total_bytes, Some(1 << 30));
        assert_eq!(c.store.max_image_entries, Some(10));
        let e = Config::parse("[store]\nmax_total_bytes = \"lots\"\n").unwrap_err();
        assert!(e.contains("lots"), "{e}");
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert!(parse_size("-1").is_err() && parse_size("99999999T").is_err());
    }

    #[test]
    fn missing_file_is_empty_config() {
        let c = Config::load_from(Path::new("/nonexistent/stockade.toml")).unwrap();
        assert_eq!(c, Config::default());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "nonsense = 1").unwrap();
        let e = Config::load_from(&p).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
    }
}
