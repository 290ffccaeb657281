//! `stockade inspect ID`

use stockade::Result;

use super::{Ctx, until};

pub async fn run(ctx: &Ctx, id: &str) -> Result<i32> {
    let info = ctx.provider()?.inspect(id).await?;
    if ctx.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&info).unwrap_or_default()
        );
        return Ok(0);
    }
    println!("id:         {}", info.id);
    println!("provider:   {}", info.provider);
    println!("expires in: {}", until(info.expires_at_ms));
    if let Some(o) = info.owner_pid {
        println!("owner pid:  {o}");
    }
    println!("applied:");
    for a in &info.applied {
        println!("  {a}");
    }
    println!(
        "spec:\n{}",
        serde_json::to_string_pretty(&info.spec).unwrap_or_default()
    );
    Ok(0)
}
