//! Which languages run on this host, and how: the host's interpreter, an image already
//! in the store, an image that would be pulled on first use, a WASI runtime. `stockade
//! languages`, `doctor`, the MCP server's `run_code` schema and the Python SDK's tool
//! schemas all read it, so they advertise only what can run.
//!
//! TypeScript runs with Deno, or with the host's Node.js when it strips types itself
//! (22.6 and later, `--experimental-strip-types`); an older Node is refused with the
//! fix rather than run on code it would misread.

use std::path::Path;

use serde::Serialize;
use stockade_image::{Config, Store};
use stockade_spec::{Language, LanguagePreset, PRESETS};

/// The oldest Node.js that runs TypeScript by stripping its types.
pub const NODE_STRIP_TYPES: (u32, u32) = (22, 6);

/// The directories of the host searched for interpreters (host-rootfs mode).
pub(crate) const HOST_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

/// How the code of a language is run on the host's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostRunner {
    /// The preset's interpreter, at this path.
    Preset(String),
    /// TypeScript by Node.js (this path) stripping the types.
    NodeStripTypes(String),
}

/// How a language runs with a provider and the current configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// The host's interpreter (the fastest).
    Host,
    /// An image already in the store.
    Image,
    /// An image pulled on first use (needs the registry).
    Pull,
    /// An installed WASI runtime.
    Runtime,
    /// It cannot run; `fix` says what to do.
    Unavailable,
}

/// One language's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LanguageSupport {
    /// The language's first name (`python`, `typescript`, ...).
    pub language: &'static str,
    /// How it runs.
    pub how: How,
    /// The interpreter path, the image or the runtime.
    pub detail: String,
    /// Runs now, without fetching anything (`host`, `image` and `runtime`).
    pub ready: bool,
    /// What makes it run (or run without a pull), when it does not yet.
    pub fix: Option<String>,
}

/// The Debian package (or the thing to install) that puts `preset`'s interpreter on
/// the host.
fn host_package(preset: &LanguagePreset) -> &'static str {
    match preset.language {
        Language::Python => "python3",
        Language::Javascript => "nodejs",
        Language::Typescript => "Node.js 22.6 or newer, or Deno,",
        Language::Ruby => "ruby",
        Language::Php => "php-cli",
        Language::Perl => "perl",
        Language::Lua => "lua5.4",
        Language::R => "r-base-core",
        Language::Bash => "bash",
        Language::Sh => "dash",
        Language::Zsh => "zsh",
    }
}

/// The one fix for a language missing on this host: installing its interpreter.
pub fn install_fix(preset: &LanguagePreset) -> String {
    match preset.language {
        Language::Typescript => "install Node.js 22.6 or newer (it strips the types) or Deno \
                                 on this host"
            .into(),
        _ => format!(
            "install {} on this host (apt-get install {})",
            preset.interpreter[0],
            host_package(preset)
        ),
    }
}

/// Parses `node --version` output (`v22.6.0`) into (major, minor).
pub fn parse_node_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The host's Node.js and its version, when installed.
fn host_node() -> Option<(String, Option<(u32, u32)>)> {
    let path = crate::code::find_in(Path::new("/"), HOST_DIRS, "node")?;
    let version = std::process::Command::new(&path)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| parse_node_version(&String::from_utf8_lossy(&o.stdout)));
    Some((path, version))
}

/// How `preset` runs on the host's root, or why it does not (the reason).
pub fn host_runner(preset: &LanguagePreset) -> Result<HostRunner, String> {
    let name = preset.interpreter[0];
    if let Some(p) = crate::code::find_in(Path::new("/"), HOST_DIRS, name) {
        return Ok(HostRunner::Preset(p));
    }
    if preset.language != Language::Typescript {
        return Err(format!("{name} is not installed on this host"));
    }
    match host_node() {
        Some((node, Some(v))) if v >= NODE_STRIP_TYPES => Ok(HostRunner::NodeStripTypes(node)),
        Some((node, v)) => Err(format!(
            "deno is not installed on this host and its node ({node}, {}) is older than \
             {}.{}, the first to strip TypeScript types",
            v.map(|(a, b)| format!("v{a}.{b}"))
                .unwrap_or_else(|| "version unknown".into()),
            NODE_STRIP_TYPES.0,
            NODE_STRIP_TYPES.1
        )),
        None => Err("neither deno nor node is installed on this host".into()),
    }
}

/// The image that runs `preset` when the host cannot: the config file's
/// `[languages]` entry, else the preset's.
pub fn language_image(preset: &LanguagePreset, config: &Config) -> String {
    config
        .languages
        .get(preset.names[0])
        .cloned()
        .unwrap_or_else(|| preset.image.to_string())
}

/// How `preset` runs on `provider` with the store and configuration given.
pub fn support(
    provider: &str,
    preset: &'static LanguagePreset,
    store: &Store,
    config: &Config,
    home: &Path,
) -> LanguageSupport {
    let language = preset.names[0];
    let row = |how: How, detail: String, fix: Option<String>| LanguageSupport {
        language,
        how,
        ready: matches!(how, How::Host | How::Image | How::Runtime),
        detail,
        fix,
    };
    if provider == "wasm" {
        return match stockade_wasm_host::image_for_language(language)
            .and_then(stockade_wasm_host::RuntimeSpec::find)
        {
            Some(rt) if rt.module_in(home).is_file() => {
                row(How::Runtime, rt.name.to_string(), None)
            }
            Some(rt) => row(
                How::Unavailable,
                format!("the {} runtime is not installed", rt.name),
                Some(format!("stockade runtime install {}", rt.name)),
            ),
            None => row(
                How::Unavailable,
                "no WASI runtime runs it".into(),
                Some("use the native or docker provider".into()),
            ),
        };
    }
    let mut why = None;
    if provider == "native" {
        match host_runner(preset) {
            Ok(HostRunner::Preset(p)) => return row(How::Host, p, None),
            Ok(HostRunner::NodeStripTypes(node)) => {
                return row(
                    How::Host,
                    format!("{node} --experimental-strip-types"),
                    None,
                );
            }
            Err(reason) => why = Some(reason),
        }
    }
    let image = language_image(preset, config);
    let install = why.map(|_| install_fix(preset));
    match store.image(&image) {
        Ok(_) => row(How::Image, image, None),
        Err(_) => row(
            How::Pull,
            image.clone(),
            Some(install.unwrap_or_else(|| format!("stockade image pull {image}"))),
        ),
    }
}

/// Every language of the table on `provider`, in the table's order.
pub fn languages(
    provider: &str,
    store: &Store,
    home: &Path,
) -> crate::Result<Vec<LanguageSupport>> {
    let config = Config::load().map_err(|e| crate::Error::InvalidRequest(e.to_string()))?;
    Ok(PRESETS
        .iter()
        .map(|p| support(provider, p, store, &config, home))
        .collect())
}

/// The names of the languages that run now on `provider` (see [`LanguageSupport::ready`]).
pub fn ready_languages(provider: &str, store: &Store, home: &Path) -> crate::Result<Vec<String>> {
    Ok(languages(provider, store, home)?
        .into_iter()
        .filter(|l| l.ready)
        .map(|l| l.language.to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_versions_parse() {
        assert_eq!(parse_node_version("v20.20.2\n"), Some((20, 20)));
        assert_eq!(parse_node_version("v22.6.0"), Some((22, 6)));
        assert!(parse_node_version("v22.6.0").unwrap() >= NODE_STRIP_TYPES);
        assert!(parse_node_version("v22.5.1").unwrap() < NODE_STRIP_TYPES);
        assert!(parse_node_version("v23.0.0").unwrap() >= NODE_STRIP_TYPES);
        assert_eq!(parse_node_version("node"), None);
    }

    #[test]
    fn the_fix_for_a_missing_language_is_one_install_and_no_flag() {
        for p in PRESETS {
            let fix = install_fix(p);
            assert!(fix.starts_with("install "), "{fix}");
            assert!(!fix.contains("--"), "a flag in {fix}");
        }
    }
}
