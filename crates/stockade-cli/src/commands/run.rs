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

/// The argv that runs `--code`/`-f` of a language on `provider`.
fn language_argv(
    provider: &str,
    preset: &LanguagePreset,
    code: Option<&String>,
    file: Option<&PathBuf>,
    spec: &mut stockade::SandboxSpec,
) -> Result<Vec<String>> {
    let read = |f: &PathBuf| {
        std::fs::read_to_string(f)
            .map_err(|e| Error::InvalidRequest(format!("code file {}: {e}", f.display())))
    };
    if provider == "wasm" {
        // WASI runtimes carry their interpreter: the image names it.
        let image = stockade::wasm::image_for_language(preset.names[0]).ok_or_else(|| {
            Error::Unavailable {
                what: format!("{} on the wasm provider", preset.names[0]),
                reason: "no WASI runtime for this language is known".into(),
                fix: "use --language python, or another provider".into(),
            }
        })?;
        spec.image.get_or_insert_with(|| image.to_string());
        let code = match (code, file) {
            (Some(c), None) => c.clone(),
            (None, Some(f)) => read(f)?,
            _ => {
                return Err(Error::InvalidRequest(
                    "--language needs --code or -f".into(),
                ));
            }
        };
        return Ok(preset.code_argv(image, &code));
    }
    let interp = host_interpreter(preset)?;
    match (code, file) {
        (Some(code), None) => Ok(preset.code_argv(&interp, code)),
        (None, Some(file)) => {
            let host = std::fs::canonicalize(file)
                .map_err(|e| Error::InvalidRequest(format!("code file {}: {e}", file.display())))?;
            // Mounted read-only, as the code file of a run should be.
            let target = format!("/code/main.{}", preset.extension);
            spec.mounts.push(Mount {
                host,
                target: target.clone().into(),
                writable: false,
            });
            Ok(preset.file_argv(&interp, &target))
        }
        _ => Err(Error::InvalidRequest(
            "--language needs --code or -f".into(),
        )),
    }
}

pub async fn run(ctx: &Ctx, a: RunArgs) -> Result<i32> {
    let mut spec = a.spec.to_spec()?;
    let provider = ctx.provider()?;
    let argv = match (&a.language, &a.code, &a.file) {
        (None, None, None) if a.command.is_empty() => {
            return Err(Error::InvalidRequest(
                "give a command after --, or --language with --code or -f".into(),
            ));
        }
        (None, None, None) => a.command.clone(),
        (None, _, _) => {
            return Err(Error::InvalidRequest(
                "--code and -f need --language".into(),
            ));
        }
        (Some(_), _, _) if !a.command.is_empty() => {
            return Err(Error::InvalidRequest(
                "give either a command or --language with --code/-f, not both".into(),
            ));
        }
        (Some(lang), code, file) => {
            let preset = LanguagePreset::find(lang).map_err(Error::InvalidRequest)?;
            language_argv(
                provider.name(),
                preset,
                code.as_ref(),
                file.as_ref(),
                &mut spec,
            )?
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
