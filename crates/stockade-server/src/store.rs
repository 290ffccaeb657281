//! Durable daemon state in `redb`: the sandboxes the daemon handed out or keeps warm,
//! the pools, and what each tenant added to the image store. Every change is committed before the call that made it returns, so
//! a daemon killed with `kill -9` restarts knowing what it owned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const SANDBOXES: TableDefinition<&str, &[u8]> = TableDefinition::new("sandboxes");
const POOLS: TableDefinition<&str, &[u8]> = TableDefinition::new("pools");
const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
/// Bytes each tenant added to the image store (its image budget's use).
const IMAGE_BYTES: TableDefinition<&str, u64> = TableDefinition::new("image_bytes");
/// The images each tenant pulled itself: `TENANT\0REFERENCE` to the manifest digest
/// its own pull resolved the reference to.
const TENANT_IMAGES: TableDefinition<&str, &str> = TableDefinition::new("tenant_images");

/// A failure of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state store {path}: {message}")]
    Db { path: PathBuf, message: String },
    #[error("state store {path}: record {key} is corrupt: {message}")]
    Corrupt {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// A sandbox the daemon owns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub tenant: String,
    pub provider: String,
    /// The spec as the tenant asked for it (for pooled ones, with the late-bound env
    /// and workdir).
    pub spec: serde_json::Value,
    /// The pool template it came from.
    pub template: Option<String>,
    /// Waiting in its pool, not handed out yet.
    pub idle: bool,
    /// Late-bound environment (pooled sandboxes).
    pub env: BTreeMap<String, String>,
    /// Late-bound working directory (pooled sandboxes).
    pub workdir: Option<String>,
    pub created_at_ms: u64,
    /// When the daemon destroys it (the caller's lifetime).
    pub expires_at_ms: u64,
    /// Idle timeout the daemon enforces, if any.
    pub idle_timeout_ms: Option<u64>,
    /// A process on this host whose death destroys it.
    pub owner_pid: Option<u32>,
    /// Its destroy was answered and its teardown runs in the background: it is
    /// shown to nobody, and a daemon that starts and finds it destroys it.
    #[serde(default)]
    pub destroying: bool,
    /// When it was paused (unix ms), while it is: its lifetime and idle timeout do
    /// not run meanwhile (each moves by the pause's length at resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at_ms: Option<u64>,
}

/// A warm pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub template_id: String,
    pub tenant: String,
    pub provider: String,
    /// The template spec (env and workdir empty).
    pub spec: serde_json::Value,
    pub min_idle: u32,
    pub max: u32,
}

/// The store (cheap to clone).
#[derive(Clone)]
pub struct Store {
    /// `None` only between a failed reopen and the next attempt.
    db: Arc<std::sync::RwLock<Option<Database>>>,
    path: PathBuf,
}

/// What redb says once an I/O error has made it refuse every later transaction.
const PREVIOUS_IO: &str = "Previous I/O error";

/// The bytes of a redb file's header that say how long the file is.
const REDB_HEADER_FIELDS: usize = 32;

/// Why a redb file of `len` bytes, beginning with `head`, is shorter than its own
/// header says (redb 3's layout: the magic number, then the page size, the pages of
/// a region's header, a region's data pages, the full regions and the trailing
/// region's data pages, little-endian u32s from byte 12). `None`: not truncated, or
/// not a redb file at all (redb then says what it is).
fn truncation(head: &[u8], len: u64) -> Option<String> {
    const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
    if len == 0 {
        return None;
    }
    if head.len() < REDB_HEADER_FIELDS {
        return head
            .starts_with(&MAGIC[..head.len().min(MAGIC.len())])
            .then(|| format!("{len} bytes, shorter than its header"));
    }
    if head[..MAGIC.len()] != MAGIC {
        return None;
    }
    let u32_at = |o: usize| {
        u64::from(u32::from_le_bytes([
            head[o],
            head[o + 1],
            head[o + 2],
            head[o + 3],
        ]))
    };
    let (page, region_header, region_data, full, trailing) =
        (u32_at(12), u32_at(16), u32_at(20), u32_at(24), u32_at(28));
    let regions = full + u64::from(trailing > 0);
    if page == 0 || regions == 0 {
        return Some("its header describes no regions".into());
    }
    let full_len = (region_header + region_data) * page;
    let last = if trailing > 0 { trailing } else { region_data };
    let expected = page + (regions - 1) * full_len + (region_header + last) * page;
    (len < expected).then(|| format!("{len} bytes of the {expected} its header describes"))
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        // redb asserts (and the process aborts) on a file shorter than its header
        // says: that damage is told here, with what to do.
        if let Ok(f) = std::fs::File::open(path) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let mut head = Vec::with_capacity(REDB_HEADER_FIELDS);
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(f, REDB_HEADER_FIELDS as u64),
                &mut head,
            );
            if let Some(why) = truncation(&head, len) {
                return Err(StoreError::Db {
                    path: path.into(),
                    message: format!(
                        "the file is damaged ({why}): move it aside (mv {p} {p}.damaged) and \
                         start the daemon again; it then starts with no record of the sandboxes \
                         the old state described (`stockade ls --direct` lists them, `stockade \
                         rm --direct ID` removes one)",
                        p = path.display()
                    ),
                });
            }
        }
        let db = Database::create(path).map_err(|e| StoreError::Db {
            path: path.into(),
            message: e.to_string(),
        })?;
        let s = Store {
            db: Arc::new(std::sync::RwLock::new(Some(db))),
            path: path.into(),
        };
        // Create the tables so readers never meet a missing one.
        s.write(|t| {
            t.open_table(SANDBOXES)?;
            t.open_table(POOLS)?;
            t.open_table(META)?;
            t.open_table(IMAGE_BYTES)?;
            t.open_table(TENANT_IMAGES)?;
            Ok(())
        })?;
        Ok(s)
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Db {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Runs `op` on the database. redb refuses every transaction after one I/O error
    /// (a full disk, say) until the database is opened again: then it is reopened
    /// (the old handle, and its file lock, dropped first) and `op` runs once more, so
    /// a disk that has room again works again without a restart.
    fn retrying<T>(
        &self,
        mut op: impl FnMut(&Database) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let first = {
            let g = self
                .db
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match g.as_ref() {
                Some(db) => op(db),
                None => Err(self.err(PREVIOUS_IO)),
            }
        };
        match first {
            Err(e) if e.to_string().contains(PREVIOUS_IO) => {
                let mut g = self
                    .db
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *g = None;
                let db = Database::create(&self.path).map_err(|e| self.err(e))?;
                op(g.insert(db))
            }
            r => r,
        }
    }

    fn write(
        &self,
        mut f: impl FnMut(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        self.retrying(|db| {
            let t = db.begin_write().map_err(|e| self.err(e))?;
            f(&t).map_err(|e| self.err(e))?;
            t.commit().map_err(|e| self.err(e))
        })
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction, StoreError> {
        self.retrying(|db| db.begin_read().map_err(|e| self.err(e)))
    }

    /// This daemon's id (made once, kept): the label of every sandbox it creates.
    /// Kept twice, in the database and in `daemon-id` beside it, so a state file that
    /// was emptied, removed or moved aside does not lose it: the daemon that starts
    /// on a fresh file still knows the sandboxes it labelled and reaps them.
    pub fn daemon_id(&self) -> Result<String, StoreError> {
        let r = self.begin_read()?;
        let t = r.open_table(META).map_err(|e| self.err(e))?;
        let side = self.path.with_file_name("daemon-id");
        if let Some(v) = t.get("daemon_id").map_err(|e| self.err(e))? {
            let id = v.value().to_string();
            if !side.exists() {
                write_id(&side, &id).map_err(|e| self.err(e))?;
            }
            return Ok(id);
        }
        drop((t, r));
        let kept = std::fs::read_to_string(&side)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()));
        let id = kept.unwrap_or_else(|| random_hex(8));
        self.write(|t| {
            t.open_table(META)?.insert("daemon_id", id.as_str())?;
            Ok(())
        })?;
        write_id(&side, &id).map_err(|e| self.err(e))?;
        Ok(id)
    }

    /// Saves a sandbox record.
    pub fn put_sandbox(&self, r: &SandboxRecord) -> Result<(), StoreError> {
        let v = serde_json::to_vec(r).map_err(|e| self.err(e))?;
        self.write(|t| {
            t.open_table(SANDBOXES)?
                .insert(r.id.as_str(), v.as_slice())?;
            Ok(())
        })
    }

    /// Forgets a sandbox.
    pub fn remove_sandbox(&self, id: &str) -> Result<(), StoreError> {
        self.write(|t| {
            t.open_table(SANDBOXES)?.remove(id)?;
            Ok(())
        })
    }

    /// Saves a pool.
    pub fn put_pool(&self, p: &PoolRecord) -> Result<(), StoreError> {
        let key = format!("{}/{}", p.tenant, p.template_id);
        let v = serde_json::to_vec(p).map_err(|e| self.err(e))?;
        self.write(|t| {
            t.open_table(POOLS)?.insert(key.as_str(), v.as_slice())?;
            Ok(())
        })
    }

    /// Forgets a pool.
    pub fn remove_pool(&self, tenant: &str, template_id: &str) -> Result<(), StoreError> {
        let key = format!("{tenant}/{template_id}");
        self.write(|t| {
            t.open_table(POOLS)?.remove(key.as_str())?;
            Ok(())
        })
    }

    /// Bytes `tenant` has added to the image store.
    pub fn image_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let r = self.begin_read()?;
        let t = r.open_table(IMAGE_BYTES).map_err(|e| self.err(e))?;
        Ok(t.get(tenant)
            .map_err(|e| self.err(e))?
            .map(|v| v.value())
            .unwrap_or(0))
    }

    /// Charges `bytes` more to `tenant`'s image budget; returns its new total.
    pub fn add_image_bytes(&self, tenant: &str, bytes: u64) -> Result<u64, StoreError> {
        let mut total = 0;
        self.write(|t| {
            let mut table = t.open_table(IMAGE_BYTES)?;
            let before = table.get(tenant)?.map(|v| v.value()).unwrap_or(0);
            total = before.saturating_add(bytes);
            table.insert(tenant, total)?;
            Ok(())
        })?;
        Ok(total)
    }

    /// The digest `tenant`'s own pull of `reference` resolved it to, if it pulled it.
    pub fn tenant_image(
        &self,
        tenant: &str,
        reference: &str,
    ) -> Result<Option<String>, StoreError> {
        let key = format!("{tenant}\0{reference}");
        let r = self.begin_read()?;
        let t = r.open_table(TENANT_IMAGES).map_err(|e| self.err(e))?;
        Ok(t.get(key.as_str())
            .map_err(|e| self.err(e))?
            .map(|v| v.value().to_string()))
    }

    /// Records that `tenant`'s own pull resolved `reference` to `digest`.
    pub fn set_tenant_image(
        &self,
        tenant: &str,
        reference: &str,
        digest: &str,
    ) -> Result<(), StoreError> {
        let key = format!("{tenant}\0{reference}");
        self.write(|t| {
            t.open_table(TENANT_IMAGES)?.insert(key.as_str(), digest)?;
            Ok(())
        })
    }

    /// Everything saved.
    pub fn load(&self) -> Result<(Vec<SandboxRecord>, Vec<PoolRecord>), StoreError> {
        let r = self.begin_read()?;
        let mut sandboxes = Vec::new();
        let t = r.open_table(SANDBOXES).map_err(|e| self.err(e))?;
        for item in t.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            sandboxes.push(
                serde_json::from_slice(v.value()).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    key: k.value().to_string(),
                    message: e.to_string(),
                })?,
            );
        }
        let mut pools = Vec::new();
        let t = r.open_table(POOLS).map_err(|e| self.err(e))?;
        for item in t.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            pools.push(
                serde_json::from_slice(v.value()).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    key: k.value().to_string(),
                    message: e.to_string(),
                })?,
            );
        }
        Ok((sandboxes, pools))
    }
}

pub use stockade::host::random_hex;

/// Writes `id` to `path` whole or not at all (a temporary file renamed over it).
fn write_id(path: &Path, id: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{id}\n"))?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> SandboxRecord {
        SandboxRecord {
            id: id.into(),
            tenant: "t-1".into(),
            provider: "native".into(),
            spec: serde_json::json!({"timeout_secs": 5}),
            template: Some("tpl".into()),
            idle: false,
            env: [("A".to_string(), "1".to_string())].into(),
            workdir: Some("/w".into()),
            created_at_ms: 1,
            expires_at_ms: 2,
            idle_timeout_ms: Some(3),
            owner_pid: Some(4),
            destroying: false,
            paused_at_ms: None,
        }
    }

    /// A full disk fails the writes while it is full, and not after: the database is
    /// opened again instead of refusing every transaction until a restart.
    #[test]
    fn a_disk_that_was_full_works_again_without_a_restart() {
        if !stockade_testkit::require_root("a_disk_that_was_full_works_again_without_a_restart") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path();
        let fs = stockade_testkit::Tmpfs::mount(mnt, "4m");
        let s = Store::open(&mnt.join("state.redb")).unwrap();
        s.put_sandbox(&record("sb-1")).unwrap();
        // Fill the disk, then write until the store fails.
        let filler = fs.fill("filler");
        let mut failed = false;
        for i in 0..200 {
            let mut r = record(&format!("sb-big-{i}"));
            r.spec = serde_json::json!({"pad": "x".repeat(64 * 1024)});
            if s.put_sandbox(&r).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "the full disk never failed a write");
        // Room again: the next writes and reads work.
        std::fs::remove_file(&filler).unwrap();
        s.put_sandbox(&record("sb-2"))
            .expect("a write after the disk has room again");
        let (sandboxes, _) = s.load().unwrap();
        let ids: Vec<&str> = sandboxes.iter().map(|r| r.id.as_str()).collect();
        assert!(ids.contains(&"sb-1") && ids.contains(&"sb-2"), "{ids:?}");
    }

    #[test]
    fn a_truncated_state_file_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Store::open(&path).unwrap();
            s.put_sandbox(&record("sb-1")).unwrap();
        }
        let full = std::fs::metadata(&path).unwrap().len();
        for len in [full / 2, 4096, 100, 20] {
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(len).unwrap();
            drop(f);
            // (A panic here, in redb, would abort the daemon.)
            let e = Store::open(&path)
                .err()
                .expect("a truncated file opened")
                .to_string();
            assert!(
                e.contains("damaged") && e.contains(".damaged"),
                "{len}: {e}"
            );
            assert!(e.contains(&path.display().to_string()), "{e}");
        }
        // Moved aside as told, the daemon starts again.
        std::fs::rename(&path, dir.path().join("state.redb.damaged")).unwrap();
        Store::open(&path).unwrap();
    }

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let id;
        {
            let s = Store::open(&path).unwrap();
            id = s.daemon_id().unwrap();
            assert_eq!(s.daemon_id().unwrap(), id, "stable");
            s.put_sandbox(&record("sb-1")).unwrap();
            s.put_sandbox(&record("sb-2")).unwrap();
            s.remove_sandbox("sb-1").unwrap();
            s.put_pool(&PoolRecord {
                template_id: "tpl".into(),
                tenant: "t-1".into(),
                provider: "native".into(),
                spec: serde_json::json!({}),
                min_idle: 2,
                max: 4,
            })
            .unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.daemon_id().unwrap(), id);
        let (sbs, pools) = s.load().unwrap();
        {
            // The state file removed: the id lives on beside it.
            let fresh = dir.path().join("fresh");
            std::fs::create_dir(&fresh).unwrap();
            std::fs::copy(dir.path().join("daemon-id"), fresh.join("daemon-id")).unwrap();
            let other = Store::open(&fresh.join("state.redb")).unwrap();
            assert_eq!(
                other.daemon_id().unwrap(),
                id,
                "the id was lost with the file"
            );
        }
        assert_eq!(sbs, vec![record("sb-2")]);
        assert_eq!(pools.len(), 1);
        s.remove_pool("t-1", "tpl").unwrap();
        assert!(s.load().unwrap().1.is_empty());
        assert_eq!(s.image_bytes("t-1").unwrap(), 0);
        assert_eq!(s.add_image_bytes("t-1", 5).unwrap(), 5);
        assert_eq!(s.add_image_bytes("t-1", 7).unwrap(), 12);
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(
            s.image_bytes("t-1").unwrap(),
            12,
            "charges survive reopening"
        );
        assert_eq!(s.image_bytes("t-2").unwrap(), 0);
    }
}
