//! `stockaded`, the Stockade daemon: the gRPC API of `stockade-client` over the
//! providers, with tenants and quotas, warm pools, a reaper for lifetimes and idle
//! timeouts, durable state that survives `kill -9`, and Prometheus metrics.
//!
//! [`ServeArgs`] are the flags of both `stockaded` and `stockade serve`; [`run`]
//! serves until SIGINT or SIGTERM.

pub mod admission;
pub mod auth;
pub mod daemon;
pub mod embedded;
pub mod gate;
pub mod handshake;
pub mod listen;
pub mod metrics;
mod service;
pub mod store;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use stockade_client::{Address, MAX_FILE_MESSAGE_BYTES, MAX_MESSAGE_BYTES, StockadeServer};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

pub use daemon::{Daemon, Limits};

/// Flags of `stockaded` and `stockade serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Where to listen; repeat to listen on several at once (a unix socket and a TCP
    /// port, say). `unix:///PATH` or `/PATH`, `tcp://HOST:PORT` or `HOST:PORT` (TLS
    /// with --tls-cert, else loopback only), `https://HOST:PORT`, `http://HOST:PORT`
    /// (plain text). The default is the unix socket /run/stockaded.sock for root, else
    /// $XDG_RUNTIME_DIR/stockaded.sock.
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<Address>,
    /// Let members of this group use the unix socket (mode 0660, owned by the group),
    /// as docker's group does. Each caller there without a token is the tenant
    /// `uid:N` of its own uid, so local users never see each other's sandboxes; host
    /// mounts are then limited to --allow-mount and images to names, as with tokens.
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Tokens, one per line; each token is a tenant. Required with a TCP listener.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The daemon's TLS certificate (PEM, its chain after it): TCP listeners then
    /// speak TLS. Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Allow plain-text TCP on addresses other than loopback: bearer tokens and all
    /// data then cross the network in the clear (logged at start).
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<SocketAddr>,
    /// The daemon's state (default: /run/stockaded for root, else
    /// $XDG_RUNTIME_DIR/stockaded). It describes live sandboxes, which never outlive
    /// a reboot, so it belongs on tmpfs: it must survive the daemon's death, not the
    /// host's, and on tmpfs a commit costs no disk flush.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Host ids for native sandboxes' user namespaces, START-END: 65536 per sandbox,
    /// START a multiple of 65536, clear of every host account and /etc/subuid range
    /// (checked at start). Default $STOCKADE_ID_RANGE, else 1073741824-2147483647.
    #[arg(long, value_name = "START-END")]
    pub id_range: Option<stockade::idpool::IdPool>,
    /// Provider of requests that name none (default: $STOCKADE_PROVIDER or native).
    #[arg(long, value_name = "NAME")]
    pub default_provider: Option<String>,
    /// Most live sandboxes per tenant.
    #[arg(long, default_value_t = 64)]
    pub max_sandboxes_per_tenant: usize,
    /// Most pooled sandboxes per tenant (the sum of its pools' max).
    #[arg(long, default_value_t = 64)]
    pub max_pool_per_tenant: usize,
    /// Most sandboxes on this daemon, warm ones included.
    #[arg(long, default_value_t = 512)]
    pub max_sandboxes: usize,
    /// Seconds a warm sandbox may wait before it is replaced by a fresh one.
    #[arg(long, default_value_t = 600)]
    pub pool_idle_ttl_secs: u64,
    /// Where native sandboxes keep their state (default: $STOCKADE_STATE_DIR, else
    /// /run/stockade for root).
    #[arg(long, value_name = "DIR")]
    pub native_state_dir: Option<PathBuf>,
    /// A host directory whose contents tenants may mount (repeat for more). With
    /// tokens, tenants may mount nothing else (and nothing at all without this
    /// flag); without tokens, the one local caller may mount any host path unless
    /// this flag is given.
    #[arg(long = "allow-mount", value_name = "DIR")]
    pub allow_mounts: Vec<PathBuf>,
    /// What each tenant may add to the host's image store, in all (images it made the
    /// daemon pull and unpack; an image already in the store costs nothing). Kept in
    /// the daemon's state, so a restart does not reset it. `512M`, `8G`...
    #[arg(long, value_name = "SIZE", default_value = "8G", value_parser = stockade_image::parse_size)]
    pub tenant_image_bytes: u64,
    /// Tenant profiles (TOML): what each token tenant and socket-group user may ask
    /// for (hardening opt-outs, per-sandbox maxima, per-tenant totals, providers,
    /// images, network modes). Without it every tenant gets the built-in profile:
    /// no hardening opt-outs, maxima cut to this host, every provider but wasm.
    #[arg(long, value_name = "FILE")]
    pub profiles: Option<PathBuf>,
    /// Most client connections open at once (more wait to be accepted).
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Most calls at once on one connection (HTTP/2 concurrent streams).
    #[arg(long, default_value_t = 64)]
    pub max_streams_per_connection: u32,
    /// Also serve the E2B-compatible API (control plane, envd and the code
    /// interpreter on one origin) on this TCP address, for the unmodified E2B SDKs
    /// (`E2B_API_URL` and `E2B_SANDBOX_URL` point here; `E2B_API_KEY` is a token of
    /// --token-file). Plain HTTP: loopback only unless --insecure-plaintext.
    /// `stockade serve` only (the stockaded binary has no E2B front end).
    #[arg(long, value_name = "ADDR:PORT")]
    pub e2b_listen: Option<SocketAddr>,
    /// The E2B API's domain: requests to `<port>-<sandbox id>.DOMAIN` go to that
    /// sandbox's port (as E2B's edge proxy routes them), and create answers name the
    /// domain, so the SDKs with `E2B_DOMAIN=DOMAIN` need no `E2B_SANDBOX_URL`. Needs
    /// wildcard DNS for `*.DOMAIN` and, for the SDKs' `https://` URLs, a certificate
    /// (--e2b-tls-cert) and port 443.
    #[arg(long, value_name = "DOMAIN", requires = "e2b_listen")]
    pub e2b_domain: Option<String>,
    /// The certificate (PEM, its chain after it) of --e2b-listen, which then speaks
    /// TLS (HTTP/2 and HTTP/1.1): for domain mode, one valid for `*.DOMAIN` and
    /// `api.DOMAIN`. Needs --e2b-tls-key.
    #[arg(long, value_name = "FILE", requires_all = ["e2b_tls_key", "e2b_listen"])]
    pub e2b_tls_cert: Option<PathBuf>,
    /// The private key of --e2b-tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "e2b_tls_cert")]
    pub e2b_tls_key: Option<PathBuf>,
}

/// What a front end served beside the gRPC listeners gets (the E2B-compatible API
/// of `stockade-e2b`): the daemon, its tokens, a directory of its own in the
/// daemon's state, its bound listener, and a signal that turns true at shutdown.
pub struct FrontendContext {
    pub daemon: Arc<Daemon>,
    pub auth: auth::Auth,
    pub state_dir: PathBuf,
    pub listener: tokio::net::TcpListener,
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// `--e2b-domain`.
    pub domain: Option<String>,
    /// `--e2b-tls-cert` and `--e2b-tls-key`.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// Starts a front end; the future serves until `stop` turns true.
pub type Frontend =
    fn(
        FrontendContext,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;

/// How many `File` calls (up to 33 MiB of message each) the daemon holds at once.
const FILE_CALLS_AT_ONCE: usize = 8;

/// `/run/stockaded` for root, else `$XDG_RUNTIME_DIR/stockaded`, else
/// `/tmp/stockaded-UID`.
pub fn default_state_dir() -> PathBuf {
    stockade::host::daemon_state_dir()
}

/// Serves until SIGINT or SIGTERM on a runtime of its own; returns the exit code.
pub fn run(args: ServeArgs) -> i32 {
    run_with(args, None)
}

/// [`run`] with the E2B front end (`--e2b-listen`), which lives in a crate above this one.
pub fn run_with(args: ServeArgs, e2b: Option<Frontend>) -> i32 {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOCKADE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: a log file or pipe gets plain text (and NO_COLOR
    // turns it off everywhere).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stockaded: error: cannot start the runtime: {e}");
            return 70;
        }
    };
    let code = match rt.block_on(serve_with(args, shutdown_signal(), e2b)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("stockaded: error: {e:#}");
            1
        }
    };
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Serves until `stop` completes, then drains the pools.
pub async fn serve(
    args: ServeArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_with(args, stop, None).await
}

/// [`serve`] with the E2B front end for `--e2b-listen`.
pub async fn serve_with(
    args: ServeArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    e2b: Option<Frontend>,
) -> anyhow::Result<()> {
    // tonic's TLS is rustls; with more than one crypto backend in the build, the
    // process needs a default (already set is fine).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addrs = if args.listen.is_empty() {
        vec![Address::Unix(stockade_client::default_socket())]
    } else {
        args.listen.clone()
    };
    let auth = match &args.token_file {
        Some(f) => auth::Auth::from_file(f)?,
        None => auth::Auth::none(),
    };
    if auth.required() {
        // What a profiles file's [tenants] names, one per token in the file's order.
        tracing::info!(tenants = ?auth.tenant_names(), "tenants of the token file, in order");
    }
    let any_tcp = addrs.iter().any(|a| matches!(a, Address::Tcp { .. }));
    if any_tcp && !auth.required() {
        bail!("listening on TCP needs --token-file (every call must carry a token)");
    }
    if let Some(addr) = args.e2b_listen {
        if e2b.is_none() {
            bail!("--e2b-listen is served by `stockade serve` (this binary has no E2B front end)");
        }
        if !auth.required() {
            bail!("--e2b-listen needs --token-file (E2B_API_KEY is one of its tokens)");
        }
        if !addr.ip().is_loopback() && !args.insecure_plaintext && args.e2b_tls_cert.is_none() {
            bail!(
                "--e2b-listen {addr} is plain HTTP: use a loopback address, give it a \
                 certificate (--e2b-tls-cert, --e2b-tls-key), or add --insecure-plaintext \
                 to send keys and data in the clear"
            );
        }
    }
    if args.tls_cert.is_some() && !any_tcp {
        bail!("--tls-cert is for TCP listeners; add --listen tcp://HOST:PORT or drop it");
    }
    let socket_group = match &args.socket_group {
        Some(name) => Some(listen::SocketGroup::lookup(name)?),
        None => None,
    };
    if socket_group.is_some() && !addrs.iter().any(|a| matches!(a, Address::Unix(_))) {
        bail!("--socket-group is for a unix socket; add --listen unix:///PATH or drop it");
    }
    let policy = listen::TcpPolicy {
        identity: args.tls_cert.as_deref().zip(args.tls_key.as_deref()),
        insecure_plaintext: args.insecure_plaintext,
    };
    if args.insecure_plaintext {
        tracing::warn!(
            "--insecure-plaintext: plain-text TCP is allowed off loopback; tokens and data \
             on such a listener cross the network in the clear"
        );
    }
    // The id pool of native sandboxes' user namespaces: refused now, not at the first
    // create, when it holds ids the host uses.
    let id_pool = match args.id_range {
        Some(p) => p,
        None => stockade::idpool::IdPool::from_env()?,
    };
    id_pool.check_host()?;
    let bound = listen::bind_all(&addrs, &policy, socket_group.as_ref()).await?;
    let home = stockade::wasm::stockade_home();
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| home.join("daemon"));
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot restrict {}", state_dir.display()))?;
    let store = store::Store::open(&state_dir.join("state.redb"))?;
    // Local users other than the daemon's own are tenants it does not trust either.
    let untrusted = auth.required() || socket_group.is_some();
    let limits = Limits {
        sandboxes_per_tenant: args.max_sandboxes_per_tenant,
        pool_per_tenant: args.max_pool_per_tenant,
        sandboxes_total: args.max_sandboxes,
        pool_idle_ttl: Duration::from_secs(args.pool_idle_ttl_secs.max(1)),
        mounts: daemon::MountPolicy::new(&args.allow_mounts, untrusted, state_dir.join("mounts"))?,
        tenants_untrusted: untrusted,
        tenant_image_bytes: args.tenant_image_bytes,
        admission: match &args.profiles {
            Some(f) => admission::Admission::from_file(f, admission::Host::this())?,
            None => admission::Admission::builtin(admission::Host::this()),
        },
        // Only calls over a unix socket carry an owner pid (`gate::Via`).
        honour_owner_pid: addrs.iter().any(|a| matches!(a, Address::Unix(_))),
        bound_to: None,
    };
    let default_provider = args
        .default_provider
        .clone()
        .unwrap_or_else(stockade::default_provider_name);
    let d = Daemon::new(
        store,
        home,
        default_provider,
        limits,
        stockade::ProviderOptions {
            native_state_root: args.native_state_dir.clone(),
            id_pool: Some(id_pool),
            ..Default::default()
        },
    )?;
    d.provider("")?;
    let report = d.recover().await?;
    tracing::info!(
        reaped = report.reaped.len(),
        errors = ?report.errors,
        "recovered state from {}",
        state_dir.display()
    );
    tokio::spawn(d.clone().reaper());
    tokio::spawn(d.clone().health_checker());
    if let Some(addr) = args.metrics_listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        let dm = d.clone();
        tokio::spawn(metrics::serve_http(l, move || {
            dm.metrics.render(&dm.gauges())
        }));
        tracing::info!(%addr, "metrics at /metrics");
    }
    // tonic's own cap is the largest any RPC may send; the gate holds every RPC but
    // `File` to a smaller one, and checks the token before any body is read.
    let svc = StockadeServer::new(service::Service { daemon: d.clone() })
        .max_decoding_message_size(MAX_FILE_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let auth_for_frontend = auth.clone();
    let gate = gate::Gate::new(svc, auth, FILE_CALLS_AT_ONCE);
    // One connection budget for all listeners.
    let conns = Arc::new(tokio::sync::Semaphore::new(args.max_connections.max(1)));
    // Connections that have not authenticated yet hold at most a quarter of them.
    let handshakes = handshake::Handshakes::new(
        (args.max_connections / 4).clamp(1, handshake::MAX_PENDING),
        handshake::HANDSHAKE_TIMEOUT,
    );
    let streams = args.max_streams_per_connection.max(1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    for b in bound {
        let mut stopped = stop_rx.clone();
        let stopped = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let conns = conns.clone();
        let handshakes = handshakes.clone();
        match b {
            listen::Bound::Unix(l, path) => {
                tracing::info!(socket = %path.display(), "listening");
                let router = server_builder(streams).add_service(gate.clone().via(gate::Via::Unix));
                servers.spawn(async move {
                    let r = router
                        .serve_with_incoming_shutdown(
                            gate::counted(UnixListenerStream::new(l), conns, handshakes),
                            stopped,
                        )
                        .await
                        .with_context(|| format!("serving on {}", path.display()));
                    let _ = std::fs::remove_file(&path);
                    r
                });
            }
            listen::Bound::Tcp {
                listener,
                addr,
                tls,
            } => {
                let mut builder = server_builder(streams);
                if let Some(cfg) = tls.clone() {
                    builder = builder.tls_config(cfg).context("TLS settings")?;
                    tracing::info!(%addr, "listening (TLS, tokens required)");
                } else if addr.ip().is_loopback() {
                    tracing::info!(%addr, "listening (plain text on loopback, tokens required)");
                } else {
                    tracing::warn!(%addr, "listening in PLAIN TEXT off loopback (--insecure-plaintext): tokens cross the network in the clear");
                }
                let router = builder.add_service(gate.clone().via(gate::Via::Tcp));
                servers.spawn(async move {
                    router
                        .serve_with_incoming_shutdown(
                            gate::counted(
                                // No Nagle: small HTTP/2 frames would wait for the
                                // peer's delayed ACK.
                                tokio_stream::StreamExt::map(
                                    TcpListenerStream::new(listener),
                                    |c| {
                                        if let Ok(s) = &c {
                                            let _ = s.set_nodelay(true);
                                        }
                                        c
                                    },
                                ),
                                conns,
                                handshakes,
                            ),
                            stopped,
                        )
                        .await
                        .with_context(|| format!("serving on {addr}"))
                });
            }
        }
    }
    if let (Some(addr), Some(start)) = (args.e2b_listen, e2b) {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for the E2B API on {addr}"))?;
        tracing::info!(
            %addr,
            tls = args.e2b_tls_cert.is_some(),
            domain = args.e2b_domain.as_deref().unwrap_or(""),
            "E2B-compatible API listening"
        );
        let ctx = FrontendContext {
            daemon: d.clone(),
            auth: auth_for_frontend.clone(),
            state_dir: state_dir.join("e2b"),
            listener,
            stop: stop_rx.clone(),
            domain: args.e2b_domain.clone(),
            tls: args.e2b_tls_cert.clone().zip(args.e2b_tls_key.clone()),
        };
        servers.spawn(start(ctx));
    }
    // Until `stop`, or until one listener ends (then all do).
    tokio::pin!(stop);
    let mut result = Ok(());
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = &mut stop, if !stopping => {
                stopping = true;
                let _ = stop_tx.send(true);
            }
            r = servers.join_next() => {
                let Some(r) = r else { break };
                if let Err(e) = r.context("a listener's task failed").and_then(|r| r)
                    && result.is_ok()
                {
                    result = Err(e);
                }
                stopping = true;
                let _ = stop_tx.send(true);
            }
        }
    }
    tracing::info!("shutting down");
    d.shutdown().await;
    result
}

/// The HTTP/2 settings every listener shares.
fn server_builder(streams: u32) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(streams)
        .concurrency_limit_per_connection(streams as usize)
        // What a peer may send before the daemon reads it: per stream and per
        // connection (flow control), and in headers.
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(2 << 20)
        .http2_max_header_list_size(64 << 10)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
}
