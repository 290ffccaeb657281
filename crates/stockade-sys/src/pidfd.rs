//! Waiting on a tokio runtime for a child to exit, through its pidfd, and reaping
//! exactly that child (feature `tokio`).

use std::os::fd::OwnedFd;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A child of this process, watched for its exit.
pub struct ChildExit {
    pid: rustix::process::Pid,
    fd: AsyncFd<OwnedFd>,
}

/// Opens `pid`'s pidfd and registers it with the current tokio runtime (which must
/// have I/O enabled). `pid` must be a child of this process that nothing else waits
/// for, so it cannot be reused before [`ChildExit::reap`] reaps it.
pub fn watch_child(pid: u32) -> std::io::Result<ChildExit> {
    let raw = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| std::io::Error::other(format!("{pid} is not a pid")))?;
    let pidfd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty())?;
    // SAFETY: `pidfd` is an open descriptor owned by the AsyncFd from here on: it stays
    // open, refers to the same pidfd and reports the same number until the AsyncFd is
    // dropped (nothing else can close it: no one else owns it).
    let fd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(std::io::Error::from)?;
    Ok(ChildExit { pid: raw, fd })
}

impl ChildExit {
    /// Waits until the child has exited, then reaps it (and no other pid).
    pub async fn reap(self) {
        // Readable once it has exited; the wait below then does not block.
        let _ = self.fd.readable().await;
        let _ = rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::empty());
    }
}
