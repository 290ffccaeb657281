//! `stockade image pull|import|ls|inspect|rm|prune`: the local OCI image store
//! (`$STOCKADE_HOME/images`) that `--image` runs from.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;
use stockade::{Error, Result};
use stockade_image::{Auth, PullOptions, PullProgress, Store};

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
        path: PathBuf,
        /// Also name the imported image so.
        #[arg(long)]
        tag: Option<String>,
    },
    /// List the images in the store.
    Ls,
    /// Show an image's manifest digest, config and layers.
    Inspect { reference: String },
    /// Remove images (references; blobs and unpacked trees no image needs go too).
    Rm {
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Remove everything no reference needs.
    Prune,
}

/// `--home`, else `$STOCKADE_HOME`, else /var/lib/stockade (root) or the XDG data dir.
fn store(ctx: &Ctx) -> Result<Store> {
    let home = ctx
        .home
        .clone()
        .unwrap_or_else(stockade_image::stockade_home);
    Store::open(home.join("images")).map_err(to_error)
}

/// Image errors as the CLI's error codes.
fn to_error(e: stockade_image::Error) -> Error {
    use stockade_image::Error as E;
    match e {
        E::ImageNotFound { reference } => Error::NotFound {
            kind: "image",
            id: reference,
        },
        E::InvalidReference { .. } | E::InvalidDigest { .. } => {
            Error::InvalidRequest(e.to_string())
        }
        E::LimitExceeded { .. } => Error::LimitExceeded {
            what: e.to_string(),
            limit: "the unpacking limits".into(),
        },
        E::UnsafeEntry { .. } => Error::PolicyDenied(e.to_string()),
        E::Registry { .. } => Error::Unavailable {
            what: "the registry".into(),
            reason: e.to_string(),
            fix: "check the reference, the network and credentials; plain-HTTP registries need --insecure-registry".into(),
        },
        e => Error::Internal(e.to_string()),
    }
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
            let auth = match username {
                Some(username) => Auth::Basic {
                    username,
                    password: std::env::var("STOCKADE_REGISTRY_PASSWORD").unwrap_or_default(),
                },
                None => Auth::Anonymous,
            };
            let opts = PullOptions {
                auth,
                insecure_registries: insecure,
                ..Default::default()
            };
            let (mut total, mut base, mut done_in_blob) = (0u64, 0u64, 0u64);
            let quiet = ctx.json;
            let mut progress = |p: PullProgress| {
                match p {
                    PullProgress::Resolved { missing_bytes, .. } => total = missing_bytes,
                    PullProgress::Bytes { done, size, .. } => {
                        done_in_blob = done;
                        if done == size {
                            base += size;
                            done_in_blob = 0;
                        }
                    }
                }
                if !quiet {
                    let mut err = std::io::stderr();
                    let _ = write!(
                        err,
                        "\rpulling {reference}: {} / {}   ",
                        mib(base + done_in_blob),
                        mib(total)
                    );
                    let _ = err.flush();
                }
            };
            let digest = stockade_image::pull(&store, &reference, &opts, &mut progress)
                .await
                .map_err(to_error);
            if !quiet {
                eprintln!();
            }
            let digest = digest?;
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
            let images = stockade_image::import(&store, &path, tag.as_deref()).map_err(to_error)?;
            for i in &images {
                if ctx.json {
                    println!(
                        "{}",
                        json!({"digest": i.digest.to_string(), "references": i.references})
                    );
                } else {
                    println!("{} {}", i.digest, i.references.join(" "));
                }
            }
        }
        ImageCmd::Ls => {
            let list = store.list().map_err(to_error)?;
            for (reference, digest) in &list {
                let size = store.image_by_digest(digest).map(|i| i.size()).unwrap_or(0);
                if ctx.json {
                    println!(
                        "{}",
                        json!({"reference": reference, "digest": digest.to_string(), "size": size})
                    );
                } else {
                    println!("{reference}\t{digest}\t{}", mib(size));
                }
            }
        }
        ImageCmd::Inspect { reference } => {
            let img = store.image(&reference).map_err(to_error)?;
            let references: Vec<String> = store
                .list()
                .map_err(to_error)?
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
            for r in references {
                let d = store.remove(&r).map_err(to_error)?;
                if !ctx.json {
                    println!("removed {r} ({d})");
                }
            }
        }
        ImageCmd::Prune => {
            let report = store.gc().map_err(to_error)?;
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
