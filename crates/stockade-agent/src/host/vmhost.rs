//! `stockade-agent vm-host DIR`: the host-side supervisor of one microVM.
//!
//! The microVM provider writes `DIR/host.json` ([`VmHostConfig`]) and starts this
//! role, which detaches at once (the provider returns once the agent answers). It
//! joins the VM's host cgroup, starts the VMM as its child, connects to the VMM's
//! serial-port socket and serves `DIR/agent.sock` (0600, in the provider's root-only
//! directory): each connection there becomes one stream of the multiplexer
//! ([`stockade_agent_proto::mux`]). It ends the VM when its owner dies or its
//! lifetime passes (removing `DIR`), and when the VM ends by itself it records why in
//! `DIR/exit` unless the provider paused it (`DIR/paused`).
//!
//! A VM with network (`VmHostConfig::net_dir`): the VMM runs in a network namespace
//! and a mount namespace of its own, made for it, and this process is that
//! namespace's network monitor exactly as `docker-watch` is a container's
//! ([`crate::netmon`]): the native provider's firewall, an egress policy's resolver
//! and proxy, slirp4netns. The VMM's user-mode network (QEMU's slirp) opens every
//! connection of the guest as a socket in that namespace, so each passes the
//! sandbox's firewall, and its DNS forwarder asks the resolver `/etc/resolv.conf`
//! names there: the plan's (slirp4netns's forwarder, or the policy's resolver),
//! bound over the host's file in the VMM's mount namespace. The VMM starts only
//! once all of that is up.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;

use crate::watch::Ending;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stockade_agent_proto::launch::{VMM_FIRST_FD, VmHostConfig};
use stockade_agent_proto::mux::{self, Identity, Kind};
use stockade_agent_proto::now_ms;
use stockade_sys::process::{Forked, exit_now, fork};

mod relay;

use relay::*;

struct Stream {
    conn: UnixStream,
    host_eof: bool,
    guest_eof: bool,
}

type Streams = Arc<Mutex<HashMap<u32, Stream>>>;

/// Entry point of `stockade-agent vm-host`.
pub fn main(args: Vec<String>) -> i32 {
    let [dir] = &args[..] else {
        eprintln!("usage: stockade-agent vm-host STATE_DIR");
        return 2;
    };
    let dir = PathBuf::from(dir);
    let config: VmHostConfig = match fs::read(dir.join("host.json"))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "stockade-agent vm-host: cannot read {}/host.json: {e}",
                dir.display()
            );
            return 2;
        }
    };
    // Read before the fork: the provider closes our stdin once it has written it.
    let net = match &config.net_dir {
        Some(_) => match crate::netmon::NetInput::read() {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("stockade-agent vm-host: {e}");
                return 2;
            }
        },
        None => None,
    };
    // Close-on-exec: neither the VMM nor slirp4netns may hold it open.
    let (started_r, started_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stockade-agent vm-host: pipe: {e}");
            return 1;
        }
    };
    // The provider waits for this parent half, which answers once the network (if
    // any) is up; the child lives on detached.
    match fork() {
        Ok(Forked::Parent(_)) => {
            drop(started_w);
            let mut answer = String::new();
            let _ = fs::File::from(started_r).read_to_string(&mut answer);
            if answer == "ok" {
                return 0;
            }
            eprintln!(
                "stockade-agent vm-host: {}",
                if answer.is_empty() {
                    "the detached VM host died while starting"
                } else {
                    &answer
                }
            );
            return 1;
        }
        Ok(Forked::Child) => {}
        Err(e) => {
            eprintln!("stockade-agent vm-host: cannot fork: {e}");
            return 1;
        }
    }
    drop(started_r);
    let mut started = Some(fs::File::from(started_w));
    let _ = nix::unistd::setsid();
    stockade_sys::process::stdio_to_null(&[0, 1, 2]);
    let code = match supervise(&dir, &config, net, &mut started) {
        Ok(()) => {
            // Ended before the VMM started (its owner was gone): `DIR/exit` says why.
            report_started(&mut started);
            0
        }
        Err(e) => {
            let _ = fs::write(dir.join("exit"), format!("the VM host failed: {e}"));
            if let Some(mut s) = started.take() {
                let _ = s.write_all(e.as_bytes());
            }
            1
        }
    };
    exit_now(code)
}

/// Tells the waiting provider we started (once).
fn report_started(started: &mut Option<fs::File>) {
    if let Some(mut s) = started.take() {
        let _ = s.write_all(b"ok");
    }
}

fn supervise(
    dir: &Path,
    config: &VmHostConfig,
    net: Option<crate::netmon::NetInput>,
    started: &mut Option<fs::File>,
) -> Result<(), String> {
    if net.is_none() {
        // Nothing the provider must hear about before the VM answers: a failure is in
        // `DIR/exit`, which it polls.
        report_started(started);
    }
    let me = std::process::id();
    let ticks = stockade_sys::process::start_ticks(me).unwrap_or(0);
    fs::write(dir.join("host.pid"), format!("{me} {ticks}"))
        .map_err(|e| format!("cannot write host.pid: {e}"))?;
    for (cg, settings) in &config.cgroups {
        fs::create_dir_all(cg).map_err(|e| format!("cannot create cgroup {cg}: {e}"))?;
        for (file, value) in settings {
            // `?file`: optional (e.g. swap accounting may be off).
            let (optional, file) = match file.strip_prefix('?') {
                Some(f) => (true, f),
                None => (false, file.as_str()),
            };
            if let Err(e) = fs::write(format!("{cg}/{file}"), value)
                && !optional
            {
                return Err(format!("cannot set {cg}/{file} = {value}: {e}"));
            }
        }
        fs::write(format!("{cg}/cgroup.procs"), me.to_string())
            .map_err(|e| format!("cannot join cgroup {cg}: {e}"))?;
    }
    let owner = match config.owner_pid {
        Some(p) => {
            let alive = stockade_sys::process::start_ticks(p)
                .is_some_and(|t| config.owner_ticks.is_none_or(|want| want == t));
            match rustix::process::Pid::from_raw(p as i32)
                .filter(|_| alive)
                .and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                }) {
                Some(fd) => Some(fd),
                None => return end(dir, config, None, "its owner is gone"),
            }
        }
        None => None,
    };
    // The VMM's own host ids, leased for as long as this process lives (a resumed
    // or forked VM gets a new range: nothing of the old one's stays reachable).
    let (range, _lease) = crate::ids::lease(&config.vmm_ids, &config.id)?;
    let jail = Jail::prepare(dir, config, range.first)?;
    // The VMM connects to their sockets at its start. Killed when we end (they are
    // also in our process group, which a destroy kills).
    let _daemons = start_daemons(dir, config)?;
    jail.give_sockets(config)?;
    let (mut child, helper) = match (&config.net_dir, net) {
        (Some(net_dir), Some(input)) => {
            let (mut child, go) = VmmProcess::start(dir, config, &jail, Some((net_dir, &input)))?;
            let served =
                crate::netmon::NetMonitor::prepare(Path::new(net_dir), child.id() as i32, input)
                    .and_then(crate::netmon::NetMonitor::serve);
            match served {
                Ok(helper) => {
                    // The VMM goes on only now, behind the firewall.
                    if let Some(mut g) = go {
                        let _ = g.write_all(b"go");
                    }
                    (child, Some(helper))
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("network egress: {e}"));
                }
            }
        }
        (Some(_), None) => return Err("a VM with network got no network plan".into()),
        (None, _) => (VmmProcess::start(dir, config, &jail, None)?.0, None),
    };
    report_started(started);
    let r = serve_vm(dir, config, &mut child, owner.as_ref());
    if let Some(h) = &helper {
        crate::monitor::stop_helper(h);
        // The helper was in the VMM's cgroups too: they could not go before it.
        remove_cgroups(config);
    }
    if let Some(net_dir) = &config.net_dir {
        // A paused VM keeps its directory (the live policy in `state.json`), not a
        // socket nothing answers on.
        let _ = fs::remove_file(Path::new(net_dir).join("net.sock"));
    }
    r
}

/// From the VMM's start to its end: the agent's serial multiplexer, and the owner
/// and lifetime watch.
fn serve_vm(
    dir: &Path,
    config: &VmHostConfig,
    child: &mut VmmProcess,
    owner: Option<&std::os::fd::OwnedFd>,
) -> Result<(), String> {
    let serial = match connect_serial(&config.serial_socket, child) {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let streams: Streams = Arc::default();
    let writer = Arc::new(Mutex::new(serial.try_clone().map_err(|e| e.to_string())?));
    let mut seed = vec![0u8; 32];
    let _ = fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed));
    let identity = Identity {
        hostname: config.id.clone(),
        seed,
        unix_ms: now_ms(),
    };
    match handshake(&serial, &identity, child, config) {
        Ok(()) => {}
        Err(Ended(why)) => return end(dir, config, Some(child), why),
        Err(Failed(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            remove_cgroups(config);
            return Err(e);
        }
    }
    let sock = dir.join("agent.sock");
    let _ = fs::remove_file(&sock);
    let listener =
        UnixListener::bind(&sock).map_err(|e| format!("cannot listen on agent.sock: {e}"))?;
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict agent.sock: {e}"))?;
    {
        let streams = streams.clone();
        let writer = writer.clone();
        std::thread::spawn(move || from_guest(serial, &writer, &streams));
    }
    {
        let streams = streams.clone();
        let writer = writer.clone();
        std::thread::spawn(move || accept(listener, &writer, &streams));
    }
    let vmm = rustix::process::Pid::from_raw(child.id() as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
        .ok_or("cannot watch the VMM process")?;
    match crate::watch::wait_for(
        vmm.as_fd(),
        owner.map(AsFd::as_fd),
        config.expires_at_ms,
        None,
    ) {
        Ending::Lifetime => return end(dir, config, Some(child), "its lifetime passed"),
        Ending::OwnerDied => return end(dir, config, Some(child), "its owner died"),
        Ending::Watched => {}
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let _ = fs::remove_file(&sock);
    if !dir.join("paused").exists() {
        let how = match (status.code(), status.signal()) {
            (_, Some(sig)) => format!("the VM process was killed by signal {sig}"),
            (Some(0), _) => "the VM powered off".to_string(),
            (Some(c), _) => format!("the VM process exited with code {c}"),
            _ => format!("the VM process ended ({status})"),
        };
        let _ = fs::write(dir.join("exit"), how);
    }
    remove_cgroups(config);
    Ok(())
}

/// The VMM: our child, started by a fork of ours (so that, with network, it is
/// made in namespaces of its own and waits there for the network to be up).
struct VmmProcess {
    pid: nix::unistd::Pid,
    /// Set once reaped (the pid is then no longer ours to signal).
    status: Option<ExitStatus>,
}

impl VmmProcess {
    /// Forks the VMM `argv` (stdout and stderr into `DIR/vmm.log`). With `net`
    /// (network directory, plan), it is made in a new network and mount namespace,
    /// with loopback up and the plan's resolv.conf bound over `/etc/resolv.conf`, and
    /// waits until the returned pipe says `go` (it exits if the pipe closes first).
    /// Dies with this process (parent-death signal).
    fn start(
        dir: &Path,
        config: &VmHostConfig,
        jail: &Jail,
        net: Option<(&String, &crate::netmon::NetInput)>,
    ) -> Result<(VmmProcess, Option<fs::File>), String> {
        use nix::sched::CloneFlags;
        let argv = &config.vmm;
        let Some(program) = argv.first() else {
            return Err("an empty VMM command line".into());
        };
        // Opened here, as root: the VMM's uid could not open them by path.
        let files = config
            .vmm_files
            .iter()
            .map(|f| fs::File::open(f).map_err(|e| format!("cannot open {f} for the VMM: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let log = fs::File::create(dir.join("vmm.log"))
            .map_err(|e| format!("cannot create vmm.log: {e}"))?;
        let (flags, go, resolv) = match net {
            Some((net_dir, input)) => {
                let resolv = Path::new(net_dir).join("vmm-resolv.conf");
                fs::write(&resolv, &input.resolv_conf)
                    .map_err(|e| format!("cannot write {}: {e}", resolv.display()))?;
                let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                    .map_err(|e| format!("pipe: {e}"))?;
                (
                    CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS,
                    Some((r, w)),
                    Some(resolv),
                )
            }
            None => (CloneFlags::empty(), None, None),
        };
        match stockade_sys::process::fork_into(flags) {
            Ok(Forked::Parent(pid)) => Ok((
                VmmProcess { pid, status: None },
                go.map(|(_, w)| fs::File::from(w)),
            )),
            Ok(Forked::Child) => {
                let why = match vmm_child(
                    program,
                    &argv[1..],
                    log,
                    go.map(|(r, _)| r),
                    resolv,
                    files,
                    jail,
                ) {
                    Ok(never) => match never {},
                    Err(e) => e,
                };
                // Fails (harmlessly) once the ids are dropped: then the log has it.
                let _ = fs::write(
                    dir.join("vmm.log"),
                    format!("stockade-agent vm-host: {why}\n"),
                );
                exit_now(127)
            }
            Err(e) => Err(format!("cannot start {program}: {e}")),
        }
    }

    fn id(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    fn kill(&mut self) -> std::io::Result<()> {
        if self.status.is_none() {
            nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL)?;
        }
        Ok(())
    }

    fn wait_flags(
        &mut self,
        flags: Option<nix::sys::wait::WaitPidFlag>,
    ) -> std::io::Result<Option<ExitStatus>> {
        use nix::sys::wait::WaitStatus;
        use std::os::unix::process::ExitStatusExt;
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        loop {
            let raw = match nix::sys::wait::waitpid(self.pid, flags) {
                Ok(WaitStatus::Exited(_, code)) => (code & 0xff) << 8,
                Ok(WaitStatus::Signaled(_, sig, core)) => sig as i32 | if core { 0x80 } else { 0 },
                Ok(WaitStatus::StillAlive) => return Ok(None),
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            let status = ExitStatus::from_raw(raw);
            self.status = Some(status);
            return Ok(Some(status));
        }
    }

    fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.wait_flags(None)?
            .ok_or_else(|| std::io::Error::other("waitpid returned no status"))
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.wait_flags(Some(nix::sys::wait::WaitPidFlag::WNOHANG))
    }
}

/// The VMM's side of [`VmmProcess::start`], in the forked child: returns only why it
/// could not exec.
fn vmm_child(
    program: &str,
    args: &[String],
    log: fs::File,
    go: Option<std::os::fd::OwnedFd>,
    resolv: Option<PathBuf>,
    files: Vec<fs::File>,
    jail: &Jail,
) -> Result<std::convert::Infallible, String> {
    use nix::mount::{MsFlags, mount};
    use std::os::unix::process::CommandExt;
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if let Some(resolv) = &resolv {
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| format!("cannot make the VMM's mounts private: {e}"))?;
        mount(
            Some(resolv.as_path()),
            "/etc/resolv.conf",
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| {
            format!(
                "cannot bind {} over /etc/resolv.conf for the VMM: {e}",
                resolv.display()
            )
        })?;
        stockade_sys::net::loopback_up()
            .map_err(|e| format!("cannot bring the VMM's loopback up: {e}"))?;
    }
    if let Some(go) = go {
        let mut word = [0u8; 2];
        let mut f = fs::File::from(go);
        if f.read_exact(&mut word).is_err() || &word != b"go" {
            exit_now(1)
        }
    }
    let mut log = place_files(log, files)?;
    // From here on this process may no longer create `vmm.log`: failures go to the
    // descriptor it has open.
    let failed = |log: &mut fs::File, why: String| -> String {
        let _ = writeln!(log, "stockade-agent vm-host: {why}");
        why
    };
    if let Err(e) = jail.drop_privileges() {
        return Err(failed(&mut log, e));
    }
    let out = log.try_clone().map_err(|e| e.to_string())?;
    let err = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(log.try_clone().map_err(|e| e.to_string())?)
        .exec();
    Err(failed(&mut log, format!("cannot start {program}: {err}")))
}

/// Puts `files` at descriptors `VMM_FIRST_FD`.. (inherited by the exec) and returns
/// `log` moved out of their way.
fn place_files(log: fs::File, files: Vec<fs::File>) -> Result<fs::File, String> {
    use nix::fcntl::{F_SETFD, FdFlag, fcntl};
    use std::os::fd::AsRawFd;
    // Everything first above the targets, so that no dup2 closes a file still to
    // be placed (or the log).
    let high = |f: &fs::File| -> Result<fs::File, String> {
        rustix::io::fcntl_dupfd_cloexec(f, 64)
            .map(fs::File::from)
            .map_err(|e| format!("fcntl F_DUPFD_CLOEXEC: {e}"))
    };
    let log = high(&log)?;
    let moved = files.iter().map(high).collect::<Result<Vec<_>, _>>()?;
    drop(files);
    for (i, f) in moved.iter().enumerate() {
        let to = VMM_FIRST_FD + i as i32;
        nix::unistd::dup2(f.as_raw_fd(), to).map_err(|e| format!("dup2 to {to}: {e}"))?;
        fcntl(to, F_SETFD(FdFlag::empty())).map_err(|e| format!("fcntl F_SETFD {to}: {e}"))?;
    }
    Ok(log)
}

/// Gives `path` an inode of its own when it shares one (a forked VM's initramfs is
/// a hard link of its source's), so that handing it to one VMM's gid takes it from
/// no other VM's.
fn unshare_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(path).map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if md.nlink() <= 1 {
        return Ok(());
    }
    let tmp = path.with_extension("unshared");
    fs::copy(path, &tmp)
        .and_then(|_| fs::rename(&tmp, path))
        .map_err(|e| format!("cannot copy {} to a file of its own: {e}", path.display()))
}

/// The VMM's confinement: its own host uid and gid (the first id of a range leased
/// for this VM), a directory of its own in the sandbox's (`DIR/vmm`, 0700, where
/// it makes its sockets and console log), read access by group to the files of
/// `DIR` it boots from, and nothing else of the host's but what any user may read.
struct Jail {
    uid: u32,
    gid: u32,
}

impl Jail {
    fn prepare(dir: &Path, config: &VmHostConfig, id: u32) -> Result<Jail, String> {
        use std::os::unix::fs::{DirBuilderExt, chown};
        let jail = Jail { uid: id, gid: id };
        // Searchable by the VMM's gid alone, not listable: it reaches `vmm/` and what
        // it reads by name; no other host user (or VMM) gets in.
        chown(dir, Some(0), Some(jail.gid))
            .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(0o710)))
            .map_err(|e| format!("cannot open {} to gid {}: {e}", dir.display(), jail.gid))?;
        let own = dir.join("vmm");
        match fs::remove_dir_all(&own) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove {}: {e}", own.display())),
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&own)
            .map_err(|e| format!("cannot create {}: {e}", own.display()))?;
        chown(&own, Some(jail.uid), Some(jail.gid))
            .map_err(|e| format!("cannot give {} to uid {}: {e}", own.display(), jail.uid))?;
        for f in &config.vmm_reads {
            unshare_file(Path::new(f))?;
            chown(f, Some(0), Some(jail.gid))
                .and_then(|()| fs::set_permissions(f, fs::Permissions::from_mode(0o640)))
                .map_err(|e| format!("cannot give {f} to gid {} to read: {e}", jail.gid))?;
        }
        Ok(jail)
    }

    /// The virtiofsd sockets (made by the daemons, as root) become the VMM's.
    fn give_sockets(&self, config: &VmHostConfig) -> Result<(), String> {
        for (_, socket) in &config.daemons {
            std::os::unix::fs::lchown(socket, Some(self.uid), Some(self.gid))
                .map_err(|e| format!("cannot give {socket} to uid {}: {e}", self.uid))?;
        }
        Ok(())
    }

    /// In the VMM's child, last before the exec: no supplementary groups, its own
    /// gid and uid (real, effective, saved), an empty bounding set and no
    /// capabilities (a uid change from root clears them; the bounding set must be
    /// dropped while we still may), `no_new_privs` (no set-id binary gives any
    /// back), and the parent-death signal again (a uid change clears it).
    fn drop_privileges(&self) -> Result<(), String> {
        use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
        stockade_sys::caps::drop_bounding()
            .map_err(|e| format!("cannot drop the VMM's bounding set: {e}"))?;
        setgroups(&[]).map_err(|e| format!("setgroups([]): {e}"))?;
        let (g, u) = (Gid::from_raw(self.gid), Uid::from_raw(self.uid));
        setresgid(g, g, g).map_err(|e| format!("setresgid({}): {e}", self.gid))?;
        setresuid(u, u, u).map_err(|e| format!("setresuid({}): {e}", self.uid))?;
        stockade_sys::caps::clear_all().map_err(|e| format!("cannot clear capabilities: {e}"))?;
        nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
            .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
        // The VM host may have died before the signal was set again.
        if nix::unistd::getppid().as_raw() == 1 {
            exit_now(1)
        }
        Ok(())
    }
}

/// The daemons the VMM needs (a virtiofsd per shared directory); killed and reaped
/// when dropped.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts each of `config.daemons` and waits until its socket exists (10 s at most;
/// one that exits first fails the start, its output in `daemons.log`).
fn start_daemons(dir: &Path, config: &VmHostConfig) -> Result<Daemons, String> {
    let mut daemons = Daemons(Vec::new());
    for (argv, socket) in &config.daemons {
        let Some(program) = argv.first() else {
            return Err("an empty daemon command line".into());
        };
        let _ = fs::remove_file(socket);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("daemons.log"))
            .map_err(|e| format!("cannot create daemons.log: {e}"))?;
        let child = Command::new(program)
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        daemons.0.push(child);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !Path::new(socket).exists() {
            let exited = daemons
                .0
                .last_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let out = fs::read_to_string(dir.join("daemons.log")).unwrap_or_default();
                return Err(format!(
                    "{program} exited ({status}) before listening on {socket}: {}",
                    out.trim()
                ));
            }
            if std::time::Instant::now() > until {
                return Err(format!("{program} did not listen on {socket} within 10 s"));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // It binds, then listens: a moment for the second step.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(daemons)
}

/// Kills the VM (when running) and removes everything of the sandbox.
fn end(
    dir: &Path,
    config: &VmHostConfig,
    child: Option<&mut VmmProcess>,
    why: &str,
) -> Result<(), String> {
    let _ = fs::write(dir.join("exit"), why);
    if let Some(c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    remove_cgroups(config);
    let _ = fs::remove_dir_all(dir);
    Ok(())
}

/// Removes the VMM's cgroups once it is gone; this process leaves them first.
fn remove_cgroups(config: &VmHostConfig) {
    for (cg, _) in &config.cgroups {
        let root = Path::new(cg).parent().and_then(Path::parent);
        if let Some(root) = root {
            let _ = fs::write(root.join("cgroup.procs"), std::process::id().to_string());
        }
        let _ = stockade_cgroup::remove(&[cg.into()], Duration::from_secs(10));
    }
}
