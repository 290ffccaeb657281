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
        if rustix::process::geteuid().is_root() {
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
