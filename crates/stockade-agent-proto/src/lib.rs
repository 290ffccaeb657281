//! The Stockade agent protocol: the messages between a provider (host side) and the
//! agent that runs as PID 1 inside every Linux sandbox, the exec types every provider
//! shares, bounded output capture, and the launch plan of the native provider.
//!
//! Framing: each message is a little-endian `u32` length followed by that many bytes of
//! `postcard`. A connection starts with [`ClientMsg::Hello`] carrying
//! [`PROTOCOL_VERSION`]; the agent answers [`AgentMsg::Hello`] or an error. The client
//! may pipeline its request right after its hello.

pub mod capture;
pub mod codec;
pub mod files;
pub mod launch;
pub mod mux;
pub mod wall;
pub mod watch;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use capture::BoundedCapture;
pub use wall::{Wall, WallKind};
pub use watch::{WatchDir, WatchError, WatchKind, WatchLine};

/// Version of this protocol. Bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame accepted (guards against a peer announcing a huge length).
pub const MAX_FRAME_BYTES: u32 = 64 << 20;

/// Size of an output chunk streamed to the client.
pub const CHUNK_BYTES: usize = 64 << 10;

/// Error codes shared by every layer: the agent, providers, the daemon, the CLI (exit
/// codes) and the SDKs (exception classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The spec or request is invalid; the message lists why.
    InvalidSpec,
    /// No such sandbox, exec, file or image.
    NotFound,
    /// A backend or host feature needed is missing; the message says how to fix it.
    Unavailable,
    /// An operation (not the user's code) ran out of time.
    Timeout,
    /// A quota or size limit was reached.
    LimitExceeded,
    /// The policy forbids the operation.
    PolicyDenied,
    /// A bug or an unexpected host failure.
    Internal,
}

impl ErrorCode {
    /// Stable lowercase name (`invalid_spec`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidSpec => "invalid_spec",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::PolicyDenied => "policy_denied",
            ErrorCode::Internal => "internal",
        }
    }
}

/// Which output stream a chunk belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One command to run in a sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Program and arguments; the program is looked up in PATH when it has no `/`.
    pub argv: Vec<String>,
    /// Environment added on top of the sandbox's base environment.
    pub env: BTreeMap<String, String>,
    /// Working directory (default: the sandbox's workdir).
    pub cwd: Option<String>,
    /// Bytes fed to stdin, which is then closed (default: empty).
    #[serde(with = "serde_bytes")]
    pub stdin: Vec<u8>,
    /// Deadline in milliseconds; at it everything the exec started is killed.
    pub timeout_ms: Option<u64>,
    /// Cap on each captured stream (default 1 MiB), keeping head and tail.
    pub output_limit_bytes: u64,
    /// Send output chunks as they come (the head of each stream, up to half the cap).
    pub stream: bool,
    /// Keep stdin open after `stdin` for [`ClientMsg::Stdin`] messages until
    /// [`ClientMsg::CloseStdin`] (default false: stdin ends after `stdin`).
    pub keep_stdin_open: bool,
    /// Leave the processes the command starts running after it exits, as a server
    /// started with `cmd &` (default false: when the command exits, everything it
    /// started is killed, so nothing outlives the result). They stay tracked by the
    /// exec's shim and end with the sandbox; the deadline still kills the whole tree
    /// when it passes before the command exits.
    #[serde(default)]
    pub background: bool,
    /// Return as soon as the command has started, leaving it running, as
    /// `docker exec -d` does: [`ExecOutcome::pid`] is its pid and its stdin is empty.
    /// Its stdout and stderr go, interleaved, to [`detached_log`]`(pid)` inside the
    /// sandbox (read it with a file read), or nowhere with [`ExecRequest::discard_output`].
    /// What it starts stays too (as with `background`); the deadline, if any, still
    /// kills all of it, and it ends with the sandbox.
    #[serde(default)]
    pub detach: bool,
    /// With `detach`: keep no output (stdout and stderr are `/dev/null`).
    #[serde(default)]
    pub discard_output: bool,
    /// Run the command on a pseudo-terminal of this size instead of pipes: its stdin,
    /// stdout and stderr are the terminal, which is its controlling terminal in a session
    /// of its own, and everything it writes comes back as stdout. With
    /// `keep_stdin_open`, [`ClientMsg::Stdin`] is what is typed (a Ctrl-C byte
    /// interrupts, as on any terminal), [`ClientMsg::CloseStdin`] types end-of-file
    /// (Ctrl-D), and [`ClientMsg::Resize`] changes the size (the command gets
    /// `SIGWINCH`). Not with `detach`.
    #[serde(default)]
    pub tty: Option<TtySize>,
    /// Run the agent's own directory watcher instead of a program (`argv` then only
    /// names the exec in listings): inotify on [`WatchDir::path`], as the exec's user
    /// and under the exec's policy, so the sandbox's mounts and permissions decide
    /// what it may watch, and no interpreter is needed in the image. Its stdout is
    /// [`WatchLine`]s, one JSON object a line; see [`watch`]. Not with `tty` or
    /// `detach`.
    #[serde(default)]
    pub watch: Option<WatchDir>,
    /// Run as this uid of the sandbox (its gid the same number) instead of the
    /// sandbox's user; `Some(0)` is root of the sandbox's own user namespace, with
    /// [`launch::ROOT_CAPS`] and no host privilege. Agents honour it only in a sandbox
    /// with a user namespace. Not in the request's serialized form: it travels as
    /// [`ClientMsg::ExecAs`], so a request without it is the same bytes as before and
    /// an older agent still understands it.
    #[serde(skip)]
    pub uid: Option<u32>,
}

impl ExecRequest {
    /// A request for `argv` with the defaults: no stdin, no deadline, 1 MiB per stream.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(argv: I) -> ExecRequest {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
            stdin: Vec::new(),
            timeout_ms: None,
            output_limit_bytes: 1 << 20,
            stream: false,
            keep_stdin_open: false,
            background: false,
            detach: false,
            discard_output: false,
            tty: None,
            watch: None,
            uid: None,
        }
    }

    /// A request that watches the directory `path` (and, `recursive`, every directory
    /// below it) until it is killed: [`ExecRequest::watch`].
    pub fn watch_dir(path: &str, recursive: bool) -> ExecRequest {
        let mut req = ExecRequest::new(["stockade-watch", path]);
        req.watch = Some(WatchDir {
            path: path.to_string(),
            recursive,
        });
        req.output_limit_bytes = watch::OUTPUT_LIMIT;
        req
    }
}

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

impl TtySize {
    /// The size a terminal has when nobody says: 24 rows of 80 columns.
    pub const DEFAULT: TtySize = TtySize { rows: 24, cols: 80 };

    /// Refuses a size with no rows or no columns, naming it.
    pub fn check(self) -> Result<TtySize, String> {
        if self.rows == 0 || self.cols == 0 {
            return Err(format!(
                "a terminal of {} rows and {} columns has no room: give both as 1 or more",
                self.rows, self.cols
            ));
        }
        Ok(self)
    }
}

/// How an exec ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutcome {
    /// Exit code, or 128 + signal number when killed by a signal (as shells report).
    pub exit_code: i32,
    /// The signal that killed the process, if one did.
    pub signal: Option<i32>,
    /// The exec deadline passed and everything it started was killed.
    pub timed_out: bool,
    /// The kernel's OOM killer killed a process of this exec.
    pub oom_killed: bool,
    /// Wall time from start to exit, in milliseconds.
    pub duration_ms: u64,
    /// Captured stdout (head + tail when truncated).
    #[serde(with = "serde_bytes")]
    pub stdout: Vec<u8>,
    /// Captured stderr (head + tail when truncated).
    #[serde(with = "serde_bytes")]
    pub stderr: Vec<u8>,
    /// Bytes of stdout dropped between head and tail.
    pub stdout_dropped: u64,
    /// Bytes of stderr dropped between head and tail.
    pub stderr_dropped: u64,
    /// What the sandbox's egress policy refused during the exec (names not answered,
    /// connections rejected), oldest first. Filled by the host side, not the agent.
    pub egress_denied: Vec<EgressDenial>,
    /// A detached exec's pid (inside the sandbox); `None` for an exec that ran to its end.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// Where a detached exec's output is kept inside the sandbox (one file per pid, in a
/// directory any user of the sandbox may add to, as `/tmp`).
pub const DETACHED_LOG_DIR: &str = "/tmp/.stockade-exec";

/// The file a detached exec of pid `pid` writes its stdout and stderr to.
pub fn detached_log(pid: u32) -> String {
    format!("{DETACHED_LOG_DIR}/{pid}.log")
}

/// One thing a sandbox's egress policy refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressDenial {
    /// When (unix ms): for connections, the latest attempt to that destination.
    pub at_ms: u64,
    /// `tcp`, `udp`, or `dns` for a lookup that was not answered.
    pub protocol: String,
    /// The address connected to, or the name looked up.
    pub destination: String,
    /// The port connected to (none for lookups).
    pub port: Option<u16>,
    /// The name the address was resolved from, when known.
    pub name: Option<String>,
    /// What decided: `denylist`, `not in the allowlist`, `host or private range`.
    pub rule: String,
}

impl std::fmt::Display for EgressDenial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.protocol == "dns" {
            return write!(
                f,
                "lookup of {} was refused by the sandbox's network policy ({})",
                self.destination, self.rule
            );
        }
        write!(f, "connection to ")?;
        match &self.name {
            Some(n) => write!(f, "{n} ({})", self.destination)?,
            None => write!(f, "{}", self.destination)?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        write!(
            f,
            "/{} was blocked by the sandbox's network policy ({})",
            self.protocol, self.rule
        )
    }
}

impl ExecOutcome {
    /// Whether either stream was cut.
    pub fn truncated(&self) -> bool {
        self.stdout_dropped > 0 || self.stderr_dropped > 0
    }
}

/// Messages from the host side to the agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientMsg {
    /// First message of every connection.
    Hello { version: u32 },
    /// Liveness check; answered with [`AgentMsg::Pong`].
    Ping,
    /// Run a command; answered with `Started`, `Output`s and `Exited` (or `Error`).
    Exec(ExecRequest),
    /// More stdin for the running exec of this connection.
    Stdin(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Close the running exec's stdin.
    CloseStdin,
    /// Kill everything the running exec of this connection started.
    Kill,
    /// A file operation, run as the sandbox user; answered with `FileDone` or `Error`.
    File(files::FileOp),
    /// Send this signal (1 to 64) to the running exec's main process; the exec goes on
    /// until that process ends (on its own, or by the signal). Added after the other
    /// messages, so their encoding (postcard's variant index) is unchanged; an older
    /// agent answers it as an unexpected message by ending the exec, as for `Kill`.
    Signal(i32),
    /// [`ClientMsg::Exec`] as another uid of the sandbox ([`ExecRequest::uid`]).
    ExecAs { uid: u32, req: ExecRequest },
    /// [`ClientMsg::File`] as another uid of the sandbox (checked and applied as for
    /// [`ClientMsg::ExecAs`]: uid 0 is root of the sandbox's own user namespace, with
    /// its capabilities there and the same landlock domain). Appended last, like
    /// `ExecAs`, so earlier messages keep their encoding.
    FileAs { uid: u32, op: files::FileOp },
    /// Start now what the sandbox's later execs and file operations are served by
    /// (the exec zygote), instead of at its second one; answered with
    /// [`AgentMsg::Pong`] once that is ready (or cannot be: execs then go on without
    /// it). Sent to a sandbox warmed into a pool, whose first exec is then as fast as
    /// any later one. Appended last, so earlier messages keep their encoding.
    Warm,
    /// Connect to TCP `port` on the sandbox's own loopback (127.0.0.1, else ::1), as
    /// a client inside would: answered with [`AgentMsg::Connected`], after which the
    /// connection carries that TCP stream's bytes both ways until either side ends
    /// it; or with `Error` when nothing listens there. Appended last.
    Connect { port: u16 },
    /// The running exec's terminal ([`ExecRequest::tty`]) is now this size; ignored by
    /// an exec without one. Appended last.
    Resize(TtySize),
}

/// Messages from the agent to the host side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AgentMsg {
    /// Answer to [`ClientMsg::Hello`].
    Hello { version: u32, agent_version: String },
    /// Answer to [`ClientMsg::Ping`].
    Pong,
    /// The exec's process started with this pid (inside the sandbox).
    Started { pid: u32 },
    /// A chunk of live output.
    Output {
        stream: Stream,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The exec ended.
    Exited(ExecOutcome),
    /// The request failed (the user's code did not run, or the agent broke).
    Error { code: ErrorCode, message: String },
    /// Result of a [`ClientMsg::File`].
    FileDone(files::FileResult),
    /// Answer to [`ClientMsg::Connect`]: from here on the connection is the port's.
    Connected,
}

/// Now, as milliseconds since the Unix epoch (the unit of every timestamp the
/// providers, the agent and the daemon record).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
