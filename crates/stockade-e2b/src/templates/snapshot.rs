//! Snapshots of an E2B sandbox's files: `POST /sandboxes/ID/snapshots` (E2B's
//! `create_snapshot(mode="filesystem")`, and what the API does when no mode is
//! asked), `GET /snapshots`, `DELETE /templates/ID`; `Sandbox.create(ID)` starts from
//! one. A snapshot is a template of the tenant's: its home (a copy of the sandbox's
//! `/home/user`, taken while the sandbox is frozen), its image (when the root is
//! writable, the sandbox's image and one more layer, the agent's
//! [`FileOp::Changes`] of the root against a read-only view of that image), and the
//! template's limits, environment, allowlist, working directory and user. A sandbox
//! made from it starts fresh from those files: no process, memory or connection of
//! the source is carried (what a copy of memory would need, refused by name), and
//! neither is `/tmp`, a tmpfs of each sandbox's own.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use stockade::{FileOp, FileResult};

use super::{BASE_AT, Built, DEFAULT_TAG, lock, split_tag, tenant_dir};
use crate::api::error;
use crate::state::{E2b, Sbx};

/// Most snapshots a tenant keeps.
pub const MAX_SNAPSHOTS: usize = 64;
/// Most bytes of snapshot homes a tenant keeps on this host.
pub const MAX_HOMES_BYTES: u64 = 4 << 30;
/// What one read of a snapshot's layer brings from the sandbox.
const READ_CHUNK: u64 = 4 << 20;

/// The body of `POST /sandboxes/ID/snapshots`.
#[derive(Debug, Default, Deserialize)]
pub struct Body {
    #[serde(default)]
    pub name: Option<String>,
    /// `true`: memory too (refused here); `false`: the files; absent: the files.
    #[serde(default)]
    pub memory: Option<bool>,
}

type Refused = (u16, String);

/// Takes a snapshot of `s`'s files as a template of its tenant: 201
/// `{"snapshotID", "names"}`. A name already a template of the tenant's is taken
/// again under the same id (what it named before goes).
pub async fn take(e2b: &Arc<E2b>, s: &Arc<Sbx>, name: Option<&str>) -> Result<Response, Refused> {
    let tenant = s.tenant.as_str();
    let (name, tags) = match name {
        Some(n) => named(n)?,
        None => (None, vec![DEFAULT_TAG.to_string()]),
    };
    let templates = &e2b.templates;
    let (template_id, kept, homes) = {
        let built = lock(&templates.built);
        let same = name
            .as_ref()
            .and_then(|n| built.iter().find(|b| b.tenant == tenant && &b.name == n));
        let kept: Vec<&Built> = built
            .iter()
            .filter(|b| b.tenant == tenant && b.snapshot_of.is_some())
            .collect();
        let homes: Vec<PathBuf> = kept.iter().filter_map(|b| b.home.clone()).collect();
        (
            same.map_or_else(
                || format!("t{}", stockade::host::random_hex(10)),
                |b| b.template_id.clone(),
            ),
            kept.len() - usize::from(same.is_some_and(|b| b.snapshot_of.is_some())),
            homes,
        )
    };
    if kept >= MAX_SNAPSHOTS {
        return Err((
            429,
            format!(
                "you keep {kept} snapshots, the most this server keeps per API key: delete \
                 some (Sandbox.delete_snapshot(id)) first"
            ),
        ));
    }
    let homes_bytes = tokio::task::spawn_blocking(move || homes.iter().map(|h| du(h)).sum())
        .await
        .unwrap_or(0);
    let build_id = stockade::host::random_hex(16);
    let dir = templates
        .dir
        .join("snapshots")
        .join(tenant_dir(tenant))
        .join(format!("{template_id}-{build_id}"));
    let made = snapshot_into(e2b, s, &dir, &build_id, homes_bytes).await;
    let (image, owns_image) = match made {
        Ok(x) => x,
        Err(r) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(r);
        }
    };
    let config = s.source.config.clone().unwrap_or_default();
    let b = Built {
        tenant: tenant.into(),
        template_id: template_id.clone(),
        name: name.unwrap_or_else(|| template_id.clone()),
        tags,
        build_id,
        image,
        env: config.env.clone(),
        workdir: s.source.workdir.clone(),
        user: if s.default_uid == Some(0) {
            "root"
        } else {
            "user"
        }
        .into(),
        // It starts from its files: the source's processes are not carried.
        start_cmd: None,
        ready_cmd: None,
        cpus: config.cpus,
        memory_mb: config.memory.map(|m| m >> 20),
        created_ms: stockade::now_ms(),
        snapshot_of: Some(s.id.clone()),
        home: Some(dir.join("home")),
        owns_image,
        allow: config.allow.clone(),
        pids: config.pids,
    };
    let names = json!([b.name]);
    let replaced = match templates.replace(b) {
        Ok(r) => r,
        Err(failed) => {
            let (b, e) = *failed;
            super::forget(e2b, vec![b]);
            return Err((500, format!("cannot save the template list: {e}")));
        }
    };
    super::forget(e2b, replaced);
    tracing::info!(sandbox = %s.id, snapshot = %template_id, tenant, "snapshot taken");
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"snapshotID": template_id, "names": names})),
    )
        .into_response())
}

/// A snapshot's `name[:tag]`, checked as a template's.
fn named(full: &str) -> Result<(Option<String>, Vec<String>), Refused> {
    let (n, tag) = split_tag(full);
    if n.contains('/') {
        return Err((
            400,
            format!(
                "snapshot name {full:?} has a namespace: this server keeps each tenant's \
                 snapshots apart by its API key; name it NAME or NAME:TAG"
            ),
        ));
    }
    stockade_image::check_template_name(n).map_err(|e| (400, e))?;
    let tag = tag.unwrap_or(DEFAULT_TAG);
    if stockade_image::check_template_name(tag).is_err() {
        return Err((
            400,
            format!("tag {tag:?} is not 1 to 64 lowercase letters, digits, '.', '_' or '-'"),
        ));
    }
    Ok((Some(n.to_string()), vec![tag.to_string()]))
}

/// Makes the snapshot's files under `dir`: its home at `dir/home`; its image, the
/// source's or (a writable root) one committed on it: (digest, whether it is the
/// snapshot's own). `""`: the host's root.
async fn snapshot_into(
    e2b: &Arc<E2b>,
    s: &Arc<Sbx>,
    dir: &Path,
    build_id: &str,
    homes_bytes: u64,
) -> Result<(String, bool), Refused> {
    let internal = |m: String| (500, m);
    let tenant = s.tenant.as_str();
    let home = e2b
        .daemon
        .made_mounts(tenant, &s.daemon_id)
        .map_err(|e| (404, e.to_string()))?
        .into_iter()
        .find(|m| m.target == Path::new("/home/user"))
        .map(|m| m.host)
        .ok_or_else(|| internal(format!("sandbox {} has no home of the server's", s.id)))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| internal(format!("cannot make {}: {e}", dir.display())))?;
    let _one = s.freezing.lock().await;
    let was_paused = s.paused_at().is_some();
    let image = s.source.config.as_ref().and_then(|c| c.image.clone());
    let (digest, owned) = match image {
        None => (String::new(), false),
        Some(r) if !s.source.writable => {
            let store = e2b
                .daemon
                .image_store()
                .map_err(|e| internal(e.to_string()))?;
            let d = tokio::task::spawn_blocking(move || store.image(&r).map(|i| i.digest))
                .await
                .map_err(|e| internal(e.to_string()))?
                .map_err(|e| internal(format!("the sandbox's image: {e}")))?;
            (d.to_string(), false)
        }
        Some(r) => {
            // The agent takes the layer: a frozen sandbox is thawed for it.
            if was_paused {
                e2b.daemon
                    .resume(tenant, &s.daemon_id)
                    .await
                    .map_err(|e| internal(e.to_string()))?;
            }
            let layer = take_layer(e2b, s, dir).await;
            if was_paused {
                let _ = e2b.daemon.pause(tenant, &s.daemon_id).await;
            }
            (commit(e2b, s, &r, &layer?, build_id).await?, true)
        }
    };
    let undo = |e2b: &Arc<E2b>| {
        if owned {
            super::release(e2b, vec![digest.clone()]);
        }
    };
    // The home is copied while nothing in the sandbox runs.
    if !was_paused && let Err(e) = e2b.daemon.pause(tenant, &s.daemon_id).await {
        undo(e2b);
        return Err((
            409,
            format!("cannot freeze sandbox {} for its snapshot: {e}", s.id),
        ));
    }
    let used = {
        let home = home.clone();
        tokio::task::spawn_blocking(move || du(&home))
            .await
            .unwrap_or(0)
    };
    let copied = if homes_bytes + used > MAX_HOMES_BYTES {
        Err((
            507,
            format!(
                "the snapshot's home of {} MiB would take your snapshots' homes past the \
                 {} MiB this server keeps per API key: delete some \
                 (Sandbox.delete_snapshot(id)) first",
                used >> 20,
                MAX_HOMES_BYTES >> 20
            ),
        ))
    } else {
        let to = dir.join("home");
        tokio::task::spawn_blocking(move || {
            std::fs::DirBuilder::new().mode(0o700).create(&to)?;
            crate::home::seed_home(&home, &to, None)
        })
        .await
        .map_err(|e| internal(e.to_string()))
        .and_then(|r| r.map_err(|e| internal(format!("cannot copy the sandbox's home: {e}"))))
    };
    if !was_paused && let Err(e) = e2b.daemon.resume(tenant, &s.daemon_id).await {
        tracing::warn!(sandbox = %s.id, "cannot thaw it after its snapshot: {e}");
    }
    if let Err(r) = copied {
        undo(e2b);
        return Err(r);
    }
    Ok((digest, owned))
}

/// The agent's layer of what differs in the sandbox's root from its image, read
/// into `dir/layer.tar` (a file of the server's: the sandbox's own file is read
/// through the agent, never opened on the host).
async fn take_layer(e2b: &Arc<E2b>, s: &Sbx, dir: &Path) -> Result<PathBuf, Refused> {
    let internal = |m: String| (500, m);
    let store = e2b
        .daemon
        .image_store()
        .map_err(|e| internal(e.to_string()))?;
    let max_bytes = store.limits().max_bytes;
    let at = format!("/tmp/.e2b-snapshot-{}.tar", stockade::host::random_hex(8));
    let exclude = [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/home/user",
        "/.e2b-build",
        "/.stockade",
    ]
    .map(String::from)
    .to_vec();
    let file = |op| e2b.daemon.file_as(&s.tenant, &s.daemon_id, 0, op);
    file(FileOp::Changes {
        base: BASE_AT.into(),
        out: at.clone(),
        exclude,
        max_bytes,
    })
    .await
    .map_err(|e| {
        (
            409,
            format!("cannot take the changes of sandbox {}'s root: {e}", s.id),
        )
    })?;
    let layer = dir.join("layer.tar");
    let read = async {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&layer)
            .map_err(|e| internal(format!("cannot make {}: {e}", layer.display())))?;
        let mut offset = 0;
        loop {
            let r = file(FileOp::Read {
                path: at.clone(),
                offset,
                limit: READ_CHUNK,
            })
            .await
            .map_err(|e| internal(format!("cannot read the layer {at} in the sandbox: {e}")))?;
            let FileResult::Data { data, eof, .. } = r else {
                return Err(internal(format!("reading {at} answered {r:?}")));
            };
            offset += data.len() as u64;
            if offset > max_bytes {
                return Err((
                    413,
                    format!(
                        "the sandbox's changes are over the {max_bytes} bytes an image layer may be"
                    ),
                ));
            }
            out.write_all(&data)
                .map_err(|e| internal(format!("cannot write {}: {e}", layer.display())))?;
            if eof || data.is_empty() {
                break;
            }
        }
        Ok(())
    }
    .await;
    let _ = file(FileOp::Rm {
        path: at.clone(),
        recursive: false,
    })
    .await;
    read.map(|()| layer)
}

/// Commits `layer` on the sandbox's image `base` (a reference) as an image of the
/// tenant's own (charged to its image budget): its digest.
async fn commit(
    e2b: &Arc<E2b>,
    s: &Sbx,
    base: &str,
    layer: &Path,
    build_id: &str,
) -> Result<String, Refused> {
    let internal = |m: String| (500, m);
    let store = e2b
        .daemon
        .image_store()
        .map_err(|e| internal(e.to_string()))?;
    let size = std::fs::metadata(layer).map_or(0, |m| m.len());
    let env = s
        .source
        .config
        .as_ref()
        .map(|c| c.env.clone())
        .unwrap_or_default();
    let commit = stockade_image::Commit {
        env: env.into_iter().collect(),
        workdir: Some(s.source.workdir.clone()),
        user: None,
        cmd: None,
        created_by: format!("E2B snapshot {build_id} of sandbox {}", s.id),
    };
    let (base, layer) = (base.to_string(), layer.to_path_buf());
    let made = tokio::task::spawn_blocking(move || {
        let image = store.image(&base)?;
        let made = store.commit(&image, &layer, &commit, None)?;
        let _ = std::fs::remove_file(&layer);
        Ok::<_, stockade_image::Error>(made)
    })
    .await
    .map_err(|e| internal(e.to_string()))?
    .map_err(|e| {
        (
            422,
            format!("cannot commit the sandbox's changes as an image: {e}"),
        )
    })?;
    // Flattened now, not waited for: the first create from it finds it made (or
    // waits for it).
    if let Ok(store) = e2b.daemon.image_store() {
        let made = made.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.rootfs(&made) {
                tracing::warn!(image = %made.digest, "a snapshot's image did not flatten: {e}");
            }
        });
    }
    let digest = made.digest.to_string();
    if let Err(e) = e2b.daemon.own_image(&s.tenant, &digest, size) {
        if let Ok(store) = e2b.daemon.image_store() {
            let _ = store.remove(&digest);
        }
        return Err((507, e.to_string()));
    }
    Ok(digest)
}

/// Bytes a tree holds (its files' sizes; links not followed).
fn du(p: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p).map_or(0, |rd| rd.flatten().map(|e| du(&e.path())).sum())
}

/// `GET /snapshots?sandboxID=&name=&limit=&nextToken=`: the tenant's snapshots,
/// newest first, in pages (the next one's token, an offset, in `x-next-token`).
pub fn list(e2b: &E2b, tenant: &str, query: &str) -> Response {
    let param = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let number = |name: &str, default: usize| match param(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("{name} {v:?} is not a whole number of 0 or more")),
    };
    let (limit, from) = match (number("limit", 100), number("nextToken", 0)) {
        (Ok(l), Ok(f)) => (if l == 0 { 100 } else { l.min(1000) }, f),
        (Err(m), _) | (_, Err(m)) => return error(400, &m),
    };
    let of = param("sandboxID");
    let name = param("name");
    let mut all: Vec<Built> = lock(&e2b.templates.built)
        .iter()
        .filter(|b| b.tenant == tenant && b.snapshot_of.is_some())
        .filter(|b| of.is_none() || b.snapshot_of == of)
        .filter(|b| {
            name.as_deref().is_none_or(|n| {
                let (n, tag) = split_tag(n);
                (b.template_id == n || b.name == n)
                    && tag.is_none_or(|t| b.tags.iter().any(|x| x == t))
            })
        })
        .cloned()
        .collect();
    all.sort_by_key(|b| std::cmp::Reverse(b.created_ms));
    let page: Vec<Value> = all
        .iter()
        .skip(from)
        .take(limit)
        .map(|b| json!({"snapshotID": b.template_id, "names": [b.name]}))
        .collect();
    let mut r = axum::Json(Value::Array(page)).into_response();
    if from + limit < all.len()
        && let Ok(v) = (from + limit).to_string().parse()
    {
        r.headers_mut().insert("x-next-token", v);
    }
    r
}
