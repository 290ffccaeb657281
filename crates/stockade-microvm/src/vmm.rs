//! The virtual machine monitor behind the provider, as a small interface ([`Vmm`]):
//! the command line that boots (or restores) one VM from a [`VmPlan`], and saving a
//! running VM's memory and device state to a file. [`QemuMicrovm`] is the one
//! backend: QEMU's `microvm` machine (Debian's `qemu-system-x86`), under KVM when
//! [`probe_kvm`] boots a guest with it and under TCG (software emulation) otherwise.
//! A Firecracker or Cloud Hypervisor backend would be another [`Vmm`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::os::unix::fs::OpenOptionsExt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use stockade_agent_proto::launch::VMM_FIRST_FD;
use stockade_core::{Error, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// How guest code runs on the host CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualisation (`/dev/kvm`).
    Kvm,
    /// QEMU's software emulation: slower, needs nothing of the host.
    Tcg,
}

impl Accel {
    /// `kvm` or `tcg`.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// One VM, as the VMM needs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmPlan {
    pub accel: Accel,
    /// Guest RAM.
    pub memory_mib: u64,
    pub vcpus: u32,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The kernel command line.
    pub cmdline: String,
    /// The read-only root image (erofs), the guest's first block device.
    pub root_image: PathBuf,
    /// The agent's serial port: a unix socket the VMM listens on.
    pub serial_socket: PathBuf,
    /// The VMM's control socket (QMP for QEMU).
    pub control_socket: PathBuf,
    /// The guest console's log.
    pub console_log: PathBuf,
    /// Restore from this saved state instead of booting.
    pub incoming: Option<PathBuf>,
    /// Host directories shared into the guest (virtiofs), in mount order.
    #[serde(default)]
    pub shares: Vec<Share>,
    /// One network device on the VMM's user-mode network ([`USER_NETDEV`]); the VMM
    /// then runs in the sandbox's filtered network namespace. Else no device at all.
    #[serde(default)]
    pub network: bool,
}

/// The guest's network backend: QEMU's user-mode network (libslirp) in the VMM's
/// own process, which turns each guest connection into a socket of the VMM, made in
/// the network namespace the VMM runs in (the sandbox's, behind its firewall), and
/// forwards the guest's DNS to the resolver that namespace's `/etc/resolv.conf`
/// names. `restrict=off` (the default, named here) is what lets connections out at
/// all; IPv4 only, as the NAT helper beyond it (slirp4netns) is; no port forwards,
/// TFTP or SMB are configured.
pub const USER_NETDEV: &str = "user,id=net0,ipv6=off,restrict=off";

/// A host directory shared into the guest with virtiofs: a `virtiofsd` (started by
/// the VM's supervisor) serves it on `socket`, the guest mounts it by `tag`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// The virtiofs tag the guest mounts (`ws0`, `ws1`, ...).
    pub tag: String,
    /// The vhost-user socket its virtiofsd listens on.
    pub socket: PathBuf,
}

/// A virtual machine monitor.
#[async_trait]
pub trait Vmm: Send + Sync {
    /// Name shown in `inspect` (`qemu-microvm`).
    fn name(&self) -> &'static str;

    /// The command line (program first) that runs `plan`. The VMM runs as an
    /// unprivileged uid of its own: what it cannot open by path it gets as the file
    /// descriptors [`Vmm::files`] lists.
    fn command(&self, plan: &VmPlan) -> Vec<String>;

    /// Files the command line expects open (read-only) at descriptors
    /// `VMM_FIRST_FD`, `VMM_FIRST_FD + 1`, ... (opened by the VM host as root).
    fn files(&self, plan: &VmPlan) -> Vec<PathBuf>;

    /// Stops the VM behind `control_socket` and writes its memory and device state to
    /// `to` (created by this process and handed to the VMM as a descriptor); the VMM
    /// process then exits.
    async fn save(&self, control_socket: &Path, to: &Path) -> Result<()>;

    /// Starts the guest of a VMM restoring saved state (`VmPlan::incoming`) once the
    /// state is loaded: a VM saved stopped stays stopped after the restore.
    async fn run_restored(&self, control_socket: &Path, timeout: Duration) -> Result<()>;
}

/// Kernel arguments the machine needs under `accel`: under TCG, the TSC's rate
/// (the host's, which TCG's TSC follows), since the guest has nothing to calibrate
/// it against.
pub fn kernel_args(accel: Accel) -> String {
    match accel {
        Accel::Kvm => String::new(),
        Accel::Tcg => format!("tsc_early_khz={} tsc=reliable", host_tsc_khz()),
    }
}

/// The host CPU's clock in kHz (`/proc/cpuinfo`), 2 GHz when unknown.
fn host_tsc_khz() -> u64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map(|mhz| (mhz * 1000.0) as u64)
        .filter(|k| *k > 0)
        .unwrap_or(2_000_000)
}

/// The guest CPU under TCG: the x86-64-v2 baseline.
pub const TCG_CPU: &str = "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16";

/// QEMU's own seccomp filter (`-sandbox`): the default deny list (`on`) plus every
/// optional group: obsolete system calls, changing ids or capabilities
/// (`elevateprivileges`), `fork`/`execve` (`spawn`: the VMM starts no helper, its
/// migration streams are descriptors, not `exec:` commands) and scheduler or
/// resource-limit changes (`resourcecontrol`). A denied call kills QEMU.
pub const QEMU_SANDBOX: &str =
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// How the VMM is confined, as `inspect` and `doctor` say it.
pub const CONFINEMENT: &str = "VMM confinement: QEMU runs as an unprivileged host uid and gid of \
its own (the first id of a range leased from the id pool for each run), no supplementary \
groups, no capabilities in any set (bounding included), no_new_privs; QEMU's seccomp filter \
(-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny); it \
opens only its own directory (vmm/, 0700), its kernel and initramfs (0640 to its gid) and \
what any user may read: the root image and saved state come as descriptors";

/// The QEMU fd set the root image is passed in (`/dev/fdset/1`).
const ROOT_FDSET: u32 = 1;

/// The name of the agent's virtio-serial port in the guest.
pub const PORT_NAME: &str = "stockade.agent";

/// QEMU's `microvm` machine.
#[derive(Clone, Debug)]
pub struct QemuMicrovm {
    /// The QEMU binary (default `qemu-system-x86_64` on `PATH`).
    pub binary: PathBuf,
}

impl Default for QemuMicrovm {
    fn default() -> Self {
        QemuMicrovm {
            binary: PathBuf::from("qemu-system-x86_64"),
        }
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[async_trait]
impl Vmm for QemuMicrovm {
    fn name(&self) -> &'static str {
        "qemu-microvm"
    }

    fn command(&self, plan: &VmPlan) -> Vec<String> {
        // ACPI describes the virtio-mmio devices (Debian's kernel cannot take them on
        // its command line). Under TCG the guest has no kvmclock and ACPI's reduced
        // hardware has no PIT or HPET to calibrate the TSC against: its rate is given
        // on the command line ([`kernel_args`]).
        // vhost-user devices (virtiofs) need the guest's RAM shared with their daemon.
        let machine = if plan.shares.is_empty() {
            "microvm,isa-serial=on"
        } else {
            "microvm,isa-serial=on,memory-backend=mem"
        };
        let mut v: Vec<String> = vec![
            path(&self.binary),
            "-M".into(),
            machine.into(),
            "-accel".into(),
            match plan.accel {
                Accel::Kvm => "kvm".into(),
                Accel::Tcg => format!("tcg,tb-size={}", crate::plan::TCG_TB_MIB),
            },
            "-cpu".into(),
            match plan.accel {
                Accel::Kvm => "host".into(),
                // x86-64-v2, not `max`: QEMU 7.2's TCG emulation of AVX/AVX2
                // (new in 7.2) crashes guest programs whose libc picks those paths.
                Accel::Tcg => TCG_CPU.into(),
            },
            "-m".into(),
            format!("{}M", plan.memory_mib),
            "-smp".into(),
            plan.vcpus.to_string(),
            "-nodefaults".into(),
            "-no-user-config".into(),
            "-nographic".into(),
            "-no-reboot".into(),
            "-serial".into(),
            format!("file:{}", path(&plan.console_log)),
            "-kernel".into(),
            path(&plan.kernel),
            "-initrd".into(),
            path(&plan.initrd),
            "-append".into(),
            plan.cmdline.clone(),
            "-sandbox".into(),
            QEMU_SANDBOX.into(),
            // The root image by descriptor: it may sit in a root-only directory (a
            // named snapshot's), which QEMU's uid cannot enter.
            "-add-fd".into(),
            format!("fd={VMM_FIRST_FD},set={ROOT_FDSET},opaque=root"),
            "-drive".into(),
            format!("id=root,file=/dev/fdset/{ROOT_FDSET},format=raw,if=none,readonly=on"),
            "-device".into(),
            "virtio-blk-device,drive=root".into(),
            "-device".into(),
            "virtio-serial-device".into(),
            "-chardev".into(),
            format!(
                "socket,id=agent,path={},server=on,wait=off",
                path(&plan.serial_socket)
            ),
            "-device".into(),
            format!("virtserialport,chardev=agent,name={PORT_NAME}"),
            "-object".into(),
            "rng-random,id=rng,filename=/dev/urandom".into(),
            "-device".into(),
            "virtio-rng-device,rng=rng".into(),
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", path(&plan.control_socket)),
        ];
        if plan.network {
            v.extend([
                "-netdev".into(),
                USER_NETDEV.into(),
                "-device".into(),
                "virtio-net-device,netdev=net0".into(),
            ]);
        } else {
            v.extend(["-nic".into(), "none".into()]);
        }
        if !plan.shares.is_empty() {
            // libvhost-user (virtiofsd) serves modern virtio only; microvm's
            // virtio-mmio transport is legacy unless told otherwise.
            v.push("-global".into());
            v.push("virtio-mmio.force-legacy=false".into());
            v.push("-object".into());
            v.push(format!(
                "memory-backend-memfd,id=mem,size={}M,share=on",
                plan.memory_mib
            ));
        }
        for (i, share) in plan.shares.iter().enumerate() {
            v.push("-chardev".into());
            v.push(format!("socket,id=fs{i},path={}", path(&share.socket)));
            v.push("-device".into());
            v.push(format!(
                "vhost-user-fs-device,chardev=fs{i},tag={}",
                share.tag
            ));
        }
        if plan.incoming.is_some() {
            // The saved state by descriptor, after the root image's (see `files`):
            // no `exec:` (QEMU may not spawn), and the file may be another
            // sandbox's or a named snapshot's, which QEMU's uid cannot open.
            v.push("-incoming".into());
            v.push(format!("fd:{}", VMM_FIRST_FD + 1));
        }
        v
    }

    fn files(&self, plan: &VmPlan) -> Vec<PathBuf> {
        let mut f = vec![plan.root_image.clone()];
        f.extend(plan.incoming.clone());
        f
    }

    async fn save(&self, control_socket: &Path, to: &Path) -> Result<()> {
        let mut qmp = Qmp::connect(control_socket).await?;
        qmp.call("stop", serde_json::json!({})).await?;
        // The default cap (32 MiB/s on QEMU 7.2) is for networks, not a local file.
        qmp.call(
            "migrate-set-parameters",
            serde_json::json!({ "max-bandwidth": 8u64 << 30 }),
        )
        .await?;
        // QEMU 7.2 has no `file:` migration target, and `exec:` would need QEMU to
        // spawn a shell (its seccomp filter forbids that) that could open `to` (its
        // uid cannot): the file goes to QEMU as a descriptor (`getfd`), opened here.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(to)
            .map_err(|e| Error::io(format!("cannot create {}", to.display()), e))?;
        qmp.send_fd("getfd", serde_json::json!({ "fdname": "vmstate" }), &file)
            .await?;
        drop(file);
        qmp.call("migrate", serde_json::json!({ "uri": "fd:vmstate" }))
            .await?;
        let started = Instant::now();
        loop {
            let r = qmp.call("query-migrate", serde_json::json!({})).await?;
            match r.get("status").and_then(|s| s.as_str()) {
                Some("completed") => break,
                Some("failed" | "cancelled") => {
                    return Err(Error::Internal(format!(
                        "saving the VM to {} failed: {}",
                        to.display(),
                        r.get("error-desc").and_then(|e| e.as_str()).unwrap_or("?")
                    )));
                }
                _ => {}
            }
            if started.elapsed() > Duration::from_secs(300) {
                return Err(Error::Timeout {
                    operation: format!("saving the VM to {}", to.display()),
                    after_ms: 300_000,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The VMM exits: `quit` may close the socket before answering.
        let _ = qmp.call("quit", serde_json::json!({})).await;
        Ok(())
    }

    async fn run_restored(&self, control_socket: &Path, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        let mut qmp = loop {
            match Qmp::connect(control_socket).await {
                Ok(q) => break q,
                Err(e) if started.elapsed() > timeout => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        loop {
            let r = qmp.call("query-status", serde_json::json!({})).await?;
            match r.get("status").and_then(|s| s.as_str()) {
                Some("running") => return Ok(()),
                Some("inmigrate") => {}
                _ => {
                    qmp.call("cont", serde_json::json!({})).await?;
                    return Ok(());
                }
            }
            if started.elapsed() > timeout {
                return Err(Error::Timeout {
                    operation: format!("restoring the VM behind {}", control_socket.display()),
                    after_ms: timeout.as_millis() as u64,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A QMP connection (JSON lines over the control socket).
struct Qmp {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    socket: PathBuf,
}

impl Qmp {
    async fn connect(socket: &Path) -> Result<Qmp> {
        let s = UnixStream::connect(socket)
            .await
            .map_err(|e| Error::io(format!("cannot connect to {}", socket.display()), e))?;
        let (r, w) = s.into_split();
        let mut qmp = Qmp {
            reader: BufReader::new(r),
            writer: w,
            socket: socket.to_path_buf(),
        };
        qmp.read().await?; // the greeting
        qmp.call("qmp_capabilities", serde_json::json!({})).await?;
        Ok(qmp)
    }

    async fn read(&mut self) -> Result<serde_json::Value> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .await
            .map_err(|e| Error::io(format!("cannot read {}", self.socket.display()), e))?;
        if n == 0 {
            return Err(Error::Internal(format!(
                "{} closed the connection",
                self.socket.display()
            )));
        }
        serde_json::from_str(&line)
            .map_err(|e| Error::Internal(format!("{} sent {line:?}: {e}", self.socket.display())))
    }

    /// Runs one command; its `return` value.
    async fn call(&mut self, cmd: &str, args: serde_json::Value) -> Result<serde_json::Value> {
        let msg = Self::encode(cmd, args)?;
        self.writer
            .write_all(&msg)
            .await
            .map_err(|e| Error::io(format!("cannot write to {}", self.socket.display()), e))?;
        self.answer(cmd).await
    }

    fn encode(cmd: &str, args: serde_json::Value) -> Result<Vec<u8>> {
        let mut msg = serde_json::to_vec(&serde_json::json!({ "execute": cmd, "arguments": args }))
            .map_err(|e| Error::Internal(format!("cannot encode QMP {cmd}: {e}")))?;
        msg.push(b'\n');
        Ok(msg)
    }

    /// `cmd` with `fd` attached (SCM_RIGHTS), as QMP's `getfd` takes a descriptor.
    async fn send_fd(
        &mut self,
        cmd: &str,
        args: serde_json::Value,
        fd: &impl std::os::fd::AsRawFd,
    ) -> Result<serde_json::Value> {
        use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
        use std::os::fd::AsRawFd;
        let msg = Self::encode(cmd, args)?;
        let fds = [fd.as_raw_fd()];
        let stream: &UnixStream = self.writer.as_ref();
        loop {
            stream
                .writable()
                .await
                .map_err(|e| Error::io(format!("cannot write to {}", self.socket.display()), e))?;
            let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                sendmsg::<()>(
                    stream.as_raw_fd(),
                    &[std::io::IoSlice::new(&msg)],
                    &[ControlMessage::ScmRights(&fds)],
                    MsgFlags::empty(),
                    None,
                )
                .map_err(std::io::Error::from)
            });
            match sent {
                // One short JSON line: all of it or nothing.
                Ok(n) if n == msg.len() => break,
                Ok(n) => {
                    return Err(Error::Internal(format!(
                        "QMP {cmd}: only {n} of {} bytes sent to {}",
                        msg.len(),
                        self.socket.display()
                    )));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    return Err(Error::io(
                        format!("cannot send a descriptor to {}", self.socket.display()),
                        e,
                    ));
                }
            }
        }
        self.answer(cmd).await
    }

    async fn answer(&mut self, cmd: &str) -> Result<serde_json::Value> {
        loop {
            let v = self.read().await?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(Error::Internal(format!("QMP {cmd} failed: {e}")));
            }
            // An event; keep reading.
        }
    }
}

/// Whether KVM runs a guest here: `/dev/kvm` can be opened and a guest kernel boots
/// under it to its first userspace step within a few seconds (a host whose nested
/// virtualisation stock guests cannot use fails this). The reason when not.
pub async fn probe_kvm(
    qemu: &Path,
    kernel: &Path,
    scratch: &Path,
) -> std::result::Result<(), String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Err(format!("/dev/kvm cannot be opened ({e})"));
    }
    let log = scratch.join("kvm-probe.log");
    let _ = std::fs::remove_file(&log);
    let mut child = tokio::process::Command::new(qemu)
        .args([
            "-M",
            "microvm,isa-serial=on",
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-m",
            "256M",
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-no-reboot",
            "-serial",
        ])
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(kernel)
        .args([
            "-append",
            "console=ttyS0 panic=-1 rdinit=/stockade-kvm-probe",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", qemu.display()))?;
    let waited = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let console = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    // The kernel looked for our (missing) init: it booted.
    let booted = console.contains("stockade-kvm-probe") || console.contains("Kernel panic");
    match waited {
        _ if booted => Ok(()),
        Ok(Ok(status)) => {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut e, &mut err).await;
            }
            Err(format!(
                "a guest under KVM did not boot ({status}: {})",
                err.trim()
            ))
        }
        Ok(Err(e)) => Err(format!("cannot wait for the KVM probe: {e}")),
        Err(_) => {
            let _ = child.kill().await;
            Err("a guest under KVM did not boot within 10 s".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(accel: Accel) -> VmPlan {
        VmPlan {
            accel,
            memory_mib: 640,
            vcpus: 1,
            kernel: "/boot/vmlinuz".into(),
            initrd: "/s/initrd".into(),
            cmdline: "console=ttyS0".into(),
            root_image: "/c/root.erofs".into(),
            serial_socket: "/s/serial.sock".into(),
            control_socket: "/s/qmp.sock".into(),
            console_log: "/s/console.log".into(),
            incoming: None,
            shares: Vec::new(),
            network: false,
        }
    }

    #[test]
    fn qemu_command_has_no_network_a_read_only_root_and_the_timers_tcg_needs() {
        let q = QemuMicrovm::default();
        let tcg = q.command(&plan(Accel::Tcg)).join(" ");
        assert!(
            tcg.contains("-M microvm,isa-serial=on -accel tcg,tb-size=64"),
            "{tcg}"
        );
        assert!(tcg.contains(&format!("-cpu {TCG_CPU} -m")), "{tcg}");
        assert!(kernel_args(Accel::Tcg).contains("tsc_early_khz="));
        assert_eq!(kernel_args(Accel::Kvm), "");
        assert!(tcg.contains("-nic none"), "{tcg}");
        assert!(tcg.contains("-nodefaults"), "{tcg}");
        assert!(tcg.contains("format=raw,if=none,readonly=on"), "{tcg}");
        assert!(tcg.contains("name=stockade.agent"), "{tcg}");
        assert!(!tcg.contains("-incoming"), "{tcg}");
        let kvm = q.command(&plan(Accel::Kvm)).join(" ");
        assert!(kvm.contains("-accel kvm -cpu host"), "{kvm}");
        let mut p = plan(Accel::Tcg);
        p.incoming = Some("/s/mem.bin".into());
        let restore = q.command(&p).join(" ");
        // The state by descriptor, after the root image's: QEMU may not spawn `cat`,
        // nor open either file by path.
        assert!(restore.ends_with("-incoming fd:4"), "{restore}");
        assert_eq!(
            q.files(&p),
            vec![p.root_image.clone(), PathBuf::from("/s/mem.bin")]
        );
        assert!(
            restore.contains(&format!("-sandbox {QEMU_SANDBOX}"))
                && restore.contains("-add-fd fd=3,set=1,opaque=root")
                && restore.contains("file=/dev/fdset/1,")
                && !restore.contains(&p.root_image.display().to_string()),
            "{restore}"
        );
        assert!(!tcg.contains("-netdev"), "{tcg}");
    }

    #[test]
    fn a_vm_with_network_has_one_user_mode_device_and_no_forwards() {
        let mut p = plan(Accel::Tcg);
        p.network = true;
        let cmd = QemuMicrovm::default().command(&p).join(" ");
        assert!(
            cmd.contains(
                "-netdev user,id=net0,ipv6=off,restrict=off -device virtio-net-device,netdev=net0"
            ),
            "{cmd}"
        );
        assert!(!cmd.contains("-nic none"), "{cmd}");
        for never in ["hostfwd", "guestfwd", "smb", "tftp", "tap"] {
            assert!(!cmd.contains(never), "{never}: {cmd}");
        }
    }
}
