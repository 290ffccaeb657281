//! `stockade pool warm|ls|drain`: the daemon's warm pools.

use clap::Subcommand;
use serde_json::json;
use stockade::{Error, Result};

use super::Ctx;
use crate::spec_args::SpecArgs;

#[derive(Subcommand, Debug)]
pub enum PoolCmd {
    /// Keep N idle sandboxes of this template ready (env and workdir are bound when
    /// one is handed out); `create`/`run` with the same spec take one.
    Warm {
        /// Idle sandboxes to keep.
        #[arg(long)]
        size: u32,
        /// Most sandboxes of the pool at once (default: twice the size).
        #[arg(long, value_name = "N")]
        max: Option<u32>,
        #[command(flatten)]
        spec: Box<SpecArgs>,
    },
    /// List the pools with their idle and in-use counts.
    Ls,
    /// Destroy the idle sandboxes of a pool (or of every pool) and stop refilling.
    Drain {
        /// Template id (from `pool ls`); default: every pool.
        template: Option<String>,
    },
}

fn remote(ctx: &Ctx) -> Result<&stockade_client::RemoteProvider> {
    ctx.remote.as_ref().ok_or_else(|| Error::Unavailable {
        what: "warm pools".into(),
        reason: "they live in the daemon and none answers".into(),
        fix: "start one with `stockade serve`, or set STOCKADE_HOST".into(),
    })
}

fn print_pool(ctx: &Ctx, p: &stockade_client::pb::PoolInfo) {
    if ctx.json {
        println!(
            "{}",
            json!({"template_id": p.template_id, "provider": p.provider, "min_idle": p.min_idle,
                   "max": p.max, "idle": p.idle, "creating": p.creating, "in_use": p.in_use,
                   "hits": p.hits, "misses": p.misses})
        );
    } else {
        println!(
            "{:<14} {:<8} {:>5} {:>5} {:>5} {:>8} {:>7} {:>7} {:>7}",
            p.template_id,
            p.provider,
            p.min_idle,
            p.max,
            p.idle,
            p.creating,
            p.in_use,
            p.hits,
            p.misses
        );
    }
}

fn header(ctx: &Ctx) {
    if !ctx.json {
        println!(
            "{:<14} {:<8} {:>5} {:>5} {:>5} {:>8} {:>7} {:>7} {:>7}",
            "TEMPLATE", "PROVIDER", "SIZE", "MAX", "IDLE", "CREATING", "IN USE", "HITS", "MISSES"
        );
    }
}

pub async fn run(ctx: &Ctx, cmd: PoolCmd) -> Result<i32> {
    let r = remote(ctx)?.clone().with_backend(ctx.provider.clone());
    match cmd {
        PoolCmd::Warm { size, max, spec } => {
            let spec = spec.to_spec()?;
            let p = r.pool_warm(&spec, size, max.unwrap_or(0)).await?;
            header(ctx);
            print_pool(ctx, &p);
        }
        PoolCmd::Ls => {
            let pools = r.pool_list().await?;
            if ctx.json {
                let v: Vec<_> = pools
                    .iter()
                    .map(|p| json!({"template_id": p.template_id, "provider": p.provider,
                        "min_idle": p.min_idle, "max": p.max, "idle": p.idle,
                        "creating": p.creating, "in_use": p.in_use, "hits": p.hits,
                        "misses": p.misses, "spec": serde_json::from_str::<serde_json::Value>(&p.spec_json).unwrap_or_default()}))
                    .collect();
                println!("{}", json!(v));
                return Ok(0);
            }
            header(ctx);
            for p in &pools {
                print_pool(ctx, p);
            }
        }
        PoolCmd::Drain { template } => {
            let gone = r.pool_drain(template.as_deref()).await?;
            if ctx.json {
                println!("{}", json!({"destroyed": gone}));
            } else {
                println!("drained: {} idle sandboxes destroyed", gone.len());
            }
        }
    }
    Ok(0)
}
