//! `stockade ls`

use stockade::Result;

use super::{Ctx, until};

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let list = if ctx.remote.is_some() || ctx.names_provider() {
        ctx.provider()?.list().await?
    } else {
        // Every provider's, the default's first (its errors are the command's); one
        // this host cannot run (no dockerd, no runsc) has none to list.
        let default = ctx.provider()?;
        let mut all = default.list().await?;
        for name in stockade::PROVIDERS {
            if *name == default.name() {
                continue;
            }
            if let Ok(p) = ctx.local_provider(name)
                && let Ok(more) = p.list().await
            {
                all.extend(more);
            }
        }
        all
    };
    if ctx.json {
        println!(
            "{}",
            serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
        );
        return Ok(0);
    }
    println!(
        "{:<16} {:<8} {:<8} {:<10} {:<8}",
        "ID", "PROVIDER", "STATE", "EXPIRES IN", "OWNER"
    );
    for s in list {
        let owner = s
            .owner_pid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<16} {:<8} {:<8} {:<10} {:<8}",
            s.id,
            s.provider,
            s.state.as_str(),
            until(s.expires_at_ms),
            owner
        );
    }
    Ok(0)
}
