//! `stockade run [spec flags] -- CMD...` and `run --language L --code CODE | -f FILE`.

use std::path::{Path, PathBuf};

use clap::Args;
use stockade::spec::{LanguagePreset, Mount};
use stockade::{CreateOptions, Error, Result, Sandbox};

use super::exec::{exec_and_print, request};
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

/// Where a language's interpreter comes from.
enum Interpreter {
    /// The host's (host-rootfs mode), at this path.
    Host(String),
    /// An image's (the spec names it), at this path inside.
    Image(String),
}

/// Finds `name` in `dirs` under `root` (the host's `/`, or an image's rootfs), as a
/// file or a symlink (an image's `/usr/bin/python3 -> python3.11` resolves inside
/// the sandbox, not here).
fn find_in(root: &Path, dirs: &[&str], name: &str) -> Option<String> {
    dirs.iter().find_map(|dir| {
        let inside = Path::new(dir).join(name);
        let on_host = root.join(inside.strip_prefix("/").ok()?);
        std::fs::symlink_metadata(&on_host)
            .ok()
            .filter(|m| m.is_file() || m.file_type().is_symlink())
            .map(|_| inside.display().to_string())
    })
}

/// The PATH directories of an image config's `Env` (default: the usual ones).
fn image_path_dirs(image: &stockade_image::Image) -> Vec<String> {
    image
        .run_config()
        .env
        .unwrap_or_default()
        .iter()
        .find_map(|e| e.strip_prefix("PATH=").map(str::to_string))
        .unwrap_or_else(|| stockade::spec::DEFAULT_PATH.to_string())
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(str::to_string)
        .collect()
}

/// Picks the interpreter of `preset` for the native provider: from `--image` when
/// given; else the host's when installed; else the preset's image (or the config
/// file's `[languages]` entry), pulled on first use.
async fn native_interpreter(
    ctx: &Ctx,
    preset: &LanguagePreset,
    spec: &mut stockade::SandboxSpec,
) -> Result<Interpreter> {
    let name = preset.interpreter[0];
    let from_image = |image: &stockade_image::Image, rootfs: &Path, reference: &str| {
        let dirs = image_path_dirs(image);
        let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
        find_in(rootfs, &dirs, name)
            .map(Interpreter::Image)
            .ok_or_else(|| Error::Unavailable {
                what: format!("the {} interpreter", preset.names[0]),
                reason: format!(
                    "image {reference} has no {name} on its PATH ({})",
                    dirs.join(":")
                ),
                fix: format!("use an image that has it, e.g. --image {}", preset.image),
            })
    };
    if let Some(reference) = spec.image.clone() {
        let store = image::store(ctx)?;
        let img = image::ensure_local(ctx, &store, &reference).await?;
        let rootfs = store.rootfs(&img).map_err(image::to_error)?;
        return from_image(&img, &rootfs, &reference);
    }
    if let Some(p) = find_in(
        Path::new("/"),
        &["/usr/local/bin", "/usr/bin", "/bin"],
        name,
    ) {
        return Ok(Interpreter::Host(p));
    }
    let config =
        stockade_image::Config::load().map_err(|e| Error::InvalidRequest(e.to_string()))?;
    let reference = config
        .languages
        .get(preset.names[0])
        .cloned()
        .unwrap_or_else(|| preset.image.to_string());
    let store = image::store(ctx)?;
    let img = image::ensure_local(ctx, &store, &reference)
        .await
        .map_err(|e| Error::Unavailable {
            what: format!("the {} interpreter", preset.names[0]),
            reason: format!(
                "{name} is not installed on this host, and its image {reference} is not available: {e}"
            ),
            fix: format!(
                "install {name} on the host, pass --image REF of an image that has it, \
                 or name one under [languages] in {}",
                stockade_image::Config::default_path().display()
            ),
        })?;
    let rootfs = store.rootfs(&img).map_err(image::to_error)?;
    let found = from_image(&img, &rootfs, &reference)?;
    spec.image = Some(reference);
    Ok(found)
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
    if code.is_none() == file.is_none() {
        return Err(Error::InvalidRequest(
            "--language needs --code or -f".into(),
        ));
    }
    let interp = if provider == "native" {
        match native_interpreter(ctx, preset, spec).await? {
            Interpreter::Host(p) | Interpreter::Image(p) => p,
        }
    } else {
        // Other providers resolve the interpreter on their own PATH.
        spec.image.get_or_insert_with(|| preset.image.to_string());
        preset.interpreter[0].to_string()
    };
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
        _ => unreachable!("checked above"),
    }
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
            "image {reference} has no Entrypoint or Cmd; give a command after --"
        )));
    }
    Ok(argv)
}

pub async fn run(ctx: &Ctx, a: RunArgs) -> Result<i32> {
    let mut spec = a.spec.to_spec()?;
    let provider = ctx.provider()?;
    let native = provider.name() == "native";
    let argv = match (&a.language, &a.code, &a.file) {
        (None, None, None) if a.command.is_empty() => match spec.image.clone() {
            Some(reference) if native => image_command(ctx, &reference).await?,
            _ => {
                return Err(Error::InvalidRequest(
                    "give a command after --, or --language with --code or -f".into(),
                ));
            }
        },
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
                ctx,
                provider.name(),
                preset,
                code.as_ref(),
                file.as_ref(),
                &mut spec,
            )
            .await?
        }
    };
    // Pull and unpack here, with progress, rather than silently inside create.
    if native && let Some(reference) = spec.image.clone() {
        image::ensure_local(ctx, &image::store(ctx)?, &reference).await?;
    }
    if provider.name() == "docker"
        && let Some(reference) = spec.image.clone()
    {
        docker_image(ctx, &reference).await?;
    }
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

/// Makes sure dockerd has the image (its own, loaded from the image store, or pulled
/// through dockerd), showing each step on stderr rather than silently inside create.
async fn docker_image(ctx: &Ctx, reference: &str) -> Result<()> {
    let mut p = stockade::DockerProvider::new();
    if let Some(h) = &ctx.home {
        p = p.with_image_store(h.join("images"));
    }
    let quiet = ctx.json;
    let mut last = String::new();
    p.ensure_image(reference, &mut |line: &str| {
        if !quiet && line != last {
            eprintln!("stockade: {line}");
            last = line.to_string();
        }
    })
    .await
    .map(drop)
}
