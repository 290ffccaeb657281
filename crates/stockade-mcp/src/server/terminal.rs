//! Terminals for a model (`terminal_open`, `terminal_send`, `terminal_close`): a
//! command on the agent's pseudo-terminal ([`stockade::ExecRequest::tty`]) in one of
//! the connection's sandboxes or a session's, kept between calls. Each call types
//! what it is given and returns what the terminal printed since the last call, with
//! escape sequences taken out, once the output settles, the awaited text appears or
//! the wait ends.
//!
//! A terminal is the connection's: it ends when the connection does, with its
//! sandbox, at its deadline (the operator's longest exec deadline) or when its
//! command exits. Every line typed is checked by the approval rules as the exec
//! `/bin/sh -c LINE` would be, so a rule that refuses a command in `sandbox_exec`
//! refuses it typed, too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use stockade::{Action, CheckedRequest, ExecInput, ExecIo, ExecOutcome, ExecRequest, TtySize};
use tokio::sync::{Notify, mpsc};

use super::error::{ToolError, ToolResult, ok};
use super::{Handler, lock};
use crate::tools;

/// Most terminals one connection keeps open.
pub const MAX_TERMINALS: usize = 8;
/// Most unread output a terminal keeps (the oldest goes first).
const MAX_UNREAD: usize = 1 << 20;
/// Output quiet this long after some arrived: the answer is there.
const SETTLE: Duration = Duration::from_millis(300);
/// The longest a call waits for output.
const MAX_WAIT_SECS: f64 = 60.0;

/// What a terminal's exec has printed and how it ended.
#[derive(Default)]
struct Screen {
    unread: Vec<u8>,
    dropped: u64,
    ended: Option<Result<ExecOutcome, String>>,
}

/// An open terminal.
pub(super) struct Terminal {
    conn: u64,
    sandbox: String,
    input: mpsc::Sender<ExecInput>,
    screen: Arc<Mutex<Screen>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Dropping the exec's future kills the command and what it started.
        self.task.abort();
    }
}

/// The terminals of every connection, by id.
pub(super) type Terminals = Mutex<HashMap<String, Terminal>>;

/// `text` as a model reads it: escape sequences out, `\r\n` as `\n`, no lone `\r`.
fn plain(bytes: &[u8]) -> String {
    let stripped = anstream::adapter::strip_bytes(bytes).into_vec();
    String::from_utf8_lossy(&stripped)
        .replace("\r\n", "\n")
        .replace('\r', "")
}

fn size(rows: Option<u16>, cols: Option<u16>) -> Result<TtySize, ToolError> {
    TtySize {
        rows: rows.unwrap_or(TtySize::DEFAULT.rows),
        cols: cols.unwrap_or(TtySize::DEFAULT.cols),
    }
    .check()
    .map_err(|e| ToolError::invalid(e, "pass rows and cols of 1 or more (default 24 x 80)"))
}

fn wait_for(secs: Option<f64>, default: f64) -> Result<Duration, ToolError> {
    let s = secs.unwrap_or(default);
    if !(0.0..=MAX_WAIT_SECS).contains(&s) {
        return Err(ToolError::invalid(
            format!("wait {s} is out of range"),
            format!("pass a wait of 0 to {MAX_WAIT_SECS} seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

/// What a call needs of an open terminal.
type Parts = (
    mpsc::Sender<ExecInput>,
    String,
    Arc<Mutex<Screen>>,
    Arc<Notify>,
);

impl Handler {
    /// This connection's terminal `id`.
    fn terminal(&self, id: &str) -> Result<Parts, ToolError> {
        match lock(&self.shared().terminals).get(id) {
            Some(t) if t.conn == self.conn.id => Ok((
                t.input.clone(),
                t.sandbox.clone(),
                t.screen.clone(),
                t.changed.clone(),
            )),
            _ => Err(ToolError::new(
                "not_found",
                format!("terminal {id} not found among this client's terminals"),
                "use a terminal_id from terminal_open; a terminal ends when its command exits, \
                 its sandbox goes or this client disconnects",
            )),
        }
    }

    /// What terminal `id` printed since the last call: waits until `until` appears,
    /// or (without it) until output arrived and settled, or `wait` passed, or the
    /// command ended.
    async fn read_terminal(
        &self,
        id: &str,
        wait: Duration,
        until: Option<&str>,
    ) -> Result<serde_json::Value, ToolError> {
        let (_, _, screen, changed) = self.terminal(id)?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = changed.notified();
            let (len, done, found) = {
                let s = lock(&screen);
                let found = until.is_some_and(|u| plain(&s.unread).contains(u));
                (s.unread.len(), s.ended.is_some(), found)
            };
            if done || found {
                break;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            // Without awaited text: some output, then quiet for SETTLE.
            let step = if until.is_none() && len > 0 {
                SETTLE.min(deadline - now)
            } else {
                deadline - now
            };
            let grew = tokio::time::timeout(step, notified).await.is_ok();
            if !grew && until.is_none() && len > 0 {
                break;
            }
        }
        let mut s = lock(&screen);
        let output = plain(&std::mem::take(&mut s.unread));
        let dropped = std::mem::take(&mut s.dropped);
        let (exited, exit_code, error) = match &s.ended {
            None => (false, None, None),
            Some(Ok(o)) => (true, Some(o.exit_code), None),
            Some(Err(e)) => (true, None, Some(e.clone())),
        };
        drop(s);
        if exited {
            lock(&self.shared().terminals).remove(id);
        }
        let mut v = json!({
            "terminal_id": id,
            "output": output,
            "exited": exited,
            "dropped_bytes": dropped,
        });
        if let Some(c) = exit_code {
            v["exit_code"] = json!(c);
        }
        if let Some(e) = error {
            v["error"] = json!(e);
        }
        if let Some(u) = until {
            v["found"] = json!(output.contains(u));
        }
        Ok(v)
    }

    fn terminal_text(v: &serde_json::Value) -> String {
        let mut text = v["output"].as_str().unwrap_or_default().to_string();
        if v["dropped_bytes"].as_u64().unwrap_or(0) > 0 {
            text.insert_str(
                0,
                &format!(
                    "[{} bytes of earlier output were dropped unread]\n",
                    v["dropped_bytes"]
                ),
            );
        }
        if v["found"] == json!(false) {
            text.push_str("\n[the awaited text did not appear within the wait]");
        }
        if v["exited"] == json!(true) {
            match v.get("exit_code") {
                Some(c) => text.push_str(&format!(
                    "\n[the command exited with code {c}; the terminal is closed]"
                )),
                None => text.push_str(&format!(
                    "\n[the terminal ended: {}]",
                    v["error"].as_str().unwrap_or("")
                )),
            }
        }
        text
    }

    /// How many terminals this client has open in `terminals`.
    fn open_terminals(&self, terminals: &HashMap<String, Terminal>) -> usize {
        terminals
            .values()
            .filter(|t| t.conn == self.conn.id)
            .count()
    }

    /// `terminal_open`.
    pub(super) async fn terminal_open(&self, tenant: &str, a: tools::TerminalOpen) -> ToolResult {
        let (provider, sandbox) = self.target(tenant, &a.at).await?;
        if self.open_terminals(&lock(&self.shared().terminals)) >= MAX_TERMINALS {
            return Err(too_many_terminals());
        }
        let command = a.command.unwrap_or_else(|| "/bin/sh".to_string());
        let max = self.shared().policy.max_exec_timeout_secs as f64;
        let mut req = self.request(super::exec::shell(&command), Some(max), None)?;
        req.tty = Some(size(a.rows, a.cols)?);
        req.keep_stdin_open = true;
        req.stream = true;
        req.cwd = a.cwd;
        req.env = a.env;
        self.shared()
            .policy
            .approval
            .check(&sandbox, &Action::Exec(&req))?;
        let req = CheckedRequest::new(req)?;
        let (out_tx, mut out_rx) = mpsc::channel(64);
        let (in_tx, in_rx) = mpsc::channel(16);
        let screen = Arc::new(Mutex::new(Screen::default()));
        let changed = Arc::new(Notify::new());
        let (s2, c2, p2, id2) = (
            screen.clone(),
            changed.clone(),
            provider.clone(),
            sandbox.clone(),
        );
        let task = tokio::spawn(async move {
            let io = ExecIo {
                output: Some(out_tx),
                input: Some(in_rx),
            };
            let exec = p2.exec(&id2, req, io);
            tokio::pin!(exec);
            let ended = loop {
                tokio::select! {
                    r = &mut exec => break r,
                    Some(c) = out_rx.recv() => {
                        let mut s = lock(&s2);
                        s.unread.extend_from_slice(&c.data);
                        if s.unread.len() > MAX_UNREAD {
                            let extra = s.unread.len() - MAX_UNREAD;
                            s.unread.drain(..extra);
                            s.dropped += extra as u64;
                        }
                        drop(s);
                        c2.notify_waiters();
                    }
                }
            };
            while let Ok(c) = out_rx.try_recv() {
                lock(&s2).unread.extend_from_slice(&c.data);
            }
            lock(&s2).ended = Some(ended.map_err(|e| e.to_string()));
            c2.notify_waiters();
        });
        let id = format!("term-{}", stockade::host::random_hex(6));
        // Counted again under the lock it is added under: calls made at once cannot
        // open more than the limit between them (the late one's command is ended).
        let refused = {
            let mut terminals = lock(&self.shared().terminals);
            let room = self.open_terminals(&terminals) < MAX_TERMINALS;
            if room {
                terminals.insert(
                    id.clone(),
                    Terminal {
                        conn: self.conn.id,
                        sandbox: sandbox.clone(),
                        input: in_tx,
                        screen,
                        changed,
                        task,
                    },
                );
                None
            } else {
                Some(task)
            }
        };
        if let Some(task) = refused {
            task.abort();
            return Err(too_many_terminals());
        }
        let mut v = self
            .read_terminal(&id, wait_for(a.wait, 1.0)?, None)
            .await?;
        v["sandbox_id"] = json!(sandbox);
        let text = format!("terminal {id} opened\n{}", Self::terminal_text(&v));
        Ok(ok(v, text))
    }

    /// `terminal_send`.
    pub(super) async fn terminal_send(&self, a: tools::TerminalSend) -> ToolResult {
        let (input, sandbox, _, _) = self.terminal(&a.terminal_id)?;
        // A new size first: what is typed in the same call runs at it.
        if a.rows.is_some() || a.cols.is_some() {
            let _ = input.send(ExecInput::Resize(size(a.rows, a.cols)?)).await;
        }
        if let Some(text) = a.input.as_deref().filter(|t| !t.is_empty()) {
            for line in text.split_inclusive(['\n', '\r']) {
                let line = line.trim_end_matches(['\n', '\r']);
                if !line.trim().is_empty() {
                    self.shared().policy.approval.check(
                        &sandbox,
                        &Action::Exec(&ExecRequest::new(super::exec::shell(line))),
                    )?;
                }
            }
            let _ = input.send(ExecInput::Stdin(text.as_bytes().to_vec())).await;
        }
        let default = if a.until.is_some() { 10.0 } else { 2.0 };
        let v = self
            .read_terminal(
                &a.terminal_id,
                wait_for(a.wait, default)?,
                a.until.as_deref(),
            )
            .await?;
        let text = Self::terminal_text(&v);
        Ok(ok(v, text))
    }

    /// `terminal_close`.
    pub(super) async fn terminal_close(&self, a: tools::TerminalRef) -> ToolResult {
        self.terminal(&a.terminal_id)?;
        let t = lock(&self.shared().terminals).remove(&a.terminal_id);
        let output = t
            .map(|t| plain(&std::mem::take(&mut lock(&t.screen).unread)))
            .unwrap_or_default();
        Ok(ok(
            json!({"terminal_id": a.terminal_id, "closed": true, "output": output}),
            format!("terminal {} closed\n{output}", a.terminal_id),
        ))
    }
}

/// Ends every terminal of connection `conn` (it went away).
pub(super) fn close_all(terminals: &Terminals, conn: u64) {
    let gone: Vec<Terminal> = {
        let mut all = lock(terminals);
        let ids: Vec<String> = all
            .iter()
            .filter(|(_, t)| t.conn == conn)
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().filter_map(|id| all.remove(id)).collect()
    };
    drop(gone);
}

/// The refusal of a terminal past [`MAX_TERMINALS`].
fn too_many_terminals() -> ToolError {
    ToolError::new(
        "limit_exceeded",
        format!("this client has {MAX_TERMINALS} terminals open, the most it may"),
        "close one with terminal_close first",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_reads_as_plain_text() {
        assert_eq!(
            plain(b"\x1b[1;32mok\x1b[0m\r\n$ \x1b]0;title\x07x\r"),
            "ok\n$ x"
        );
    }

    #[test]
    fn sizes_and_waits_are_checked() {
        assert_eq!(size(None, None).unwrap(), TtySize::DEFAULT);
        assert!(size(Some(0), None).is_err());
        assert!(wait_for(Some(-1.0), 1.0).is_err());
        assert!(wait_for(Some(61.0), 1.0).is_err());
        assert_eq!(wait_for(None, 2.0).unwrap(), Duration::from_secs(2));
    }
}
