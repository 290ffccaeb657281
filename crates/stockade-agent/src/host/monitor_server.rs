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
//! The protocol is `stockade_sys::forkserver`'s (as the exec zygote's), on fd 3, a
//! socket pair with the creating process: per request the byte [`REQUEST`] with the
//! monitor's stdin, stdout and stderr. The server ends when the socket closes: its
//! creator exited or let it go.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use stockade_sys::forkserver;

/// The request byte.
pub const REQUEST: u8 = b'm';

/// Entry point of `stockade-agent monitor-server` (its socket on fd 3).
pub fn main() -> i32 {
    let Some(sock) = stockade_sys::process::take_inherited_fd(3) else {
        eprintln!(
            "stockade-agent monitor-server: no socket on fd 3; this command is run by Stockade"
        );
        return 2;
    };
    let sock = UnixStream::from(sock);
    forkserver::serve(sock.as_fd(), |byte, fds| {
        if byte != REQUEST || fds.len() != 3 {
            return -libc::EINVAL;
        }
        // Not our socket, not the received originals: stdio only, as a spawned
        // monitor starts.
        forkserver::fork_child(fds, &[0, 1, 2], 3, None, crate::monitor::main)
    })
}
