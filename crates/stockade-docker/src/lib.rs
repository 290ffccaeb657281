//! The docker provider: each sandbox is a hardened container whose PID 1 is the
//! Stockade agent, driven over the Docker Engine API (bollard, version negotiated).
//!
//! `create` maps the spec to a container ([`plan`]: no network, read-only root, a
//! `/tmp` tmpfs, memory without swap, CPU quota, pids cap, docker's default seccomp
//! profile, no_new_privs, every capability dropped but the four the agent needs),
//! bind-mounts the static agent read-only as the entrypoint, and waits for the agent
//! to answer on its socket, in a host directory mounted at `/.stockade` (0700, root's)
//! that the code cannot enter. Execs, deadlines, output capture and file operations
//! then go through the same agent code as on the native provider; there is no
//! `docker exec`: [`DockerLauncher`] is this provider's [`Launcher`] and
//! [`DockerProvider`] is it plus the agent host ([`AgentProvider`]). A detached `stockade-agent docker-watch` removes the container when
//! its owner dies or its lifetime passes; [`DockerProvider::gc`] reaps by label
//! whatever a crash left behind.

pub mod engine;
mod host;
pub mod image;
pub mod plan;
mod start;

use host::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use stockade_agent_host::{AgentProvider, Launcher, UnixSocket};
use stockade_agent_proto::launch::{PAUSED_FILE, PausedTime, ROOT_NOT_ENTERABLE};
use stockade_agent_proto::{EgressDenial, now_ms};
use stockade_core::host::check_sandbox_id;
use stockade_core::spec::Network;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, Error, GcReport, Result, SandboxInfo,
    ValidatedSpec,
};
use stockade_linux::freezer::{PauseMark, ResumeMark};
use tokio::sync::OnceCell;

pub use plan::{AGENT_CAPS, container_name, labels};
pub use stockade_agent_host::{
    BUILD_STATIC_AGENT as BUILD_AGENT, find_static_agent as find_agent, is_static,
};

/// Default root of the per-sandbox host directories mounted at `/.stockade`, for root
/// (`/run/stockade-docker`); other users keep theirs in their runtime directory
/// ([`stockade_core::host::runtime_dir`]).
pub const DEFAULT_STATE_ROOT: &str = "/run/stockade-docker";

/// The docker provider: the docker launcher with the agent host.
pub type DockerProvider = AgentProvider<DockerLauncher>;

/// Launches docker sandboxes: a hardened container per sandbox whose PID 1 is the
/// static agent.
#[derive(Debug)]
pub struct DockerLauncher {
    socket: PathBuf,
    state_root: PathBuf,
    image_store: Option<PathBuf>,
    /// Resolvers an egress policy's allowed lookups go to; empty: the host's.
    dns_upstreams: Vec<String>,
    docker: OnceCell<Docker>,
    /// dockerd's user namespace ([`engine::userns`]), asked once.
    userns: OnceCell<Option<(u32, u32)>>,
    /// Whether containers may share the host's ids (a dockerd without userns-remap):
    /// [`HOST_IDS_ENV`] or [`DockerLauncher::allow_host_ids`].
    allow_host_ids: bool,
}

/// Set to `1` to let the docker provider run on a dockerd without `userns-remap`, where
/// the sandbox user is the host's uid of the same number.
pub const HOST_IDS_ENV: &str = "STOCKADE_DOCKER_HOST_IDS";

impl Default for DockerLauncher {
    fn default() -> Self {
        DockerLauncher::new()
    }
}

/// The directory of the state root holding each sandbox's network monitor directory.
const NET_DIRS: &str = ".net";

fn new_id() -> String {
    stockade_core::host::new_sandbox_id()
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        kind: "sandbox",
        id: id.to_string(),
    }
}

/// Where the sandboxes of the dockerd on `socket` keep their host directories:
/// `base` for the default dockerd, `base/endpoint-PATH` (the socket's path, `/` as
/// `-`) for another one, so a gc against one dockerd never takes the directories of
/// another's live sandboxes for its own leftovers.
pub fn state_root_for(base: &Path, socket: &Path) -> PathBuf {
    let default = [
        Path::new("/var/run/docker.sock"),
        Path::new("/run/docker.sock"),
    ];
    if default.contains(&socket) {
        return base.to_path_buf();
    }
    let name: String = socket
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    base.join(format!("endpoint-{name}"))
}

impl DockerLauncher {
    /// A launcher on `$DOCKER_HOST` (unix) or `/var/run/docker.sock`, keeping its
    /// host directories under the caller's runtime directory `stockade-docker`
    /// ([`DEFAULT_STATE_ROOT`] for root) and reading missing images from
    /// `$STOCKADE_HOME/images`. Connects on first use.
    pub fn new() -> DockerLauncher {
        let socket = engine::socket_path();
        DockerLauncher {
            state_root: state_root_for(
                &stockade_core::host::runtime_dir("stockade-docker"),
                &socket,
            ),
            socket,
            image_store: None,
            dns_upstreams: Vec::new(),
            docker: OnceCell::new(),
            userns: OnceCell::new(),
            allow_host_ids: std::env::var(HOST_IDS_ENV).is_ok_and(|v| v == "1"),
        }
    }

    /// Whether sandboxes may run on a dockerd without a user namespace (see
    /// [`HOST_IDS_ENV`]).
    pub fn allow_host_ids(mut self, allow: bool) -> DockerLauncher {
        self.allow_host_ids = allow;
        self
    }

    /// Talks to dockerd on `socket` instead (its sandboxes' host directories apart
    /// from those of the default dockerd, unless [`DockerLauncher::with_state_root`]
    /// says where).
    pub fn with_socket(mut self, socket: impl Into<PathBuf>) -> DockerLauncher {
        let socket = socket.into();
        if self.state_root
            == state_root_for(
                &stockade_core::host::runtime_dir("stockade-docker"),
                &self.socket,
            )
        {
            self.state_root = state_root_for(
                &stockade_core::host::runtime_dir("stockade-docker"),
                &socket,
            );
        }
        self.socket = socket;
        self
    }

    /// Keeps the per-sandbox host directories under `root`.
    pub fn with_state_root(mut self, root: impl Into<PathBuf>) -> DockerLauncher {
        self.state_root = root.into();
        self
    }

    /// Reads images dockerd lacks from the store at `root`.
    /// Forwards the allowed lookups of sandboxes with an egress policy to these
    /// resolvers instead of the host's (`/etc/resolv.conf`).
    pub fn with_dns_upstreams(mut self, upstreams: &[std::net::SocketAddr]) -> DockerLauncher {
        self.dns_upstreams = upstreams.iter().map(ToString::to_string).collect();
        self
    }

    pub fn with_image_store(mut self, root: impl Into<PathBuf>) -> DockerLauncher {
        self.image_store = Some(root.into());
        self
    }

    /// The connection to dockerd (made once).
    pub async fn docker(&self) -> Result<&Docker> {
        self.docker
            .get_or_try_init(|| engine::connect(&self.socket))
            .await
    }

    /// Makes sure dockerd has `reference` (from dockerd, the image store, or a pull
    /// through dockerd), reporting each step to `progress`.
    pub async fn ensure_image(
        &self,
        reference: &str,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<image::Source> {
        let docker = self.docker().await?;
        image::ensure(docker, reference, self.image_store.as_deref(), progress)
            .await
            .map(|(_, s)| s)
    }

    /// Where the network monitor of sandbox `id` keeps its files and `net.sock`: not
    /// below [`Self::dir`], which the container sees at `/.stockade`.
    fn net_dir(&self, id: &str) -> PathBuf {
        self.state_root.join(NET_DIRS).join(id)
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.state_root.join(id)
    }

    /// The deadline of sandbox `id`, planned for `planned_ms`: moved by the time it
    /// spent paused, which its lifetime does not count (as on native).
    fn deadline(&self, id: &str, planned_ms: u64, now: u64) -> u64 {
        PausedTime::read(&self.dir(id), now).deadline(planned_ms)
    }

    /// Whether sandbox `id` is paused: the marker in its host directory, written
    /// before `docker pause` and removed after `docker unpause` (execs are refused on
    /// it without asking dockerd).
    fn is_paused(&self, id: &str) -> bool {
        self.dir(id).join(PAUSED_FILE).exists()
    }

    /// The running (or paused) container of sandbox `id`, and whether docker has it
    /// paused; a dead one is explained.
    async fn live(&self, id: &str) -> Result<bool> {
        check_sandbox_id(id)?;
        let c = self
            .inspect_container(id)
            .await?
            .ok_or_else(|| not_found(id))?;
        let state = c.state.unwrap_or_default();
        if state.running != Some(true) {
            return Err(self.gone(id, not_found(id)).await);
        }
        Ok(state.paused == Some(true))
    }

    async fn inspect_container(&self, id: &str) -> Result<Option<ContainerInspectResponse>> {
        let docker = self.docker().await?;
        match docker
            .inspect_container(
                &container_name(id),
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if engine::status(&e) == Some(404) => Ok(None),
            Err(e) => Err(engine::docker_error(&format!("inspect sandbox {id}"), e)),
        }
    }

    /// Why a sandbox whose agent stopped answering is gone: its container died under
    /// us (OOM, `docker kill`), was removed, or its lifetime passed.
    async fn gone(&self, id: &str, cause: Error) -> Error {
        let c = match self.inspect_container(id).await {
            Ok(Some(c)) => c,
            Ok(None) => return not_found(id),
            // dockerd cannot be asked (stopped, restarting): that is what to tell, not
            // the sandbox's absence.
            Err(e) => return e,
        };
        let state = c.state.unwrap_or_default();
        if state.running == Some(true) {
            return cause;
        }
        let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
        let now = now_ms();
        let expired = labels
            .get(labels::EXPIRES)
            .and_then(|e| e.parse::<u64>().ok())
            .is_some_and(|e| now >= self.deadline(id, e, now));
        if state.oom_killed == Some(true) {
            return Error::LimitExceeded {
                what: format!(
                    "memory of sandbox {id} (its container was killed by the OOM killer; destroy it)"
                ),
                limit: "the sandbox's memory limit".into(),
            };
        }
        let code = state.exit_code.unwrap_or(-1);
        let how = if expired {
            "its lifetime passed".to_string()
        } else if code > 128 {
            format!(
                "its container was killed by signal {} (docker kill, docker rm -f, or the host)",
                code - 128
            )
        } else {
            format!("its container exited with code {code}")
        };
        Error::Unavailable {
            what: format!("sandbox {id}"),
            reason: format!("it died under us: {how}"),
            fix: format!("destroy it (stockade rm {id}) and create a new one"),
        }
    }

    /// Removes the container (force: kills everything in it) and the host directory.
    async fn remove(&self, id: &str) -> Result<()> {
        let docker = self.docker().await?;
        let name = container_name(id);
        match docker
            .remove_container(
                &name,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if matches!(engine::status(&e), Some(404)) => {}
            // A removal already under way (the watcher, a concurrent destroy).
            Err(e) if matches!(engine::status(&e), Some(409)) => {
                self.wait_gone(id).await?;
            }
            Err(e) => return Err(engine::docker_error(&format!("remove container {name}"), e)),
        }
        let _ = std::fs::remove_dir_all(self.net_dir(id));
        match std::fs::remove_dir_all(self.dir(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(
                format!("cannot remove {}", self.dir(id).display()),
                e,
            )),
        }
    }

    async fn wait_gone(&self, id: &str) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(30);
        while self.inspect_container(id).await?.is_some() {
            if Instant::now() > until {
                return Err(Error::Timeout {
                    operation: format!("removing sandbox {id}"),
                    after_ms: 30_000,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Every container of this provider: id, docker state (`running`, `created`,
    /// `exited`...) and labels.
    async fn containers(&self) -> Result<Vec<(String, String, HashMap<String, String>)>> {
        let docker = self.docker().await?;
        let mut filters = HashMap::new();
        filters.insert("label", vec![format!("{}=docker", labels::PROVIDER)]);
        let list = docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| engine::docker_error("list containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let labels = c.labels.unwrap_or_default();
                let id = labels.get(labels::ID)?.clone();
                let state = c.state.map(|s| s.to_string()).unwrap_or_default();
                Some((id, state, labels))
            })
            .collect())
    }

    /// `info` with the network policy in force: a container's labels keep the one it
    /// was created with, its network monitor's `state.json` the one `set_network` put
    /// in place since.
    fn with_live_network(&self, mut info: SandboxInfo) -> SandboxInfo {
        let path = self.net_dir(&info.id).join("state.json");
        if let Some(net) = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("spec")?.get("network").cloned())
        {
            info.spec["network"] = net;
        }
        info
    }

    fn info_from_labels(id: &str, labels: &HashMap<String, String>) -> SandboxInfo {
        let num = |k: &str| labels.get(k).and_then(|v| v.parse::<u64>().ok());
        SandboxInfo {
            id: id.to_string(),
            provider: "docker".into(),
            created_at_ms: num(labels::CREATED).unwrap_or(0),
            expires_at_ms: num(labels::EXPIRES).unwrap_or(0),
            owner_pid: num(labels::OWNER_PID).map(|p| p as u32),
            spec: labels
                .get(labels::SPEC)
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default(),
            applied: labels
                .get(labels::APPLIED)
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default(),
            state: stockade_core::RunState::Running,
            steps: Vec::new(),
        }
    }

    /// Reaps, by label, every Stockade container that is not running, whose owner
    /// died, or whose lifetime passed, and host directories without a container. The
    /// daemon calls this too.
    pub async fn reap(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        let now = now_ms();
        let containers = self.containers().await?;
        for (id, state, labels) in &containers {
            let num = |k: &str| labels.get(k).and_then(|v| v.parse::<u64>().ok());
            let expired = num(labels::EXPIRES).is_some_and(|e| now >= self.deadline(id, e, now));
            // A container being created right now is `created` until it starts.
            let starting = state == "created"
                && num(labels::CREATED).is_some_and(|c| now.saturating_sub(c) < 60_000);
            // A paused container is alive (docker pause); its owner's death still ends
            // it, and its lifetime once the time it spent paused is added.
            let dead = state != "running" && state != "paused" && !starting;
            let owner_dead = match (num(labels::OWNER_PID), num(labels::OWNER_TICKS)) {
                (Some(pid), Some(ticks)) => {
                    !stockade_sys::process::is_same_process(pid as u32, ticks)
                }
                (Some(pid), None) => !Path::new(&format!("/proc/{pid}")).exists(),
                _ => false,
            };
            if dead || expired || owner_dead {
                match self.remove(id).await {
                    Ok(()) => report.reaped.push(id.clone()),
                    Err(e) => report.errors.push(format!("sandbox {id}: {e}")),
                }
            }
        }
        if let Ok(dir) = std::fs::read_dir(&self.state_root) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if check_sandbox_id(&name).is_err()
                    || containers.iter().any(|(id, _, _)| *id == name)
                {
                    continue;
                }
                // A directory made moments ago may belong to a create in progress.
                let young = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(60))
                    .unwrap_or(false);
                if young {
                    continue;
                }
                match std::fs::remove_dir_all(e.path()) {
                    Ok(()) => report.reaped.push(name),
                    Err(err) => report
                        .errors
                        .push(format!("cannot remove {}: {err}", e.path().display())),
                }
            }
        }
        // Network monitor directories whose sandbox is gone (its watcher, and with it
        // slirp4netns, ended with the container).
        if let Ok(dir) = std::fs::read_dir(self.state_root.join(NET_DIRS)) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let live = containers.iter().any(|(id, _, _)| *id == name)
                    && !report.reaped.contains(&name);
                let young = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(60))
                    .unwrap_or(false);
                if check_sandbox_id(&name).is_ok() && !live && !young {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(report)
    }
}

/// The docker provider's optional verbs: `docker pause`, a live egress policy (as
/// root: the host side enters the container's network namespace), files as any uid
/// of the sandbox; no fork or snapshots (docker's CRIU checkpoint is experimental),
/// no usage.
pub const VERBS: stockade_core::Verbs = stockade_core::Verbs {
    pause: true,
    fork: false,
    snapshots: false,
    egress_control: true,
    usage: false,
    files_as_user: true,
    terminals: true,
};

#[async_trait]
impl Launcher for DockerLauncher {
    type Transport = UnixSocket;

    async fn prepare_image(
        &self,
        reference: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<()> {
        self.ensure_image(reference, progress).await.map(drop)
    }

    fn name(&self) -> &'static str {
        "docker"
    }

    /// Everything but running without an image (docker needs one) and network egress:
    /// docker's bridge lets the code reach the host's and the LAN's services, weaker
    /// than the spec promises, so egress is refused rather than weakened.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            host_rootfs: false,
            // The host side enters the container's network namespace: root only.
            network_egress: stockade_core::host::is_root(),
            network_policy: stockade_core::host::is_root(),
            verbs: stockade_core::Verbs {
                egress_control: stockade_core::host::is_root(),
                ..VERBS
            },
            ..Capabilities::FULL_LINUX
        }
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = Vec::new();
        match self.docker().await {
            Ok(d) => {
                let v = d.version().await.ok();
                checks.push(Check {
                    name: "dockerd".into(),
                    ok: true,
                    detail: format!(
                        "{} answers: engine {}, API {} (client negotiated {})",
                        self.socket.display(),
                        v.as_ref()
                            .and_then(|v| v.version.clone())
                            .unwrap_or_default(),
                        v.as_ref()
                            .and_then(|v| v.api_version.clone())
                            .unwrap_or_default(),
                        d.client_version()
                    ),
                    fix: None,
                });
            }
            Err(Error::Unavailable { reason, fix, .. }) => checks.push(Check {
                name: "dockerd".into(),
                ok: false,
                detail: reason,
                fix: Some(fix),
            }),
            Err(e) => return Err(e),
        }
        if self.docker().await.is_ok() {
            checks.push(match self.userns().await {
                Ok(Some((u, g))) => Check {
                    name: "user namespace".into(),
                    ok: true,
                    detail: format!("dockerd remaps ids: root inside is host uid {u} gid {g}"),
                    fix: None,
                },
                Ok(None) => Check {
                    name: "user namespace".into(),
                    ok: self.allow_host_ids,
                    detail: format!(
                        "dockerd runs containers with the host's ids{}",
                        if self.allow_host_ids { format!(" (allowed by {HOST_IDS_ENV}=1)") } else { String::new() }
                    ),
                    fix: (!self.allow_host_ids).then(|| {
                        "put \"userns-remap\": \"default\" in /etc/docker/daemon.json and restart dockerd".into()
                    }),
                },
                Err(e) => Check {
                    name: "user namespace".into(),
                    ok: false,
                    detail: e.to_string(),
                    fix: None,
                },
            });
        }
        match find_agent() {
            Ok(p) => checks.push(Check {
                name: "static agent".into(),
                ok: true,
                detail: format!("{} (statically linked)", p.display()),
                fix: None,
            }),
            Err(e) => checks.push(Check {
                name: "static agent".into(),
                ok: false,
                detail: e.to_string(),
                fix: Some(BUILD_AGENT.into()),
            }),
        }
        Ok(checks)
    }

    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        self.create_container(&spec, opts).await
    }

    async fn transport(&self, id: &str) -> Result<UnixSocket> {
        check_sandbox_id(id)?;
        let sock = self.dir(id).join("agent.sock");
        if !sock.exists() {
            return Err(self.gone(id, not_found(id)).await);
        }
        // Its agent is frozen with the rest and would not answer.
        if self.is_paused(id) {
            return Err(stockade_core::paused_error(id));
        }
        // Only a caller that is not root checks the agent's uid, which under
        // userns-remap is the remapped root's (root talks to its own directory).
        let userns = if stockade_core::host::is_root() {
            None
        } else {
            self.userns().await?
        };
        Ok(agent_socket(id, sock, userns))
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.remove(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        Ok(self
            .containers()
            .await?
            .iter()
            .filter(|(_, state, _)| state == "running" || state == "paused")
            .map(|(id, state, l)| {
                let mut info = self.with_live_network(Self::info_from_labels(id, l));
                info.expires_at_ms = self.deadline(id, info.expires_at_ms, now_ms());
                if state == "paused" || self.is_paused(id) {
                    info.state = stockade_core::RunState::Paused;
                }
                info
            })
            .collect())
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        check_sandbox_id(id)?;
        let c = self
            .inspect_container(id)
            .await?
            .ok_or_else(|| not_found(id))?;
        if c.state.as_ref().and_then(|s| s.running) != Some(true) {
            return Err(self.gone(id, not_found(id)).await);
        }
        let paused = c.state.as_ref().and_then(|s| s.paused) == Some(true);
        let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
        let mut info = self.with_live_network(Self::info_from_labels(id, &labels));
        info.expires_at_ms = self.deadline(id, info.expires_at_ms, now_ms());
        if paused || self.is_paused(id) {
            info.state = stockade_core::RunState::Paused;
        }
        Ok(info)
    }

    async fn gc(&self) -> Result<GcReport> {
        self.reap().await
    }

    async fn explain(&self, id: &str, error: Error) -> Error {
        self.gone(id, error).await
    }

    /// `docker pause`: dockerd freezes the container's cgroup (runc's freezer), so
    /// every process stops at once, invisibly to it, and its memory stays in RAM.
    /// Through dockerd rather than our own freeze of its cgroup, so docker knows
    /// (`docker ps` says Paused, and `docker rm -f` of it works).
    async fn host_ids(&self, uid: u32, gid: u32) -> Result<(u32, u32)> {
        Ok(match self.userns().await? {
            Some((u, g)) => (u.saturating_add(uid), g.saturating_add(gid)),
            None => (uid, gid),
        })
    }

    fn pausing(&self) -> Option<&dyn stockade_core::Pausing> {
        Some(self)
    }

    /// As root only: the host side enters the container's network namespace.
    fn egress_control(&self) -> Option<&dyn stockade_core::EgressControl> {
        stockade_core::host::is_root().then_some(self as &dyn stockade_core::EgressControl)
    }

    fn files_as_user(&self) -> bool {
        true
    }

    fn terminals(&self) -> bool {
        true
    }

    fn why_not(&self, verb: stockade_core::Verb) -> &'static str {
        match verb {
            stockade_core::Verb::Fork => {
                "docker cannot copy a running container's processes into new containers (its \
                 CRIU checkpoint is experimental and not used here); pause and resume work \
                 (docker pause)"
            }
            stockade_core::Verb::EgressControl => {
                "changing a container's egress policy enters its network namespace, which needs root"
            }
            v => stockade_core::default_reason(v),
        }
    }
}

#[async_trait]
impl stockade_core::Pausing for DockerLauncher {
    async fn pause(&self, id: &str) -> Result<()> {
        let docker_paused = self.live(id).await?;
        let mark = PauseMark::begin(id, &self.dir(id), docker_paused, now_ms())?;
        let docker = self.docker().await?;
        if let Err(e) = docker.pause_container(&container_name(id)).await {
            mark.undo();
            return Err(engine::docker_error(&format!("pause sandbox {id}"), e));
        }
        Ok(())
    }

    async fn resume(&self, id: &str) -> Result<()> {
        let docker_paused = self.live(id).await?;
        let mark = ResumeMark::begin(id, &self.dir(id), docker_paused)?;
        if docker_paused {
            let docker = self.docker().await?;
            docker
                .unpause_container(&container_name(id))
                .await
                .map_err(|e| engine::docker_error(&format!("resume sandbox {id}"), e))?;
        }
        mark.finish(now_ms())
    }
}

#[async_trait]
impl stockade_core::EgressControl for DockerLauncher {
    /// From the sandbox's network monitor alone, not dockerd: an exec that ran to its
    /// end while dockerd went away keeps its outcome (this is asked after every exec).
    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        check_sandbox_id(id)?;
        if !self.dir(id).exists() {
            return Err(not_found(id));
        }
        stockade_linux::egress_denied_via(&self.net_dir(id).join("net.sock"), since_ms).await
    }

    async fn set_network(&self, id: &str, network: &Network) -> Result<()> {
        check_sandbox_id(id)?;
        let info = self.inspect(id).await?;
        stockade_linux::set_network_via(
            &self.net_dir(id).join("net.sock"),
            id,
            network,
            info.spec.get("network").cloned().unwrap_or_default(),
            &self.dns_upstreams,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dockerd_keeps_its_sandboxes_directories_apart() {
        let base = Path::new("/run/stockade-docker");
        for default in ["/var/run/docker.sock", "/run/docker.sock"] {
            assert_eq!(state_root_for(base, Path::new(default)), base);
        }
        let other = state_root_for(base, Path::new("/run/user/1000/docker.sock"));
        assert_eq!(other, base.join("endpoint-run-user-1000-docker.sock"));
        assert_ne!(
            other,
            state_root_for(base, Path::new("/srv/d2/docker.sock"))
        );
        // The default dockerd's gc skips the other endpoints' directories: they are
        // not sandbox ids.
        assert!(check_sandbox_id("endpoint-run-user-1000-docker.sock").is_err());
        let l = DockerLauncher::new().with_socket("/srv/d2/docker.sock");
        assert!(
            l.state_root.ends_with("endpoint-srv-d2-docker.sock"),
            "{:?}",
            l.state_root
        );
        let l = DockerLauncher::new()
            .with_state_root("/tmp/x")
            .with_socket("/srv/d2/docker.sock");
        assert_eq!(l.state_root, Path::new("/tmp/x"));
    }
}
