//! Directory watching (`filesystem.WatchDir`, `CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher`): inotify inside the sandbox. Each watch is one streamed exec of
//! the agent's own watcher ([`ExecRequest::watch_dir`]) running as the sandbox user,
//! so the sandbox's own mounts, permissions and limits decide what it may watch, the
//! host never resolves a sandbox path, and the image needs no interpreter. The exec
//! prints one [`WatchLine`] per event; dropping the watch drops the exec's receiver,
//! which kills it.
//!
//! Why an exec and not polling through the agent's file operations: inotify gives
//! every event (a write within the same second as the last one, a chmod, a file
//! created and removed between two polls), and costs nothing while the directory is
//! quiet; a poll would list the whole tree through one file operation per directory
//! every interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use stockade::{ExecRequest, Stream, WatchError, WatchKind, WatchLine};
use stockade_server::daemon::ExecEvent;
use tokio::sync::mpsc;

use crate::connect::{self, ConnectError};
use crate::envd::{entry_info, resolve, stat_path};
use crate::state::{E2b, Sbx};

/// Most watchers (unary API) one sandbox keeps at once.
pub const MAX_WATCHERS: usize = 16;
/// Most events a watcher keeps between two `GetWatcherEvents` (older ones dropped).
const MAX_PENDING_EVENTS: usize = 10_000;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchRequest {
    #[serde(default)]
    path: String,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    include_entry: bool,
    // `allowNetworkMounts` is accepted and needs nothing: a network mount is watched
    // like any other directory (inotify sees this sandbox's own changes on it).
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatcherIdRequest {
    #[serde(default, alias = "watcher_id")]
    watcher_id: String,
}

/// A running watch: its events, as `FilesystemEvent` JSON values.
struct Watch {
    root: String,
    include_entry: bool,
    events: mpsc::Receiver<ExecEvent>,
    line: Vec<u8>,
    /// The daemon's id of the exec, which takes `sync N` lines on its stdin.
    exec_id: Option<String>,
}

/// How long `GetWatcherEvents` waits for the watcher to print what is already queued.
const SYNC_WAIT: Duration = Duration::from_secs(2);

/// Starts the agent's watcher on the directory, as the sandbox user (`uid` `None`) or
/// as `uid` of the sandbox's own user namespace (root: 0), and waits until its
/// watches are in place. With `sync`, its stdin stays open for `sync N` lines.
async fn begin(
    e2b: &E2b,
    s: &Sbx,
    r: &WatchRequest,
    uid: Option<u32>,
    sync: bool,
) -> Result<Watch, ConnectError> {
    if r.path.is_empty() {
        return Err(ConnectError::invalid(
            "\"path\" is empty: name a directory in the sandbox",
        ));
    }
    let root = resolve(&r.path);
    let mut req = ExecRequest::watch_dir(&root, r.recursive);
    req.uid = uid;
    req.keep_stdin_open = sync;
    let mut events = e2b
        .daemon
        .exec_stream(&s.tenant, &s.daemon_id, req)
        .map_err(ConnectError::from)?;
    let mut line = Vec::new();
    let mut stderr = Vec::new();
    let mut exec_id = None;
    loop {
        match events.recv().await {
            Some(ExecEvent::Output(c)) if c.stream == Stream::Stdout => {
                line.extend_from_slice(&c.data);
                if let Some(n) = line.iter().position(|b| *b == b'\n') {
                    let first = WatchLine::parse(&line[..n]);
                    line.drain(..=n);
                    match first {
                        Some(WatchLine::Ready) => break,
                        Some(WatchLine::Failed { error, message }) => {
                            return Err(ConnectError::new(connect_code(error), message));
                        }
                        _ => {
                            return Err(ConnectError::new(
                                "internal",
                                "the watcher did not start (its first line is not ready)",
                            ));
                        }
                    }
                }
            }
            Some(ExecEvent::Output(c)) => stderr.extend_from_slice(&c.data),
            Some(ExecEvent::Started(id)) => exec_id = Some(id),
            Some(ExecEvent::Outcome(Ok(o))) => {
                stderr.extend_from_slice(&o.stderr);
                return Err(ConnectError::new(
                    "internal",
                    format!(
                        "cannot watch {root} (exit {}): {}",
                        o.exit_code,
                        String::from_utf8_lossy(&stderr).trim()
                    ),
                ));
            }
            Some(ExecEvent::Outcome(Err(e))) => return Err(e.into()),
            None => {
                return Err(ConnectError::new(
                    "internal",
                    "the watcher ended without a result",
                ));
            }
        }
    }
    Ok(Watch {
        root,
        include_entry: r.include_entry,
        events,
        line,
        exec_id: exec_id.filter(|_| sync),
    })
}

/// The Connect code of a watch that could not start.
fn connect_code(e: WatchError) -> &'static str {
    match e {
        WatchError::NotFound => "not_found",
        WatchError::NotADirectory => "invalid_argument",
        WatchError::PermissionDenied => "permission_denied",
        WatchError::Exhausted => "resource_exhausted",
        WatchError::Io => "internal",
    }
}

/// A watcher's line as E2B's `FilesystemEvent` (`{"synced": N}` for a sync answer,
/// which never leaves this module).
fn event_json(line: WatchLine) -> Option<Value> {
    match line {
        WatchLine::Event { name, kind } => {
            let kind = match kind {
                WatchKind::Create => "EVENT_TYPE_CREATE",
                WatchKind::Write => "EVENT_TYPE_WRITE",
                WatchKind::Remove => "EVENT_TYPE_REMOVE",
                WatchKind::Rename => "EVENT_TYPE_RENAME",
                WatchKind::Chmod => "EVENT_TYPE_CHMOD",
            };
            Some(json!({"name": name, "type": kind}))
        }
        WatchLine::Synced(n) => Some(json!({ "synced": n })),
        WatchLine::Ready | WatchLine::Failed { .. } => None,
    }
}

impl Watch {
    /// The events of one exec event: `Some(empty)` while more may come, `None` when
    /// the watch ended.
    fn feed(&mut self, ev: Option<ExecEvent>) -> Option<Vec<Value>> {
        match ev? {
            ExecEvent::Output(c) if c.stream == Stream::Stdout => {
                self.line.extend_from_slice(&c.data);
                let Some(end) = self.line.iter().rposition(|b| *b == b'\n') else {
                    return Some(Vec::new());
                };
                let lines: Vec<u8> = self.line.drain(..=end).collect();
                Some(
                    lines
                        .split(|b| *b == b'\n')
                        .filter_map(WatchLine::parse)
                        .filter_map(event_json)
                        .collect(),
                )
            }
            ExecEvent::Outcome(_) => None,
            _ => Some(Vec::new()),
        }
    }

    /// Adds each event's `entry` when the watch asked for it (not for removals).
    async fn enrich(&self, e2b: &E2b, s: &Sbx, events: &mut [Value]) {
        if !self.include_entry {
            return;
        }
        for ev in events {
            if ev["type"] == json!("EVENT_TYPE_REMOVE") || ev.get("synced").is_some() {
                continue;
            }
            let name = ev["name"].as_str().unwrap_or("").to_string();
            let full = format!("{}/{name}", self.root.trim_end_matches('/'));
            if let Ok(e) = stat_path(e2b, s, None, &full).await {
                ev["entry"] = entry_info(&full, &e);
            }
        }
    }

    /// The next non-empty batch of events; `None` when the watch ended.
    async fn next(&mut self, e2b: &E2b, s: &Sbx) -> Option<Vec<Value>> {
        loop {
            let ev = self.events.recv().await;
            let mut batch = self.feed(ev)?;
            if !batch.is_empty() {
                self.enrich(e2b, s, &mut batch).await;
                return Some(batch);
            }
        }
    }
}

/// `WatchDir`: `start`, then each event, a `keepalive` after `keepalive` of silence,
/// until the client goes away, the watch ends or `timeout` passes.
pub async fn watch_dir(
    e2b: &Arc<E2b>,
    s: &Arc<Sbx>,
    body: &[u8],
    uid: Option<u32>,
    keepalive: Option<Duration>,
    timeout: Option<Duration>,
) -> Result<impl futures_util::Stream<Item = Bytes> + Send + 'static, ConnectError> {
    let r: WatchRequest = connect::stream_request(body)?;
    let w = begin(e2b, s, &r, uid, false).await?;
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let (e2b, s) = (e2b.clone(), s.clone());
    tokio::spawn(async move {
        let _ = tx.send(connect::data_frame(&json!({"start": {}}))).await;
        let mut w = w;
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let ping = keepalive.unwrap_or(Duration::from_secs(3600));
        loop {
            let until_end = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ev = w.events.recv() => {
                    let Some(mut batch) = w.feed(ev) else { break };
                    w.enrich(&e2b, &s, &mut batch).await;
                    for ev in batch {
                        if tx.send(connect::data_frame(&json!({"filesystem": ev}))).await.is_err() {
                            return;
                        }
                    }
                }
                _ = tokio::time::sleep(ping) => {
                    if tx.send(connect::data_frame(&json!({"keepalive": {}}))).await.is_err() {
                        return;
                    }
                }
                _ = tx.closed() => return,
                _ = until_end => break,
            }
        }
        let _ = tx.send(connect::end_frame(None)).await;
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// A watcher of the unary API: its events wait for `GetWatcherEvents`.
pub struct Watcher {
    pending: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
    /// The watch exec's id, for its `sync N` lines.
    exec_id: Option<String>,
    /// The last sync asked, and the last one answered (`{"synced": N}`).
    asked: Arc<std::sync::atomic::AtomicU64>,
    synced: tokio::sync::watch::Receiver<u64>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Ends the task, which drops the exec's receiver, which kills the exec.
        self.task.abort();
    }
}

/// The watchers of one sandbox by id.
pub type Watchers = Mutex<HashMap<String, Watcher>>;

fn watchers(s: &Sbx) -> std::sync::MutexGuard<'_, HashMap<String, Watcher>> {
    s.watchers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `CreateWatcher`.
pub async fn create(
    e2b: &Arc<E2b>,
    s: &Arc<Sbx>,
    body: &[u8],
    uid: Option<u32>,
) -> Result<Value, ConnectError> {
    let r: WatchRequest = connect::unary_request(body)?;
    if watchers(s).len() >= MAX_WATCHERS {
        return Err(ConnectError::new(
            "resource_exhausted",
            format!(
                "the sandbox has {MAX_WATCHERS} watchers, the most it keeps: remove one \
                 (RemoveWatcher, or stop a watch_dir handle) first"
            ),
        ));
    }
    let mut w = begin(e2b, s, &r, uid, true).await?;
    let pending = Arc::new(Mutex::new(Vec::new()));
    let (synced_tx, synced) = tokio::sync::watch::channel(0u64);
    let exec_id = w.exec_id.clone();
    let (e2b2, s2, p2) = (e2b.clone(), s.clone(), pending.clone());
    let task = tokio::spawn(async move {
        while let Some(batch) = w.next(&e2b2, &s2).await {
            // Events, then the sync answers that follow them: an answer is sent only
            // once what came before it is pending.
            let (answers, batch): (Vec<Value>, Vec<Value>) =
                batch.into_iter().partition(|e| e.get("synced").is_some());
            {
                let mut p = p2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                p.extend(batch);
                if p.len() > MAX_PENDING_EVENTS {
                    let extra = p.len() - MAX_PENDING_EVENTS;
                    p.drain(..extra);
                }
            }
            if let Some(n) = answers.iter().filter_map(|a| a["synced"].as_u64()).max() {
                synced_tx.send_replace(n);
            }
        }
    });
    let id = stockade::host::random_hex(8);
    watchers(s).insert(
        id.clone(),
        Watcher {
            pending,
            task,
            exec_id,
            asked: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            synced,
        },
    );
    Ok(json!({ "watcherId": id }))
}

fn watcher_id(body: &[u8]) -> Result<String, ConnectError> {
    let r: WatcherIdRequest = connect::unary_request(body)?;
    if r.watcher_id.is_empty() {
        return Err(ConnectError::invalid(
            "\"watcherId\" is empty: pass the id CreateWatcher returned",
        ));
    }
    Ok(r.watcher_id)
}

fn unknown(id: &str) -> ConnectError {
    ConnectError::not_found(format!("watcher {id:?} not found"))
}

/// `GetWatcherEvents`: the events since the last call, including those of every
/// change made before it (the watcher is asked to print what inotify has queued, and
/// waited for, as envd's own in-process watcher has them at once).
pub async fn events(e2b: &E2b, s: &Sbx, body: &[u8]) -> Result<Value, ConnectError> {
    let id = watcher_id(body)?;
    let (pending, sync) = {
        let all = watchers(s);
        let w = all.get(&id).ok_or_else(|| unknown(&id))?;
        let n = w.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        (
            w.pending.clone(),
            w.exec_id.clone().map(|x| (x, n, w.synced.clone())),
        )
    };
    if let Some((exec_id, n, mut synced)) = sync {
        let line = format!("sync {n}\n").into_bytes();
        let sent = e2b
            .daemon
            .exec_input(&s.tenant, &exec_id, vec![stockade::ExecInput::Stdin(line)])
            .await;
        // A watch that ended answers nothing: what it printed is all there is.
        if sent.is_ok() {
            let _ = tokio::time::timeout(SYNC_WAIT, synced.wait_for(|m| *m >= n)).await;
        }
    }
    let events: Vec<Value> = std::mem::take(
        &mut *pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(json!({ "events": events }))
}

/// `RemoveWatcher`.
pub fn remove(s: &Sbx, body: &[u8]) -> Result<Value, ConnectError> {
    let id = watcher_id(body)?;
    match watchers(s).remove(&id) {
        Some(_) => Ok(json!({})),
        None => Err(unknown(&id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watcher_lines_become_e2b_events() {
        let ev = |kind| {
            event_json(WatchLine::Event {
                name: "a/b".into(),
                kind,
            })
            .unwrap()
        };
        assert_eq!(
            ev(WatchKind::Create),
            json!({"name": "a/b", "type": "EVENT_TYPE_CREATE"})
        );
        assert_eq!(ev(WatchKind::Rename)["type"], "EVENT_TYPE_RENAME");
        assert_eq!(ev(WatchKind::Chmod)["type"], "EVENT_TYPE_CHMOD");
        assert_eq!(event_json(WatchLine::Synced(3)), Some(json!({"synced": 3})));
        assert_eq!(event_json(WatchLine::Ready), None);
        assert_eq!(connect_code(WatchError::NotADirectory), "invalid_argument");
        assert_eq!(
            connect_code(WatchError::PermissionDenied),
            "permission_denied"
        );
    }
}
