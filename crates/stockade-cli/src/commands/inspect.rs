//! `stockade inspect ID`

use stockade::Result;

use super::{Ctx, until};

pub async fn run(ctx: &Ctx, id: &str) -> Result<i32> {
    let provider = ctx.provider_for(id).await?;
    let info = provider.inspect(id).await?;
    let denied = provider.egress_denied(id, 0).await?;
    if ctx.json {
        let mut v = serde_json::to_value(&info).unwrap_or_default();
        v["egress_denied"] = serde_json::to_value(&denied).unwrap_or_default();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(0);
    }
    println!("id:         {}", info.id);
    println!("provider:   {}", info.provider);
    println!("state:      {}", info.state);
    if info.state == stockade::RunState::Paused {
        println!(
            "expires in: {} of running (the lifetime does not run while paused)",
            until(info.expires_at_ms)
        );
    } else {
        println!("expires in: {}", until(info.expires_at_ms));
    }
    if let Some(o) = info.owner_pid {
        println!("owner pid:  {o}");
    }
    if let Some(end) = info.steps.iter().map(|s| s.start_us + s.took_us).max() {
        println!("started in: {:.2} ms (at, took, step)", end as f64 / 1000.0);
        for s in &info.steps {
            println!(
                "  {:8.2} {:8.2}  {}",
                s.start_us as f64 / 1000.0,
                s.took_us as f64 / 1000.0,
                s.name
            );
        }
    }
    println!("applied:");
    for a in &info.applied {
        println!("  {a}");
    }
    println!(
        "spec:\n{}",
        serde_json::to_string_pretty(&info.spec).unwrap_or_default()
    );
    if !denied.is_empty() {
        println!("egress denied:");
        for d in &denied {
            println!("  {d}");
        }
    }
    Ok(0)
}
