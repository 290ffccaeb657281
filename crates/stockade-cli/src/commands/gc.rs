//! `stockade gc`: in-process, every provider of this build reaps its own leftovers
//! (a provider that is not on this host has none); through a daemon, the daemon's gc.

use stockade::{Error, GcReport, Result};

use super::Ctx;

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let report = match &ctx.remote {
        Some(_) => ctx.provider()?.gc().await?,
        None => {
            let mut report = GcReport::default();
            for name in stockade::PROVIDERS {
                let result = match ctx.local_provider(name) {
                    Ok(p) => p.gc().await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(r) => {
                        report.reaped.extend(r.reaped);
                        report.errors.extend(r.errors);
                    }
                    // Not on this host (no dockerd, no wasm engine): nothing to reap.
                    Err(Error::Unavailable { .. }) => {}
                    Err(e) => report.errors.push(format!("{name}: {e}")),
                }
            }
            report
        }
    };
    if ctx.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        for id in &report.reaped {
            println!("reaped {id}");
        }
        for e in &report.errors {
            eprintln!("stockade: {e}");
        }
        if report.reaped.is_empty() && report.errors.is_empty() {
            println!("nothing to reap");
        }
    }
    Ok(if report.errors.is_empty() { 0 } else { 1 })
}
