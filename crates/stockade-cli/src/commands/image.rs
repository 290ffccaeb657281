//! `stockade image pull|import|ls|inspect|rm|prune`: the local OCI image store
//! (`$STOCKADE_HOME/images`) that `--image` runs from.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Subcommand;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use stockade::{Error, Result};
use stockade_image::{Auth, Config, Digest, Image, PullOptions, PullProgress, Store};

use super::Ctx;

#[derive(Subcommand, Debug)]
pub enum ImageCmd {
    /// Pull an image from a registry (plain HTTP only for 127.0.0.1/localhost and
    /// --insecure-registry hosts).
    Pull {
        /// The image, e.g. python:3.12-slim or 127.0.0.1:5000/team/app@sha256:...
        reference: String,
        /// A registry (HOST[:PORT]) that may be reached over plain HTTP (repeatable).
        #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
        insecure: Vec<String>,
        /// User name for basic auth; the password is read from
        /// STOCKADE_REGISTRY_PASSWORD (never from the command line).
        #[arg(long)]
        username: Option<String>,
    },
    /// Import a `docker save` archive or an OCI image layout (directory or tar).
    Import {
        /// The archive (`docker save` output or a tar of an OCI layout, plain or
        /// gzip-compressed) or the OCI layout directory.
        path: PathBuf,
        /// A name for the imported image, e.g. `myapp:1` (the archive must hold one
        /// image). Without it the image keeps the names the archive gives it, and is
        /// listed by its digest when it has none.
        #[arg(long)]
        tag: Option<String>,
    },
    /// List the images in the store (those without a name as `<none>`, by digest).
    Ls,
    /// Show an image's manifest digest, config and layers.
    Inspect {
        /// A name, a digest (`sha256:...`) or a unique digest prefix.
        reference: String,
    },
    /// Remove images (references; blobs and unpacked trees no image needs go too).
    Rm {
        /// Names, digests or unique digest prefixes; a digest removes every name of
        /// its image.
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Remove everything no reference needs.
    Prune,
}

/// Pull options from the environment (`STOCKADE_REGISTRY_*`) and the config file.
pub fn pull_options() -> Result<PullOptions> {
    let config = Config::load().map_err(|e| Error::InvalidRequest(e.to_string()))?;
    Ok(PullOptions::from_env(&config))
}

/// Pulls `reference` into `store` with progress on stderr: bars on a terminal, one
/// line per blob otherwise, nothing with `--json`.
pub async fn pull_with_progress(
    ctx: &Ctx,
    store: &Store,
    reference: &str,
    opts: &PullOptions,
) -> Result<Digest> {
    let bars = MultiProgress::with_draw_target(if ctx.json {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let lines = !ctx.json && !std::io::stderr().is_terminal();
    let total = bars.add(ProgressBar::new(0));
    total.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    total.set_message(format!("pulling {reference}"));
    if lines {
        eprintln!("pulling {reference}");
    }
    let blob_style =
        ProgressStyle::with_template("  {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes}")
            .expect("template")
            .progress_chars("=> ");
    let mut current: Option<(Digest, ProgressBar)> = None;
    let mut base = 0u64;
    let mut progress = |p: PullProgress| match p {
        PullProgress::Resolved {
            missing_bytes,
            total_bytes,
            ..
        } => {
            total.set_length(missing_bytes);
            if lines {
                eprintln!("  {} to fetch of {}", mib(missing_bytes), mib(total_bytes));
            }
        }
        PullProgress::Bytes { blob, done, size } => {
            if current.as_ref().is_none_or(|(d, _)| *d != blob) {
                let bar = bars.add(ProgressBar::new(size));
                bar.set_style(blob_style.clone());
                bar.set_message(short(&blob));
                current = Some((blob.clone(), bar));
            }
            if let Some((_, bar)) = &current {
                bar.set_position(done);
            }
            total.set_position(base + done);
            if done == size {
                base += size;
                if let Some((_, bar)) = current.take() {
                    bar.finish_and_clear();
                }
                if lines {
                    eprintln!("  fetched {} ({})", short(&blob), mib(size));
                }
            }
        }
    };
    let digest = stockade_image::pull(store, reference, opts, &mut progress).await;
    total.finish_and_clear();
    let digest = digest.map_err(Error::from)?;
    if !ctx.json {
        eprintln!("pulled {reference} ({})", short(&digest));
    }
    Ok(digest)
}

/// Makes sure `reference` is in `store` and unpacked, pulling it on first use and
/// showing progress; returns the image.
pub async fn ensure_local(ctx: &Ctx, store: &Store, reference: &str) -> Result<Image> {
    let image = match store.image(reference) {
        Ok(img) => img,
        Err(stockade_image::Error::ImageNotFound { .. }) => {
            pull_with_progress(ctx, store, reference, &pull_options()?).await?;
            store.image(reference).map_err(Error::from)?
        }
        Err(e) => return Err(e.into()),
    };
    if !store
        .root()
        .join("rootfs")
        .join(image.digest.hex())
        .is_dir()
    {
        let spinner = if ctx.json {
            ProgressBar::hidden()
        } else {
            ProgressBar::new_spinner()
        };
        spinner.set_message(format!("unpacking {reference}"));
        spinner.enable_steady_tick(std::time::Duration::from_millis(100));
        let (s, img) = (store.clone(), image.clone());
        let started = std::time::Instant::now();
        let built = tokio::task::spawn_blocking(move || s.rootfs(&img))
            .await
            .map_err(|e| Error::Internal(format!("unpack task failed: {e}")))?;
        spinner.finish_and_clear();
        built.map_err(Error::from)?;
        if !ctx.json {
            eprintln!(
                "unpacked {reference} ({} in {:.1} s)",
                mib(image.size()),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(image)
}

/// `sha256:0123456789ab`.
fn short(d: &Digest) -> String {
    let s = d.to_string();
    s.chars().take(19).collect()
}

/// `--home`, else `$STOCKADE_HOME`, else /var/lib/stockade (root) or the XDG data dir.
pub fn store(ctx: &Ctx) -> Result<Store> {
    let home = ctx
        .home
        .clone()
        .unwrap_or_else(stockade_image::stockade_home);
    Store::open(home.join("images")).map_err(Error::from)
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
}

pub async fn run(ctx: &Ctx, cmd: ImageCmd) -> Result<i32> {
    let store = store(ctx)?;
    match cmd {
        ImageCmd::Pull {
            reference,
            insecure,
            username,
        } => {
            let mut opts = pull_options()?;
            opts.insecure_registries.extend(insecure);
            if let Some(username) = username {
                opts.auth = Auth::Basic {
                    username,
                    password: std::env::var("STOCKADE_REGISTRY_PASSWORD").unwrap_or_default(),
                };
            }
            let digest = pull_with_progress(ctx, &store, &reference, &opts).await?;
            if ctx.json {
                println!(
                    "{}",
                    json!({"reference": reference, "digest": digest.to_string()})
                );
            } else {
                println!("{reference} {digest}");
            }
        }
        ImageCmd::Import { path, tag } => {
            let images =
                stockade_image::import(&store, &path, tag.as_deref()).map_err(Error::from)?;
            if ctx.json {
                let imported: Vec<_> = images
                    .iter()
                    .map(|i| json!({"digest": i.digest.to_string(), "references": i.references}))
                    .collect();
                println!("{}", json!({ "imported": imported }));
            }
            for i in images.iter().filter(|_| !ctx.json) {
                println!("{} {}", i.digest, i.references.join(" "));
            }
        }
        ImageCmd::Ls => {
            // Images without a name are listed by digest, as `<none>` (as docker does).
            let mut list = Vec::new();
            for listed in store.images().map_err(Error::from)? {
                let (reference, digest) = (listed.reference, listed.digest);
                let size = store
                    .image_by_digest(&digest)
                    .map(|i| i.size())
                    .unwrap_or(0);
                if ctx.json {
                    list.push(
                        json!({"reference": reference, "digest": digest.to_string(), "size": size}),
                    );
                } else {
                    let name = reference.as_deref().unwrap_or("<none>");
                    println!("{name}\t{digest}\t{}", mib(size));
                }
            }
            if ctx.json {
                println!("{}", json!(list));
            }
        }
        ImageCmd::Inspect { reference } => {
            let img = store.image(&reference).map_err(Error::from)?;
            let references: Vec<String> = store
                .list()
                .map_err(Error::from)?
                .into_iter()
                .filter(|(_, d)| *d == img.digest)
                .map(|(r, _)| r)
                .collect();
            let out = json!({
                "digest": img.digest.to_string(),
                "references": references,
                "config_digest": img.config_digest.to_string(),
                "os": img.config.os,
                "architecture": img.config.architecture,
                "config": img.run_config(),
                "layers": img.manifest.layers,
                "size": img.size(),
            });
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        ImageCmd::Rm { references } => {
            let mut removed = Vec::new();
            for r in references {
                let d = store.remove(&r).map_err(Error::from)?;
                if !ctx.json {
                    println!("removed {r} ({d})");
                }
                removed.push(json!({"reference": r, "digest": d.to_string()}));
            }
            if ctx.json {
                println!("{}", json!({ "removed": removed }));
            }
        }
        ImageCmd::Prune => {
            let report = store.gc().map_err(Error::from)?;
            if ctx.json {
                println!("{}", json!({"blobs": report.blobs, "trees": report.trees}));
            } else {
                println!(
                    "removed {} blobs and {} unpacked trees",
                    report.blobs, report.trees
                );
            }
        }
    }
    Ok(0)
}

/// Gets `reference` ready for `provider` before the sandbox is created, with progress
/// on stderr: pulled into this host's store when the provider runs images from it,
/// else whatever the provider does to fetch it (dockerd's image, loaded or pulled).
pub async fn prepare(ctx: &Ctx, provider: &dyn stockade::Provider, reference: &str) -> Result<()> {
    if provider.capabilities().local_images {
        return ensure_local(ctx, &store(ctx)?, reference).await.map(drop);
    }
    let quiet = ctx.json;
    let mut last = String::new();
    provider
        .prepare_image(reference, &mut |line: &str| {
            if !quiet && line != last {
                eprintln!("stockade: {line}");
                last = line.to_string();
            }
        })
        .await
}
