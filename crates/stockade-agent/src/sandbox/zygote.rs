//! The exec zygote: a single-threaded child of PID 1 that starts each exec's shim and
//! each file operation's child by forking itself, instead of PID 1 `exec`ing its own
//! binary for each (a 4.6 MB static-pie: page faults and self-relocation of the whole
//! file, then the seccomp filter built again from its rule table, on every exec).
//!
//! PID 1 forks the zygote when it starts serving, while it is still single-threaded
//! (a fork of a threaded process may copy a lock another thread held): a fork of the
//! small PID 1 costs far less than the spawn of the agent's binary that a sandbox's
//! first exec, or a pool's warm-up, would otherwise pay (BENCHMARKS.md, "Start and
//! exec latency"). Where PID 1 is threaded by then (the microVM's serial
//! multiplexer) or the fork fails, and to replace one that died, it starts the zygote
//! as `stockade-agent zygote`, from a thread, at the sandbox's second helper or when
//! asked to warm. Either way the zygote enters the sandbox's seccomp filter itself (so
//! no exec builds it, nor has the kernel check and JIT-compile it again: a fork shares
//! it), and then only waits for requests on a socket pair that PID 1 alone holds.
//!
//! Each request is one byte naming the role (`s` shim, `f` file operation) with the
//! child's descriptors attached (`SCM_RIGHTS`: stdin, stdout, stderr and control
//! socket for a shim; the control socket for a file operation). The zygote forks
//! with `CLONE_PARENT`, so the child is PID 1's own child, exactly as a spawned shim
//! was: PID 1's reaper collects it, its helper bookkeeping and orphan sweep see the
//! same tree, and the zygote never has children to reap. The child puts the
//! descriptors at 0-3, closes everything else (the zygote's socket among them) and
//! runs the role's code, which is the same code as the `shim`/`fileop` commands. The
//! answer is the child's pid (4 bytes), or a negative errno.
//!
//! The zygote keeps PID 1's capabilities (the shim needs them to set up the exec and
//! to kill its tree) under the code's own seccomp filter and no_new_privs (neither
//! the zygote nor the shim ever calls `execve`; the code does, after dropping every
//! privilege); it holds nothing the code can reach: no listener, no file of the
//! sandbox, undumpable, the least likely OOM victim. It says it is ready with one
//! byte, once its filter is in force. The first helper waits for the byte of the
//! zygote forked at the start (well under a millisecond: less than a spawn); while a
//! replacement for one that died starts, PID 1 spawns shims from its binary as
//! before.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use stockade_sys::forkserver::{self, Refused};
use stockade_sys::process::{Forked, exit_now};

/// What the zygote's child becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An exec's shim: descriptors stdin, stdout, stderr, control socket.
    Shim,
    /// A file operation's child: descriptor control socket.
    FileOp,
}

impl Role {
    fn byte(self) -> u8 {
        match self {
            Role::Shim => b's',
            Role::FileOp => b'f',
        }
    }

    fn from_byte(b: u8) -> Option<Role> {
        match b {
            b's' => Some(Role::Shim),
            b'f' => Some(Role::FileOp),
            _ => None,
        }
    }

    fn fds(self) -> usize {
        match self {
            Role::Shim => 4,
            Role::FileOp => 1,
        }
    }
}

/// What the zygote sets up once for all its children (from the sandbox's policy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Enter the code's seccomp filter.
    pub seccomp: bool,
    /// The code's landlock ruleset (its writable paths and oldest ABI), built once
    /// for every child to enter ([`prepared_landlock`]); `None`: no landlock.
    pub landlock: Option<(Vec<String>, Option<u8>)>,
    /// Limit the bounding set: to nothing, or to root's capabilities where the
    /// sandbox has its own user namespace (an exec or file operation as uid 0 keeps
    /// those); `None` leaves it.
    pub bounding: Option<&'static [&'static str]>,
}

impl Setup {
    /// The setup for `policy`.
    pub fn of(policy: &stockade_agent_proto::launch::ExecPolicy) -> Setup {
        let bounding = match (policy.drop_caps, policy.root_caps) {
            (false, _) => None,
            (true, true) => Some(stockade_agent_proto::launch::ROOT_CAPS),
            (true, false) => Some(&[][..]),
        };
        Setup {
            seccomp: policy.seccomp,
            bounding,
            landlock: policy
                .landlock_writable
                .clone()
                .map(|w| (w, policy.landlock_min_abi)),
        }
    }

    /// Nothing set up (no zygote).
    fn nothing() -> Setup {
        Setup {
            seccomp: false,
            bounding: None,
            landlock: None,
        }
    }

    fn args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.seccomp {
            v.push("--seccomp".to_string());
        }
        match self.bounding {
            None => {}
            Some([]) => v.push("--bounding=none".to_string()),
            Some(_) => v.push("--bounding=root".to_string()),
        }
        if let Some((writable, min_abi)) = &self.landlock {
            v.push("--landlock".to_string());
            if let Some(abi) = min_abi {
                v.push(format!("--landlock-min-abi={abi}"));
            }
            v.extend(writable.iter().map(|w| format!("--writable={w}")));
        }
        v
    }

    fn parse(args: &[String]) -> Option<Setup> {
        let mut setup = Setup::nothing();
        for a in args {
            match a.as_str() {
                "--seccomp" => setup.seccomp = true,
                "--bounding=none" => setup.bounding = Some(&[]),
                "--bounding=root" => setup.bounding = Some(stockade_agent_proto::launch::ROOT_CAPS),
                "--landlock" => setup.landlock = Some((Vec::new(), None)),
                _ => {
                    let (writable, min_abi) = setup.landlock.as_mut()?;
                    if let Some(w) = a.strip_prefix("--writable=") {
                        writable.push(w.to_string());
                    } else if let Some(n) = a.strip_prefix("--landlock-min-abi=") {
                        *min_abi = Some(n.parse().ok()?);
                    } else {
                        return None;
                    }
                }
            }
        }
        Some(setup)
    }
}

/// PID 1's handle on its zygote.
pub struct Zygote {
    inner: Arc<Mutex<State>>,
    /// What it sets up (the sandbox's policy).
    setup: Setup,
    /// False where the policy says to spawn shims ([`Zygote::none`]).
    enabled: bool,
    /// Helpers asked for so far.
    uses: AtomicU32,
}

/// Where the zygote is. Nothing ever waits for it: until it is ready, and while a
/// replacement for one that died starts, shims are spawned from the agent's binary.
enum State {
    /// Not running.
    Down,
    /// Being started by a thread of ours (it waits for the ready byte).
    Launching,
    /// Forked at the start; its ready byte not read yet.
    Forked(UnixStream, u32),
    /// Ready for requests: its socket and pid.
    Ready(UnixStream, u32),
}

/// The helper (counted from 0) whose request starts a zygote by `exec` where none was
/// forked at the start (or to replace one that died): a sandbox that runs one exec
/// and ends does not pay for that spawn, which costs about what the exec's own does;
/// from the second on, it pays back.
const START_AT_USE: u32 = 1;

/// The longest the first helper waits for the ready byte of the zygote forked at the
/// start (it takes well under a millisecond; more only on a machine too loaded to
/// matter) before it spawns a shim instead.
const FORKED_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The longest [`Zygote::warm`] waits for the zygote to be ready (it takes about a
/// millisecond; more only on a machine too loaded to matter).
const WARM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Zygote {
    /// A zygote forked now, while the caller (PID 1, before it starts any thread) is
    /// single-threaded; where it is not, or the fork fails, one started on demand
    /// (see [`START_AT_USE`]) by `exec` from a thread.
    pub fn start(setup: Setup) -> Zygote {
        let state = match fork_zygote(setup.clone()) {
            Ok((sock, pid)) => State::Forked(sock, pid),
            Err(_) => State::Down,
        };
        Zygote {
            inner: Arc::new(Mutex::new(state)),
            setup,
            enabled: true,
            uses: AtomicU32::new(0),
        }
    }

    /// No zygote: every shim and file operation is spawned from the agent's binary
    /// (the policy's `no_zygote`).
    pub fn none() -> Zygote {
        Zygote {
            inner: Arc::new(Mutex::new(State::Down)),
            setup: Setup::nothing(),
            enabled: false,
            uses: AtomicU32::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a zygote by `exec` from a thread of its own (the caller saw `Down`
    /// and set `Launching`); it serves once ready.
    fn launch(&self) {
        let inner = self.inner.clone();
        let setup = self.setup.clone();
        let spawned = std::thread::Builder::new().spawn(move || {
            let started = exec_zygote(setup);
            let mut g = inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *g = match started {
                Ok((sock, pid)) => State::Ready(sock, pid),
                Err(_) => State::Down,
            };
        });
        if spawned.is_err() {
            *self.lock() = State::Down;
        }
    }

    /// The zygote's pid, while it runs (PID 1's orphan sweep spares it).
    pub fn pid(&self) -> Option<u32> {
        match &*self.lock() {
            State::Ready(_, pid) | State::Forked(_, pid) => Some(*pid),
            State::Down | State::Launching => None,
        }
    }

    /// Turns a zygote forked at the start into a ready one once its ready byte is read
    /// (waiting at most [`FORKED_WAIT`]), or into none if it failed.
    fn settle(g: &mut State) {
        if !matches!(g, State::Forked(..)) {
            return;
        }
        let State::Forked(sock, pid) = std::mem::replace(g, State::Down) else {
            unreachable!("matched above")
        };
        let _ = sock.set_read_timeout(Some(FORKED_WAIT));
        *g = match ready(sock, pid) {
            Ok((sock, pid)) => {
                let _ = sock.set_read_timeout(None);
                State::Ready(sock, pid)
            }
            // Not ready in time, or it exited: PID 1's reaper collects it (a live one
            // ends when its socket closes here), and an exec'd one may start later.
            Err(_) => State::Down,
        };
    }

    /// Starts the zygote now rather than at [`START_AT_USE`], and waits until it is
    /// ready or has failed, for at most [`WARM_WAIT`]: a pooled sandbox's first exec
    /// is then served by it. A policy without a zygote returns at once.
    pub fn warm(&self) {
        if !self.enabled {
            return;
        }
        {
            let mut g = self.lock();
            Self::settle(&mut g);
            if matches!(*g, State::Down) {
                *g = State::Launching;
                drop(g);
                self.launch();
            }
        }
        let until = std::time::Instant::now() + WARM_WAIT;
        while matches!(*self.lock(), State::Launching) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }

    /// Starts a child in `role` with `fds` (as [`Role`] lists them). Returns its pid.
    /// An error means no child was started (the caller falls back to `exec`): there
    /// is no zygote (yet), or it died (then a new one starts in the background).
    pub fn spawn(&self, role: Role, fds: &[BorrowedFd<'_>]) -> io::Result<u32> {
        let use_no = self.uses.fetch_add(1, Ordering::Relaxed);
        let mut g = self.lock();
        Self::settle(&mut g);
        if matches!(*g, State::Down) && self.enabled && use_no >= START_AT_USE {
            *g = State::Launching;
            drop(g);
            self.launch();
            return Err(io::Error::other("the exec zygote is starting"));
        }
        let State::Ready(sock, _) = &*g else {
            return Err(io::Error::other("the exec zygote is not running"));
        };
        match request(sock, role, fds) {
            Ok(pid) => Ok(pid),
            Err(Refused::Child(e)) => Err(e),
            Err(Refused::Gone(e)) => {
                // Gone (killed, or the OOM killer despite its score): PID 1 reaps it;
                // a fresh one serves once it is ready.
                *g = State::Launching;
                drop(g);
                self.launch();
                Err(e)
            }
        }
    }
}

fn request(sock: &UnixStream, role: Role, fds: &[BorrowedFd<'_>]) -> Result<u32, Refused> {
    if fds.len() != role.fds() {
        return Err(Refused::Child(io::Error::other(format!(
            "a {role:?} takes {} descriptors, not {}",
            role.fds(),
            fds.len()
        ))));
    }
    forkserver::request(sock, role.byte(), fds)
}

/// Waits for the zygote's ready byte: it is set up (its filter in force) and serves.
fn ready(sock: UnixStream, pid: u32) -> io::Result<(UnixStream, u32)> {
    forkserver::wait_ready(&sock)?;
    Ok((sock, pid))
}

/// Forks the zygote (the caller must be single-threaded; `fork` checks) with its
/// socket as fd 3 and nothing else open past the standard three; it serves as an
/// exec'd one does.
fn fork_zygote(setup: Setup) -> io::Result<(UnixStream, u32)> {
    let (ours, theirs) = UnixStream::pair()?;
    match stockade_sys::process::fork().map_err(|e| io::Error::other(e.to_string()))? {
        Forked::Parent(pid) => {
            drop(theirs);
            // PID 1's reaper collects it.
            Ok((ours, pid.as_raw() as u32))
        }
        Forked::Child => {
            // Fd 3 is its socket, and nothing past it stays open: not PID 1's
            // listener, not our end of the pair.
            if nix::unistd::dup2(theirs.as_raw_fd(), 3).is_err() {
                exit_now(126);
            }
            stockade_sys::process::close_fds_from(4);
            std::mem::forget((ours, theirs));
            exit_now(serve_forever(3, setup))
        }
    }
}

/// Starts `stockade-agent zygote` with its socket as fd 3.
fn exec_zygote(setup: Setup) -> io::Result<(UnixStream, u32)> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("stockade-zygote")
        .arg("zygote")
        .args(setup.args())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    stockade_sys::process::spawn_with_stdio_only(&mut cmd);
    stockade_sys::process::pass_fd(&mut cmd, theirs.into(), 3);
    let child = cmd.spawn()?;
    drop(cmd);
    // PID 1's reaper collects it; dropping Child does not wait.
    ready(ours, child.id())
}

/// Entry point of `stockade-agent zygote [--seccomp] [--bounding=none|root]` (its
/// socket on fd 3).
pub fn main(args: &[String]) -> i32 {
    let Some(setup) = Setup::parse(args) else {
        eprintln!("stockade-zygote: bad arguments {args:?}; this command is run by the agent");
        return 2;
    };
    if nix::fcntl::fcntl(3, nix::fcntl::FcntlArg::F_GETFD).is_err() {
        eprintln!("stockade-zygote: no socket on fd 3; this command is run by the agent");
        return 2;
    }
    serve_forever(3, setup)
}

/// The zygote's loop: one child per request, until PID 1 closes the socket.
fn serve_forever(fd: i32, setup: Setup) -> i32 {
    let _ = nix::sys::prctl::set_name(c"stockade-zygote");
    let _ = nix::sys::prctl::set_dumpable(false);
    let _ = stockade_sys::process::set_oom_score_adj(-1000);
    // fd 3 is ours alone (dup'ed or inherited for this purpose).
    let Some(sock) = stockade_sys::process::take_inherited_fd(fd) else {
        return 2;
    };
    let sock = UnixStream::from(sock);
    // Signals and the bounding set once here, for every child: theirs then only
    // reset SIGPIPE and the mask, and drop what is left of the bounding set.
    stockade_sys::process::reset_signals_but_ignore_sigpipe();
    if let Some(keep) = setup.bounding
        && let Err(e) = stockade_sys::caps::limit_bounding(keep)
    {
        eprintln!("stockade-zygote: cannot limit the bounding set: {e}");
        return 1;
    }
    // The code's landlock ruleset, built once (before the filter, which the rules'
    // opens do not need to pass): each child enters it with two system calls. The
    // writable paths are the sandbox's mount points in its read-only root (or the
    // root itself), so they name the same directories for the sandbox's whole life.
    // Should it fail, each child builds its own, as a spawned shim does.
    if let Some((writable, min_abi)) = &setup.landlock {
        // For the sandbox user's execs (those of root build their own, scoped).
        match stockade_sys::landlock::Prepared::new(writable, *min_abi, false) {
            Ok(p) => {
                let _ = LANDLOCK.set(p);
            }
            Err(e) => eprintln!("stockade-zygote: each exec builds its landlock ruleset: {e}"),
        }
    }
    let seccomp = setup.seccomp;
    // The code's filter, entered here once: every child forked below is under it
    // already. No zygote serves without it (PID 1 then execs shims, which build it).
    if seccomp {
        let entered = nix::sys::prctl::set_no_new_privs()
            .map_err(|e| e.to_string())
            .and_then(|()| stockade_sys::seccomp::build().map_err(|e| e.to_string()))
            .and_then(|f| f.apply().map_err(|e| e.to_string()));
        if let Err(e) = entered {
            eprintln!("stockade-zygote: cannot enter the seccomp filter: {e}");
            return 1;
        }
    }
    // Until PID 1 closes the socket.
    forkserver::serve(sock.as_fd(), |byte, fds| match Role::from_byte(byte) {
        Some(role) if fds.len() == role.fds() => fork_child(role, fds, seccomp),
        _ => -libc::EINVAL,
    })
}

/// The landlock ruleset the zygote built for its children (none in a process that
/// is not one of them).
static LANDLOCK: std::sync::OnceLock<stockade_sys::landlock::Prepared> = std::sync::OnceLock::new();

/// The zygote's landlock ruleset, in the zygote and the children it forked.
pub fn prepared_landlock() -> Option<&'static stockade_sys::landlock::Prepared> {
    LANDLOCK.get()
}

/// Forks one child as PID 1's own (`CLONE_PARENT`); returns its pid or `-errno`.
fn fork_child(role: Role, fds: Vec<OwnedFd>, seccomp: bool) -> i32 {
    // The descriptors at 0-3 (a file operation's stdio stays /dev/null), then nothing
    // else: not the zygote's socket, not the received originals; but the landlock
    // ruleset the children enter.
    let targets: &[i32] = match role {
        Role::Shim => &[0, 1, 2, 3],
        Role::FileOp => &[3],
    };
    let keep = prepared_landlock().map(stockade_sys::landlock::Prepared::fd);
    forkserver::fork_child(fds, targets, 4, keep, || {
        // A spawned helper starts with no signal blocked (the zygote inherited PID 1's
        // blocked SIGCHLD).
        let _ = nix::sys::signal::sigprocmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&nix::sys::signal::SigSet::empty()),
            None,
        );
        match role {
            Role::Shim => crate::shim::run(seccomp, true),
            Role::FileOp => crate::fileop::main(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_agent_proto::launch::{ExecPolicy, ROOT_CAPS};

    #[test]
    fn the_setup_follows_the_policy_and_survives_the_command_line() {
        let mut p = ExecPolicy {
            uid: 1000,
            gid: 1000,
            env: Default::default(),
            workdir: "/tmp".into(),
            no_new_privs: true,
            drop_caps: true,
            seccomp: true,
            landlock_writable: None,
            idle_timeout_ms: None,
            root_caps: true,
            landlock_min_abi: None,
            rlimit_as_bytes: None,
            rlimit_nproc: None,
            sweep_orphans: false,
            exec_cgroup: None,
            no_zygote: false,
        };
        let s = Setup::of(&p);
        assert_eq!(s.bounding, Some(ROOT_CAPS));
        assert!(s.seccomp);
        p.root_caps = false;
        assert_eq!(Setup::of(&p).bounding, Some(&[][..]));
        p.drop_caps = false;
        p.seccomp = false;
        assert_eq!(Setup::of(&p).bounding, None);
        for setup in [
            Setup::of(&p),
            Setup {
                seccomp: true,
                bounding: Some(&[]),
                landlock: Some((vec!["/tmp".into(), "/a=b c".into()], Some(2))),
            },
            Setup {
                seccomp: false,
                bounding: Some(ROOT_CAPS),
                landlock: Some((Vec::new(), None)),
            },
        ] {
            let args = setup.args();
            assert_eq!(Setup::parse(&args), Some(setup), "{args:?}");
        }
        assert_eq!(Setup::parse(&["--bounding=all".to_string()]), None);
        // Paths and the ABI only after --landlock; an ABI must be a number.
        assert_eq!(Setup::parse(&["--writable=/tmp".to_string()]), None);
        let bad = ["--landlock".to_string(), "--landlock-min-abi=x".to_string()];
        assert_eq!(Setup::parse(&bad), None);
        p.landlock_writable = Some(vec!["/tmp".into()]);
        p.landlock_min_abi = Some(1);
        assert_eq!(Setup::of(&p).landlock, Some((vec!["/tmp".into()], Some(1))));
    }

    #[test]
    fn roles_round_trip_and_name_their_descriptors() {
        for role in [Role::Shim, Role::FileOp] {
            assert_eq!(Role::from_byte(role.byte()), Some(role));
        }
        assert_eq!(Role::from_byte(b'x'), None);
        assert_eq!((Role::Shim.fds(), Role::FileOp.fds()), (4, 1));
    }
}
