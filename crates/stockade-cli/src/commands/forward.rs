//! `stockade forward ID [LOCAL:]PORT`: a port of a sandbox on this host's loopback.

use clap::Args;
use stockade::{Error, Result};

use super::Ctx;

#[derive(Args, Debug)]
pub struct ForwardArgs {
    /// Sandbox id.
    pub id: String,
    /// The sandbox's port, or LOCAL:PORT to listen on another port here (0: any free
    /// one, printed).
    #[arg(value_name = "[LOCAL:]PORT")]
    pub ports: String,
}

/// `(local, sandbox)` ports of `[LOCAL:]PORT`.
fn ports(arg: &str) -> Result<(u16, u16)> {
    let bad = || {
        Error::InvalidRequest(format!(
            "{arg:?} is not [LOCAL:]PORT (ports 1 to 65535; LOCAL may be 0 for any free one)"
        ))
    };
    let (local, remote) = match arg.split_once(':') {
        Some((l, r)) => (l.parse::<u16>().map_err(|_| bad())?, r),
        None => (u16::MAX, arg),
    };
    let remote = remote
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(bad)?;
    Ok((if local == u16::MAX { remote } else { local }, remote))
}

pub async fn run(ctx: &Ctx, a: ForwardArgs) -> Result<i32> {
    let (local, port) = ports(&a.ports)?;
    let provider = ctx.provider_for(&a.id).await?;
    // Asked once before listening: a sandbox that cannot be reached is said now.
    provider.inspect(&a.id).await?;
    let on_error: stockade::OnError = std::sync::Arc::new(|e| eprintln!("stockade: {e}"));
    let fwd =
        stockade::Forward::start(provider.clone(), &a.id, port, local, Some(on_error)).await?;
    let at = fwd.local_addr();
    if ctx.json {
        println!(
            "{}",
            serde_json::json!({"id": a.id, "port": port, "listen": at.to_string()})
        );
    } else {
        println!("{at}");
        eprintln!(
            "stockade: forwarding {at} to port {port} of {} (Ctrl-C ends it)",
            a.id
        );
    }
    // The sandbox gone, the forward ends too.
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        provider.inspect(&a.id).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_local_colon_remote_or_one() {
        assert_eq!(ports("8000").unwrap(), (8000, 8000));
        assert_eq!(ports("9000:8000").unwrap(), (9000, 8000));
        assert_eq!(ports("0:80").unwrap(), (0, 80));
        for bad in ["", "0", "x", "80:", ":80", "70000", "1:2:3"] {
            assert!(ports(bad).is_err(), "{bad}");
        }
    }
}
