//! Stockade: run untrusted, AI-written code in sandboxes that are secure by default.
//!
//! This crate picks a provider by name (`native` by default, or `STOCKADE_PROVIDER`)
//! and re-exports the core API.
//!
//! ```no_run
//! # async fn demo() -> stockade::Result<()> {
//! use stockade::{CreateOptions, ExecRequest, Sandbox, SandboxSpec};
//! let provider = stockade::provider(None)?;
//! let sb = Sandbox::create(provider, SandboxSpec::default(), CreateOptions::default()).await?;
//! let out = sb.exec(ExecRequest::new(["python3", "-c", "print(6 * 7)"])).await?;
//! assert_eq!(out.stdout, b"42\n");
//! sb.destroy().await?;
//! # Ok(()) }
//! ```

use std::sync::Arc;

pub mod archive;
pub mod code;
pub mod languages;

pub use stockade_agent_host::{self as agent_host, AgentProvider, Launcher};
pub use stockade_core::*;
pub use stockade_docker::{self as docker, DockerLauncher, DockerProvider};
pub use stockade_gvisor::{self as gvisor, GvisorLauncher, GvisorProvider};
pub use stockade_linux::{self as linux, idpool, rootless};
pub use stockade_microvm::{self as microvm, MicrovmLauncher, MicrovmProvider};
pub use stockade_native::{
    self as native, NativeLauncher, NativeProvider, setup_rootless, tune_favordynmods, tune_pid_max,
};
pub use stockade_wasm_host::{self as wasm, WasmProvider};

/// Names of the providers this build knows.
pub const PROVIDERS: &[&str] = &["native", "wasm", "docker", "gvisor", "microvm"];

/// The optional verbs each provider declares, in [`PROVIDERS`]' order: the one source
/// of the CLI's help texts, `doctor` and the provider table of `docs/providers.md` (a
/// test keeps that table equal to [`verbs_table`]). Docker's live egress policy
/// needs root.
pub const PROVIDER_VERBS: &[(&str, Verbs)] = &[
    ("native", stockade_native::VERBS),
    ("wasm", stockade_wasm_host::VERBS),
    ("docker", stockade_docker::VERBS),
    ("gvisor", stockade_gvisor::VERBS),
    ("microvm", stockade_microvm::VERBS),
];

/// The providers that serve `verb`, and those that refuse it.
pub fn served_by(verb: Verb) -> (Vec<&'static str>, Vec<&'static str>) {
    let yes = PROVIDER_VERBS.iter().filter(|(_, v)| v.has(verb));
    let no = PROVIDER_VERBS.iter().filter(|(_, v)| !v.has(verb));
    (
        yes.map(|(n, _)| *n).collect(),
        no.map(|(n, _)| *n).collect(),
    )
}

/// A help text's line on who serves `verb`: `Served by: microvm. Refused by: native, ...`.
pub fn served_by_line(verb: Verb) -> String {
    let (yes, no) = served_by(verb);
    let mut line = format!("Served by the {} provider", yes.join(", "));
    if yes.len() > 1 {
        line = format!("Served by the {} providers", yes.join(", "));
    }
    if !no.is_empty() {
        line.push_str(&format!(
            "; {} refuse{}",
            no.join(", "),
            if no.len() == 1 { "s" } else { "" }
        ));
    }
    line.push('.');
    line
}

/// The provider x verb table, as Markdown.
pub fn verbs_table() -> String {
    let mut out = String::from("| provider |");
    for verb in Verb::ALL {
        out.push_str(&format!(" {} |", verb.title()));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(Verb::ALL.len()));
    out.push('\n');
    for (name, verbs) in PROVIDER_VERBS {
        out.push_str(&format!("| {name} |"));
        for verb in Verb::ALL {
            out.push_str(if verbs.has(verb) { " yes |" } else { " no |" });
        }
        out.push('\n');
    }
    out
}

/// The default provider name: `$STOCKADE_PROVIDER`, else `native`.
pub fn default_provider_name() -> String {
    std::env::var("STOCKADE_PROVIDER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "native".to_string())
}

/// The provider called `name` (default: [`default_provider_name`]).
pub fn provider(name: Option<&str>) -> Result<Arc<dyn Provider>> {
    provider_with_home(name, None)
}

/// Like [`provider`], keeping images (and other data) under `home` instead of
/// `$STOCKADE_HOME`.
pub fn provider_with_home(
    name: Option<&str>,
    home: Option<&std::path::Path>,
) -> Result<Arc<dyn Provider>> {
    provider_with(
        name,
        &ProviderOptions {
            home: home.map(Into::into),
            ..ProviderOptions::default()
        },
    )
}

/// Where a provider keeps what it keeps; every field defaults to the environment's
/// choice (`$STOCKADE_HOME`, `$STOCKADE_STATE_DIR`).
#[derive(Clone, Debug, Default)]
pub struct ProviderOptions {
    /// Images (and other data) under this home instead of `$STOCKADE_HOME`.
    pub home: Option<std::path::PathBuf>,
    /// The native provider's state root instead of `$STOCKADE_STATE_DIR` (or
    /// `/run/stockade`).
    pub native_state_root: Option<std::path::PathBuf>,
    /// The native provider's pool of host ids instead of `$STOCKADE_ID_RANGE` (or the
    /// default).
    pub id_pool: Option<idpool::IdPool>,
}

/// The provider called `name` (default: [`default_provider_name`]) with `options`:
/// the one way the library, the CLI and the daemon build providers.
pub fn provider_with(name: Option<&str>, options: &ProviderOptions) -> Result<Arc<dyn Provider>> {
    let name = name
        .map(str::to_string)
        .unwrap_or_else(default_provider_name);
    let home = options.home.as_deref();
    match name.as_str() {
        "native" => {
            let mut l = match &options.native_state_root {
                Some(root) => NativeLauncher::with_state_root(root),
                None => NativeLauncher::new(),
            };
            if let Some(pool) = options.id_pool {
                l = l.with_id_pool(pool);
            }
            Ok(Arc::new(NativeProvider::from(match home {
                Some(h) => l.with_image_store(h.join("images")),
                None => l,
            })))
        }
        "wasm" => Ok(Arc::new(WasmProvider::new())),
        "docker" => Ok(Arc::new(match home {
            Some(h) => {
                DockerProvider::from(DockerLauncher::new().with_image_store(h.join("images")))
            }
            None => DockerProvider::new(),
        })),
        "gvisor" => Ok(Arc::new(GvisorProvider::from(match home {
            Some(h) => GvisorLauncher::new().with_image_store(h.join("images")),
            None => GvisorLauncher::new(),
        }))),
        "microvm" => Ok(Arc::new(MicrovmProvider::from(match home {
            Some(h) => MicrovmLauncher::new().with_home(h),
            None => MicrovmLauncher::new(),
        }))),
        other => Err(Error::InvalidRequest(format!(
            "unknown provider {other:?}; known: {}",
            PROVIDERS.join(", ")
        ))),
    }
}

/// The provider of this build that holds sandbox `id`: `first` (the caller's default)
/// asked first, then the others in [`PROVIDERS`]' order, so an id works whichever
/// provider made it. A provider that cannot be built or asked on this host (no
/// dockerd, no runsc) is passed over; when none holds the id, `first`'s answer is the
/// error (`sandbox ID not found`).
pub async fn provider_holding(
    id: &str,
    first: &str,
    options: &ProviderOptions,
) -> Result<Arc<dyn Provider>> {
    let first_answer = match provider_with(Some(first), options) {
        Ok(p) => match p.inspect(id).await {
            Ok(_) => return Ok(p),
            Err(e) => e,
        },
        Err(e) => e,
    };
    // A malformed id is no provider's.
    if first_answer.code() == ErrorCode::InvalidSpec {
        return Err(first_answer);
    }
    for name in PROVIDERS.iter().filter(|n| **n != first) {
        if let Ok(p) = provider_with(Some(name), options)
            && p.inspect(id).await.is_ok()
        {
            return Ok(p);
        }
    }
    Err(first_answer)
}

/// Every live sandbox of every provider of this build (`first`'s listed first), and
/// the providers that could not be asked, with why. A provider this host lacks
/// (no dockerd, no runsc) lists nothing; `first` failing is an error.
pub async fn list_everywhere(
    first: &str,
    options: &ProviderOptions,
) -> Result<(Vec<SandboxInfo>, Vec<(String, Error)>)> {
    let mut all = provider_with(Some(first), options)?.list().await?;
    let mut unasked = Vec::new();
    for name in PROVIDERS.iter().filter(|n| **n != first) {
        match provider_with(Some(name), options) {
            Ok(p) => match p.list().await {
                Ok(list) => {
                    for s in list {
                        if !all.iter().any(|a| a.id == s.id) {
                            all.push(s);
                        }
                    }
                }
                Err(e) => unasked.push((name.to_string(), e)),
            },
            Err(e) => unasked.push((name.to_string(), e)),
        }
    }
    Ok((all, unasked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_declares_its_verbs_once() {
        let names: Vec<_> = PROVIDER_VERBS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, PROVIDERS);
    }

    #[test]
    fn each_providers_declared_verbs_are_the_facets_it_implements() {
        for (name, declared) in PROVIDER_VERBS {
            let p = provider(Some(name)).unwrap();
            // What callers are told (capabilities) is what the facets serve...
            assert_eq!(
                p.verbs(),
                p.capabilities().verbs,
                "{name}: its facets and its capabilities disagree"
            );
            // ...and what tables and help texts say, but docker's live egress policy,
            // which needs root.
            let mut want = *declared;
            if *name == "docker" {
                want.egress_control &= stockade_core::host::is_root();
            }
            assert_eq!(p.verbs(), want, "{name}: its facets and its VERBS disagree");
        }
    }

    #[test]
    fn the_documents_provider_table_is_the_declared_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/providers.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let (start, end) = (
            "<!-- provider verbs -->\n",
            "<!-- end of provider verbs -->",
        );
        let from = doc
            .find(start)
            .expect("docs/providers.md has no provider verbs table")
            + start.len();
        let to = from + doc[from..].find(end).expect("the table has no end marker");
        assert_eq!(
            doc[from..to],
            verbs_table(),
            "docs/providers.md's table differs from the providers' declarations: paste \
             stockade::verbs_table() between the markers"
        );
    }

    #[test]
    fn help_lines_name_every_provider() {
        for verb in Verb::ALL {
            let line = served_by_line(verb);
            for name in PROVIDERS {
                assert!(line.contains(name), "{line}");
            }
        }
        assert!(
            served_by_line(Verb::Pause).contains("wasm refuses"),
            "{}",
            served_by_line(Verb::Pause)
        );
    }
}
