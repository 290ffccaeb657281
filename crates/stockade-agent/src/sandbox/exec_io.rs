//! An exec's shim started with its stdio: three pipes, or one terminal for all three
//! (see [`crate::tty`]), and its control socket.

use std::fs;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::cleanup::Helpers;
use crate::zygote::Role;

/// A started shim's control socket and the exec's stdio pipes.
pub struct ShimIo {
    pub ctl: UnixStream,
    pub stdin: Option<fs::File>,
    pub stdout: Option<fs::File>,
    pub stderr: Option<fs::File>,
    /// The shim's pid.
    pub pid: u32,
    /// Its configuration was written before it started.
    pub configured: bool,
    /// The near end of the exec's terminal, when it has one (for its size).
    pub tty: Option<OwnedFd>,
}

/// The largest configuration written into the control socket before the shim exists
/// (far below a socket's buffer, so the write cannot block with no reader yet).
const CONFIG_AHEAD_MAX: usize = 32 << 10;

/// Starts an exec's shim: forked by the zygote, or, where it cannot, spawned from
/// our binary. Either way a child of ours, recorded as a helper. Its stdio are three
/// pipes, or the far end of `tty` for all three.
pub fn start_shim(
    helpers: &Helpers,
    config: &[u8],
    tty: Option<crate::tty::Tty>,
) -> Result<ShimIo, String> {
    let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    // The configuration waits in the socket for the shim: it reads it as it starts,
    // instead of after we have learnt its pid (one wake-up less per exec).
    let configured = config.len() <= CONFIG_AHEAD_MAX;
    if configured {
        (&ours)
            .write_all(config)
            .map_err(|e| format!("cannot configure the exec shim: {e}"))?;
    }
    let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("dup: {e}"));
    let pipe =
        || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"));
    // The child's three ends, and ours: stdin, stdout, stderr, the terminal.
    let (child, (stdin, stdout, stderr, term)) = match tty {
        None => {
            let (in_r, in_w) = pipe()?;
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            (
                [in_r, out_w, err_w],
                (Some(in_w), Some(out_r), Some(err_r), None),
            )
        }
        Some(t) => {
            let child = [dup(&t.slave)?, dup(&t.slave)?, t.slave];
            let near = (
                Some(dup(&t.master)?),
                Some(dup(&t.master)?),
                None,
                Some(t.master),
            );
            (child, near)
        }
    };
    let file = |fd: Option<OwnedFd>| fd.map(fs::File::from);
    let fds = [
        child[0].as_fd(),
        child[1].as_fd(),
        child[2].as_fd(),
        theirs.as_fd(),
    ];
    if let Ok(pid) = helpers.fork(Role::Shim, &fds) {
        // Our copies of the child's ends go now (as `child` does), so its pipes end
        // with it.
        return Ok(ShimIo {
            ctl: ours,
            stdin: file(stdin),
            stdout: file(stdout),
            stderr: file(stderr),
            pid,
            configured,
            tty: term,
        });
    }
    let [child_in, child_out, child_err] = child;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("stockade-shim")
        .arg("shim")
        .env_clear()
        .stdin(Stdio::from(child_in))
        .stdout(Stdio::from(child_out))
        .stderr(Stdio::from(child_err));
    stockade_sys::process::spawn_with_stdio_only(&mut cmd);
    stockade_sys::process::pass_fd(&mut cmd, theirs.into(), 3);
    let child = helpers
        .spawn(&mut cmd)
        .map_err(|e| format!("cannot start the exec shim: {e}"))?;
    drop(cmd);
    let io = ShimIo {
        ctl: ours,
        stdin: file(stdin),
        stdout: file(stdout),
        stderr: file(stderr),
        pid: child.id(),
        configured,
        tty: term,
    };
    // The reaper thread owns waiting; dropping Child does not wait.
    drop(child);
    Ok(io)
}
