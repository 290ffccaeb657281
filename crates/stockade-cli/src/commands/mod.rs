//! One module per command.

pub mod cp;
pub mod create;
pub mod doctor;
pub mod exec;
pub mod fs;
pub mod gc;
pub mod image;
pub mod inspect;
pub mod ls;
pub mod rm;
pub mod run;
pub mod runtime;
pub mod session;

use std::sync::Arc;

use stockade::{Provider, Result};

/// Global options every command sees.
pub struct Ctx {
    pub json: bool,
    pub provider: Option<String>,
    pub home: Option<std::path::PathBuf>,
}

impl Ctx {
    pub fn provider(&self) -> Result<Arc<dyn Provider>> {
        stockade::provider_with_home(self.provider.as_deref(), self.home.as_deref())
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
