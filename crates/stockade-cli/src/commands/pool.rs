//! `stockade pool warm|ls|drain`: the daemon's warm pools.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use stockade::{Error, Result};
use stockade_client::pb;

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
        /// Return at once instead of waiting, with progress, until SIZE are idle.
        #[arg(long)]
        no_wait: bool,
        /// Give up waiting after this many seconds (the pool goes on warming).
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        wait_timeout: u64,
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

fn print_pool(ctx: &Ctx, p: &pb::PoolInfo) {
    if ctx.json {
        println!(
            "{}",
            json!({"template_id": p.template_id, "provider": p.provider, "min_idle": p.min_idle,
                   "max": p.max, "idle": p.idle, "creating": p.creating, "in_use": p.in_use,
                   "hits": p.hits, "misses": p.misses, "failures": p.failures,
                   "last_error": (!p.last_error.is_empty()).then_some(&p.last_error)})
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

/// Consecutive failed creations after which `pool warm` stops waiting (the daemon
/// goes on retrying, with backoff).
const FAILURES_TO_GIVE_UP: u64 = 3;

/// How long a pool with an error, nothing in flight and no change is waited for.
const STALLED: Duration = Duration::from_secs(10);

/// Waits until the pool `p` has its size idle, with a progress bar on stderr (a line
/// per change when stderr is not a terminal; nothing with `--json`). Fails with the
/// pool's own error when its creations keep failing, and after `timeout`.
async fn wait_warm(
    ctx: &Ctx,
    r: &stockade_client::RemoteProvider,
    mut p: pb::PoolInfo,
    timeout: Duration,
) -> Result<pb::PoolInfo> {
    let started = Instant::now();
    let failures_at_start = p.failures;
    // A bar on a terminal; a line per change elsewhere; nothing with --json.
    let terminal = std::io::stderr().is_terminal();
    let bar = if !ctx.json && terminal {
        ProgressBar::with_draw_target(Some(u64::from(p.min_idle)), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} idle ({elapsed})")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("warming pool {}", p.template_id));
    bar.enable_steady_tick(Duration::from_millis(200));
    let lines = !ctx.json && !terminal;
    let mut errors_shown = std::collections::HashSet::new();
    // The last counts seen (idle, in flight, failures), and since when they hold.
    let mut seen = None;
    let mut changed_at = Instant::now();
    loop {
        let counts = (p.idle, p.creating, p.failures);
        if seen != Some(counts) {
            seen = Some(counts);
            changed_at = Instant::now();
            if lines {
                eprintln!(
                    "warming pool {}: {}/{} idle, {} creating",
                    p.template_id, p.idle, p.min_idle, p.creating
                );
            }
        }
        bar.set_position(u64::from(p.idle.min(p.min_idle)));
        if p.idle >= p.min_idle {
            bar.finish_and_clear();
            if !ctx.json {
                eprintln!(
                    "pool {} is warm: {} idle in {:.1} s",
                    p.template_id,
                    p.idle,
                    started.elapsed().as_secs_f64()
                );
            }
            return Ok(p);
        }
        if !p.last_error.is_empty() && errors_shown.insert(p.last_error.clone()) && !ctx.json {
            bar.suspend(|| {
                eprintln!(
                    "stockade: a warm sandbox could not be made: {}",
                    p.last_error
                );
            });
        }
        // Failing: several failed creations, the last one too; or held back, nothing
        // in flight and nothing changing (the daemon's cap).
        let stalled = p.creating == 0 && changed_at.elapsed() >= STALLED;
        if !p.last_error.is_empty()
            && (p.failures - failures_at_start >= FAILURES_TO_GIVE_UP || stalled)
        {
            bar.finish_and_clear();
            return Err(Error::Unavailable {
                what: format!("pool {}", p.template_id),
                reason: match p.failures - failures_at_start {
                    0 => format!("{}/{} idle: {}", p.idle, p.min_idle, p.last_error),
                    n => format!(
                        "{}/{} idle; {n} of its sandboxes could not be made, the last with: {}",
                        p.idle, p.min_idle, p.last_error
                    ),
                },
                fix: format!(
                    "fix the spec or the host and warm it again; the daemon keeps retrying \
                     with backoff until `stockade pool drain {}`",
                    p.template_id
                ),
            });
        }
        if started.elapsed() >= timeout {
            bar.finish_and_clear();
            return Err(Error::Timeout {
                operation: format!(
                    "warming pool {} ({}/{} idle, {} creating; it goes on warming)",
                    p.template_id, p.idle, p.min_idle, p.creating
                ),
                after_ms: started.elapsed().as_millis() as u64,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        p = r
            .pool_list()
            .await?
            .into_iter()
            .find(|q| q.template_id == p.template_id)
            .ok_or_else(|| Error::NotFound {
                kind: "pool",
                id: format!("{} (drained while it warmed)", p.template_id),
            })?;
    }
}

pub async fn run(ctx: &Ctx, cmd: PoolCmd) -> Result<i32> {
    let r = remote(ctx)?.clone().with_backend(ctx.provider.clone());
    match cmd {
        PoolCmd::Warm {
            size,
            max,
            no_wait,
            wait_timeout,
            spec,
        } => {
            let spec = spec.to_spec()?;
            let mut p = r.pool_warm(&spec, size, max.unwrap_or(0)).await?;
            if !no_wait {
                p = wait_warm(ctx, &r, p, Duration::from_secs(wait_timeout)).await?;
            }
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
                        "misses": p.misses, "failures": p.failures,
                        "last_error": (!p.last_error.is_empty()).then_some(&p.last_error),
                        "spec": serde_json::from_str::<serde_json::Value>(&p.spec_json).unwrap_or_default()}))
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
