//! Stockade core: the [`Provider`] trait every isolation backend implements, the
//! [`Capabilities`] check, exec types, the [`Sandbox`] handle and the one [`Error`].
//!
//! A provider turns a [`ValidatedSpec`] into a running sandbox and runs
//! [`ExecRequest`]s in it. Specs a provider cannot honour are refused through
//! [`Capabilities::check`], never silently weakened.

mod caps;
mod error;
mod facets;
mod forward;
pub mod host;
mod policy;
mod provider;
mod sandbox;
mod session;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use caps::{Capabilities, Verb, Verbs};
pub use error::{Error, ErrorCode, Result};
pub use facets::{
    EgressControl, FilesAsUser, Forking, Pausing, Snapshotting, UsageCounters, default_reason,
};
pub use forward::{Forward, OnError};
pub use policy::{Action, Policy, Rule, RuleTarget, Verdict};
pub use provider::*;
pub use sandbox::*;
pub use session::{
    SessionConfig, SessionInfo, SessionManager, WORKSPACE_TARGET, check_session_name,
};
pub use stockade_agent_proto::files::{self, FileEntry, FileKind, FileOp, FileResult, GrepMatch};
pub use stockade_agent_proto::{
    BoundedCapture, DETACHED_LOG_DIR, EgressDenial, ExecOutcome, ExecRequest, Stream, TtySize,
    Wall, WallKind, WatchDir, WatchError, WatchKind, WatchLine, detached_log, now_ms,
};
pub use stockade_spec::{self as spec, SandboxSpec, ValidatedSpec};

/// A connection to a port inside a sandbox ([`Provider::connect_port`]).
pub trait PortIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> PortIo for T {}

/// A connection to a port inside a sandbox, boxed.
pub type PortStream = Box<dyn PortIo>;

/// A chunk of live output of an exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: Stream,
    pub data: Vec<u8>,
}

/// Where a provider sends live output. Bounded: a slow reader slows the exec's
/// output pump, never grows memory.
pub type OutputSender = mpsc::Sender<OutputChunk>;

/// Input to a running exec (see [`ExecIo`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecInput {
    /// More bytes for the exec's stdin.
    Stdin(Vec<u8>),
    /// Close the exec's stdin.
    CloseStdin,
    /// Kill everything the exec started; the exec then ends with its outcome.
    Kill,
    /// Send this signal to the exec's main process; the exec ends when that process
    /// does. Providers that cannot signal (wasm, and the daemon API) end the exec as
    /// for [`ExecInput::Kill`].
    Signal(i32),
    /// The exec's terminal ([`ExecRequest::tty`]) is now this size; nothing for an exec
    /// without one.
    Resize(TtySize),
}

/// Where a caller sends [`ExecInput`] to a running exec.
pub type InputReceiver = mpsc::Receiver<ExecInput>;

/// The I/O of one exec besides its request: where live output goes, and where stdin
/// and a kill request come from.
#[derive(Debug, Default)]
pub struct ExecIo {
    /// Live output, when the caller wants it as it comes.
    pub output: Option<OutputSender>,
    /// Stdin and kill requests, when the caller sends any.
    pub input: Option<InputReceiver>,
}

impl ExecIo {
    /// No live output, no input: the outcome carries the captured output.
    pub fn none() -> ExecIo {
        ExecIo::default()
    }

    /// Live output to `tx`.
    pub fn output(tx: OutputSender) -> ExecIo {
        ExecIo {
            output: Some(tx),
            input: None,
        }
    }
}

/// Refuses an exec on a terminal ([`ExecRequest::tty`]), for a provider that has none.
pub fn no_terminal(provider: &str, req: &ExecRequest) -> Result<()> {
    if req.tty.is_some() {
        return Err(Error::Unavailable {
            what: format!("an exec on a terminal on the {provider} provider"),
            reason: "this provider runs programs with pipes only".into(),
            fix: "run it without a terminal (no tty, no -t), or on a Linux provider".into(),
        });
    }
    Ok(())
}

/// Refuses a directory watch ([`ExecRequest::watch`]), for a provider whose sandboxes
/// have no agent to serve it.
pub fn no_watch(provider: &str, req: &ExecRequest) -> Result<()> {
    if req.watch.is_some() {
        return Err(Error::Unavailable {
            what: format!("watching a directory on the {provider} provider"),
            reason: "the watcher is part of the Linux providers' agent".into(),
            fix: "watch it on a Linux provider (native, docker, gvisor, microvm)".into(),
        });
    }
    Ok(())
}

/// Runs `exec` (an exec that cannot take stdin while it runs) while honouring the kill
/// requests of `input`: on [`ExecInput::Kill`] the exec is dropped, which kills what it
/// started, and reported as killed by `SIGKILL`. Refuses `keep_stdin_open`.
pub async fn exec_with_kill<F>(
    provider: &str,
    req: &ExecRequest,
    input: Option<InputReceiver>,
    exec: F,
) -> Result<ExecOutcome>
where
    F: std::future::Future<Output = Result<ExecOutcome>>,
{
    if req.keep_stdin_open {
        return Err(Error::Unavailable {
            what: format!("interactive stdin on the {provider} provider"),
            reason: "this provider does not implement it".into(),
            fix: "pass all of stdin with the request".into(),
        });
    }
    no_terminal(provider, req)?;
    no_watch(provider, req)?;
    if let Some(uid) = req.uid {
        return Err(Error::Unavailable {
            what: format!("running an exec as uid {uid} on the {provider} provider"),
            reason: "this provider runs every exec as the sandbox's user".into(),
            fix: "leave the exec's uid unset".into(),
        });
    }
    let Some(mut input) = input else {
        return exec.await;
    };
    let started = std::time::Instant::now();
    tokio::pin!(exec);
    let mut open = true;
    loop {
        tokio::select! {
            r = &mut exec => return r,
            m = input.recv(), if open => match m {
                Some(ExecInput::Kill | ExecInput::Signal(_)) => {
                    return Ok(ExecOutcome {
                        exit_code: 128 + 9,
                        signal: Some(9),
                        duration_ms: started.elapsed().as_millis() as u64,
                        ..ExecOutcome::default()
                    });
                }
                Some(_) => {}
                None => open = false,
            },
        }
    }
}

/// An [`ExecRequest`] that passed [`check_request`]: what a provider receives, so the
/// checks run once, at the boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedRequest(ExecRequest);

impl CheckedRequest {
    /// Checks `req` (see [`check_request`]).
    pub fn new(req: ExecRequest) -> Result<CheckedRequest> {
        check_request(&req)?;
        Ok(CheckedRequest(req))
    }

    /// The request.
    pub fn into_inner(self) -> ExecRequest {
        self.0
    }
}

impl std::ops::Deref for CheckedRequest {
    type Target = ExecRequest;
    fn deref(&self) -> &ExecRequest {
        &self.0
    }
}

/// A [`ValidatedSpec`] that a provider's [`Capabilities`] can honour: what
/// [`Provider::create`] receives, so the capability check runs once, at the boundary.
#[derive(Clone, Debug)]
pub struct CheckedSpec(ValidatedSpec);

impl CheckedSpec {
    /// Checks `spec` against `provider`'s capabilities.
    pub fn new(spec: ValidatedSpec, provider: &dyn Provider) -> Result<CheckedSpec> {
        provider.capabilities().check(provider.name(), &spec)?;
        Ok(CheckedSpec(spec))
    }

    /// The validated spec.
    pub fn into_inner(self) -> ValidatedSpec {
        self.0
    }
}

impl std::ops::Deref for CheckedSpec {
    type Target = ValidatedSpec;
    fn deref(&self) -> &ValidatedSpec {
        &self.0
    }
}

/// Options of `create` that are about the caller, not the sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Destroy the sandbox when this host process dies (an embedding program that
    /// crashed must not leak sandboxes). `None`: the sandbox lives its lifetime.
    pub owner_pid: Option<u32>,
}

/// What is known about a sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxInfo {
    /// Sandbox id (unique on this host).
    pub id: String,
    /// Provider name (`native`, `docker`, ...).
    pub provider: String,
    /// Creation time, unix milliseconds.
    pub created_at_ms: u64,
    /// End of the lifetime, unix milliseconds.
    pub expires_at_ms: u64,
    /// Host process whose death destroys the sandbox, if any.
    pub owner_pid: Option<u32>,
    /// The spec as requested.
    pub spec: serde_json::Value,
    /// Hardening actually applied, wall by wall.
    pub applied: Vec<Wall>,
    /// Running or paused (see [`Provider::pause`]); `running` when absent.
    #[serde(default)]
    pub state: RunState,
    /// How the sandbox's start went, step by step, as its provider measured it
    /// (empty when the provider does not say, or the sandbox came from a pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StartStep>,
}

/// One step of a sandbox's start (`stockade run --timings`, `inspect`). Steps of
/// different processes overlap: each has its own start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartStep {
    /// What happened, e.g. `monitor: move PID 1 into the cgroups`.
    pub name: String,
    /// When it began, in microseconds after the first step began.
    pub start_us: u64,
    /// How long it took, in microseconds.
    pub took_us: u64,
}

/// Whether a live sandbox runs or is paused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Its processes run (the default).
    #[default]
    Running,
    /// Stopped where it was by [`Provider::pause`]: execs and file operations are
    /// refused until [`Provider::resume`].
    Paused,
}

impl RunState {
    /// `running` or `paused`, as listings and the wire spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Paused => "paused",
        }
    }

    /// Parses [`Self::as_str`]'s words; anything else (an older peer's empty
    /// field) is `Running`.
    pub fn parse(s: &str) -> RunState {
        if s == "paused" {
            RunState::Paused
        } else {
            RunState::Running
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of a call that needs a running sandbox on a paused one: names the state
/// and what to do.
pub fn paused_error(id: &str) -> Error {
    Error::InvalidRequest(format!(
        "sandbox {id} is paused; resume it first (stockade resume {id}, or sandbox.resume())"
    ))
}

/// Resource use of a sandbox, read from its cgroups (see [`Provider::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time used by all its processes since it started, microseconds.
    pub cpu_usage_us: u64,
    /// Memory charged to it now (page cache included), bytes.
    pub memory_bytes: u64,
    /// Of which page cache, bytes.
    pub memory_cache_bytes: u64,
    /// Its memory cap, bytes.
    pub memory_limit_bytes: u64,
}

/// What `gc` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    /// Ids of sandboxes reaped (expired, owner dead, or left half-made by a crash).
    pub reaped: Vec<String>,
    /// Problems met (each names the object).
    pub errors: Vec<String>,
}

/// One line of a provider's self-check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// What was checked (`user namespaces`, `cgroups`, ...).
    pub name: String,
    /// Whether it is usable.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// How to fix it when not ok.
    pub fix: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_are_never_paths_and_say_what_is_wrong() {
        for ok in [
            "base",
            "py3.12-warm",
            "A_1",
            "x",
            &"n".repeat(SNAPSHOT_NAME_MAX),
        ] {
            assert!(check_snapshot_name(ok).is_ok(), "{ok:?}");
        }
        for (bad, why) in [
            ("", "it is empty"),
            ("..", "does not start with a letter or digit"),
            (".hidden", "does not start with a letter or digit"),
            ("-rf", "does not start with a letter or digit"),
            ("../etc", "contains '/'"),
            ("a/b", "contains '/'"),
            ("a b", "contains ' '"),
            ("caf\u{e9}", "contains '\u{e9}'"),
            ("nul\0", r"contains '\0'"),
        ] {
            let e = check_snapshot_name(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidSpec, "{bad:?}");
            assert!(e.to_string().contains(why), "{bad:?}: {e}");
            assert!(e.to_string().contains("letters"), "{e}");
        }
        let long = "n".repeat(SNAPSHOT_NAME_MAX + 1);
        let e = check_snapshot_name(&long).unwrap_err();
        assert!(e.to_string().contains("65 characters long"), "{e}");
        // A provider stores a daemon's tenant-scoped names, longer, by the same rules.
        assert!(check_snapshot_key(&format!("{}--{long}", "a".repeat(16))).is_ok());
        assert!(check_snapshot_key("../x").is_err());
        assert!(check_snapshot_key(&"n".repeat(SNAPSHOT_KEY_MAX + 1)).is_err());
    }

    #[test]
    fn requests_are_checked() {
        assert!(check_request(&ExecRequest::new(["true"])).is_ok());
        assert!(
            check_request(&ExecRequest::new(Vec::<String>::new()))
                .unwrap_err()
                .to_string()
                .contains("argv is empty")
        );
        let mut r = ExecRequest::new(["true"]);
        r.cwd = Some("rel".into());
        assert!(
            check_request(&r)
                .unwrap_err()
                .to_string()
                .contains("cwd \"rel\"")
        );
        let mut r = ExecRequest::new(["true"]);
        r.env.insert("A=B".into(), "x".into());
        assert_eq!(
            check_request(&r).unwrap_err().code(),
            ErrorCode::InvalidSpec
        );
    }
}
