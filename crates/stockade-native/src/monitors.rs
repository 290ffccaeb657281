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

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use stockade_agent_host::reap;
use stockade_core::{Error, Result};
use tokio::io::{AsyncRead, AsyncWrite};

/// A started monitor's stdin (the plan goes in) and stdout (its report comes out).
pub struct Started {
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
}

/// The monitor's command line: PID 1 of the sandbox is the monitor's fork, so its
/// command line is readable inside and names no host path (the agent's own would).
const ARG0: &str = "stockade-monitor";
/// The environment of every monitor, and of the server that forks them.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// This process's monitor server.
enum Server {
    /// Not started: monitors are spawned (this many so far).
    Unused(u32),
    /// Serving: its socket, the agent binary it runs, and the process that started it
    /// (a forked copy of that process must not use it: its monitors would be the
    /// original's children).
    Ready(UnixStream, PathBuf, u32),
    /// Failed to start, died, or set aside: monitors are spawned.
    Off,
}

static SERVER: Mutex<Server> = Mutex::new(Server::Unused(0));

/// Taken for each request to the server (the socket is shared: two requests at once
/// could each read the other's answer). The server forks them one at a time anyway.
static REQUESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The longest a request to the server may take (a fork: well under a millisecond;
/// more only on a machine too loaded to matter), and its start.
const SERVER_WAIT: Duration = Duration::from_secs(5);

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
            // Gone or misbehaving: spawn from now on (its socket closes here, so a
            // live one ends).
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

/// The server's socket (a clone), starting it at this process's second monitor.
async fn server_for(agent: &Path) -> Option<UnixStream> {
    {
        let mut g = lock();
        let me = std::process::id();
        if matches!(&*g, Server::Ready(_, _, owner) if *owner != me) {
            // Inherited through a fork of the process that started it: ours starts anew.
            *g = Server::Unused(0);
        }
        match &mut *g {
            Server::Ready(sock, path, _) if path == agent => return sock.try_clone().ok(),
            Server::Ready(..) | Server::Off => return None,
            Server::Unused(n) if *n == 0 => {
                *n = 1;
                return None;
            }
            Server::Unused(_) => {}
        }
        if std::env::var_os("STOCKADE_NO_MONITOR_SERVER").is_some_and(|v| v == "1") {
            *g = Server::Off;
            return None;
        }
        // Only one caller starts it; the others spawn meanwhile.
        *g = Server::Off;
    }
    let path = agent.to_path_buf();
    let started = tokio::task::spawn_blocking(move || start_server(&path))
        .await
        .ok()
        .and_then(std::result::Result::ok);
    let sock = started?;
    let clone = sock.try_clone().ok()?;
    *lock() = Server::Ready(sock, agent.to_path_buf(), std::process::id());
    Some(clone)
}

/// Starts `agent monitor-server` with its socket as fd 3; waits for its ready byte.
/// Its stdio is /dev/null: a monitor gets its own from each request.
fn start_server(agent: &Path) -> std::io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut cmd = std::process::Command::new(agent);
    std::os::unix::process::CommandExt::arg0(&mut cmd, ARG0);
    cmd.arg("monitor-server")
        .env_clear()
        .env("PATH", PATH)
        .stdin(std::process::Stdio::null())
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
    let mut ready = [0u8; 1];
    (&ours).read_exact(&mut ready)?;
    if ready[0] != b'r' {
        return Err(std::io::Error::other("the monitor server is not ready"));
    }
    Ok(ours)
}

/// Asks the server for a monitor with fresh stdin/stdout pipes and `log` as stderr.
fn fork_from(sock: &UnixStream, log: &OwnedFd) -> std::io::Result<Started> {
    let (stdin_r, stdin_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (stdout_r, stdout_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    stockade_sys::net::send_fds(
        sock.as_fd(),
        b"m",
        &[stdin_r.as_fd(), stdout_w.as_fd(), log.as_fd()],
    )
    .map_err(std::io::Error::other)?;
    let mut answer = [0u8; 4];
    (&*sock).read_exact(&mut answer)?;
    let pid = i32::from_le_bytes(answer);
    if pid <= 0 {
        return Err(std::io::Error::from_raw_os_error(-pid));
    }
    // Our copies of its ends go, so its pipes end with it.
    drop((stdin_r, stdout_w));
    // Ours to reap: the server forked it as our child.
    reap::reap_pid_later(pid as u32)?;
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
    let mut cmd = std::process::Command::new(agent);
    std::os::unix::process::CommandExt::arg0(&mut cmd, ARG0);
    cmd.arg("monitor")
        .env_clear()
        .env("PATH", PATH)
        .stdin(std::process::Stdio::piped())
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
