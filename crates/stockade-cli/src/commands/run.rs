//! `stockade run [spec flags] CMD...` and `run --language L --code CODE | -f FILE`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use stockade::code::Source;
use stockade::spec::LanguagePreset;
use stockade::{CreateOptions, Error, Result, Sandbox, StartStep};

use super::exec::{exec_streaming, print_outcome, request};
use super::{Ctx, image};
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
    /// File of code to run (mounted read-only at /code); its language is --language,
    /// else its extension (.py, .js, .ts, .rb, .sh, ...).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Cap on each captured stream, e.g. 1m (default 1m).
    #[arg(long, value_name = "SIZE")]
    pub output_limit: Option<String>,
    /// Read stdin and pass it to the command.
    #[arg(long, short = 'i')]
    pub stdin: bool,
    /// Run the command on a terminal, with this terminal's keys and size (a shell, a
    /// REPL): `stockade run -t -- bash` (`-it`, as docker's, is the same).
    #[arg(long, short = 't')]
    pub tty: bool,
    /// Run in a sandbox started from this named snapshot (`stockade snapshot ID
    /// NAME`) instead of a fresh one; --timeout is then only the command's deadline.
    #[arg(long, value_name = "NAME")]
    pub from_snapshot: Option<String>,
    /// Print, to stderr, how long each step took: the sandbox's start as its provider
    /// timed it (native: the host, the monitor and PID 1, step by step), then the
    /// create, the exec and the destroy as this command saw them.
    #[arg(long)]
    pub timings: bool,
    /// The command and its arguments (unless --language is given). Every flag after
    /// the command's first word is the command's own, as with `docker run`; a `--`
    /// before the command is accepted too.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The refusal of a wasm run without a runtime, with the flag that gives one: the
/// host's interpreters are not there, a WASI runtime (`--image python`) is.
fn wasm_needs_a_runtime(command: &[String]) -> Error {
    let first = command
        .first()
        .map(|c| c.rsplit('/').next().unwrap_or(c).to_string());
    let preset = first.as_deref().and_then(|c| {
        stockade::spec::PRESETS
            .iter()
            .find(|p| p.interpreter.first().is_some_and(|i| *i == c) || p.names.contains(&c))
    });
    let hint = match preset {
        Some(p) => format!(
            "run code with `--language {} --code ...` (or `-f FILE`), or give its WASI \
             runtime with `--image {}` and the command",
            p.names[0], p.names[0]
        ),
        None => "give a WASI runtime with `--image NAME` (`stockade runtime ls` lists them), \
                 or run code with `--language LANG --code ...`"
            .to_string(),
    };
    Error::InvalidRequest(format!(
        "the wasm provider runs WASI modules, not this host's programs: {hint}"
    ))
}

/// The language of a code file by its extension (`.py` is python, `.R` is r).
fn language_of_file(file: &std::path::Path) -> Result<String, Error> {
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
    stockade::spec::PRESETS
        .iter()
        .find(|p| !ext.is_empty() && p.extension == ext)
        .map(|p| p.names[0].to_string())
        .ok_or_else(|| {
            let known: Vec<String> = stockade::spec::PRESETS
                .iter()
                .map(|p| format!(".{} ({})", p.extension, p.names[0]))
                .collect();
            Error::InvalidRequest(format!(
                "-f {}: its extension names no language; give --language, or name the \
                 file by one of {}",
                file.display(),
                known.join(", ")
            ))
        })
}

/// `run --timings`: the provider's steps of the sandbox's start (`at` from the start
/// of the first), then this command's create, exec and destroy (`at` from the start of
/// the create, which the first step follows within microseconds).
fn timings_table(
    steps: &[StartStep],
    created: Duration,
    executed: Duration,
    total: Duration,
) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut out = String::from(
        "stockade: timings in ms (steps of one process follow each other; those of \
         different processes overlap)\n      at     took  step\n",
    );
    let mut row = |at: f64, took: Option<f64>, what: &str| {
        let took = took.map_or(String::new(), |t| format!("{t:8.2}"));
        out.push_str(&format!("{at:8.2} {took:>8}  {what}\n"));
    };
    for s in steps {
        row(
            s.start_us as f64 / 1000.0,
            Some(s.took_us as f64 / 1000.0),
            &s.name,
        );
    }
    row(0.0, Some(ms(created)), "create");
    row(ms(created), Some(ms(executed - created)), "exec");
    row(ms(executed), Some(ms(total - executed)), "destroy");
    row(ms(total), None, "total");
    out
}

/// Pulls and unpacks images with the CLI's progress bars.
struct ProgressFetcher<'a>(&'a Ctx);

#[async_trait::async_trait]
impl stockade::code::ImageFetcher for ProgressFetcher<'_> {
    async fn fetch(
        &self,
        store: &stockade_image::Store,
        reference: &str,
    ) -> Result<stockade_image::Image> {
        image::ensure_local(self.0, store, reference).await
    }
}

/// The argv that runs `--code`/`-f` of a language on `provider`.
async fn language_argv(
    ctx: &Ctx,
    provider: &str,
    preset: &LanguagePreset,
    code: Option<&String>,
    file: Option<&PathBuf>,
    spec: &mut stockade::SandboxSpec,
) -> Result<Vec<String>> {
    let source = match (code, file) {
        (Some(c), None) => Source::Code(c),
        (None, Some(f)) => Source::File(f),
        _ => {
            return Err(Error::InvalidRequest(
                "--language needs --code or -f".into(),
            ));
        }
    };
    let store = image::store(ctx)?;
    stockade::code::prepare(
        provider,
        preset,
        source,
        spec,
        &store,
        &ProgressFetcher(ctx),
    )
    .await
}

/// The image's own command (`Entrypoint` + `Cmd`), for `run --image REF` without one.
async fn image_command(ctx: &Ctx, reference: &str) -> Result<Vec<String>> {
    let store = image::store(ctx)?;
    let img = image::ensure_local(ctx, &store, reference).await?;
    let rc = img.run_config();
    let argv: Vec<String> = rc
        .entrypoint
        .unwrap_or_default()
        .into_iter()
        .chain(rc.cmd.unwrap_or_default())
        .collect();
    if argv.is_empty() {
        return Err(Error::InvalidRequest(format!(
            "image {reference} has no Entrypoint or Cmd; give a command"
        )));
    }
    Ok(argv)
}

pub async fn run(ctx: &Ctx, a: RunArgs) -> Result<i32> {
    if a.tty && ctx.json {
        return Err(Error::InvalidRequest(
            "--tty shows the terminal as it is; it gives no JSON: drop --json, or -t".into(),
        ));
    }
    if a.from_snapshot.is_some() {
        super::snapshot::refuse_spec_flags(&a.spec, true)?;
    }
    let mut spec = a.spec.to_spec()?;
    let provider = ctx.provider()?;
    let local_images = provider.capabilities().local_images;
    // `-f hello.py` names its language by its extension, as it would to an editor.
    let inferred = match (&a.language, &a.file) {
        (None, Some(f)) => Some(language_of_file(f)?),
        _ => None,
    };
    let language = a.language.clone().or(inferred);
    if provider.name() == "wasm" && spec.image.is_none() && language.is_none() {
        return Err(wasm_needs_a_runtime(&a.command));
    }
    let argv = match (&language, &a.code, &a.file) {
        (None, None, None) if a.command.is_empty() => match spec.image.clone() {
            Some(reference) if local_images => image_command(ctx, &reference).await?,
            Some(reference) => {
                return Err(Error::InvalidRequest(format!(
                    "without a command, `run --image {reference}` runs the image's own \
                     command, read from this host's image store; the {} provider takes \
                     its images from elsewhere (a daemon's host, dockerd, WASI runtimes), \
                     so give the command after the options: `stockade run --image {reference} CMD...`",
                    provider.name()
                )));
            }
            None => {
                return Err(Error::InvalidRequest(
                    "give a command, or --language with --code or -f".into(),
                ));
            }
        },
        (None, None, None) => a.command.clone(),
        (None, _, _) => {
            return Err(Error::InvalidRequest(
                "--code needs --language (e.g. --language python)".into(),
            ));
        }
        (Some(_), _, _) if !a.command.is_empty() => {
            return Err(Error::InvalidRequest(
                "give either a command or --language with --code/-f, not both".into(),
            ));
        }
        (Some(lang), code, file) => {
            let preset = LanguagePreset::find(lang).map_err(Error::InvalidRequest)?;
            // The interpreter is chosen as the provider the user named (or the
            // default) would choose it in-process, so a daemon runs the same one.
            language_argv(
                ctx,
                &ctx.provider_name(),
                preset,
                code.as_ref(),
                file.as_ref(),
                &mut spec,
            )
            .await?
        }
    };
    // Pull and unpack here, with progress, rather than silently inside create (a
    // provider whose images live elsewhere fetches them itself).
    if let Some(reference) = spec.image.clone() {
        image::prepare(ctx, provider.as_ref(), &reference).await?;
    }
    let deadline = a.spec.timeout.map(|t| t as f64);
    spec.timeout_secs = spec.timeout_secs.saturating_add(LIFETIME_GRACE_SECS);
    let req = request(
        argv,
        deadline.or(Some((spec.timeout_secs - LIFETIME_GRACE_SECS) as f64)),
        &[],
        None,
        a.output_limit.as_deref(),
        // On a terminal, stdin is typed as it comes, not read first.
        a.stdin && !a.tty,
    )?;
    // Owned by this process: if we are killed, the sandbox goes with us.
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let t0 = Instant::now();
    let sb = match &a.from_snapshot {
        Some(name) => super::snapshot::start_from(ctx, provider.clone(), name, opts).await?,
        None => {
            let name = provider.name();
            super::with_boot_progress(ctx, name, Sandbox::create(provider.clone(), spec, opts))
                .await?
        }
    };
    let created = t0.elapsed();
    let result = if a.tty {
        super::terminal::exec(provider.as_ref(), sb.id(), req).await
    } else {
        exec_streaming(ctx, provider.as_ref(), sb.id(), req).await
    };
    let executed = t0.elapsed();
    let destroyed = sb.destroy().await;
    // The result is printed after the destroy: a closed stdout ends this process at
    // that print, and the destroy is then done already.
    match &result {
        // A terminal showed everything as it came.
        Ok(outcome) if a.tty => super::exec::print_ending(outcome),
        Ok(outcome) => print_outcome(ctx, sb.id(), outcome),
        Err(_) => {}
    }
    if a.timings {
        eprint!(
            "{}",
            timings_table(&sb.info().steps, created, executed, t0.elapsed())
        );
    }
    let code = result?.exit_code;
    destroyed?;
    Ok(code)
}
