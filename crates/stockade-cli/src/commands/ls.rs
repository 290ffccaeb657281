//! `stockade ls`

use stockade::Result;

use super::{Ctx, until};

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let list = ctx.list().await?;
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
