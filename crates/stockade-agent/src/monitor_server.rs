//! `stockade-agent monitor-server`: forks native sandboxes' monitors for a process that
//! creates many (a daemon, an SDK), so that each create costs a fork of this small
//! single-threaded process instead of an `exec` of the agent: the kernel's exec, the
//! static-pie's self-relocation and glibc's start (whose CPUID probes trap on a
//! nested VM: about 0.5 ms per monitor there).
//!
//! Each monitor is forked with `CLONE_PARENT`, so it is the creating process's own
//! child, exactly as a spawned one is: that process reaps it and nothing else does.
//! The child puts the three descriptors it was sent at 0-2, closes everything else and
//! runs `monitor` (which starts a session of its own, as a spawned one does).
//!
//! Protocol on fd 3 (a socket pair with the creating process): one ready byte `r` from
//! us; then per request one byte `m` with the monitor's stdin, stdout and stderr by
//! `SCM_RIGHTS`, answered with its pid (an `i32`, little-endian) or `-errno`. The
//! server ends when the socket closes: its creator exited or let it go.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use stockade_sys::process::{Forked, exit_now};

/// The request byte.
pub const REQUEST: u8 = b'm';
/// The ready byte.
pub const READY: u8 = b'r';

/// Entry point of `stockade-agent monitor-server` (its socket on fd 3).
pub fn main() -> i32 {
    let Some(sock) = stockade_sys::process::take_inherited_fd(3) else {
        eprintln!(
            "stockade-agent monitor-server: no socket on fd 3; this command is run by Stockade"
        );
        return 2;
    };
    let sock = UnixStream::from(sock);
    if (&sock).write_all(&[READY]).is_err() {
        return 1;
    }
    let mut byte = [0u8; 1];
    loop {
        let Ok((n, fds)) = stockade_sys::net::recv_fds(sock.as_fd(), &mut byte) else {
            return 1;
        };
        if n == 0 {
            return 0; // our creator is gone, or done with us
        }
        let answer = if byte[0] == REQUEST && fds.len() == 3 {
            fork_monitor(fds)
        } else {
            -libc::EINVAL
        };
        if stockade_sys::net::send_fds(sock.as_fd(), &answer.to_le_bytes(), &[]).is_err() {
            return 1;
        }
    }
}

/// Forks one monitor as our creator's child; its pid, or `-errno`.
fn fork_monitor(fds: Vec<OwnedFd>) -> i32 {
    match stockade_sys::process::fork_sibling() {
        Ok(Forked::Parent(pid)) => pid.as_raw(),
        Ok(Forked::Child) => {
            for (fd, target) in fds.iter().zip(0..) {
                if nix::unistd::dup2(fd.as_raw_fd(), target).is_err() {
                    exit_now(126);
                }
            }
            std::mem::forget(fds);
            // Not our socket, not the received originals: stdio only, as a spawned
            // monitor starts.
            stockade_sys::process::close_fds_from(3);
            exit_now(crate::monitor::main())
        }
        Err(e) => -e.source.raw_os_error().unwrap_or(libc::EAGAIN),
    }
}
