//! Running a code string or file of a language: which interpreter, from which root,
//! and the argv that runs it. Shared by the CLI (`stockade run --language`) and the
//! SDKs (`run_code`), so both pick interpreters the same way.
//!
//! On the native provider the interpreter comes from the spec's image when it names
//! one; else from the host when it is installed there (host-rootfs mode, the fastest;
//! TypeScript also with Node.js 22.6+, see [`crate::languages`]); else from the
//! language's image (the config file's `[languages]` entry, else the preset's default),
//! pulled on first use. When none of these works the error names the missing
//! interpreter and the one fix: installing it on the host. The wasm provider's runtimes carry their
//! interpreter; other providers look it up on the image's `PATH`.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use stockade_core::{Error, Result};
use stockade_image::{Image, Store};
use stockade_spec::{LanguagePreset, Mount, SandboxSpec};

use crate::languages::{HostRunner, host_runner, install_fix, language_image};

/// What to run: a code string, or a host file (mounted read-only into the sandbox).
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// Code given as a string.
    Code(&'a str),
    /// A file on the host.
    File(&'a Path),
}

/// Makes an image local (pulled and unpacked) before its rootfs is searched. The CLI
/// shows progress bars; [`QuietFetcher`] does it silently.
#[async_trait]
pub trait ImageFetcher: Send + Sync {
    /// Pulls `reference` into `store` when missing and unpacks it; returns the image.
    async fn fetch(&self, store: &Store, reference: &str) -> Result<Image>;
}

/// Pulls (with the environment's credentials and the config file's registries) and
/// unpacks without output.
pub struct QuietFetcher;

#[async_trait]
impl ImageFetcher for QuietFetcher {
    async fn fetch(&self, store: &Store, reference: &str) -> Result<Image> {
        let image = match store.image(reference) {
            Ok(img) => img,
            Err(stockade_image::Error::ImageNotFound { .. }) => {
                stockade_linux::ensure_image(reference, Some(store.root())).await?;
                store.image(reference).map_err(Error::from)?
            }
            Err(e) => return Err(e.into()),
        };
        let (s, img) = (store.clone(), image.clone());
        tokio::task::spawn_blocking(move || s.rootfs(&img))
            .await
            .map_err(|e| Error::Internal(format!("unpack task failed: {e}")))?
            .map_err(Error::from)?;
        Ok(image)
    }
}

/// Finds `name` in `dirs` under `root` (the host's `/`, or an image's rootfs), as a
/// file or a symlink (an image's `/usr/bin/python3 -> python3.11` resolves inside
/// the sandbox, not here). Parents resolve inside `root` as they would in the
/// sandbox: an image's `/usr -> /` never makes this look at the host's files.
pub(crate) fn find_in(root: &Path, dirs: &[&str], name: &str) -> Option<String> {
    use stockade_image::inroot::{Kind, kind};
    dirs.iter().find_map(|dir| {
        let inside = Path::new(dir).join(name);
        kind(root, inside.strip_prefix("/").ok()?)
            .ok()
            .filter(|k| matches!(k, Kind::File | Kind::Symlink))
            .map(|_| inside.display().to_string())
    })
}

/// The PATH directories of an image config's `Env` (default: the usual ones).
fn image_path_dirs(image: &Image) -> Vec<String> {
    image
        .run_config()
        .env
        .unwrap_or_default()
        .iter()
        .find_map(|e| e.strip_prefix("PATH=").map(str::to_string))
        .unwrap_or_else(|| stockade_spec::DEFAULT_PATH.to_string())
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(str::to_string)
        .collect()
}

/// The interpreter of `preset` in `image` (unpacked at `rootfs`), by its `PATH`.
fn interpreter_in_image(
    preset: &LanguagePreset,
    image: &Image,
    rootfs: &Path,
    reference: &str,
) -> Result<String> {
    let name = preset.interpreter[0];
    let dirs = image_path_dirs(image);
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    find_in(rootfs, &dirs, name).ok_or_else(|| Error::Unavailable {
        what: format!("the {} interpreter", preset.names[0]),
        reason: format!(
            "image {reference} has no {name} on its PATH ({})",
            dirs.join(":")
        ),
        fix: format!("use an image that has it, e.g. {}", preset.image),
    })
}

/// What runs the code: an interpreter of the preset, or TypeScript on Node.js.
enum Interp {
    /// The preset's interpreter at this path (in the sandbox's root).
    Preset(String),
    /// The host's Node.js (this path), stripping TypeScript's types.
    NodeStripTypes(String),
}

/// Node's flags that run TypeScript by stripping its types (22.6 and later).
const NODE_TS_FLAGS: &[&str] = &[
    "--experimental-strip-types",
    "--disable-warning=ExperimentalWarning",
];

/// Runs the TypeScript in `process.argv[1]` with Node: type stripping applies to files,
/// not to `--eval`, so the code is written to a file in the sandbox's /tmp first and
/// imported as an ES module (top-level await and `import` work, as with Deno).
const NODE_TS_BOOT: &str = "const fs=require('fs'),os=require('os'),path=require('path'),\
url=require('url');const d=fs.mkdtempSync(path.join(os.tmpdir(),'stockade-ts-'));\
const f=path.join(d,'main.mts');fs.writeFileSync(f,process.argv[1]);\
process.argv.splice(1,1,f);import(url.pathToFileURL(f).href).catch(e=>{console.error(e);\
process.exitCode=1});";

/// Picks the interpreter of `preset` for the native provider (see the module doc);
/// sets `spec.image` when the language's image is used.
async fn native_interpreter(
    preset: &LanguagePreset,
    spec: &mut SandboxSpec,
    store: &Store,
    fetch: &dyn ImageFetcher,
) -> Result<Interp> {
    if let Some(reference) = spec.image.clone() {
        let img = fetch.fetch(store, &reference).await?;
        let rootfs = store.rootfs(&img).map_err(Error::from)?;
        return interpreter_in_image(preset, &img, &rootfs, &reference).map(Interp::Preset);
    }
    let why = match host_runner(preset) {
        Ok(HostRunner::Preset(p)) => return Ok(Interp::Preset(p)),
        Ok(HostRunner::NodeStripTypes(node)) => return Ok(Interp::NodeStripTypes(node)),
        Err(why) => why,
    };
    let config =
        stockade_image::Config::load().map_err(|e| Error::InvalidRequest(e.to_string()))?;
    let reference = language_image(preset, &config);
    let img = fetch.fetch(store, &reference).await.map_err(|e| {
        // One fix: the host's interpreter works wherever the registry does not.
        let (detail, _) = e.split_fix();
        Error::Unavailable {
            what: format!("the {} interpreter", preset.names[0]),
            reason: format!("{why}, and its image {reference} is not available: {detail}"),
            fix: install_fix(preset),
        }
    })?;
    let rootfs = store.rootfs(&img).map_err(Error::from)?;
    let found = interpreter_in_image(preset, &img, &rootfs, &reference)?;
    spec.image = Some(reference);
    Ok(Interp::Preset(found))
}

/// The argv that runs TypeScript `source` with the host's Node (`node`), mounting a
/// code file at `/code/main.mts` in `spec`.
fn node_ts_argv(node: &str, source: Source<'_>, spec: &mut SandboxSpec) -> Result<Vec<String>> {
    let mut argv = vec![node.to_string()];
    argv.extend(NODE_TS_FLAGS.iter().map(ToString::to_string));
    match source {
        Source::Code(code) => {
            argv.extend(["-e".to_string(), NODE_TS_BOOT.to_string(), code.to_string()]);
        }
        Source::File(file) => {
            let host = code_file(file)?;
            let target = "/code/main.mts".to_string();
            spec.mounts.push(Mount {
                host,
                target: target.clone().into(),
                writable: false,
            });
            argv.push(target);
        }
    }
    Ok(argv)
}

/// A code file given by the caller: an existing regular file (a directory, device
/// or pipe is refused as the caller's mistake), by its canonical path.
fn code_file(file: &std::path::Path) -> Result<PathBuf> {
    let host = std::fs::canonicalize(file)
        .map_err(|e| Error::InvalidRequest(format!("code file {}: {e}", file.display())))?;
    let meta = std::fs::metadata(&host)
        .map_err(|e| Error::InvalidRequest(format!("code file {}: {e}", file.display())))?;
    if !meta.is_file() {
        return Err(Error::InvalidRequest(format!(
            "code file {} is not a regular file (a directory, device or pipe): give the \
             file of code to run",
            file.display()
        )));
    }
    Ok(host)
}

/// The argv that runs `source` of `preset` on the provider called `provider`, after
/// adjusting `spec` for it (the image the interpreter comes from; a read-only mount
/// of a code file at `/code/main.EXT`).
pub async fn prepare(
    provider: &str,
    preset: &LanguagePreset,
    source: Source<'_>,
    spec: &mut SandboxSpec,
    store: &Store,
    fetch: &dyn ImageFetcher,
) -> Result<Vec<String>> {
    if provider == "wasm" {
        // WASI runtimes carry their interpreter: the image names it.
        let image = stockade_wasm_host::image_for_language(preset.names[0]).ok_or_else(|| {
            Error::Unavailable {
                what: format!("{} on the wasm provider", preset.names[0]),
                reason: "no WASI runtime for this language is known".into(),
                fix: "use language python, or another provider".into(),
            }
        })?;
        spec.image.get_or_insert_with(|| image.to_string());
        let code = match source {
            Source::Code(c) => c.to_string(),
            Source::File(f) => std::fs::read_to_string(code_file(f)?)
                .map_err(|e| Error::InvalidRequest(format!("code file {}: {e}", f.display())))?,
        };
        return Ok(preset.code_argv(image, &code));
    }
    let interp = if provider == "native" {
        match native_interpreter(preset, spec, store, fetch).await? {
            Interp::Preset(p) => p,
            Interp::NodeStripTypes(node) => return node_ts_argv(&node, source, spec),
        }
    } else {
        // Other providers resolve the interpreter on their own PATH.
        spec.image.get_or_insert_with(|| preset.image.to_string());
        preset.interpreter[0].to_string()
    };
    match source {
        Source::Code(code) => Ok(preset.code_argv(&interp, code)),
        Source::File(file) => {
            let host = code_file(file)?;
            let target = format!("/code/main.{}", preset.extension);
            spec.mounts.push(Mount {
                host,
                target: target.clone().into(),
                writable: false,
            });
            Ok(preset.file_argv(&interp, &target))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typescript_on_node_strips_types_from_a_file_it_imports() {
        let mut spec = SandboxSpec::default();
        let argv = node_ts_argv(
            "/usr/bin/node",
            Source::Code("let x: number = 1"),
            &mut spec,
        )
        .unwrap();
        assert_eq!(
            argv[..4],
            [
                "/usr/bin/node",
                "--experimental-strip-types",
                "--disable-warning=ExperimentalWarning",
                "-e"
            ]
        );
        assert!(argv[4].contains("main.mts") && argv[4].contains("process.argv[1]"));
        assert_eq!(argv[5], "let x: number = 1");
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("prog.ts");
        std::fs::write(&f, "console.log(1)").unwrap();
        let argv = node_ts_argv("/usr/bin/node", Source::File(&f), &mut spec).unwrap();
        assert_eq!(argv.last().unwrap(), "/code/main.mts");
        assert_eq!(spec.mounts[0].target, Path::new("/code/main.mts"));
    }

    #[test]
    fn finds_files_and_symlinks_under_a_root() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("usr/bin")).unwrap();
        std::fs::write(d.path().join("usr/bin/python3.11"), "").unwrap();
        std::os::unix::fs::symlink("python3.11", d.path().join("usr/bin/python3")).unwrap();
        std::fs::create_dir_all(d.path().join("usr/bin/ruby")).unwrap();
        assert_eq!(
            find_in(d.path(), &["/bin", "/usr/bin"], "python3").as_deref(),
            Some("/usr/bin/python3")
        );
        // A directory is not an interpreter.
        assert_eq!(find_in(d.path(), &["/usr/bin"], "ruby"), None);
        assert_eq!(find_in(d.path(), &["/usr/bin"], "lua"), None);
    }

    #[test]
    fn an_image_symlink_to_the_host_root_is_not_followed_on_the_host() {
        // The host has /bin/sh; an image whose /opt is `/` does not.
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/", d.path().join("opt")).unwrap();
        std::os::unix::fs::symlink("../../../..", d.path().join("up")).unwrap();
        assert!(Path::new("/bin/sh").exists());
        assert_eq!(find_in(d.path(), &["/opt/bin", "/up/bin"], "sh"), None);
    }
}
