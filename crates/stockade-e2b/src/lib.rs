//! The E2B-compatible API of `stockade serve --e2b-listen ADDR:PORT`: one HTTP origin
//! that serves the control plane (`/v2/sandboxes`, `/sandboxes/...`), and, routed by
//! the `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers every SDK sends, each sandbox's
//! envd (port 49983: Connect RPCs for processes and files, `/files`, `/health`) and
//! its code interpreter (port 49999: `/execute`). So the unmodified E2B SDKs run on
//! Stockade's sandboxes with `E2B_API_URL` and `E2B_SANDBOX_URL` both set to this
//! origin. The wire protocol is described in the team's notes (`e2b/WIRE.md`).
//!
//! Everything goes through the daemon's own calls ([`stockade_server::Daemon`]), so
//! tenants, quotas, limits and path safety are the daemon's.

mod api;
mod connect;
mod envd;
mod files;
mod interp;
mod process;
mod state;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::response::{IntoResponse, Response};
use stockade_server::FrontendContext;

pub use state::E2b;

/// Largest request body: a file upload of the agent's file cap plus multipart framing.
pub const MAX_BODY_BYTES: usize = (stockade::files::MAX_FILE_BYTES as usize) + (1 << 20);

/// The front end for [`stockade_server::run_with`].
pub fn frontend(
    ctx: FrontendContext,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>> {
    Box::pin(serve(ctx))
}

/// Serves until the daemon stops.
pub async fn serve(ctx: FrontendContext) -> anyhow::Result<()> {
    let e2b = Arc::new(E2b::new(ctx.daemon, ctx.auth, ctx.state_dir)?);
    tokio::spawn(e2b.clone().expirer());
    let app = router(e2b.clone());
    let mut stop = ctx.stop;
    let served = axum::serve(ctx.listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    // The front end's table (tokens, timeouts) lives in memory: its sandboxes would
    // be unreachable after a restart, so they end with it.
    e2b.kill_all().await;
    served?;
    Ok(())
}

/// The one router: the sandbox headers pick envd or the interpreter, else the API.
pub fn router(e2b: Arc<E2b>) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(e2b)
}

async fn dispatch(State(e2b): State<Arc<E2b>>, req: Request) -> Response {
    let mut r = route(e2b, req).await;
    // An error may come before the request's body was read: close the connection
    // after it, so the client does not write its next request into a closed one.
    if r.status().is_client_error() || r.status().is_server_error() {
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    r
}

async fn route(e2b: Arc<E2b>, req: Request) -> Response {
    let h = req.headers();
    // Refused on its declared length, before any of it is read.
    let declared = h
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return api::error(
            413,
            &format!(
                "the request body is over {MAX_BODY_BYTES} bytes, the most one request carries"
            ),
        );
    }
    let id = h
        .get("e2b-sandbox-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let port = h
        .get("e2b-sandbox-port")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match (id, port) {
        (None, None) => api::handle(e2b, req).await,
        (Some(id), Some(port)) => match port.as_str() {
            "49983" => envd::handle(e2b, &id, req).await,
            "49999" => interp::handle(e2b, &id, req).await,
            other => api::error(
                502,
                &format!("port {other} of sandbox {id} is not open (envd is 49983, the code interpreter 49999)"),
            ),
        },
        _ => api::error(
            400,
            "send both E2b-Sandbox-Id and E2b-Sandbox-Port (or neither, for the control plane)",
        ),
    }
    .into_response()
}
