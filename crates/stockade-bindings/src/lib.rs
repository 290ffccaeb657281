//! What the Python (`stockade-py`) and Node (`stockade-node`) bindings share, in
//! Stockade's own types: each binding only turns these calls into its language's
//! functions, futures and errors.
//!
//! - [`Client`]: a provider in this process, or a `stockaded` daemon (remote mode);
//! - [`spec_from_json`]: a spec as the SDKs send it, with the field at fault named;
//! - [`Client::prepare_code`]: what `run_code` runs for a language;
//! - [`Sessions`]: named workspaces, kept in this process or by the daemon.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use stockade::code::{QuietFetcher, Source};
use stockade::spec::LanguagePreset;
use stockade::{
    CreateOptions, Error, Provider, Result, Sandbox, SandboxSpec, SessionConfig, SessionManager,
};
use stockade_client::{Host, RemoteProvider};

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// The daemon to use: `host`, else `$STOCKADE_HOST`; `None` means embedded. The SDKs
/// never pick up a default socket on their own, so an embedded client never depends
/// on one.
pub fn daemon_address(host: Option<String>) -> Option<String> {
    host.or_else(|| env("STOCKADE_HOST"))
}

/// A spec from the JSON an SDK wrote; an error names the field at fault
/// (`limits.memory_bytes: unknown size unit`), not a position in that JSON.
pub fn spec_from_json(spec_json: &str) -> Result<SandboxSpec> {
    // Every malformed size at once (serde stops at the first), with the fix.
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(spec_json) {
        let bad: Vec<String> = [("memory", "memory_bytes"), ("/tmp size", "tmp_bytes")]
            .into_iter()
            .filter_map(|(what, key)| {
                let s = v["limits"][key].as_str()?;
                stockade::spec::parse_size(s)
                    .err()
                    .map(|e| format!("field limits.{key} ({what}) {s:?}: {e}"))
            })
            .collect();
        if !bad.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "sandbox spec {} (fix: give each size as bytes, or a number with k, m or g, \
                 e.g. 512m or 2g)",
                bad.join("; ")
            )));
        }
    }
    let de = &mut serde_json::Deserializer::from_str(spec_json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let (path, inner) = (e.path().to_string(), e.into_inner());
        let at = format!(" at line {} column {}", inner.line(), inner.column());
        let text = inner.to_string();
        let text = text.strip_suffix(&at).unwrap_or(&text);
        Error::InvalidRequest(format!("sandbox spec field {path}: {text}"))
    })
}

/// A value as JSON for the SDKs' side.
pub fn json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("json: {e}")))
}

/// Create options: `owned` ties the sandbox to this process (it dies with it).
pub fn create_options(owned: bool) -> CreateOptions {
    CreateOptions {
        owner_pid: owned.then(std::process::id),
    }
}

/// A provider, chosen by name, with its image store and sessions under `home`; or a
/// daemon (remote mode) running that provider.
#[derive(Clone)]
pub struct Client {
    /// What sandboxes are made with (the daemon itself in remote mode).
    pub provider: Arc<dyn Provider>,
    /// The daemon, in remote mode.
    pub remote: Option<RemoteProvider>,
    /// The provider that runs the sandboxes (the daemon's backend in remote mode).
    pub backend: String,
    /// `STOCKADE_HOME` of this process: images and sessions.
    pub home: PathBuf,
}

fn home_dir(home: Option<PathBuf>) -> PathBuf {
    home.unwrap_or_else(stockade_image::stockade_home)
}

impl Client {
    /// The provider `provider` (default: `$STOCKADE_PROVIDER` or native) in this
    /// process, with its image store and state under `home`.
    pub fn embedded(provider: Option<&str>, home: Option<PathBuf>) -> Result<Client> {
        let p = stockade::provider_with_home(provider, home.as_deref())?;
        Ok(Client {
            backend: p.name().to_string(),
            provider: p,
            remote: None,
            home: home_dir(home),
        })
    }

    /// The daemon at `host` (`unix:///path`, `host:port`, `https://...`), sending
    /// `token` (else `$STOCKADE_TOKEN`) on every call; `provider` names its backend.
    pub async fn connect(
        host: &str,
        token: Option<String>,
        provider: Option<String>,
        home: Option<PathBuf>,
    ) -> Result<Client> {
        let token = token.or_else(|| env("STOCKADE_TOKEN"));
        let h = Host::parse(host)?;
        let daemon = RemoteProvider::connect(&h, token.as_deref())
            .await?
            .with_backend(provider.clone());
        Ok(Client {
            provider: Arc::new(daemon.clone()),
            remote: Some(daemon),
            backend: provider.unwrap_or_else(stockade::default_provider_name),
            home: home_dir(home),
        })
    }

    /// The daemon's address in remote mode.
    pub fn remote_host(&self) -> Option<String> {
        self.remote.as_ref().map(|r| r.host().to_string())
    }

    /// Removes the named snapshot `name` (the name checked first).
    pub async fn remove_snapshot(&self, name: &str) -> Result<()> {
        stockade::check_snapshot_name(name)?;
        self.provider.remove_snapshot(name).await
    }

    /// Resolves `language` for this provider: the argv that runs `code`, and `spec`
    /// adjusted for it (the image its interpreter comes from when the host lacks it).
    /// In remote mode the interpreter is looked up as the daemon's backend would
    /// (exact for a daemon on this host, which the unix socket implies).
    pub fn prepare_code(
        &self,
        language: String,
        code: String,
        mut spec: SandboxSpec,
    ) -> impl Future<Output = Result<(Vec<String>, SandboxSpec)>> + Send + 'static {
        let backend = self.backend.clone();
        let images = self.home.join("images");
        async move {
            let preset = LanguagePreset::find(&language).map_err(Error::InvalidRequest)?;
            let store = stockade_image::Store::open(&images)?;
            let argv = stockade::code::prepare(
                &backend,
                preset,
                Source::Code(&code),
                &mut spec,
                &store,
                &QuietFetcher,
            )
            .await?;
            Ok((argv, spec))
        }
    }

    /// Where the sessions live: in this process, each created from `spec` with the
    /// workspace at /work (`idle_timeout_secs` 0 keeps the default), or the daemon's
    /// (with its own session spec).
    pub fn sessions(&self, spec: SandboxSpec, idle_timeout_secs: u64) -> Sessions {
        if let Some(daemon) = self.remote.clone() {
            return Sessions::Remote {
                daemon,
                provider: self.provider.clone(),
            };
        }
        let mut config = SessionConfig::new(&self.home);
        config.spec = spec;
        if idle_timeout_secs > 0 {
            config.idle_timeout_secs = idle_timeout_secs;
        }
        Sessions::Local(SessionManager::new(self.provider.clone(), config))
    }
}

/// Sessions: named persistent workspaces, each with at most one live sandbox. In
/// this process a [`SessionManager`] keeps them; in remote mode the daemon does.
pub enum Sessions {
    /// Kept in this process.
    Local(SessionManager),
    /// Kept by the daemon.
    Remote {
        /// The daemon.
        daemon: RemoteProvider,
        /// The daemon as a provider, to attach to a session's sandbox.
        provider: Arc<dyn Provider>,
    },
}

impl Sessions {
    /// The session's sandbox, created when none is live.
    pub async fn get(self, name: String) -> Result<Sandbox> {
        match self {
            Sessions::Local(manager) => manager.get_or_create(&name).await,
            Sessions::Remote { daemon, provider } => {
                let info = daemon.session_get(&name).await?;
                Sandbox::attach(provider, &info.id).await
            }
        }
    }

    /// Ends the session's sandbox; `delete` also removes the workspace.
    pub async fn end(self, name: String, delete: bool) -> Result<()> {
        match (self, delete) {
            (Sessions::Local(m), false) => m.release(&name).await,
            (Sessions::Local(m), true) => m.delete(&name).await,
            (Sessions::Remote { daemon, .. }, false) => daemon.session_release(&name).await,
            (Sessions::Remote { daemon, .. }, true) => daemon.session_delete(&name).await,
        }
    }

    /// The sessions as JSON.
    pub async fn list_json(self) -> Result<String> {
        match self {
            Sessions::Local(m) => json(&m.list().await?),
            Sessions::Remote { daemon, .. } => json(&daemon.session_list().await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_spec_names_its_field_not_a_position() {
        let e = spec_from_json(r#"{"limits": {"memory_bytes": "12 parsecs"}}"#).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("sandbox spec field limits.memory_bytes"),
            "{text}"
        );
        assert!(!text.contains("line 1 column"), "{text}");
        assert_eq!(e.code(), stockade::ErrorCode::InvalidSpec);
        // Every malformed size, not only the first, and what to give instead.
        let e = spec_from_json(r#"{"limits": {"memory_bytes": "12x", "tmp_bytes": "lots"}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limits.memory_bytes (memory) \"12x\"")
                && e.contains("limits.tmp_bytes (/tmp size) \"lots\"")
                && e.contains("(fix: give each size as bytes"),
            "{e}"
        );
        // Not a size problem: serde's own message, by field.
        let e = spec_from_json(r#"{"limits": {"pids": "many"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandbox spec field limits.pids"), "{e}");
    }

    #[test]
    fn a_spec_round_trips() {
        let spec = SandboxSpec::default();
        let back = spec_from_json(&json(&spec).unwrap()).unwrap();
        assert_eq!(json(&back).unwrap(), json(&spec).unwrap());
    }
}
