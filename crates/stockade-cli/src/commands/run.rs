//! `stockade run [spec flags] -- CMD...` and `run --language L --code CODE | -f FILE`.

use std::path::PathBuf;

use clap::Args;
use stockade::spec::{LanguagePreset, Mount};
use stockade::{CreateOptions, Error, Result, Sandbox};

use super::Ctx;
use super::exec::{exec_and_print, request};
use crate::spec_args::SpecArgs;

/// Grace between the exec deadline and the sandbox lifetime, so a command that runs
/// out its time is reported as timed out rather than cut off by the lifetime.
const LIFETIME_GRACE_SECS: u64 = 5;

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Language of --code or -f (python, javascript, bash, sh, ...).
    #[arg(long, short = 'l')]
    pub language: Option<String>,
    /// Code to run with --language.
    #[arg(long, conflicts_with = "file")]
    pub code: Option<String>,
    /// File of code to run with --language (mounted read-only at /code).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Cap on each captured stream, e.g. 1m (default 1m).
    #[arg(long, value_name = "SIZE")]
    pub output_limit: Option<String>,
    /// Read stdin and pass it to the command.
    #[arg(long, short = 'i')]
    pub stdin: bool,
    /// The command (unless --language is given).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Finds a host interpreter for host-rootfs mode.
fn host_interpreter(preset: &LanguagePreset) -> Result<String> {
    let name = preset.interpreter[0];
    for dir in ["/usr/local/bin", "/usr/bin", "/bin"] {
        let p = PathBuf::from(dir).join(name);
        if p.is_file() {
            return Ok(p.display().to_string());
        }
    }
    Err(Error::Unavailable {
        what: format!("the {} interpreter", preset.names[0]),
        reason: format!(
            "{name} is not installed on this host, and sandboxes without --image use the host's interpreters"
        ),
        fix: format!(
            "install {name} on the host, or run from an image with --image {}",
            preset.image
        ),
    })
}

pub async fn run(ctx: &Ctx, a: RunArgs) -> Result<i32> {
    let mut spec = a.spec.to_spec()?;
    let argv = match (&a.language, &a.code, &a.file) {
        (None, None, None) => {
            if a.command.is_empty() {
                return Err(Error::InvalidRequest(
                    "give a command after --, or --language with --code or -f".into(),
                ));
            }
            a.command.clone()
        }
        (None, _, _) => {
            return Err(Error::InvalidRequest(
                "--code and -f need --language".into(),
            ));
        }
        (Some(lang), code, file) => {
            if !a.command.is_empty() {
                return Err(Error::InvalidRequest(
                    "give either a command or --language with --code/-f, not both".into(),
                ));
            }
            let preset = LanguagePreset::find(lang).map_err(Error::InvalidRequest)?;
            let interp = host_interpreter(preset)?;
            match (code, file) {
                (Some(code), None) => preset.code_argv(&interp, code),
                (None, Some(file)) => {
                    let host = std::fs::canonicalize(file).map_err(|e| {
                        Error::InvalidRequest(format!("code file {}: {e}", file.display()))
                    })?;
                    let target = format!("/code/main.{}", preset.extension);
                    spec.mounts.push(Mount {
                        host,
                        target: target.clone().into(),
                        writable: false,
                    });
                    preset.file_argv(&interp, &target)
                }
                _ => {
                    return Err(Error::InvalidRequest(
                        "--language needs --code or -f".into(),
                    ));
                }
            }
        }
    };
    let deadline = a.spec.timeout.map(|t| t as f64);
    spec.timeout_secs = spec.timeout_secs.saturating_add(LIFETIME_GRACE_SECS);
    let req = request(
        argv,
        deadline.or(Some((spec.timeout_secs - LIFETIME_GRACE_SECS) as f64)),
        &[],
        None,
        a.output_limit.as_deref(),
        a.stdin,
    )?;
    let provider = ctx.provider()?;
    // Owned by this process: if we are killed, the sandbox goes with us.
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let sb = Sandbox::create(provider.clone(), spec, opts).await?;
    let result = exec_and_print(ctx, provider.as_ref(), sb.id(), req).await;
    let destroyed = sb.destroy().await;
    let code = result?;
    destroyed?;
    Ok(code)
}
