//! One module per command.

pub mod bench;
pub mod cp;
pub mod create;
pub mod docs;
pub mod doctor;
pub mod events;
pub mod exec;
pub mod fs;
pub mod gc;
pub mod image;
pub mod inspect;
pub mod languages;
pub mod ls;
pub mod mcp;
pub mod net;
pub mod pool;
pub mod rm;
pub mod run;
pub mod runtime;
pub mod serve;
pub mod session;
pub mod setup;
pub mod snapshot;

use std::sync::Arc;

use stockade::{Provider, Result};

/// Global options every command sees.
pub struct Ctx {
    pub json: bool,
    pub provider: Option<String>,
    pub home: Option<std::path::PathBuf>,
    /// The daemon to use instead of running in-process (see [`Ctx::connect`]).
    pub remote: Option<stockade_client::RemoteProvider>,
}

impl Ctx {
    pub fn provider(&self) -> Result<Arc<dyn Provider>> {
        if let Some(r) = &self.remote {
            return Ok(Arc::new(r.clone().with_backend(self.provider.clone())));
        }
        stockade::provider_with_home(self.provider.as_deref(), self.home.as_deref())
    }

    /// The provider `name` of this build, in-process (whatever `--provider` says).
    pub fn local_provider(&self, name: &str) -> Result<Arc<dyn Provider>> {
        stockade::provider_with_home(Some(name), self.home.as_deref())
    }

    /// The name of the provider commands use: `--provider`, else the default.
    pub fn provider_name(&self) -> String {
        self.provider
            .clone()
            .unwrap_or_else(stockade::default_provider_name)
    }

    /// Uses the daemon when `STOCKADE_HOST` is set or the default socket answers,
    /// unless `direct`; `tls_ca` (`--tls-ca`) overrides `STOCKADE_TLS_CA`.
    pub async fn connect(&mut self, direct: bool, tls_ca: Option<&std::path::Path>) -> Result<()> {
        if !direct {
            let mut opts = stockade_client::ConnectOptions::from_env();
            opts.tls_ca = tls_ca.map(Into::into).or(opts.tls_ca);
            self.remote = stockade_client::RemoteProvider::discover(&opts).await?;
        }
        Ok(())
    }
}

/// Human-friendly duration until a unix-ms instant.
pub fn until(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let s = ms.saturating_sub(now) / 1000;
    if s >= 3600 {
        format!("{}h{}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
