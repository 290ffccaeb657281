//! The provider: [`WasmProvider`], its shared state, and its [`Provider`] impl.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use stockade_core::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, Error, ExecIo, ExecOutcome,
    GcReport, Provider, Result, SandboxInfo, now_ms,
};
use stockade_sys::wasm::ArtifactKey;
use tokio::sync::{Semaphore, watch};
use wasmtime::{Engine, Linker};

use crate::exec::{self, ExecState};
use crate::module::{ModuleEntry, ModuleKey};
use crate::quota::{MemoryBudget, TmpQuota};
use crate::sandbox::{Preopen, SandboxEntry, new_id, pid_alive, watch_lifetime};
use crate::spec::spec_error;
use crate::{TMP_DIR, WasmConfig, artifact, home, lock};

/// The wasm provider. Cheap to clone; clones share sandboxes and compiled modules.
/// Sandboxes live in this process: they end with it (and [`Provider::gc`] removes
/// what a crashed process left on disk).
#[derive(Clone)]
pub struct WasmProvider {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for WasmProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProvider")
            .field("config", &self.inner.config)
            .finish()
    }
}

pub(crate) struct Inner {
    pub(crate) config: WasmConfig,
    pub(crate) engine: Engine,
    pub(crate) engine_key: String,
    pub(crate) linker: Linker<ExecState>,
    pub(crate) modules: Mutex<HashMap<ModuleKey, Arc<ModuleEntry>>>,
    /// The artifact key, read (or made) on first use.
    pub(crate) artifact_key: Mutex<Option<Arc<ArtifactKey>>>,
    pub(crate) sandboxes: Mutex<HashMap<String, Arc<SandboxEntry>>>,
    /// The epoch ticker runs while this is alive.
    pub(crate) _alive: Arc<()>,
}

impl WasmProvider {
    /// A provider with the default configuration.
    pub fn new() -> Result<WasmProvider> {
        WasmProvider::with_config(WasmConfig::default())
    }

    /// A provider with `config`.
    pub fn with_config(config: WasmConfig) -> Result<WasmProvider> {
        let engine = exec::engine(&config)?;
        let linker = exec::linker(&engine)?;
        let alive = Arc::new(());
        exec::start_ticker(engine.clone(), config.tick, Arc::downgrade(&alive));
        Ok(WasmProvider {
            inner: Arc::new(Inner {
                engine_key: artifact::engine_key(&engine),
                config,
                engine,
                linker,
                modules: Mutex::new(HashMap::new()),
                artifact_key: Mutex::new(None),
                sandboxes: Mutex::new(HashMap::new()),
                _alive: alive,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &WasmConfig {
        &self.inner.config
    }

    /// The key of this provider's engine configuration in artifact names.
    pub fn engine_key(&self) -> &str {
        &self.inner.engine_key
    }
}

#[async_trait]
impl Provider for WasmProvider {
    fn name(&self) -> &'static str {
        "wasm"
    }

    /// See `stockade_wasm_host::capabilities`: the runner's host checks specs against
    /// the same.
    fn capabilities(&self) -> Capabilities {
        stockade_wasm_host::capabilities()
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let mut checks = vec![Check {
            name: "wasmtime engine".into(),
            ok: true,
            detail: format!(
                "wasmtime 48 with cranelift, epoch interruption, engine key {}",
                self.inner.engine_key
            ),
            fix: None,
        }];
        checks.extend(stockade_wasm_host::file_checks(&self.inner.config));
        Ok(checks)
    }

    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo> {
        let spec = spec.into_inner();
        self.check_spec(&spec)?;
        let image = spec
            .image
            .clone()
            .ok_or_else(|| spec_error("image", "the wasm provider needs an image".into()))?;
        let path = self.resolve_image(&image)?;
        let this = self.clone();
        let module = tokio::task::spawn_blocking(move || this.module(&path))
            .await
            .map_err(|e| Error::Internal(format!("module loader panicked: {e}")))??;

        let id = new_id();
        let dir = self.process_dir().join(&id);
        home::make_private_dir(&self.inner.config.scratch_dir)?;
        home::make_private_dir(&dir.join("tmp"))?;
        let mut preopens = vec![Preopen {
            guest: TMP_DIR.into(),
            host: dir.join("tmp"),
            writable: true,
        }];
        preopens.extend(spec.mounts.iter().map(|m| Preopen {
            guest: m.target.to_string_lossy().into_owned(),
            host: m.host.clone(),
            writable: m.writable,
        }));
        let created = now_ms();
        let lifetime = Duration::from_secs(spec.timeout_secs);
        let info = SandboxInfo {
            id: id.clone(),
            provider: self.name().into(),
            created_at_ms: created,
            expires_at_ms: created + lifetime.as_millis() as u64,
            owner_pid: opts.owner_pid,
            spec: serde_json::to_value(spec.spec())
                .map_err(|e| Error::Internal(format!("cannot encode spec: {e}")))?,
            applied: self.applied(&spec, &module),
            state: stockade_core::RunState::Running,
            steps: Vec::new(),
        };
        let (dead, dead_rx) = watch::channel(false);
        let expires_at = Instant::now() + lifetime;
        let entry = Arc::new(SandboxEntry {
            info: info.clone(),
            quota: Arc::new(TmpQuota::new(
                dir.join("tmp"),
                spec.limits.tmp_bytes,
                self.inner.config.tmp_max_entries,
            )),
            memory: MemoryBudget::new(spec.limits.memory_bytes),
            exec_slots: Arc::new(Semaphore::new(spec.limits.pids as usize)),
            workdir: spec.effective_workdir().to_string_lossy().into_owned(),
            spec,
            module,
            dir,
            preopens,
            expires_at,
            dead,
            dead_flag: Arc::new(AtomicBool::new(false)),
        });
        lock(&self.inner.sandboxes).insert(id.clone(), entry);
        tokio::spawn(watch_lifetime(
            Arc::downgrade(&self.inner),
            id,
            expires_at,
            opts.owner_pid,
            dead_rx,
        ));
        Ok(info)
    }

    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome> {
        let req = req.into_inner();
        stockade_core::no_terminal(self.name(), &req)?;
        stockade_core::no_watch(self.name(), &req)?;
        if req.keep_stdin_open {
            return Err(Error::InvalidRequest(
                "the wasm provider cannot keep stdin open; pass stdin as bytes".into(),
            ));
        }
        if req.background || req.detach {
            return Err(Error::InvalidRequest(
                "the wasm provider has no processes to leave running (background or detached); use the native or docker provider".into(),
            ));
        }
        let sb = self.sandbox(id)?;
        let ExecIo { output, input } = io;
        let run = exec::run(
            &self.inner.engine,
            &self.inner.config,
            &sb,
            req.clone(),
            output,
        );
        stockade_core::exec_with_kill(self.name(), &req, input, run).await
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        self.end_sandbox(id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let mut all: Vec<SandboxInfo> = lock(&self.inner.sandboxes)
            .values()
            .map(|s| s.info.clone())
            .collect();
        all.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(all)
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        Ok(self.sandbox(id)?.info.clone())
    }

    async fn file(&self, id: &str, op: stockade_core::FileOp) -> Result<stockade_core::FileResult> {
        self.file_op(id, op).await
    }

    async fn gc(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        let now = Instant::now();
        let stale: Vec<String> = lock(&self.inner.sandboxes)
            .values()
            .filter(|s| s.expires_at <= now || s.info.owner_pid.is_some_and(|p| !pid_alive(p)))
            .map(|s| s.info.id.clone())
            .collect();
        for id in stale {
            if self.end_sandbox(&id).is_some() {
                report.reaped.push(id);
            }
        }
        // Directories of processes that died without destroying their sandboxes.
        let swept = stockade_wasm_host::sweep_dead(
            &self.inner.config.scratch_dir,
            &[std::process::id().to_string()],
        );
        report.reaped.extend(swept.reaped);
        report.errors.extend(swept.errors);
        Ok(report)
    }
}
