//! A running VM's state: paused to a file (digest-checked), resumed, forked into
//! new VMs, and restored from a snapshot.

use super::*;

impl MicrovmLauncher {
    pub(crate) async fn pause_vm(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        let _hold = self.hold(id).await?;
        let record = self.read_record(id)?;
        if self.is_paused(id) {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is already paused; resume it"
            )));
        }
        if !record.plan.shares.is_empty() {
            // Not `unsupported`: its fix ("use the microvm provider") is this one.
            return Err(Error::Unavailable {
                what: format!(
                    "pause (and snapshot, fork) of microvm sandbox {id}, which has workspaces"
                ),
                reason: "its shared directories are vhost-user (virtiofs) devices, which \
                         QEMU 7.2 cannot migrate, so its memory cannot be saved"
                    .into(),
                fix: "create it without mounts (copy files in with `stockade cp` or a file \
                      write) to pause, snapshot or fork it"
                    .into(),
            });
        }
        if record.host.net_dir.is_some() {
            let network = self.live_network(id, &record.info.spec);
            let has_credentials = network
                .get("credentials")
                .and_then(|c| c.as_array())
                .is_some_and(|c| !c.is_empty());
            if has_credentials {
                return Err(Error::Unavailable {
                    what: format!(
                        "pause (and snapshot, fork) of sandbox {id}, whose egress policy has credentials"
                    ),
                    reason: "the credentials' values and the sandbox's certificate authority key \
                             live only in its running network monitor (never on disk), and a \
                             restored VM would need them"
                        .into(),
                    fix: "create the sandbox without credentials to pause, snapshot or fork it"
                        .into(),
                });
            }
        }
        let (pid, ticks) = self.supervisor(id).ok_or_else(|| self.dead(id))?;
        let dir = self.dir(id);
        let snap = dir.join("snapshot");
        std::fs::create_dir_all(&snap).map_err(io(format!("cannot create {}", snap.display())))?;
        let mem = snap.join("vm.state");
        std::fs::write(dir.join("paused"), b"")
            .map_err(io("cannot mark the sandbox paused".into()))?;
        if let Err(e) = self.vmm.save(&record.plan.control_socket, &mem).await {
            let _ = std::fs::remove_file(dir.join("paused"));
            return Err(e);
        }
        let until = Instant::now() + Duration::from_secs(30);
        while alive(pid, ticks) {
            if Instant::now() > until {
                return Err(Error::Timeout {
                    operation: format!("stopping the VM of sandbox {id} after saving it"),
                    after_ms: 30_000,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (sha256, bytes) = tokio::task::spawn_blocking({
            let mem = mem.clone();
            move || sha256_file(&mem)
        })
        .await
        .map_err(|e| Error::Internal(format!("digest task failed: {e}")))??;
        let manifest = Manifest {
            sha256,
            bytes,
            saved_at_ms: now_ms(),
        };
        std::fs::write(
            snap.join("manifest.json"),
            serde_json::to_vec(&manifest).unwrap_or_default(),
        )
        .map_err(io("cannot write the snapshot manifest".into()))
    }

    /// The verified state file of paused sandbox `id`.
    pub(crate) async fn snapshot_of(&self, id: &str) -> Result<PathBuf> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        if !self.is_paused(id) {
            return Err(Error::InvalidRequest(format!(
                "sandbox {id} is not paused; pause it first (stockade pause {id})"
            )));
        }
        let snap = self.dir(id).join("snapshot");
        let manifest: Manifest = std::fs::read(snap.join("manifest.json"))
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .ok_or_else(|| Error::Unavailable {
                what: format!("the snapshot of sandbox {id}"),
                reason: "its manifest is missing or unreadable (the pause did not finish)".into(),
                fix: format!("destroy it (stockade rm {id})"),
            })?;
        let mem = snap.join("vm.state");
        let (got, bytes) = tokio::task::spawn_blocking({
            let mem = mem.clone();
            move || sha256_file(&mem)
        })
        .await
        .map_err(|e| Error::Internal(format!("digest task failed: {e}")))??;
        if got != manifest.sha256 || bytes != manifest.bytes {
            return Err(Error::PolicyDenied(format!(
                "the snapshot of sandbox {id} ({}) is corrupt: its SHA-256 is {got} ({bytes} bytes), \
                 not {} ({} bytes) as saved; it was not restored. Destroy it (stockade rm {id})",
                mem.display(),
                manifest.sha256,
                manifest.bytes
            )));
        }
        Ok(mem)
    }

    pub(crate) async fn resume_vm(&self, id: &str) -> Result<()> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        let _hold = self.hold(id).await?;
        let mem = self.snapshot_of(id).await?;
        let mut record = self.read_record(id)?;
        // A sandbox started from a named snapshot boots from that snapshot's root
        // image; the VM cannot restore without the files it booted from.
        for f in [
            &record.plan.kernel,
            &record.plan.initrd,
            &record.plan.root_image,
        ] {
            if !f.exists() {
                return Err(Error::Unavailable {
                    what: format!("resuming sandbox {id}"),
                    reason: format!(
                        "{} it booted from is gone (a removed named snapshot, or a root \
                         image pruned after the host's packages changed)",
                        f.display()
                    ),
                    fix: format!("destroy it (stockade rm {id}) and create a new one"),
                });
            }
        }
        record.plan.incoming = Some(mem.clone());
        record.host.vmm = self.vmm.command(&record.plan);
        let dir = self.dir(id);
        let _ = std::fs::remove_file(dir.join("paused"));
        let r = self.start(&record, None).await;
        record.plan.incoming = None;
        record.host.vmm = self.vmm.command(&record.plan);
        self.write_record(&record)?;
        r?;
        // The VM moved on from the saved state.
        let _ = std::fs::remove_dir_all(dir.join("snapshot"));
        Ok(())
    }

    pub(crate) async fn fork_vm(
        &self,
        id: &str,
        count: u32,
        opts: &CreateOptions,
    ) -> Result<Vec<SandboxInfo>> {
        need_root()?;
        if count == 0 || count > 64 {
            return Err(Error::InvalidRequest(format!(
                "fork count {count} is out of range; give 1 to 64"
            )));
        }
        check_sandbox_id(id)?;
        self.read_record(id)?;
        // The source stays paused (its saved state in place) while the copies start.
        let _hold = self.hold(id).await?;
        let mem = self.snapshot_of(id).await?;
        let source = self.read_record(id)?;
        let applied = plan::copy_walls(
            &source.info.applied,
            format!("forked from sandbox {id}'s snapshot"),
        );
        let restore = Restore {
            mem,
            plan: source.plan.clone(),
            kernel: None,
            spec: self.live_spec(id, &source.info.spec),
            applied,
            lifetime_ms: source
                .info
                .expires_at_ms
                .saturating_sub(source.info.created_at_ms),
            cgroups: !source.host.cgroups.is_empty(),
        };
        self.restore_new(&restore, count, opts).await
    }

    /// Starts `count` new sandboxes restoring `r.mem`, each in its own directory
    /// (own id, sockets, host cgroups, owner and lifetime), the copies made and
    /// recorded first and then started at once; on any failure all of them go.
    pub(crate) async fn restore_new(
        &self,
        r: &Restore,
        count: u32,
        opts: &CreateOptions,
    ) -> Result<Vec<SandboxInfo>> {
        let mut made: Vec<Record> = Vec::new();
        let mut holds = Vec::new();
        let mut result = Ok(());
        for _ in 0..count {
            let new = stockade_core::host::new_sandbox_id();
            let made_one = async {
                let (dir, hold) = self.make_dir(&new)?;
                holds.push(hold);
                let initrd = dir.join("initrd");
                if std::fs::hard_link(&r.plan.initrd, &initrd).is_err() {
                    std::fs::copy(&r.plan.initrd, &initrd).map_err(io(format!(
                        "cannot copy {} into {}",
                        r.plan.initrd.display(),
                        dir.display()
                    )))?;
                }
                let kernel = match &r.kernel {
                    Some(k) => {
                        let to = dir.join("kernel");
                        std::fs::copy(k, &to).map_err(io(format!(
                            "cannot copy {} into {}",
                            k.display(),
                            dir.display()
                        )))?;
                        to
                    }
                    None => r.plan.kernel.clone(),
                };
                let now = now_ms();
                let plan = VmPlan {
                    kernel,
                    initrd,
                    serial_socket: dir.join(VMM_DIR).join("serial.sock"),
                    control_socket: dir.join(VMM_DIR).join("qmp.sock"),
                    console_log: dir.join(VMM_DIR).join("console.log"),
                    incoming: Some(r.mem.clone()),
                    ..r.plan.clone()
                };
                let mut cgroups = plan::host_cgroups(
                    Path::new("/sys/fs/cgroup"),
                    &new,
                    plan.memory_mib,
                    plan.vcpus as f64,
                );
                if !r.cgroups {
                    cgroups.clear();
                }
                // A restored VM's network: the one in force in the saved VM, served
                // by this copy's own monitor.
                let net_dir = if plan.network {
                    let value = r.spec.get("network").cloned().unwrap_or_default();
                    let network: stockade_spec::Network = serde_json::from_value(value.clone())
                        .map_err(|e| {
                            Error::Internal(format!("the saved network {value} is not valid: {e}"))
                        })?;
                    Some(self.make_net_dir(&new, &network.redacted())?)
                } else {
                    None
                };
                let host = VmHostConfig {
                    id: new.clone(),
                    vmm: self.vmm.command(&plan),
                    serial_socket: plan.serial_socket.display().to_string(),
                    owner_pid: opts.owner_pid,
                    owner_ticks: opts.owner_pid.and_then(stockade_sys::process::start_ticks),
                    expires_at_ms: now + r.lifetime_ms,
                    cgroups,
                    // A restored VM has no shares (a VM with any cannot be saved).
                    daemons: Vec::new(),
                    net_dir,
                    vmm_ids: vmm_ids()?,
                    vmm_files: Vec::new(),
                    vmm_reads: Vec::new(),
                };
                let record = Record {
                    info: SandboxInfo {
                        id: new.clone(),
                        provider: "microvm".into(),
                        created_at_ms: now,
                        expires_at_ms: now + r.lifetime_ms,
                        owner_pid: opts.owner_pid,
                        spec: r.spec.clone(),
                        applied: r.applied.clone(),
                        state: RunState::Running,
                        steps: Vec::new(),
                    },
                    plan,
                    host,
                };
                self.write_record(&record)?;
                Ok::<_, Error>(record)
            }
            .await;
            match made_one {
                Ok(rec) => made.push(rec),
                Err(e) => {
                    let _ = self.remove(&new).await;
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            let starts = made.iter().map(|r| self.start(r, None));
            for r in futures_util::future::join_all(starts).await {
                if let Err(e) = r {
                    result = Err(e);
                }
            }
        }
        if let Err(e) = result {
            for r in &made {
                let _ = self.remove(&r.info.id).await;
            }
            return Err(e);
        }
        // Restored; later resumes boot from their own state.
        let mut infos = Vec::new();
        for mut r in made {
            r.plan.incoming = None;
            r.host.vmm = self.vmm.command(&r.plan);
            self.write_record(&r)?;
            infos.push(r.info);
        }
        drop(holds);
        Ok(infos)
    }
}
