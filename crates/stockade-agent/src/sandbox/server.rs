//! PID 1 of a sandbox: accepts connections from the host side, runs each exec through
//! a shim, streams its output, and reaps every orphan.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use stockade_agent_proto::codec::{read_msg, write_msg};
use stockade_agent_proto::launch::ExecPolicy;
use stockade_agent_proto::{
    AgentMsg, BoundedCapture, CHUNK_BYTES, ClientMsg, ErrorCode, ExecOutcome, ExecRequest,
    PROTOCOL_VERSION, Stream,
};

use crate::cleanup::{self, Helpers};
use crate::exec_io::{ShimIo, start_shim};
use crate::shim::{DetachedOutput, ShimConfig, ShimEvent};
use crate::zygote::Zygote;
use stockade_agent_proto::now_ms;

/// The sandbox's OOM kill counter, opened before pivot_root.
pub struct OomCounter {
    file: fs::File,
    key: String,
}

impl OomCounter {
    /// Opens the counter file.
    pub fn open(path: &Path, key: &str) -> std::io::Result<OomCounter> {
        Ok(OomCounter {
            file: fs::File::open(path)?,
            key: key.to_string(),
        })
    }

    fn read(&self) -> u64 {
        let mut buf = vec![0u8; 4096];
        let n = self.file.read_at(&mut buf, 0).unwrap_or(0);
        stockade_cgroup::counter(&String::from_utf8_lossy(&buf[..n]), &self.key).unwrap_or(0)
    }
}

struct Shared {
    policy: ExecPolicy,
    oom: Option<OomCounter>,
    /// Connections being served.
    active: AtomicUsize,
    /// When the last connection ended (unix ms).
    last_ms: AtomicU64,
    /// Our helper children (shims, file operations).
    helpers: Helpers,
    /// Held shared by each running exec; taken exclusively to clean up the shared
    /// memory execs left, only when none runs.
    execs: RwLock<()>,
    /// Where SysV objects cannot be listed, the ids to look at next cleanup.
    ipc_marks: cleanup::IpcMarks,
}

/// Ends the sandbox (PID 1 exits, the kernel kills the namespace, the monitor cleans
/// up) once it has been idle for `idle_ms`.
fn idle_watchdog(shared: &Shared, idle_ms: u64) -> ! {
    let tick = std::time::Duration::from_millis((idle_ms / 4).clamp(10, 1000));
    loop {
        std::thread::sleep(tick);
        let quiet = now_ms().saturating_sub(shared.last_ms.load(Ordering::SeqCst));
        if shared.active.load(Ordering::SeqCst) == 0 && quiet >= idle_ms {
            stockade_sys::process::exit_now(0);
        }
    }
}

/// Serves forever on `listener`.
pub fn serve(listener: UnixListener, policy: ExecPolicy, oom: Option<OomCounter>) -> ! {
    let _ = nix::sys::prctl::set_dumpable(false);
    // Orphans of every exec end up with us; reap them on SIGCHLD. Block it here so
    // every thread inherits the block and only the loop below (or the reaper thread,
    // where no signalfd can be had) takes it.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let _ = chld.thread_block();
    stockade_sys::process::stdio_to_null(&[0, 1, 2]);
    // Forked while we are still single-threaded (see zygote.rs).
    let zygote = if policy.no_zygote {
        Zygote::none()
    } else {
        Zygote::start(crate::zygote::Setup::of(&policy))
    };
    // The accept loop reaps too, woken by a signalfd: no thread of its own for it (one
    // task less per idle sandbox). Where that cannot be set up, a reaper thread.
    let sigchld = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .ok()
        .filter(|_| listener.set_nonblocking(true).is_ok());
    if sigchld.is_none() {
        std::thread::spawn(move || reap_forever(chld));
    }
    let idle = policy.idle_timeout_ms;
    let shared = Arc::new(Shared {
        policy,
        oom,
        active: AtomicUsize::new(0),
        last_ms: AtomicU64::new(now_ms()),
        helpers: Helpers::new(zygote),
        execs: RwLock::new(()),
        ipc_marks: cleanup::IpcMarks::new(),
    });
    if let Some(idle) = idle {
        let shared = shared.clone();
        std::thread::spawn(move || idle_watchdog(&shared, idle));
    }
    loop {
        let conn = match &sigchld {
            Some(sigchld) => match next_connection(&listener, sigchld) {
                Some(c) => c,
                None => continue,
            },
            None => listener.accept().map(|(s, _)| s),
        };
        match conn {
            Ok(stream) => {
                let shared = shared.clone();
                shared.active.fetch_add(1, Ordering::SeqCst);
                // A second handle on the connection, to answer when no thread can be
                // started (the agent's threads count against the sandbox's pids cap,
                // which the code can fill): the caller gets an error, the agent lives.
                let answer = stream.try_clone().ok();
                let spawned = spawn_thread({
                    let shared = shared.clone();
                    move || {
                        let _ = handle(stream, &shared);
                        shared.last_ms.store(now_ms(), Ordering::SeqCst);
                        shared.active.fetch_sub(1, Ordering::SeqCst);
                    }
                });
                if let Err(message) = spawned {
                    if let Some(mut s) = answer {
                        let _ = write_msg(
                            &mut s,
                            &AgentMsg::Error {
                                code: ErrorCode::LimitExceeded,
                                message,
                            },
                        );
                    }
                    shared.last_ms.store(now_ms(), Ordering::SeqCst);
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// Waits for a connection on `listener` (non-blocking) and reaps every child that
/// ended meanwhile (`sigchld` readable). `None`: nothing to accept yet.
fn next_connection(
    listener: &UnixListener,
    sigchld: &SignalFd,
) -> Option<std::io::Result<UnixStream>> {
    let accept = || match listener.accept() {
        // Blocking, as every connection's thread expects (accept does not pass
        // O_NONBLOCK on; said anyway).
        Ok((s, _)) => Some(s.set_nonblocking(false).map(|()| s)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => Some(Err(e)),
    };
    if let Some(conn) = accept() {
        return Some(conn);
    }
    let mut fds = [
        PollFd::new(listener.as_fd(), PollFlags::POLLIN),
        PollFd::new(sigchld.as_fd(), PollFlags::POLLIN),
    ];
    let _ = poll(&mut fds, PollTimeout::NONE);
    let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
    if ready(&fds[1]) {
        while let Ok(Some(_)) = sigchld.read_signal() {}
        reap_all();
    }
    if ready(&fds[0]) {
        return accept();
    }
    None
}

/// Reaps every child that has ended, without waiting.
fn reap_all() {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(_) => continue,
        }
    }
}

/// Starts a thread, or says why not: with the sandbox's pids cap reached (the code's
/// processes and the agent's threads share it) `std::thread::spawn` would panic.
///
/// A refusal (`EAGAIN`) is retried for about 130 ms first: the threads and shims of
/// execs that just answered count until they have exited, and on a loaded machine
/// that can take a moment; a cap filled by the code itself (a fork bomb) still gets
/// its error, a little later.
fn spawn_thread<T, F>(f: F) -> Result<std::thread::JoinHandle<T>, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let slot = Arc::new(Mutex::new(Some(f)));
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        let taken = slot.clone();
        let spawned = std::thread::Builder::new().spawn(move || {
            let f = taken
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            // Only the one thread that started runs it, and it runs it once.
            f.expect("the thread's work is there")()
        });
        match spawned {
            Ok(handle) => return Ok(handle),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && pause <= std::time::Duration::from_millis(64) =>
            {
                // Children that ended hold their pids until reaped, and the loop
                // that reaps may be this very thread.
                reap_all();
                std::thread::sleep(pause);
                pause *= 2;
            }
            Err(e) => {
                return Err(format!(
                    "the agent cannot start a thread ({e}): the sandbox's process limit (pids) \
                     is reached; end some of its processes or create the sandbox with a higher \
                     pids limit"
                ));
            }
        }
    }
}

fn reap_forever(mask: SigSet) -> ! {
    loop {
        reap_all();
        let _ = mask.wait();
    }
}

fn send(conn: &Mutex<UnixStream>, msg: &AgentMsg) -> bool {
    match conn.lock() {
        Ok(mut c) => write_msg(&mut *c, msg).is_ok(),
        Err(_) => false,
    }
}

fn handle(mut stream: UnixStream, shared: &Shared) -> Result<(), String> {
    // Only the provider, outside the sandbox's pid namespace (its pid reads 0 here),
    // drives the agent. Code inside that reaches the socket (docker with --user 0
    // can open its directory) is refused before a byte is read. In a microVM the
    // provider's connections arrive through the serial multiplexer, a thread of this
    // very process (PID 1, which no code inside can be); gVisor reports a peer on the
    // host (a host socket it created) as the listener's own task, PID 1, too.
    match stockade_sys::net::peer_pid(stream.as_fd()) {
        Ok(0) => {}
        Ok(pid) if pid as u32 == std::process::id() => {}
        Ok(pid) => return Err(format!("refused a connection from pid {pid} inside")),
        Err(e) => return Err(e.to_string()),
    }
    match read_msg::<_, ClientMsg>(&mut stream).map_err(|e| e.to_string())? {
        Some(ClientMsg::Hello { version }) if version == PROTOCOL_VERSION => {}
        Some(ClientMsg::Hello { version }) => {
            let message = format!(
                "protocol version {version} is not supported; this agent speaks {PROTOCOL_VERSION}"
            );
            let _ = write_msg(
                &mut stream,
                &AgentMsg::Error {
                    code: ErrorCode::Unavailable,
                    message,
                },
            );
            return Ok(());
        }
        _ => return Err("connection did not start with hello".into()),
    }
    write_msg(
        &mut stream,
        &AgentMsg::Hello {
            version: PROTOCOL_VERSION,
            agent_version: env!("CARGO_PKG_VERSION").into(),
        },
    )
    .map_err(|e| e.to_string())?;
    match read_msg::<_, ClientMsg>(&mut stream).map_err(|e| e.to_string())? {
        None => Ok(()),
        Some(ClientMsg::Ping) => write_msg(&mut stream, &AgentMsg::Pong).map_err(|e| e.to_string()),
        Some(ClientMsg::Warm) => {
            shared.helpers.warm();
            write_msg(&mut stream, &AgentMsg::Pong).map_err(|e| e.to_string())
        }
        Some(ClientMsg::Connect { port }) => crate::ports::serve(stream, port),
        Some(ClientMsg::File(op)) => {
            let answer = crate::fileop::spawn(op, &shared.policy, &shared.helpers);
            write_msg(&mut stream, &answer).map_err(|e| e.to_string())
        }
        Some(ClientMsg::FileAs { uid, op }) => {
            let answer = match exec_policy(&shared.policy, Some(uid), "a file operation") {
                Ok(policy) => crate::fileop::spawn(op, &policy, &shared.helpers),
                Err(message) => AgentMsg::Error {
                    code: ErrorCode::PolicyDenied,
                    message,
                },
            };
            write_msg(&mut stream, &answer).map_err(|e| e.to_string())
        }
        Some(msg @ (ClientMsg::Exec(_) | ClientMsg::ExecAs { .. })) => {
            let req = match msg {
                ClientMsg::ExecAs { uid, mut req } => {
                    req.uid = Some(uid);
                    req
                }
                ClientMsg::Exec(req) => req,
                _ => unreachable!("matched above"),
            };
            let conn = Arc::new(Mutex::new(stream.try_clone().map_err(|e| e.to_string())?));
            let outcome = {
                let _running = shared
                    .execs
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                run_exec(&stream, &conn, req, shared)
            };
            // The last exec to end removes the shared memory the execs left, before
            // its result goes out: the next exec starts with the sandbox's memory.
            // Not while background processes (kept by a live shim) may use it. Where
            // the kernel does not honour the shim's child-subreaper mark (gVisor 2022:
            // the policy's `sweep_orphans`), it also kills what is left below us
            // outside a helper: a double-forked or setsid process of an exec is
            // reparented to us, not to its shim, and would outlive the exec.
            if let Ok(_alone) = shared.execs.try_write()
                && !shared.helpers.any_alive()
            {
                if shared.policy.sweep_orphans {
                    cleanup::kill_orphans(&shared.helpers, 0);
                }
                cleanup::clean_shared_memory(&shared.policy, &shared.helpers, &shared.ipc_marks);
            }
            let msg = match outcome {
                Ok(o) => AgentMsg::Exited(o),
                Err(message) => AgentMsg::Error {
                    code: ErrorCode::Internal,
                    message,
                },
            };
            send(&conn, &msg);
            let _ = stream.shutdown(std::net::Shutdown::Both);
            Ok(())
        }
        Some(other) => {
            let message = format!("unexpected message {other:?} outside an exec");
            write_msg(
                &mut stream,
                &AgentMsg::Error {
                    code: ErrorCode::InvalidSpec,
                    message,
                },
            )
            .map_err(|e| e.to_string())
        }
    }
}

/// Runs one exec through a fresh shim and returns its outcome.
fn run_exec(
    client: &UnixStream,
    conn: &Arc<Mutex<UnixStream>>,
    req: ExecRequest,
    shared: &Shared,
) -> Result<ExecOutcome, String> {
    let started = Instant::now();
    let policy = exec_policy(&shared.policy, req.uid, "an exec")?;
    let mut env: BTreeMap<String, String> = policy.env.clone();
    if req.tty.is_some() {
        // What `docker exec -t` and sshd give a terminal that names none.
        env.entry("TERM".into()).or_insert_with(|| "xterm".into());
    }
    env.extend(req.env.clone());
    let config = ShimConfig {
        argv: req.argv.clone(),
        env: env.into_iter().collect(),
        cwd: req
            .cwd
            .clone()
            .unwrap_or_else(|| shared.policy.workdir.clone()),
        timeout_ms: req.timeout_ms,
        policy,
        background: req.background,
        detach: req.detach.then_some(if req.discard_output {
            DetachedOutput::Discard
        } else {
            DetachedOutput::Log
        }),
        tty: req.tty.is_some(),
        watch: req.watch.clone(),
    };
    let tty = match req.tty {
        Some(size) => Some(crate::tty::open(
            size,
            config.policy.uid,
            config.policy.gid,
        )?),
        None => None,
    };
    let mut line = serde_json::to_vec(&config).map_err(|e| e.to_string())?;
    line.push(b'\n');
    let io = start_shim(&shared.helpers, &line, tty)?;
    let shim = io.pid;
    let outcome = shim_exec(client, conn, &req, shared, io, &line, started);
    match outcome {
        // A shim keeping background processes lives on as their subreaper; it stays a
        // helper (so a sweep spares its tree) until it is gone.
        Ok(_) if req.background || req.detach => {}
        Ok(_) => shared.helpers.forget(shim),
        // The shim died (the OOM killer, a kill) or misbehaved: it and its processes
        // (reparented to us once it is gone) are killed; none outlives the result.
        Err(_) => cleanup::kill_orphans(&shared.helpers, shim),
    }
    outcome
}

/// The policy of one exec: the sandbox's, or, for an exec asking for another uid, the
/// same with that uid and gid. Another uid needs the sandbox's own user namespace
/// (`root_caps`): there uid 0 is root of that namespace only. Without one the sandbox's
/// ids are host ids, and the request is refused.
fn exec_policy(policy: &ExecPolicy, uid: Option<u32>, what: &str) -> Result<ExecPolicy, String> {
    let mut p = policy.clone();
    match uid {
        None => {}
        Some(u) if u == policy.uid => {}
        Some(u) if !policy.root_caps => {
            return Err(format!(
                "cannot run {what} as uid {u}: this sandbox has no user namespace of its own, \
                 so its uids are host uids; it runs all of them as uid {} (the native and \
                 microvm providers give each sandbox a root of its own)",
                policy.uid
            ));
        }
        Some(u) if u >= stockade_agent_proto::launch::ID_RANGE_SIZE => {
            return Err(format!(
                "cannot run {what} as uid {u}: the sandbox's user namespace maps uids 0 to {}",
                stockade_agent_proto::launch::ID_RANGE_SIZE - 1
            ));
        }
        Some(u) => {
            p.uid = u;
            p.gid = u;
        }
    }
    Ok(p)
}

/// Drives a started shim through the exec, in this thread alone: one `poll` over the
/// shim's events, the client's messages (stdin, signals, a kill, or its going away)
/// and the output pipes. Only stdin, when there is any, has a thread of its own (a
/// full pipe must not stop the rest). Output is read from the shim's `Started` on, so
/// a streaming client gets `Started` before the first `Output`.
fn shim_exec(
    client: &UnixStream,
    conn: &Arc<Mutex<UnixStream>>,
    req: &ExecRequest,
    shared: &Shared,
    io: ShimIo,
    line: &[u8],
    started: Instant,
) -> Result<ExecOutcome, String> {
    let ShimIo {
        mut ctl,
        stdin,
        stdout,
        stderr,
        pid: shim,
        configured,
        tty,
    } = io;
    if !configured {
        ctl.write_all(line)
            .map_err(|e| format!("cannot configure the exec shim: {e}"))?;
    }
    let oom_before = shared.oom.as_ref().map(OomCounter::read);

    // stdin: initial bytes, then more from the client if asked.
    let (stdin_tx, stdin_rx) = std::sync::mpsc::channel::<Option<Vec<u8>>>();
    let _ = stdin_tx.send(Some(req.stdin.clone()));
    if !req.keep_stdin_open {
        let _ = stdin_tx.send(None);
    }
    // Nothing to write and no more to come: stdin ends now, with no thread for it.
    let stdin = stdin.filter(|_| req.keep_stdin_open || !req.stdin.is_empty());
    let on_tty = tty.is_some();
    if let Some(mut pipe) = stdin {
        spawn_thread(move || {
            while let Ok(data) = stdin_rx.recv() {
                // On a terminal the end of stdin is end-of-file typed (the terminal
                // stays, as does what runs on it); on a pipe, its end.
                let data = match data {
                    Some(d) => d,
                    None if on_tty => vec![crate::tty::EOF],
                    None => break,
                };
                if pipe.write_all(&data).is_err() {
                    break;
                }
            }
        })?;
    }
    let live = req.stream.then_some(conn);
    let mut caps = [
        BoundedCapture::new(req.output_limit_bytes),
        BoundedCapture::new(req.output_limit_bytes),
    ];
    let mut pipes: [Option<fs::File>; 2] = [stdout, stderr];
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut events: Vec<u8> = Vec::new();
    let mut outcome = ExecOutcome::default();
    // The shim's `Started` and `Exited`; the client still read; the exec ended leaving
    // processes that may hold the pipes (read only what is there, then stop).
    let (mut running, mut exited, mut listening, mut draining) = (false, false, true, false);
    // When the shim said the exec ended: the pipes get OUTPUT_GRACE more to reach their
    // end, then what is in them is read and the exec answers. A process outside the
    // exec's tree can hold them open (its code handed them over a unix socket to one
    // kept by an earlier background exec): that must not hold the answer forever.
    let mut ended: Option<Instant> = None;
    const CTL: usize = 2;
    const CLIENT: usize = 3;
    loop {
        if exited && pipes.iter().all(Option::is_none) {
            break;
        }
        let ready: Vec<usize> = {
            let mut fds = Vec::with_capacity(4);
            let mut idx = Vec::with_capacity(4);
            if !exited {
                fds.push(PollFd::new(ctl.as_fd(), PollFlags::POLLIN));
                idx.push(CTL);
                if listening {
                    fds.push(PollFd::new(client.as_fd(), PollFlags::POLLIN));
                    idx.push(CLIENT);
                }
            }
            if running || exited {
                for (i, p) in pipes.iter().enumerate() {
                    if let Some(p) = p {
                        fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
                        idx.push(i);
                    }
                }
            }
            let timeout = match ended {
                _ if draining => PollTimeout::ZERO,
                Some(at) => {
                    let left = OUTPUT_GRACE.saturating_sub(at.elapsed()).as_millis();
                    PollTimeout::from(u16::try_from(left).unwrap_or(u16::MAX))
                }
                None => PollTimeout::NONE,
            };
            match poll(&mut fds, timeout) {
                Ok(0) if draining => break,
                Ok(0) if ended.is_some() => {
                    draining = true;
                    continue;
                }
                Ok(_) => fds
                    .iter()
                    .zip(idx)
                    .filter(|(f, _)| f.revents().is_some_and(|r| !r.is_empty()))
                    .map(|(_, i)| i)
                    .collect(),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(format!("cannot wait for the exec: poll: {e}")),
            }
        };
        for i in ready {
            match i {
                CTL => {
                    let n = match (&ctl).read(&mut buf) {
                        Ok(0) | Err(_) => return Err("the exec shim died".into()),
                        Ok(n) => n,
                    };
                    events.extend_from_slice(&buf[..n]);
                    while let Some(end) = events.iter().position(|b| *b == b'\n') {
                        let event: Vec<u8> = events.drain(..=end).collect();
                        match serde_json::from_slice::<ShimEvent>(&event) {
                            Ok(ShimEvent::Started { pid }) => {
                                running = true;
                                send(conn, &AgentMsg::Started { pid });
                                // Detached: the command runs on under its shim, which
                                // ignores the end of our control socket.
                                if req.detach {
                                    outcome.pid = Some(pid);
                                    outcome.duration_ms = started.elapsed().as_millis() as u64;
                                    return Ok(outcome);
                                }
                            }
                            Ok(ShimEvent::Exited {
                                exit_code,
                                signal,
                                timed_out,
                                background,
                            }) => {
                                outcome.exit_code = exit_code;
                                outcome.signal = signal;
                                outcome.timed_out = timed_out;
                                draining = background || orphans_hold_output(shared, shim);
                                exited = true;
                                ended = Some(Instant::now());
                                break;
                            }
                            Err(e) => return Err(format!("bad message from the exec shim: {e}")),
                        }
                    }
                }
                CLIENT if !exited => {
                    // Client messages during the exec: stdin, signals; anything else,
                    // or the end of the connection, kills it.
                    match read_msg::<_, ClientMsg>(&mut &*client) {
                        Ok(Some(ClientMsg::Stdin(d))) => {
                            let _ = stdin_tx.send(Some(d));
                        }
                        Ok(Some(ClientMsg::CloseStdin)) => {
                            let _ = stdin_tx.send(None);
                        }
                        // A number that is no signal is ignored (the shim parses it).
                        Ok(Some(ClientMsg::Signal(n))) => {
                            if (1..=64).contains(&n) {
                                let _ = (&ctl).write_all(format!("signal {n}\n").as_bytes());
                            }
                        }
                        // A size that is no size is ignored, as is one without a terminal.
                        Ok(Some(ClientMsg::Resize(size))) => {
                            if let (Some(t), Ok(size)) = (&tty, size.check()) {
                                let _ = crate::tty::resize(t, size);
                            }
                        }
                        Ok(Some(_)) | Ok(None) | Err(_) => {
                            let _ = (&ctl).write_all(b"kill\n");
                            listening = false;
                        }
                    }
                }
                CLIENT => {}
                _ => {
                    let Some(p) = pipes[i].as_mut() else { continue };
                    match p.read(&mut buf) {
                        Ok(0) | Err(_) => pipes[i] = None,
                        Ok(n) => {
                            let head = caps[i].push(&buf[..n]);
                            // A terminal's output all goes out live (a session can run
                            // for hours); a pipe's, the head the capture keeps.
                            let head = if tty.is_some() { &buf[..n] } else { head };
                            if let (Some(conn), false) = (live, head.is_empty()) {
                                let stream = if i == 0 {
                                    Stream::Stdout
                                } else {
                                    Stream::Stderr
                                };
                                send(
                                    conn,
                                    &AgentMsg::Output {
                                        stream,
                                        data: head.to_vec(),
                                    },
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    let [out, err] = caps;
    outcome.duration_ms = started.elapsed().as_millis() as u64;
    outcome.stdout_dropped = out.dropped();
    outcome.stderr_dropped = err.dropped();
    outcome.stdout = out.into_bytes();
    outcome.stderr = err.into_bytes();
    if let (Some(before), Some(c)) = (oom_before, shared.oom.as_ref()) {
        outcome.oom_killed =
            c.read() > before && outcome.signal == Some(libc::SIGKILL) && !outcome.timed_out;
    }
    Ok(outcome)
}

/// How long the output pipes may stay open after the exec ended (see `shim_exec`).
const OUTPUT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether processes the exec left (reparented to us) may still hold its output
/// pipes, once its shim said it ended with none in the background.
///
/// Where the shim's child-subreaper mark is not honoured (gVisor 2022: the policy's
/// `sweep_orphans`), what the exec left running was reparented to us instead of being
/// killed by the shim, and may hold the output pipes: killed here when no other exec
/// runs; else the pipes are only drained, and the last exec to end kills it. Elsewhere
/// the shim killed them and this scan of /proc is skipped.
fn orphans_hold_output(shared: &Shared, shim: u32) -> bool {
    if !shared.policy.sweep_orphans || !cleanup::any_orphan(&shared.helpers) {
        return false;
    }
    if cleanup::only_helper(&shared.helpers, shim) {
        cleanup::kill_orphans(&shared.helpers, 0);
    }
    cleanup::any_orphan(&shared.helpers)
}
