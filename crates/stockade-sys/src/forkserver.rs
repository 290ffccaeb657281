//! A fork server's protocol over a unix socket pair: the agent's exec zygote (which
//! forks shims for PID 1) and its monitor server (which forks monitors for the
//! process that creates sandboxes) both speak it.
//!
//! The server sends one ready byte once it is set up; then per request the client
//! sends one byte (what to start) with descriptors attached (`SCM_RIGHTS`), and the
//! server answers with the child's pid, or `-errno`, as a little-endian `i32`. The
//! server ends when the socket closes.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::process::{Forked, exit_now};

/// The byte a server sends once it serves.
pub const READY: u8 = b'r';

/// Why a request started no child.
#[derive(Debug)]
pub enum Refused {
    /// The server answered that it could not fork (`-errno`).
    Child(std::io::Error),
    /// The server is gone, or the socket failed.
    Gone(std::io::Error),
}

/// Serves requests on `sock` until it closes: sends [`READY`], then answers each
/// request with what `fork(byte, fds)` returns (a pid, or `-errno`). Returns the
/// server's exit code: 0 when the client closed the socket, 1 when it failed.
pub fn serve(sock: BorrowedFd<'_>, mut fork: impl FnMut(u8, Vec<OwnedFd>) -> i32) -> i32 {
    if crate::net::send_fds(sock, &[READY], &[]).is_err() {
        return 1;
    }
    let mut byte = [0u8; 1];
    loop {
        let Ok((n, fds)) = crate::net::recv_fds(sock, &mut byte) else {
            return 1;
        };
        if n == 0 {
            return 0; // the client is gone, or done with us
        }
        let answer = fork(byte[0], fds);
        if crate::net::send_fds(sock, &answer.to_le_bytes(), &[]).is_err() {
            return 1;
        }
    }
}

/// Waits for the server's [`READY`] byte (within the socket's read timeout, if any).
pub fn wait_ready(sock: &UnixStream) -> std::io::Result<()> {
    let mut byte = [0u8; 1];
    match (&*sock).read(&mut byte)? {
        1 if byte[0] == READY => Ok(()),
        1 => Err(std::io::Error::other(
            "the fork server sent a wrong ready byte",
        )),
        _ => Err(std::io::Error::other(
            "the fork server exited before it was ready",
        )),
    }
}

/// Asks the server on `sock` for a child: `byte` with `fds`. Its pid. One request at
/// a time per socket: a caller sharing the socket serialises them.
pub fn request(sock: &UnixStream, byte: u8, fds: &[BorrowedFd<'_>]) -> Result<u32, Refused> {
    let gone = |e: &dyn std::fmt::Display| Refused::Gone(std::io::Error::other(e.to_string()));
    crate::net::send_fds(sock.as_fd(), &[byte], fds).map_err(|e| gone(&e))?;
    let mut answer = [0u8; 4];
    let (n, _) = crate::net::recv_fds(sock.as_fd(), &mut answer).map_err(|e| gone(&e))?;
    if n != 4 {
        return Err(gone(&"the fork server closed its socket"));
    }
    match i32::from_le_bytes(answer) {
        pid if pid > 0 => Ok(pid as u32),
        errno => Err(Refused::Child(std::io::Error::from_raw_os_error(-errno))),
    }
}

/// In a server: forks a child of the server's own parent (`CLONE_PARENT`, see
/// [`crate::process::fork_sibling`]) that puts `fds` at `targets`, closes every
/// other descriptor from `close_from` on (but `keep`), and exits with `run()`.
/// The parent gets the child's pid, or `-errno`.
pub fn fork_child(
    fds: Vec<OwnedFd>,
    targets: &[i32],
    close_from: u32,
    keep: Option<u32>,
    run: impl FnOnce() -> i32,
) -> i32 {
    match crate::process::fork_sibling() {
        Ok(Forked::Parent(pid)) => pid.as_raw(),
        Ok(Forked::Child) => {
            for (fd, target) in fds.iter().zip(targets) {
                if nix::unistd::dup2(fd.as_raw_fd(), *target).is_err() {
                    exit_now(126);
                }
            }
            std::mem::forget(fds);
            crate::process::close_fds_from_except(close_from, keep);
            exit_now(run())
        }
        Err(e) => -e.source.raw_os_error().unwrap_or(libc::EAGAIN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_gets_the_servers_answer_and_a_closed_server_is_gone() {
        let (client, server) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            serve(server.as_fd(), |byte, fds| match (byte, fds.len()) {
                (b'a', 1) => 4242,
                _ => -libc::EINVAL,
            })
        });
        wait_ready(&client).unwrap();
        let (r, _w) = UnixStream::pair().unwrap();
        assert_eq!(request(&client, b'a', &[r.as_fd()]).unwrap(), 4242);
        match request(&client, b'b', &[]) {
            Err(Refused::Child(e)) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL)),
            other => panic!("{other:?}"),
        }
        drop(client);
        assert_eq!(t.join().unwrap(), 0);
        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        assert!(wait_ready(&client).is_err());
        assert!(matches!(request(&client, b'a', &[]), Err(Refused::Gone(_))));
    }
}
