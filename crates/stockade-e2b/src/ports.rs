//! A sandbox's own ports through the E2B origin, as E2B's edge proxy forwards them:
//! `get_host(port)` names `<port>-<id>.DOMAIN` in domain mode, and on one origin the
//! `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers name them. Each request goes to a
//! fresh connection to that port on the sandbox's own loopback (the daemon's
//! `connect_port`, through the sandbox's agent), as HTTP/1.1.
//!
//! The caller shows the sandbox's access token (`X-Access-Token`) or its traffic
//! token (`E2B-Traffic-Access-Token`), and neither reaches the code's server: the
//! tokens and the routing headers are taken off before the request is forwarded.
//! An upgrade (a WebSocket) is asked of the code's server as it came; when that
//! server switches protocols, both connections are joined and carry bytes until
//! either side closes.

use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

use crate::api::error;
use crate::state::E2b;

/// Headers that are the proxy's, not the request's.
const OURS: &[&str] = &[
    "x-access-token",
    "e2b-traffic-access-token",
    "e2b-sandbox-id",
    "e2b-sandbox-port",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "upgrade",
];

pub async fn handle(e2b: Arc<E2b>, id: &str, port: &str, req: Request) -> Response {
    let Some(port) = port.parse::<u16>().ok().filter(|p| *p > 0) else {
        return error(
            400,
            &format!("port {port:?} is not a port number (1 to 65535)"),
        );
    };
    let s = match crate::envd::reach_either(&e2b, id, req.headers()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Err(r) = crate::conn::authenticated(&req, &e2b.conns, &s.tenant) {
        return *r;
    }
    e2b.wake(&s).await;
    if s.paused_at().is_some() {
        return error(502, &format!("sandbox {id} is paused; resume it first"));
    }
    let stream = match e2b.daemon.connect_port(&s.tenant, &s.daemon_id, port).await {
        Ok(stream) => stream,
        Err(e) => {
            let msg = e.to_string().replace(&s.daemon_id, id);
            return error(502, &format!("port {port} of sandbox {id}: {msg}"));
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(pair) => pair,
        Err(e) => return error(502, &format!("port {port} of sandbox {id}: {e}")),
    };
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut req = req;
    // `Connection: upgrade` with an `Upgrade` protocol: kept for the code's server.
    let upgrade = req
        .headers()
        .get(axum::http::header::UPGRADE)
        .cloned()
        .filter(|_| {
            req.headers()
                .get_all(axum::http::header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
    let client_side = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    for h in OURS {
        parts.headers.remove(*h);
    }
    if let Some(proto) = upgrade {
        parts.headers.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("upgrade"),
        );
        parts.headers.insert(axum::http::header::UPGRADE, proto);
    }
    // Origin form, as a server expects it from a client.
    parts.uri = parts
        .uri
        .path_and_query()
        .map(axum::http::uri::PathAndQuery::as_str)
        .unwrap_or("/")
        .parse()
        .unwrap_or_else(|_| axum::http::Uri::from_static("/"));
    parts.version = axum::http::Version::HTTP_11;
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(mut resp) => {
            if resp.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS
                && let Some(client_side) = client_side
            {
                let server_side = hyper::upgrade::on(&mut resp);
                tokio::spawn(async move {
                    if let (Ok(c), Ok(s)) = (client_side.await, server_side.await) {
                        let _ = tokio::io::copy_bidirectional(
                            &mut TokioIo::new(c),
                            &mut TokioIo::new(s),
                        )
                        .await;
                    }
                });
            }
            resp.map(axum::body::Body::new).into_response()
        }
        Err(e) => error(
            502,
            &format!("port {port} of sandbox {id} did not answer the request as HTTP: {e}"),
        ),
    }
}
