//! `stockade-agent vm-init`: PID 1 of a microVM (the kernel runs the initramfs's
//! `/init`, this binary, with `vm-init` after `--` on its command line).
//!
//! It loads the virtio modules the provider put in the initramfs, mounts the
//! read-only erofs root under an overlay (a tmpfs upper, remounted read-only unless
//! the sandbox is `writable`), a `/tmp` tmpfs and the agent's private `/.stockade`
//! (0700), moves into it, caps the sandbox's cgroup (memory, pids), and then serves
//! the agent protocol as on docker (`server.rs`). The host reaches it through the
//! serial multiplexer ([`stockade_agent_proto::mux`]), a thread of this process.
//! Any setup failure powers the VM off after printing why on the console.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::mount::{MsFlags, mount};
use stockade_agent_proto::launch::{CONTAINER_DIR, VmConfig};
use stockade_agent_proto::mux::{self, Identity, Kind};

use crate::server::{self, OomCounter};

const NEWROOT: &str = "/newroot";
const CGROUP: &str = "/sys/fs/cgroup/sandbox";

/// Entry point of `stockade-agent vm-init`.
pub fn main() -> i32 {
    match setup() {
        Ok((listener, config, oom)) => {
            let port = config.port_name.clone();
            std::thread::spawn(move || guest_mux(&port));
            server::serve(listener, config.exec, oom)
        }
        Err(e) => {
            // The console is the VM's log file on the host; the provider shows it.
            // PID 1 exiting panics the kernel, which (panic=-1, -no-reboot) ends
            // the VMM.
            eprintln!("stockade-agent vm-init: {e}");
            let _ = std::io::stderr().flush();
            1
        }
    }
}

fn mnt(src: &str, target: &str, fstype: &str, flags: MsFlags, data: &str) -> Result<(), String> {
    let data = (!data.is_empty()).then_some(data);
    mount(Some(src), target, Some(fstype), flags, data)
        .map_err(|e| format!("cannot mount {fstype} {src} on {target}: {e}"))
}

fn mkdir(path: &str) -> Result<(), String> {
    fs::create_dir_all(path).map_err(|e| format!("cannot create {path}: {e}"))
}

fn setup() -> Result<(UnixListener, VmConfig, Option<OomCounter>), String> {
    if std::process::id() != 1 {
        return Err("this role runs as PID 1 of a microVM started by stockade".into());
    }
    for d in ["/dev", "/proc", "/sys"] {
        mkdir(d)?;
    }
    mnt(
        "devtmpfs",
        "/dev",
        "devtmpfs",
        MsFlags::MS_NOSUID,
        "mode=0755",
    )?;
    mnt("proc", "/proc", "proc", MsFlags::empty(), "")?;
    mnt("sysfs", "/sys", "sysfs", MsFlags::empty(), "")?;
    let text = fs::read("/config.json").map_err(|e| format!("cannot read /config.json: {e}"))?;
    let config: VmConfig = serde_json::from_slice(&text)
        .map_err(|e| format!("/config.json is not a VM config: {e}"))?;
    let cmdline = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    for m in &config.modules {
        let path = format!("/modules/{m}");
        let f = fs::File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))?;
        let params = std::ffi::CString::new(module_params(&cmdline, m))
            .map_err(|e| format!("bad parameters for {m}: {e}"))?;
        match nix::kmod::finit_module(&f, &params, nix::kmod::ModuleInitFlags::empty()) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(format!("cannot load module {path}: {e}")),
        }
    }
    wait_for(Path::new(&config.root_device))?;
    stockade_sys::net::loopback_up().map_err(|e| format!("cannot bring loopback up: {e}"))?;
    if let Some(net) = &config.network {
        interface(net)?;
    }
    // The erofs root under an overlay whose upper layer is a tmpfs: the overlay gives
    // the mount points the agent needs (`/.stockade`) without touching the image.
    for d in ["/lower", "/rw", NEWROOT] {
        mkdir(d)?;
    }
    mnt(
        &config.root_device,
        "/lower",
        "erofs",
        MsFlags::MS_RDONLY,
        "",
    )?;
    mnt(
        "rw",
        "/rw",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("size={},mode=0755", config.overlay_bytes.max(1 << 20)),
    )?;
    mkdir("/rw/upper")?;
    mkdir("/rw/work")?;
    mnt(
        "overlay",
        NEWROOT,
        "overlay",
        MsFlags::empty(),
        "lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work",
    )?;
    for d in ["tmp", "proc", "sys", "dev", ".stockade"] {
        mkdir(&format!("{NEWROOT}/{d}"))?;
    }
    mnt(
        "tmpfs",
        &format!("{NEWROOT}/tmp"),
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("size={},mode=1777", config.tmp_bytes),
    )?;
    mnt(
        "tmpfs",
        &format!("{NEWROOT}{CONTAINER_DIR}"),
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "size=1m,mode=0700",
    )?;
    for d in ["dev", "proc", "sys"] {
        mount(
            Some(format!("/{d}").as_str()),
            format!("{NEWROOT}/{d}").as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|e| format!("cannot move /{d} into the root: {e}"))?;
    }
    // Shared host directories (virtiofs): their mount points made in the overlay,
    // read-only unless asked (the host's virtiofsd then serves a read-only view too).
    for share in &config.shares {
        let target = format!("{NEWROOT}{}", share.target);
        mkdir(&target)?;
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if !share.writable {
            flags |= MsFlags::MS_RDONLY;
        }
        mnt(&share.tag, &target, "virtiofs", flags, "")
            .map_err(|e| format!("cannot mount the shared directory at {}: {e}", share.target))?;
    }
    if let Some(net) = &config.network {
        network_files(net)?;
    }
    mkdir(&format!("{NEWROOT}/dev/shm"))?;
    mnt(
        "shm",
        &format!("{NEWROOT}/dev/shm"),
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "size=64m,mode=1777",
    )?;
    // Terminals for execs that ask for one: a devpts of the guest's own, whose
    // multiplexer is the /dev/ptmx they open (devtmpfs's node is an instance that
    // is never mounted).
    mkdir(&format!("{NEWROOT}/dev/pts"))?;
    mnt(
        "devpts",
        &format!("{NEWROOT}/dev/pts"),
        "devpts",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )?;
    mount(
        Some(format!("{NEWROOT}/dev/pts/ptmx").as_str()),
        format!("{NEWROOT}/dev/ptmx").as_str(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("cannot bind the terminals' /dev/ptmx: {e}"))?;
    if !config.writable {
        mount(
            None::<&str>,
            NEWROOT,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(|e| format!("cannot make the root read-only: {e}"))?;
    }
    // switch_root: the initramfs stays in memory (it holds this binary, which the
    // agent re-executes as /proc/self/exe for every exec).
    std::env::set_current_dir(NEWROOT).map_err(|e| format!("cannot enter {NEWROOT}: {e}"))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(|e| format!("cannot move {NEWROOT} to /: {e}"))?;
    nix::unistd::chroot(".").map_err(|e| format!("cannot chroot: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("cannot enter /: {e}"))?;
    let oom = cgroup(&config)?;
    read_only_kernel_files()?;
    let sock = Path::new(CONTAINER_DIR).join("agent.sock");
    let listener = UnixListener::bind(&sock)
        .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {}: {e}", sock.display()))?;
    Ok((listener, config, oom))
}

/// Configures the VM's network interface (the one virtio-net device, `eth0`) with
/// its static address and default route.
fn interface(net: &stockade_agent_proto::launch::GuestNetwork) -> Result<(), String> {
    const NIC: &str = "eth0";
    wait_for(&Path::new("/sys/class/net").join(NIC))?;
    stockade_sys::net::set_ipv4_address(NIC, net.address, net.prefix)
        .and_then(|()| stockade_sys::net::interface_up(NIC))
        .and_then(|()| stockade_sys::net::add_ipv4_default_route(net.gateway))
        .map_err(|e| format!("cannot configure {NIC}: {e}"))
}

/// Writes the files that go with the network (`/etc/resolv.conf` naming the VMM's
/// DNS forwarder, a policy's authority) into the new root, still writable here.
fn network_files(net: &stockade_agent_proto::launch::GuestNetwork) -> Result<(), String> {
    for (path, contents) in &net.files {
        let rel = Path::new(path);
        if !rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(format!(
                "network file {path:?} is not an absolute plain path"
            ));
        }
        let target = format!("{NEWROOT}{path}");
        if let Some(parent) = Path::new(&target).parent() {
            mkdir(&parent.display().to_string())?;
        }
        // A symlink (resolv.conf often is one) is replaced, never followed.
        let _ = fs::remove_file(&target);
        fs::write(&target, contents).map_err(|e| format!("cannot write {path}: {e}"))?;
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644))
            .map_err(|e| format!("cannot chmod {path}: {e}"))?;
    }
    Ok(())
}

/// The guest kernel's tunables are read-only to everything in the sandbox, as on the
/// native provider: `/proc/sys`, `/proc/sysrq-trigger` and the rest of `/proc`'s
/// writable knobs become read-only binds, and `/sys` is remounted read-only (its
/// cgroup2 mount, set up before, is a mount of its own and stays writable to root).
fn read_only_kernel_files() -> Result<(), String> {
    let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for p in [
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/irq",
        "/proc/bus",
        "/proc/fs",
    ] {
        if !Path::new(p).exists() {
            continue;
        }
        mount(Some(p), p, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .map_err(|e| format!("cannot bind {p}: {e}"))?;
        mount(None::<&str>, p, None::<&str>, ro, None::<&str>)
            .map_err(|e| format!("cannot make {p} read-only: {e}"))?;
    }
    mount(
        None::<&str>,
        "/sys",
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make /sys read-only: {e}"))
}

/// The parameters the kernel command line gives module file `file` (`NAME.KEY=VALUE`,
/// e.g. the `virtio_mmio.device=...` QEMU appends): the kernel applies those only to
/// built-in code, and for modules it is modprobe's job, which is us here.
fn module_params(cmdline: &str, file: &str) -> String {
    let name = file.trim_end_matches(".ko").replace('-', "_");
    let prefix = format!("{name}.");
    cmdline
        .split_whitespace()
        .filter_map(|t| t.strip_prefix(&prefix))
        .collect::<Vec<_>>()
        .join(" ")
}

fn wait_for(dev: &Path) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(20);
    while !dev.exists() {
        if Instant::now() > until {
            let devices: Vec<String> = fs::read_dir("/sys/bus/virtio/devices")
                .map(|d| {
                    d.flatten()
                        .map(|e| {
                            let id =
                                fs::read_to_string(e.path().join("device")).unwrap_or_default();
                            format!("{} (device {})", e.file_name().to_string_lossy(), id.trim())
                        })
                        .collect()
                })
                .unwrap_or_default();
            return Err(format!(
                "{} did not appear; virtio devices: [{}]; kernel command line: {}",
                dev.display(),
                devices.join(", "),
                fs::read_to_string("/proc/cmdline")
                    .unwrap_or_default()
                    .trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Puts PID 1 (and so every exec) in a cgroup capped at the spec's memory and pids.
fn cgroup(config: &VmConfig) -> Result<Option<OomCounter>, String> {
    mnt(
        "cgroup2",
        "/sys/fs/cgroup",
        "cgroup2",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "",
    )?;
    let write = |file: &str, value: &str| {
        fs::write(file, value).map_err(|e| format!("cannot set {file} = {value:?}: {e}"))
    };
    write("/sys/fs/cgroup/cgroup.subtree_control", "+memory +pids")?;
    mkdir(CGROUP)?;
    write(
        &format!("{CGROUP}/memory.max"),
        &config.memory_bytes.to_string(),
    )?;
    write(&format!("{CGROUP}/memory.swap.max"), "0").ok();
    write(&format!("{CGROUP}/pids.max"), &config.pids.to_string())?;
    if config.exec_pids == 0 {
        write(&format!("{CGROUP}/cgroup.procs"), "1")?;
    } else {
        // PID 1 in a leaf of its own (a cgroup with children holds no processes), and
        // the execs' shims in theirs, capped at the spec's pids: the agent's threads
        // never eat the code's share, nor the code the agent's.
        let agent = format!("{CGROUP}/agent");
        let execs = format!("{CGROUP}/execs");
        mkdir(&agent)?;
        write(&format!("{agent}/cgroup.procs"), "1")?;
        write(&format!("{CGROUP}/cgroup.subtree_control"), "+pids")?;
        mkdir(&execs)?;
        write(&format!("{execs}/pids.max"), &config.exec_pids.to_string())?;
    }
    Ok(OomCounter::open(&Path::new(CGROUP).join("memory.events"), "oom_kill").ok())
}

/// The virtio-serial port named `name` (`/dev/vportNpM`).
fn find_port(name: &str) -> Result<String, String> {
    let dir = "/sys/class/virtio-ports";
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(entries) = fs::read_dir(dir) {
            for e in entries.flatten() {
                let n = fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if n.trim() == name {
                    return Ok(format!("/dev/{}", e.file_name().to_string_lossy()));
                }
            }
        }
        if Instant::now() > until {
            return Err(format!("no virtio-serial port is named {name}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

type Streams = Arc<Mutex<HashMap<u32, UnixStream>>>;

/// The guest half of the multiplexer: each stream the host opens becomes a
/// connection to the agent's socket. Runs for the VM's life.
fn guest_mux(port_name: &str) {
    // SIGCHLD is the server's reaper thread's (see `container::lifetime_watchdog`).
    let mut chld = nix::sys::signal::SigSet::empty();
    chld.add(nix::sys::signal::Signal::SIGCHLD);
    let _ = chld.thread_block();
    let path = match find_port(port_name) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stockade-agent vm-init: {e}");
            return;
        }
    };
    loop {
        if let Err(e) = serve_port(&path) {
            eprintln!("stockade-agent vm-init: {path}: {e}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serve_port(path: &str) -> Result<(), String> {
    let port = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let mut reader = port.try_clone().map_err(|e| e.to_string())?;
    let writer = Arc::new(Mutex::new(port));
    let streams: Streams = Arc::default();
    loop {
        let Some(f) = mux::read_frame(&mut reader).map_err(|e| e.to_string())? else {
            // The host side is not connected; wait for it.
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        match f.kind {
            Kind::Reset => {
                for (_, s) in streams.lock().map_err(|e| e.to_string())?.drain() {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                if let Ok(id) = serde_json::from_slice::<Identity>(&f.payload) {
                    take_identity(&id);
                }
                // The host waits for this before it opens streams.
                let mut w = writer.lock().map_err(|e| e.to_string())?;
                mux::write_frame(&mut *w, 0, Kind::Reset, &[]).map_err(|e| e.to_string())?;
            }
            Kind::Open => {
                let sock = Path::new(CONTAINER_DIR).join("agent.sock");
                match UnixStream::connect(&sock) {
                    Ok(s) => {
                        let read_half = s.try_clone().map_err(|e| e.to_string())?;
                        streams
                            .lock()
                            .map_err(|e| e.to_string())?
                            .insert(f.stream, s);
                        let writer = writer.clone();
                        let id = f.stream;
                        std::thread::spawn(move || pump_to_host(id, read_half, &writer));
                    }
                    Err(_) => {
                        let mut w = writer.lock().map_err(|e| e.to_string())?;
                        let _ = mux::write_frame(&mut *w, f.stream, Kind::Close, &[]);
                    }
                }
            }
            Kind::Data => {
                let mut map = streams.lock().map_err(|e| e.to_string())?;
                if let Some(s) = map.get_mut(&f.stream)
                    && s.write_all(&f.payload).is_err()
                {
                    map.remove(&f.stream);
                }
            }
            Kind::Eof => {
                if let Some(s) = streams.lock().map_err(|e| e.to_string())?.get(&f.stream) {
                    let _ = s.shutdown(std::net::Shutdown::Write);
                }
            }
            Kind::Close => {
                if let Some(s) = streams.lock().map_err(|e| e.to_string())?.remove(&f.stream) {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
        }
    }
}

/// Copies what the agent says on one stream to the host, then tells it the end.
fn pump_to_host(id: u32, mut from: UnixStream, writer: &Mutex<fs::File>) {
    let mut chld = nix::sys::signal::SigSet::empty();
    chld.add(nix::sys::signal::Signal::SIGCHLD);
    let _ = chld.thread_block();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match std::io::Read::read(&mut from, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Ok(mut w) = writer.lock() else { return };
        if mux::write_frame(&mut *w, id, Kind::Data, &buf[..n]).is_err() {
            return;
        }
    }
    if let Ok(mut w) = writer.lock() {
        let _ = mux::write_frame(&mut *w, id, Kind::Eof, &[]);
    }
}

/// A new host session's identity: the hostname, and fresh bytes for the random pool
/// (a fork's copies would otherwise continue from the same pool state).
fn take_identity(id: &Identity) {
    if id.unix_ms > 0 {
        let ts = nix::sys::time::TimeSpec::new(
            (id.unix_ms / 1000) as i64,
            ((id.unix_ms % 1000) * 1_000_000) as i64,
        );
        let _ = nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, ts);
    }
    if !id.hostname.is_empty() {
        let _ = nix::unistd::sethostname(&id.hostname);
    }
    if !id.seed.is_empty()
        && let Ok(mut f) = fs::OpenOptions::new().write(true).open("/dev/urandom")
    {
        let _ = f.write_all(&id.seed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_parameters_come_from_the_kernel_command_line() {
        let cmdline = "console=ttyS0 virtio_mmio.device=512@0xfeb00000:12 virtio_mmio.device=512@0xfeb00200:13 quiet";
        assert_eq!(
            module_params(cmdline, "virtio_mmio.ko"),
            "device=512@0xfeb00000:12 device=512@0xfeb00200:13"
        );
        assert_eq!(module_params(cmdline, "virtio_blk.ko"), "");
    }
}
