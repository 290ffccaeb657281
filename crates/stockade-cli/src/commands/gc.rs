//! `stockade gc`

use stockade::Result;

use super::Ctx;

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let report = ctx.provider()?.gc().await?;
    if ctx.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        for id in &report.reaped {
            println!("reaped {id}");
        }
        for e in &report.errors {
            eprintln!("stockade: {e}");
        }
        if report.reaped.is_empty() && report.errors.is_empty() {
            println!("nothing to reap");
        }
    }
    Ok(if report.errors.is_empty() { 0 } else { 1 })
}
