//! From a validated spec to a container: pure code, unit-tested.
//!
//! The container runs `stockade-agent container` as PID 1 (bind-mounted read-only from
//! the host) with a read-only root, a `/tmp` tmpfs, no network, memory without swap,
//! a CPU quota, a pids cap, docker's default seccomp profile, no_new_privs and only
//! the four capabilities the agent needs to drop each exec to the sandbox user. The
//! agent then applies the same per-exec policy as on the native provider.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use stockade_agent_proto::launch::{CONTAINER_DIR, ContainerConfig, ExecPolicy};
use stockade_core::{Wall, WallKind};
use stockade_spec::{Network, ValidatedSpec, format_size};

/// Label keys on every Stockade container.
pub mod labels {
    /// `docker`: marks a container as Stockade's (what gc and leak checks look for).
    pub const PROVIDER: &str = "io.stockade.provider";
    /// The sandbox id.
    pub const ID: &str = "io.stockade.id";
    /// Creation time, unix ms.
    pub const CREATED: &str = "io.stockade.created-at-ms";
    /// End of the lifetime, unix ms.
    pub const EXPIRES: &str = "io.stockade.expires-at-ms";
    /// Host pid whose death ends the sandbox.
    pub const OWNER_PID: &str = "io.stockade.owner-pid";
    /// Start time (clock ticks) of that pid, to tell it from a later process.
    pub const OWNER_TICKS: &str = "io.stockade.owner-ticks";
    /// The spec as requested (JSON).
    pub const SPEC: &str = "io.stockade.spec";
    /// Hardening applied (JSON array of walls).
    pub const APPLIED: &str = "io.stockade.applied";
    /// Prefix of the caller's own labels.
    pub const USER_PREFIX: &str = "io.stockade.label.";
}

/// Capabilities the container keeps, for the agent only: `setgroups`/`setresgid`,
/// `setresuid`, dropping the bounding set, killing the exec's processes (which run as
/// another uid), and CHOWN, which the agent gives up once it has handed its socket's
/// directory away from uid 0. Every exec drops all of them before the code runs.
pub const AGENT_CAPS: &[&str] = &["SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN"];

/// Path of the agent binary inside the container.
pub fn agent_path() -> String {
    format!("{CONTAINER_DIR}/agent")
}

/// What the image says about running it (from dockerd's image inspect).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageFacts {
    /// `KEY=VALUE` entries.
    pub env: Vec<String>,
    /// Default working directory.
    pub workdir: Option<String>,
    /// `User` of the image, when it is numeric and not root.
    pub user: Option<(u32, u32)>,
}

impl ImageFacts {
    /// Parses an image's `User`: only numeric, non-root users are taken (names would
    /// need the image's passwd, and root is never used for the code).
    pub fn parse_user(user: &str) -> Option<(u32, u32)> {
        let (u, g) = match user.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (user, None),
        };
        let uid: u32 = u.parse().ok()?;
        let gid: u32 = match g {
            Some(g) => g.parse().ok()?,
            None => uid,
        };
        (uid != 0 && gid != 0).then_some((uid, gid))
    }
}

/// Facts of this host and this creation.
#[derive(Clone, Debug)]
pub struct PlanInput {
    pub id: String,
    /// Host directory mounted at [`CONTAINER_DIR`] (socket and config).
    pub state_dir: PathBuf,
    /// The static agent binary on the host.
    pub agent: PathBuf,
    pub now_ms: u64,
    pub owner_pid: Option<u32>,
    pub owner_ticks: Option<u64>,
    pub image: ImageFacts,
    /// The group that shares [`PlanInput::state_dir`] with the agent when the caller
    /// is not root (the docker socket's group): the agent starts with it as a
    /// supplementary group to reach its directory; each exec drops it.
    pub agent_group: Option<u32>,
    /// With network: the files the container gets from its network monitor's
    /// directory (its resolv.conf, its authority's certificates) and the environment
    /// of an egress policy's credentials.
    pub net: Option<NetInput>,
    /// The host ids of uid and gid 0 in the container under dockerd's userns-remap;
    /// `None`: the host's own ids (allowed by [`crate::HOST_IDS_ENV`]).
    pub userns: Option<(u32, u32)>,
}

/// See [`PlanInput::net`].
#[derive(Clone, Debug)]
pub struct NetInput {
    /// Host files bound read-only at the given paths in the container.
    pub files: Vec<(PathBuf, String)>,
    pub env: BTreeMap<String, String>,
    /// The network wall (the native planner's words).
    pub applied: Wall,
}

/// A container to create.
#[derive(Clone, Debug)]
pub struct Plan {
    pub body: ContainerCreateBody,
    pub config: ContainerConfig,
    pub applied: Vec<Wall>,
    pub expires_at_ms: u64,
    /// See [`PlanInput::userns`].
    pub userns: Option<(u32, u32)>,
}

/// The name of a sandbox's container.
pub fn container_name(id: &str) -> String {
    format!("stockade-{id}")
}

fn bind(source: &Path, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.to_string()),
        source: Some(source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The user the code runs as: the spec's, or the image's when the spec keeps the
/// default one.
pub fn code_user(spec: &ValidatedSpec, image: &ImageFacts) -> stockade_spec::User {
    match image.user {
        Some((uid, gid)) if spec.user == stockade_spec::User::default() => {
            stockade_spec::User { uid, gid }
        }
        _ => spec.user,
    }
}

/// The container for `spec`.
pub fn plan(spec: &ValidatedSpec, input: &PlanInput) -> Plan {
    let l = &spec.limits;
    let h = spec.hardening;
    let expires_at_ms = input.now_ms + spec.timeout_secs * 1000;
    let user = code_user(spec, &input.image);
    let workdir = match (&spec.workdir, &input.image.workdir) {
        (Some(w), _) => w.display().to_string(),
        (None, Some(w)) if !w.is_empty() => w.clone(),
        _ => spec.effective_workdir().display().to_string(),
    };
    // The image's environment under the spec's (PATH, HOME, LANG and the caller's).
    let mut env: BTreeMap<String, String> = input
        .image
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.extend(spec.base_env());
    if let Some(n) = &input.net {
        env.extend(n.env.clone());
    }
    let mut landlock_writable = vec!["/tmp".to_string(), "/dev/shm".to_string()];
    if spec.writable {
        landlock_writable = vec!["/".to_string()];
    } else {
        landlock_writable.extend(
            spec.mounts
                .iter()
                .filter(|m| m.writable)
                .map(|m| m.target.display().to_string()),
        );
    }
    let exec = ExecPolicy {
        uid: user.uid,
        gid: user.gid,
        env,
        workdir: workdir.clone(),
        no_new_privs: h.no_new_privileges,
        drop_caps: h.drop_capabilities,
        seccomp: h.seccomp,
        landlock_writable: h.landlock.then_some(landlock_writable),
        idle_timeout_ms: spec.idle_timeout_secs.map(|s| s * 1000),
        root_caps: false,
        landlock_min_abi: None,
        rlimit_as_bytes: None,
        rlimit_nproc: None,
        sweep_orphans: false,
        exec_cgroup: None,
        no_zygote: false,
    };

    let mut mounts = vec![
        bind(&input.state_dir, CONTAINER_DIR, false),
        bind(&input.agent, &agent_path(), true),
    ];
    mounts.extend(
        spec.mounts
            .iter()
            .map(|m| bind(&m.host, &m.target.display().to_string(), !m.writable)),
    );
    if let Some(n) = &input.net {
        mounts.extend(
            n.files
                .iter()
                .map(|(host, target)| bind(host, target, true)),
        );
    }
    let mut tmpfs = HashMap::new();
    tmpfs.insert(
        "/tmp".to_string(),
        format!("rw,nosuid,nodev,size={},mode=1777", l.tmp_bytes),
    );
    let mut security_opt = Vec::new();
    if h.no_new_privileges {
        security_opt.push("no-new-privileges".to_string());
    }
    let (cap_drop, cap_add) = if h.drop_capabilities {
        (
            Some(vec!["ALL".to_string()]),
            Some(
                AGENT_CAPS
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
            ),
        )
    } else {
        (None, None)
    };
    let host_config = HostConfig {
        // With network too: the host side gives the container's own namespace a
        // filtered slirp4netns (docker's bridge would reach the host's networks).
        network_mode: Some("none".to_string()),
        readonly_rootfs: Some(!spec.writable),
        tmpfs: Some(tmpfs),
        mounts: Some(mounts),
        memory: Some(l.memory_bytes as i64),
        memory_swap: Some(l.memory_bytes as i64),
        nano_cpus: Some((l.cpus * 1e9) as i64),
        pids_limit: Some(l.pids as i64),
        security_opt: Some(security_opt),
        cap_drop,
        cap_add,
        group_add: input.agent_group.map(|g| vec![g.to_string()]),
        ipc_mode: Some("private".into()),
        init: Some(false),
        ..Default::default()
    };
    let mut label = HashMap::new();
    label.insert(labels::PROVIDER.to_string(), "docker".to_string());
    label.insert(labels::ID.to_string(), input.id.clone());
    label.insert(labels::CREATED.to_string(), input.now_ms.to_string());
    label.insert(labels::EXPIRES.to_string(), expires_at_ms.to_string());
    if let Some(p) = input.owner_pid {
        label.insert(labels::OWNER_PID.to_string(), p.to_string());
    }
    if let Some(t) = input.owner_ticks {
        label.insert(labels::OWNER_TICKS.to_string(), t.to_string());
    }
    // Credential values stay out of the labels (anyone with the docker socket reads
    // them) and so out of `inspect`.
    let mut shown = serde_json::to_value(spec.spec()).unwrap_or_default();
    shown["network"] = serde_json::to_value(spec.network.redacted()).unwrap_or_default();
    label.insert(
        labels::SPEC.to_string(),
        serde_json::to_string(&shown).unwrap_or_default(),
    );
    for (k, v) in &spec.labels {
        label.insert(format!("{}{k}", labels::USER_PREFIX), v.clone());
    }
    let applied = applied(spec, user, &workdir, input);
    label.insert(
        labels::APPLIED.to_string(),
        serde_json::to_string(&applied).unwrap_or_default(),
    );
    let body = ContainerCreateBody {
        image: spec.image.clone(),
        entrypoint: Some(vec![agent_path(), "container".to_string()]),
        cmd: Some(Vec::new()),
        // The agent must start as root to drop each exec to the sandbox user.
        user: Some("0:0".into()),
        hostname: Some(spec.hostname.clone()),
        working_dir: Some(workdir),
        env: Some(Vec::new()),
        labels: Some(label),
        network_disabled: Some(spec.network == Network::None),
        host_config: Some(host_config),
        ..Default::default()
    };
    Plan {
        body,
        config: ContainerConfig {
            exec,
            expires_at_ms,
        },
        applied,
        expires_at_ms,
        userns: input.userns,
    }
}

fn applied(
    spec: &ValidatedSpec,
    user: stockade_spec::User,
    workdir: &str,
    input: &PlanInput,
) -> Vec<Wall> {
    use WallKind as K;
    let net = input.net.as_ref();
    let l = &spec.limits;
    let h = spec.hardening;
    let mut v = vec![
        Wall::on(
            K::Isolation,
            "a docker container, the stockade agent as PID 1 (static, bind-mounted read-only); no docker exec",
        ),
        if spec.writable {
            Wall::on(
                K::Root,
                "the image under the container's writable layer (discarded at destroy)",
            )
        } else {
            Wall::on(K::Root, "the image, read-only")
        },
        Wall::on(
            K::Tmp,
            format!("tmpfs {} (nosuid, nodev)", format_size(l.tmp_bytes)),
        ),
        match (&spec.network, net) {
            (Network::None, _) | (_, None) => {
                Wall::on(K::Network, "none (docker network mode none, loopback only)")
            }
            (_, Some(n)) => n.applied.clone(),
        },
        Wall::on(
            K::Limits,
            format!(
                "cgroups: memory {} (swap = memory: no swap), cpu {} CPUs, pids {}",
                format_size(l.memory_bytes),
                l.cpus,
                l.pids
            ),
        ),
        Wall::on(
            K::User,
            format!("uid {} gid {}, workdir {workdir}", user.uid, user.gid),
        ),
        match input.userns {
            Some((u, g)) => Wall::on(
                K::UserNamespace,
                format!(
                    "dockerd's userns-remap; uid 0 inside is host uid {u}, the code's uid {} host uid {} (gid {}), no host account",
                    user.uid,
                    u + user.uid,
                    g + user.gid
                ),
            ),
            None => Wall::off(
                K::UserNamespace,
                format!(
                    "NONE (dockerd without userns-remap, allowed by {}=1): the code's uid {} is the host's uid {}",
                    crate::HOST_IDS_ENV,
                    user.uid,
                    user.uid
                ),
            ),
        },
        Wall::on(K::Lifetime, format!("{} s", spec.timeout_secs)),
    ];
    v.push(if h.drop_capabilities {
        Wall::on(
            K::Capabilities,
            format!(
                "the code has none; the container keeps only {} for the agent (CHOWN until its socket's directory is handed from uid 0 to 65534), all others dropped",
                AGENT_CAPS.join(", ")
            ),
        )
    } else {
        Wall::off(
            K::Capabilities,
            "NOT dropped (opt-out; docker's default set)",
        )
    });
    v.push(if h.no_new_privileges {
        Wall::on(K::NoNewPrivs, "set (container and every exec)")
    } else {
        Wall::off(K::NoNewPrivs, "NOT set (opt-out)")
    });
    v.push(if h.seccomp {
        Wall::on(
            K::Seccomp,
            format!(
                "docker's default profile on the container, plus on every exec: {}",
                stockade_sys::seccomp::describe()
            ),
        )
    } else {
        Wall::off(
            K::Seccomp,
            "docker's default profile only (stockade allowlist OFF, opt-out)",
        )
    });
    v.push(if h.landlock {
        Wall::on(
            K::Landlock,
            "read-only except /tmp, /dev/shm and writable mounts",
        )
    } else {
        Wall::off(K::Landlock, "OFF (opt-out)")
    });
    v.push(Wall::on(
        K::AgentChannel,
        format!("{CONTAINER_DIR}/agent.sock in a root-only (0700) directory the code cannot enter"),
    ));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_spec::{Mount as SpecMount, SandboxSpec};

    fn input() -> PlanInput {
        PlanInput {
            id: "sb-0123456789ab".into(),
            state_dir: "/run/stockade-docker/sb-0123456789ab".into(),
            agent: "/opt/stockade-agent".into(),
            now_ms: 1_000,
            owner_pid: Some(42),
            owner_ticks: Some(7),
            image: ImageFacts::default(),
            agent_group: None,
            net: None,
            userns: Some((231_072, 231_072)),
        }
    }

    fn spec(s: SandboxSpec) -> ValidatedSpec {
        s.validate().unwrap()
    }

    #[test]
    fn default_spec_is_locked_down() {
        let p = plan(
            &spec(SandboxSpec {
                image: Some("debian".into()),
                ..Default::default()
            }),
            &input(),
        );
        let hc = p.body.host_config.as_ref().unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("none"));
        assert_eq!(p.body.network_disabled, Some(true));
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.memory, Some(512 << 20));
        assert_eq!(hc.memory_swap, hc.memory, "no swap");
        assert_eq!(hc.nano_cpus, Some(1_000_000_000));
        assert_eq!(hc.pids_limit, Some(64));
        assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(hc.cap_add.as_ref().unwrap(), &AGENT_CAPS.to_vec());
        assert_eq!(
            hc.security_opt.as_deref(),
            Some(&["no-new-privileges".to_string()][..]),
            "no seccomp=unconfined: docker's default profile stays"
        );
        assert_eq!(
            hc.tmpfs.as_ref().unwrap()["/tmp"],
            "rw,nosuid,nodev,size=67108864,mode=1777"
        );
        assert_eq!(p.body.user.as_deref(), Some("0:0"));
        assert_eq!(
            p.body.entrypoint.as_ref().unwrap(),
            &["/.stockade/agent", "container"]
        );
        let mounts = hc.mounts.as_ref().unwrap();
        assert_eq!(mounts[0].target.as_deref(), Some("/.stockade"));
        assert_eq!(mounts[1].read_only, Some(true), "the agent is read-only");
        let l = p.body.labels.as_ref().unwrap();
        assert_eq!(l[labels::PROVIDER], "docker");
        assert_eq!(l[labels::OWNER_PID], "42");
        assert_eq!(l[labels::EXPIRES], "301000");
        assert_eq!(p.expires_at_ms, 301_000);
        let e = &p.config.exec;
        assert_eq!((e.uid, e.gid), (1000, 1000));
        assert!(e.no_new_privs && e.drop_caps && e.seccomp);
        assert_eq!(
            e.landlock_writable.as_deref(),
            Some(&["/tmp".to_string(), "/dev/shm".to_string()][..])
        );
        assert_eq!(e.env.keys().collect::<Vec<_>>(), ["HOME", "LANG", "PATH"]);
    }

    #[test]
    fn opt_outs_and_mounts_map_to_docker() {
        let mut s = SandboxSpec {
            image: Some("debian".into()),
            writable: true,
            workdir: Some("/work".into()),
            mounts: vec![SpecMount {
                host: "/srv/data".into(),
                target: "/data".into(),
                writable: false,
            }],
            ..Default::default()
        };
        s.hardening.drop_capabilities = false;
        s.hardening.no_new_privileges = false;
        s.limits.cpus = 0.5;
        s.env.insert("A".into(), "b".into());
        let mut i = input();
        i.image = ImageFacts {
            env: vec!["A=image".into(), "IMG=1".into()],
            workdir: Some("/app".into()),
            user: ImageFacts::parse_user("1234:99"),
        };
        let p = plan(&spec(s), &i);
        let hc = p.body.host_config.as_ref().unwrap();
        assert_eq!(hc.readonly_rootfs, Some(false));
        assert_eq!(hc.cap_drop, None);
        assert_eq!(hc.security_opt.as_deref(), Some(&[][..]));
        assert_eq!(hc.nano_cpus, Some(500_000_000));
        let m = &hc.mounts.as_ref().unwrap()[2];
        assert_eq!(
            (m.source.as_deref(), m.target.as_deref(), m.read_only),
            (Some("/srv/data"), Some("/data"), Some(true))
        );
        let e = &p.config.exec;
        assert_eq!(
            e.workdir, "/work",
            "the spec's workdir wins over the image's"
        );
        assert_eq!((e.uid, e.gid), (1234, 99), "the image's numeric user");
        assert_eq!(e.env["A"], "b", "the spec's env wins");
        assert_eq!(e.env["IMG"], "1");
        assert_eq!(e.landlock_writable.as_deref(), Some(&["/".to_string()][..]));
        assert!(
            p.applied
                .iter()
                .any(|w| w.kind == WallKind::Capabilities && !w.enforced)
        );
    }

    #[test]
    fn image_users_only_numeric_non_root() {
        assert_eq!(ImageFacts::parse_user("1000"), Some((1000, 1000)));
        assert_eq!(ImageFacts::parse_user("0"), None);
        assert_eq!(ImageFacts::parse_user("app"), None);
        assert_eq!(ImageFacts::parse_user("1000:0"), None);
    }
}
