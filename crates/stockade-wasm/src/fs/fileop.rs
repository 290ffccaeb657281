//! [`Provider::file`](stockade_core::Provider::file) on the wasm provider: each
//! operation of the shared file API done with the host-side file operations.

use stockade_core::{Error, FileOp as Op, FileResult as Res, Result};

use crate::WasmProvider;

impl WasmProvider {
    /// Does `op` on sandbox `id`'s files, answering as the agent does.
    pub(crate) async fn file_op(&self, id: &str, op: Op) -> Result<Res> {
        // The entry of one path, from its parent's listing.
        let stat = |path: String| async move {
            let (parent, name) = match path.trim_end_matches('/').rsplit_once('/') {
                Some(("", n)) => ("/".to_string(), n.to_string()),
                Some((p, n)) => (p.to_string(), n.to_string()),
                None => (".".to_string(), path.clone()),
            };
            self.list_dir(id, &parent)
                .await?
                .into_iter()
                .find(|e| e.name == name)
                .ok_or(Error::NotFound {
                    kind: "path",
                    id: path,
                })
        };
        Ok(match op {
            Op::Write { path, data, .. } => {
                self.write_file(id, &path, &data).await?;
                Res::Done
            }
            Op::Read {
                path,
                offset,
                limit,
            } => {
                let size = stat(path.clone()).await?.size;
                let data = self.read_range(id, &path, offset, limit).await?;
                Res::Data {
                    eof: offset + data.len() as u64 >= size,
                    data,
                    size,
                }
            }
            Op::Edit {
                path,
                old,
                new,
                replace_all,
            } => Res::Edited {
                replacements: self.edit_file(id, &path, &old, &new, replace_all).await? as u64,
            },
            Op::Ls { path } => Res::Entries(self.list_dir(id, &path).await?),
            Op::Stat { path } => Res::Entries(vec![stat(path).await?]),
            Op::Glob { pattern, root } => {
                // The file API returns paths relative to the root, as the agent does.
                let prefix = format!("{}/", root.trim_end_matches('/'));
                let paths = self.glob(id, &pattern, Some(&root)).await?;
                let paths = paths
                    .into_iter()
                    .map(|p| p.strip_prefix(&prefix).map(str::to_string).unwrap_or(p))
                    .collect();
                Res::Paths {
                    paths,
                    truncated: false,
                }
            }
            Op::Grep {
                regex,
                root,
                include,
                max_matches,
            } => {
                let max = if max_matches == 0 {
                    stockade_core::files::DEFAULT_GREP_MATCHES
                } else {
                    max_matches
                } as usize;
                let matches = self
                    .grep(id, &regex, Some(&root), include.as_deref(), max)
                    .await?;
                let truncated = matches.len() >= max;
                Res::Matches { matches, truncated }
            }
            Op::Mkdir { path, .. } => {
                self.mkdir(id, &path).await?;
                Res::Done
            }
            Op::Rm { path, recursive } => {
                self.remove(id, &path, recursive).await?;
                Res::Done
            }
            Op::Upload { .. } | Op::Download { .. } => {
                return Err(Error::Unavailable {
                    what: "archive upload and download on the wasm provider".into(),
                    reason: "not implemented for WASI sandboxes yet".into(),
                    fix: "write and read files one by one, or use the native provider".into(),
                });
            }
            Op::Changes { .. } => {
                return Err(Error::Unavailable {
                    what: "a layer of a sandbox's changes on the wasm provider".into(),
                    reason: "a WASI sandbox has no root filesystem of its own".into(),
                    fix: "use a Linux provider (native, docker, gvisor, microvm)".into(),
                });
            }
            Op::SetXattrs { .. } => {
                return Err(Error::Unavailable {
                    what: "extended attributes on the wasm provider".into(),
                    reason: "WASI has no extended attributes".into(),
                    fix: "use a Linux provider (native, docker, gvisor, microvm)".into(),
                });
            }
        })
    }
}
