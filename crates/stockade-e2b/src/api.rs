//! The control plane: create, connect, get, list, kill and time out sandboxes.
//! Errors are `{"code": <status>, "message": ...}`, as the SDKs read them.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use stockade::spec::Network;

use crate::state::{DEFAULT_TIMEOUT_SECS, E2b, ENVD_VERSION, MAX_TIMEOUT_SECS, Sbx, TEMPLATES};

/// Largest control-plane request body.
const MAX_API_BODY: usize = 1 << 20;

/// An error answer with `code` in the body.
pub fn error(status: u16, message: &str) -> Response {
    let s = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        s,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"code": status, "message": message}).to_string(),
    )
        .into_response()
}

/// Which routes an error answers on: the control plane, or envd's `/files`.
#[derive(Clone, Copy)]
pub(crate) enum Route {
    Api,
    Files,
}

/// The one table of HTTP statuses for Stockade's error codes. A limit is 429 on the
/// control plane (the SDKs raise it as a rate limit) and 413 on `/files` (a file over
/// the size limit); unavailable and timeout are 503 and 504, which the SDKs retry.
pub(crate) fn status_of(code: stockade::ErrorCode, route: Route) -> u16 {
    use stockade::ErrorCode as C;
    match (code, route) {
        (C::NotFound, _) => 404,
        (C::InvalidSpec, _) => 400,
        (C::PolicyDenied, _) => 403,
        (C::LimitExceeded, Route::Api) => 429,
        (C::LimitExceeded, Route::Files) => 413,
        (C::Unavailable, _) => 503,
        (C::Timeout, _) => 504,
        (C::Internal, _) => 500,
    }
}

fn ok(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

pub fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    /// `allow_out` and `deny_out` (see [`crate::network`]).
    network: Option<crate::network::EgressOpts>,
    /// Pause at the timeout instead of killing.
    auto_pause: Option<bool>,
    /// `{"enabled": bool}`: a request to the paused sandbox resumes it.
    auto_resume: Option<AutoResume>,
}

#[derive(Deserialize)]
struct AutoResume {
    #[serde(default)]
    enabled: bool,
}

#[derive(Deserialize, Default)]
struct TimeoutBody {
    timeout: Option<u64>,
}

fn sandbox_json(e2b: &E2b, s: &Sbx) -> Value {
    json!({
        "templateID": s.template,
        "sandboxID": s.id,
        "clientID": "stockade",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": s.token,
        "trafficAccessToken": s.traffic,
        "domain": e2b.domain,
        "alias": s.template,
    })
}

fn detail_json(e2b: &E2b, s: &Sbx) -> Value {
    json!({
        "templateID": s.template,
        "alias": s.template,
        "sandboxID": s.id,
        "clientID": "stockade",
        "startedAt": rfc3339(s.started_ms),
        "endAt": rfc3339(s.shown_end_ms()),
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": s.token,
        "domain": e2b.domain,
        "cpuCount": s.cpus,
        "memoryMB": s.memory_mb,
        "diskSizeMB": 0,
        "metadata": s.metadata,
        "state": if s.paused_at().is_some() { "paused" } else { "running" },
        "lifecycle": {
            "onTimeout": if s.lifecycle.pause_on_timeout { "pause" } else { "kill" },
            "autoResume": s.lifecycle.auto_resume,
        },
    })
}

/// Parses the `metadata` filter: `k=v&k2=v2`, keys and values percent-encoded.
fn metadata_filter(q: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(q.as_bytes()) {
        if k == "metadata" {
            for (mk, mv) in form_urlencoded::parse(v.as_bytes()) {
                out.insert(mk.into_owned(), mv.into_owned());
            }
        }
    }
    out
}

/// Serves one control-plane request.
pub async fn handle(e2b: Arc<E2b>, req: Request) -> Response {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let method = req.method().clone();
    let origin = format!(
        "{}://{}",
        if e2b.tls { "https" } else { "http" },
        req.headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("localhost")
    );
    let path = req.uri().path().trim_end_matches('/').to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let Some(tenant) = e2b.tenant(key.as_deref()) else {
        let msg = if key.is_none() {
            "missing X-API-KEY: set E2B_API_KEY to a token of the daemon's --token-file"
        } else {
            "X-API-KEY refused: it is not a token of the daemon's --token-file"
        };
        return error(401, msg);
    };
    if let Err(r) = crate::conn::authenticated(&req, &e2b.conns, &tenant) {
        return *r;
    }
    let Ok(body) = to_bytes(req.into_body(), MAX_API_BODY).await else {
        return error(413, "the request body is over 1 MiB");
    };
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(r) =
        crate::templates::handle(&e2b, &tenant, &method, &parts, &query, &origin, &body).await
    {
        return r;
    }
    match (method, parts.as_slice()) {
        (Method::POST, ["v2" | "", "sandboxes"] | ["sandboxes"]) => {
            create(&e2b, &tenant, &body).await
        }
        (Method::GET, ["v2", "sandboxes"] | ["sandboxes"]) => list(&e2b, &tenant, &query),
        (Method::GET, ["sandboxes", "metrics"]) => list_metrics(&e2b, &tenant, &query).await,
        (Method::GET, ["sandboxes", id]) => match e2b.get(&tenant, id) {
            Some(s) => ok(StatusCode::OK, &detail_json(&e2b, &s)),
            None => not_found(id),
        },
        (Method::DELETE, ["sandboxes", id]) => {
            if e2b.kill(&tenant, id).await {
                StatusCode::NO_CONTENT.into_response()
            } else {
                not_found(id)
            }
        }
        (Method::POST, ["sandboxes", id, "timeout"]) => {
            let t: TimeoutBody = match parse(&body) {
                Ok(t) => t,
                Err(r) => return *r,
            };
            let Some(secs) = t.timeout else {
                return error(400, "the body needs \"timeout\" (seconds from now)");
            };
            match e2b.get(&tenant, id) {
                Some(s) => {
                    s.set_end_ms(stockade::now_ms() + secs.min(MAX_TIMEOUT_SECS) * 1000);
                    StatusCode::NO_CONTENT.into_response()
                }
                None => not_found(id),
            }
        }
        (Method::POST, ["v2" | "", "sandboxes", id, "connect"] | ["sandboxes", id, "connect"]) => {
            let t: TimeoutBody = if body.is_empty() {
                TimeoutBody::default()
            } else {
                match parse(&body) {
                    Ok(t) => t,
                    Err(r) => return *r,
                }
            };
            let Some(s) = e2b.get(&tenant, id) else {
                return not_found(id);
            };
            // A paused sandbox is resumed (201); a running one's timeout is only
            // ever extended (200).
            match e2b.resume(&s, t.timeout).await {
                Ok(true) => ok(StatusCode::CREATED, &sandbox_json(&e2b, &s)),
                Ok(false) => {
                    if let Some(secs) = t.timeout {
                        let want = stockade::now_ms() + secs.min(MAX_TIMEOUT_SECS) * 1000;
                        if want > s.end_ms() {
                            s.set_end_ms(want);
                        }
                    }
                    ok(StatusCode::OK, &sandbox_json(&e2b, &s))
                }
                Err(e) => failed(&e),
            }
        }
        (Method::POST, ["sandboxes", id, "resume"]) => {
            let t: TimeoutBody = if body.is_empty() {
                TimeoutBody::default()
            } else {
                match parse(&body) {
                    Ok(t) => t,
                    Err(r) => return *r,
                }
            };
            let Some(s) = e2b.get(&tenant, id) else {
                return not_found(id);
            };
            match e2b.resume(&s, t.timeout).await {
                Ok(true) => ok(StatusCode::CREATED, &sandbox_json(&e2b, &s)),
                Ok(false) => error(409, &format!("sandbox {id:?} is running, not paused")),
                Err(e) => failed(&e),
            }
        }
        (Method::GET, ["sandboxes", id, "metrics"]) => match e2b.get(&tenant, id) {
            Some(s) => metrics_between(&e2b, &s, &query).await,
            None => not_found(id),
        },
        (Method::POST, ["sandboxes", id, "fork"]) => {
            copy_refused(&e2b, &tenant, id, stockade::Verb::Fork, "fork").await
        }
        (Method::POST, ["sandboxes", id, "snapshots"]) => {
            let b: crate::templates::snapshot::Body = if body.is_empty() {
                Default::default()
            } else {
                match parse(&body) {
                    Ok(b) => b,
                    Err(r) => return *r,
                }
            };
            let Some(s) = e2b.get(&tenant, id) else {
                return not_found(id);
            };
            // A copy of its memory is what no sandbox here can give; asked for by
            // name, that is refused. Asked for by no one (the API's default, all the
            // JavaScript SDK sends) a snapshot is of its files.
            if b.memory == Some(true) {
                return copy_refused(
                    &e2b,
                    &tenant,
                    id,
                    stockade::Verb::Snapshots,
                    "a snapshot with memory",
                )
                .await;
            }
            match crate::templates::snapshot::take(&e2b, &s, b.name.as_deref()).await {
                Ok(r) => r,
                Err((code, m)) => error(code, &m),
            }
        }
        (Method::GET, ["snapshots"]) => crate::templates::snapshot::list(&e2b, &tenant, &query),
        (Method::PUT, ["sandboxes", id, "network"]) => {
            let o: crate::network::EgressOpts = match parse(&body) {
                Ok(o) => o,
                Err(r) => return *r,
            };
            let Some(s) = e2b.get(&tenant, id) else {
                return not_found(id);
            };
            let network = match crate::network::network_of(&o, None, crate::network::At::Update) {
                // A policy is replaced by a policy: denying everything is an empty one.
                Ok(Network::None) => Network::Policy(Default::default()),
                Ok(Network::Egress) => {
                    return error(
                        400,
                        "a sandbox whose egress is a policy keeps one: list what may be \
                         reached in allow_out, with deny_out [\"0.0.0.0/0\"]",
                    );
                }
                Ok(n) => n,
                Err(m) => return error(400, &m),
            };
            match e2b
                .daemon
                .set_network(&tenant, &s.daemon_id, &network)
                .await
            {
                Ok(()) => StatusCode::NO_CONTENT.into_response(),
                Err(e) => failed(&e),
            }
        }
        (Method::POST, ["sandboxes", id, "pause"]) => {
            let Some(s) = e2b.get(&tenant, id) else {
                return not_found(id);
            };
            match e2b.pause(&s).await {
                Ok(true) => StatusCode::NO_CONTENT.into_response(),
                Ok(false) => error(409, &format!("sandbox {id:?} is already paused")),
                Err(e) => failed(&e),
            }
        }
        (m, _) => error(
            404,
            &format!(
                "no control-plane route {m} {path} (this server has /v2/sandboxes, /v3/templates and the template build routes, /sandboxes/ID, /sandboxes/ID/timeout, /sandboxes/ID/connect, /sandboxes/ID/metrics, /sandboxes/metrics, /sandboxes/ID/pause, /sandboxes/ID/resume, /sandboxes/ID/snapshots, /snapshots, PUT /sandboxes/ID/network; /sandboxes/ID/fork refuses with the reason)"
            ),
        ),
    }
}

/// `fork()` and a snapshot with memory: copies of a running sandbox's memory and
/// processes, which no E2B sandbox here can give: the native, docker and gVisor
/// providers cannot copy one at all, and a microVM copy cannot take the home each E2B
/// sandbox has shared from the host. Refused with the provider's own reason (409),
/// naming the snapshot of its files, which every provider can take.
async fn copy_refused(
    e2b: &E2b,
    tenant: &str,
    id: &str,
    verb: stockade::Verb,
    what: &str,
) -> Response {
    let Some(s) = e2b.get(tenant, id) else {
        return not_found(id);
    };
    let provider = match e2b.daemon.inspect(tenant, &s.daemon_id).await {
        Ok((info, _)) => info.provider,
        Err(e) => return failed(&e),
    };
    let reason = match e2b.daemon.provider(&provider) {
        Ok((_, p)) if p.verbs().has(verb) => "its home /home/user is a directory shared from the \
             host, which a copy of its memory cannot take"
            .to_string(),
        Ok((_, p)) => format!("the {provider} provider: {}", p.why_not(verb)),
        Err(e) => return failed(&e),
    };
    error(
        409,
        &format!(
            "{what} of sandbox {id} is not possible here: {reason}; a snapshot of its files \
             is: create_snapshot(mode=\"filesystem\") in Python (createSnapshot() in \
             JavaScript), then Sandbox.create(snapshot_id) for each copy"
        ),
    )
}

/// Lists the tenant's sandboxes: metadata filter, `order`, and pages of `limit`
/// (the next page's token, an offset, in the `x-next-token` header).
fn list(e2b: &E2b, tenant: &str, query: &str) -> Response {
    let filter = metadata_filter(query);
    let param = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let states = param("state");
    if let Some(st) = &states
        && let Some(bad) = st.split(',').find(|x| !matches!(*x, "running" | "paused"))
    {
        return error(400, &format!("state {bad:?} is not running or paused"));
    }
    let want = |state: &str| {
        states
            .as_ref()
            .is_none_or(|st| st.split(',').any(|x| x == state))
    };
    let after_ms = match param("startedAfter") {
        None => None,
        Some(t) => match chrono::DateTime::parse_from_rfc3339(&t) {
            Ok(t) => Some(t.timestamp_millis().max(0) as u64),
            Err(e) => {
                return error(
                    400,
                    &format!("startedAfter {t:?} is not an RFC 3339 time: {e}"),
                );
            }
        },
    };
    let template = param("template");
    let mut items: Vec<Value> = e2b
        .list(tenant)
        .iter()
        .filter(|s| {
            want(if s.paused_at().is_some() {
                "paused"
            } else {
                "running"
            })
        })
        .filter(|s| filter.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        .filter(|s| after_ms.is_none_or(|t| s.started_ms >= t))
        .filter(|s| template.as_ref().is_none_or(|t| &s.template == t))
        .map(|s| detail_json(e2b, s))
        .collect();
    // Newest first, as E2B lists (its paginated listing relies on it); `order=asc`
    // gives the oldest first.
    match param("order").as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => return error(400, &format!("order {other:?} is not asc or desc")),
    }
    let Ok(start) = param("nextToken").map_or(Ok(0), |t| t.parse::<usize>()) else {
        return error(400, "nextToken is not one this server gave (x-next-token)");
    };
    let Ok(limit) = param("limit").map_or(Ok(usize::MAX), |t| t.parse::<usize>()) else {
        return error(400, "limit is not a number");
    };
    let limit = limit.max(1);
    let page: Vec<Value> = items.iter().skip(start).take(limit).cloned().collect();
    let mut r = ok(StatusCode::OK, &Value::Array(page));
    let next = start.saturating_add(limit);
    if next < items.len()
        && let Ok(v) = axum::http::HeaderValue::from_str(&next.to_string())
    {
        r.headers_mut().insert("x-next-token", v);
    }
    r
}

/// The metrics of `s` taken between `start` and `end` (unix seconds, both optional:
/// from its start, to now), oldest first; one taken now ends them when `end` is not
/// past.
async fn metrics_between(e2b: &E2b, s: &crate::state::Sbx, query: &str) -> Response {
    let mut bound = [None, None];
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let i = match &*k {
            "start" => 0,
            "end" => 1,
            _ => continue,
        };
        match v.parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => bound[i] = Some(t as u64),
            _ => {
                return error(400, &format!("{k}={v:?} is not a time: give unix seconds"));
            }
        }
    }
    let [start, end] = bound;
    let within = |m: &Value| {
        let t = m["timestampUnix"].as_u64().unwrap_or(0);
        start.is_none_or(|s| t >= s) && end.is_none_or(|e| t <= e)
    };
    let mut out: Vec<Value> = s
        .samples
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|m| within(m))
        .cloned()
        .collect();
    let now_s = stockade::now_ms() / 1000;
    if end.is_none_or(|e| e >= now_s) && start.is_none_or(|s| s <= now_s) {
        match s.metric(&e2b.daemon).await {
            Ok(m) => out.push(m),
            Err(e) => return failed(&e),
        }
    }
    ok(StatusCode::OK, &Value::Array(out))
}

/// Metrics of several of the tenant's sandboxes (`sandbox_ids=a,b`): one sample
/// each, by id; ids the tenant does not have are left out.
async fn list_metrics(e2b: &E2b, tenant: &str, query: &str) -> Response {
    let ids: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "sandbox_ids")
        .flat_map(|(_, v)| {
            v.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    if ids.is_empty() {
        return error(400, "sandbox_ids is missing: give ids, comma-separated");
    }
    let mut out = serde_json::Map::new();
    for id in ids {
        if let Some(s) = e2b.get(tenant, &id) {
            match s.metric(&e2b.daemon).await {
                Ok(m) => {
                    out.insert(id, m);
                }
                Err(e) => return failed(&e),
            }
        }
    }
    ok(StatusCode::OK, &json!({ "sandboxes": out }))
}

/// A daemon error as an E2B answer.
fn failed(e: &stockade::Error) -> Response {
    error(status_of(e.code(), Route::Api), &e.to_string())
}

fn not_found(id: &str) -> Response {
    error(404, &format!("sandbox {id:?} not found"))
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            400,
            &format!("the request body is not the JSON this route takes: {e}"),
        ))
    })
}

async fn create(e2b: &E2b, tenant: &str, body: &[u8]) -> Response {
    let b: CreateBody = match parse(body) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let template = b.template_id.unwrap_or_else(|| "base".into());
    // Read at each create: an edit of the file applies to the next sandbox.
    let config = match stockade_image::Config::load() {
        Ok(c) => c,
        Err(e) => {
            return error(
                500,
                &format!("the server's configuration file is not valid: {e}"),
            );
        }
    };
    let mut custom = config.templates.get(&template).cloned();
    let built = if custom.is_none() && !TEMPLATES.contains(&template.as_str()) {
        e2b.templates.find(tenant, &template)
    } else {
        None
    };
    if let Some(b) = &built {
        custom = Some(b.config());
    }
    if custom.is_none() && !TEMPLATES.contains(&template.as_str()) {
        let mut names: Vec<&str> = TEMPLATES.to_vec();
        names.extend(config.templates.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        return error(
            404,
            &format!(
                "template {template:?} not found: this server has {} (templates come from \
                 the [templates] tables of Stockade's configuration file, and from your own \
                 builds with the SDK's Template.build)",
                names.join(", ")
            ),
        );
    }
    let timeout = b.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if timeout == 0 || timeout > MAX_TIMEOUT_SECS {
        return error(
            400,
            &format!("timeout {timeout} is out of range: 1 to {MAX_TIMEOUT_SECS} seconds"),
        );
    }
    let lifecycle = crate::state::Lifecycle {
        pause_on_timeout: b.auto_pause.unwrap_or(false),
        auto_resume: b.auto_resume.is_some_and(|a| a.enabled),
    };
    if lifecycle.auto_resume && !lifecycle.pause_on_timeout {
        return error(
            400,
            "autoResume needs autoPause: only a sandbox paused at its timeout is resumed by a request",
        );
    }
    let network = match &b.network {
        None if b.allow_internet_access == Some(true) => Network::Egress,
        None => Network::None,
        Some(_) if custom.as_ref().is_some_and(|t| !t.allow.is_empty()) => {
            return error(
                400,
                &format!(
                    "template {template:?} has its operator's allowlist (the configuration \
                     file's [templates.{template}] allow); create it without network options"
                ),
            );
        }
        Some(n) => {
            match crate::network::network_of(n, b.allow_internet_access, crate::network::At::Create)
            {
                Ok(n) => n,
                Err(m) => return error(400, &m),
            }
        }
    };
    match e2b
        .create(
            tenant,
            &template,
            custom.as_ref(),
            timeout,
            b.metadata.unwrap_or_default(),
            b.env_vars.unwrap_or_default(),
            network,
            lifecycle,
            built.as_ref(),
        )
        .await
    {
        Ok(s) => ok(StatusCode::CREATED, &sandbox_json(e2b, &s)),
        Err(e) => failed(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_filters_are_decoded_twice() {
        let f = metadata_filter("metadata=a%3Db%2520c%26k%3Dv&state=running");
        assert_eq!(f.get("a").map(String::as_str), Some("b c"));
        assert_eq!(f.get("k").map(String::as_str), Some("v"));
        assert_eq!(f.len(), 2);
    }
}
