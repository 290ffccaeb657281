//! Persistent sessions: a named workspace on the host plus, while in use, a sandbox
//! with the workspace mounted read-write at `/work`.
//!
//! State lives in `<home>/sessions/<name>/` (`workspace/`, `session.json`). Callers in
//! any process are serialised per session by an `flock` on `<name>.lock`, so two
//! callers asking for the same session at once get the same sandbox. The idle timeout
//! is enforced by the sandbox's agent itself (it exits after that long without execs
//! or file operations), so it holds even when no Stockade process is running.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stockade_spec::{Mount, SandboxSpec};

use crate::{CreateOptions, Error, Provider, Result, Sandbox};
use stockade_agent_proto::now_ms;

/// Where the workspace appears inside session sandboxes.
pub const WORKSPACE_TARGET: &str = "/work";

/// How sessions are made.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Directory holding `sessions/` (`$STOCKADE_HOME`).
    pub home: PathBuf,
    /// Most sessions with a live sandbox at once (default 16).
    pub max_live: usize,
    /// Idle time after which a session's sandbox is destroyed, workspace kept (default 600 s).
    pub idle_timeout_secs: u64,
    /// Spec of session sandboxes (the workspace mount and workdir are added).
    pub spec: SandboxSpec,
    /// Tie session sandboxes to this process (default none: they outlive the caller
    /// until released or idle).
    pub owner_pid: Option<u32>,
}

impl SessionConfig {
    /// Defaults under `home`.
    pub fn new(home: impl Into<PathBuf>) -> SessionConfig {
        SessionConfig {
            home: home.into(),
            max_live: 16,
            idle_timeout_secs: 600,
            spec: SandboxSpec::default(),
            owner_pid: None,
        }
    }
}

/// What `list` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub name: String,
    pub workspace: PathBuf,
    /// The live sandbox, if any.
    pub sandbox_id: Option<String>,
    pub last_used_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Record {
    sandbox_id: Option<String>,
    last_used_ms: u64,
}

/// Sessions over one provider.
pub struct SessionManager {
    provider: Arc<dyn Provider>,
    config: SessionConfig,
}

/// Checks that a session name is a plain name (1-64 of `A-Z a-z 0-9 . _ -`, not
/// starting with `.`), never a path: it becomes a directory under the sessions home.
pub fn check_session_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "session name {name:?} must be 1-64 of A-Z a-z 0-9 . _ - and not start with '.' \
             (it is a name, not a path)"
        )))
    }
}

impl SessionManager {
    /// A manager keeping sessions under `config.home`.
    pub fn new(provider: Arc<dyn Provider>, config: SessionConfig) -> SessionManager {
        SessionManager { provider, config }
    }

    fn root(&self) -> PathBuf {
        self.config.home.join("sessions")
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// The host directory of a session's workspace.
    pub fn workspace(&self, name: &str) -> PathBuf {
        self.dir(name).join("workspace")
    }

    async fn lock(&self, name: &str) -> Result<std::fs::File> {
        let root = self.root();
        let path = root.join(format!("{name}.lock"));
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&root)
                .map_err(|e| Error::io(format!("cannot create {}", root.display()), e))?;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
            f.lock()
                .map_err(|e| Error::io(format!("cannot lock {}", path.display()), e))?;
            Ok(f)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }

    fn read(&self, name: &str) -> Record {
        std::fs::read(self.dir(name).join("session.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn write(&self, name: &str, r: &Record) -> Result<()> {
        let path = self.dir(name).join("session.json");
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(r).unwrap_or_default())
            .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
    }

    async fn live(&self, id: &Option<String>) -> Option<Sandbox> {
        let id = id.as_ref()?;
        Sandbox::attach(self.provider.clone(), id).await.ok()
    }

    /// The session's live sandbox, or a new one on the same workspace.
    pub async fn get_or_create(&self, name: &str) -> Result<Sandbox> {
        check_session_name(name)?;
        let _lock = self.lock(name).await?;
        let mut rec = self.read(name);
        if let Some(sb) = self.live(&rec.sandbox_id).await {
            rec.last_used_ms = now_ms();
            self.write(name, &rec)?;
            return Ok(sb);
        }
        let live = self
            .list()
            .await?
            .iter()
            .filter(|s| s.sandbox_id.is_some() && s.name != name)
            .count();
        if live >= self.config.max_live {
            return Err(Error::LimitExceeded {
                what: format!("starting session {name}: {live} sessions are live"),
                limit: format!(
                    "{} live sessions (release one with `stockade session release NAME`)",
                    self.config.max_live
                ),
            });
        }
        let ws = self.workspace(name);
        std::fs::create_dir_all(&ws)
            .map_err(|e| Error::io(format!("cannot create workspace {}", ws.display()), e))?;
        let mut spec = self.config.spec.clone();
        // The sandbox user owns its workspace (best effort: needs root to chown), as the
        // host ids the provider gives it (another range under docker's userns-remap).
        let (uid, gid) = self.provider.host_ids(spec.user.uid, spec.user.gid).await?;
        let _ = std::os::unix::fs::chown(&ws, Some(uid), Some(gid));
        spec.mounts
            .retain(|m| m.target != Path::new(WORKSPACE_TARGET));
        spec.mounts.push(Mount {
            host: ws,
            target: WORKSPACE_TARGET.into(),
            writable: true,
        });
        spec.workdir = Some(WORKSPACE_TARGET.into());
        spec.idle_timeout_secs = Some(self.config.idle_timeout_secs);
        spec.labels.insert("stockade.session".into(), name.into());
        spec.labels.insert(
            crate::host::OWNER_UID_LABEL.into(),
            crate::host::euid().to_string(),
        );
        let sb = Sandbox::create(
            self.provider.clone(),
            spec,
            CreateOptions {
                owner_pid: self.config.owner_pid,
            },
        )
        .await?;
        let recorded = self.write(
            name,
            &Record {
                sandbox_id: Some(sb.id().to_string()),
                last_used_ms: now_ms(),
            },
        );
        if let Err(e) = recorded {
            // A sandbox no record names would run on, unreachable by the session,
            // until its lifetime ends (a full disk, say): it goes now.
            let _ = sb.destroy().await;
            return Err(e);
        }
        Ok(sb)
    }

    /// Destroys the session's sandbox, keeps its workspace.
    pub async fn release(&self, name: &str) -> Result<()> {
        check_session_name(name)?;
        if !self.dir(name).exists() {
            return Err(Error::NotFound {
                kind: "session",
                id: name.into(),
            });
        }
        let _lock = self.lock(name).await?;
        let mut rec = self.read(name);
        if let Some(id) = rec.sandbox_id.take() {
            self.provider.destroy(&id).await?;
        }
        self.write(name, &rec)
    }

    /// Destroys the sandbox and removes the workspace.
    pub async fn delete(&self, name: &str) -> Result<()> {
        self.release(name).await?;
        let _lock = self.lock(name).await?;
        let dir = self.dir(name);
        std::fs::remove_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot remove {}", dir.display()), e))?;
        let _ = std::fs::remove_file(self.root().join(format!("{name}.lock")));
        Ok(())
    }

    /// Every session, with its live sandbox if it has one.
    pub async fn list(&self) -> Result<Vec<SessionInfo>> {
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir(self.root()) else {
            return Ok(out);
        };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.path().is_dir() || check_session_name(&name).is_err() {
                continue;
            }
            let rec = self.read(&name);
            let live = self.live(&rec.sandbox_id).await.map(|s| s.id().to_string());
            out.push(SessionInfo {
                workspace: self.workspace(&name),
                name,
                sandbox_id: live,
                last_used_ms: rec.last_used_ms,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}
