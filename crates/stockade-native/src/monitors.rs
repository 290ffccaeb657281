//! Starting a sandbox's monitor: spawned from the agent's binary, or, once this process
//! has created a sandbox before, forked by a monitor server (`stockade-agent
//! monitor-server`, see the agent's monitor_server.rs) that this process starts once
//! and keeps. A fork of that small single-threaded process costs far less than an
//! `exec` of the agent (the static-pie's relocation and glibc's start, whose CPUID
//! probes trap on a nested VM). Either way the monitor is this process's own child,
//! reaped by it alone (`reap`), started with the same environment, stdio and session.
//!
//! A process that creates one sandbox (a CLI one-shot) never starts the server. Where
//! the server cannot start or dies, monitors are spawned as before.
//! `STOCKADE_NO_MONITOR_SERVER=1` sets it aside (to measure it).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockade_agent_host::reap;
use stockade_core::{Error, Result};
use stockade_sys::forkserver;
use tokio::io::{AsyncRead, AsyncWrite};

/// A started monitor's stdin (the plan goes in) and stdout (its report comes out).
pub struct Started {
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
}

/// This process's monitor server.
enum Server {
    /// No monitor started yet.
    Unused,
    /// One monitor spawned: the next starts the server.
    OneSpawned,
    /// Serving: its socket, the agent binary it runs, and the process that started it
    /// (a forked copy of that process must not use it: its monitors would be the
    /// original's children).
    Ready(Arc<UnixStream>, PathBuf, u32),
    /// Failed to start, died, or set aside: monitors are spawned.
    Off,
}

static SERVER: Mutex<Server> = Mutex::new(Server::Unused);

/// Taken for each request to the server (the socket is shared: two requests at once
/// could each read the other's answer). The server forks them one at a time anyway.
static REQUESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The longest a request to the server may take (a fork: well under a millisecond;
/// more only on a machine too loaded to matter), and its start.
const SERVER_WAIT: Duration = Duration::from_secs(5);

/// The request byte of the agent's monitor server (its `monitor_server::REQUEST`).
const REQUEST: u8 = b'm';

/// Starts the monitor of a sandbox from `agent` with `log` as its stderr.
pub async fn start(agent: &Path, log: std::fs::File) -> Result<Started> {
    let log: OwnedFd = log.into();
    if let Some(sock) = server_for(agent).await {
        // One request at a time: each reads the answer to its own.
        let turn = REQUESTS.lock().await;
        let forked = fork_from(&sock, &log);
        drop(turn);
        match forked {
            Ok(started) => return Ok(started),
            // Gone or misbehaving: spawn from now on (its socket closes once the last
            // request holding it is done, so a live one ends).
            Err(_) => *lock() = Server::Off,
        }
    }
    spawn(agent, log)
}

fn lock() -> std::sync::MutexGuard<'static, Server> {
    SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The server's socket, starting the server at this process's second monitor.
async fn server_for(agent: &Path) -> Option<Arc<UnixStream>> {
    {
        let mut g = lock();
        let me = std::process::id();
        if matches!(&*g, Server::Ready(_, _, owner) if *owner != me) {
            // Inherited through a fork of the process that started it: ours starts anew.
            *g = Server::Unused;
        }
        match &*g {
            Server::Ready(sock, path, _) if path == agent => return Some(sock.clone()),
            Server::Ready(..) | Server::Off => return None,
            Server::Unused => {
                *g = Server::OneSpawned;
                return None;
            }
            Server::OneSpawned => {}
        }
        // Only one caller starts it (or sets it aside); the others spawn meanwhile.
        *g = Server::Off;
        if std::env::var_os("STOCKADE_NO_MONITOR_SERVER").is_some_and(|v| v == "1") {
            return None;
        }
    }
    let path = agent.to_path_buf();
    let sock = tokio::task::spawn_blocking(move || start_server(&path))
        .await
        .ok()?
        .ok()?;
    let sock = Arc::new(sock);
    *lock() = Server::Ready(sock.clone(), agent.to_path_buf(), std::process::id());
    Some(sock)
}

/// `agent ROLE` as every monitor (and the server that forks them) starts: named
/// `stockade-monitor` (PID 1 of the sandbox is the monitor's fork, so its command line
/// is readable inside and must name no host path, as the agent's own would), with
/// only a standard PATH in its environment.
fn command(agent: &Path, role: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(agent);
    std::os::unix::process::CommandExt::arg0(&mut cmd, "stockade-monitor");
    cmd.arg(role).env_clear().env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    cmd
}

/// Starts `agent monitor-server` with its socket as fd 3; waits for its ready byte.
/// Its stdio is /dev/null: a monitor gets its own from each request.
fn start_server(agent: &Path) -> std::io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut cmd = command(agent, "monitor-server");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // Out of reach of our terminal's Ctrl-C, as the monitors are.
    stockade_sys::process::spawn_in_new_session(&mut cmd);
    stockade_sys::process::pass_fd(&mut cmd, theirs.into(), 3);
    let child = tokio::process::Command::from(cmd).spawn()?;
    // It lives as long as its socket (ours) stays open: until this process exits.
    reap::reap_later(child);
    ours.set_read_timeout(Some(SERVER_WAIT))?;
    ours.set_write_timeout(Some(SERVER_WAIT))?;
    forkserver::wait_ready(&ours)?;
    Ok(ours)
}

/// Asks the server for a monitor with fresh stdin/stdout pipes and `log` as stderr.
fn fork_from(sock: &UnixStream, log: &OwnedFd) -> std::io::Result<Started> {
    let (stdin_r, stdin_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (stdout_r, stdout_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let pid = forkserver::request(
        sock,
        REQUEST,
        &[stdin_r.as_fd(), stdout_w.as_fd(), log.as_fd()],
    )
    .map_err(|r| match r {
        forkserver::Refused::Child(e) | forkserver::Refused::Gone(e) => e,
    })?;
    // Our copies of its ends go, so its pipes end with it.
    drop((stdin_r, stdout_w));
    // Ours to reap: the server forked it as our child.
    reap::reap_pid_later(pid)?;
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin_w)?;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_r)?;
    Ok(Started {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
    })
}

/// Spawns `agent monitor` (a `posix_spawn`: the monitor's first act detaches it and
/// closes what our caller left open, see `stockade_sys::process::detach_and_close_inherited`).
fn spawn(agent: &Path, log: OwnedFd) -> Result<Started> {
    let mut cmd = command(agent, "monitor");
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::from(log));
    let mut child = tokio::process::Command::from(cmd)
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {}", agent.display()), e))?;
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    // The monitor stays our child for the sandbox's life: we reap it when it ends
    // (never another pid), so no zombie is left to the host's PID 1.
    reap::reap_later(child);
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(Error::Internal("monitor stdio missing".into()));
    };
    Ok(Started {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
    })
}
