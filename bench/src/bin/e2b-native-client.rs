//! The anchor of `bench/e2b.py`: the same operations as the E2B SDK
//! rows, through Stockade's own client library (`stockade-client`, what the native
//! SDKs wrap) against the same daemon.
//!
//! Usage: native_client SOCKET TOKEN N. Prints one JSON object: the milliseconds of
//! each create-to-first-command (create, then `true`; the destroy after it is not
//! counted) and of each command round trip in one live sandbox.

use std::sync::Arc;
use std::time::Instant;

use stockade::{CreateOptions, ExecRequest, Sandbox, SandboxSpec};
use stockade_client::{Address, RemoteProvider};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, socket, token, n] = args.as_slice() else {
        anyhow::bail!("usage: native_client SOCKET TOKEN N");
    };
    let n: usize = n.parse()?;
    let host: Address = format!("unix://{socket}").parse()?;
    let p: Arc<dyn stockade::Provider> =
        Arc::new(RemoteProvider::connect(&host, Some(token)).await?);
    let spec = || SandboxSpec {
        timeout_secs: 120,
        ..SandboxSpec::default()
    };
    let run = || ExecRequest::new(["true"]);
    let mut first = Vec::new();
    for i in 0..=n {
        let t = Instant::now();
        let sb = Sandbox::create(p.clone(), spec(), CreateOptions::default()).await?;
        let o = sb.exec(run()).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(o.exit_code == 0, "true failed: {o:?}");
        sb.destroy().await?;
        // The first one warms the connection, as the SDK rows' warm-up does.
        if i > 0 {
            first.push(ms);
        }
    }
    let sb = Sandbox::create(p.clone(), spec(), CreateOptions::default()).await?;
    let mut round = Vec::new();
    for i in 0..=n * 4 {
        let t = Instant::now();
        sb.exec(run()).await?;
        if i > 0 {
            round.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    sb.destroy().await?;
    println!(
        "{}",
        serde_json::json!({"create_to_first": first, "round_trip": round})
    );
    Ok(())
}
