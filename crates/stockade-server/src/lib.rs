//! `stockaded`, the Stockade daemon: the gRPC API of `stockade-client` over the
//! providers, with tenants and quotas, warm pools, a reaper for lifetimes and idle
//! timeouts, durable state that survives `kill -9`, and Prometheus metrics.
//!
//! [`ServeArgs`] are the flags of both `stockaded` and `stockade serve`; [`run`]
//! serves until SIGINT or SIGTERM.

pub mod auth;
pub mod daemon;
pub mod gate;
pub mod metrics;
mod service;
pub mod store;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use stockade_client::{MAX_FILE_MESSAGE_BYTES, MAX_MESSAGE_BYTES, StockadeServer};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

pub use daemon::{Daemon, Limits};

/// Where the daemon listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A unix socket (mode 0600).
    Unix(PathBuf),
    /// TCP; every call then needs a token.
    Tcp(SocketAddr),
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Listen, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            let p = p.strip_prefix("//").unwrap_or(p);
            if !p.starts_with('/') {
                return Err(format!(
                    "listen address {s:?}: the socket path must be absolute"
                ));
            }
            return Ok(Listen::Unix(p.into()));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            return a
                .parse()
                .map(Listen::Tcp)
                .map_err(|e| format!("listen address {s:?}: {e} (want tcp:ADDR:PORT)"));
        }
        Err(format!(
            "listen address {s:?} is neither unix:PATH nor tcp:ADDR:PORT"
        ))
    }
}

/// Flags of `stockaded` and `stockade serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// `unix:PATH` or `tcp:ADDR:PORT` (default: unix socket /run/stockaded.sock for
    /// root, else $XDG_RUNTIME_DIR/stockaded.sock).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<Listen>,
    /// Tokens, one per line; each token is a tenant. Required with a `tcp:` address.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<SocketAddr>,
    /// The daemon's state (default: /run/stockaded for root, else
    /// $XDG_RUNTIME_DIR/stockaded). It describes live sandboxes, which never outlive
    /// a reboot, so it belongs on tmpfs: it must survive the daemon's death, not the
    /// host's, and on tmpfs a commit costs no disk flush.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
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
    /// Most client connections open at once (more wait to be accepted).
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Most calls at once on one connection (HTTP/2 concurrent streams).
    #[arg(long, default_value_t = 64)]
    pub max_streams_per_connection: u32,
}

/// How many `File` calls (up to 33 MiB of message each) the daemon holds at once.
const FILE_CALLS_AT_ONCE: usize = 8;

/// `/run/stockaded` for root, else `$XDG_RUNTIME_DIR/stockaded`, else
/// `/tmp/stockaded-UID`.
pub fn default_state_dir() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    if uid == 0 {
        return PathBuf::from("/run/stockaded");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("stockaded"),
        None => PathBuf::from(format!("/tmp/stockaded-{uid}")),
    }
}

/// Serves until SIGINT or SIGTERM on a runtime of its own; returns the exit code.
pub fn run(args: ServeArgs) -> i32 {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOCKADE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
    let code = match rt.block_on(serve(args, shutdown_signal())) {
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
    let listen = args
        .listen
        .clone()
        .unwrap_or_else(|| Listen::Unix(stockade_client::default_socket()));
    let auth = match &args.token_file {
        Some(f) => auth::Auth::from_file(f)?,
        None => auth::Auth::none(),
    };
    if matches!(listen, Listen::Tcp(_)) && !auth.required() {
        bail!("listening on TCP needs --token-file (every call must carry a token)");
    }
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
    let limits = Limits {
        sandboxes_per_tenant: args.max_sandboxes_per_tenant,
        pool_per_tenant: args.max_pool_per_tenant,
        sandboxes_total: args.max_sandboxes,
        pool_idle_ttl: Duration::from_secs(args.pool_idle_ttl_secs.max(1)),
        mounts: daemon::MountPolicy::new(
            &args.allow_mounts,
            auth.required(),
            state_dir.join("mounts"),
        )?,
        tenants_untrusted: auth.required(),
        tenant_image_bytes: args.tenant_image_bytes,
        honour_owner_pid: matches!(listen, Listen::Unix(_)),
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
        args.native_state_dir.clone(),
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
    let svc = gate::Gate::new(svc, auth, FILE_CALLS_AT_ONCE);
    let max_conns = args.max_connections;
    let streams = args.max_streams_per_connection.max(1);
    let server = tonic::transport::Server::builder()
        .max_concurrent_streams(streams)
        .concurrency_limit_per_connection(streams as usize)
        // What a peer may send before the daemon reads it: per stream and per
        // connection (flow control), and in headers.
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(2 << 20)
        .http2_max_header_list_size(64 << 10)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(svc);
    match &listen {
        Listen::Unix(path) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            // A socket left by a daemon that died; refuse to steal a live one.
            if path.exists() {
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    bail!("another daemon is listening on {}", path.display());
                }
                std::fs::remove_file(path)
                    .with_context(|| format!("cannot remove stale socket {}", path.display()))?;
            }
            let l = tokio::net::UnixListener::bind(path)
                .with_context(|| format!("cannot listen on {}", path.display()))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("cannot restrict {}", path.display()))?;
            tracing::info!(socket = %path.display(), "listening");
            server
                .serve_with_incoming_shutdown(
                    gate::counted(UnixListenerStream::new(l), max_conns),
                    stop,
                )
                .await
                .context("serving on the unix socket")?;
            let _ = std::fs::remove_file(path);
        }
        Listen::Tcp(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            tracing::info!(%addr, "listening (tokens required)");
            server
                .serve_with_incoming_shutdown(
                    gate::counted(TcpListenerStream::new(l), max_conns),
                    stop,
                )
                .await
                .context("serving on TCP")?;
        }
    }
    tracing::info!("shutting down");
    d.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse_or_say_what_is_wrong() {
        assert_eq!(
            "unix:/run/s.sock".parse::<Listen>().unwrap(),
            Listen::Unix("/run/s.sock".into())
        );
        assert_eq!(
            "unix:///run/s.sock".parse::<Listen>().unwrap(),
            Listen::Unix("/run/s.sock".into())
        );
        assert_eq!(
            "tcp:127.0.0.1:7000".parse::<Listen>().unwrap(),
            Listen::Tcp("127.0.0.1:7000".parse().unwrap())
        );
        for bad in ["unix:rel", "tcp:nohost", "http://x", ""] {
            assert!(
                bad.parse::<Listen>()
                    .unwrap_err()
                    .contains("listen address"),
                "{bad}"
            );
        }
    }
}
