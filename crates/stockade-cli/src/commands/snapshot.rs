//! `stockade pause ID`, `stockade resume ID`, `stockade fork ID [-n N]`: keep a
//! sandbox's running state and start it again, or copies of it.

use clap::Args;
use stockade::{CreateOptions, Result};

use super::Ctx;

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
    ctx.provider()?.pause(id).await?;
    if ctx.json {
        println!("{}", serde_json::json!({ "id": id, "state": "paused" }));
    } else {
        println!("{id} paused");
    }
    Ok(0)
}

/// Resumes sandbox `id`.
pub async fn resume(ctx: &Ctx, id: &str) -> Result<i32> {
    let provider = ctx.provider()?;
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
    let provider = ctx.provider()?;
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
