//! The MCP server: one [`Handler`] per client connection over the process-wide
//! [`Shared`] state (the daemon it runs sandboxes through, the operator policy, the
//! sandboxes every connection created).
//!
//! Sandboxes go through a daemon: `stockade serve` when one answers (its admission
//! holds the server's token), else a daemon embedded in this process
//! ([`stockade_server::embedded`]) whose one profile is the operator policy
//! ([`OperatorPolicy::profile`]). Its admission, quota and ownership records are the
//! daemon's own, the same code every other front door goes through; each MCP token is
//! a tenant of it, and so is the stdio client
//! ([`stockade_server::embedded::EMBEDDED_LOCAL_TENANT`]).
//!
//! Each sandbox a connection creates is also recorded under that connection and only
//! that connection sees it. It is destroyed when the connection ends (the handler is
//! dropped), when the server exits, and, if the server is killed, by the sandbox's own
//! monitor (the server's pid is its owner). Named sessions are not: they persist until
//! their idle timeout or lifetime.

mod error;
mod exec;
mod files;
mod handler;
mod resources;
mod sandbox;
mod session;
mod terminal;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use stockade::{Provider, SandboxInfo};
use stockade_client::RemoteProvider;
use stockade_server::embedded::{EMBEDDED_LOCAL_TENANT, Embedded, TenantProvider};

pub use error::ToolError;
pub use handler::all_tools;

use crate::policy::OperatorPolicy;

/// Locks `m`; a panic elsewhere while holding it leaves the data usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The tenant of a caller. Over HTTP it comes from the bearer token (the daemon's
/// token file and tenant names); stdio and tokenless loopback HTTP are [`LOCAL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant(pub String);

/// The tenant of callers that present no token.
pub const LOCAL: &str = stockade_server::auth::LOCAL_TENANT;

/// A sandbox a connection created.
struct Owned {
    conn: u64,
    /// The token's tenant of the connection that made it: the sandbox quota is per
    /// tenant, across its connections.
    tenant: String,
    provider: Arc<dyn Provider>,
    info: SandboxInfo,
}

/// Which daemon the server runs sandboxes through.
pub enum Backend {
    /// `stockade serve` (STOCKADE_HOST or the default socket).
    Remote(Box<RemoteProvider>),
    /// A daemon in this process.
    Embedded(Embedded),
}

/// Where the server runs sandboxes and how.
pub struct Options {
    pub policy: OperatorPolicy,
    pub backend: Backend,
    /// `$STOCKADE_HOME`: sessions and images.
    pub home: PathBuf,
}

/// State shared by every connection of the process.
pub struct Shared {
    policy: OperatorPolicy,
    remote: Option<RemoteProvider>,
    embedded: Mutex<Option<Embedded>>,
    home: PathBuf,
    /// By (tenant, provider name).
    providers: Mutex<HashMap<(String, String), Arc<dyn Provider>>>,
    /// The embedded daemon's views, by (tenant, provider name).
    tenant_views: Mutex<HashMap<(String, String), Arc<TenantProvider>>>,
    owned: Mutex<HashMap<String, Owned>>,
    next_conn: AtomicU64,
    rt: tokio::runtime::Handle,
    /// Destroys started by dropped connections; [`Shared::release_all`] waits for them.
    pending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Every connection's open terminals.
    terminals: terminal::Terminals,
}

impl Shared {
    /// Shared state on the current tokio runtime.
    pub fn new(o: Options) -> Arc<Shared> {
        let (remote, embedded) = match o.backend {
            Backend::Remote(r) => (Some(*r), None),
            Backend::Embedded(e) => (None, Some(e)),
        };
        Arc::new(Shared {
            policy: o.policy,
            remote,
            embedded: Mutex::new(embedded),
            home: o.home,
            providers: Mutex::new(HashMap::new()),
            tenant_views: Mutex::new(HashMap::new()),
            owned: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            rt: tokio::runtime::Handle::current(),
            pending: Mutex::new(Vec::new()),
            terminals: Mutex::new(HashMap::new()),
        })
    }

    /// The operator policy in force.
    pub fn policy(&self) -> &OperatorPolicy {
        &self.policy
    }

    /// `tenant`'s provider `name`: the remote daemon's backend, or the embedded
    /// daemon's view of that tenant.
    fn provider(&self, tenant: &str, name: &str) -> Result<Arc<dyn Provider>, ToolError> {
        let key = (tenant.to_string(), name.to_string());
        if let Some(p) = lock(&self.providers).get(&key) {
            return Ok(p.clone());
        }
        let p: Arc<dyn Provider> = match &self.remote {
            Some(r) => Arc::new(r.clone().with_backend(Some(name.to_string()))),
            None => self.tenant_view(tenant, name)?,
        };
        lock(&self.providers).insert(key, p.clone());
        Ok(p)
    }

    /// The embedded daemon's view of `tenant` on provider `name`.
    fn tenant_view(&self, tenant: &str, name: &str) -> Result<Arc<TenantProvider>, ToolError> {
        let key = (tenant.to_string(), name.to_string());
        if let Some(v) = lock(&self.tenant_views).get(&key) {
            return Ok(v.clone());
        }
        let daemon_tenant = if tenant == LOCAL {
            EMBEDDED_LOCAL_TENANT
        } else {
            tenant
        };
        let view = match &*lock(&self.embedded) {
            Some(e) => Arc::new(e.provider(daemon_tenant, name)?),
            None => {
                return Err(ToolError::new(
                    "unavailable",
                    "the server is shutting down",
                    "reconnect once it is back",
                ));
            }
        };
        lock(&self.tenant_views).insert(key, view.clone());
        Ok(view)
    }

    /// How many live sandboxes `tenant` holds: the embedded daemon's count (sessions'
    /// included), else those this server made for it.
    async fn live_of(&self, tenant: &str) -> Result<usize, ToolError> {
        if self.remote.is_none() {
            let backend = self.policy.provider(None)?;
            return Ok(self.tenant_view(tenant, &backend)?.live().await?);
        }
        Ok(self.owned().values().filter(|o| o.tenant == tenant).count())
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

    /// The image store under `$STOCKADE_HOME`.
    fn image_store(&self) -> Result<stockade_image::Store, ToolError> {
        stockade_image::Store::open(self.home.join("images"))
            .map_err(|e| ToolError::from(stockade::Error::from(e)))
    }

    /// The sandboxes every connection created, locked.
    fn owned(&self) -> MutexGuard<'_, HashMap<String, Owned>> {
        lock(&self.owned)
    }

    fn take(&self, pred: impl Fn(&Owned) -> bool) -> Vec<Owned> {
        let mut owned = self.owned();
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

    /// Destroys every sandbox any connection created, waits for the destroys
    /// dropped connections started, and stops the embedded daemon (server exit).
    pub async fn release_all(&self) {
        lock(&self.terminals).clear();
        destroy_all(self.take(|_| true)).await;
        let pending = std::mem::take(&mut *lock(&self.pending));
        for h in pending {
            let _ = h.await;
        }
        let embedded = lock(&self.embedded).take();
        if let Some(e) = embedded {
            lock(&self.providers).clear();
            lock(&self.tenant_views).clear();
            e.shutdown().await;
        }
    }

    fn lookup(&self, conn: u64, id: &str) -> Result<(Arc<dyn Provider>, SandboxInfo), ToolError> {
        match self.owned().get(id) {
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
        terminal::close_all(&shared.terminals, conn);
        let list = shared.take(|o| o.conn == conn);
        if !list.is_empty() {
            let h = shared.rt.spawn(destroy_all(list));
            let mut pending = lock(&shared.pending);
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

    /// The tenant this connection is bound to ([`LOCAL`] until a request binds it).
    fn bound_tenant(&self) -> String {
        lock(&self.conn.tenant)
            .clone()
            .unwrap_or_else(|| LOCAL.to_string())
    }

    /// What this connection's sandboxes were when created.
    fn owned_infos(&self) -> Vec<SandboxInfo> {
        self.shared()
            .owned()
            .values()
            .filter(|o| o.conn == self.conn.id)
            .map(|o| o.info.clone())
            .collect()
    }

    /// The caller's tenant; the first request (`initialize`) binds the connection to
    /// it and a later request of another tenant is refused.
    fn tenant(&self, ctx: &RequestContext<RoleServer>) -> Result<String, McpError> {
        let asked = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Tenant>())
            .map(|t| t.0.clone())
            .unwrap_or_else(|| LOCAL.to_string());
        let mut bound = lock(&self.conn.tenant);
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
}
