//! The image of a sandbox, as dockerd needs it: dockerd's own copy when it has one;
//! else loaded from Stockade's image store (as a `docker save` archive); else pulled
//! through dockerd.

use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::{CreateImageOptionsBuilder, ImportImageOptionsBuilder};
use futures_util::StreamExt;
use stockade_core::Error;
use stockade_image::Store;

use crate::engine::{docker_error, status};
use crate::plan::ImageFacts;

/// Where an image came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// dockerd had it.
    Docker,
    /// Loaded from Stockade's image store.
    Store,
    /// Pulled by dockerd from its registry.
    Pulled,
}

/// Makes sure dockerd has `reference` and says how to run it. `progress` gets one
/// line per step (and per pull status from dockerd).
pub async fn ensure(
    docker: &Docker,
    reference: &str,
    store: Option<&Path>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(ImageFacts, Source), Error> {
    if let Some(facts) = facts(docker, reference).await? {
        return Ok((facts, Source::Docker));
    }
    let opened = match store {
        Some(root) => Store::open(root),
        None => Store::open_default(),
    };
    if let Ok(store) = opened
        && let Ok(image) = store.image(reference)
    {
        progress(&format!(
            "loading {reference} from the stockade image store into dockerd"
        ));
        load_from_store(docker, &store, &image, reference).await?;
        if let Some(f) = facts(docker, reference).await? {
            return Ok((f, Source::Store));
        }
        return Err(Error::Internal(format!(
            "dockerd loaded {reference} from the image store but does not list it"
        )));
    }
    progress(&format!("pulling {reference} through dockerd"));
    let (name, tag) = split_tag(reference);
    let mut options = CreateImageOptionsBuilder::default().from_image(name);
    if let Some(tag) = tag {
        options = options.tag(tag);
    }
    let mut pull = docker.create_image(Some(options.build()), None, None);
    while let Some(item) = pull.next().await {
        match item {
            Ok(info) => {
                if let Some(s) = info.status {
                    let line = match info.progress_detail.as_ref().zip(info.id.as_ref()) {
                        Some((_, id)) => format!("{id}: {s}"),
                        None => s,
                    };
                    progress(&line);
                }
            }
            Err(e) => {
                return Err(Error::Unavailable {
                    what: format!("image {reference}"),
                    reason: format!(
                        "dockerd does not have it, the stockade image store does not have it, and dockerd cannot pull it: {e}"
                    ),
                    fix: format!(
                        "docker load/import it, or `stockade image import` / `stockade image pull {reference}`"
                    ),
                });
            }
        }
    }
    match facts(docker, reference).await? {
        Some(f) => Ok((f, Source::Pulled)),
        None => Err(Error::Internal(format!(
            "dockerd pulled {reference} but does not list it"
        ))),
    }
}

/// `name[:tag]` of a reference (a digest stays in the name).
fn split_tag(reference: &str) -> (&str, Option<&str>) {
    if reference.contains('@') {
        return (reference, None);
    }
    let slash = reference.rfind('/').map(|i| i + 1).unwrap_or(0);
    match reference[slash..].rfind(':') {
        Some(i) => (&reference[..slash + i], Some(&reference[slash + i + 1..])),
        None => (reference, Some("latest")),
    }
}

/// How dockerd's copy of `reference` says it runs; `None` when dockerd lacks it.
pub async fn facts(docker: &Docker, reference: &str) -> Result<Option<ImageFacts>, Error> {
    match docker.inspect_image(reference).await {
        Ok(img) => {
            let c = img.config.unwrap_or_default();
            Ok(Some(ImageFacts {
                env: c.env.unwrap_or_default(),
                workdir: c.working_dir.filter(|w| !w.is_empty()),
                user: c.user.as_deref().and_then(ImageFacts::parse_user),
            }))
        }
        Err(e) if status(&e) == Some(404) => Ok(None),
        Err(e) => Err(docker_error(&format!("inspect image {reference}"), e)),
    }
}

/// Builds a `docker save` archive (manifest.json, the config, the layer blobs as they
/// are stored) and loads it. dockerd 20.10 reads plain and gzip layers, not zstd.
async fn load_from_store(
    docker: &Docker,
    store: &Store,
    image: &stockade_image::Image,
    reference: &str,
) -> Result<(), Error> {
    let (_, tag) = split_tag(reference);
    let repo_tag = match tag {
        Some(_) => reference.to_string(),
        None => format!("{reference}:latest"),
    };
    let store = store.clone();
    let image = image.clone();
    let archive = tokio::task::spawn_blocking(move || save_archive(&store, &image, &repo_tag))
        .await
        .map_err(|e| Error::Internal(format!("image archive task failed: {e}")))??;
    let mut load = docker.import_image(
        ImportImageOptionsBuilder::default().quiet(true).build(),
        bollard::body_full(archive.into()),
        None,
    );
    while let Some(item) = load.next().await {
        item.map_err(|e| docker_error(&format!("load image {reference}"), e))?;
    }
    Ok(())
}

fn save_archive(
    store: &Store,
    image: &stockade_image::Image,
    repo_tag: &str,
) -> Result<Vec<u8>, Error> {
    let internal = |e: &dyn std::fmt::Display| {
        Error::Internal(format!("cannot build a docker archive of {repo_tag}: {e}"))
    };
    if let Some(l) = image
        .manifest
        .layers
        .iter()
        .find(|l| l.media_type.contains("zstd"))
    {
        return Err(Error::Unavailable {
            what: format!("image {repo_tag} on the docker provider"),
            reason: format!(
                "its layer {} is zstd-compressed, which dockerd 20.10 cannot load",
                l.digest
            ),
            fix: "use an image with gzip layers, or the native provider".into(),
        });
    }
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| -> Result<(), Error> {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, data)
            .map_err(|e| internal(&e))
    };
    let config = store
        .read_document(&image.config_digest)
        .map_err(|e| internal(&e))?;
    let config_name = format!("{}.json", image.config_digest.hex());
    add(&config_name, &config)?;
    let mut layers = Vec::new();
    for l in &image.manifest.layers {
        let mut data = Vec::new();
        std::io::Read::read_to_end(
            &mut store.open_blob(&l.digest).map_err(|e| internal(&e))?,
            &mut data,
        )
        .map_err(|e| internal(&e))?;
        let name = format!("{}/layer.tar", l.digest.hex());
        add(&name, &data)?;
        layers.push(name);
    }
    let manifest = serde_json::json!([{
        "Config": config_name, "RepoTags": [repo_tag], "Layers": layers,
    }]);
    add("manifest.json", manifest.to_string().as_bytes())?;
    tar.into_inner().map_err(|e| internal(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_tags() {
        assert_eq!(split_tag("debian"), ("debian", Some("latest")));
        assert_eq!(split_tag("debian:12"), ("debian", Some("12")));
        assert_eq!(
            split_tag("127.0.0.1:5000/a/b:1"),
            ("127.0.0.1:5000/a/b", Some("1"))
        );
        assert_eq!(
            split_tag("127.0.0.1:5000/a/b"),
            ("127.0.0.1:5000/a/b", Some("latest"))
        );
        assert_eq!(split_tag("a@sha256:00"), ("a@sha256:00", None));
    }
}
