//! `stockade-agent docker-watch CONTAINER INIT_PID OWNER_PID|- EXPIRES_MS DOCKER_SOCKET STATE_DIR [NET_DIR]`:
//! the host-side watcher of one docker sandbox; `stockade-agent gvisor-watch RUNSC
//! RUNSC_ROOT ID INIT_PID OWNER_PID|- EXPIRES_MS STATE_DIR`: the same for a gVisor
//! sandbox, removed with `runsc delete --force`.
//!
//! The docker provider starts it after the container is up. It detaches at once and
//! waits on pidfds of the container's PID 1 and of the owner process, and on the
//! lifetime deadline. When the owner dies or the lifetime passes it removes the
//! container through the Engine API (a forced delete kills everything in it) and the
//! sandbox's state directory. When the container ends first (destroyed, or died under
//! us) it exits and leaves the rest to the provider and to `stockade gc`.
//!
//! With `NET_DIR` (a docker sandbox with network), stdin carries the network half of
//! a launch plan (`LENGTH\n`, the plan, then an egress policy's credentials if any),
//! and the watcher is the container's network monitor as a native sandbox's monitor
//! is: before it detaches it loads the firewall into the container's network
//! namespace, binds the policy's resolver and proxy there and starts slirp4netns;
//! detached, it serves them (`NET_DIR/net.sock` for denials and policy changes) until
//! it exits with the sandbox.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use stockade_agent_proto::launch::PausedTime;
use stockade_agent_proto::now_ms;
use stockade_sys::process::{Forked, exit_now, fork};

/// How the watched sandbox is removed.
enum Engine {
    /// Through the Engine API on this socket.
    Docker { socket: String },
    /// `RUNSC --root ROOT delete --force`; the watcher holds the image store's in-use
    /// lock of the sandbox's image (shared `flock`) for the sandbox's life.
    Runsc {
        runsc: String,
        root: String,
        image_lock: Option<String>,
    },
}

struct Args {
    engine: Engine,
    container: String,
    init_pid: i32,
    owner_pid: Option<i32>,
    expires_at_ms: u64,
    state_dir: String,
    /// Docker with network: the directory of its network monitor.
    net_dir: Option<String>,
}

const DOCKER_USAGE: &str = "usage: stockade-agent docker-watch CONTAINER INIT_PID OWNER_PID|- EXPIRES_MS DOCKER_SOCKET STATE_DIR [NET_DIR]";
const GVISOR_USAGE: &str = "usage: stockade-agent gvisor-watch RUNSC RUNSC_ROOT ID INIT_PID OWNER_PID|- EXPIRES_MS STATE_DIR IMAGE_LOCK|-";

fn parse(gvisor: bool, args: &[String]) -> Result<Args, String> {
    let (args, net_dir) = match args {
        [first @ .., net] if !gvisor && args.len() == 7 => (first, Some(net.clone())),
        _ => (args, None),
    };
    let (engine, [container, init, owner, expires, state]) = (if gvisor {
        match args {
            [runsc, root, id, init, owner, expires, state, lock] => Some((
                Engine::Runsc {
                    runsc: runsc.clone(),
                    root: root.clone(),
                    image_lock: (lock != "-").then(|| lock.clone()),
                },
                [id, init, owner, expires, state],
            )),
            _ => None,
        }
    } else {
        match args {
            [container, init, owner, expires, socket, state] => Some((
                Engine::Docker {
                    socket: socket.clone(),
                },
                [container, init, owner, expires, state],
            )),
            _ => None,
        }
    })
    .ok_or(if gvisor { GVISOR_USAGE } else { DOCKER_USAGE })?;
    let num = |what: &str, s: &str| {
        s.parse::<i64>()
            .map_err(|_| format!("{what} {s:?} is not a number"))
    };
    if container.is_empty()
        || !container
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!("container name {container:?} is not valid"));
    }
    Ok(Args {
        engine,
        container: container.clone(),
        init_pid: num("init pid", init)? as i32,
        owner_pid: if owner == "-" {
            None
        } else {
            Some(num("owner pid", owner)? as i32)
        },
        expires_at_ms: num("expiry", expires)? as u64,
        state_dir: state.clone(),
        net_dir,
    })
}

fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Entry point of `stockade-agent docker-watch` (`gvisor`: `gvisor-watch`).
pub fn main(gvisor: bool, args: Vec<String>) -> i32 {
    let role = if gvisor {
        "gvisor-watch"
    } else {
        "docker-watch"
    };
    let args = match parse(gvisor, &args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("stockade-agent {role}: {e}");
            return 2;
        }
    };
    // Close-on-exec: slirp4netns, started by the child, must not hold it open.
    let (started_r, started_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stockade-agent {role}: pipe: {e}");
            return 1;
        }
    };
    // The provider waits for this parent half; the child lives on detached. With a
    // network monitor, the parent answers only once the child's threads serve.
    match fork() {
        Ok(Forked::Parent(_)) => {
            drop(started_w);
            let mut answer = String::new();
            let _ = std::fs::File::from(started_r).read_to_string(&mut answer);
            if answer == "ok" {
                return 0;
            }
            eprintln!(
                "stockade-agent {role}: {}",
                if answer.is_empty() {
                    "the detached watcher died while starting"
                } else {
                    &answer
                }
            );
            return 1;
        }
        Ok(Forked::Child) => {}
        Err(e) => {
            eprintln!("stockade-agent {role}: cannot fork: {e}");
            return 1;
        }
    }
    drop(started_r);
    let mut started = std::fs::File::from(started_w);
    let _ = nix::unistd::setsid();
    // Docker with network: what needs this process single-threaded (the firewall,
    // the listeners in the container's namespace, slirp4netns as our child) first,
    // then the resolver's and proxy's threads.
    let net = match &args.net_dir {
        Some(dir) => match crate::netmon::NetInput::read()
            .and_then(|input| {
                crate::netmon::NetMonitor::prepare(std::path::Path::new(dir), args.init_pid, input)
            })
            .and_then(crate::netmon::NetMonitor::serve)
        {
            Ok(helper) => Some(helper),
            Err(e) => {
                let _ = started.write_all(e.as_bytes());
                exit_now(1)
            }
        },
        None => None,
    };
    let _ = started.write_all(b"ok");
    drop(started);
    stockade_sys::process::stdio_to_null(&[0, 1, 2]);
    // Held (never closed) until this process exits with the sandbox.
    let _image_in_use = match &args.engine {
        Engine::Runsc {
            image_lock: Some(lock),
            ..
        } => std::fs::File::open(lock)
            .and_then(|f| f.lock_shared().map(|()| f))
            .ok(),
        _ => None,
    };
    let Some(init) = pidfd(args.init_pid) else {
        exit_now(0)
    };
    let owner = match args.owner_pid {
        Some(p) => match pidfd(p) {
            Some(fd) => Some(fd),
            // The owner is already gone.
            None => {
                remove(&args);
                exit_now(0)
            }
        },
        None => None,
    };
    // The pause files (native's protocol, `PauseMark`): docker's are in the state
    // directory, gVisor's in its agent directory.
    let pause_dir = match &args.engine {
        Engine::Docker { .. } => std::path::PathBuf::from(&args.state_dir),
        Engine::Runsc { .. } => std::path::Path::new(&args.state_dir).join("agent"),
    };
    match wait_for(
        init.as_fd(),
        owner.as_ref().map(AsFd::as_fd),
        args.expires_at_ms,
        Some(&pause_dir),
    ) {
        Ending::Lifetime | Ending::OwnerDied => remove(&args),
        Ending::Watched => {
            // The container ended. Its lifetime passing is ours to clean up; a gVisor
            // sandbox that ended (its agent's idle timeout, killed) leaves runsc state
            // that nothing else would remove until gc.
            let now = now_ms();
            let due = PausedTime::read(&pause_dir, now).deadline(args.expires_at_ms);
            if now >= due || matches!(args.engine, Engine::Runsc { .. }) {
                remove(&args);
            }
        }
    }
    if let Some(h) = &net {
        crate::monitor::stop_helper(h);
    }
    exit_now(0)
}

/// Why [`wait_for`] returned.
pub(crate) enum Ending {
    /// `expires_at_ms` passed.
    Lifetime,
    /// The owner's pidfd fired.
    OwnerDied,
    /// The watched process's pidfd fired.
    Watched,
}

/// Waits until the watched process (a pidfd) ends, the owner (a pidfd) dies, or the
/// lifetime passes; the one loop of every host-side watcher (docker-watch,
/// gvisor-watch, vm-host). With `pause_dir` (where the sandbox's pause files are), the
/// lifetime does not run while the sandbox is paused, as on native: the deadline
/// moves by every pause's length, and a paused sandbox is never due.
pub(crate) fn wait_for(
    watched: BorrowedFd<'_>,
    owner: Option<BorrowedFd<'_>>,
    expires_at_ms: u64,
    pause_dir: Option<&std::path::Path>,
) -> Ending {
    loop {
        let now = now_ms();
        let paused = pause_dir.map(|d| PausedTime::read(d, now));
        let due = paused.map_or(expires_at_ms, |p| p.deadline(expires_at_ms));
        let left = due.saturating_sub(now);
        let left = match paused {
            Some(p) if p.since_ms.is_some() => left.max(1000),
            _ if left == 0 => return Ending::Lifetime,
            _ => left,
        };
        let mut fds = vec![PollFd::new(watched, PollFlags::POLLIN)];
        if let Some(o) = owner {
            fds.push(PollFd::new(o, PollFlags::POLLIN));
        }
        let timeout = PollTimeout::try_from(Duration::from_millis(left.min(60_000)))
            .unwrap_or(PollTimeout::MAX);
        if poll(&mut fds, timeout).is_err() {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let fired = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        if fired(1) {
            return Ending::OwnerDied;
        }
        if fired(0) {
            return Ending::Watched;
        }
    }
}

/// Force-removes the container (killing everything in it) and the state directory.
fn remove(args: &Args) {
    match &args.engine {
        Engine::Docker { socket } => remove_docker(socket, &args.container),
        Engine::Runsc { runsc, root, .. } => {
            let _ = std::process::Command::new(runsc)
                .args(["--root", root, "delete", "--force", &args.container])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
    let _ = std::fs::remove_dir_all(&args.state_dir);
}

fn remove_docker(socket: &str, container: &str) {
    let request = format!(
        "DELETE /containers/{}?force=1&v=1 HTTP/1.0\r\nHost: docker\r\n\r\n",
        container
    );
    for _ in 0..3 {
        if let Ok(mut s) = UnixStream::connect(socket) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            if s.write_all(request.as_bytes()).is_ok() {
                let mut answer = Vec::new();
                let _ = s.read_to_end(&mut answer);
                let status = String::from_utf8_lossy(&answer);
                if status.starts_with("HTTP/1.0 204")
                    || status.starts_with("HTTP/1.1 204")
                    || status.contains(" 404 ")
                {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
