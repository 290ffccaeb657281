//! The streamable HTTP transport: rmcp's `StreamableHttpService` at `/mcp`, behind a
//! bearer-token check that uses the daemon's token file and tenant names.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use stockade_server::auth::Auth;
use tokio_util::sync::CancellationToken;

use crate::McpArgs;
use crate::server::{Shared, Tenant};

/// Maps the request's bearer token to its tenant, or answers 401.
async fn authenticate(auth: Arc<Auth>, mut req: Request, next: Next) -> Response {
    match auth.tenant(req.headers()) {
        Ok(t) => {
            req.extensions_mut().insert(Tenant(t));
            next.run(req).await
        }
        Err(status) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{}\n", status.message()),
        )
            .into_response(),
    }
}

/// Answers as the MCP transport spec and its official clients expect where rmcp's
/// answer differs: a session's `DELETE` is `204 No Content` (the Python client logs
/// `202` as a failed termination on every disconnect), and a body that is not JSON
/// is a JSON-RPC parse error (`400`, code -32700), not `415`.
async fn conform(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let json_body = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let r = next.run(req).await;
    if method == axum::http::Method::DELETE && r.status() == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    if method == axum::http::Method::POST
        && json_body
        && r.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
    {
        let why = axum::body::to_bytes(r.into_body(), 4096)
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32700, "message": format!("Parse error: {why}")},
        });
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    r
}

/// Serves until a signal; then destroys every sandbox the server created.
pub async fn serve(shared: Arc<Shared>, addr: SocketAddr, args: &McpArgs) -> anyhow::Result<()> {
    let auth = match &args.token_file {
        Some(f) => Auth::from_file(f)?,
        None => Auth::none(),
    };
    if !addr.ip().is_loopback() && !auth.required() {
        anyhow::bail!(
            "--http {addr} is not a loopback address: anyone who can reach it could run code; \
             pass --token-file FILE (one token of 16+ characters per line), or listen on \
             127.0.0.1"
        );
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.push(local.ip().to_string());
    hosts.extend(args.allowed_hosts.iter().cloned());
    let ct = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_cancellation_token(ct.child_token());
    let factory = {
        let shared = shared.clone();
        move || Ok(shared.connect())
    };
    let mcp = StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
    let auth = Arc::new(auth);
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(conform))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| authenticate(auth.clone(), req, next),
        ));
    eprintln!("stockade mcp: listening on http://{local}/mcp");
    let stop = ct.clone();
    // No Nagle: a response's head and body are separate small writes, and the second
    // would wait for the client's delayed ACK (40 ms per call).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            crate::shutdown_signal().await;
            stop.cancel();
        })
        .await?;
    shared.release_all().await;
    Ok(())
}
