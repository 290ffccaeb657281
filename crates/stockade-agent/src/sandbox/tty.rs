//! An exec's terminal ([`ExecRequest::tty`](stockade_agent_proto::ExecRequest::tty)):
//! a pseudo-terminal of the sandbox's own devpts instance, opened by PID 1. The
//! command gets its far end as stdin, stdout and stderr (and as its controlling
//! terminal, in a session of its own: the shim's child calls `setsid` and
//! `TIOCSCTTY`); PID 1 keeps the near end, reads what the command writes and types
//! what the client sends.

use std::os::fd::{AsFd, OwnedFd};

use rustix::pty::{OpenptFlags, ioctl_tiocgptpeer, openpt, ptsname, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};
use stockade_agent_proto::TtySize;

/// End-of-file typed on a terminal in canonical mode (Ctrl-D, `VEOF` by default).
pub const EOF: u8 = 0x04;

/// The two ends of an exec's terminal.
pub struct Tty {
    /// PID 1's end: what the command writes is read here; what is typed is written.
    pub master: OwnedFd,
    /// The command's end, owned by the exec's user (as `login` and `sshd` leave it).
    pub slave: OwnedFd,
}

/// Opens a terminal of `size` for an exec that runs as `uid`:`gid`.
pub fn open(size: TtySize, uid: u32, gid: u32) -> Result<Tty, String> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags).map_err(|e| {
        format!("cannot open a terminal for the exec (/dev/ptmx): {e}; run it without a terminal")
    })?;
    unlockpt(&master).map_err(|e| format!("cannot unlock the exec's terminal: {e}"))?;
    // The peer by the master itself, not by a path the code could have replaced;
    // by its name where the kernel lacks TIOCGPTPEER.
    let slave = match ioctl_tiocgptpeer(&master, flags) {
        Ok(fd) => fd,
        Err(_) => {
            let name = ptsname(&master, Vec::new())
                .map_err(|e| format!("cannot name the exec's terminal: {e}"))?;
            rustix::fs::open(
                name.as_c_str(),
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| format!("cannot open the exec's terminal {name:?}: {e}"))?
        }
    };
    // Best effort: the command already holds it open; this is for programs that look.
    let _ = rustix::fs::fchown(
        &slave,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    );
    resize(&master, size)?;
    Ok(Tty { master, slave })
}

/// Sets the terminal's size; the command's foreground process group gets `SIGWINCH`.
/// A signal to PID 1 (a child's end) in the middle of it is no failure: it is asked
/// again.
pub fn resize(master: impl AsFd, size: TtySize) -> Result<(), String> {
    let ws = Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    loop {
        match tcsetwinsize(&master, ws) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(|e| format!("cannot set the terminal's size: {e}")),
        }
    }
}
