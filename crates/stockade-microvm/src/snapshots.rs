//! Named snapshots: a sandbox's saved VM kept under a name (in
//! `$STOCKADE_HOME/snapshots/microvm/NAME`) to start new sandboxes from.
//!
//! A snapshot directory holds `vm.state` (QEMU's migration stream, copied from the
//! sandbox's pause while its SHA-256 is computed and compared with the pause's), the
//! `kernel` and `initrd` the VM booted (copies: the guest's memory belongs to that
//! kernel, and apt may remove it from `/boot`), `root.erofs` (a hard link to the root
//! image the guest has mounted, so a rebuilt image does not remove it; the cache's
//! path when the two are on different file systems), and `snapshot.json` with every
//! digest, sealed by `snapshot.seal`: an HMAC-SHA256 of `snapshot.json` under a key
//! only this host's Stockade can read (`$STOCKADE_HOME/keys/snapshots.key`, 0600), so
//! one who can write the snapshot directory cannot rewrite the digests to match a
//! state of their own. Starting from it checks the seal, re-hashes the state, kernel
//! and initrd and checks the root image's size before anything runs; a mismatch is
//! refused. A snapshot is made in a
//! `.partial-PID-TICKS-RANDOM` directory renamed into place, so a reader never sees
//! half of one; `gc` removes partial directories whose maker is dead.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stockade_core::host::hex;
use stockade_core::{
    CreateOptions, Error, Result, SandboxInfo, SnapshotInfo, Wall, check_snapshot_key, now_ms,
};

use crate::vmm::VmPlan;
use crate::{MicrovmLauncher, Restore, io, need_root, sha256_copy, sha256_file};
use stockade_core::host::check_sandbox_id;

/// What `snapshot.json` records.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    info: SnapshotInfo,
    /// The saved VM's plan; its files are this directory's when restored.
    plan: VmPlan,
    applied: Vec<Wall>,
    lifetime_ms: u64,
    cgroups: bool,
    kernel_sha256: String,
    initrd_sha256: String,
    /// The root image the guest has mounted (`root.erofs` here, or the cache's).
    root_image: PathBuf,
    root_bytes: u64,
}

/// The file holding a snapshot's seal.
const SEAL: &str = "snapshot.seal";

/// What the seal covers: a domain tag and the record's bytes.
fn sealed_bytes(record: &[u8]) -> Vec<u8> {
    let mut v = b"stockade microvm snapshot v1\0".to_vec();
    v.extend_from_slice(record);
    v
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn snapshot_not_found(name: &str) -> Error {
    Error::NotFound {
        kind: "snapshot",
        id: name.to_string(),
    }
}

fn corrupt(name: &str, what: &str) -> Error {
    Error::PolicyDenied(format!(
        "snapshot {name} is corrupt: {what}; nothing was started from it. Remove it \
         (stockade snapshot rm {name}) and take a new one"
    ))
}

impl MicrovmLauncher {
    fn snapshot_path(&self, name: &str) -> PathBuf {
        self.snapshots.join(name)
    }

    fn read_meta(&self, name: &str) -> Result<Meta> {
        Ok(self.read_meta_bytes(name)?.0)
    }

    /// The record and its bytes, as written (unchecked: for listing).
    fn read_meta_bytes(&self, name: &str) -> Result<(Meta, Vec<u8>)> {
        let p = self.snapshot_path(name).join("snapshot.json");
        let text = std::fs::read(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => snapshot_not_found(name),
            _ => Error::io(format!("cannot read {}", p.display()), e),
        })?;
        let meta = serde_json::from_slice(&text)
            .map_err(|e| corrupt(name, &format!("{}: {e}", p.display())))?;
        Ok((meta, text))
    }

    /// The record of `name`, once its seal shows this host wrote it.
    fn read_sealed_meta(&self, name: &str) -> Result<Meta> {
        let (meta, text) = self.read_meta_bytes(name)?;
        let p = self.snapshot_path(name).join(SEAL);
        let tag = std::fs::read_to_string(&p).unwrap_or_default();
        let key = self.seal_key()?;
        let tag = hex_decode(tag.trim()).unwrap_or_default();
        if ring::hmac::verify(&key, &sealed_bytes(&text), &tag).is_err() {
            return Err(corrupt(
                name,
                &format!(
                    "{} does not carry this host's seal of its record ({}): it was changed \
                     after it was taken, or taken under another key",
                    p.display(),
                    self.snapshot_key.display()
                ),
            ));
        }
        Ok(meta)
    }

    fn seal_key(&self) -> Result<ring::hmac::Key> {
        let bytes = stockade_core::host::secret_key(
            &self.snapshot_key,
            "the snapshot key",
            "and every named snapshot must be taken again",
        )?;
        Ok(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes))
    }

    /// Takes the named snapshot `name` of sandbox `id`: pauses it when it runs
    /// (saving its VM), copies the saved state into the snapshot while checking its
    /// digest, and resumes it when it ran.
    pub(crate) async fn snapshot_vm(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        need_root()?;
        check_sandbox_id(id)?;
        check_snapshot_key(name)?;
        let record = self.read_record(id)?;
        if self.snapshot_path(name).exists() {
            return Err(taken(name));
        }
        let was_paused = self.is_paused(id);
        if !was_paused {
            self.pause_vm(id).await?;
        }
        let made = self.keep(id, name, &record).await;
        if !was_paused && let Err(e) = self.resume_vm(id).await {
            // The snapshot is whole; the sandbox it came from is what failed.
            return Err(match made {
                Ok(_) => e,
                Err(first) => first,
            });
        }
        made
    }

    async fn keep(&self, id: &str, name: &str, record: &crate::Record) -> Result<SnapshotInfo> {
        // Checked against the pause's digest as it is copied (one pass, not two).
        let mem = self.dir(id).join("snapshot/vm.state");
        let manifest = self.dir(id).join("snapshot/manifest.json");
        let manifest: crate::Manifest = std::fs::read(&manifest)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .ok_or_else(|| Error::Unavailable {
                what: format!("the saved state of sandbox {id}"),
                reason: format!(
                    "{} is missing or unreadable (the pause did not finish)",
                    manifest.display()
                ),
                fix: format!("destroy it (stockade rm {id})"),
            })?;
        std::fs::create_dir_all(&self.snapshots)
            .map_err(io(format!("cannot create {}", self.snapshots.display())))?;
        let me = std::process::id();
        let stage = self.snapshots.join(format!(
            ".partial-{me}-{}-{}",
            stockade_sys::process::start_ticks(me).unwrap_or(0),
            stockade_core::host::random_hex(4)
        ));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&stage)
                .map_err(io(format!("cannot create {}", stage.display())))?;
        }
        let r = self.fill(id, name, record, &mem, &manifest, &stage).await;
        let r = r.and_then(|info| {
            std::fs::rename(&stage, self.snapshot_path(name)).map_err(|e| {
                if self.snapshot_path(name).exists() {
                    taken(name)
                } else {
                    Error::io(format!("cannot move {} into place", stage.display()), e)
                }
            })?;
            Ok(info)
        });
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&stage);
        }
        r
    }

    async fn fill(
        &self,
        id: &str,
        name: &str,
        record: &crate::Record,
        mem: &Path,
        manifest: &crate::Manifest,
        stage: &Path,
    ) -> Result<SnapshotInfo> {
        let copies = tokio::task::spawn_blocking({
            let (mem, stage, plan) = (mem.to_path_buf(), stage.to_path_buf(), record.plan.clone());
            move || -> Result<_> {
                let copy = |from: &Path, to: &str| -> Result<(String, u64)> {
                    let to = stage.join(to);
                    let mut f = std::fs::File::create(&to)
                        .map_err(io(format!("cannot create {}", to.display())))?;
                    sha256_copy(from, Some(&mut f))
                };
                Ok((
                    copy(&mem, "vm.state")?,
                    copy(&plan.kernel, "kernel")?,
                    copy(&plan.initrd, "initrd")?,
                ))
            }
        })
        .await
        .map_err(|e| Error::Internal(format!("snapshot copy task failed: {e}")))??;
        let ((sha256, bytes), (kernel_sha256, _), (initrd_sha256, _)) = copies;
        if sha256 != manifest.sha256 || bytes != manifest.bytes {
            return Err(Error::PolicyDenied(format!(
                "the saved state of sandbox {id} changed on disk (SHA-256 {sha256}, {bytes} \
                 bytes; saved as {}, {} bytes); snapshot {name} was not kept. Destroy the \
                 sandbox (stockade rm {id})",
                manifest.sha256, manifest.bytes
            )));
        }
        let link = stage.join("root.erofs");
        let root_image = if std::fs::hard_link(&record.plan.root_image, &link).is_ok() {
            self.snapshot_path(name).join("root.erofs")
        } else {
            record.plan.root_image.clone()
        };
        let root_bytes = std::fs::metadata(&record.plan.root_image)
            .map_err(io(format!(
                "cannot read {}",
                record.plan.root_image.display()
            )))?
            .len();
        let info = SnapshotInfo {
            name: name.to_string(),
            provider: "microvm".into(),
            source: id.to_string(),
            created_at_ms: now_ms(),
            bytes,
            sha256,
            spec: self.live_spec(id, &record.info.spec),
        };
        let applied = crate::plan::copy_walls(
            &record.info.applied,
            format!("started from snapshot {name} (taken of sandbox {id})"),
        );
        let meta = Meta {
            info: info.clone(),
            plan: VmPlan {
                incoming: None,
                ..record.plan.clone()
            },
            applied,
            lifetime_ms: record
                .info
                .expires_at_ms
                .saturating_sub(record.info.created_at_ms),
            cgroups: !record.host.cgroups.is_empty(),
            kernel_sha256,
            initrd_sha256,
            root_image,
            root_bytes,
        };
        let p = stage.join("snapshot.json");
        let text = serde_json::to_vec_pretty(&meta)
            .map_err(|e| Error::Internal(format!("cannot encode a snapshot: {e}")))?;
        std::fs::write(&p, &text).map_err(io(format!("cannot write {}", p.display())))?;
        let tag = ring::hmac::sign(&self.seal_key()?, &sealed_bytes(&text));
        let p = stage.join(SEAL);
        std::fs::write(&p, hex(tag.as_ref()))
            .map_err(io(format!("cannot write {}", p.display())))?;
        Ok(info)
    }

    /// The named snapshots, by name.
    pub(crate) fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let mut v = Vec::new();
        let entries = match std::fs::read_dir(&self.snapshots) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(v),
            Err(e) => {
                return Err(Error::io(
                    format!("cannot list {}", self.snapshots.display()),
                    e,
                ));
            }
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if check_snapshot_key(&name).is_ok()
                && let Ok(m) = self.read_meta(&name)
            {
                v.push(m.info);
            }
        }
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    /// Removes the named snapshot `name`.
    pub(crate) fn remove_snapshot_dir(&self, name: &str) -> Result<()> {
        check_snapshot_key(name)?;
        let p = self.snapshot_path(name);
        if !p.join("snapshot.json").exists() && !p.exists() {
            return Err(snapshot_not_found(name));
        }
        std::fs::remove_dir_all(&p).map_err(io(format!("cannot remove {}", p.display())))
    }

    /// Starts a new sandbox from the named snapshot `name`, once its state, kernel and
    /// initrd match their digests and its root image is there.
    pub(crate) async fn start_from_snapshot(
        &self,
        name: &str,
        opts: &CreateOptions,
    ) -> Result<SandboxInfo> {
        need_root()?;
        check_snapshot_key(name)?;
        let meta = self.read_sealed_meta(name)?;
        let dir = self.snapshot_path(name);
        let (mem, kernel, initrd) = (dir.join("vm.state"), dir.join("kernel"), dir.join("initrd"));
        let sums = tokio::task::spawn_blocking({
            let (mem, kernel, initrd) = (mem.clone(), kernel.clone(), initrd.clone());
            move || -> Result<_> {
                Ok((
                    sha256_file(&mem)?,
                    sha256_file(&kernel)?,
                    sha256_file(&initrd)?,
                ))
            }
        })
        .await
        .map_err(|e| Error::Internal(format!("digest task failed: {e}")))?
        .map_err(|e| match e {
            Error::Io { .. } => corrupt(name, &format!("a file of it is unreadable: {e}")),
            e => e,
        })?;
        let ((sha256, bytes), (k, _), (i, _)) = sums;
        if sha256 != meta.info.sha256 || bytes != meta.info.bytes {
            return Err(corrupt(
                name,
                &format!(
                    "{} has SHA-256 {sha256} ({bytes} bytes), not {} ({} bytes) as taken",
                    mem.display(),
                    meta.info.sha256,
                    meta.info.bytes
                ),
            ));
        }
        if k != meta.kernel_sha256 {
            return Err(corrupt(
                name,
                &format!("{} does not match its digest", kernel.display()),
            ));
        }
        if i != meta.initrd_sha256 {
            return Err(corrupt(
                name,
                &format!("{} does not match its digest", initrd.display()),
            ));
        }
        match std::fs::metadata(&meta.root_image) {
            Ok(m) if m.len() == meta.root_bytes => {}
            Ok(m) => {
                return Err(corrupt(
                    name,
                    &format!(
                        "its root image {} is {} bytes, not {} as taken",
                        meta.root_image.display(),
                        m.len(),
                        meta.root_bytes
                    ),
                ));
            }
            Err(e) => {
                return Err(Error::Unavailable {
                    what: format!("snapshot {name}"),
                    reason: format!(
                        "the root image it was taken on, {}, is gone ({e}; the host's packages changed and it was pruned)",
                        meta.root_image.display()
                    ),
                    fix: format!("remove it (stockade snapshot rm {name}) and take a new one"),
                });
            }
        }
        let restore = Restore {
            mem,
            plan: VmPlan {
                initrd,
                root_image: meta.root_image.clone(),
                ..meta.plan.clone()
            },
            kernel: Some(kernel),
            spec: meta.info.spec.clone(),
            applied: meta.applied.clone(),
            lifetime_ms: meta.lifetime_ms,
            cgroups: meta.cgroups,
        };
        let mut infos = self.restore_new(&restore, 1, opts).await?;
        infos
            .pop()
            .ok_or_else(|| Error::Internal("no sandbox was started".into()))
    }

    /// Removes partial snapshot directories whose maker is dead (a crash mid-copy).
    pub(crate) fn gc_partial_snapshots(&self) -> Vec<String> {
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.snapshots) else {
            return removed;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(rest) = name.strip_prefix(".partial-") else {
                continue;
            };
            let mut f = rest.split('-');
            let maker = f.next().and_then(|p| p.parse::<u32>().ok());
            let ticks = f.next().and_then(|t| t.parse::<u64>().ok());
            let alive = match (maker, ticks) {
                (Some(p), Some(t)) => stockade_sys::process::start_ticks(p) == Some(t),
                _ => false,
            };
            if !alive && std::fs::remove_dir_all(e.path()).is_ok() {
                removed.push(e.path().display().to_string());
            }
        }
        removed
    }
}

fn taken(name: &str) -> Error {
    Error::InvalidRequest(format!(
        "snapshot {name} already exists; remove it first (stockade snapshot rm {name}) or pick another name"
    ))
}
