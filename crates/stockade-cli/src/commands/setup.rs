//! `stockade setup`: one-time host setup, as root.

use clap::Subcommand;
use stockade::Result;

use super::Ctx;

#[derive(Subcommand, Debug)]
pub enum SetupCmd {
    /// Let a user run native sandboxes without root, with limits: delegates a cgroup
    /// subtree to them in each hierarchy the limits need (hybrid, v1 and pure v2
    /// hosts). Run once, as root; idempotent.
    Rootless {
        /// The user (name or uid).
        #[arg(long)]
        user: String,
    },
}

pub async fn run(ctx: &Ctx, cmd: SetupCmd) -> Result<i32> {
    match cmd {
        SetupCmd::Rootless { user } => {
            let done = stockade::setup_rootless(&user)?;
            if ctx.json {
                println!("{}", serde_json::json!({ "user": user, "delegated": done }));
            } else {
                for line in &done {
                    println!("{line}");
                }
                println!("{user} can now run native sandboxes without root");
            }
            Ok(0)
        }
    }
}
