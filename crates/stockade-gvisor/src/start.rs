//! Starting a gVisor sandbox: the bundle from the Linux planner's plan, `runsc create` and
//! `start` under the provider's cgroups, the agent's socket awaited, and the watcher
//! that outlives this process.

use super::*;

impl GvisorLauncher {
    pub(crate) async fn start(
        &self,
        spec: &ValidatedSpec,
        opts: &CreateOptions,
    ) -> Result<SandboxInfo> {
        need_root()?;
        let mut steps = Steps::new("create".into());
        let setup = self.setup().await?.clone();
        steps.step("setup");
        let agent = stockade_agent_host::find_static_agent().map_err(|e| match e {
            Error::Unavailable { reason, fix, .. } => Error::Unavailable {
                what: "the gvisor provider's agent".into(),
                reason,
                fix,
            },
            e => e,
        })?;
        steps.step("find agent");
        let id = stockade_core::host::new_sandbox_id();
        let dir = self.dir(&id);
        make_dirs(&self.state_root, &dir)?;
        let r = self
            .start_in(spec, opts, &setup, &agent, &id, &mut steps)
            .await;
        if r.is_err() {
            let _ = self.remove(&id).await;
        }
        r
    }

    pub(crate) async fn start_in(
        &self,
        spec: &ValidatedSpec,
        opts: &CreateOptions,
        setup: &Setup,
        agent: &Path,
        id: &str,
        steps: &mut Steps,
    ) -> Result<SandboxInfo> {
        let dir = &self.dir(id);
        let mount_is_file = spec
            .mounts
            .iter()
            .map(|m| match std::fs::metadata(&m.host) {
                Ok(md) => Ok(md.is_file()),
                Err(e) => Err(Error::InvalidRequest(format!(
                    "mount source {} cannot be used: {e}",
                    m.host.display()
                ))),
            })
            .collect::<Result<Vec<bool>>>()?;
        let (image, image_guard) = match spec.image.clone() {
            Some(r) => {
                let store = self.image_store.clone();
                stockade_linux::ensure_image(&r, store.as_deref()).await?;
                let (root, guard) = tokio::task::spawn_blocking(move || {
                    stockade_linux::image_root(&r, store.as_deref())
                })
                .await
                .map_err(|e| Error::Internal(format!("image task failed: {e}")))??;
                (Some(root), Some(guard))
            }
            None => (None, None),
        };
        steps.step("image");
        let created = now_ms();
        let in_use_lock = image.as_ref().and_then(|i| i.in_use_lock.clone());
        let image_rootfs = image.as_ref().map(|i| i.rootfs.clone());
        let ctx = stockade_linux::plan::PlanContext {
            id: id.to_string(),
            state_dir: dir.to_path_buf(),
            host: stockade_linux::layout::detect(),
            slirp: None,
            nft: None,
            dns_upstreams: Vec::new(),
            egress_secrets: None,
            now_ms: created,
            owner_pid: opts.owner_pid,
            mount_is_file,
            image,
            userns: None,
            rootless: None,
        };
        steps.step("layout");
        let plan = stockade_linux::plan::plan(spec, &ctx)?;
        let input = bundle::BundleInput {
            agent: agent.to_path_buf(),
            agent_dir: dir.join("agent"),
            root_dir: dir.join("rootfs"),
            files_dir: dir.join("files"),
            image_rootfs,
            runsc_version: setup.runsc.version.clone(),
            platform: setup.platform,
            cgroup_parent: stockade_linux::plan::CGROUP_PARENT.into(),
        };
        let b = bundle::bundle(spec, &plan, &input)?;
        steps.step("plan+bundle");
        let base = if input.image_rootfs.is_some() {
            &input.files_dir
        } else {
            &input.root_dir
        };
        write_root(base, &b.root_ops)?;
        make_private(&input.agent_dir)?;
        let config = ContainerConfig {
            exec: b.exec.clone(),
            expires_at_ms: plan.expires_at_ms,
        };
        write_json(&input.agent_dir.join("config.json"), &config)?;
        std::fs::write(input.agent_dir.join("agent"), b"")
            .map_err(io("create", &input.agent_dir))?;
        write_json(&dir.join("config.json"), &b.config)?;
        steps.step("write root");

        let console = std::fs::File::create(dir.join("console.log"))
            .map_err(io("create", &dir.join("console.log")))?;
        let pid_file = dir.join("init.pid");
        let mut cmd = tokio::process::Command::new(&setup.runsc.path);
        cmd.arg(format!("--root={}", self.runsc_root().display()))
            .arg(format!("--platform={}", setup.platform.as_str()))
            .args(["--network=none", "--host-uds=create"]);
        // Diagnostics: gVisor's debug log with every system call of the sandbox
        // (`--strace`), one file per runsc process, in this directory.
        if let Some(log) = std::env::var_os("STOCKADE_GVISOR_DEBUG_LOG").filter(|d| !d.is_empty()) {
            let mut flag = std::ffi::OsString::from("--debug-log=");
            flag.push(&log);
            flag.push("/");
            cmd.args(["--debug", "--strace"]).arg(flag);
        }
        if input.image_rootfs.is_some() {
            // Mount points the image lacks are made in memory, never in the store.
            cmd.arg("--overlay2=root:memory");
        }
        cmd.arg("run")
            .arg("--detach")
            .arg(format!("--bundle={}", dir.display()))
            .arg(format!("--pid-file={}", pid_file.display()))
            .arg(id)
            .stdin(std::process::Stdio::null())
            .stdout(
                console
                    .try_clone()
                    .map_err(|e| Error::io("cannot dup console log", e))?,
            )
            .stderr(console)
            .kill_on_drop(true);
        let status = tokio::time::timeout(START_TIMEOUT, cmd.status())
            .await
            .map_err(|_| Error::Timeout {
                operation: format!("runsc run {id}"),
                after_ms: START_TIMEOUT.as_millis() as u64,
            })?
            .map_err(|e| Error::io(format!("cannot start {}", setup.runsc.path.display()), e))?;
        if !status.success() {
            return Err(Error::Internal(format!(
                "runsc run {id} failed ({status}): {}",
                console_tail(dir)
            )));
        }
        steps.step("runsc run");
        let init_pid: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| Error::Internal(format!("runsc run {id} wrote no pid file")))?;
        let init_ticks = stockade_sys::process::start_ticks(init_pid).ok_or_else(|| {
            Error::Internal(format!(
                "the sandbox {id} ended at once: {}",
                console_tail(dir)
            ))
        })?;
        let info = SandboxInfo {
            id: id.to_string(),
            provider: "gvisor".into(),
            created_at_ms: created,
            expires_at_ms: plan.expires_at_ms,
            owner_pid: opts.owner_pid,
            spec: serde_json::to_value(spec.spec()).unwrap_or_default(),
            applied: b.applied,
            state: stockade_core::RunState::Running,
            steps: Vec::new(),
        };
        let record = Record {
            info: info.clone(),
            init_pid,
            init_ticks,
            owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
            host_memory_bytes: spec.limits.memory_bytes + bundle::SENTRY_OVERHEAD_BYTES,
            watcher: None,
        };
        let transport = UnixSocket::new(id, input.agent_dir.join("agent.sock"));
        let agent_up = async {
            let started = Instant::now();
            loop {
                if stockade_agent_host::client::ping(id, &transport)
                    .await
                    .is_ok()
                {
                    return Ok(());
                }
                if !stockade_sys::process::is_same_process(init_pid, init_ticks) {
                    return Err(Error::Internal(format!(
                        "the agent of sandbox {id} did not start: {}",
                        console_tail(dir)
                    )));
                }
                if started.elapsed() > START_TIMEOUT {
                    return Err(Error::Timeout {
                        operation: format!("starting sandbox {id}"),
                        after_ms: START_TIMEOUT.as_millis() as u64,
                    });
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        // The watcher starts while the agent comes up (it needs only the kernel's
        // pid); should either fail, the caller's removal kills both.
        let watcher = self.watch(setup, agent, &record, dir, in_use_lock.as_deref());
        let (up, watched) = tokio::join!(agent_up, watcher);
        up?;
        watched?;
        steps.step("agent up + watcher");
        let record = Record {
            watcher: find_watcher(id, dir),
            ..record
        };
        write_json(&dir.join("sandbox.json"), &record)?;
        steps.step("record");
        drop(image_guard);
        Ok(info)
    }

    /// Starts the detached watcher: `runsc delete --force` when the owner dies, the
    /// lifetime passes or the sandbox ends; it also holds the image in use.
    pub(crate) async fn watch(
        &self,
        setup: &Setup,
        agent: &Path,
        r: &Record,
        dir: &Path,
        in_use_lock: Option<&Path>,
    ) -> Result<()> {
        let mut cmd = std::process::Command::new(agent);
        cmd.arg("gvisor-watch")
            .arg(&setup.runsc.path)
            .arg(self.runsc_root())
            .arg(&r.info.id)
            .arg(r.init_pid.to_string())
            .arg(
                r.info
                    .owner_pid
                    .map(|p| p.to_string())
                    .unwrap_or("-".into()),
            )
            .arg(r.info.expires_at_ms.to_string())
            .arg(dir)
            .arg(in_use_lock.map(Path::as_os_str).unwrap_or("-".as_ref()))
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        stockade_sys::process::spawn_with_stdio_only(&mut cmd);
        let status = tokio::process::Command::from(cmd)
            .status()
            .await
            .map_err(|e| Error::io(format!("cannot start {} gvisor-watch", agent.display()), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "the watcher of sandbox {} failed to start ({status})",
                r.info.id
            )))
        }
    }
}
