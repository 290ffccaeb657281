//! `stockade create [spec flags]`

use clap::Args;
use serde_json::json;
use stockade::{CreateOptions, Result, Sandbox};

use super::Ctx;
use crate::spec_args::SpecArgs;

#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Start from this named snapshot (`stockade snapshot ID NAME`) instead of
    /// booting: its processes, memory and spec, digest-checked first.
    #[arg(long, value_name = "NAME")]
    pub from_snapshot: Option<String>,
}

pub async fn run(ctx: &Ctx, a: CreateArgs) -> Result<i32> {
    if let Some(name) = &a.from_snapshot {
        super::snapshot::refuse_spec_flags(&a.spec, false)?;
        let sb = super::snapshot::start_from(ctx, ctx.provider()?, name, CreateOptions::default())
            .await?;
        return print(ctx, sb).await;
    }
    let mut spec = a.spec.to_spec()?;
    // In-process, the sandbox outlives this command: record whose it is for `rm
    // --all` (a daemon keeps its own records, and a label would split its pools).
    if ctx.remote.is_none() {
        spec.labels.insert(
            stockade::host::OWNER_UID_LABEL.into(),
            stockade::host::euid().to_string(),
        );
    }
    let provider = ctx.provider()?;
    // Pull and unpack here, with progress, rather than silently inside create (a
    // provider whose images live elsewhere fetches them itself).
    if let Some(reference) = &spec.image {
        super::image::prepare(ctx, provider.as_ref(), reference).await?;
    }
    let name = provider.name();
    let sb = super::with_boot_progress(
        ctx,
        name,
        Sandbox::create(provider.clone(), spec, CreateOptions::default()),
    )
    .await?;
    print(ctx, sb).await
}

/// Prints the new sandbox's id. When it cannot be printed (whoever reads our output
/// has gone: `stockade create | true`), nobody will ever know the id, so the sandbox
/// is destroyed rather than left running until its lifetime ends.
async fn print(ctx: &Ctx, sb: Sandbox) -> Result<i32> {
    use std::io::Write as _;
    let line = if ctx.json {
        let i = sb.info();
        json!({"id": i.id, "provider": i.provider, "created_at_ms": i.created_at_ms, "expires_at_ms": i.expires_at_ms}).to_string()
    } else {
        sb.id().to_string()
    };
    let mut out = std::io::stdout().lock();
    let printed = writeln!(out, "{line}").and_then(|()| out.flush());
    drop(out);
    match printed {
        Ok(()) => Ok(0),
        Err(e) => {
            let id = sb.id().to_string();
            sb.destroy().await?;
            Err(stockade::Error::Io {
                context: format!(
                    "sandbox {id} was destroyed: nobody could be told its id (the output is closed)"
                ),
                source: e,
            })
        }
    }
}
