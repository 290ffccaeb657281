//! The MCP server: one [`Handler`] per client connection over the process-wide
//! [`Shared`] state (providers, the operator policy, the sandboxes every connection
//! created).
//!
//! Ownership: each sandbox a connection creates is recorded under that connection and
//! only that connection sees it. It is destroyed when the connection ends (the handler
//! is dropped), when the server exits, and, if the server is killed, by the sandbox's
//! own monitor (the server's pid is its owner). Named sessions are not: they persist
//! until their idle timeout or lifetime.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ResourceContents, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use stockade::code::{ImageFetcher, QuietFetcher, Source};
use stockade::spec::{Mount, Network};
use stockade::{
    Action, CreateOptions, Error, ExecInput, ExecOutcome, ExecRequest, FileOp, FileResult,
    Provider, Sandbox, SandboxInfo, SandboxSpec, SessionConfig, SessionManager,
};
use stockade_client::RemoteProvider;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::policy::{Denied, OperatorPolicy};
use crate::tools::{self, parse};

/// The tenant of a caller. Over HTTP it comes from the bearer token (the daemon's
/// token file and tenant names); stdio and tokenless loopback HTTP are [`LOCAL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant(pub String);

/// The tenant of callers that present no token.
pub const LOCAL: &str = stockade_server::auth::LOCAL_TENANT;

/// Where a session's workspace is inside its sandbox (the core's `WORKSPACE_TARGET`).
const SESSION_WORKSPACE: &str = "/work";
/// Grace between an exec's deadline and the end of a one-shot sandbox's lifetime.
const LIFETIME_GRACE_SECS: u64 = 5;
/// How often a running exec reports progress when nothing else happens.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Least time between two progress notifications about output.
const OUTPUT_PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// A failed tool call, as the model sees it: what went wrong and what to try.
#[derive(Debug, Clone)]
pub struct ToolError {
    pub code: &'static str,
    pub message: String,
    pub rule: Option<String>,
    pub fix: String,
}

impl ToolError {
    fn new(code: &'static str, message: impl Into<String>, fix: impl Into<String>) -> ToolError {
        ToolError {
            code,
            message: message.into(),
            rule: None,
            fix: fix.into(),
        }
    }

    fn result(&self) -> CallToolResult {
        let mut err = json!({"code": self.code, "message": self.message, "fix": self.fix});
        if let Some(r) = &self.rule {
            err["rule"] = json!(r);
        }
        let text = format!(
            "error ({}): {}\nwhat to try: {}",
            self.code, self.message, self.fix
        );
        let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
        r.structured_content = Some(json!({ "error": err }));
        r
    }
}

impl From<Denied> for ToolError {
    fn from(d: Denied) -> ToolError {
        ToolError {
            code: "policy_denied",
            message: format!("refused by policy rule {}: {}", d.rule, d.what),
            rule: Some(d.rule.to_string()),
            fix: d.fix,
        }
    }
}

impl From<Error> for ToolError {
    fn from(e: Error) -> ToolError {
        use stockade::ErrorCode as C;
        let fix = match (&e, e.code()) {
            (Error::Unavailable { fix, .. }, _) => fix.clone(),
            (_, C::NotFound) => "it may have ended (destroyed, lifetime over, or this client \
                                 reconnected); call sandbox_list, or sandbox_create a new one"
                .into(),
            (_, C::InvalidSpec) => "correct what the message names and call again".into(),
            (_, C::Unavailable) => "try another language or provider, or ask the operator to \
                                    fix the host (`stockade doctor`)"
                .into(),
            (_, C::LimitExceeded) => "ask for less, or destroy sandboxes you no longer need".into(),
            (_, C::PolicyDenied) => {
                "the operator's approval rules refuse this; do it another way".into()
            }
            (_, C::Timeout) => "try again; if it keeps happening, use a longer timeout".into(),
            (_, C::Internal) => "try again; if it persists, tell the operator".into(),
        };
        let rule = match &e {
            Error::PolicyDenied(m) => m.rsplit_once(" rule ").map(|(_, r)| r.trim().to_string()),
            _ => None,
        };
        ToolError {
            code: e.code().as_str(),
            message: e.to_string(),
            rule,
            fix,
        }
    }
}

type ToolResult = Result<CallToolResult, ToolError>;

/// A sandbox a connection created.
struct Owned {
    conn: u64,
    provider: Arc<dyn Provider>,
    info: SandboxInfo,
}

/// Where the server runs sandboxes and how.
pub struct Options {
    pub policy: OperatorPolicy,
    /// The daemon to use (STOCKADE_HOST or the default socket), else in-process.
    pub remote: Option<RemoteProvider>,
    /// `$STOCKADE_HOME`: sessions and images.
    pub home: PathBuf,
}

/// State shared by every connection of the process.
pub struct Shared {
    policy: OperatorPolicy,
    remote: Option<RemoteProvider>,
    home: PathBuf,
    providers: Mutex<HashMap<String, Arc<dyn Provider>>>,
    owned: Mutex<HashMap<String, Owned>>,
    next_conn: AtomicU64,
    rt: tokio::runtime::Handle,
    /// Destroys started by dropped connections; [`Shared::release_all`] waits for them.
    pending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Shared {
    /// Shared state on the current tokio runtime.
    pub fn new(o: Options) -> Arc<Shared> {
        Arc::new(Shared {
            policy: o.policy,
            remote: o.remote,
            home: o.home,
            providers: Mutex::new(HashMap::new()),
            owned: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            rt: tokio::runtime::Handle::current(),
            pending: Mutex::new(Vec::new()),
        })
    }

    /// The operator policy in force.
    pub fn policy(&self) -> &OperatorPolicy {
        &self.policy
    }

    fn provider(&self, name: &str) -> Result<Arc<dyn Provider>, ToolError> {
        let mut map = self.providers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(name) {
            return Ok(p.clone());
        }
        let p: Arc<dyn Provider> = match &self.remote {
            Some(r) => Arc::new(r.clone().with_backend(Some(name.to_string()))),
            None => stockade::provider_with_home(Some(name), Some(&self.home))?,
        };
        map.insert(name.to_string(), p.clone());
        Ok(p)
    }

    /// The provider name `code::prepare` should plan for: through a daemon on this
    /// host's socket the backend's own (host interpreters are the same), else remote.
    fn plan_name<'a>(&self, backend: &'a str) -> &'a str {
        match &self.remote {
            Some(r) if !matches!(r.host(), stockade_client::Host::Unix(_)) => "remote",
            _ => backend,
        }
    }

    /// A new connection.
    pub fn connect(self: &Arc<Shared>) -> Handler {
        Handler {
            conn: Arc::new(Conn {
                id: self.next_conn.fetch_add(1, Ordering::Relaxed),
                tenant: Mutex::new(None),
                shared: self.clone(),
            }),
        }
    }

    fn take(&self, pred: impl Fn(&Owned) -> bool) -> Vec<Owned> {
        let mut owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<String> = owned
            .iter()
            .filter(|(_, o)| pred(o))
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().filter_map(|id| owned.remove(id)).collect()
    }

    /// Destroys the sandboxes of connection `conn`.
    pub async fn release(&self, conn: u64) {
        destroy_all(self.take(|o| o.conn == conn)).await;
    }

    /// Destroys every sandbox any connection created, and waits for the destroys
    /// dropped connections started (server exit).
    pub async fn release_all(&self) {
        destroy_all(self.take(|_| true)).await;
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for h in pending {
            let _ = h.await;
        }
    }

    fn lookup(&self, conn: u64, id: &str) -> Result<(Arc<dyn Provider>, SandboxInfo), ToolError> {
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        match owned.get(id) {
            Some(o) if o.conn == conn => Ok((o.provider.clone(), o.info.clone())),
            _ => Err(ToolError::new(
                "not_found",
                format!("sandbox {id} not found among this client's sandboxes"),
                "use a sandbox_id from sandbox_create or sandbox_list (each client sees only \
                 its own), or create one",
            )),
        }
    }
}

async fn destroy_all(list: Vec<Owned>) {
    let all = list.into_iter().map(|o| async move {
        let _ = o.provider.destroy(&o.info.id).await;
    });
    for f in all {
        f.await;
    }
}

/// One client connection.
struct Conn {
    id: u64,
    tenant: Mutex<Option<String>>,
    shared: Arc<Shared>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The client went away: its sandboxes go too (in the background; the stdio
        // path also awaits `release` before exiting).
        let shared = self.shared.clone();
        let conn = self.id;
        let list = shared.take(|o| o.conn == conn);
        if !list.is_empty() {
            let h = shared.rt.spawn(destroy_all(list));
            let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.retain(|h| !h.is_finished());
            pending.push(h);
        }
    }
}

/// The MCP handler of one connection.
pub struct Handler {
    conn: Arc<Conn>,
}

impl Handler {
    /// The connection's id (for [`Shared::release`]).
    pub fn conn_id(&self) -> u64 {
        self.conn.id
    }

    fn shared(&self) -> &Shared {
        &self.conn.shared
    }

    /// The caller's tenant; the first request binds the connection to it and a later
    /// request of another tenant is refused.
    fn tenant(&self, ctx: &RequestContext<RoleServer>) -> Result<String, McpError> {
        let asked = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Tenant>())
            .map(|t| t.0.clone())
            .unwrap_or_else(|| LOCAL.to_string());
        let mut bound = self.conn.tenant.lock().unwrap_or_else(|p| p.into_inner());
        match &*bound {
            Some(t) if *t != asked => Err(McpError::invalid_request(
                "this MCP session belongs to another token; initialize a session of your own",
                None,
            )),
            Some(t) => Ok(t.clone()),
            None => {
                *bound = Some(asked.clone());
                Ok(asked)
            }
        }
    }

    async fn dispatch(
        &self,
        name: &str,
        args: Option<JsonObject>,
        tenant: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let bad = |e: String| {
            ToolError::new(
                "invalid_arguments",
                e,
                "fix the arguments to match the tool's input schema and call again",
            )
        };
        match name {
            "run_code" => self.run_code(parse(name, args).map_err(bad)?, ctx).await,
            "sandbox_create" => self.create(parse(name, args).map_err(bad)?, ctx).await,
            "sandbox_exec" => {
                let a: tools::SandboxExec = parse(name, args).map_err(bad)?;
                let (provider, info) = self.shared().lookup(self.conn.id, &a.sandbox_id)?;
                let mut req = self.request(shell(&a.command), a.timeout, a.stdin)?;
                req.cwd = a.cwd;
                req.env = a.env;
                let out = self.exec(&provider, &info.id, req, ctx).await?;
                Ok(exec_result(&out, Some(&info.id)))
            }
            "sandbox_destroy" => {
                let a: tools::SandboxRef = parse(name, args).map_err(bad)?;
                self.shared().lookup(self.conn.id, &a.sandbox_id)?;
                let list = self
                    .shared()
                    .take(|o| o.conn == self.conn.id && o.info.id == a.sandbox_id);
                for o in list {
                    o.provider.destroy(&o.info.id).await?;
                }
                Ok(ok(
                    json!({"sandbox_id": a.sandbox_id, "destroyed": true}),
                    format!("sandbox {} destroyed", a.sandbox_id),
                ))
            }
            "sandbox_list" => {
                let _: tools::Nothing = parse(name, args).map_err(bad)?;
                Ok(self.list())
            }
            "session_exec" => {
                let a: tools::SessionExec = parse(name, args).map_err(bad)?;
                let (provider, id) = self.session(tenant, &a.name).await?;
                let req = self.request(shell(&a.command), a.timeout, a.stdin)?;
                let out = self.exec(&provider, &id, req, ctx).await?;
                Ok(exec_result(&out, Some(&id)))
            }
            "read_file" => {
                let a: tools::ReadFile = parse(name, args).map_err(bad)?;
                let limit = a.limit.unwrap_or(stockade::files::DEFAULT_READ_BYTES);
                let path = a.path.clone();
                match self
                    .file(
                        tenant,
                        &a.at,
                        FileOp::Read {
                            path: a.path,
                            offset: a.offset,
                            limit,
                        },
                    )
                    .await?
                {
                    FileResult::Data { data, size, eof } => {
                        let content = String::from_utf8_lossy(&data).into_owned();
                        let mut text = content.clone();
                        if !eof {
                            text.push_str(&format!(
                                "\n[{} of {size} bytes shown; read on with offset {}]",
                                data.len(),
                                a.offset + data.len() as u64
                            ));
                        }
                        Ok(ok(
                            json!({"path": path, "content": content, "size": size, "eof": eof}),
                            text,
                        ))
                    }
                    other => Err(unexpected(other)),
                }
            }
            "write_file" => {
                let a: tools::WriteFile = parse(name, args).map_err(bad)?;
                let n = a.content.len();
                let op = FileOp::Write {
                    path: a.path.clone(),
                    data: a.content.into_bytes(),
                    mode: None,
                };
                self.file(tenant, &a.at, op).await?;
                Ok(ok(
                    json!({"path": a.path, "bytes": n}),
                    format!("wrote {n} bytes to {}", a.path),
                ))
            }
            "edit_file" => {
                let a: tools::EditFile = parse(name, args).map_err(bad)?;
                let op = FileOp::Edit {
                    path: a.path.clone(),
                    old: a.old_string,
                    new: a.new_string,
                    replace_all: a.replace_all,
                };
                match self.file(tenant, &a.at, op).await? {
                    FileResult::Edited { replacements } => Ok(ok(
                        json!({"path": a.path, "replacements": replacements}),
                        format!("{replacements} replacement(s) in {}", a.path),
                    )),
                    other => Err(unexpected(other)),
                }
            }
            "list_dir" => {
                let a: tools::ListDir = parse(name, args).map_err(bad)?;
                let path = a.path.unwrap_or_else(|| ".".into());
                match self
                    .file(tenant, &a.at, FileOp::Ls { path: path.clone() })
                    .await?
                {
                    FileResult::Entries(entries) => {
                        let text = entries
                            .iter()
                            .map(|e| {
                                let kind = match e.kind {
                                    stockade::FileKind::Dir => "dir ",
                                    stockade::FileKind::File => "file",
                                    stockade::FileKind::Symlink => "link",
                                    stockade::FileKind::Other => "other",
                                };
                                format!("{kind} {:>10} {}", e.size, e.name)
                            })
                            .collect::<Vec<_>>()
                            .join("\n");
                        Ok(ok(json!({"path": path, "entries": entries}), text))
                    }
                    other => Err(unexpected(other)),
                }
            }
            "glob" => {
                let a: tools::Glob = parse(name, args).map_err(bad)?;
                let op = FileOp::Glob {
                    pattern: a.pattern,
                    root: a.root.unwrap_or_else(|| ".".into()),
                };
                match self.file(tenant, &a.at, op).await? {
                    FileResult::Paths { paths, truncated } => {
                        let mut text = paths.join("\n");
                        if truncated {
                            text.push_str("\n[more paths were cut; narrow the pattern]");
                        }
                        Ok(ok(json!({"paths": paths, "truncated": truncated}), text))
                    }
                    other => Err(unexpected(other)),
                }
            }
            "grep" => {
                let a: tools::Grep = parse(name, args).map_err(bad)?;
                let op = FileOp::Grep {
                    regex: a.pattern,
                    root: a.root.unwrap_or_else(|| ".".into()),
                    include: a.include,
                    max_matches: a.max_matches.unwrap_or(0),
                };
                match self.file(tenant, &a.at, op).await? {
                    FileResult::Matches { matches, truncated } => {
                        let mut text = matches
                            .iter()
                            .map(|m| format!("{}:{}:{}", m.path, m.line_number, m.line))
                            .collect::<Vec<_>>()
                            .join("\n");
                        if truncated {
                            text.push_str("\n[more matches were cut; narrow the search]");
                        }
                        Ok(ok(
                            json!({"matches": matches, "truncated": truncated}),
                            text,
                        ))
                    }
                    other => Err(unexpected(other)),
                }
            }
            other => Err(ToolError::new(
                "invalid_arguments",
                format!("unknown tool {other:?}"),
                "call tools/list for the tools of this server",
            )),
        }
    }

    /// An exec request with the policy's deadline and output cap.
    fn request(
        &self,
        argv: Vec<String>,
        timeout: Option<f64>,
        stdin: Option<String>,
    ) -> Result<ExecRequest, ToolError> {
        let t = self.shared().policy.exec_timeout(timeout)?;
        let mut req = ExecRequest::new(argv);
        req.timeout_ms = Some((t * 1000.0).ceil() as u64);
        req.stdin = stdin.unwrap_or_default().into_bytes();
        req.output_limit_bytes = self.shared().policy.output_limit_bytes;
        Ok(req)
    }

    async fn run_code(&self, a: tools::RunCode, ctx: &RequestContext<RoleServer>) -> ToolResult {
        let shared = self.shared();
        let preset = shared.policy.language(&a.language)?;
        let backend = shared.policy.provider(None)?;
        let provider = shared.provider(&backend)?;
        let mut req = self.request(Vec::new(), a.timeout, a.stdin)?;
        let mut spec = SandboxSpec {
            timeout_secs: req.timeout_ms.unwrap_or(0).div_ceil(1000) + LIFETIME_GRACE_SECS,
            ..SandboxSpec::default()
        };
        let store = stockade_image::Store::open(shared.home.join("images"))
            .map_err(|e| ToolError::from(stockade::code::image_error(e)))?;
        let fetcher = NotifyingFetcher(Progress::new(ctx));
        req.argv = stockade::code::prepare(
            shared.plan_name(&backend),
            preset,
            Source::Code(&a.code),
            &mut spec,
            &store,
            &fetcher,
        )
        .await?;
        let sb = self.create_owned(provider.clone(), spec).await?;
        let out = self.exec(&provider, sb.id(), req, ctx).await;
        let list = shared.take(|o| o.info.id == sb.id());
        destroy_all(list).await;
        Ok(exec_result(&out?, None))
    }

    async fn create_owned(
        &self,
        provider: Arc<dyn Provider>,
        spec: SandboxSpec,
    ) -> Result<Sandbox, ToolError> {
        let sb = Sandbox::create(
            provider.clone(),
            spec,
            CreateOptions {
                // If this server dies, even by SIGKILL, its sandboxes die with it.
                owner_pid: Some(std::process::id()),
            },
        )
        .await?;
        let owned = Owned {
            conn: self.conn.id,
            provider,
            info: sb.info().clone(),
        };
        self.shared()
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sb.id().to_string(), owned);
        Ok(sb)
    }

    async fn create(
        &self,
        a: tools::SandboxCreate,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let shared = self.shared();
        let p = &shared.policy;
        let live = shared
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|o| o.conn == self.conn.id)
            .count();
        if live >= p.max_sandboxes {
            let mut e = ToolError::new(
                "limit_exceeded",
                format!(
                    "refused by policy rule max_sandboxes: this client already has {live} live \
                     sandboxes"
                ),
                "sandbox_destroy one you no longer need, then try again",
            );
            e.rule = Some("max_sandboxes".into());
            return Err(e);
        }
        let backend = p.provider(a.provider.as_deref())?;
        let memory = a
            .memory
            .as_deref()
            .map(stockade::spec::parse_size)
            .transpose()
            .map_err(|e| {
                ToolError::new(
                    "invalid_arguments",
                    format!("memory: {e}"),
                    "give a size such as 256m or 1g",
                )
            })?;
        let network = match a.network.as_deref() {
            None | Some("none") => Network::None,
            Some("egress") => Network::Egress,
            Some(other) => {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!("network {other:?} is neither none nor egress"),
                    "use none (the default) or egress",
                ));
            }
        };
        if let Some(img) = &a.image {
            p.image(img)?;
        }
        p.resources(memory, a.cpus, a.lifetime, network == Network::Egress)?;
        let mut spec = SandboxSpec {
            image: a.image.clone(),
            network,
            writable: a.writable_root,
            env: a.env,
            workdir: a.workdir.map(PathBuf::from),
            ..SandboxSpec::default()
        };
        if let Some(m) = memory {
            spec.limits.memory_bytes = m;
        }
        if let Some(c) = a.cpus {
            spec.limits.cpus = c;
        }
        if let Some(l) = a.lifetime {
            spec.timeout_secs = l;
        }
        for m in a.mounts {
            let host = p.mount(&m.host, m.writable)?;
            spec.mounts.push(Mount {
                host,
                target: m.target.into(),
                writable: m.writable,
            });
        }
        let provider = shared.provider(&backend)?;
        if let Some(reference) = &a.image
            && backend == "native"
            && shared.remote.is_none()
        {
            // Pull (with progress) before create rather than silently inside it.
            let store = stockade_image::Store::open(shared.home.join("images"))
                .map_err(|e| ToolError::from(stockade::code::image_error(e)))?;
            NotifyingFetcher(Progress::new(ctx))
                .fetch(&store, reference)
                .await?;
        }
        let sb = self.create_owned(provider, spec).await?;
        let info = sb.info();
        Ok(ok(
            json!({
                "sandbox_id": info.id,
                "provider": info.provider,
                "expires_at_ms": info.expires_at_ms,
                "applied": info.applied,
            }),
            format!(
                "sandbox {} created ({}); it expires in {} s. Use sandbox_exec and the file \
                 tools with this sandbox_id.",
                info.id,
                info.provider,
                info.expires_at_ms.saturating_sub(stockade::now_ms()) / 1000
            ),
        ))
    }

    fn list(&self) -> CallToolResult {
        let owned = self
            .shared()
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<&Owned> = owned.values().filter(|o| o.conn == self.conn.id).collect();
        list.sort_by_key(|o| o.info.created_at_ms);
        let items: Vec<Value> = list
            .iter()
            .map(|o| {
                json!({
                    "sandbox_id": o.info.id,
                    "provider": o.info.provider,
                    "image": o.info.spec.get("image").cloned().unwrap_or(Value::Null),
                    "created_at_ms": o.info.created_at_ms,
                    "expires_at_ms": o.info.expires_at_ms,
                })
            })
            .collect();
        let text = if items.is_empty() {
            "no sandboxes; create one with sandbox_create".to_string()
        } else {
            list.iter()
                .map(|o| {
                    format!(
                        "{} ({}), expires in {} s",
                        o.info.id,
                        o.info.provider,
                        o.info.expires_at_ms.saturating_sub(stockade::now_ms()) / 1000
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        ok(json!({ "sandboxes": items }), text)
    }

    /// The session's sandbox (created on first use), namespaced by tenant.
    async fn session(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<(Arc<dyn Provider>, String), ToolError> {
        let valid = !name.is_empty()
            && name.len() <= 40
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(ToolError::new(
                "invalid_arguments",
                format!(
                    "session name {name:?} is not 1-40 of A-Z a-z 0-9 . _ - (not starting with .)"
                ),
                "pick a name such as my-project",
            ));
        }
        // Tenants never share sessions: another token's `foo` is another directory.
        let scoped = if tenant == LOCAL {
            name.to_string()
        } else {
            format!("{tenant}.{name}")
        };
        let shared = self.shared();
        let backend = shared.policy.provider(None)?;
        let provider = shared.provider(&backend)?;
        if let Some(r) = &shared.remote {
            let info = r.session_get(&scoped).await?;
            return Ok((provider, info.id));
        }
        let m = SessionManager::new(provider.clone(), SessionConfig::new(shared.home.clone()));
        let sb = m.get_or_create(&scoped).await?;
        Ok((provider, sb.id().to_string()))
    }

    /// Runs a file operation where `at` says, after the approval rules for writes.
    async fn file(
        &self,
        tenant: &str,
        at: &tools::TargetFields,
        op: FileOp,
    ) -> Result<FileResult, ToolError> {
        let (provider, id) = match (&at.sandbox_id, &at.session) {
            (Some(id), None) => {
                let (p, info) = self.shared().lookup(self.conn.id, id)?;
                (p, info.id)
            }
            (None, Some(name)) => self.session(tenant, name).await?,
            _ => {
                return Err(ToolError::new(
                    "invalid_arguments",
                    "give exactly one of sandbox_id or session",
                    "pass sandbox_id (from sandbox_create) or session (a session name)",
                ));
            }
        };
        if op.writes() {
            self.shared()
                .policy
                .approval
                .check(&id, &Action::FileWrite(&op))?;
        }
        Ok(provider.file(&id, op).await?)
    }

    /// Runs `req` in sandbox `id`: approval first, then the exec with progress
    /// notifications (when the client asked for them) and cancellation (which kills
    /// everything the command started).
    async fn exec(
        &self,
        provider: &Arc<dyn Provider>,
        id: &str,
        mut req: ExecRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ExecOutcome, ToolError> {
        self.shared()
            .policy
            .approval
            .check(id, &Action::Exec(&req))?;
        let progress = Progress::new(ctx);
        let (out_tx, mut out_rx) = mpsc::channel(64);
        let (in_tx, in_rx) = mpsc::channel(4);
        req.stream = progress.is_some();
        let req = stockade::CheckedRequest::new(req)?;
        let io = stockade::ExecIo {
            output: progress.is_some().then_some(out_tx),
            input: Some(in_rx),
        };
        let exec = provider.exec(id, req, io);
        tokio::pin!(exec);
        let started = Instant::now();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.tick().await;
        let mut last_output = Instant::now() - OUTPUT_PROGRESS_EVERY;
        let mut bytes = 0usize;
        let mut last_line = String::new();
        let mut killed = false;
        let cancelled: CancellationToken = ctx.ct.clone();
        loop {
            tokio::select! {
                r = &mut exec => {
                    if killed {
                        return Err(ToolError::new(
                            "cancelled",
                            "the call was cancelled; everything the command started was killed",
                            "run it again if you still need it",
                        ));
                    }
                    return Ok(r?);
                }
                _ = cancelled.cancelled(), if !killed => {
                    killed = true;
                    let _ = in_tx.send(ExecInput::Kill).await;
                }
                chunk = out_rx.recv(), if progress.is_some() => {
                    if let Some(c) = chunk {
                        bytes += c.data.len();
                        if let Some(l) = String::from_utf8_lossy(&c.data).lines().rfind(|l| !l.trim().is_empty()) {
                            last_line = l.chars().take(200).collect();
                        }
                        if last_output.elapsed() >= OUTPUT_PROGRESS_EVERY {
                            last_output = Instant::now();
                            progress.send(format!("{bytes} bytes of output; last line: {last_line}")).await;
                        }
                    }
                }
                _ = heartbeat.tick(), if progress.is_some() => {
                    progress.send(format!(
                        "running for {} s; {bytes} bytes of output",
                        started.elapsed().as_secs()
                    )).await;
                }
            }
        }
    }
}

fn shell(command: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), command.into()]
}

fn unexpected(r: FileResult) -> ToolError {
    ToolError::new(
        "internal",
        format!("unexpected file operation result {r:?}"),
        "try again; if it persists, tell the operator",
    )
}

fn ok(structured: Value, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

/// An exec's outcome: structured, and a short text for the model.
fn exec_result(o: &ExecOutcome, sandbox: Option<&str>) -> CallToolResult {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let mut s = json!({
        "exit_code": o.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": o.truncated(),
        "timed_out": o.timed_out,
        "oom_killed": o.oom_killed,
        "signal": o.signal,
        "duration_ms": o.duration_ms,
    });
    if let Some(id) = sandbox {
        s["sandbox_id"] = json!(id);
    }
    let mut text = format!("exit code {} ({} ms)", o.exit_code, o.duration_ms);
    if o.timed_out {
        text.push_str(
            "\nTIMED OUT: the deadline passed and everything it started was killed; pass a \
             larger timeout or make it faster",
        );
    }
    if o.oom_killed {
        text.push_str(
            "\nOUT OF MEMORY: the memory limit was hit; use less memory (or create a sandbox \
             with more, if the operator allows)",
        );
    }
    if o.truncated() {
        text.push_str(&format!(
            "\nTRUNCATED: {} bytes of stdout and {} of stderr were cut from the middle; \
             print less, or write to a file and read parts of it",
            o.stdout_dropped, o.stderr_dropped
        ));
    }
    if !stdout.is_empty() {
        text.push_str("\n--- stdout ---\n");
        text.push_str(&stdout);
    }
    if !stderr.is_empty() {
        text.push_str("\n--- stderr ---\n");
        text.push_str(&stderr);
    }
    ok(s, text)
}

/// Progress notifications for one request, when the client sent a progress token.
struct Progress {
    target: Option<(ProgressToken, rmcp::Peer<RoleServer>)>,
    n: AtomicU64,
}

impl Progress {
    fn new(ctx: &RequestContext<RoleServer>) -> Progress {
        Progress {
            target: ctx.meta.get_progress_token().map(|t| (t, ctx.peer.clone())),
            n: AtomicU64::new(0),
        }
    }

    fn is_some(&self) -> bool {
        self.target.is_some()
    }

    async fn send(&self, message: String) {
        if let Some((token, peer)) = &self.target {
            let n = self.n.fetch_add(1, Ordering::Relaxed) + 1;
            let p = ProgressNotificationParam::new(token.clone(), n as f64).with_message(message);
            let _ = peer.notify_progress(p).await;
        }
    }
}

/// Pulls images quietly, telling the client through progress notifications.
struct NotifyingFetcher(Progress);

#[async_trait::async_trait]
impl ImageFetcher for NotifyingFetcher {
    async fn fetch(
        &self,
        store: &stockade_image::Store,
        reference: &str,
    ) -> stockade::Result<stockade_image::Image> {
        if store.image(reference).is_err() {
            self.0.send(format!("pulling image {reference}")).await;
        }
        let img = QuietFetcher.fetch(store, reference).await?;
        self.0.send(format!("image {reference} ready")).await;
        Ok(img)
    }
}

/// A `sandbox://ID/path` or `session://NAME/path` URI.
fn parse_uri(uri: &str) -> Option<(&str, &str, String)> {
    let (scheme, rest) = uri.split_once("://")?;
    let (who, path) = rest.split_once('/').unwrap_or((rest, ""));
    if who.is_empty() || !matches!(scheme, "sandbox" | "session") {
        return None;
    }
    Some((scheme, who, format!("/{path}")))
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let caps =
            serde_json::from_value(json!({"tools": {}, "resources": {}})).unwrap_or_default();
        ServerConfig::new(caps)
            .with_server_info(rmcp::model::Implementation::new(
                "stockade",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Stockade runs code in isolated, secure-by-default sandboxes (no network, \
                 read-only root, memory/CPU limits). Use run_code for one-off snippets; \
                 sandbox_create + sandbox_exec + the file tools for multi-step work in one \
                 sandbox; session_exec for a workspace that persists across conversations. \
                 Failed calls say what went wrong and what to try.",
            )
    }

    /// Sessions (and so the 2026-07-28 stateless protocol) are needed: sandboxes are
    /// per-connection state.
    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::known_up_to(
            &rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(all_tools(
            self.shared().policy(),
        )))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        all_tools(self.shared().policy())
            .into_iter()
            .find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tenant = self.tenant(&ctx)?;
        let r = match self
            .dispatch(&request.name, request.arguments, &tenant, &ctx)
            .await
        {
            Ok(r) => r,
            Err(e) => e.result(),
        };
        Ok(r.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let owned = self
            .shared()
            .owned
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let items: Vec<Value> = owned
            .values()
            .filter(|o| o.conn == self.conn.id)
            .map(|o| {
                let wd = o
                    .info
                    .spec
                    .get("workdir")
                    .and_then(Value::as_str)
                    .unwrap_or(stockade::spec::DEFAULT_WORKDIR)
                    .trim_start_matches('/')
                    .to_string();
                json!({
                    "uri": format!("sandbox://{}/{wd}", o.info.id),
                    "name": format!("{} working directory", o.info.id),
                    "description": "Listing of the sandbox's working directory; read sandbox://ID/PATH for any file.",
                    "mimeType": "text/plain"
                })
            })
            .collect();
        serde_json::from_value(json!({ "resources": items }))
            .map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        serde_json::from_value(json!({"resourceTemplates": [
            {"uriTemplate": "sandbox://{sandbox_id}/{path}", "name": "sandbox file",
             "description": "A file (or directory listing) inside one of this client's sandboxes, read as the sandbox user."},
            {"uriTemplate": "session://{name}/{path}", "name": "session workspace file",
             "description": "A file in a session's workspace (path relative to /work)."}
        ]}))
        .map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let tenant = self.tenant(&ctx)?;
        let uri = request.uri;
        let not_found = |why: String| McpError::resource_not_found(why, Some(json!({"uri": uri})));
        let Some((scheme, who, path)) = parse_uri(&uri) else {
            return Err(McpError::invalid_params(
                format!("resource {uri:?} is not sandbox://ID/PATH or session://NAME/PATH"),
                None,
            ));
        };
        let (at, path) = if scheme == "sandbox" {
            (
                tools::TargetFields {
                    sandbox_id: Some(who.to_string()),
                    session: None,
                },
                path,
            )
        } else {
            (
                tools::TargetFields {
                    sandbox_id: None,
                    session: Some(who.to_string()),
                },
                format!("{SESSION_WORKSPACE}{path}"),
            )
        };
        let stat = self
            .file(&tenant, &at, FileOp::Stat { path: path.clone() })
            .await
            .map_err(|e| not_found(e.message))?;
        let is_dir = matches!(&stat, FileResult::Entries(e) if e.first().is_some_and(|e| e.kind == stockade::FileKind::Dir));
        let contents = if is_dir {
            let listing = match self
                .file(&tenant, &at, FileOp::Ls { path })
                .await
                .map_err(|e| not_found(e.message))?
            {
                FileResult::Entries(e) => e
                    .iter()
                    .map(|e| {
                        if e.kind == stockade::FileKind::Dir {
                            format!("{}/", e.name)
                        } else {
                            e.name.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            ResourceContents::TextResourceContents {
                uri: uri.clone(),
                mime_type: Some("text/plain".into()),
                text: listing,
                meta: None,
            }
        } else {
            let data = match self
                .file(
                    &tenant,
                    &at,
                    FileOp::Read {
                        path,
                        offset: 0,
                        limit: stockade::files::MAX_FILE_BYTES,
                    },
                )
                .await
                .map_err(|e| not_found(e.message))?
            {
                FileResult::Data { data, .. } => data,
                _ => Vec::new(),
            };
            match String::from_utf8(data) {
                Ok(text) => ResourceContents::TextResourceContents {
                    uri: uri.clone(),
                    mime_type: Some("text/plain".into()),
                    text,
                    meta: None,
                },
                Err(e) => ResourceContents::BlobResourceContents {
                    uri: uri.clone(),
                    mime_type: Some("application/octet-stream".into()),
                    blob: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                    meta: None,
                },
            }
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// The tool definitions as rmcp `Tool`s.
pub fn all_tools(policy: &OperatorPolicy) -> Vec<Tool> {
    tools::definitions(Some(policy))
        .into_iter()
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_parse() {
        assert_eq!(
            parse_uri("sandbox://sb-1/tmp/a.txt"),
            Some(("sandbox", "sb-1", "/tmp/a.txt".to_string()))
        );
        assert_eq!(
            parse_uri("session://proj/src/main.py"),
            Some(("session", "proj", "/src/main.py".to_string()))
        );
        assert_eq!(
            parse_uri("sandbox://sb-1"),
            Some(("sandbox", "sb-1", "/".to_string()))
        );
        assert_eq!(parse_uri("file:///etc/passwd"), None);
        assert_eq!(parse_uri("sandbox:///etc"), None);
    }

    #[test]
    fn errors_carry_a_fix_and_the_rule() {
        let e: ToolError =
            Error::PolicyDenied("exec `curl x` in sandbox sb denied by rule no-curl".into()).into();
        assert_eq!(e.code, "policy_denied");
        assert_eq!(e.rule.as_deref(), Some("no-curl"));
        let r = e.result();
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"]["rule"], "no-curl");
        assert!(!s["error"]["fix"].as_str().unwrap().is_empty());
        let e: ToolError = Error::NotFound {
            kind: "sandbox",
            id: "x".into(),
        }
        .into();
        assert!(e.fix.contains("sandbox_list"));
    }
}
