//! A host connection to a TCP port inside the sandbox (`ClientMsg::Connect`): PID 1
//! connects to the port on the sandbox's own loopback, as a client inside would, and
//! copies bytes both ways between that socket and the agent connection. The egress
//! policy is not involved: nothing leaves the sandbox's network namespace.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use stockade_agent_proto::codec::write_msg;
use stockade_agent_proto::{AgentMsg, ErrorCode};

/// How long a connect to a port inside may take (a loopback connect answers at once
/// or is refused; a full accept queue is the one wait).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Answers `Connect { port }` on `stream`, then carries the port's bytes until
/// either side ends.
pub fn serve(mut stream: UnixStream, port: u16) -> Result<(), String> {
    if port == 0 {
        let message = "port 0 is no port: give the port a server in the sandbox listens on".into();
        return write_msg(
            &mut stream,
            &AgentMsg::Error {
                code: ErrorCode::InvalidSpec,
                message,
            },
        )
        .map_err(|e| e.to_string());
    }
    let tcp = match connect(port) {
        Ok(t) => t,
        Err(e) => {
            let message = format!(
                "nothing listens on port {port} in the sandbox (connect to 127.0.0.1:{port} and [::1]:{port}: {e}); \
                 start the server first, listening on 0.0.0.0 or 127.0.0.1"
            );
            return write_msg(
                &mut stream,
                &AgentMsg::Error {
                    code: ErrorCode::Unavailable,
                    message,
                },
            )
            .map_err(|e| e.to_string());
        }
    };
    let _ = tcp.set_nodelay(true);
    write_msg(&mut stream, &AgentMsg::Connected).map_err(|e| e.to_string())?;
    let (to_port, from_port) = (stream.try_clone(), tcp.try_clone());
    let (Ok(mut host_in), Ok(mut port_out)) = (to_port, from_port) else {
        return Err("cannot share the port's connection between two threads".into());
    };
    let mut port_in = tcp;
    // The host's bytes to the port in a thread of its own; the port's back in this one.
    let up = std::thread::Builder::new()
        .name("port-up".into())
        .spawn(move || {
            copy(&mut host_in, &mut port_in);
            let _ = port_in.shutdown(Shutdown::Write);
        })
        .map_err(|e| format!("cannot start the port's thread: {e}"))?;
    copy(&mut port_out, &mut stream);
    let _ = stream.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

fn connect(port: u16) -> std::io::Result<TcpStream> {
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT) {
        Ok(t) => Ok(t),
        Err(e4) => {
            let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
            TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|_| e4)
        }
    }
}

/// Copies until `from` ends or `to` fails.
fn copy(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
