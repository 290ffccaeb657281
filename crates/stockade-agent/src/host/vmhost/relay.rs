//! The guest's side of the VMM host: the handshake on the serial port, and the mux
//! relay between the host's connections and the guest's agent streams.

use super::*;

/// Sends the guest a new session (RESET with its identity) until it answers: bytes
/// the VMM takes before the guest's port is open (during boot or a restore) may be
/// lost, and the guest must have dropped the streams of a previous host before any
/// new one opens. A repeated RESET is harmless (no stream is open yet).
pub(super) fn handshake(
    serial: &UnixStream,
    identity: &Identity,
    child: &mut VmmProcess,
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
pub(super) enum HandshakeError {
    Ended(&'static str),
    Failed(String),
}

pub(super) use HandshakeError::{Ended, Failed};

pub(super) fn connect_serial(path: &str, child: &mut VmmProcess) -> Result<UnixStream, String> {
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

pub(super) fn accept(listener: UnixListener, writer: &Arc<Mutex<UnixStream>>, streams: &Streams) {
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
pub(super) fn to_guest(
    id: u32,
    mut from: UnixStream,
    writer: &Mutex<UnixStream>,
    streams: &Streams,
) {
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
pub(super) fn from_guest(mut serial: UnixStream, writer: &Mutex<UnixStream>, streams: &Streams) {
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
