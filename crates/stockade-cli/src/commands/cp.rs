//! `stockade cp SRC DEST`: copy files and directories between the host and a sandbox.
//! One side is `ID:/path`. Directories travel as tar archives; on the host they are
//! unpacked by `stockade::archive::unpack_on_host` (the rule the SDKs apply too).

use std::path::{Path, PathBuf};

use clap::Args;
use stockade::archive::unpack_on_host;
use stockade::files::{FileKind, MAX_ENTRIES, MAX_TRANSFER_BYTES};
use stockade::{Error, FileOp, FileResult, Provider, Result};

use super::Ctx;

#[derive(Args, Debug)]
pub struct CpArgs {
    /// Source: a host path or ID:/path.
    pub src: String,
    /// Destination: a host path or ID:/path.
    pub dest: String,
}

fn split(arg: &str) -> Option<(&str, &str)> {
    let (id, path) = arg.split_once(':')?;
    (!id.is_empty() && !id.contains('/') && path.starts_with('/')).then_some((id, path))
}

/// What one copy did: a file or a directory (as a tar archive), where it landed, and
/// how many bytes crossed.
struct Copied {
    kind: &'static str,
    dest: String,
    bytes: usize,
}

pub async fn run(ctx: &Ctx, a: CpArgs) -> Result<i32> {
    let provider = match split(&a.src).or(split(&a.dest)) {
        Some((id, _)) => ctx.provider_for(id).await?,
        None => ctx.provider()?,
    };
    let copied = match (split(&a.src), split(&a.dest)) {
        (None, Some((id, dest))) => {
            let c = to_sandbox(provider.as_ref(), Path::new(&a.src), id, dest).await?;
            Copied {
                dest: format!("{id}:{}", c.dest),
                ..c
            }
        }
        (Some((id, src)), None) => {
            from_sandbox(provider.as_ref(), id, src, Path::new(&a.dest)).await?
        }
        _ => {
            return Err(Error::InvalidRequest(
                "exactly one of SRC and DEST must be ID:/path".into(),
            ));
        }
    };
    if ctx.json {
        println!(
            "{}",
            serde_json::json!({"src": a.src, "dest": copied.dest, "kind": copied.kind, "bytes": copied.bytes})
        );
    }
    Ok(0)
}

async fn to_sandbox(p: &dyn Provider, src: &Path, id: &str, dest: &str) -> Result<Copied> {
    let md = std::fs::metadata(src)
        .map_err(|e| Error::InvalidRequest(format!("cannot copy {}: {e}", src.display())))?;
    if md.is_dir() {
        let archive = pack_host_dir(src)?;
        let bytes = archive.len();
        p.file(
            id,
            FileOp::Upload {
                dest: dest.into(),
                archive,
            },
        )
        .await?;
        Ok(Copied {
            kind: "dir",
            dest: dest.into(),
            bytes,
        })
    } else {
        if md.len() > stockade::files::MAX_FILE_BYTES {
            return Err(Error::LimitExceeded {
                what: format!("{} ({} bytes)", src.display(), md.len()),
                limit: format!("{} bytes per file", stockade::files::MAX_FILE_BYTES),
            });
        }
        let data = std::fs::read(src)
            .map_err(|e| Error::io(format!("cannot read {}", src.display()), e))?;
        // Into DEST when it is a directory (or ends with '/'), as cp and docker cp do.
        let stat = p.file(id, FileOp::Stat { path: dest.into() }).await;
        let is_dir = matches!(&stat, Ok(FileResult::Entries(e)) if e.first().is_some_and(|e| e.kind == FileKind::Dir));
        let name = src.file_name().unwrap_or_default().to_string_lossy();
        let target = if dest.ends_with('/') || is_dir {
            format!("{}/{name}", dest.trim_end_matches('/'))
        } else {
            dest.to_string()
        };
        let bytes = data.len();
        p.file(
            id,
            FileOp::Write {
                path: target.clone(),
                data,
                mode: Some(std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777),
            },
        )
        .await?;
        Ok(Copied {
            kind: "file",
            dest: target,
            bytes,
        })
    }
}

fn pack_host_dir(dir: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let mut total = 0u64;
    let mut count = 0u32;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let full = dir.join(&rel);
        for e in std::fs::read_dir(&full)
            .map_err(|e| Error::io(format!("cannot read {}", full.display()), e))?
        {
            let e = e.map_err(|e| Error::io(format!("cannot read {}", full.display()), e))?;
            let name = rel.join(e.file_name());
            let ft = e.file_type().map_err(|e| Error::io("cannot stat", e))?;
            count += 1;
            total += e.metadata().map(|m| m.len()).unwrap_or(0);
            if count > MAX_ENTRIES || total > MAX_TRANSFER_BYTES {
                return Err(Error::LimitExceeded {
                    what: format!("copying {}", dir.display()),
                    limit: format!("{MAX_ENTRIES} entries and {MAX_TRANSFER_BYTES} bytes"),
                });
            }
            if ft.is_dir() {
                b.append_dir(&name, e.path())
                    .map_err(|e| Error::io("cannot pack", e))?;
                stack.push(name);
            } else if ft.is_file() || ft.is_symlink() {
                b.append_path_with_name(e.path(), &name)
                    .map_err(|e| Error::io("cannot pack", e))?;
            }
        }
    }
    b.into_inner().map_err(|e| Error::io("cannot pack", e))
}

async fn from_sandbox(p: &dyn Provider, id: &str, src: &str, dest: &Path) -> Result<Copied> {
    // Stat follows links inside the sandbox: a symlink copies what it names there.
    let kind = match p.file(id, FileOp::Stat { path: src.into() }).await? {
        FileResult::Entries(e) if !e.is_empty() => e[0].kind,
        other => return Err(Error::Internal(format!("unexpected stat result {other:?}"))),
    };
    if kind == FileKind::Dir {
        let archive = match p.file(id, FileOp::Download { path: src.into() }).await? {
            FileResult::Archive(a) => a,
            other => {
                return Err(Error::Internal(format!(
                    "unexpected download result {other:?}"
                )));
            }
        };
        unpack_on_host(&archive, dest)?;
        Ok(Copied {
            kind: "dir",
            dest: dest.display().to_string(),
            bytes: archive.len(),
        })
    } else {
        let data = match p
            .file(
                id,
                FileOp::Read {
                    path: src.into(),
                    offset: 0,
                    limit: stockade::files::MAX_FILE_BYTES,
                },
            )
            .await?
        {
            FileResult::Data {
                data, eof: true, ..
            } => data,
            FileResult::Data { size, .. } => {
                return Err(Error::LimitExceeded {
                    what: format!("{src} ({size} bytes)"),
                    limit: format!("{} bytes per file", stockade::files::MAX_FILE_BYTES),
                });
            }
            other => return Err(Error::Internal(format!("unexpected read result {other:?}"))),
        };
        let target = if dest.is_dir() {
            dest.join(Path::new(src).file_name().unwrap_or_default())
        } else {
            dest.to_path_buf()
        };
        std::fs::write(&target, &data)
            .map_err(|e| Error::io(format!("cannot write {}", target.display()), e))?;
        Ok(Copied {
            kind: "file",
            dest: target.display().to_string(),
            bytes: data.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(name: &str, kind: tar::EntryType, link: Option<&str>) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
        }
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn hostile_archives_from_a_sandbox_cannot_escape_dest() {
        let dest = tempfile::tempdir().unwrap();
        let target = dest.path().join("out");
        for (name, kind, link) in [
            ("../escape", tar::EntryType::Regular, None),
            ("/tmp/abs", tar::EntryType::Regular, None),
            ("dev", tar::EntryType::Block, None),
            ("hard", tar::EntryType::Link, Some("/etc/passwd")),
        ] {
            let err = unpack_on_host(&archive(name, kind, link), &target).unwrap_err();
            assert_eq!(
                err.code(),
                stockade::ErrorCode::PolicyDenied,
                "{name}: {err}"
            );
        }
        assert!(!dest.path().join("escape").exists());
    }
}
