//! `stockade rm ID... | --all`

use clap::Args;
use stockade::{Error, Result};

use super::Ctx;

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Sandbox ids.
    pub ids: Vec<String>,
    /// Destroy every live sandbox.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
}

pub async fn run(ctx: &Ctx, a: RmArgs) -> Result<i32> {
    let provider = ctx.provider()?;
    let ids: Vec<String> = if a.all {
        provider.list().await?.into_iter().map(|s| s.id).collect()
    } else {
        a.ids
    };
    if ids.is_empty() && !a.all {
        return Err(Error::InvalidRequest("give sandbox ids or --all".into()));
    }
    let mut removed = Vec::new();
    for id in &ids {
        provider.destroy(id).await?;
        removed.push(id.clone());
        if !ctx.json {
            println!("{id}");
        }
    }
    if ctx.json {
        println!("{}", serde_json::json!({"removed": removed}));
    }
    Ok(0)
}
