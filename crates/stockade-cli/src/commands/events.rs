//! `stockade events ID [--follow]`: what a sandbox's egress policy refused, as a
//! stream of events (one line each; JSON lines with `--json`).

use std::collections::HashMap;
use std::time::Duration;

use clap::Args;
use stockade::{ErrorCode, Result, Sandbox};

use super::Ctx;

/// How often `--follow` asks the sandbox for new refusals.
const POLL: Duration = Duration::from_millis(250);
/// Two refusals of one destination closer than this are one event.
const SAME_EVENT_MS: u64 = 500;

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Sandbox id (created with an egress policy).
    pub id: String,
    /// Keep printing new events until the sandbox is gone (or Ctrl-C).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only events at or after this time, in unix milliseconds (0: every event kept).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub since: u64,
}

pub async fn run(ctx: &Ctx, a: EventsArgs) -> Result<i32> {
    let sb = Sandbox::attach(ctx.provider_for(&a.id).await?, &a.id).await?;
    // The latest time printed per refused destination and rule.
    let mut seen: HashMap<(String, String, Option<u16>, String), u64> = HashMap::new();
    let mut since = a.since;
    loop {
        let denied = match sb.egress_denied(since).await {
            Ok(d) => d,
            Err(e) if a.follow && e.code() == ErrorCode::NotFound => {
                if !ctx.json {
                    eprintln!("stockade: sandbox {} is gone", a.id);
                }
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        for d in denied {
            // A destination refused again is one entry with a later time: a new event.
            // (A connection's time is read back from its deny set's timeout, to a few
            // ms: later by less than `SAME_EVENT` is the same refusal.)
            let key = (
                d.protocol.clone(),
                d.destination.clone(),
                d.port,
                d.rule.clone(),
            );
            if seen
                .get(&key)
                .is_some_and(|last| d.at_ms < last + SAME_EVENT_MS)
            {
                continue;
            }
            seen.insert(key, d.at_ms);
            since = since.max(d.at_ms.saturating_sub(1000));
            if ctx.json {
                println!(
                    "{}",
                    serde_json::json!({"type": "egress_denied", "sandbox": a.id, "denial": d})
                );
            } else {
                println!("{} {d}", d.at_ms);
            }
        }
        if !a.follow {
            return Ok(0);
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}
