//! `stockade pause ID`, `stockade resume ID`, `stockade fork ID [-n N]`: keep a
//! sandbox's running state and start it again, or copies of it. `stockade snapshot
//! ID NAME`, `snapshot ls`, `snapshot rm NAME...`: named snapshots, which `create`
//! and `run --from-snapshot NAME` start new sandboxes from.

use std::time::Instant;

use clap::{Args, Subcommand};
use stockade::{CreateOptions, Error, Result, SandboxSpec, SnapshotInfo};

use super::Ctx;
use crate::spec_args::SpecArgs;

/// `stockade snapshot ID NAME`, or one of its subcommands.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub cmd: Option<SnapshotCmd>,
    /// The sandbox to keep (running or paused; a running one is paused while its
    /// state is saved, then resumed).
    #[arg(required = true)]
    pub id: Option<String>,
    /// The snapshot's name: letters, digits, '.', '_' and '-', at most 64.
    #[arg(required = true)]
    pub name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// List the named snapshots.
    Ls,
    /// Remove named snapshots (sandboxes started from them live on).
    Rm {
        /// Snapshot names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// `stockade snapshot ...`.
pub async fn snapshot(ctx: &Ctx, a: SnapshotArgs) -> Result<i32> {
    // Taking one asks the sandbox's own provider; listing and removing, the named one.
    let provider = match (&a.cmd, &a.id) {
        (None, Some(id)) => ctx.provider_for(id).await?,
        _ => ctx.provider()?,
    };
    match (a.cmd, a.id, a.name) {
        (Some(SnapshotCmd::Ls), _, _) => {
            let list = provider.snapshots().await?;
            if ctx.json {
                println!(
                    "{}",
                    serde_json::to_string(&list).map_err(|e| Error::Internal(e.to_string()))?
                );
            } else if list.is_empty() {
                eprintln!(
                    "no snapshots (take one with `stockade snapshot ID NAME` on the microvm provider)"
                );
            } else {
                println!("{:<24} {:<15} {:>12}  SHA-256", "NAME", "FROM", "SIZE");
                for s in &list {
                    println!(
                        "{:<24} {:<15} {:>12}  {}",
                        s.name,
                        s.source,
                        mib(s.bytes),
                        &s.sha256[..s.sha256.len().min(16)]
                    );
                }
            }
            Ok(0)
        }
        (Some(SnapshotCmd::Rm { names }), _, _) => {
            let mut code = 0;
            for n in &names {
                match provider.remove_snapshot(n).await {
                    Ok(()) if ctx.json => {
                        println!("{}", serde_json::json!({ "name": n, "removed": true }));
                    }
                    Ok(()) => println!("{n} removed"),
                    Err(e) => code = crate::output::error(ctx.json, &e),
                }
            }
            Ok(code)
        }
        (None, Some(id), Some(name)) => {
            stockade::check_snapshot_name(&name)?;
            let t = Instant::now();
            if !ctx.json {
                eprintln!(
                    "stockade: saving {id} (pause, copy and digest its memory, resume; seconds under KVM, more under TCG)..."
                );
            }
            let s: SnapshotInfo = provider.snapshot(&id, &name).await?;
            if ctx.json {
                println!(
                    "{}",
                    serde_json::to_string(&s).map_err(|e| Error::Internal(e.to_string()))?
                );
            } else {
                eprintln!(
                    "stockade: kept {} of state in {:.1} s (SHA-256 {})",
                    mib(s.bytes),
                    t.elapsed().as_secs_f64(),
                    s.sha256
                );
                println!("{}", s.name);
            }
            Ok(0)
        }
        _ => Err(Error::InvalidRequest(
            "give a sandbox id and a name (stockade snapshot ID NAME), or ls, or rm NAME".into(),
        )),
    }
}

/// Refuses spec flags beside `--from-snapshot`: a sandbox started from a snapshot
/// runs with the spec the snapshot was taken with. `--timeout` is allowed where it
/// is only an exec's deadline (`run`).
pub fn refuse_spec_flags(spec: &SpecArgs, timeout_is_deadline: bool) -> Result<()> {
    let given = SpecArgs {
        timeout: spec.timeout.filter(|_| !timeout_is_deadline),
        ..spec.clone()
    };
    let as_json =
        |s: std::result::Result<SandboxSpec, _>| s.ok().and_then(|s| serde_json::to_value(s).ok());
    if as_json(given.to_spec()) != as_json(SpecArgs::default().to_spec()) {
        return Err(Error::InvalidRequest(
            "--from-snapshot starts a sandbox with the spec its snapshot was taken with \
             (memory, CPUs, lifetime, env...); drop the spec flags, or create a new \
             sandbox without --from-snapshot"
                .into(),
        ));
    }
    Ok(())
}

/// Starts a sandbox from the named snapshot `name`, saying so (it restores a VM).
pub async fn start_from(
    ctx: &Ctx,
    provider: std::sync::Arc<dyn stockade::Provider>,
    name: &str,
    opts: CreateOptions,
) -> Result<stockade::Sandbox> {
    stockade::check_snapshot_name(name)?;
    let t = Instant::now();
    if !ctx.json {
        eprintln!("stockade: checking snapshot {name}'s digest and restoring it...");
    }
    let sb = stockade::Sandbox::from_snapshot(provider, name, opts).await?;
    if !ctx.json {
        eprintln!(
            "stockade: {} started from {name} in {:.1} s",
            sb.id(),
            t.elapsed().as_secs_f64()
        );
    }
    Ok(sb)
}

#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The paused sandbox to copy.
    pub id: String,
    /// How many copies to start.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub count: u32,
}

/// Pauses sandbox `id`.
pub async fn pause(ctx: &Ctx, id: &str) -> Result<i32> {
    ctx.provider_for(id).await?.pause(id).await?;
    if ctx.json {
        println!("{}", serde_json::json!({ "id": id, "state": "paused" }));
    } else {
        println!("{id} paused");
    }
    Ok(0)
}

/// Resumes sandbox `id`.
pub async fn resume(ctx: &Ctx, id: &str) -> Result<i32> {
    let provider = ctx.provider_for(id).await?;
    if !ctx.json && provider.name() == "microvm" {
        eprintln!("stockade: restoring the microVM of {id} from its snapshot...");
    }
    provider.resume(id).await?;
    if ctx.json {
        println!("{}", serde_json::json!({ "id": id, "state": "running" }));
    } else {
        println!("{id} resumed");
    }
    Ok(0)
}

/// Starts copies of paused sandbox `a.id`; prints their ids, one a line. The copies
/// live their lifetime (or until `rm`), like `stockade create`'s sandboxes.
pub async fn fork(ctx: &Ctx, a: ForkArgs) -> Result<i32> {
    let provider = ctx.provider_for(&a.id).await?;
    if !ctx.json && provider.name() == "microvm" {
        eprintln!("stockade: restoring {} copies of {}...", a.count, a.id);
    }
    let infos = provider
        .fork(&a.id, a.count, CreateOptions::default())
        .await?;
    if ctx.json {
        let ids: Vec<&str> = infos.iter().map(|i| i.id.as_str()).collect();
        println!("{}", serde_json::json!({ "from": a.id, "ids": ids }));
    } else {
        for i in &infos {
            println!("{}", i.id);
        }
    }
    Ok(0)
}
