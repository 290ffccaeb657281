//! The microVM provider: each sandbox is a QEMU `microvm` guest whose PID 1 is the
//! Stockade agent, so the code runs behind a guest kernel instead of the host's.
//!
//! `create` plans the VM from the spec ([`plan`]), makes or reuses the guest's boot
//! assets ([`assets`]: Debian's cloud kernel, an initramfs with the static agent as
//! `/init`, an erofs image of the host-rootfs view), and starts `stockade-agent
//! vm-host`, a detached supervisor that runs the VMM ([`vmm`]) in a host cgroup,
//! multiplexes agent connections over the VM's one virtio-serial port, and kills the
//! VM when its owner dies or its lifetime passes. Execs, files and health then go
//! through the agent host exactly as for native and docker sandboxes
//! ([`MicrovmLauncher`] is this provider's [`Launcher`]).
//!
//! Snapshots: [`Launcher::pause`] saves the VM's memory and device state to a file
//! in the sandbox's directory (QEMU migration) and ends the VMM; `resume` verifies
//! the file's SHA-256 and restores it; `fork` restores one snapshot into N new
//! sandboxes, each told its own hostname, clock and random seed on connect.
//!
//! Network (`network` egress or a policy): the VM gets one virtio-net device on
//! QEMU's user-mode network, and the VMM runs in a network namespace of its own that
//! the supervisor serves exactly as the native monitor serves a sandbox's (the same
//! plan: `stockade_linux::network_setup`), so each connection the guest makes is a
//! socket of the VMM behind the native firewall, resolver and proxy.

pub mod assets;
mod facets;
mod host;
pub mod plan;
mod snapshots;
mod start;
mod state;
pub mod vmm;

pub use host::VMM_DIR;
use host::*;

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use stockade_agent_host::{AgentProvider, Launcher, UnixSocket};
use stockade_agent_proto::launch::VmHostConfig;
use stockade_agent_proto::now_ms;
use stockade_core::host::check_sandbox_id;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, Error, GcReport, Result, RunState,
    SandboxInfo, SnapshotInfo, Wall, WallKind,
};
use tokio::sync::OnceCell;

use crate::vmm::{Accel, QemuMicrovm, VmPlan, Vmm};

/// The microVM provider: the microVM launcher with the agent host.
pub type MicrovmProvider = AgentProvider<MicrovmLauncher>;

/// Where named snapshots live below Stockade's home.
pub const SNAPSHOTS_DIR: &str = "snapshots/microvm";
/// The key that seals named snapshots, under `$STOCKADE_HOME`.
pub const SNAPSHOT_KEY: &str = "keys/snapshots.key";

/// Default cache of boot assets (kernel initramfs, root images, the KVM probe).
pub const DEFAULT_CACHE: &str = "/var/cache/stockade/microvm";

/// How long a VM may take from start to its agent answering (TCG on a busy host).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

/// The directory of a sandbox's network monitor, below its own.
const NET_DIR: &str = "net";

/// What a sandbox's directory records about it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    info: SandboxInfo,
    plan: VmPlan,
    host: VmHostConfig,
}

/// A saved VM: its state file's digest and size.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    sha256: String,
    bytes: u64,
    saved_at_ms: u64,
}

/// What new sandboxes restore from: a verified state file and the VM it was saved
/// from.
struct Restore {
    mem: PathBuf,
    /// The saved VM's plan (its sockets and logs are replaced per copy).
    plan: VmPlan,
    /// A kernel to copy into each new sandbox's directory (a named snapshot's own
    /// copy); `None`: the plan's.
    kernel: Option<PathBuf>,
    spec: serde_json::Value,
    applied: Vec<Wall>,
    lifetime_ms: u64,
    /// Whether the saved VM ran in host cgroups (the copies do too).
    cgroups: bool,
}

/// Launches microVM sandboxes.
#[derive(Clone)]
pub struct MicrovmLauncher {
    state_root: PathBuf,
    cache: PathBuf,
    /// Where named snapshots are kept.
    snapshots: PathBuf,
    /// The key that seals them (`<home>/keys/snapshots.key`).
    snapshot_key: PathBuf,
    vmm: Arc<dyn Vmm>,
    qemu: PathBuf,
    accel: Arc<OnceCell<(Accel, String)>>,
    /// The image store `--image` reads (default: `$STOCKADE_HOME/images`).
    image_store: Option<PathBuf>,
}

impl std::fmt::Debug for MicrovmLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicrovmLauncher")
            .field("state_root", &self.state_root)
            .field("vmm", &self.vmm.name())
            .finish()
    }
}

impl Default for MicrovmLauncher {
    fn default() -> Self {
        MicrovmLauncher::new()
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        kind: "sandbox",
        id: id.to_string(),
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(what, e)
}

fn need_root() -> Result<()> {
    if stockade_core::host::is_root() {
        Ok(())
    } else {
        Err(Error::Unavailable {
            what: "the microvm provider".into(),
            reason: "it needs root (host cgroups around the VMM, a private mount namespace to build the root image)".into(),
            fix: "run stockade as root, or use the native provider".into(),
        })
    }
}

/// The spec as records, `inspect` and snapshots keep it: a policy's credential
/// values redacted (they go to the VM's network monitor only).
fn shown_spec(spec: &stockade_core::ValidatedSpec) -> serde_json::Value {
    let mut v = serde_json::to_value(spec.spec()).unwrap_or_default();
    if v.is_object() {
        v["network"] = serde_json::to_value(spec.network.redacted()).unwrap_or_default();
    }
    v
}

/// Why a VM whose policy has credentials cannot be restored.
fn credentials_fixed(id: &str) -> Error {
    Error::Unavailable {
        what: format!("restoring sandbox {id}, whose egress policy has credentials"),
        reason: "its credentials and certificate authority key were never written down, so a \
                 restored VM's network monitor cannot have them"
            .into(),
        fix: "create a new sandbox".into(),
    }
}

/// SHA-256 of a file, as hex, and its size.
fn sha256_file(path: &Path) -> Result<(String, u64)> {
    sha256_copy(path, None)
}

/// SHA-256 of a file, as hex, and its size, written to `to` as it is read when given
/// (one pass: what was written is what was hashed).
fn sha256_copy(path: &Path, mut to: Option<&mut std::fs::File>) -> Result<(String, u64)> {
    use std::io::Write;
    let mut f = std::fs::File::open(path).map_err(io(format!("cannot open {}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("cannot read {}", path.display())))?;
        if n == 0 {
            break;
        }
        n_total += n as u64;
        h.update(&buf[..n]);
        if let Some(out) = to.as_mut() {
            out.write_all(&buf[..n])
                .map_err(io(format!("cannot copy {}", path.display())))?;
        }
    }
    if let Some(out) = to {
        out.sync_all()
            .map_err(io(format!("cannot flush the copy of {}", path.display())))?;
    }
    Ok((
        h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        n_total,
    ))
}

/// Whether the process `pid` that started at `ticks` still runs. A zombie does not:
/// a killed VM host is reparented to the host's init, which may reap it late.
/// A sandbox held by a make, pause or resume in progress ([`MicrovmLauncher::hold`]).
struct Hold(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

fn alive(pid: u32, ticks: u64) -> bool {
    stockade_sys::process::is_same_process(pid, ticks)
}

impl MicrovmLauncher {
    /// A launcher keeping sandboxes under the runtime directory `stockade-microvm`
    /// (`/run/stockade-microvm` for root) and boot assets under [`DEFAULT_CACHE`]
    /// (`$STOCKADE_MICROVM_CACHE` overrides), named snapshots under
    /// `$STOCKADE_HOME/snapshots/microvm`, running `qemu-system-x86_64`.
    pub fn new() -> MicrovmLauncher {
        let cache = std::env::var_os("STOCKADE_MICROVM_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE));
        MicrovmLauncher {
            state_root: stockade_core::host::runtime_dir("stockade-microvm"),
            cache,
            snapshots: stockade_core::host::stockade_home().join(SNAPSHOTS_DIR),
            snapshot_key: stockade_core::host::stockade_home().join(SNAPSHOT_KEY),
            vmm: Arc::new(QemuMicrovm::default()),
            qemu: PathBuf::from("qemu-system-x86_64"),
            accel: Arc::default(),
            image_store: None,
        }
    }

    /// Reads images from the store at `root` instead of `$STOCKADE_HOME/images`.
    pub fn with_image_store(mut self, root: impl Into<PathBuf>) -> MicrovmLauncher {
        self.image_store = Some(root.into());
        self
    }

    /// The root image of `spec`: the host-rootfs view, or an erofs image of its OCI
    /// image's flattened rootfs (pulled on first use, made once per image), with what
    /// the image's config says about the execs.
    async fn root_for(
        &self,
        spec: &stockade_core::ValidatedSpec,
    ) -> Result<(PathBuf, Option<plan::ImageRun>)> {
        let Some(reference) = spec.image.clone() else {
            let cache = self.cache.clone();
            let root = tokio::task::spawn_blocking(move || assets::root_image(&cache, &mut |_| {}))
                .await
                .map_err(|e| Error::Internal(format!("root image task failed: {e}")))??;
            return Ok((root, None));
        };
        let store = self.image_store.clone();
        stockade_linux::ensure_image(&reference, store.as_deref()).await?;
        let cache = self.cache.clone();
        tokio::task::spawn_blocking(move || {
            // Held (kept from gc and `image rm`) while its erofs image is made; the VM
            // then runs from that copy.
            let (image, _held) = stockade_linux::image_root(&reference, store.as_deref())?;
            let root = assets::image_root_image(&cache, &image.rootfs, &mut |_| {})?;
            let run = plan::ImageRun {
                reference,
                env: image.env.clone(),
                workdir: image.workdir.clone(),
                user: image.user,
            };
            Ok((root, Some(run)))
        })
        .await
        .map_err(|e| Error::Internal(format!("image task failed: {e}")))?
    }

    /// Keeps sandboxes under `root`.
    pub fn with_state_root(mut self, root: impl Into<PathBuf>) -> MicrovmLauncher {
        self.state_root = root.into();
        self
    }

    /// Keeps named snapshots under `home/snapshots/microvm` (and their key in
    /// `home/keys/`) instead of `$STOCKADE_HOME`'s.
    pub fn with_home(mut self, home: impl AsRef<Path>) -> MicrovmLauncher {
        self.snapshots = home.as_ref().join(SNAPSHOTS_DIR);
        self.snapshot_key = home.as_ref().join(SNAPSHOT_KEY);
        self
    }

    /// Where named snapshots are kept.
    pub fn snapshot_dir(&self) -> &Path {
        &self.snapshots
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.state_root.join(id)
    }

    /// KVM when a guest boots with it, else TCG; and why. Probed once per host boot
    /// (the answer is cached under the cache directory).
    pub async fn accel(&self) -> Result<(Accel, String)> {
        self.accel
            .get_or_try_init(|| async {
                std::fs::create_dir_all(&self.cache)
                    .map_err(io(format!("cannot create {}", self.cache.display())))?;
                let boot =
                    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
                let cached = self.cache.join(format!("kvm-probe-{}", boot.trim()));
                if let Ok(text) = std::fs::read_to_string(&cached) {
                    return Ok(match text.split_once('\n') {
                        Some(("kvm", why)) => (Accel::Kvm, why.to_string()),
                        Some((_, why)) => (Accel::Tcg, why.to_string()),
                        None => (Accel::Tcg, text),
                    });
                }
                let kernel = assets::find_kernel()?;
                let r = match vmm::probe_kvm(&self.qemu, &kernel.image, &self.cache).await {
                    Ok(()) => (Accel::Kvm, "a guest booted under KVM".to_string()),
                    Err(why) => (Accel::Tcg, format!("KVM is unusable: {why}")),
                };
                let _ = std::fs::write(&cached, format!("{}\n{}", r.0.as_str(), r.1));
                Ok(r)
            })
            .await
            .cloned()
    }

    fn read_record(&self, id: &str) -> Result<Record> {
        let p = self.dir(id).join("record.json");
        let text = std::fs::read(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => not_found(id),
            _ => Error::io(format!("cannot read {}", p.display()), e),
        })?;
        serde_json::from_slice(&text)
            .map_err(|e| Error::Internal(format!("{} is not a record: {e}", p.display())))
    }

    fn write_record(&self, r: &Record) -> Result<()> {
        let p = self.dir(&r.info.id).join("record.json");
        let text = serde_json::to_vec(r)
            .map_err(|e| Error::Internal(format!("cannot encode a record: {e}")))?;
        write_private(&p, &text).map_err(io(format!("cannot write {}", p.display())))
    }

    fn is_paused(&self, id: &str) -> bool {
        self.dir(id).join("paused").exists()
    }

    /// The supervisor's pid and start ticks, when it runs.
    fn supervisor(&self, id: &str) -> Option<(u32, u64)> {
        let text = std::fs::read_to_string(self.dir(id).join("host.pid")).ok()?;
        let (p, t) = text.trim().split_once(' ')?;
        let (p, t) = (p.parse().ok()?, t.parse().ok()?);
        alive(p, t).then_some((p, t))
    }

    fn console_tail(&self, id: &str) -> String {
        let dir = self.dir(id);
        // Not following a link: QEMU's uid owns that directory.
        let mut text = read_no_follow(&dir.join(VMM_DIR).join("console.log"));
        text.push_str(&std::fs::read_to_string(dir.join("vmm.log")).unwrap_or_default());
        // The agent's own words (why PID 1 failed) say more than the kernel's panic.
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("stockade-agent"))
            .collect();
        if !ours.is_empty() {
            return ours.join(" | ");
        }
        let lines: Vec<&str> = text.lines().rev().take(6).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// The network of sandbox `id` in force: its monitor's record (a policy replaced
    /// live since the create), else the spec it was created with.
    fn live_network(&self, id: &str, created: &serde_json::Value) -> serde_json::Value {
        std::fs::read(self.dir(id).join(NET_DIR).join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("spec")?.get("network").cloned())
            .unwrap_or_else(|| created.get("network").cloned().unwrap_or_default())
    }

    /// The spec of sandbox `id` with the network in force.
    fn live_spec(&self, id: &str, spec: &serde_json::Value) -> serde_json::Value {
        let mut spec = spec.clone();
        if spec.is_object() {
            spec["network"] = self.live_network(id, &spec);
        }
        spec
    }

    /// The network monitor's input for a VM restored or resumed: its policy in force,
    /// planned again for this host now (the host's addresses and resolvers may have
    /// changed since).
    fn replanned_network(&self, id: &str) -> Result<Vec<u8>> {
        let record = self.read_record(id)?;
        let value = self.live_network(id, &record.info.spec);
        let network: stockade_spec::Network =
            serde_json::from_value(value.clone()).map_err(|e| {
                Error::Internal(format!("sandbox {id}'s network {value} is not valid: {e}"))
            })?;
        if network.policy().is_some_and(|p| !p.credentials.is_empty()) {
            return Err(credentials_fixed(id));
        }
        stockade_linux::network_setup(&network, &[])?
            .map(|s| s.monitor_input)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "sandbox {id} has a network device but network none"
                ))
            })
    }

    /// Why sandbox `id` does not answer: it died under us, and how.
    fn dead(&self, id: &str) -> Error {
        let why = std::fs::read_to_string(self.dir(id).join("exit"))
            .unwrap_or_else(|_| "its VM host is gone (killed, or the host rebooted)".into());
        Error::Unavailable {
            what: format!("sandbox {id}"),
            reason: format!("it died under us: {why}"),
            fix: format!("destroy it (stockade rm {id}) and create a new one"),
        }
    }
}

/// The microVM provider's optional verbs: pause (the VM's state written to disk),
/// fork and named snapshots (digest-checked), a live egress policy, files as any uid
/// of the sandbox; no usage.
pub const VERBS: stockade_core::Verbs = stockade_core::Verbs {
    pause: true,
    fork: true,
    snapshots: true,
    egress_control: true,
    usage: false,
    files_as_user: true,
    terminals: true,
};

#[async_trait]
impl Launcher for MicrovmLauncher {
    type Transport = UnixSocket;

    fn name(&self) -> &'static str {
        "microvm"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // OCI images: an erofs image of the flattened rootfs (see `assets`).
            images: true,
            // A virtio-net device on QEMU's user-mode network, the VMM in a network
            // namespace behind the native provider's firewall, resolver and proxy.
            network_egress: true,
            network_policy: true,
            // Directories shared with virtiofs (files are refused by name).
            mounts: true,
            verbs: VERBS,
            ..Capabilities::FULL_LINUX
        }
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = Vec::new();
        let qemu = std::process::Command::new(&self.qemu)
            .arg("--version")
            .output();
        let (ok, detail) = match qemu {
            Ok(o) if o.status.success() => (
                true,
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            ),
            Ok(o) => (
                false,
                format!("{} --version failed ({})", self.qemu.display(), o.status),
            ),
            Err(e) => (false, format!("{} cannot run: {e}", self.qemu.display())),
        };
        checks.push(Check {
            name: "qemu".into(),
            ok,
            detail,
            fix: (!ok).then(|| "apt-get install qemu-system-x86".into()),
        });
        let kernel = assets::find_kernel();
        checks.push(Check {
            name: "guest kernel".into(),
            ok: kernel.is_ok(),
            detail: match &kernel {
                Ok(k) => format!("{} ({})", k.image.display(), k.release),
                Err(e) => e.to_string(),
            },
            fix: kernel
                .is_err()
                .then(|| "apt-get install linux-image-cloud-amd64".into()),
        });
        let erofs = std::process::Command::new("mkfs.erofs")
            .arg("--help")
            .output()
            .is_ok();
        checks.push(Check {
            name: "mkfs.erofs".into(),
            ok: erofs,
            detail: if erofs {
                "found".into()
            } else {
                "missing".into()
            },
            fix: (!erofs).then(|| "apt-get install erofs-utils".into()),
        });
        if ok && kernel.is_ok() {
            let (accel, why) = self.accel().await?;
            checks.push(Check {
                name: "acceleration".into(),
                ok: true,
                detail: format!("{} ({why})", accel.as_str()),
                fix: None,
            });
        }
        let tools = stockade_linux::network_tools();
        checks.push(Check {
            name: "network".into(),
            ok: tools.is_ok(),
            detail: match &tools {
                Ok(t) => format!(
                    "none by default (no network device); with --network: a virtio-net device on \
                     QEMU's user-mode network, the VMM in its own network namespace behind the \
                     native firewall and resolver ({t})"
                ),
                Err(_) => "--network cannot work: slirp4netns or nft is missing (a VM without \
                           network is unaffected)"
                    .into(),
            },
            fix: tools.err(),
        });
        let ids = vmm_ids();
        checks.push(Check {
            name: "vmm confinement".into(),
            ok: ids.is_ok(),
            detail: match &ids {
                Ok(p) => format!(
                    "{} (pool: {} ranges from host id {}, leases in {})",
                    vmm::CONFINEMENT.trim_start_matches("VMM confinement: "),
                    p.pool_ranges,
                    p.pool_start,
                    p.lease_dir.display()
                ),
                Err(e) => e.to_string(),
            },
            fix: ids.is_err().then(|| {
                format!(
                    "set {} to a valid START-END range",
                    stockade_linux::idpool::ENV
                )
            }),
        });
        let agent = stockade_agent_host::find_static_agent();
        checks.push(Check {
            name: "static agent".into(),
            ok: agent.is_ok(),
            detail: match &agent {
                Ok(p) => p.display().to_string(),
                Err(e) => e.to_string(),
            },
            fix: agent
                .is_err()
                .then(|| stockade_agent_host::BUILD_STATIC_AGENT.into()),
        });
        checks.push(Check {
            name: "root".into(),
            ok: stockade_core::host::is_root(),
            detail: format!("euid {}", stockade_core::host::euid()),
            fix: (!stockade_core::host::is_root()).then(|| "run as root".into()),
        });
        Ok(checks)
    }

    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        self.create_vm(spec, opts).await
    }

    async fn transport(&self, id: &str) -> Result<UnixSocket> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        if self.is_paused(id) {
            return Err(stockade_core::paused_error(id));
        }
        Ok(UnixSocket::new(id, self.dir(id).join("agent.sock")))
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.remove(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let mut v = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.state_root) else {
            return Ok(v);
        };
        for e in entries.flatten() {
            let id = e.file_name().to_string_lossy().to_string();
            if check_sandbox_id(&id).is_ok()
                && let Ok(info) = self.inspect(&id).await
            {
                v.push(info);
            }
        }
        v.sort_by_key(|i| i.created_at_ms);
        Ok(v)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        check_sandbox_id(id)?;
        let r = self.read_record(id)?;
        let mut info = r.info;
        if r.host.net_dir.is_some() {
            info.spec = self.live_spec(id, &info.spec);
        }
        if self.is_paused(id) {
            info.state = RunState::Paused;
        }
        let state = if self.is_paused(id) {
            let snap = self.dir(id).join("snapshot/vm.state");
            let bytes = std::fs::metadata(&snap).map(|m| m.len()).unwrap_or(0);
            format!("paused (memory and device state on disk, {bytes} bytes)")
        } else if self.supervisor(id).is_some() {
            "running".to_string()
        } else {
            match std::fs::read_to_string(self.dir(id).join("exit")) {
                Ok(why) => format!("dead ({why})"),
                Err(_) => "dead (its VM host is gone)".into(),
            }
        };
        let state = Wall::on(WallKind::State, state);
        info.applied.push(state);
        Ok(info)
    }

    async fn gc(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        // Named snapshots stay; copies a crashed `snapshot` left half-made go.
        report.reaped.extend(self.gc_partial_snapshots());
        let Ok(entries) = std::fs::read_dir(&self.state_root) else {
            return Ok(report);
        };
        for e in entries.flatten() {
            let id = e.file_name().to_string_lossy().to_string();
            if check_sandbox_id(&id).is_err() {
                continue;
            }
            // One being made, paused or resumed is not dead, whatever it looks like.
            let _hold = match self.try_hold(&id) {
                Ok(Some(h)) => h,
                Ok(None) => continue,
                Err(_) => continue,
            };
            let reap = match self.read_record(&id) {
                // Half-made by a crash (no record yet) once it is not fresh.
                Err(_) => e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(300)),
                Ok(r) => {
                    let expired = now_ms() >= r.info.expires_at_ms;
                    let owner_gone = match (r.host.owner_pid, r.host.owner_ticks) {
                        (Some(p), Some(t)) => stockade_sys::process::start_ticks(p) != Some(t),
                        (Some(p), None) => stockade_sys::process::start_ticks(p).is_none(),
                        (None, _) => false,
                    };
                    if self.is_paused(&id) {
                        expired || owner_gone
                    } else {
                        expired || owner_gone || self.supervisor(&id).is_none()
                    }
                }
            };
            if reap {
                match self.remove(&id).await {
                    Ok(()) => report.reaped.push(id),
                    Err(e) => report.errors.push(format!("{id}: {e}")),
                }
            }
        }
        Ok(report)
    }

    async fn explain(&self, id: &str, error: Error) -> Error {
        if self.read_record(id).is_err() {
            return not_found(id);
        }
        if self.supervisor(id).is_none() && !self.is_paused(id) {
            return self.dead(id);
        }
        error
    }

    fn pausing(&self) -> Option<&dyn stockade_core::Pausing> {
        Some(self)
    }

    fn forking(&self) -> Option<&dyn stockade_core::Forking> {
        Some(self)
    }

    fn snapshotting(&self) -> Option<&dyn stockade_core::Snapshotting> {
        Some(self)
    }

    fn egress_control(&self) -> Option<&dyn stockade_core::EgressControl> {
        Some(self)
    }

    fn files_as_user(&self) -> bool {
        true
    }

    fn terminals(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(writable: bool) -> stockade_spec::Mount {
        stockade_spec::Mount {
            host: PathBuf::from("/srv/work"),
            target: "/work".into(),
            writable,
        }
    }

    #[test]
    fn each_virtiofsd_gets_the_options_it_understands() {
        let c = virtiofsd_command(Some(Path::new(C_VIRTIOFSD)), &mount(true), "/s");
        assert_eq!(c[0], C_VIRTIOFSD);
        assert!(c.iter().any(|a| a == "source=/srv/work"), "{c:?}");
        assert!(c.iter().any(|a| a == "sandbox=namespace"), "{c:?}");
        let r = virtiofsd_command(
            Some(Path::new("/usr/local/libexec/virtiofsd")),
            &mount(true),
            "/s",
        );
        assert_eq!(
            r,
            [
                "/usr/local/libexec/virtiofsd",
                "--socket-path=/s",
                "--shared-dir=/srv/work",
                "--sandbox=namespace",
                "--cache=auto"
            ]
        );
        // Read-only: the same daemon inside a read-only bind of the directory.
        let ro = virtiofsd_command(
            Some(Path::new("/usr/libexec/virtiofsd")),
            &mount(false),
            "/s",
        );
        assert_eq!(ro[0], "unshare");
        assert!(
            ro.iter().any(|a| a.contains("mount --bind -o ro")),
            "{ro:?}"
        );
        assert!(ro.ends_with(&["--cache=auto".to_string()]), "{ro:?}");
        assert!(ro.iter().any(|a| a == "--shared-dir=/srv/work"), "{ro:?}");
    }
}
