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
pub use stockade_microvm::{self as microvm, MicrovmLauncher, MicrovmProvider};
pub use stockade_native::{
    self as native, NativeLauncher, NativeProvider, idpool, rootless, setup_rootless,
    tune_favordynmods, tune_pid_max,
};
pub use stockade_wasm_host::{self as wasm, WasmProvider};

/// Names of the providers this build knows.
pub const PROVIDERS: &[&str] = &["native", "wasm", "docker", "gvisor", "microvm"];

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
