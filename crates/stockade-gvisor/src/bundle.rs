//! From a native launch plan to an OCI bundle for runsc: pure code, unit-tested.
//!
//! The root a sandbox sees is decided once, by the native provider's planner
//! (`stockade_linux::plan`: the host's `/usr`, `/bin`, `/lib*` read-only, the public
//! `/etc` entries, the synthetic `passwd`/`group`/`hosts`..., `/tmp`, the spec's
//! mounts; or an image's flattened rootfs). This module translates those mount
//! operations into what runsc takes: the OCI `mounts` list, and the few entries
//! (mount points, symlinks, synthetic files) written into a fresh root directory on
//! the host. What gVisor provides itself (`/proc`, `/sys`, `/dev`) is its own: the
//! native plan's masks of host `/proc` files have nothing to mask there.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stockade_agent_proto::launch::{CONTAINER_DIR, ExecPolicy, LaunchPlan, MountFlags, MountOp};
use stockade_core::{Error, ValidatedSpec, Wall, WallKind};
use stockade_spec::format_size;

use crate::runsc::Platform;

/// Capabilities PID 1 (the agent) keeps: those it needs to drop each exec to the
/// sandbox user and to kill what the exec started, and CAP_CHOWN, which it gives up
/// once it has handed its socket's directory away from uid 0 (root inside could
/// otherwise replace the socket). Every exec drops all of them.
pub const AGENT_CAPS: &[&str] = &[
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_KILL",
    "CAP_CHOWN",
];

/// Host memory the sandbox's cgroup allows beyond the spec's memory: gVisor's sentry
/// and gofer (its kernel and file server) live in the same cgroup as the code.
pub const SENTRY_OVERHEAD_BYTES: u64 = 192 << 20;

/// Host tasks the sandbox's cgroup allows per sandbox process, and at least: on the
/// ptrace platform every process inside has stub processes and threads on the host
/// (22 processes inside measured 367 host tasks). The spec's `pids` is enforced
/// inside, by gVisor, as `RLIMIT_NPROC` of the code's uid.
pub const HOST_TASKS_PER_PID: u64 = 24;
/// See [`HOST_TASKS_PER_PID`].
pub const HOST_TASKS_MIN: u64 = 512;

/// Processes of the agent in a sandbox running one exec (PID 1 and the exec's shim),
/// which the spec's pids cap counts but the code's `RLIMIT_NPROC` does not.
const AGENT_TASKS: u32 = 2;

/// CFS period of the CPU quota.
const CPU_PERIOD_US: u64 = 100_000;

/// A step of building the sandbox's root directory on the host (host-rootfs view) or
/// its synthetic files (image root). Paths are relative to that directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootOp {
    /// A directory (mount point or the workdir).
    Dir { path: PathBuf, mode: u32 },
    /// An empty file, the mount point of a file bind.
    EmptyFile { path: PathBuf },
    /// A symbolic link.
    Symlink { to: String, path: PathBuf },
    /// A file with contents.
    File {
        path: PathBuf,
        contents: String,
        mode: u32,
    },
}

/// Facts of this host and this creation besides the plan.
#[derive(Clone, Debug)]
pub struct BundleInput {
    /// The static agent on the host, bound read-only at `/.stockade/agent`.
    pub agent: PathBuf,
    /// Host directory mounted at [`CONTAINER_DIR`]: the agent's config and socket.
    pub agent_dir: PathBuf,
    /// The root directory built on the host (host-rootfs view).
    pub root_dir: PathBuf,
    /// Where the synthetic files of an image root are written on the host.
    pub files_dir: PathBuf,
    /// The image's flattened rootfs, when the spec names an image: the sandbox's
    /// root, read-only; gVisor resolves every path inside it in its own kernel.
    pub image_rootfs: Option<PathBuf>,
    /// The runsc version line and the platform (for the applied lines).
    pub runsc_version: String,
    pub platform: Platform,
    /// The cgroup parent directory name (in each hierarchy).
    pub cgroup_parent: String,
}

/// A bundle to write and run.
#[derive(Clone, Debug)]
pub struct Bundle {
    /// `config.json`.
    pub config: Value,
    /// What to create in [`BundleInput::root_dir`] (host view) or
    /// [`BundleInput::files_dir`] (image root) before starting.
    pub root_ops: Vec<RootOp>,
    /// The policy the agent applies to every exec.
    pub exec: ExecPolicy,
    /// Hardening applied.
    pub applied: Vec<Wall>,
}

fn rel(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap_or(p).to_path_buf()
}

fn flag_options(flags: MountFlags) -> Vec<&'static str> {
    let mut o = vec![if flags.readonly { "ro" } else { "rw" }];
    if flags.nosuid {
        o.push("nosuid");
    }
    if flags.nodev {
        o.push("nodev");
    }
    if flags.noexec {
        o.push("noexec");
    }
    o
}

fn bind(source: &Path, target: &Path, flags: MountFlags) -> Value {
    let mut options = vec!["rbind"];
    options.extend(flag_options(flags));
    json!({
        "destination": target,
        "type": "bind",
        "source": source,
        "options": options,
    })
}

fn under(path: &Path, dir: &str) -> bool {
    path.starts_with(dir)
}

/// Translates the native plan `plan` of `spec` into a bundle.
pub fn bundle(
    spec: &ValidatedSpec,
    plan: &LaunchPlan,
    input: &BundleInput,
) -> Result<Bundle, Error> {
    let image = input.image_rootfs.is_some();
    let mut ops = Vec::new();
    // The mount point of every mount in a fresh host root (host view); an image root
    // is not ours to write: gVisor makes what is missing in its memory overlay.
    let mount_point = |ops: &mut Vec<RootOp>, target: &Path, file: bool| {
        if image {
            return;
        }
        ops.push(if file {
            RootOp::EmptyFile { path: rel(target) }
        } else {
            RootOp::Dir {
                path: rel(target),
                mode: 0o755,
            }
        });
    };
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "noexec", "mode=755", "size=65536k"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
    ];
    for d in ["proc", "dev", "sys"] {
        mount_point(&mut ops, Path::new("/").join(d).as_path(), false);
    }
    for op in &plan.mounts {
        match op {
            MountOp::Tmpfs { target, .. } if target == Path::new("/") => {}
            // gVisor makes /dev itself; only /dev/shm, which its own makes root's
            // (0755), is the plan's: the code's POSIX shared memory, 1777.
            MountOp::Tmpfs { target, .. }
                if under(target, "/dev") && target != Path::new("/dev/shm") => {}
            MountOp::Tmpfs {
                target,
                size_bytes,
                mode,
                flags,
            } => {
                if !under(target, "/dev") {
                    mount_point(&mut ops, target, false);
                }
                let mut options: Vec<String> = flag_options(*flags)
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                options.push(format!("size={size_bytes}"));
                options.push(format!("mode={mode:o}"));
                mounts.push(json!({
                    "destination": target, "type": "tmpfs", "source": "tmpfs", "options": options,
                }));
            }
            // The image's own entries: the image is the root.
            MountOp::Bind {
                within: Some(_), ..
            } => {}
            MountOp::Bind {
                source,
                target,
                flags,
                file,
                within: None,
                ..
            } => {
                mount_point(&mut ops, target, *file);
                mounts.push(bind(source, target, *flags));
            }
            MountOp::Overlay { target, .. } | MountOp::Copy { path: target, .. } => {
                return Err(Error::InvalidRequest(format!(
                    "the gvisor provider cannot make {} writable (a writable root is not supported)",
                    target.display()
                )));
            }
            MountOp::Proc { .. }
            | MountOp::Sysfs { .. }
            | MountOp::Devpts { .. }
            | MountOp::Device { .. }
            | MountOp::ReadOnly { .. } => {}
            MountOp::Mkdir { path, mode } => {
                if image {
                    // The workdir in an image: an empty tmpfs, so it exists whatever
                    // the image holds, and is writable only if the code's own.
                    mounts.push(json!({
                        "destination": path, "type": "tmpfs", "source": "tmpfs",
                        "options": ["ro", "nosuid", "nodev", "size=4k", format!("mode={mode:o}")],
                    }));
                } else {
                    ops.push(RootOp::Dir {
                        path: rel(path),
                        mode: *mode,
                    });
                }
            }
            MountOp::Symlink { path, .. } if under(path, "/dev") => {}
            MountOp::Symlink { to, path } => {
                if !image {
                    ops.push(RootOp::Symlink {
                        to: to.clone(),
                        path: rel(path),
                    });
                }
            }
            MountOp::File {
                path,
                contents,
                mode,
            } => {
                if image {
                    let name = rel(path).to_string_lossy().replace('/', "_");
                    ops.push(RootOp::File {
                        path: PathBuf::from(&name),
                        contents: contents.clone(),
                        mode: *mode,
                    });
                    mounts.push(bind(
                        &input.files_dir.join(&name),
                        path,
                        MountFlags::RO_HOST,
                    ));
                } else {
                    ops.push(RootOp::File {
                        path: rel(path),
                        contents: contents.clone(),
                        mode: *mode,
                    });
                }
            }
            MountOp::Mask { target } if under(target, "/proc") || under(target, "/.stockade") => {}
            MountOp::Mask { target } => {
                mounts.push(json!({
                    "destination": target, "type": "tmpfs", "source": "tmpfs",
                    "options": ["ro", "nosuid", "nodev", "noexec", "size=4k", "mode=0"],
                }));
            }
        }
    }
    // The agent's directory and binary, last: nothing of the spec covers them.
    if !image {
        ops.push(RootOp::Dir {
            path: rel(Path::new(CONTAINER_DIR)),
            mode: 0o700,
        });
    }
    mounts.push(bind(
        &input.agent_dir,
        Path::new(CONTAINER_DIR),
        MountFlags::RW,
    ));
    mounts.push(bind(
        &input.agent,
        &Path::new(CONTAINER_DIR).join("agent"),
        MountFlags {
            readonly: true,
            nosuid: true,
            nodev: true,
            noexec: false,
        },
    ));

    let l = &spec.limits;
    let h = spec.hardening;
    let mut exec = plan.exec.clone();
    // gVisor has no landlock; writes are confined by the read-only mounts instead.
    exec.landlock_writable = None;
    exec.root_caps = false;
    exec.rlimit_as_bytes = Some(l.memory_bytes);
    // The spec's cap counts every process of the sandbox, as native's pids cgroup
    // does: PID 1 and the exec's shim (root's, outside the code's RLIMIT_NPROC) too.
    // gVisor (2022) also lets a uid reach one task past RLIMIT_NPROC (measured: a
    // limit of 16 let 17 processes run), so the limit is three below the cap.
    exec.rlimit_nproc = Some(u64::from(l.pids.saturating_sub(AGENT_TASKS + 1).max(1)));
    // gVisor 2022 ignores the shim's child-subreaper mark: what an exec double-forks
    // is reparented to PID 1, which must find and kill it.
    exec.sweep_orphans = true;
    // Under the ptrace platform a fork costs what the exec it saves does, and the
    // zygote's start slowed every create (ARCHITECTURE.md, the exec zygote).
    exec.no_zygote = true;

    let caps: Vec<&str> = if h.drop_capabilities {
        AGENT_CAPS.to_vec()
    } else {
        AGENT_CAPS
            .iter()
            .copied()
            .chain(["CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_NET_BIND_SERVICE"])
            .collect()
    };
    let host_memory = l.memory_bytes + SENTRY_OVERHEAD_BYTES;
    let host_tasks = (u64::from(l.pids) * HOST_TASKS_PER_PID).max(HOST_TASKS_MIN);
    let quota = ((l.cpus * CPU_PERIOD_US as f64).round() as u64).max(1000);
    let root = match &input.image_rootfs {
        Some(r) => r.clone(),
        None => input.root_dir.clone(),
    };
    let config = json!({
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0},
            // A bare name found through PATH, so PID 1's command line, which the
            // code can read, names no path ("agent container").
            "args": ["agent", "container"],
            "env": [format!("PATH={CONTAINER_DIR}")],
            "cwd": "/",
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps,
            },
            "noNewPrivileges": h.no_new_privileges,
        },
        "root": {"path": root, "readonly": true},
        "hostname": spec.hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": [
                {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                {"type": "uts"}, {"type": "mount"},
            ],
            "resources": {
                "memory": {"limit": host_memory, "swap": host_memory},
                "cpu": {"quota": quota, "period": CPU_PERIOD_US},
                "pids": {"limit": host_tasks},
            },
            "cgroupsPath": format!("/{}/{}", input.cgroup_parent, plan.id),
        },
    });
    let applied = applied(spec, &exec, input, host_memory, host_tasks);
    Ok(Bundle {
        config,
        root_ops: ops,
        exec,
        applied,
    })
}

fn applied(
    spec: &ValidatedSpec,
    exec: &ExecPolicy,
    input: &BundleInput,
    host_memory: u64,
    host_tasks: u64,
) -> Vec<Wall> {
    use WallKind as K;
    let l = &spec.limits;
    let h = spec.hardening;
    let mut v = vec![
        Wall::on(
            K::Isolation,
            format!(
                "gVisor ({}, platform {}): the code's system calls are served by gVisor's user-space kernel, not the host's",
                input.runsc_version,
                input.platform.as_str()
            ),
        ),
        Wall::on(K::Platform, input.platform.as_str()),
        match &spec.image {
            Some(i) => Wall::on(
                K::Root,
                format!("image {i} (its flattened rootfs), read-only; synthetic /etc files"),
            ),
            None => Wall::on(
                K::Root,
                "read-only host view (/usr, /bin, /lib*, public /etc entries, synthetic passwd/group/hosts)",
            ),
        },
        Wall::on(
            K::Tmp,
            format!(
                "tmpfs {} inside gVisor (nosuid, nodev)",
                format_size(l.tmp_bytes)
            ),
        ),
        Wall::on(
            K::Network,
            "none (runsc --network=none: loopback inside gVisor only)",
        ),
        Wall::on(
            K::Limits,
            format!(
                "memory {} per process (RLIMIT_AS: an allocation past it fails inside); the sandbox's host cgroup {} with gVisor's own kernel (exceeding it ends the sandbox)",
                format_size(l.memory_bytes),
                format_size(host_memory)
            ),
        ),
        Wall::on(
            K::Limits,
            format!("cpu {} CPUs (host cgroup quota)", l.cpus),
        ),
        Wall::on(
            K::Limits,
            format!(
                "pids {} processes and threads of the code's uid (RLIMIT_NPROC, enforced by gVisor); the host cgroup allows {host_tasks} host tasks",
                l.pids
            ),
        ),
        Wall::on(
            K::User,
            format!(
                "uid {} gid {}, workdir {}",
                exec.uid, exec.gid, exec.workdir
            ),
        ),
        Wall::on(K::Lifetime, format!("{} s", spec.timeout_secs)),
    ];
    v.push(if h.drop_capabilities {
        Wall::on(
            K::Capabilities,
            format!(
                "the code has none; PID 1 (the agent) keeps only {}",
                AGENT_CAPS.join(", ")
            ),
        )
    } else {
        Wall::off(K::Capabilities, "NOT dropped (opt-out)")
    });
    v.push(if h.no_new_privileges {
        Wall::on(K::NoNewPrivs, "set (PID 1 and every exec)")
    } else {
        Wall::off(K::NoNewPrivs, "NOT set (opt-out)")
    });
    v.push(if h.seccomp {
        Wall::on(
            K::Seccomp,
            format!(
                "inside gVisor on every exec: {}; gVisor's own filter on the sentry",
                stockade_sys::seccomp::describe()
            ),
        )
    } else {
        Wall::off(
            K::Seccomp,
            "gVisor's own filter on the sentry only (stockade allowlist OFF, opt-out)",
        )
    });
    v.push(Wall::off(
        K::Landlock,
        "not in gVisor; writes are confined by read-only mounts (root, /usr, /etc) the code cannot remount",
    ));
    v.push(Wall::on(
        K::AgentChannel,
        format!(
            "{CONTAINER_DIR}/agent.sock, a host socket made through runsc --host-uds=create in a directory the agent hands from root to uid 65534 (mode 0711) once it listens"
        ),
    ));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_spec::SandboxSpec;

    fn plan_for(spec: &ValidatedSpec, image: bool) -> LaunchPlan {
        let host = stockade_linux::layout::HostLayout {
            root: vec![
                ("/usr".into(), stockade_linux::layout::Entry::Dir),
                (
                    "/bin".into(),
                    stockade_linux::layout::Entry::Symlink("usr/bin".into()),
                ),
            ],
            etc: vec![(
                "/etc/ld.so.cache".into(),
                stockade_linux::layout::Entry::File,
            )],
            nameservers: vec![],
            cgroups: stockade_cgroup::Layout::V2 {
                root: "/sys/fs/cgroup".into(),
            },
            host_addresses: vec![],
            host_networks: vec![],
        };
        let ctx = stockade_linux::plan::PlanContext {
            id: "sb-0123456789ab".into(),
            state_dir: "/run/stockade-gvisor/sb-0123456789ab".into(),
            host,
            slirp: None,
            nft: None,
            dns_upstreams: Vec::new(),
            egress_secrets: None,
            now_ms: 1000,
            owner_pid: None,
            mount_is_file: vec![false; spec.mounts.len()],
            image: image.then(|| stockade_linux::plan::ImageRoot {
                rootfs: "/images/rootfs/abc".into(),
                root: vec![("/usr".into(), stockade_linux::layout::Entry::Dir)],
                etc: vec![],
                env: vec![],
                workdir: None,
                user: None,
                in_use_lock: None,
            }),
            userns: None,
            rootless: None,
        };
        stockade_linux::plan::plan(spec, &ctx).unwrap()
    }

    fn input(image: bool) -> BundleInput {
        BundleInput {
            agent: "/opt/stockade-agent".into(),
            agent_dir: "/run/stockade-gvisor/sb-0123456789ab/agent".into(),
            root_dir: "/run/stockade-gvisor/sb-0123456789ab/rootfs".into(),
            files_dir: "/run/stockade-gvisor/sb-0123456789ab/files".into(),
            image_rootfs: image.then(|| "/images/rootfs/abc".into()),
            runsc_version: "runsc version 0.0~20221219.0".into(),
            platform: Platform::Ptrace,
            cgroup_parent: "stockade".into(),
        }
    }

    fn destinations(b: &Bundle) -> Vec<String> {
        b.config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn host_view_is_read_only_and_limited() {
        let spec = SandboxSpec::default().validate().unwrap();
        let b = bundle(&spec, &plan_for(&spec, false), &input(false)).unwrap();
        let c = &b.config;
        assert_eq!(c["root"]["readonly"], true);
        assert_eq!(
            c["root"]["path"],
            "/run/stockade-gvisor/sb-0123456789ab/rootfs"
        );
        assert_eq!(
            c["process"]["args"],
            json!(["agent", "container"]),
            "no path in PID 1's command line"
        );
        assert_eq!(c["process"]["env"], json!(["PATH=/.stockade"]));
        assert_eq!(c["process"]["noNewPrivileges"], true);
        assert_eq!(c["process"]["capabilities"]["bounding"], json!(AGENT_CAPS));
        assert_eq!(
            c["linux"]["resources"]["memory"]["limit"],
            (512u64 << 20) + SENTRY_OVERHEAD_BYTES
        );
        assert_eq!(c["linux"]["resources"]["cpu"]["quota"], 100_000);
        assert_eq!(c["linux"]["cgroupsPath"], "/stockade/sb-0123456789ab");
        let d = destinations(&b);
        for want in [
            "/proc",
            "/usr",
            "/etc/ld.so.cache",
            "/tmp",
            "/.stockade",
            "/.stockade/agent",
            "/dev/shm",
        ] {
            assert!(d.contains(&want.to_string()), "{want} missing from {d:?}");
        }
        let usr = &c["mounts"].as_array().unwrap()[d.iter().position(|x| x == "/usr").unwrap()];
        assert_eq!(usr["options"], json!(["rbind", "ro", "nosuid", "nodev"]));
        let tmp = &c["mounts"].as_array().unwrap()[d.iter().position(|x| x == "/tmp").unwrap()];
        assert!(
            tmp["options"]
                .as_array()
                .unwrap()
                .contains(&json!("size=67108864"))
        );
        assert!(b.root_ops.contains(&RootOp::Symlink {
            to: "usr/bin".into(),
            path: "bin".into()
        }));
        assert!(b.root_ops.contains(&RootOp::EmptyFile {
            path: "etc/ld.so.cache".into()
        }));
        assert!(
            b.root_ops
                .iter()
                .any(|o| matches!(o, RootOp::File { path, contents, .. }
            if path == Path::new("etc/passwd") && contents.contains("sandbox:x:1000:1000")))
        );
        assert_eq!(b.exec.landlock_writable, None, "no landlock in gVisor");
        assert_eq!(b.exec.rlimit_as_bytes, Some(512 << 20));
        assert_eq!(
            b.exec.rlimit_nproc,
            Some(61),
            "PID 1 and the shim count, and gVisor allows one past it"
        );
        assert!(
            b.exec.sweep_orphans,
            "gVisor ignores the shim's subreaper mark"
        );
        assert_eq!((b.exec.uid, b.exec.gid), (1000, 1000));
        assert!(
            b.applied
                .iter()
                .any(|w| w.kind == WallKind::Platform && w.detail == "ptrace")
        );
    }

    #[test]
    fn image_root_is_the_rootfs_with_synthetic_files_bound() {
        let spec = SandboxSpec {
            image: Some("debian".into()),
            ..Default::default()
        }
        .validate()
        .unwrap();
        let b = bundle(&spec, &plan_for(&spec, true), &input(true)).unwrap();
        assert_eq!(b.config["root"]["path"], "/images/rootfs/abc");
        let d = destinations(&b);
        assert!(
            !d.contains(&"/usr".to_string()),
            "the image's own /usr is the root's"
        );
        assert!(d.contains(&"/etc/passwd".to_string()));
        assert!(
            b.root_ops
                .iter()
                .all(|o| matches!(o, RootOp::File { path, .. } if path.components().count() == 1))
        );
    }

    #[test]
    fn host_mounts_keep_their_mode() {
        let spec = SandboxSpec {
            mounts: vec![stockade_spec::Mount {
                host: "/srv/data".into(),
                target: "/data".into(),
                writable: true,
            }],
            ..Default::default()
        }
        .validate()
        .unwrap();
        let b = bundle(&spec, &plan_for(&spec, false), &input(false)).unwrap();
        let m = b.config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/data")
            .unwrap()
            .clone();
        assert_eq!(m["source"], "/srv/data");
        assert_eq!(m["options"], json!(["rbind", "rw", "nosuid", "nodev"]));
    }
}
