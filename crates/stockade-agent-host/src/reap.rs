//! Reaping what a launcher starts. A helper process that outlives the call that
//! started it (a native sandbox's monitor) stays a child of the process that created
//! the sandbox, which waits for exactly that pid: no zombie is left to the host's
//! PID 1 (which, inside a container, may never reap), and no exit status of another
//! child of an embedding program (a Python app's `subprocess`) is taken, since
//! nothing here waits for any pid but its own.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use tokio::sync::watch;

/// Children being waited for: pid -> a receiver that closes once it is reaped.
fn children() -> MutexGuard<'static, HashMap<u32, watch::Receiver<()>>> {
    static CHILDREN: OnceLock<Mutex<HashMap<u32, watch::Receiver<()>>>> = OnceLock::new();
    CHILDREN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Forgets its pid when the waiting task ends (reaped, or its runtime shut down).
struct Waiting {
    pid: u32,
    _reaped: watch::Sender<()>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        children().remove(&self.pid);
    }
}

/// Waits for `child` in the background (on the current tokio runtime) and reaps it
/// when it exits; [`reaped`] waits for that. Dropping the child does not kill it.
pub fn reap_later(mut child: tokio::process::Child) {
    let Some(pid) = child.id() else {
        return; // already reaped
    };
    let (tx, rx) = watch::channel(());
    children().insert(pid, rx);
    let waiting = Waiting { pid, _reaped: tx };
    tokio::spawn(async move {
        let _ = child.wait().await;
        drop(waiting);
    });
}

/// Like [`reap_later`], for a child this process did not spawn through tokio (a
/// monitor forked for us by a monitor server, with `CLONE_PARENT`): waits on its
/// pidfd, then reaps exactly that pid. Fails only when the pidfd cannot be opened
/// (the pid is then not waited for; the caller decides).
pub fn reap_pid_later(pid: u32) -> std::io::Result<()> {
    let exit = stockade_sys::pidfd::watch_child(pid)?;
    let (tx, rx) = watch::channel(());
    children().insert(pid, rx);
    let waiting = Waiting { pid, _reaped: tx };
    tokio::spawn(async move {
        exit.reap().await;
        drop(waiting);
    });
    Ok(())
}

/// Returns once the child `pid` given to [`reap_later`] has been reaped (at once for
/// any other pid). Call it only for a process known to have exited.
pub async fn reaped(pid: u32) {
    let rx = children().get(&pid).cloned();
    if let Some(mut rx) = rx {
        // Never sent to: resolves when the waiting task ends.
        let _ = rx.changed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_is_reaped_and_others_are_left_alone() {
        // Another child of the program, which it waits for itself.
        let mut theirs = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 7"])
            .spawn()
            .unwrap();
        let ours = tokio::process::Command::new("/bin/sh")
            .args(["-c", "exit 0"])
            .spawn()
            .unwrap();
        let pid = ours.id().unwrap();
        reap_later(ours);
        reaped(pid).await;
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} was not reaped"
        );
        // Its exit status is still the program's own to take.
        assert_eq!(theirs.wait().unwrap().code(), Some(7));
        assert!(children().get(&pid).is_none());
    }
}
