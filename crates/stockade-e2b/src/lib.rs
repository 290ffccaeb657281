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
mod conn;
pub mod connect;
mod envd;
mod files;
mod home;
mod interp;
mod lifecycle;
mod network;
mod ports;
mod process;
mod state;
mod templates;
mod tls;
mod watch;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::response::{IntoResponse, Response};
use stockade_server::FrontendContext;

pub use state::E2b;

/// The request messages envd's methods decode from Connect bodies, for tests and the
/// fuzz targets (`fuzz/`).
pub mod messages {
    pub use crate::process::{SelectRequest, StartRequest};
    pub use crate::watch::WatchRequest;
}

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
    if let Some(d) = &ctx.domain {
        check_domain(d)?;
    }
    let tls = match &ctx.tls {
        Some((cert, key)) => Some(tls::server_config(cert, key)?),
        None => None,
    };
    let mut e2b = E2b::new(ctx.daemon, ctx.auth, ctx.state_dir)?;
    e2b.domain = ctx.domain;
    e2b.tls = tls.is_some();
    // The homes belong to the sandbox user as the default provider maps it (gVisor and
    // docker show a directory's host owner as it is).
    let (_, provider) = e2b.daemon.provider("")?;
    e2b.writable_images = !matches!(provider.name(), "gvisor" | "wasm");
    e2b.home_owner = match provider.host_ids(1000, 1000).await {
        Ok(ids) => Some(ids),
        Err(e) => {
            tracing::warn!("E2B homes stay root's: the default provider's ids are unknown: {e}");
            None
        }
    };
    let e2b = Arc::new(e2b);
    e2b.warm_configured();
    tokio::spawn(e2b.clone().expirer());
    let app = router(e2b.clone());
    let mut stop = ctx.stop;
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let listener = conn::Guarded::new(ctx.listener);
    let served = match tls {
        Some(cfg) => {
            let l = tls::TlsListener::new(listener, cfg)?;
            axum::serve(
                l,
                app.into_make_service_with_connect_info::<conn::Standing>(),
            )
            .with_graceful_shutdown(stopped)
            .await
        }
        None => {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<conn::Standing>(),
            )
            .with_graceful_shutdown(stopped)
            .await
        }
    };
    // The front end's table (tokens, timeouts) lives in memory: its sandboxes would
    // be unreachable after a restart, so they end with it.
    e2b.kill_all().await;
    served?;
    Ok(())
}

/// Refuses a `--e2b-domain` that is not a plain lowercase DNS name.
fn check_domain(d: &str) -> anyhow::Result<()> {
    let ok = !d.is_empty()
        && d.len() <= 200
        && d.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    if !ok {
        anyhow::bail!(
            "--e2b-domain {d:?} is not a lowercase DNS name (labels of a-z, 0-9 and -, \
             separated by dots, e.g. e2b.example.com)"
        );
    }
    Ok(())
}

/// `(sandbox id, port)` of a host `<port>-<id>.<domain>[:port]`.
fn sandbox_host(host: &str, domain: &str) -> Option<(String, String)> {
    let host = host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    let label = host
        .to_ascii_lowercase()
        .strip_suffix(domain)?
        .strip_suffix('.')?
        .to_string();
    let (port, id) = label.split_once('-')?;
    let valid = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    valid.then(|| (id.to_string(), port.to_string()))
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
    // An error may come before the request's body was read: unless what was left of
    // it was read before the answer ([`answered`]), close the connection after it, so
    // the client does not write its next request into a closed one.
    let drained = r.extensions().get::<Drained>().is_some();
    if !drained && (r.status().is_client_error() || r.status().is_server_error()) {
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
    let header = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    // The host names the sandbox and port in domain mode, as at E2B's edge proxy;
    // else (one origin for all, `E2B_SANDBOX_URL`) the headers every SDK sends do.
    let by_host = e2b.domain.as_deref().and_then(|d| {
        let host = header("host").or_else(|| req.uri().host().map(str::to_string))?;
        sandbox_host(&host, d)
    });
    let (id, port) = match by_host {
        Some((id, port)) => (Some(id), Some(port)),
        None => (header("e2b-sandbox-id"), header("e2b-sandbox-port")),
    };
    match (id, port) {
        // A signed file URL on one origin names no sandbox: its signature does.
        (None, None) if envd::is_signed_files(&req) => {
            answered(req, |r| envd::handle_signed_anywhere(e2b, r)).await
        }
        // A template build's file upload: its one-use URL is its credential.
        (None, None)
            if req.method() == axum::http::Method::PUT
                && req.uri().path().starts_with(templates::UPLOAD_PATH) =>
        {
            let token = req.uri().path()[templates::UPLOAD_PATH.len()..].to_string();
            templates::upload(&e2b, &token, req.into_body()).await
        }
        (None, None) => answered(req, |r| api::handle(e2b, r)).await,
        (Some(id), Some(port)) => match port.as_str() {
            "49983" => answered(req, |r| envd::handle(e2b, &id, r)).await,
            "49999" => answered(req, |r| interp::handle(e2b, &id, r)).await,
            // A sandbox's own server answers as it likes, reading the body as it goes.
            other => ports::handle(e2b, &id, other, req).await.into_response(),
        },
        _ => api::error(
            400,
            "send both E2b-Sandbox-Id and E2b-Sandbox-Port (or neither, for the control plane)",
        )
        .into_response(),
    }
}

/// What a refused request's body may still carry that is read before the answer.
const DRAIN_BYTES: usize = 64 << 20;
/// How long reading it may take.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Marks an answer after which the request's body was read to its end.
#[derive(Clone, Copy)]
struct Drained;

/// Answers `req` with `handler`; when that answer is a refusal, reads what is left of
/// the request's body first (up to [`DRAIN_BYTES`], within [`DRAIN_TIME`]). A client
/// still sending its body then hears the refusal: closing a connection with unread
/// bytes resets it under the client's write, and Node's fetch reports that as `EPIPE`
/// and loses the answer.
async fn answered<F, Fut, R>(req: Request, handler: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: std::future::Future<Output = R>,
    R: IntoResponse,
{
    use futures_util::StreamExt;
    let (parts, body) = req.into_parts();
    let rest = Arc::new(tokio::sync::Mutex::new(body.into_data_stream()));
    let feed = futures_util::stream::unfold(rest.clone(), |s| async move {
        let item = s.lock().await.next().await?;
        Some((item, s))
    });
    let req = Request::from_parts(parts, axum::body::Body::from_stream(feed));
    let mut r = handler(req).await.into_response();
    if r.status().is_client_error() || r.status().is_server_error() {
        let read_all = tokio::time::timeout(DRAIN_TIME, async {
            let mut s = rest.lock().await;
            let mut left = DRAIN_BYTES;
            while let Some(chunk) = s.next().await {
                match chunk {
                    Ok(c) if c.len() <= left => left -= c.len(),
                    _ => return false,
                }
            }
            true
        })
        .await;
        if read_all == Ok(true) {
            r.extensions_mut().insert(Drained);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_hosts_are_parsed_in_the_domain_only() {
        let d = "e2b.test";
        assert_eq!(
            sandbox_host("49983-iabc123.e2b.test", d),
            Some(("iabc123".into(), "49983".into()))
        );
        assert_eq!(
            sandbox_host("49999-iabc.E2B.test:443", d),
            Some(("iabc".into(), "49999".into()))
        );
        for bad in [
            "api.e2b.test",
            "49983-iabc.other.test",
            "49983-iabc.xe2b.test",
            "x-iabc.e2b.test",
            "49983-.e2b.test",
            "49983-a.b.e2b.test",
            "49983-I_x.e2b.test",
            "e2b.test",
        ] {
            assert_eq!(sandbox_host(bad, d), None, "{bad}");
        }
        assert!(check_domain("e2b.example.com").is_ok());
        for bad in ["", "E2B.test", "a..b", "-a.b", "a_b.c", ".a"] {
            assert!(check_domain(bad).is_err(), "{bad}");
        }
    }
}
