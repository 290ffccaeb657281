//! Making and removing a microVM: its directory held by a lock, its network
//! directory, the root image, the VMM started under its supervisor, and teardown.

use super::*;

impl MicrovmLauncher {
    /// Starts the supervisor of the VM recorded in `dir` and waits for its agent.
    /// A VM with network gets its network monitor's input: `net_input` when given
    /// (a create, whose credentials exist only in that input), else planned anew from
    /// the policy in force (a resume, fork or start from a snapshot; never one with
    /// credentials, which cannot be paused).
    pub(crate) async fn start(&self, record: &Record, net_input: Option<Vec<u8>>) -> Result<()> {
        let id = &record.info.id;
        let dir = self.dir(id);
        for f in ["exit", "host.pid", "agent.sock"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        // What the VMM's uid gets: descriptors of the files it may not open by path,
        // read access to the ones of this directory it boots from.
        let mut host = record.host.clone();
        host.vmm = self.vmm.command(&record.plan);
        host.vmm_files = self
            .vmm
            .files(&record.plan)
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        host.vmm_reads = [&record.plan.kernel, &record.plan.initrd]
            .into_iter()
            .filter(|f| f.starts_with(&dir))
            .map(|f| f.display().to_string())
            .collect();
        let host = serde_json::to_vec(&host)
            .map_err(|e| Error::Internal(format!("cannot encode the VM host config: {e}")))?;
        write_private(&dir.join("host.json"), &host)
            .map_err(io(format!("cannot write {}/host.json", dir.display())))?;
        let net_input = match (&record.host.net_dir, net_input) {
            (None, _) => None,
            (Some(_), Some(input)) => Some(input),
            (Some(_), None) => Some(self.replanned_network(id)?),
        };
        let agent = stockade_agent_host::find_static_agent()?;
        let mut cmd = std::process::Command::new(&agent);
        cmd.arg("vm-host")
            .arg(&dir)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(if net_input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        stockade_sys::process::spawn_with_stdio_only(&mut cmd);
        let mut child = tokio::process::Command::from(cmd)
            .spawn()
            .map_err(io(format!("cannot start {} vm-host", agent.display())))?;
        if let (Some(input), Some(mut stdin)) = (&net_input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // The network plan, then the credentials (if any); closed at the drop.
            stdin.write_all(input).await.map_err(io(format!(
                "cannot hand sandbox {id}'s network plan to its VM host"
            )))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(io(format!("cannot start {} vm-host", agent.display())))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(if net_input.is_some() && why.contains("network egress") {
                stockade_linux::egress_unavailable(id, why)
            } else {
                Error::Internal(format!(
                    "the VM host of sandbox {id} failed to start: {why}"
                ))
            });
        }
        if record.plan.incoming.is_some() {
            self.vmm
                .run_restored(&record.plan.control_socket, BOOT_TIMEOUT)
                .await?;
        }
        let sock = UnixSocket::new(id.clone(), dir.join("agent.sock"));
        let started = Instant::now();
        loop {
            if dir.join("agent.sock").exists()
                && stockade_agent_host::client::ping(id, &sock).await.is_ok()
            {
                return Ok(());
            }
            if let Ok(why) = std::fs::read_to_string(dir.join("exit")) {
                return Err(Error::Internal(format!(
                    "the VM of sandbox {id} did not start: {why}; console: {}",
                    self.console_tail(id)
                )));
            }
            if started.elapsed() > BOOT_TIMEOUT {
                return Err(Error::Timeout {
                    operation: format!(
                        "starting the VM of sandbox {id} (console: {})",
                        self.console_tail(id)
                    ),
                    after_ms: BOOT_TIMEOUT.as_millis() as u64,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Holds sandbox `id` while it is made, paused or resumed (an exclusive `flock`
    /// on `DIR/busy`, waiting up to two minutes for another such operation on it).
    /// Between one VM host's end and the next one's start a sandbox has no
    /// supervisor and would look dead: [`Launcher::gc`] leaves a held one alone.
    pub(crate) async fn hold(&self, id: &str) -> Result<Hold> {
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            match self.try_hold(id)? {
                Some(h) => return Ok(h),
                None if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                None => {
                    return Err(Error::Timeout {
                        operation: format!(
                            "waiting for another operation on sandbox {id} (a pause, resume or start) to finish"
                        ),
                        after_ms: 120_000,
                    });
                }
            }
        }
    }

    /// [`Self::hold`] without waiting: `None` when another process or task holds it.
    pub(crate) fn try_hold(&self, id: &str) -> Result<Option<Hold>> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.dir(id).join("busy");
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&p)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(id)),
            Err(e) => return Err(Error::io(format!("cannot open {}", p.display()), e)),
        };
        match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(h) => Ok(Some(Hold(h))),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(Error::Internal(format!("cannot lock {}: {e}", p.display()))),
        }
    }

    /// Makes sandbox `id`'s directory, held (see [`Self::hold`]) until the returned
    /// hold is dropped.
    pub(crate) fn make_dir(&self, id: &str) -> Result<(PathBuf, Hold)> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&self.state_root)
            .map_err(io(format!("cannot create {}", self.state_root.display())))?;
        // Searchable by the VMMs' uids (each reaches its own `DIR`, which its VM host
        // opens to that VMM's gid alone), not listable.
        let _ = std::fs::set_permissions(&self.state_root, std::fs::Permissions::from_mode(0o711));
        let dir = self.dir(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
        let hold = self.try_hold(id)?.ok_or_else(|| {
            Error::Internal(format!(
                "the new directory {} is held by another",
                dir.display()
            ))
        })?;
        Ok((dir, hold))
    }

    /// Makes sandbox `id`'s network monitor directory (0700, in its own), with the
    /// `state.json` whose `spec.network` the monitor keeps up to date (`network`:
    /// the policy, its credentials redacted).
    pub(crate) fn make_net_dir(
        &self,
        id: &str,
        network: &stockade_spec::Network,
    ) -> Result<String> {
        let dir = self.dir(id).join(NET_DIR);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
        let shown = serde_json::json!({ "spec": { "network": network } });
        std::fs::write(dir.join("state.json"), shown.to_string())
            .map_err(io(format!("cannot write {}/state.json", dir.display())))?;
        Ok(dir.display().to_string())
    }

    pub(crate) async fn create_vm(
        &self,
        spec: CheckedSpec,
        opts: &CreateOptions,
    ) -> Result<SandboxInfo> {
        need_root()?;
        let spec = spec.into_inner();
        let (accel, _) = self.accel().await?;
        let kernel = assets::find_kernel()?;
        let agent = stockade_agent_host::find_static_agent()?;
        std::fs::create_dir_all(&self.cache)
            .map_err(io(format!("cannot create {}", self.cache.display())))?;
        let (base, modules) = assets::base_initramfs(&self.cache, &agent, &kernel)?;
        let (root, image) = self.root_for(&spec).await?;
        let virtiofsd = shares_check(&spec)?;
        // The native provider's network plan for this host: firewall, resolver,
        // proxy, and (with credentials) a new authority and placeholders.
        let setup = stockade_linux::network_setup(&spec.network, &[])?;
        let id = stockade_core::host::new_sandbox_id();
        let (dir, _hold) = self.make_dir(&id)?;
        let r = async {
            let now = now_ms();
            let net = setup.as_ref().map(|s| plan::NetInput {
                resolv_conf: s.resolv_conf.clone(),
                ca: s.ca.clone(),
                env: s.env.clone(),
                policy_applied: s.policy_applied.clone(),
            });
            let net_dir = match &setup {
                Some(_) => Some(self.make_net_dir(&id, &spec.network.redacted())?),
                None => None,
            };
            let p = plan::plan(&spec, image.as_ref(), net.as_ref(), modules, now, accel);
            let config = serde_json::to_vec(&p.guest)
                .map_err(|e| Error::Internal(format!("cannot encode the VM config: {e}")))?;
            assets::vm_initramfs(&base, &config, &dir.join("initrd"))?;
            let vm = VmPlan {
                accel,
                memory_mib: p.memory_mib,
                vcpus: p.vcpus,
                kernel: kernel.image.clone(),
                initrd: dir.join("initrd"),
                cmdline: format!(
                    "console=ttyS0 quiet panic=-1 rdinit=/init {} -- vm-init",
                    vmm::kernel_args(accel)
                ),
                root_image: root.clone(),
                serial_socket: dir.join(VMM_DIR).join("serial.sock"),
                control_socket: dir.join(VMM_DIR).join("qmp.sock"),
                console_log: dir.join(VMM_DIR).join("console.log"),
                incoming: None,
                shares: p
                    .guest
                    .shares
                    .iter()
                    .enumerate()
                    .map(|(i, g)| vmm::Share {
                        tag: g.tag.clone(),
                        socket: dir.join(format!("fs-{i}.sock")),
                    })
                    .collect(),
                network: net.is_some(),
            };
            let daemons = spec
                .mounts
                .iter()
                .zip(&vm.shares)
                .map(|(m, share)| {
                    let socket = share.socket.display().to_string();
                    (virtiofsd_command(virtiofsd.as_deref(), m, &socket), socket)
                })
                .collect();
            let mut applied = p.applied.clone();
            applied.push(Wall::on(WallKind::Isolation, vmm::CONFINEMENT));
            let cgroups = plan::host_cgroups(Path::new("/sys/fs/cgroup"), &id, p.memory_mib, spec.limits.cpus);
            applied.push(if cgroups.is_empty() {
                Wall::off(WallKind::Limits, "host cgroup: none (no cgroup hierarchy found); the VM's size bounds it")
            } else {
                Wall::on(WallKind::Limits, format!(
                    "host cgroup around the VMM: {} (memory = guest RAM + {} MiB, CPU quota {} CPUs)",
                    cgroups.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", "),
                    plan::VMM_OVERHEAD_MIB,
                    spec.limits.cpus
                ))
            });
            let host = VmHostConfig {
                id: id.clone(),
                vmm: self.vmm.command(&vm),
                serial_socket: vm.serial_socket.display().to_string(),
                owner_pid: opts.owner_pid,
                owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
                expires_at_ms: p.expires_at_ms,
                cgroups,
                daemons,
                net_dir,
                vmm_ids: vmm_ids()?,
                // Set from the plan by `start`.
                vmm_files: Vec::new(),
                vmm_reads: Vec::new(),
            };
            let record = Record {
                info: SandboxInfo {
                    id: id.clone(),
                    provider: "microvm".into(),
                    created_at_ms: now,
                    expires_at_ms: p.expires_at_ms,
                    owner_pid: opts.owner_pid,
                    spec: shown_spec(&spec),
                    applied,
                    state: RunState::Running,
                    steps: Vec::new(),
                },
                plan: vm,
                host,
            };
            self.write_record(&record)?;
            self.start(&record, setup.map(|s| s.monitor_input)).await?;
            Ok(record.info)
        }
        .await;
        if r.is_err() {
            let _ = self.remove(&id).await;
        }
        r
    }

    /// Kills the VM (its supervisor's process group) and removes everything of it.
    pub(crate) async fn remove(&self, id: &str) -> Result<()> {
        let dir = self.dir(id);
        if let Some((pid, _)) = self.supervisor(id)
            && let Some(p) = rustix::process::Pid::from_raw(pid as i32)
        {
            let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            let until = Instant::now() + Duration::from_secs(10);
            while self.supervisor(id).is_some() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // The VMM may outlive a supervisor killed alone (a crash): by its pidfile-less
        // command line, it is found through the record.
        if let Ok(r) = self.read_record(id) {
            kill_vmm_of(&r.plan.serial_socket);
            for share in &r.plan.shares {
                kill_daemon_of(&share.socket);
            }
            remove_cgroups(r.host.cgroups.iter().map(|(cg, _)| cg.into()).collect()).await;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("cannot remove {}", dir.display()), e)),
        }
    }
}
