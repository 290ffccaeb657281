//! `stockade runtime install NAME | ls`: WASI runtimes for the wasm provider.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Subcommand;
use serde_json::json;
use stockade::Result;

use super::Ctx;

#[derive(Subcommand, Debug)]
pub enum RuntimeCmd {
    /// Download, verify and precompile a runtime (python-wasm).
    Install {
        /// Runtime name.
        name: String,
        /// Install from a local file (the wheel or the .wasm) instead of downloading.
        #[arg(long, value_name = "FILE")]
        from_file: Option<std::path::PathBuf>,
    },
    /// List runtimes and compiled artifacts.
    Ls,
}

pub async fn run(ctx: &Ctx, cmd: RuntimeCmd) -> Result<i32> {
    match cmd {
        RuntimeCmd::Install { name, from_file } => {
            let json = ctx.json;
            let installed = tokio::task::spawn_blocking(move || {
                let last = AtomicU64::new(u64::MAX);
                let progress = |done: u64, total: u64| {
                    if json {
                        return;
                    }
                    // Redraw at most once per percent (or per MiB without a total).
                    let step = (done * 100).checked_div(total).unwrap_or(done >> 20);
                    if last.swap(step, Ordering::Relaxed) != step {
                        let line = if total > 0 {
                            format!(
                                "\rdownloading {name}: {:>3}% ({} / {} MiB)",
                                step,
                                done >> 20,
                                total >> 20
                            )
                        } else {
                            format!("\rdownloading {name}: {} MiB", done >> 20)
                        };
                        let _ = std::io::stderr().write_all(line.as_bytes());
                    }
                };
                let r = match &from_file {
                    Some(f) => stockade::wasm::install_runtime_from_file(&name, f),
                    None => stockade::wasm::install_runtime(&name, &progress),
                };
                if !json {
                    eprintln!();
                }
                r
            })
            .await
            .map_err(|e| stockade::Error::Internal(e.to_string()))??;
            if ctx.json {
                println!("{}", serde_json::to_string(&installed).unwrap_or_default());
            } else {
                println!(
                    "installed {} {} at {} (sha256 {})",
                    installed.name,
                    installed.version,
                    installed.module.display(),
                    installed.sha256
                );
                if let Err(e) = stockade::wasm::runner::find_runner() {
                    eprintln!("note: not compiled yet, the first sandbox compiles it: {e}");
                }
            }
            Ok(0)
        }
        RuntimeCmd::Ls => {
            let list = tokio::task::spawn_blocking(stockade::wasm::list_runtimes)
                .await
                .map_err(|e| stockade::Error::Internal(e.to_string()))??;
            if ctx.json {
                println!("{}", json!(list));
                return Ok(0);
            }
            println!(
                "{:<14} {:<8} {:<10} {:<7}",
                "RUNTIME", "VERSION", "INSTALLED", "CACHED"
            );
            for r in &list.runtimes {
                println!(
                    "{:<14} {:<8} {:<10} {:<7}",
                    r.name, r.version, r.installed, r.cached
                );
            }
            if !list.artifacts.is_empty() {
                println!("\ncompiled artifacts:");
                for a in &list.artifacts {
                    let who = a
                        .runtime
                        .clone()
                        .unwrap_or_else(|| a.module_sha256[..12].to_string());
                    println!(
                        "  {:<14} {:>4} MiB {}{}",
                        who,
                        a.size >> 20,
                        a.path.display(),
                        if a.current { "" } else { " (other engine)" }
                    );
                }
            }
            Ok(0)
        }
    }
}
