//! Stockade core: the [`Provider`] trait every isolation backend implements, the
//! [`Capabilities`] check, exec types, the [`Sandbox`] handle and the one [`Error`].
//!
//! A provider turns a [`ValidatedSpec`] into a running sandbox and runs
//! [`ExecRequest`]s in it. Specs a provider cannot honour are refused through
//! [`Capabilities::check`], never silently weakened.

mod caps;
mod error;
pub mod host;
mod policy;
mod session;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use caps::Capabilities;
pub use error::{Error, ErrorCode, Result};
pub use policy::{Action, Policy, Rule, RuleTarget, Verdict};
pub use session::{
    SessionConfig, SessionInfo, SessionManager, WORKSPACE_TARGET, check_session_name,
};
pub use stockade_agent_proto::files::{self, FileEntry, FileKind, FileOp, FileResult, GrepMatch};
pub use stockade_agent_proto::{
    BoundedCapture, EgressDenial, ExecOutcome, ExecRequest, Stream, now_ms,
};
pub use stockade_spec::{self as spec, SandboxSpec, ValidatedSpec};

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
    /// Hardening actually applied, one line each.
    pub applied: Vec<String>,
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

/// An isolation backend.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Short name (`native`, `docker`, `wasm`, `microvm`).
    fn name(&self) -> &'static str;

    /// What this provider can enforce.
    fn capabilities(&self) -> Capabilities;

    /// Checks the host; `Err(Unavailable)` says what is missing and how to fix it.
    async fn probe(&self) -> Result<Vec<Check>>;

    /// Starts a sandbox from a spec already checked against [`Self::capabilities`].
    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo>;

    /// Runs one command and waits for it. Live output goes to `io.output` when given;
    /// stdin and a kill request come from `io.input` when given (a provider without
    /// interactive stdin runs the exec through [`exec_with_kill`]). A non-zero exit is
    /// an outcome, not an error.
    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome>;

    /// Makes sure the image `reference` is ready to run, reporting each step (a pull, a
    /// load) to `progress` as a line, so a caller can show a long fetch instead of a
    /// silent `create`. The default does nothing: the provider fetches at create, or
    /// its images come from this host's store, which callers fill themselves (see
    /// [`Capabilities::local_images`]).
    async fn prepare_image(
        &self,
        reference: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<()> {
        let _ = (reference, progress);
        Ok(())
    }

    /// Checks that the sandbox is alive and answers (the default: it is listed).
    async fn health(&self, id: &str) -> Result<()> {
        self.inspect(id).await.map(drop)
    }

    /// Kills everything in the sandbox and removes all its state. Idempotent.
    async fn destroy(&self, id: &str) -> Result<()>;

    /// The live sandboxes of this provider.
    async fn list(&self) -> Result<Vec<SandboxInfo>>;

    /// The ids of the sandboxes [`Provider::list`] names, without describing each: the
    /// daemon's look for vanished sandboxes asks every few seconds, with thousands
    /// live. The default lists them.
    async fn live_ids(&self) -> Result<Vec<String>> {
        Ok(self.list().await?.into_iter().map(|i| i.id).collect())
    }

    /// One sandbox.
    async fn inspect(&self, id: &str) -> Result<SandboxInfo>;

    /// Reaps what expired, lost its owner, or was left half-made by a crash.
    async fn gc(&self) -> Result<GcReport>;

    /// Replaces the egress policy of a running sandbox that has one, effective for new
    /// connections and lookups at once. The default: not supported.
    async fn set_network(&self, id: &str, network: &spec::Network) -> Result<()> {
        let _ = (id, network);
        Err(Error::Unavailable {
            what: format!(
                "changing the network policy live on the {} provider",
                self.name()
            ),
            reason: "this provider does not implement it".into(),
            fix: "use the native provider, or create a new sandbox with the policy".into(),
        })
    }

    /// What the egress policy of sandbox `id` refused at or after `since_ms` (unix
    /// ms), oldest first. The default: nothing (no policy to refuse anything).
    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        let _ = (id, since_ms);
        Ok(Vec::new())
    }

    /// Runs one file operation inside the sandbox as the sandbox user, so it can touch
    /// only what the code itself could. Providers without file operations say so.
    async fn file(&self, id: &str, op: FileOp) -> Result<FileResult> {
        let _ = (id, op);
        Err(Error::Unavailable {
            what: format!("file operations on the {} provider", self.name()),
            reason: "this provider does not implement them".into(),
            fix: "use the native provider".into(),
        })
    }

    /// Prepares sandbox `id` to serve its first exec as fast as its later ones (the
    /// agent starts its exec zygote now, not at the second exec), and returns once it
    /// has. For sandboxes made ahead of use (pools): it spends a process per sandbox
    /// on that. The default does nothing.
    async fn warm(&self, id: &str) -> Result<()> {
        let _ = id;
        Ok(())
    }

    /// A file operation as `uid` of the sandbox (uid 0: root of its own user
    /// namespace, as an exec with [`ExecRequest::uid`]); the agent refuses a uid the
    /// sandbox cannot have. The default refuses.
    async fn file_as(&self, id: &str, uid: u32, op: FileOp) -> Result<FileResult> {
        let _ = (id, op);
        Err(Error::Unavailable {
            what: format!(
                "file operations as uid {uid} on the {} provider",
                self.name()
            ),
            reason: "this provider runs file operations as the sandbox user only".into(),
            fix: "run them as the sandbox user, or use a command as that uid".into(),
        })
    }

    /// CPU time and memory use of sandbox `id`, from its cgroups. The default
    /// refuses.
    async fn usage(&self, id: &str) -> Result<Usage> {
        let _ = id;
        Err(Error::Unavailable {
            what: format!("resource usage on the {} provider", self.name()),
            reason: "this provider does not read its sandboxes' counters".into(),
            fix: "use the native provider".into(),
        })
    }

    /// Stops the sandbox where it is, keeping its state (processes, memory, open
    /// files) for [`Provider::resume`]: the microVM writes its memory and device
    /// state to disk; the native provider freezes its cgroup. The default refuses.
    async fn pause(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(unsupported(
            self.name(),
            "pause",
            "this provider cannot keep a stopped sandbox's state",
        ))
    }

    /// Starts a paused sandbox again where it stopped. The default refuses.
    async fn resume(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(unsupported(
            self.name(),
            "resume",
            "this provider cannot keep a stopped sandbox's state",
        ))
    }

    /// Starts `count` independent copies of the paused sandbox `id` (its processes,
    /// memory and files as they were), each with its own id and identity. The
    /// default refuses.
    async fn fork(&self, id: &str, count: u32, opts: CreateOptions) -> Result<Vec<SandboxInfo>> {
        let _ = (id, count, opts);
        Err(unsupported(
            self.name(),
            "fork",
            "this provider cannot copy a running sandbox's state",
        ))
    }

    /// Keeps the state of sandbox `id` (its processes, memory and files as they are)
    /// as the named snapshot `name` ([`check_snapshot_name`]) to start new sandboxes
    /// from; the sandbox itself stays as it was (running or paused). A name taken is
    /// refused. The default refuses.
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        let _ = (id, name);
        Err(unsupported(self.name(), "snapshot", SNAPSHOT_REASON))
    }

    /// The named snapshots this provider keeps. The default refuses.
    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Err(unsupported(
            self.name(),
            "listing snapshots",
            SNAPSHOT_REASON,
        ))
    }

    /// Removes the named snapshot `name` (sandboxes started from it live on). The
    /// default refuses.
    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        let _ = name;
        Err(unsupported(
            self.name(),
            "removing a snapshot",
            SNAPSHOT_REASON,
        ))
    }

    /// Starts a new sandbox from the named snapshot `name`, after checking its digest
    /// (a changed file is refused, nothing is started). The default refuses.
    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo> {
        let _ = (name, opts);
        Err(unsupported(
            self.name(),
            "starting from a snapshot",
            SNAPSHOT_REASON,
        ))
    }
}

/// Why a provider without named snapshots refuses them.
pub const SNAPSHOT_REASON: &str =
    "this provider cannot save a sandbox's memory and processes to start new ones from";

/// A named snapshot a provider keeps to start new sandboxes from (see
/// [`Provider::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// Its name ([`check_snapshot_name`]).
    pub name: String,
    /// The provider that keeps it.
    pub provider: String,
    /// The sandbox it was taken of.
    pub source: String,
    /// When it was taken (unix ms).
    pub created_at_ms: u64,
    /// Size of its saved memory and device state, bytes.
    pub bytes: u64,
    /// SHA-256 of that state, hex: checked before every start from it.
    pub sha256: String,
    /// The spec of the sandbox it was taken of, which sandboxes started from it keep.
    #[serde(default)]
    pub spec: serde_json::Value,
}

/// The longest snapshot name.
pub const SNAPSHOT_NAME_MAX: usize = 64;

/// Checks a snapshot name: 1 to [`SNAPSHOT_NAME_MAX`] characters of ASCII letters,
/// digits, `.`, `_` and `-`, starting with a letter or digit (so never a path, `.`
/// or `..`).
pub fn check_snapshot_name(name: &str) -> Result<()> {
    check_name_upto(name, SNAPSHOT_NAME_MAX)
}

/// The longest name a provider stores a snapshot under: a name, or a daemon's
/// tenant-scoped form of it (a tag of the tenant before it).
pub const SNAPSHOT_KEY_MAX: usize = 128;

/// Checks a name a provider stores a snapshot under: as [`check_snapshot_name`], up
/// to [`SNAPSHOT_KEY_MAX`] characters. Never a path, `.` or `..`.
pub fn check_snapshot_key(name: &str) -> Result<()> {
    check_name_upto(name, SNAPSHOT_KEY_MAX)
}

fn check_name_upto(name: &str, max: usize) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidRequest(format!(
            "snapshot name {name:?} is not valid: {why}; use 1 to {SNAPSHOT_NAME_MAX} letters, \
             digits, '.', '_' or '-', starting with a letter or digit"
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > max {
        return bad(&format!("it is {} characters long", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!("it contains {c:?}"));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return bad("it does not start with a letter or digit");
    }
    Ok(())
}

/// The error of a verb a provider does not have: names the provider, the verb and why.
pub fn unsupported(provider: &str, verb: &str, reason: &str) -> Error {
    Error::Unavailable {
        what: format!("{verb} on the {provider} provider"),
        reason: reason.to_string(),
        fix: "use the microvm provider".to_string(),
    }
}

/// A live sandbox. Call [`Sandbox::destroy`] when done; a sandbox created with an
/// owner also dies with its owner process.
#[derive(Clone)]
pub struct Sandbox {
    provider: Arc<dyn Provider>,
    info: SandboxInfo,
    policy: Option<Arc<Policy>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.info.id)
            .field("provider", &self.info.provider)
            .finish()
    }
}

impl Sandbox {
    /// Creates a sandbox on `provider`.
    pub async fn create(
        provider: Arc<dyn Provider>,
        spec: SandboxSpec,
        opts: CreateOptions,
    ) -> Result<Sandbox> {
        let spec = CheckedSpec::new(spec.validate()?, provider.as_ref())?;
        let info = provider.create(spec, opts).await?;
        Ok(Sandbox {
            provider,
            info,
            policy: None,
        })
    }

    /// A handle to an existing sandbox.
    pub async fn attach(provider: Arc<dyn Provider>, id: &str) -> Result<Sandbox> {
        let info = provider.inspect(id).await?;
        Ok(Sandbox {
            provider,
            info,
            policy: None,
        })
    }

    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// What is known about the sandbox.
    pub fn info(&self) -> &SandboxInfo {
        &self.info
    }

    /// Puts an approval policy in front of every exec and file write of this handle.
    pub fn with_policy(mut self, policy: Arc<Policy>) -> Sandbox {
        self.policy = Some(policy);
        self
    }

    fn approve(&self, action: Action<'_>) -> Result<()> {
        match &self.policy {
            Some(p) => p.check(&self.info.id, &action),
            None => Ok(()),
        }
    }

    /// Runs a command and waits for it.
    pub async fn exec(&self, req: ExecRequest) -> Result<ExecOutcome> {
        self.exec_with(req, ExecIo::none()).await
    }

    /// Runs a command, sending live output to `output`.
    pub async fn exec_streaming(
        &self,
        req: ExecRequest,
        output: OutputSender,
    ) -> Result<ExecOutcome> {
        self.exec_with(req, ExecIo::output(output)).await
    }

    /// Runs a command with the given I/O (live output, stdin and kill requests).
    pub async fn exec_with(&self, req: ExecRequest, io: ExecIo) -> Result<ExecOutcome> {
        let req = CheckedRequest::new(req)?;
        self.approve(Action::Exec(&req))?;
        self.provider.exec(&self.info.id, req, io).await
    }

    /// Replaces the sandbox's egress policy (only a sandbox created with one has a
    /// policy to replace); every problem of the new policy is listed at once.
    pub async fn set_network(&self, network: &spec::Network) -> Result<()> {
        let problems = match network {
            spec::Network::Policy(p) => p.problems(),
            _ => Vec::new(),
        };
        if !problems.is_empty() {
            return Err(Error::InvalidSpec(spec::SpecErrors(
                problems
                    .into_iter()
                    .map(|(field, message)| spec::SpecError { field, message })
                    .collect(),
            )));
        }
        self.provider.set_network(&self.info.id, network).await
    }

    /// What the sandbox's egress policy refused at or after `since_ms` (0: all that
    /// is still recorded), oldest first.
    pub async fn egress_denied(&self, since_ms: u64) -> Result<Vec<EgressDenial>> {
        self.provider.egress_denied(&self.info.id, since_ms).await
    }

    /// Runs a file operation (writes are checked by the approval policy first).
    pub async fn file(&self, op: FileOp) -> Result<FileResult> {
        if op.writes() {
            self.approve(Action::FileWrite(&op))?;
        }
        self.provider.file(&self.info.id, op).await
    }

    /// [`Sandbox::file`] as `uid` of the sandbox (see [`Provider::file_as`]).
    pub async fn file_as(&self, uid: u32, op: FileOp) -> Result<FileResult> {
        if op.writes() {
            self.approve(Action::FileWrite(&op))?;
        }
        self.provider.file_as(&self.info.id, uid, op).await
    }

    /// Writes a file (parents created).
    pub async fn write(&self, path: &str, data: impl Into<Vec<u8>>) -> Result<()> {
        self.file(FileOp::Write {
            path: path.into(),
            data: data.into(),
            mode: None,
        })
        .await
        .map(drop)
    }

    /// Reads a whole file (up to the file limit).
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        match self
            .file(FileOp::Read {
                path: path.into(),
                offset: 0,
                limit: files::MAX_FILE_BYTES,
            })
            .await?
        {
            FileResult::Data { data, .. } => Ok(data),
            other => Err(unexpected(other)),
        }
    }

    /// Replaces `old` by `new` in a file; returns the number of replacements.
    pub async fn edit(&self, path: &str, old: &str, new: &str, replace_all: bool) -> Result<u64> {
        match self
            .file(FileOp::Edit {
                path: path.into(),
                old: old.into(),
                new: new.into(),
                replace_all,
            })
            .await?
        {
            FileResult::Edited { replacements } => Ok(replacements),
            other => Err(unexpected(other)),
        }
    }

    /// Lists a directory.
    pub async fn ls(&self, path: &str) -> Result<Vec<FileEntry>> {
        match self.file(FileOp::Ls { path: path.into() }).await? {
            FileResult::Entries(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    /// Describes one path (following symlinks inside the sandbox).
    pub async fn stat(&self, path: &str) -> Result<FileEntry> {
        match self.file(FileOp::Stat { path: path.into() }).await? {
            FileResult::Entries(mut e) if e.len() == 1 => Ok(e.remove(0)),
            other => Err(unexpected(other)),
        }
    }

    /// Paths below `root` matching a glob, relative to `root`, sorted.
    pub async fn glob(&self, pattern: &str, root: &str) -> Result<Vec<String>> {
        match self
            .file(FileOp::Glob {
                pattern: pattern.into(),
                root: root.into(),
            })
            .await?
        {
            FileResult::Paths { paths, .. } => Ok(paths),
            other => Err(unexpected(other)),
        }
    }

    /// Lines matching `regex` in files below `root` (only files matching `include`
    /// when given), at most `max_matches` (0: the default of 1000).
    pub async fn grep(
        &self,
        regex: &str,
        root: &str,
        include: Option<&str>,
        max_matches: u32,
    ) -> Result<Vec<GrepMatch>> {
        let op = FileOp::Grep {
            regex: regex.into(),
            root: root.into(),
            include: include.map(str::to_string),
            max_matches,
        };
        match self.file(op).await? {
            FileResult::Matches { matches, .. } => Ok(matches),
            other => Err(unexpected(other)),
        }
    }

    /// Creates a directory and its parents.
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        self.file(FileOp::Mkdir {
            path: path.into(),
            parents: true,
        })
        .await
        .map(drop)
    }

    /// Removes a file or a directory tree.
    pub async fn rm(&self, path: &str) -> Result<()> {
        self.file(FileOp::Rm {
            path: path.into(),
            recursive: true,
        })
        .await
        .map(drop)
    }

    /// Unpacks a tar (or tar.gz) archive into the directory `dest`.
    pub async fn upload(&self, dest: &str, archive: Vec<u8>) -> Result<()> {
        self.file(FileOp::Upload {
            dest: dest.into(),
            archive,
        })
        .await
        .map(drop)
    }

    /// Packs a file or directory into a tar archive.
    pub async fn download(&self, path: &str) -> Result<Vec<u8>> {
        match self.file(FileOp::Download { path: path.into() }).await? {
            FileResult::Archive(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    /// Destroys the sandbox (idempotent).
    pub async fn destroy(&self) -> Result<()> {
        self.provider.destroy(&self.info.id).await
    }

    /// What the provider says of the sandbox now (its state, its expiry moved by
    /// pauses); [`Sandbox::info`] is what it said at creation.
    pub async fn inspect(&self) -> Result<SandboxInfo> {
        self.provider.inspect(&self.info.id).await
    }

    /// Prepares the sandbox to serve its first exec as fast as its later ones (see
    /// [`Provider::warm`]).
    pub async fn warm(&self) -> Result<()> {
        self.provider.warm(&self.info.id).await
    }

    /// Pauses the sandbox, keeping its state (see [`Provider::pause`]).
    pub async fn pause(&self) -> Result<()> {
        self.provider.pause(&self.info.id).await
    }

    /// Resumes a paused sandbox where it stopped.
    pub async fn resume(&self) -> Result<()> {
        self.provider.resume(&self.info.id).await
    }

    /// Keeps this sandbox's state as the named snapshot `name` (see
    /// [`Provider::snapshot`]); the sandbox stays as it was.
    pub async fn snapshot(&self, name: &str) -> Result<SnapshotInfo> {
        check_snapshot_name(name)?;
        self.provider.snapshot(&self.info.id, name).await
    }

    /// Starts a new sandbox on `provider` from its named snapshot `name` (checked
    /// against its digest first); it dies with `opts.owner_pid` when given.
    pub async fn from_snapshot(
        provider: Arc<dyn Provider>,
        name: &str,
        opts: CreateOptions,
    ) -> Result<Sandbox> {
        check_snapshot_name(name)?;
        let info = provider.create_from_snapshot(name, opts).await?;
        Ok(Sandbox {
            provider,
            info,
            policy: None,
        })
    }

    /// Starts `count` copies of this paused sandbox, each its own sandbox (with the
    /// policy of this one); they die with `opts.owner_pid` when given.
    pub async fn fork(&self, count: u32, opts: CreateOptions) -> Result<Vec<Sandbox>> {
        let infos = self.provider.fork(&self.info.id, count, opts).await?;
        Ok(infos
            .into_iter()
            .map(|info| Sandbox {
                provider: self.provider.clone(),
                info,
                policy: self.policy.clone(),
            })
            .collect())
    }
}

fn unexpected(r: FileResult) -> Error {
    Error::Internal(format!("unexpected file operation result {r:?}"))
}

/// Checks an exec request before it reaches a provider.
pub fn check_request(req: &ExecRequest) -> Result<()> {
    if req.argv.is_empty() {
        return Err(Error::InvalidRequest(
            "argv is empty; give a command to run".into(),
        ));
    }
    if req.argv[0].is_empty() {
        return Err(Error::InvalidRequest("argv[0] is empty".into()));
    }
    if let Some(bad) = req.argv.iter().find(|a| a.contains('\0')) {
        return Err(Error::InvalidRequest(format!(
            "argument {bad:?} contains NUL"
        )));
    }
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(Error::InvalidRequest(format!(
                "environment variable {k:?} has an invalid name or value"
            )));
        }
    }
    if let Some(cwd) = &req.cwd
        && !cwd.starts_with('/')
    {
        return Err(Error::InvalidRequest(format!(
            "cwd {cwd:?} is not absolute"
        )));
    }
    if req.timeout_ms == Some(0) {
        return Err(Error::InvalidRequest(
            "exec timeout must be positive".into(),
        ));
    }
    Ok(())
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
