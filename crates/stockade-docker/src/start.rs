//! Starting a docker sandbox: the container made from the plan (named volumes, the
//! agent as PID 1, its network joined), retried once on a name conflict, and started.

use super::*;

impl DockerLauncher {
    pub(crate) async fn create_container(
        &self,
        spec: &ValidatedSpec,
        opts: &CreateOptions,
    ) -> Result<SandboxInfo> {
        let docker = self.docker().await?;
        // Before anything is fetched: a dockerd whose containers would be host accounts.
        let userns = self.admit_ids(spec.user).await?;
        let agent = find_agent()?;
        let reference = spec.image.clone().ok_or_else(|| {
            Error::InvalidRequest("the docker provider needs an image; name one".into())
        })?;
        let (facts, _) =
            image::ensure(docker, &reference, self.image_store.as_deref(), &mut |_| {}).await?;
        // A container whose agent finds `/` closed to the sandbox user is replaced
        // once (dockerd 20.10 was seen, rarely, to start one on an empty directory
        // instead of its image's root); a second one is the image's doing and is
        // reported.
        match self
            .create_once(docker, &agent, facts.clone(), spec, opts, userns)
            .await
        {
            Err(Error::Internal(m)) if m.contains(ROOT_NOT_ENTERABLE) => {
                self.create_once(docker, &agent, facts, spec, opts, userns)
                    .await
            }
            other => other,
        }
    }

    pub(crate) async fn create_once(
        &self,
        docker: &Docker,
        agent: &Path,
        facts: plan::ImageFacts,
        spec: &ValidatedSpec,
        opts: &CreateOptions,
        userns: Option<(u32, u32)>,
    ) -> Result<SandboxInfo> {
        let user = plan::code_user(spec, &facts);
        if let Some((u, g)) = userns {
            check_writable_mounts(spec, u.saturating_add(user.uid), g.saturating_add(user.gid))?;
        }
        let id = new_id();
        let dir = self.dir(&id);
        let agent_group = make_private_dir(&self.state_root, &dir, &self.socket, userns)?;
        let net = match self.prepare_network(spec, &id) {
            Ok(n) => n,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::remove_dir_all(self.net_dir(&id));
                return Err(e);
            }
        };
        let input = plan::PlanInput {
            id: id.clone(),
            state_dir: dir.clone(),
            agent: agent.to_path_buf(),
            now_ms: now_ms(),
            owner_pid: opts.owner_pid,
            owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
            image: facts,
            agent_group,
            net: net.as_ref().map(|n| n.input.clone()),
            userns,
        };
        let plan = plan::plan(spec, &input);
        let result = self
            .start(docker, &id, &dir, &plan, agent, opts, net.as_ref())
            .await;
        if let Err(e) = result {
            let _ = self.remove(&id).await;
            return Err(e);
        }
        Ok(SandboxInfo {
            id,
            provider: "docker".into(),
            created_at_ms: input.now_ms,
            expires_at_ms: plan.expires_at_ms,
            owner_pid: opts.owner_pid,
            spec: serde_json::to_value(spec.spec()).unwrap_or_default(),
            applied: plan.applied,
            state: stockade_core::RunState::Running,
            steps: Vec::new(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        &self,
        docker: &Docker,
        id: &str,
        dir: &Path,
        plan: &plan::Plan,
        agent: &Path,
        opts: &CreateOptions,
        net: Option<&NetSetup>,
    ) -> Result<()> {
        let config = serde_json::to_vec(&plan.config)
            .map_err(|e| Error::Internal(format!("cannot encode the container config: {e}")))?;
        std::fs::write(dir.join("config.json"), config)
            .map_err(|e| Error::io(format!("cannot write {}/config.json", dir.display()), e))?;
        let name = container_name(id);
        docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                plan.body.clone(),
            )
            .await
            .map_err(|e| engine::docker_error(&format!("create container {name}"), e))?;
        docker
            .start_container(
                &name,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| engine::docker_error(&format!("start container {name}"), e))?;
        // The agent answers once it listens; a container that ends first says why in
        // its log.
        let sock = dir.join("agent.sock");
        let started = Instant::now();
        loop {
            if sock.exists()
                && stockade_agent_host::client::ping(id, &agent_socket(id, &sock, plan.userns))
                    .await
                    .is_ok()
            {
                break;
            }
            if let Some(c) = self.inspect_container(id).await?
                && c.state.as_ref().and_then(|s| s.running) != Some(true)
            {
                let log = logs(docker, &name).await;
                return Err(Error::Internal(format!(
                    "the agent of sandbox {id} did not start: {}",
                    log.trim()
                )));
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(Error::Timeout {
                    operation: format!("starting sandbox {id}"),
                    after_ms: 30_000,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seal_private_dir(dir, plan.userns)?;
        let pid = self
            .inspect_container(id)
            .await?
            .and_then(|c| c.state)
            .and_then(|s| s.pid)
            .filter(|p| *p > 0)
            .ok_or_else(|| Error::Internal(format!("sandbox {id} has no init process")))?;
        let mut cmd = std::process::Command::new(agent);
        cmd.arg("docker-watch")
            .arg(&name)
            .arg(pid.to_string())
            .arg(opts.owner_pid.map(|p| p.to_string()).unwrap_or("-".into()))
            .arg(plan.expires_at_ms.to_string())
            .arg(&self.socket)
            .arg(dir)
            .args(net.map(|_| self.net_dir(id)))
            .env_clear()
            .stdin(if net.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // The watcher outlives its caller: it must not keep the caller's files and
        // sockets open.
        stockade_sys::process::spawn_with_stdio_only(&mut cmd);
        let mut child = tokio::process::Command::from(cmd)
            .spawn()
            .map_err(|e| Error::io(format!("cannot start {} docker-watch", agent.display()), e))?;
        if let (Some(n), Some(mut stdin)) = (net, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // The network plan, then the credentials (if any): see `docker-watch`.
            let _ = stdin.write_all(&n.monitor_input).await;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| Error::io(format!("cannot start {} docker-watch", agent.display()), e))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(if net.is_some() && !why.is_empty() {
                stockade_linux::egress_unavailable(id, why)
            } else {
                Error::Internal(format!(
                    "the watcher of sandbox {id} failed to start ({}): {why}",
                    out.status
                ))
            });
        }
        Ok(())
    }
}
