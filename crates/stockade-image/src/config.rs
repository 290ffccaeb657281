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
//! platform = "ptrace"             # systrap, ptrace or kvm (env STOCKADE_GVISOR_PLATFORM);
//!                                 # default: kvm if it runs, else systrap if runsc has it
//!
//! # Templates the E2B API's `templateID` names (beside the built-in `base` and
//! # `code-interpreter-v1`, which a table of the same name replaces):
//! [templates.data-science]
//! image = "registry.lan:5000/python-data:1"  # none: the host's root filesystem
//! memory = "1G"
//! cpus = 2.0
//! pids = 256
//! env = { MPLBACKEND = "Agg" }
//! allow = ["pypi.org", "files.pythonhosted.org"]  # an egress allowlist
//! pool = 8                                   # warm sandboxes kept per tenant
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The parsed configuration file. A missing file is the default (empty) config.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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
    /// Sandbox templates by name (the E2B API's `templateID`).
    #[serde(default)]
    pub templates: BTreeMap<String, TemplateConfig>,
}

/// A `[templates.NAME]` table: what a sandbox made from the template gets. Fields left
/// out keep Stockade's secure defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    /// An image reference; none: the host's root filesystem.
    #[serde(default)]
    pub image: Option<String>,
    /// Memory, bytes or a size with a binary suffix (`"1G"`).
    #[serde(default, deserialize_with = "size")]
    pub memory: Option<u64>,
    /// CPUs (fractions allowed).
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Most processes and threads.
    #[serde(default)]
    pub pids: Option<u32>,
    /// Environment variables every process gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// An egress allowlist (the spec's `allow` entries): the sandbox reaches these and
    /// nothing else. Empty: no network unless the caller asks for the internet.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Warm sandboxes of this template kept ready per tenant by the E2B API (0 or
    /// none: each create starts one cold), at most [`TEMPLATE_POOL_MAX`].
    #[serde(default)]
    pub pool: Option<u32>,
}

/// The largest `pool` of a template.
pub const TEMPLATE_POOL_MAX: u32 = 256;

/// The longest template name.
pub const TEMPLATE_NAME_MAX: usize = 64;

/// Checks a template's name: 1 to [`TEMPLATE_NAME_MAX`] lowercase letters, digits,
/// `.`, `_` or `-`, starting with a letter or digit.
pub fn check_template_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= TEMPLATE_NAME_MAX
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "template name {name:?} is not valid: use 1 to {TEMPLATE_NAME_MAX} lowercase \
             letters, digits, '.', '_' or '-', starting with a letter or digit"
        ))
    }
}

/// The `[gvisor]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GvisorConfig {
    /// The `runsc` binary; default: `$STOCKADE_RUNSC`, else `runsc` in `PATH`.
    #[serde(default)]
    pub runsc: Option<PathBuf>,
    /// The gVisor platform; default: chosen by the provider (kvm when it really runs,
    /// else systrap when the runsc build has it, else ptrace).
    #[serde(default)]
    pub platform: Option<GvisorPlatform>,
}

/// A gVisor platform named in the `[gvisor]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GvisorPlatform {
    /// Hardware virtualization (a working `/dev/kvm`).
    Kvm,
    /// seccomp traps (runsc builds from mid-2023 on).
    Systrap,
    /// `PTRACE_SYSEMU`: every build, anywhere.
    Ptrace,
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
        let mut problems = Vec::new();
        for (name, t) in &c.templates {
            if let Err(e) = check_template_name(name) {
                problems.push(format!("templates.{name}: {e}"));
            }
            if let Some(image) = &t.image
                && let Err(e) = crate::Reference::parse(image)
            {
                problems.push(format!("templates.{name}.image: {e}"));
            }
            if let Some(m) = t.memory
                && m < 16 << 20
            {
                problems.push(format!(
                    "templates.{name}.memory: {m} bytes is too little (at least 16M)"
                ));
            }
            if let Some(cpus) = t.cpus
                && !(cpus > 0.0 && cpus <= 1024.0)
            {
                problems.push(format!(
                    "templates.{name}.cpus: {cpus} is out of range (more than 0, at most 1024)"
                ));
            }
            if let Some(p) = t.pids
                && p < 8
            {
                problems.push(format!(
                    "templates.{name}.pids: {p} is too few (at least 8)"
                ));
            }
            if let Some(n) = t.pool
                && n > TEMPLATE_POOL_MAX
            {
                problems.push(format!(
                    "templates.{name}.pool: {n} is too many (at most {TEMPLATE_POOL_MAX} warm \
                     sandboxes per tenant; the daemon's --max-pool-per-tenant caps the sum)"
                ));
            }
            for k in t.env.keys() {
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    problems.push(format!(
                        "templates.{name}.env: {k:?} is not a variable name"
                    ));
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
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
        let c = Config::parse("[gvisor]\nplatform = \"ptrace\"\n").unwrap();
        assert_eq!(c.gvisor.platform, Some(GvisorPlatform::Ptrace));
        let e = Config::parse("[gvisor]\nplatform = \"fast\"\n").unwrap_err();
        assert!(e.to_string().contains("systrap"), "{e}");
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
    fn templates_parse_and_every_bad_field_is_named() {
        let c = Config::parse(
            "[templates.data]\nimage = \"reg.lan:5000/py:3\"\nmemory = \"1G\"\ncpus = 1.5\npids = 128\nenv = { A = \"b\" }\nallow = [\"pypi.org\"]\npool = 4\n[templates.bare]\n",
        )
        .unwrap();
        let t = &c.templates["data"];
        assert_eq!(t.image.as_deref(), Some("reg.lan:5000/py:3"));
        assert_eq!(
            (t.memory, t.cpus, t.pids),
            (Some(1 << 30), Some(1.5), Some(128))
        );
        assert_eq!(t.env["A"], "b");
        assert_eq!(t.allow, ["pypi.org"]);
        assert_eq!(t.pool, Some(4));
        assert_eq!(c.templates["bare"], TemplateConfig::default());
        let e = Config::parse(
            "[templates.Bad]\n[templates.x]\nimage = \"UPPER/x:1\"\nmemory = 1\ncpus = 0.0\npids = 2\nenv = { \"A=B\" = \"c\" }\npool = 100000\n",
        )
        .unwrap_err();
        for field in [
            "templates.Bad:",
            "templates.x.image",
            "templates.x.memory",
            "templates.x.cpus",
            "templates.x.pids",
            "templates.x.env",
            "templates.x.pool",
        ] {
            assert!(e.contains(field), "{field} not named in: {e}");
        }
        let e = Config::parse("[templates.x]\nmemmory = \"1G\"\n").unwrap_err();
        assert!(e.contains("unknown field") && e.contains("memmory"), "{e}");
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
