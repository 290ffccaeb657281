//! `stockade gc`

use stockade::Result;

use super::Ctx;

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let provider = ctx.provider()?;
    let mut report = provider.gc().await?;
    // Docker sandboxes are reaped by label whichever provider is chosen, when dockerd
    // is there to ask (no dockerd: no containers to reap).
    if provider.name() != "docker" {
        use stockade::Provider as _;
        match stockade::DockerProvider::new().gc().await {
            Ok(d) => {
                report.reaped.extend(d.reaped);
                report.errors.extend(d.errors);
            }
            Err(stockade::Error::Unavailable { .. }) => {}
            Err(e) => report.errors.push(format!("docker: {e}")),
        }
    }
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
