//! One module per command.

pub mod bench;
pub mod cp;
pub mod create;
pub mod docs;
pub mod doctor;
pub mod events;
pub mod exec;
pub mod forward;
pub mod fs;
pub mod gc;
pub mod image;
pub mod inspect;
pub mod languages;
pub mod logs;
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
pub mod terminal;
pub mod watch;

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

    /// The provider that holds sandbox `id`: the daemon (which knows every sandbox's
    /// provider) or `--provider`'s when one is named; otherwise whichever of this
    /// build's providers made it, the default asked first.
    pub async fn provider_for(&self, id: &str) -> Result<Arc<dyn Provider>> {
        if self.remote.is_some() || self.provider.is_some() {
            return self.provider();
        }
        let options = stockade::ProviderOptions {
            home: self.home.clone(),
            ..Default::default()
        };
        stockade::provider_holding(id, &self.provider_name(), &options).await
    }

    /// Every sandbox this caller can see: the daemon's or `--provider`'s list when
    /// one is named; otherwise every provider's of this build (one that cannot be
    /// asked on this host, such as docker without a dockerd, lists nothing).
    pub async fn list(&self) -> Result<Vec<stockade::SandboxInfo>> {
        if self.remote.is_some() || self.provider.is_some() {
            return self.provider()?.list().await;
        }
        let options = stockade::ProviderOptions {
            home: self.home.clone(),
            ..Default::default()
        };
        let (all, _unasked) = stockade::list_everywhere(&self.provider_name(), &options).await?;
        Ok(all)
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

/// Runs `make` (a sandbox's creation), saying that a microVM boots while it does: a VM
/// boots for seconds, tens under software emulation. On a terminal a spinner counts
/// the seconds and the boot's time is printed after it; otherwise one line before
/// it; nothing with `--json` or another provider.
pub async fn with_boot_progress<T>(
    ctx: &Ctx,
    provider: &str,
    make: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    use std::io::IsTerminal as _;
    const SAYING: &str = "stockade: booting a microVM (see `stockade doctor` for KVM or TCG)";
    if ctx.json || provider != "microvm" {
        return make.await;
    }
    if !std::io::stderr().is_terminal() {
        eprintln!("{SAYING}...");
        return make.await;
    }
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("template"),
    );
    spinner.set_message(SAYING);
    spinner.enable_steady_tick(std::time::Duration::from_millis(100));
    let started = std::time::Instant::now();
    let made = make.await;
    spinner.finish_and_clear();
    if made.is_ok() {
        eprintln!(
            "stockade: the microVM booted in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    made
}
