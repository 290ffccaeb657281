//! `stockade net ID --allow ENTRY... [--deny ENTRY...]`: replace a running
//! sandbox's egress policy, or show what it refused.

use clap::Args;
use stockade::{Result, Sandbox};

use super::Ctx;
use crate::spec_args::policy_of;

#[derive(Args, Debug)]
pub struct NetArgs {
    /// Sandbox id (created with --allow-net or --deny-net).
    pub id: String,
    /// The new allowlist, entry by entry (repeatable; same form as --allow-net). The
    /// whole policy is replaced: entries not given again are removed.
    #[arg(long, value_name = "ENTRY")]
    pub allow: Vec<String>,
    /// The new denylist (repeatable; same form as --deny-net).
    #[arg(long, value_name = "ENTRY")]
    pub deny: Vec<String>,
    /// Replace the policy with one that allows nothing.
    #[arg(long, conflicts_with_all = ["allow", "deny"])]
    pub deny_all: bool,
}

pub async fn run(ctx: &Ctx, a: NetArgs) -> Result<i32> {
    let sb = Sandbox::attach(ctx.provider_for(&a.id).await?, &a.id).await?;
    let network = match policy_of(&a.allow, &a.deny) {
        Some(n) => n,
        None if a.deny_all => stockade::spec::Network::allow(Vec::<String>::new()),
        None => {
            // No change asked: show the policy and what it refused.
            let info = sb.info();
            let denied = sb.egress_denied(0).await?;
            if ctx.json {
                println!(
                    "{}",
                    serde_json::json!({"network": info.spec.get("network"), "egress_denied": denied})
                );
            } else {
                println!(
                    "network: {}",
                    info.spec.get("network").cloned().unwrap_or_default()
                );
                for d in &denied {
                    println!("  {d}");
                }
            }
            return Ok(0);
        }
    };
    sb.set_network(&network).await?;
    if ctx.json {
        println!("{}", serde_json::json!({"id": a.id, "network": network}));
    } else {
        println!(
            "{}: network {}",
            a.id,
            serde_json::to_string(&network).unwrap_or_default()
        );
    }
    Ok(0)
}
