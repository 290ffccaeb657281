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
    /// Optional host tuning for faster creates and more sandboxes: turns
    /// `favordynmods` on for each cgroup2 mount (a sandbox's cgroup migration then
    /// skips an RCU grace period, 2-4 ms per create where it is off) and raises
    /// `kernel.pid_max` to 4194304 where it is lower (each idle sandbox holds about
    /// four tasks; the default 32768 caps a host at a few thousand). Until the next
    /// boot; `--undo` turns favordynmods off again and leaves pid_max.
    Tune {
        /// Turn it off again.
        #[arg(long)]
        undo: bool,
        /// Print what would be done, change nothing.
        #[arg(long)]
        dry_run: bool,
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
        SetupCmd::Tune { undo, dry_run } => {
            let mut done = stockade::tune_favordynmods(!undo, dry_run)?;
            done.extend(stockade::tune_pid_max(!undo, dry_run)?);
            if ctx.json {
                println!(
                    "{}",
                    serde_json::json!({ "favordynmods": !undo, "done": done })
                );
            } else {
                for line in &done {
                    println!("{line}");
                }
            }
            Ok(0)
        }
    }
}
