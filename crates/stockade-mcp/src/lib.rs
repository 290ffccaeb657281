//! `stockade mcp`: Stockade's sandboxes as tools for any Model Context Protocol
//! client, over stdio (what desktop clients start) or the streamable HTTP transport.
//!
//! Built on the official Rust SDK (`rmcp`). Sandboxes run in-process on the default
//! provider, or through a daemon (`STOCKADE_HOST` / the default socket). What the
//! model may ask for is the operator's [`policy::OperatorPolicy`]; the defaults are
//! the secure ones. Every sandbox the server creates is destroyed when its client
//! disconnects or the server exits (by its owner pid even on SIGKILL); sessions
//! persist.

pub mod http;
pub mod policy;
pub mod server;
pub mod tools;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use rmcp::ServiceExt;

use policy::{OperatorPolicy, PolicyFile, Workspace};

/// Flags of `stockade mcp`.
#[derive(Args, Debug, Clone, Default)]
pub struct McpArgs {
    /// Serve the streamable HTTP transport at http://ADDR/mcp instead of stdio
    /// (port 0 picks a free one; the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Bearer tokens, one per line (the daemon's token file: each token is a tenant).
    /// Required when --http is not a loopback address.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Host names clients use to reach --http (checked against the Host header;
    /// default: loopback names and the listen address).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Operator policy file (TOML); the flags below override it.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Provider the model may use (repeatable; the first is the default).
    #[arg(long = "allow-provider", value_name = "NAME")]
    pub allow_providers: Vec<String>,
    /// Language run_code accepts (repeatable; default: those that run now with the
    /// default provider, as `stockade languages` lists them).
    #[arg(long = "allow-language", value_name = "LANG")]
    pub allow_languages: Vec<String>,
    /// Image sandbox_create accepts: a reference, or a prefix ending in * (repeatable).
    #[arg(long = "allow-image", value_name = "REF")]
    pub allow_images: Vec<String>,
    /// Let the model ask for network egress (default: never).
    #[arg(long)]
    pub allow_network: bool,
    /// Most memory one sandbox may have, e.g. 2g (default 1g).
    #[arg(long, value_name = "SIZE")]
    pub max_memory: Option<String>,
    /// Most CPUs one sandbox may have (default 1).
    #[arg(long, value_name = "N")]
    pub max_cpus: Option<f64>,
    /// Longest sandbox lifetime in seconds (default 3600).
    #[arg(long, value_name = "SECS")]
    pub max_lifetime: Option<u64>,
    /// Most live sandboxes per token, sessions included (default 8).
    #[arg(long, value_name = "N")]
    pub max_sandboxes: Option<usize>,
    /// Host directory the model may mount, HOST[:rw|:ro] (repeatable; default none).
    #[arg(long = "workspace", value_name = "DIR")]
    pub workspaces: Vec<String>,
}

/// The CLI's global options that `stockade mcp` uses.
#[derive(Debug, Clone, Default)]
pub struct Globals {
    /// `--provider`: the default provider (else `$STOCKADE_PROVIDER` or native).
    pub provider: Option<String>,
    /// `--home`: sessions and images (else `$STOCKADE_HOME` or the default).
    pub home: Option<PathBuf>,
    /// `--direct`: never use a daemon.
    pub direct: bool,
}

/// The policy from the defaults, the file, then the flags.
pub fn build_policy(a: &McpArgs, g: &Globals) -> Result<OperatorPolicy, String> {
    let default = g
        .provider
        .clone()
        .unwrap_or_else(stockade::default_provider_name);
    let mut p = OperatorPolicy::strict(&default);
    if let Some(f) = &a.policy {
        p = p.load(f)?;
    }
    let nonempty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    let mut workspaces = Vec::new();
    for w in &a.workspaces {
        workspaces.push(Workspace::parse(w)?);
    }
    let flags = PolicyFile {
        providers: nonempty(&a.allow_providers),
        languages: nonempty(&a.allow_languages),
        images: nonempty(&a.allow_images),
        allow_network: a.allow_network.then_some(true),
        max_memory: a.max_memory.clone(),
        max_cpus: a.max_cpus,
        max_lifetime_secs: a.max_lifetime,
        max_sandboxes: a.max_sandboxes,
        workspaces,
        ..PolicyFile::default()
    };
    let mut p = p.apply_file(flags).map_err(|e| e.join("; "))?;
    // Unless the operator chose the languages, `run_code` offers those that run now on
    // the default provider (host interpreters, images in the store, WASI runtimes).
    let table: Vec<String> = stockade::spec::PRESETS
        .iter()
        .map(|l| l.names[0].to_string())
        .collect();
    if p.languages == table {
        let home = g.home.clone().unwrap_or_else(stockade::host::stockade_home);
        let store = stockade_image::Store::open(home.join("images")).map_err(|e| e.to_string())?;
        p.languages = stockade::languages::ready_languages(&p.providers[0], &store, &home)
            .map_err(|e| e.to_string())?;
    }
    Ok(p)
}

/// Runs the server until the client disconnects (stdio) or a signal (both);
/// returns the process exit code.
pub fn run(args: McpArgs, g: Globals) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stockade mcp: error: cannot start the runtime: {e}");
            return 70;
        }
    };
    let code = rt.block_on(async move {
        match serve(args, g).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("stockade mcp: error: {e:#}");
                64
            }
        }
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

async fn serve(args: McpArgs, g: Globals) -> anyhow::Result<()> {
    let policy = build_policy(&args, &g).map_err(anyhow::Error::msg)?;
    let remote = if g.direct {
        None
    } else {
        stockade_client::RemoteProvider::from_env().await?
    };
    let home = g.home.clone().unwrap_or_else(stockade_image::stockade_home);
    let backend = match remote {
        Some(r) => server::Backend::Remote(Box::new(r)),
        None => server::Backend::Embedded(embedded(&policy, &home).await?),
    };
    let shared = server::Shared::new(server::Options {
        policy,
        backend,
        home,
    });
    match args.http {
        Some(addr) => http::serve(shared, addr, &args).await,
        None => {
            let handler = shared.connect();
            let conn = handler.conn_id();
            let running = handler
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| anyhow::anyhow!("MCP handshake on stdio failed: {e}"))?;
            tokio::select! {
                _ = running.waiting() => {}
                _ = shutdown_signal() => {}
            }
            shared.release(conn).await;
            shared.release_all().await;
            Ok(())
        }
    }
}

/// The daemon this server embeds when no daemon answers: the operator policy is the
/// profile of every tenant (each token's, and the stdio client's).
async fn embedded(
    policy: &OperatorPolicy,
    home: &std::path::Path,
) -> anyhow::Result<stockade_server::embedded::Embedded> {
    use stockade_server::admission::{Admission, Host};
    stockade_server::embedded::Embedded::start(stockade_server::embedded::EmbeddedOptions {
        home: home.to_path_buf(),
        default_provider: policy.providers[0].clone(),
        admission: Admission::only(policy.profile(Host::this())),
        sandboxes_per_tenant: policy.max_sandboxes,
        mount_dirs: policy.workspaces.iter().map(|w| w.host.clone()).collect(),
    })
    .await
}

/// SIGTERM, SIGINT or SIGHUP.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 17: run_code offers only the languages that run with this configuration.
    #[test]
    fn run_code_offers_only_languages_that_run_here() {
        let home = tempfile::tempdir().unwrap();
        let g = Globals {
            provider: Some("native".into()),
            home: Some(home.path().into()),
            direct: true,
        };
        let p = build_policy(&McpArgs::default(), &g).unwrap();
        let store = stockade_image::Store::open(home.path().join("images")).unwrap();
        let ready = stockade::languages::ready_languages("native", &store, home.path()).unwrap();
        assert_eq!(p.languages, ready);
        assert!(
            p.languages.iter().any(|l| l == "python"),
            "{:?}",
            p.languages
        );
        let all = stockade::languages::languages("native", &store, home.path()).unwrap();
        for l in all.iter().filter(|l| !l.ready) {
            assert!(!p.languages.contains(&l.language.to_string()), "{l:?}");
        }
        let defs = tools::definitions(Some(&p));
        let run_code = defs.iter().find(|d| d["name"] == "run_code").unwrap();
        assert_eq!(
            run_code["inputSchema"]["properties"]["language"]["enum"],
            serde_json::json!(ready)
        );
        // The operator's own list stands.
        let a = McpArgs {
            allow_languages: vec!["ruby".into()],
            ..McpArgs::default()
        };
        assert_eq!(build_policy(&a, &g).unwrap().languages, ["ruby"]);
    }
}
