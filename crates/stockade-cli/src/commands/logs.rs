//! `stockade logs ID PID [--follow]`: the output of a detached exec.

use std::io::Write;

use clap::Args;
use stockade::{Error, ErrorCode, FileOp, FileResult, Provider, Result};

use super::Ctx;

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// Sandbox id.
    pub id: String,
    /// The pid `stockade exec --detach` printed.
    pub pid: u32,
    /// Keep printing what it writes until it ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// Whether process `pid` of the sandbox still runs.
async fn running(provider: &dyn Provider, id: &str, pid: u32) -> Result<bool> {
    let op = FileOp::Stat {
        path: format!("/proc/{pid}"),
    };
    match provider.file(id, op).await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

pub async fn run(ctx: &Ctx, a: LogsArgs) -> Result<i32> {
    let provider = ctx.provider_for(&a.id).await?;
    let path = stockade::detached_log(a.pid);
    let mut offset = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        // Following, whether it ran before this read (what it wrote up to its end is
        // then in it); otherwise one read of what is there.
        let alive = a.follow && running(provider.as_ref(), &a.id, a.pid).await?;
        loop {
            let op = FileOp::Read {
                path: path.clone(),
                offset,
                limit: 1 << 20,
            };
            let data = match provider.file(&a.id, op).await {
                Ok(FileResult::Data { data, .. }) => data,
                Ok(other) => {
                    return Err(Error::Internal(format!("a read answered {other:?}")));
                }
                // The sandbox itself gone is said as such.
                Err(e) if e.code() == ErrorCode::NotFound && e.to_string().contains(&path) => {
                    return Err(Error::NotFound {
                        kind: "detached output",
                        id: format!(
                            "of pid {} in {} ({path}: not started by `stockade exec --detach`, or with --discard-output)",
                            a.pid, a.id
                        ),
                    });
                }
                Err(e) => return Err(e),
            };
            if data.is_empty() {
                break;
            }
            offset += data.len() as u64;
            out.write_all(&data)
                .and_then(|()| out.flush())
                .map_err(|e| Error::io("cannot write the output", e))?;
        }
        if !alive {
            return Ok(0);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}
