//! `stockade-agent vm-host DIR`: the host-side supervisor of one microVM.
//!
//! The microVM provider writes `DIR/host.json` ([`VmHostConfig`]) and starts this
//! role, which detaches at once (the provider returns once the agent answers). It
//! joins the VM's host cgroup, starts the VMM as its child, connects to the VMM's
//! serial-port socket and serves `DIR/agent.sock` (0600, in the provider's root-only
//! directory): each connection there becomes one stream of the multiplexer
//! ([`stockade_agent_proto::mux`]). It ends the VM when its owner dies or its
//! lifetime passes (removing `DIR`), and when the VM ends by itself it records why in
//! `DIR/exit` unless the provider paused it (`DIR/paused`).

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;

use crate::watch::Ending;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stockade_agent_proto::launch::VmHostConfig;
use stockade_agent_proto::mux::{self, Identity, Kind};
use stockade_agent_proto::now_ms;
use stockade_sys::process::{Forked, exit_now, fork};

struct Stream {
    conn: UnixStream,
    host_eof: bool,
    guest_eof: bool,
}

type Streams = Arc<Mutex<HashMap<u32, Stream>>>;

/// Entry point of `stockade-agent vm-host`.
pub fn main(args: Vec<String>) -> i32 {
    let [dir] = &args[..] else {
        eprintln!("usage: stockade-agent vm-host STATE_DIR");
        return 2;
    };
    let dir = PathBuf::from(dir);
    let config: VmHostConfig = match fs::read(dir.join("host.json"))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "stockade-agent vm-host: cannot read {}/host.json: {e}",
                dir.display()
            );
            return 2;
        }
    };
    match fork() {
        Ok(Forked::Parent(_)) => return 0,
        Ok(Forked::Child) => {}
        Err(e) => {
            eprintln!("stockade-agent vm-host: cannot fork: {e}");
            return 1;
        }
    }
    let _ = nix::unistd::setsid();
    stockade_sys::process::stdio_to_null(&[0, 1, 2]);
    let code = match supervise(&dir, &config) {
        Ok(()) => 0,
        Err(e) => {
            let _ = fs::write(dir.join("exit"), format!("the VM host failed: {e}"));
            1
        }
    };
    exit_now(code)
}

fn supervise(dir: &Path, config: &VmHostConfig) -> Result<(), String> {
    let me = std::process::id();
    let ticks = stockade_sys::process::start_ticks(me).unwrap_or(0);
    fs::write(dir.join("host.pid"), format!("{me} {ticks}"))
        .map_err(|e| format!("cannot write host.pid: {e}"))?;
    for (cg, settings) in &config.cgroups {
        fs::create_dir_all(cg).map_err(|e| format!("cannot create cgroup {cg}: {e}"))?;
        for (file, value) in settings {
            // `?file`: optional (e.g. swap accounting may be off).
            let (optional, file) = match file.strip_prefix('?') {
                Some(f) => (true, f),
                None => (false, file.as_str()),
            };
            if let Err(e) = fs::write(format!("{cg}/{file}"), value)
                && !optional
            {
                return Err(format!("cannot set {cg}/{file} = {value}: {e}"));
            }
        }
        fs::write(format!("{cg}/cgroup.procs"), me.to_string())
            .map_err(|e| format!("cannot join cgroup {cg}: {e}"))?;
    }
    let owner = match config.owner_pid {
        Some(p) => {
            let alive = stockade_sys::process::start_ticks(p)
                .is_some_and(|t| config.owner_ticks.is_none_or(|want| want == t));
            match rustix::process::Pid::from_raw(p as i32)
                .filter(|_| alive)
                .and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                }) {
                Some(fd) => Some(fd),
                None => return end(dir, config, None, "its owner is gone"),
            }
        }
        None => None,
    };
    // The VMM connects to their sockets at its start. Killed when we end (they are
    // also in our process group, which a destroy kills).
    let _daemons = start_daemons(dir, config)?;
    let log =
        fs::File::create(dir.join("vmm.log")).map_err(|e| format!("cannot create vmm.log: {e}"))?;
    let mut child = Command::new(&config.vmm[0])
        .args(&config.vmm[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", config.vmm[0]))?;
    let serial = match connect_serial(&config.serial_socket, &mut child) {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let streams: Streams = Arc::default();
    let writer = Arc::new(Mutex::new(serial.try_clone().map_err(|e| e.to_string())?));
    let mut seed = vec![0u8; 32];
    let _ = fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed));
    let identity = Identity {
        hostname: config.id.clone(),
        seed,
        unix_ms: now_ms(),
    };
    match handshake(&serial, &identity, &mut child, config) {
        Ok(()) => {}
        Err(Ended(why)) => return end(dir, config, Some(&mut child), why),
        Err(Failed(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            remove_cgroups(config);
            return Err(e);
        }
    }
    let sock = dir.join("agent.sock");
    let _ = fs::remove_file(&sock);
    let listener =
        UnixListener::bind(&sock).map_err(|e| format!("cannot listen on agent.sock: {e}"))?;
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict agent.sock: {e}"))?;
    {
        let streams = streams.clone();
        let writer = writer.clone();
        std::thread::spawn(move || from_guest(serial, &writer, &streams));
    }
    {
        let streams = streams.clone();
        let writer = writer.clone();
        std::thread::spawn(move || accept(listener, &writer, &streams));
    }
    let vmm = rustix::process::Pid::from_raw(child.id() as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
        .ok_or("cannot watch the VMM process")?;
    match crate::watch::wait_for(
        vmm.as_fd(),
        owner.as_ref().map(AsFd::as_fd),
        config.expires_at_ms,
        None,
    ) {
        Ending::Lifetime => return end(dir, config, Some(&mut child), "its lifetime passed"),
        Ending::OwnerDied => return end(dir, config, Some(&mut child), "its owner died"),
        Ending::Watched => {}
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = fs::remove_file(&sock);
    if !dir.join("paused").exists() {
        let how = match (status.code(), status.signal()) {
            (_, Some(sig)) => format!("the VM process was killed by signal {sig}"),
            (Some(0), _) => "the VM powered off".to_string(),
            (Some(c), _) => format!("the VM process exited with code {c}"),
            _ => format!("the VM process ended ({status})"),
        };
        let _ = fs::write(dir.join("exit"), how);
    }
    remove_cgroups(config);
    Ok(())
}

/// The daemons the VMM needs (a virtiofsd per shared directory); killed and reaped
/// when dropped.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts each of `config.daemons` and waits until its socket exists (10 s at most;
/// one that exits first fails the start, its output in `daemons.log`).
fn start_daemons(dir: &Path, config: &VmHostConfig) -> Result<Daemons, String> {
    let mut daemons = Daemons(Vec::new());
    for (argv, socket) in &config.daemons {
        let Some(program) = argv.first() else {
            return Err("an empty daemon command line".into());
        };
        let _ = fs::remove_file(socket);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("daemons.log"))
            .map_err(|e| format!("cannot create daemons.log: {e}"))?;
        let child = Command::new(program)
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        daemons.0.push(child);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !Path::new(socket).exists() {
            let exited = daemons
                .0
                .last_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let out = fs::read_to_string(dir.join("daemons.log")).unwrap_or_default();
                return Err(format!(
                    "{program} exited ({status}) before listening on {socket}: {}",
                    out.trim()
                ));
            }
            if std::time::Instant::now() > until {
                return Err(format!("{program} did not listen on {socket} within 10 s"));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // It binds, then listens: a moment for the second step.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(daemons)
}

/// Kills the VM (when running) and removes everything of the sandbox.
fn end(
    dir: &Path,
    config: &VmHostConfig,
    child: Option<&mut Child>,
    why: &str,
) -> Result<(), String> {
    let _ = fs::write(dir.join("exit"), why);
    if let Some(c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    remove_cgroups(config);
    let _ = fs::remove_dir_all(dir);
    Ok(())
}

/// Removes the VMM's cgroups once it is gone; this process leaves them first.
fn remove_cgroups(config: &VmHostConfig) {
    for (cg, _) in &config.cgroups {
        let root = Path::new(cg).parent().and_then(Path::parent);
        if let Some(root) = root {
            let _ = fs::write(root.join("cgroup.procs"), std::process::id().to_string());
        }
        let _ = fs::remove_dir(cg);
    }
}

/// Sends the guest a new session (RESET with its identity) until it answers: bytes
/// the VMM takes before the guest's port is open (during boot or a restore) may be
/// lost, and the guest must have dropped the streams of a previous host before any
/// new one opens. A repeated RESET is harmless (no stream is open yet).
fn handshake(
    serial: &UnixStream,
    identity: &Identity,
    child: &mut Child,
    config: &VmHostConfig,
) -> Result<(), HandshakeError> {
    let payload = serde_json::to_vec(identity).map_err(|e| Failed(e.to_string()))?;
    let mut w = serial.try_clone().map_err(|e| Failed(e.to_string()))?;
    let mut r = serial.try_clone().map_err(|e| Failed(e.to_string()))?;
    // Both ways bounded: a VM that is not running reads nothing, and a full socket
    // buffer must not block the owner and lifetime checks below.
    r.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| Failed(e.to_string()))?;
    w.set_write_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| Failed(e.to_string()))?;
    let until = Instant::now() + Duration::from_secs(300);
    loop {
        let owner_gone = match (config.owner_pid, config.owner_ticks) {
            (Some(p), Some(t)) => stockade_sys::process::start_ticks(p) != Some(t),
            (Some(p), None) => stockade_sys::process::start_ticks(p).is_none(),
            (None, _) => false,
        };
        if owner_gone {
            return Err(Ended("its owner died"));
        }
        if now_ms() >= config.expires_at_ms {
            return Err(Ended("its lifetime passed"));
        }
        match mux::write_frame(&mut w, 0, Kind::Reset, &payload) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(Failed(format!("cannot write to the VM's serial port: {e}"))),
        }
        match mux::read_frame(&mut r) {
            Ok(Some(f)) if f.kind == Kind::Reset => break,
            Ok(Some(_)) => {}
            Ok(None) => return Err(Failed("the VM's serial port closed".into())),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(Failed(format!("cannot read the VM's serial port: {e}"))),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Failed(format!(
                "the VM process ended during boot ({status})"
            )));
        }
        if Instant::now() > until {
            return Err(Failed(
                "the VM's agent did not answer on its serial port within 300 s".into(),
            ));
        }
    }
    r.set_read_timeout(None)
        .and_then(|()| w.set_write_timeout(None))
        .map_err(|e| Failed(e.to_string()))
}

/// Why the handshake stopped: the sandbox is to end (owner, lifetime), or it failed.
enum HandshakeError {
    Ended(&'static str),
    Failed(String),
}

use HandshakeError::{Ended, Failed};

fn connect_serial(path: &str, child: &mut Child) -> Result<UnixStream, String> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(s) = UnixStream::connect(path) {
            return Ok(s);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the VMM exited before its serial port was up ({status})"
            ));
        }
        if Instant::now() > until {
            return Err(format!("the VMM's serial port {path} did not appear"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn accept(listener: UnixListener, writer: &Arc<Mutex<UnixStream>>, streams: &Streams) {
    let mut next: u32 = 1;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let id = next;
        next = next.wrapping_add(1).max(1);
        let Ok(read_half) = conn.try_clone() else {
            continue;
        };
        if let Ok(mut map) = streams.lock() {
            map.insert(
                id,
                Stream {
                    conn,
                    host_eof: false,
                    guest_eof: false,
                },
            );
        }
        let ok = writer
            .lock()
            .map(|mut w| mux::write_frame(&mut *w, id, Kind::Open, &[]).is_ok())
            .unwrap_or(false);
        if !ok {
            if let Ok(mut map) = streams.lock() {
                map.remove(&id);
            }
            continue;
        }
        let writer = writer.clone();
        let streams = streams.clone();
        std::thread::spawn(move || to_guest(id, read_half, &writer, &streams));
    }
}

/// Copies one host connection to its stream; at its end, a half close (or a full
/// close once the guest is done too).
fn to_guest(id: u32, mut from: UnixStream, writer: &Mutex<UnixStream>, streams: &Streams) {
    let mut buf = vec![0u8; 32 * 1024];
    let clean = loop {
        match from.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => {
                let Ok(mut w) = writer.lock() else { return };
                if mux::write_frame(&mut *w, id, Kind::Data, &buf[..n]).is_err() {
                    return;
                }
            }
            Err(_) => break false,
        }
    };
    let Ok(mut map) = streams.lock() else { return };
    let done = match map.get_mut(&id) {
        Some(s) => {
            s.host_eof = true;
            !clean || s.guest_eof
        }
        None => true,
    };
    let kind = if done { Kind::Close } else { Kind::Eof };
    if done {
        map.remove(&id);
    }
    drop(map);
    if let Ok(mut w) = writer.lock() {
        let _ = mux::write_frame(&mut *w, id, kind, &[]);
    }
}

/// Dispatches what the guest sends to the host connections.
fn from_guest(mut serial: UnixStream, writer: &Mutex<UnixStream>, streams: &Streams) {
    while let Ok(Some(f)) = mux::read_frame(&mut serial) {
        let Ok(mut map) = streams.lock() else { return };
        match f.kind {
            Kind::Data => {
                if let Some(s) = map.get_mut(&f.stream)
                    && s.conn.write_all(&f.payload).is_err()
                {
                    let _ = s.conn.shutdown(std::net::Shutdown::Both);
                }
            }
            Kind::Eof => {
                if let Some(s) = map.get_mut(&f.stream) {
                    s.guest_eof = true;
                    let _ = s.conn.shutdown(std::net::Shutdown::Write);
                    if s.host_eof {
                        map.remove(&f.stream);
                        if let Ok(mut w) = writer.lock() {
                            let _ = mux::write_frame(&mut *w, f.stream, Kind::Close, &[]);
                        }
                    }
                }
            }
            Kind::Close => {
                if let Some(s) = map.remove(&f.stream) {
                    let _ = s.conn.shutdown(std::net::Shutdown::Both);
                }
            }
            Kind::Reset | Kind::Open => {}
        }
    }
    // The VM is gone: end every connection.
    if let Ok(mut map) = streams.lock() {
        for (_, s) in map.drain() {
            let _ = s.conn.shutdown(std::net::Shutdown::Both);
        }
    }
}
