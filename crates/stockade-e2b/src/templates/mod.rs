//! E2B's template build API, what the SDKs' `Template` builder calls: `POST
//! /v3/templates` names a build, `GET /templates/ID/files/HASH` answers whether a
//! COPY step's archive is here (and where to `PUT` it: a one-use URL of this server,
//! since the SDK sends no API key with it), `POST /v2/templates/ID/builds/BUILD` starts
//! it, `GET .../status?logsOffset=N` pages its log. `GET /templates/aliases/NAME` and
//! `DELETE /templates/ID` answer for the tenant's own templates.
//!
//! A build runs in a sandbox of the tenant (its profile and budgets apply) on the base
//! image with a writable root: RUN steps as the step's user, COPY through the agent's
//! archive upload, ENV, WORKDIR and USER carried from step to step. Its result is an
//! image in Stockade's store: the base's layers and one more, the agent's
//! [`FileOp::Changes`] of the sandbox's root against a read-only view of the base
//! (its home included), with the environment, working directory and user in its
//! config. `Sandbox.create("NAME")` then starts from that image, the home seeded from
//! the image's `/home/user`, and runs the start command, waiting for the ready
//! command, before it answers. Built templates are kept in `templates/index.json`
//! under the front end's directory; the build in progress is not kept across a
//! restart.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::error;
use crate::state::E2b;

mod build;
pub mod snapshot;

use build::run_build;
pub use build::started;

/// The tag a name without one gets.
pub const DEFAULT_TAG: &str = "default";
/// Where a COPY step's archive is `PUT` (followed by its one-use token).
pub const UPLOAD_PATH: &str = "/stockade/template-files/";
/// How long an upload URL stays good.
const UPLOAD_TTL_MS: u64 = 3600 * 1000;
/// The longest a RUN step may take.
pub(super) const STEP_TIMEOUT_MS: u64 = 30 * 60 * 1000;
/// How long a ready command is waited for, at the build and at each create.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// A build's sandbox: memory (and the size of its writable root and `/tmp`) unless
/// the request asks for other.
pub(super) const BUILD_MEMORY_MB: u64 = 2048;
/// Most log lines a build keeps.
pub(super) const MAX_LOG_ENTRIES: usize = 20_000;
/// Most builds a tenant has waiting or running at once.
const MAX_BUILDS_AT_ONCE: usize = 8;
/// How long a finished build's status stays to be read.
const BUILD_KEPT_MS: u64 = 3600 * 1000;
/// Most upload URLs a tenant holds unused at once.
const MAX_UPLOAD_URLS: usize = 1000;
/// Most bytes of COPY archives a tenant keeps on this host.
pub const MAX_TENANT_FILES_BYTES: u64 = 1 << 30;
/// Where a build sandbox sees its base (read-only) and writes its layer.
pub const BASE_AT: &str = "/.e2b-build/base";
pub(super) const OUT_AT: &str = "/.e2b-build/out";

/// A template the tenant built, as kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Built {
    pub tenant: String,
    pub template_id: String,
    pub name: String,
    pub tags: Vec<String>,
    pub build_id: String,
    /// The image: its manifest digest (`sha256:...`).
    pub image: String,
    pub env: BTreeMap<String, String>,
    pub workdir: String,
    /// `user` or `root`: who commands run as unless they say.
    pub user: String,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub created_ms: u64,
    /// A snapshot: the E2B sandbox it was taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_of: Option<String>,
    /// A snapshot's home: what each new home starts with (a directory of the
    /// templates' own); none: the image's `/home/user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<PathBuf>,
    /// Whether `image` is this template's own, to give the store's gc when it goes
    /// (a snapshot of a read-only root names its sandbox's image, which it does not own).
    #[serde(default = "yes")]
    pub owns_image: bool,
    /// The egress allowlist and process cap of the template a snapshot was taken on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
}

fn yes() -> bool {
    true
}

impl Built {
    /// The spec's part of a template: its image (none, an empty `image`: the host's
    /// root), environment, limits and allowlist.
    pub fn config(&self) -> stockade_image::TemplateConfig {
        stockade_image::TemplateConfig {
            image: Some(self.image.clone()).filter(|i| !i.is_empty()),
            memory: self.memory_mb.map(|m| m << 20),
            cpus: self.cpus,
            pids: self.pids,
            env: self.env.clone(),
            allow: self.allow.clone(),
            pool: None,
        }
    }
}

pub(super) struct Build {
    pub(super) tenant: String,
    made_ms: u64,
    pub(super) template_id: String,
    pub(super) name: String,
    pub(super) tags: Vec<String>,
    pub(super) cpus: Option<f64>,
    pub(super) memory_mb: Option<u64>,
    pub(super) state: Mutex<BuildState>,
}

#[derive(Default)]
pub(super) struct BuildState {
    started: bool,
    pub(super) status: &'static str,
    /// When it ended (ready or error).
    pub(super) ended_ms: Option<u64>,
    logs: Vec<Value>,
    /// Why it failed, and at which step (`"base"`, `"N"`, `"finalize"`).
    reason: Option<(String, Option<String>)>,
}

impl Build {
    pub(super) fn log(&self, level: &str, message: impl Into<String>, step: Option<&str>) {
        let mut st = lock(&self.state);
        if st.logs.len() >= MAX_LOG_ENTRIES {
            return;
        }
        let mut v = json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "level": level,
            "message": message.into(),
        });
        if let Some(s) = step {
            v["step"] = json!(s);
        }
        st.logs.push(v);
    }

    pub(super) fn fail(&self, message: String, step: Option<String>) {
        self.log("error", message.clone(), step.as_deref());
        let mut st = lock(&self.state);
        st.status = "error";
        st.ended_ms = Some(stockade::now_ms());
        st.reason = Some((message, step));
    }
}

/// The template builds and built templates of a front end.
pub struct Templates {
    pub(super) dir: PathBuf,
    pub(super) built: Mutex<Vec<Built>>,
    builds: Mutex<HashMap<String, Arc<Build>>>,
    /// Upload tokens: (tenant, files hash, expiry).
    uploads: Mutex<HashMap<String, (String, String, u64)>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A tenant's directory name: its name's hex (any tenant name is a safe path).
fn tenant_dir(tenant: &str) -> String {
    stockade::host::hex(tenant.as_bytes())
}

impl Templates {
    /// The builds kept under `dir` (made if missing).
    pub fn open(dir: PathBuf) -> anyhow::Result<Templates> {
        std::fs::create_dir_all(dir.join("files"))?;
        let _ = std::fs::remove_dir_all(dir.join("builds"));
        std::fs::create_dir_all(dir.join("builds"))?;
        let built = match std::fs::read(dir.join("index.json")) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not a list of built templates: {e} (move it aside to start \
                     without them)",
                    dir.join("index.json").display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        prune_snapshots(&dir.join("snapshots"), &built);
        Ok(Templates {
            dir,
            built: Mutex::new(built),
            builds: Mutex::new(HashMap::new()),
            uploads: Mutex::new(HashMap::new()),
        })
    }

    /// Puts `b` in the list in place of the tenant's record of the same name and saves
    /// the list; answers the records it replaced (for [`forget`]). When the list cannot
    /// be saved it stays as it was, and `b` comes back with the error.
    pub(super) fn replace(&self, b: Built) -> Result<Vec<Built>, Box<(Built, std::io::Error)>> {
        let mut built = lock(&self.built);
        let same = |x: &Built| x.tenant == b.tenant && x.name == b.name;
        let replaced: Vec<Built> = built.iter().filter(|x| same(x)).cloned().collect();
        built.retain(|x| !same(x));
        built.push(b.clone());
        if let Err(e) = self.save(&built) {
            built.retain(|x| !(x.tenant == b.tenant && x.template_id == b.template_id));
            built.extend(replaced);
            return Err(Box::new((b, e)));
        }
        Ok(replaced)
    }

    pub(super) fn save(&self, built: &[Built]) -> std::io::Result<()> {
        let tmp = self.dir.join("index.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(built)?)?;
        std::fs::rename(tmp, self.dir.join("index.json"))
    }

    /// The tenant's template `name` names: its name, `name:tag` or its id.
    pub fn find(&self, tenant: &str, name: &str) -> Option<Built> {
        let (base, tag) = split_tag(name);
        lock(&self.built)
            .iter()
            .find(|b| {
                b.tenant == tenant
                    && (b.template_id == name
                        || (b.name == base && tag.is_none_or(|t| b.tags.iter().any(|x| x == t))))
            })
            .cloned()
    }

    pub(super) fn file_path(&self, tenant: &str, hash: &str) -> PathBuf {
        self.dir.join("files").join(tenant_dir(tenant)).join(hash)
    }
}

/// Removes what a snapshot left under `snapshots` that no kept template names (one
/// taken when the server stopped).
fn prune_snapshots(snapshots: &Path, built: &[Built]) {
    let kept: std::collections::HashSet<&Path> = built
        .iter()
        .filter_map(|b| b.home.as_deref().and_then(Path::parent))
        .collect();
    let Ok(tenants) = std::fs::read_dir(snapshots) else {
        return;
    };
    for t in tenants.flatten() {
        for d in std::fs::read_dir(t.path()).into_iter().flatten().flatten() {
            if !kept.contains(d.path().as_path()) {
                let _ = std::fs::remove_dir_all(d.path());
            }
        }
    }
}

/// `name[:tag]` split.
fn split_tag(name: &str) -> (&str, Option<&str>) {
    match name.rsplit_once(':') {
        Some((n, t)) => (n, Some(t)),
        None => (name, None),
    }
}

fn decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewTemplate {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    alias: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    cpu_count: Option<f64>,
    #[serde(default, rename = "memoryMB")]
    memory_mb: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BuildBody {
    #[serde(default)]
    pub(super) from_image: Option<String>,
    #[serde(default)]
    pub(super) from_template: Option<String>,
    #[serde(default)]
    from_image_registry: Option<Value>,
    #[serde(default)]
    pub(super) steps: Vec<Step>,
    #[serde(default)]
    pub(super) start_cmd: Option<String>,
    #[serde(default)]
    pub(super) ready_cmd: Option<String>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(super) struct Step {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) files_hash: Option<String>,
}

fn hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Serves a template route of the control plane, `None` for another route.
pub async fn handle(
    e2b: &Arc<E2b>,
    tenant: &str,
    method: &Method,
    parts: &[&str],
    query: &str,
    origin: &str,
    body: &[u8],
) -> Option<Response> {
    let t = &e2b.templates;
    Some(match (method, parts) {
        (&Method::POST, ["v3", "templates"]) => new_template(e2b, tenant, body),
        (&Method::GET, ["templates", "aliases", name]) => match t.find(tenant, &decode(name)) {
            Some(b) => (
                StatusCode::OK,
                axum::Json(json!({"templateID": b.template_id, "public": false})),
            )
                .into_response(),
            None => error(404, &format!("template {:?} not found", decode(name))),
        },
        (&Method::GET, ["templates", id, "files", hash]) => {
            let id = decode(id);
            if !owns(t, tenant, &id) {
                return Some(error(404, &format!("template {id:?} not found")));
            }
            if !hex64(hash) {
                return Some(error(
                    400,
                    &format!("files hash {hash:?} is not 64 hex digits (a SHA-256)"),
                ));
            }
            let token = stockade::host::random_hex(24);
            {
                let mut uploads = lock(&t.uploads);
                let now = stockade::now_ms();
                uploads.retain(|_, (_, _, until)| *until > now);
                if uploads.values().filter(|(who, _, _)| who == tenant).count() >= MAX_UPLOAD_URLS {
                    return Some(error(
                        429,
                        &format!(
                            "{MAX_UPLOAD_URLS} upload URLs of yours are unused: upload with them \
                             or wait an hour for them to expire"
                        ),
                    ));
                }
                uploads.insert(
                    token.clone(),
                    (
                        tenant.to_string(),
                        hash.to_ascii_lowercase(),
                        now + UPLOAD_TTL_MS,
                    ),
                );
            }
            let at = t.file_path(tenant, &hash.to_ascii_lowercase());
            // One the next build takes is kept another day from now.
            let present = std::fs::File::options()
                .write(true)
                .open(&at)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()))
                .is_ok();
            (
                StatusCode::CREATED,
                axum::Json(
                    json!({"present": present, "url": format!("{origin}{UPLOAD_PATH}{token}")}),
                ),
            )
                .into_response()
        }
        (&Method::POST, ["v2", "templates", id, "builds", build]) => {
            start_build(e2b, tenant, &decode(id), build, body)
        }
        (&Method::GET, ["templates", id, "builds", build, "status"]) => {
            status(t, tenant, &decode(id), build, query)
        }
        (&Method::DELETE, ["templates", id]) => {
            let id = decode(id);
            let mut built = lock(&t.built);
            let is = |b: &Built| b.tenant == tenant && (b.template_id == id || b.name == id);
            let gone: Vec<Built> = built.iter().filter(|b| is(b)).cloned().collect();
            if gone.is_empty() {
                return Some(error(404, &format!("template {id:?} not found")));
            }
            built.retain(|b| !is(b));
            if let Err(e) = t.save(&built) {
                return Some(error(500, &format!("cannot save the template list: {e}")));
            }
            drop(built);
            forget(e2b, gone);
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::GET, ["templates"] | ["v2", "templates"]) => {
            let v: Vec<Value> = lock(&t.built)
                .iter()
                .filter(|b| b.tenant == tenant)
                .map(|b| {
                    json!({"templateID": b.template_id, "buildID": b.build_id, "names": [b.name],
                           "aliases": [b.name], "tags": b.tags, "public": false,
                           "cpuCount": b.cpus.unwrap_or(1.0), "memoryMB": b.memory_mb.unwrap_or(512),
                           "createdAt": crate::api::rfc3339(b.created_ms)})
                })
                .collect();
            axum::Json(Value::Array(v)).into_response()
        }
        _ => return None,
    })
}

/// What templates no longer kept leave: their own images go to the store's gc
/// ([`release`]), a snapshot's home is removed.
pub(super) fn forget(e2b: &Arc<E2b>, gone: Vec<Built>) {
    for b in &gone {
        if let Some(h) = &b.home {
            let _ = std::fs::remove_dir_all(h);
        }
    }
    release(
        e2b,
        gone.into_iter()
            .filter(|b| b.owns_image)
            .map(|b| b.image)
            .collect(),
    );
}

/// Gives the store's gc the images no built template names any more (one a sandbox
/// still runs is left for a later release: the store refuses to remove it).
pub(super) fn release(e2b: &Arc<E2b>, images: Vec<String>) {
    let named: std::collections::HashSet<String> = lock(&e2b.templates.built)
        .iter()
        .map(|b| b.image.clone())
        .collect();
    let images: Vec<String> = images.into_iter().filter(|d| !named.contains(d)).collect();
    if images.is_empty() {
        return;
    }
    let e2b = e2b.clone();
    tokio::task::spawn_blocking(move || {
        let Ok(store) = e2b.daemon.image_store() else {
            return;
        };
        for d in images {
            if let Err(e) = store.remove(&d) {
                tracing::info!(image = %d, "a template's image stays: {e}");
            }
        }
    });
}

/// Whether `id` is a template (built or being built) of the tenant.
fn owns(t: &Templates, tenant: &str, id: &str) -> bool {
    lock(&t.builds)
        .values()
        .any(|b| b.tenant == tenant && b.template_id == id)
        || lock(&t.built)
            .iter()
            .any(|b| b.tenant == tenant && b.template_id == id)
}

fn new_template(e2b: &E2b, tenant: &str, body: &[u8]) -> Response {
    let b: NewTemplate = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(400, &format!("the body is not a template request: {e}")),
    };
    let Some(full) = b.name.or(b.alias) else {
        return error(400, "the request names no template: send \"name\"");
    };
    let (name, tag) = split_tag(&full);
    if name.contains('/') {
        return error(
            400,
            &format!(
                "template name {full:?} has a namespace: this server keeps each tenant's \
                 templates apart by its API key; name it NAME or NAME:TAG"
            ),
        );
    }
    if let Err(e) = stockade_image::check_template_name(name) {
        return error(400, &e);
    }
    let mut tags: Vec<String> = b.tags.unwrap_or_default();
    if let Some(t) = tag {
        tags.push(t.to_string());
    }
    if tags.is_empty() {
        tags.push(DEFAULT_TAG.into());
    }
    for t in &tags {
        if stockade_image::check_template_name(t).is_err() {
            return error(
                400,
                &format!("tag {t:?} is not 1 to 64 lowercase letters, digits, '.', '_' or '-'"),
            );
        }
    }
    tags.sort();
    tags.dedup();
    let configured = stockade_image::Config::load()
        .map(|c| c.templates.contains_key(name))
        .unwrap_or(false);
    if crate::state::TEMPLATES.contains(&name) || configured {
        return error(
            409,
            &format!(
                "template {name:?} is one of the server's own (built in or from its \
                 configuration file); build yours under another name"
            ),
        );
    }
    if let Some(m) = b.memory_mb
        && m < 128
    {
        return error(400, &format!("memoryMB {m} is under 128"));
    }
    let t = &e2b.templates;
    let template_id = t.find(tenant, name).map_or_else(
        || format!("t{}", stockade::host::random_hex(10)),
        |b| b.template_id,
    );
    let build_id = stockade::host::random_hex(16);
    {
        let now = stockade::now_ms();
        let mut builds = lock(&t.builds);
        builds.retain(|_, b| {
            let st = lock(&b.state);
            match st.ended_ms {
                Some(end) => now < end + BUILD_KEPT_MS,
                // Named but never started: kept an hour too.
                None => st.started || now < b.made_ms + BUILD_KEPT_MS,
            }
        });
        let busy = builds
            .values()
            .filter(|b| b.tenant == tenant && lock(&b.state).ended_ms.is_none())
            .count();
        if busy >= MAX_BUILDS_AT_ONCE {
            return error(
                429,
                &format!(
                    "{busy} builds of yours are waiting or running; at most \
                     {MAX_BUILDS_AT_ONCE} at once: wait for one to end"
                ),
            );
        }
    }
    let build = Arc::new(Build {
        tenant: tenant.into(),
        made_ms: stockade::now_ms(),
        template_id: template_id.clone(),
        name: name.into(),
        tags: tags.clone(),
        cpus: b.cpu_count,
        memory_mb: b.memory_mb,
        state: Mutex::new(BuildState {
            status: "waiting",
            ..Default::default()
        }),
    });
    lock(&t.builds).insert(build_id.clone(), build);
    (
        StatusCode::ACCEPTED,
        axum::Json(
            json!({"templateID": template_id, "buildID": build_id, "public": false,
                          "names": [name], "tags": tags, "aliases": [name]}),
        ),
    )
        .into_response()
}

fn status(t: &Templates, tenant: &str, id: &str, build_id: &str, query: &str) -> Response {
    let Some(b) = lock(&t.builds).get(build_id).cloned() else {
        return error(404, &format!("build {build_id:?} not found"));
    };
    if b.tenant != tenant || b.template_id != id {
        return error(404, &format!("build {build_id:?} not found"));
    }
    let mut offset = 0usize;
    let mut limit = 100usize;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let n = v.parse::<usize>();
        match (k.as_ref(), n) {
            ("logsOffset", Ok(n)) => offset = n,
            ("limit", Ok(n)) => limit = n.clamp(1, 1000),
            ("logsOffset" | "limit", Err(_)) => {
                return error(400, &format!("{k}={v:?} is not a number"));
            }
            _ => {}
        }
    }
    let st = lock(&b.state);
    let entries: Vec<Value> = st.logs.iter().skip(offset).take(limit).cloned().collect();
    let mut v = json!({"templateID": b.template_id, "buildID": build_id, "status": st.status,
                       "logs": [], "logEntries": entries});
    if let Some((m, step)) = &st.reason {
        v["reason"] = json!({"message": m});
        if let Some(s) = step {
            v["reason"]["step"] = json!(s);
        }
    }
    axum::Json(v).into_response()
}

fn start_build(e2b: &Arc<E2b>, tenant: &str, id: &str, build_id: &str, body: &[u8]) -> Response {
    let Some(build) = lock(&e2b.templates.builds).get(build_id).cloned() else {
        return error(404, &format!("build {build_id:?} not found"));
    };
    if build.tenant != tenant || build.template_id != id {
        return error(404, &format!("build {build_id:?} not found"));
    }
    let b: BuildBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(400, &format!("the body is not a template build: {e}")),
    };
    if b.from_image_registry.is_some() {
        return error(
            400,
            "fromImageRegistry (registry credentials) is not taken here: pull the image into \
             Stockade's store first (stockade image pull, or import), then build from it by name",
        );
    }
    for (n, s) in b.steps.iter().enumerate() {
        if !matches!(s.kind.as_str(), "RUN" | "COPY" | "ENV" | "WORKDIR" | "USER") {
            return error(
                400,
                &format!(
                    "step {}: type {:?} is not one of RUN, COPY, ENV, WORKDIR, USER",
                    n + 1,
                    s.kind
                ),
            );
        }
        if s.kind == "COPY" && (s.args.len() < 2 || !s.files_hash.as_deref().is_some_and(hex64)) {
            return error(
                400,
                &format!("step {}: COPY needs [src, dest] and a filesHash", n + 1),
            );
        }
    }
    {
        let mut st = lock(&build.state);
        if st.started {
            return error(409, &format!("build {build_id:?} was started already"));
        }
        st.started = true;
        st.status = "building";
    }
    let e2b = e2b.clone();
    let build_id = build_id.to_string();
    tokio::spawn(async move {
        run_build(&e2b, &build, &build_id, b).await;
    });
    (StatusCode::ACCEPTED, [(header::CONTENT_LENGTH, "0")], "").into_response()
}

/// Takes a `PUT` of a COPY step's archive (the one-use URL's token names the tenant
/// and the hash).
pub async fn upload(e2b: &E2b, token: &str, body: axum::body::Body) -> Response {
    let t = &e2b.templates;
    let found = lock(&t.uploads).remove(token);
    let Some((tenant, hash, until)) = found else {
        return error(
            403,
            "this upload URL is not good (used, expired or never given)",
        );
    };
    if stockade::now_ms() > until {
        return error(403, "this upload URL expired: ask for the file again");
    }
    let Ok(data) = axum::body::to_bytes(body, crate::MAX_BODY_BYTES).await else {
        return error(
            413,
            &format!(
                "the archive is over {} bytes, the most one COPY step carries",
                crate::MAX_BODY_BYTES
            ),
        );
    };
    let path = t.file_path(&tenant, &hash);
    let held = prune_files(path.parent().unwrap_or(Path::new("/")));
    if held + data.len() as u64 > MAX_TENANT_FILES_BYTES {
        return error(
            507,
            &format!(
                "your template files here take {held} bytes; with this one they would pass \
                 {MAX_TENANT_FILES_BYTES} (each is kept a day after its upload): build with \
                 fewer or smaller COPY steps, or later"
            ),
        );
    }
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
        let tmp = path.with_extension(format!("part{}", stockade::host::random_hex(4)));
        std::fs::write(&tmp, &data)?;
        std::fs::rename(&tmp, &path)
    };
    match write() {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => error(507, &format!("cannot keep the archive: {e}")),
    }
}

/// How long a COPY archive is kept after its upload.
const FILES_KEPT: Duration = Duration::from_secs(24 * 3600);

/// Removes the archives in `dir` older than [`FILES_KEPT`]; the bytes of the others.
fn prune_files(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut held = 0;
    for e in rd.flatten() {
        let Ok(m) = e.metadata() else { continue };
        let old = m
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > FILES_KEPT);
        if old {
            let _ = std::fs::remove_file(e.path());
        } else if m.is_file() {
            held += m.len();
        }
    }
    held
}

#[cfg(test)]
mod tests;
