//! [`WasmLauncher`]: starts one runner process per sandbox and keeps track of them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use stockade_agent_host::{Launcher, UnixSocket};
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, Error, GcReport, Result, SandboxInfo,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::{oneshot, watch};

use crate::runner::{self, Launch, Ready};
use crate::{WasmConfig, home, runtime};

/// How long a destroyed sandbox's runner gets to end its sandbox and remove its files
/// after its stdin closes, before it is killed.
const GRACE: Duration = Duration::from_secs(2);

/// The wasm provider's launcher: each sandbox is a `stockade-wasm-runner` process
/// (see [`crate::runner`]) whose agent socket this launcher hands to the agent host.
/// Sandboxes belong to the process that made them: a runner ends when its stdin,
/// which only this process holds, closes.
#[derive(Clone, Debug)]
pub struct WasmLauncher {
    config: WasmConfig,
    live: Arc<Mutex<HashMap<String, Live>>>,
}

#[derive(Debug)]
struct Live {
    info: SandboxInfo,
    socket: PathBuf,
    /// The runner's process (its directory is `<scratch>/<pid>`).
    pid: u32,
    /// The runner's stdin: dropping it tells the runner to end its sandbox.
    lifeline: Option<ChildStdin>,
    /// Asks the waiter to kill the runner.
    kill: Option<oneshot::Sender<()>>,
    /// Becomes true once the runner has exited and its files are gone.
    exited: watch::Receiver<bool>,
}

impl Default for WasmLauncher {
    fn default() -> Self {
        WasmLauncher::with_config(WasmConfig::default())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WasmLauncher {
    /// A launcher whose runners use `config`.
    pub fn with_config(config: WasmConfig) -> WasmLauncher {
        WasmLauncher {
            config,
            live: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &WasmConfig {
        &self.config
    }

    /// The host directory behind a sandbox's `/tmp` (for tests and diagnostics).
    pub fn tmp_host_path(&self, id: &str) -> Result<PathBuf> {
        let socket = self.socket(id)?;
        Ok(socket.with_file_name("tmp"))
    }

    /// The process id of a sandbox's runner.
    pub fn runner_pid(&self, id: &str) -> Result<u32> {
        lock(&self.live)
            .get(id)
            .map(|l| l.pid)
            .ok_or_else(|| not_found(id))
    }

    fn socket(&self, id: &str) -> Result<PathBuf> {
        lock(&self.live)
            .get(id)
            .map(|l| l.socket.clone())
            .ok_or_else(|| not_found(id))
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        kind: "sandbox",
        id: id.to_string(),
    }
}

/// What a wasm sandbox enforces (the runner's engine checks specs against the same).
/// `seccomp` and `landlock` are true because the engine meets them by construction,
/// not by applying them: a module can make no system calls at all (only the WASI
/// imports the engine links, none of which is a socket), and it reaches no file but
/// through the preopened directories. So the default spec, which asks for both, runs
/// here unchanged. `images` means modules and runtimes (`python`), not OCI images;
/// without an image there is nothing to run, hence no `host_rootfs`. `pids_limit`
/// caps concurrent execs (WASI has no fork). No CPU quota, no users, no egress, no
/// writable root.
pub fn capabilities() -> Capabilities {
    Capabilities {
        host_rootfs: false,
        images: true,
        network_egress: false,
        network_policy: false,
        writable_root: false,
        mounts: true,
        memory_limit: true,
        cpu_limit: false,
        pids_limit: true,
        users: false,
        seccomp: true,
        landlock: true,
        local_images: false,
        verbs: VERBS,
    }
}

/// The wasm provider's optional verbs: none (a WASI instance has no process to
/// pause or copy, no network and one user).
pub const VERBS: stockade_core::Verbs = stockade_core::Verbs {
    pause: false,
    fork: false,
    snapshots: false,
    egress_control: false,
    usage: false,
    files_as_user: false,
    terminals: false,
};

#[async_trait]
impl Launcher for WasmLauncher {
    type Transport = UnixSocket;

    fn name(&self) -> &'static str {
        "wasm"
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = Vec::new();
        let found = runner::find_runner();
        let key = match &found {
            Ok(_) => {
                let home = self.config.home.clone();
                tokio::task::spawn_blocking(move || runner::engine_key(&home))
                    .await
                    .map_err(|e| Error::Internal(format!("probe panicked: {e}")))?
            }
            Err(e) => Err(Error::Internal(e.to_string())),
        };
        checks.push(Check {
            name: "wasm runner".into(),
            ok: key.is_ok(),
            detail: match (&found, &key) {
                (Ok(p), Ok(k)) => format!(
                    "{} (wasmtime 48 with cranelift, epoch interruption, engine key {k})",
                    p.display()
                ),
                (Ok(p), Err(e)) => format!("{} does not run: {e}", p.display()),
                (Err(e), _) => e.to_string(),
            },
            fix: key.is_err().then(|| runner::BUILD_RUNNER.to_string()),
        });
        checks.extend(file_checks(&self.config));
        Ok(checks)
    }

    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo> {
        let path = runner::find_runner()?;
        let launch = Launch {
            config: self.config.clone(),
            spec: spec.into_inner().spec().clone(),
            owner_pid: opts.owner_pid,
        };
        let mut line = serde_json::to_vec(&launch)
            .map_err(|e| Error::Internal(format!("cannot encode the runner's launch: {e}")))?;
        line.push(b'\n');
        let mut cmd = tokio::process::Command::new(&path);
        // Nothing this process holds without close-on-exec (its caller's descriptors)
        // reaches the runner, where a module's code runs.
        stockade_sys::process::spawn_with_stdio_only(cmd.as_std_mut());
        let mut child = cmd
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::io(format!("cannot start {}", path.display()), e))?;
        let pid = child.id().unwrap_or_default();
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut answer = String::new();
        let wrote = stdin.write_all(&line).await;
        let read = BufReader::new(stdout).read_line(&mut answer).await;
        let ready = match (wrote, read) {
            (Ok(()), Ok(n)) if n > 0 => serde_json::from_str::<Ready>(&answer).map_err(|e| {
                Error::Internal(format!(
                    "the wasm runner {} answered {answer:?}: {e}",
                    path.display()
                ))
            })?,
            _ => {
                let status = child.wait().await.ok();
                return Err(Error::Internal(format!(
                    "the wasm runner {} ended before its sandbox was made ({}); its stderr \
                     says why",
                    path.display(),
                    status.map_or("status unknown".into(), |s| s.to_string())
                )));
            }
        };
        let (info, socket) = match ready {
            Ready::Ok { info, socket } => (*info, socket),
            Ready::Err { code, message } => {
                let _ = child.wait().await;
                return Err(Error::remote(code, message));
            }
        };
        let (exited_tx, exited) = watch::channel(false);
        let (kill, kill_rx) = oneshot::channel();
        let id = info.id.clone();
        lock(&self.live).insert(
            id.clone(),
            Live {
                info: info.clone(),
                socket: socket.clone(),
                pid,
                lifeline: Some(stdin),
                kill: Some(kill),
                exited,
            },
        );
        // The runner's directory, `<scratch>/<runner pid>`: the runner removes it as its
        // sandbox ends; one that was killed leaves it to this waiter.
        let runner_dir = self.config.scratch_dir.join(pid.to_string());
        let live = Arc::downgrade(&self.live);
        tokio::spawn(async move {
            tokio::select! {
                _ = child.wait() => {}
                _ = kill_rx => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
            if pid != 0 {
                let _ =
                    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(runner_dir)).await;
            }
            if let Some(live) = live.upgrade() {
                lock(&live).remove(&id);
            }
            let _ = exited_tx.send(true);
        });
        Ok(info)
    }

    async fn transport(&self, id: &str) -> Result<UnixSocket> {
        Ok(UnixSocket::new(id, self.socket(id)?).with_peer_uid(stockade_core::host::euid()))
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        let (lifeline, kill, mut exited) = {
            let mut live = lock(&self.live);
            let Some(l) = live.get_mut(id) else {
                return Ok(());
            };
            (l.lifeline.take(), l.kill.take(), l.exited.clone())
        };
        drop(lifeline);
        if tokio::time::timeout(GRACE, exited.wait_for(|e| *e))
            .await
            .is_err()
        {
            if let Some(kill) = kill {
                let _ = kill.send(());
            }
            let _ = exited.wait_for(|e| *e).await;
        }
        Ok(())
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let mut all: Vec<SandboxInfo> = lock(&self.live)
            .values()
            .filter(|l| l.lifeline.is_some())
            .map(|l| l.info.clone())
            .collect();
        all.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(all)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        lock(&self.live)
            .get(id)
            .filter(|l| l.lifeline.is_some())
            .map(|l| l.info.clone())
            .ok_or_else(|| not_found(id))
    }

    /// The runners of this process end their own sandboxes (lifetime, owner) and are
    /// reaped as they exit; this removes what runners of processes that are gone left
    /// behind (a runner killed with its host).
    async fn gc(&self) -> Result<GcReport> {
        let scratch = self.config.scratch_dir.clone();
        let mine: Vec<String> = lock(&self.live)
            .values()
            .map(|l| l.pid.to_string())
            .collect();
        tokio::task::spawn_blocking(move || sweep_dead(&scratch, &mine))
            .await
            .map_err(|e| Error::Internal(format!("gc panicked: {e}")))
    }
}

/// Whether `pid` is a live process (a zombie is not: an orphaned runner whose host
/// died may wait unreaped where nothing reaps orphans).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rsplit(')').next().unwrap_or("").trim_start();
        !state.starts_with('Z')
    })
}

/// The checks of a wasm provider's files (`probe`): its directories are usable and
/// which runtimes are installed.
pub fn file_checks(config: &WasmConfig) -> Vec<Check> {
    let mut checks = Vec::new();
    for (name, dir) in [
        ("artifact cache", config.cache_dir.clone()),
        ("sandbox directories", config.scratch_dir.clone()),
    ] {
        let made = home::make_private_dir(&dir);
        checks.push(Check {
            name: name.into(),
            ok: made.is_ok(),
            detail: match &made {
                Ok(()) => format!("{} is usable", dir.display()),
                Err(e) => e.to_string(),
            },
            fix: made
                .is_err()
                .then(|| format!("make {} writable, or set STOCKADE_HOME", dir.display())),
        });
    }
    for spec in runtime::RUNTIMES {
        let inst = runtime::installed(spec, &config.home);
        checks.push(Check {
            name: format!("{} runtime", spec.name),
            ok: inst.is_some(),
            detail: match &inst {
                Some(i) => format!("{} {} at {}", spec.name, i.version, i.module.display()),
                None => "not installed".into(),
            },
            fix: inst
                .is_none()
                .then(|| format!("stockade runtime install {}", spec.name)),
        });
    }
    checks
}

/// Removes the process directories under `scratch` (`<scratch>/<pid>/<sandbox id>`)
/// whose process is not alive and not named in `mine`; the ids in them are reaped.
pub fn sweep_dead(scratch: &std::path::Path, mine: &[String]) -> GcReport {
    let mut report = GcReport::default();
    let Ok(rd) = std::fs::read_dir(scratch) else {
        return report;
    };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<u32>() else {
            continue;
        };
        if mine.contains(&name) || running(pid) {
            continue;
        }
        let ids: Vec<String> = std::fs::read_dir(entry.path())
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => report.reaped.extend(ids),
            Err(e) => report
                .errors
                .push(format!("cannot remove {}: {e}", entry.path().display())),
        }
    }
    report
}
