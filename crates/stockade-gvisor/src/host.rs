//! The host's files of a gVisor sandbox: its watcher, runsc's state, the console
//! log, its private directories and the root it runs on.

use super::*;

/// The detached watcher of sandbox `id` (its command line is `... gvisor-watch RUNSC
/// ROOT ID INIT OWNER EXPIRES DIR LOCK`) and its start time.
pub(crate) fn find_watcher(id: &str, dir: &Path) -> Option<(u32, u64)> {
    let dir = dir.as_os_str().as_encoded_bytes();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.get(1) == Some(&b"gvisor-watch".as_slice())
            && args.get(4) == Some(&id.as_bytes())
            && args.get(8) == Some(&dir)
        {
            return stockade_sys::process::start_ticks(pid).map(|t| (pid, t));
        }
    }
    None
}

/// Removes `dir` and everything below it (never following a symlink), like
/// `remove_dir_all`, but the directories of one depth in parallel: the root's mount
/// points were mount points in the gofer's mount namespace, just ended, and each
/// rmdir of one waits for an RCU grace period (~3 ms each here, ~30 ms a sandbox one
/// after the other); in parallel the waits overlap. A missing `dir` is not an error.
pub(crate) fn remove_tree(dir: &Path) -> std::io::Result<()> {
    fn walk(d: &Path, depth: usize, dirs: &mut Vec<(usize, PathBuf)>) -> std::io::Result<()> {
        for e in std::fs::read_dir(d)? {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                walk(&path, depth + 1, dirs)?;
            } else {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        dirs.push((depth, d.to_path_buf()));
        Ok(())
    }
    let mut dirs = Vec::new();
    match walk(dir, 0, &mut dirs) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    for level in dirs.chunk_by(|a, b| a.0 == b.0) {
        let results: Vec<std::io::Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = level
                .iter()
                .map(|(_, d)| s.spawn(move || std::fs::remove_dir(d)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
                })
                .collect()
        });
        for r in results {
            match r {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// runsc's files of sandbox `id` in its state root (`ID_sandbox:ID.state` and
/// `.lock`, and the sandbox's control socket `runsc-ID.sock`, which runsc leaves
/// behind when its sandbox is killed).
pub(crate) fn runsc_files(runsc_root: &Path, id: &str) -> Vec<PathBuf> {
    std::fs::read_dir(runsc_root)
        .map(|d| {
            d.flatten()
                .filter(|e| runsc_file_id(&e.file_name().to_string_lossy()) == Some(id))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The sandbox id a file of runsc's state root belongs to.
fn runsc_file_id(name: &str) -> Option<&str> {
    name.split_once("_sandbox:")
        .map(|(id, _)| id)
        .or_else(|| name.strip_prefix("runsc-")?.strip_suffix(".sock"))
}

/// Removes runsc's state of sandbox `id`: from then on runsc does not know it.
pub(crate) fn remove_runsc_state(runsc_root: &Path, id: &str) -> Result<()> {
    for f in runsc_files(runsc_root, id) {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove", &f)(e)),
        }
    }
    Ok(())
}

/// The sandbox ids runsc has files of in `runsc_root`, with the age of the youngest.
pub(crate) fn runsc_ids(runsc_root: &Path) -> Vec<(String, Duration)> {
    let mut v: Vec<(String, Duration)> = Vec::new();
    for e in std::fs::read_dir(runsc_root)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = runsc_file_id(&name) else {
            continue;
        };
        let age = e
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default())
            .unwrap_or_default();
        match v.iter_mut().find(|(i, _)| i == id) {
            Some((_, a)) => *a = (*a).min(age),
            None => v.push((id.to_string(), age)),
        }
    }
    v
}

/// [`Runsc::open`], whose answer (two runs of runsc, ~50 ms, on every create of a
/// fresh process such as the CLI) is kept per build of the binary
/// ([`runsc::identity`]) in `runsc-info.json` of the runtime directory. Only a runsc
/// that answered is kept; a missing or broken one is asked again each time.
pub(crate) async fn open_runsc(path: &Path) -> Result<Runsc> {
    let cache_dir = stockade_core::host::runtime_dir("stockade-gvisor");
    let cache = cache_dir.join("runsc-info.json");
    let key = runsc::identity(path);
    if let Some(key) = &key
        && let Ok(text) = std::fs::read_to_string(&cache)
        && let Ok((k, r)) = serde_json::from_str::<(String, Runsc)>(&text)
        && k == *key
        && r.path == path
    {
        return Ok(r);
    }
    let runsc = Runsc::open(path).await?;
    if let Some(key) = key
        && std::fs::create_dir_all(&cache_dir).is_ok()
        && let Ok(text) = serde_json::to_string(&(key, &runsc))
    {
        let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &cache);
        }
    }
    Ok(runsc)
}

pub(crate) fn console_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        "it exited without a message".into()
    } else {
        let start = text.len().saturating_sub(2000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text[start..].to_string()
    }
}

pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| Error::Internal(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(path, bytes).map_err(io("write", path))
}

pub(crate) fn make_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io("create", dir))
}

/// The state root (0711, root's) and the sandbox's directory (0700).
pub(crate) fn make_dirs(root: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(root).map_err(io("create", root))?;
    let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711));
    make_private(dir)
}

/// Applies `ops` below `base` (a directory of ours, just made: nothing in it is a
/// link we did not make, so joining paths is safe).
pub(crate) fn write_root(base: &Path, ops: &[bundle::RootOp]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(base).map_err(io("create", base))?;
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod", base))?;
    for op in ops {
        match op {
            bundle::RootOp::Dir { path, mode } => {
                let p = base.join(path);
                if std::fs::symlink_metadata(&p).is_err() {
                    std::fs::create_dir_all(&p).map_err(io("create", &p))?;
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
                        .map_err(io("chmod", &p))?;
                }
            }
            bundle::RootOp::EmptyFile { path } => {
                let p = base.join(path);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                }
                if std::fs::symlink_metadata(&p).is_err() {
                    std::fs::write(&p, b"").map_err(io("create", &p))?;
                }
            }
            bundle::RootOp::Symlink { to, path } => {
                let p = base.join(path);
                if std::fs::symlink_metadata(&p).is_err() {
                    std::os::unix::fs::symlink(to, &p).map_err(io("link", &p))?;
                }
            }
            bundle::RootOp::File {
                path,
                contents,
                mode,
            } => {
                let p = base.join(path);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                }
                std::fs::write(&p, contents).map_err(io("write", &p))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
                    .map_err(io("chmod", &p))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runsc_file_of_a_sandbox_is_found_its_socket_too() {
        let root = tempfile::tempdir().unwrap();
        let id = "sb-0123456789ab";
        for name in [
            format!("{id}_sandbox:{id}.state"),
            format!("{id}_sandbox:{id}.lock"),
            format!("runsc-{id}.sock"),
            "runsc-sb-ffffffffffff.sock".to_string(),
            "unrelated".to_string(),
        ] {
            std::fs::write(root.path().join(name), "").unwrap();
        }
        let mut mine: Vec<String> = runsc_files(root.path(), id)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        mine.sort();
        assert_eq!(
            mine,
            [
                "runsc-sb-0123456789ab.sock",
                "sb-0123456789ab_sandbox:sb-0123456789ab.lock",
                "sb-0123456789ab_sandbox:sb-0123456789ab.state"
            ]
        );
        let mut ids: Vec<String> = runsc_ids(root.path()).into_iter().map(|(i, _)| i).collect();
        ids.sort();
        assert_eq!(ids, ["sb-0123456789ab", "sb-ffffffffffff"]);
        remove_runsc_state(root.path(), id).unwrap();
        assert!(runsc_files(root.path(), id).is_empty());
    }
}
