//! The file tools (`read_file`, `write_file`, `edit_file`, `list_dir`, `glob`,
//! `grep`): file operations run inside a sandbox or a session's sandbox, as the
//! sandbox user, after the approval rules for writes.

use serde_json::json;
use stockade::{Action, FileKind, FileOp, FileResult};

use super::Handler;
use super::error::{ToolError, ToolResult, ok, unexpected};
use crate::tools;

impl Handler {
    /// Runs a file operation where `at` says, after the approval rules for writes.
    pub(super) async fn file(
        &self,
        tenant: &str,
        at: &tools::TargetFields,
        op: FileOp,
    ) -> Result<FileResult, ToolError> {
        let (provider, id) = self.target(tenant, at).await?;
        if op.writes() {
            self.shared()
                .policy
                .approval
                .check(&id, &Action::FileWrite(&op))?;
        }
        Ok(provider.file(&id, op).await?)
    }

    /// The sandbox `at` names: one of this connection's, or a session's.
    pub(super) async fn target(
        &self,
        tenant: &str,
        at: &tools::TargetFields,
    ) -> Result<(std::sync::Arc<dyn stockade::Provider>, String), ToolError> {
        Ok(match (&at.sandbox_id, &at.session) {
            (Some(id), None) => {
                let (p, info) = self.shared().lookup(self.conn.id, id)?;
                (p, info.id)
            }
            (None, Some(name)) => self.session(tenant, name).await?,
            _ => {
                return Err(ToolError::invalid(
                    "give exactly one of sandbox_id or session",
                    "pass sandbox_id (from sandbox_create) or session (a session name)",
                ));
            }
        })
    }

    pub(super) async fn read_file(&self, tenant: &str, a: tools::ReadFile) -> ToolResult {
        let limit = a.limit.unwrap_or(stockade::files::DEFAULT_READ_BYTES);
        let path = a.path.clone();
        let op = FileOp::Read {
            path: a.path,
            offset: a.offset,
            limit,
        };
        match self.file(tenant, &a.at, op).await? {
            FileResult::Data { data, size, eof } => {
                let content = String::from_utf8_lossy(&data).into_owned();
                let mut text = content.clone();
                if !eof {
                    text.push_str(&format!(
                        "\n[{} of {size} bytes shown; read on with offset {}]",
                        data.len(),
                        a.offset + data.len() as u64
                    ));
                }
                Ok(ok(
                    json!({"path": path, "content": content, "size": size, "eof": eof}),
                    text,
                ))
            }
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn write_file(&self, tenant: &str, a: tools::WriteFile) -> ToolResult {
        let n = a.content.len();
        let op = FileOp::Write {
            path: a.path.clone(),
            data: a.content.into_bytes(),
            mode: None,
        };
        self.file(tenant, &a.at, op).await?;
        Ok(ok(
            json!({"path": a.path, "bytes": n}),
            format!("wrote {n} bytes to {}", a.path),
        ))
    }

    pub(super) async fn edit_file(&self, tenant: &str, a: tools::EditFile) -> ToolResult {
        let op = FileOp::Edit {
            path: a.path.clone(),
            old: a.old_string,
            new: a.new_string,
            replace_all: a.replace_all,
        };
        match self.file(tenant, &a.at, op).await? {
            FileResult::Edited { replacements } => Ok(ok(
                json!({"path": a.path, "replacements": replacements}),
                format!("{replacements} replacement(s) in {}", a.path),
            )),
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn list_dir(&self, tenant: &str, a: tools::ListDir) -> ToolResult {
        let path = a.path.unwrap_or_else(|| ".".into());
        match self
            .file(tenant, &a.at, FileOp::Ls { path: path.clone() })
            .await?
        {
            FileResult::Entries(entries) => {
                let text = entries
                    .iter()
                    .map(|e| {
                        let kind = match e.kind {
                            FileKind::Dir => "dir ",
                            FileKind::File => "file",
                            FileKind::Symlink => "link",
                            FileKind::Other => "other",
                        };
                        format!("{kind} {:>10} {}", e.size, e.name)
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                Ok(ok(json!({"path": path, "entries": entries}), text))
            }
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn glob(&self, tenant: &str, a: tools::Glob) -> ToolResult {
        let op = FileOp::Glob {
            pattern: a.pattern,
            root: a.root.unwrap_or_else(|| ".".into()),
        };
        match self.file(tenant, &a.at, op).await? {
            FileResult::Paths { paths, truncated } => {
                let text = lines(
                    &paths,
                    truncated,
                    "[more paths were cut; narrow the pattern]",
                );
                Ok(ok(json!({"paths": paths, "truncated": truncated}), text))
            }
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn grep(&self, tenant: &str, a: tools::Grep) -> ToolResult {
        let op = FileOp::Grep {
            regex: a.pattern,
            root: a.root.unwrap_or_else(|| ".".into()),
            include: a.include,
            max_matches: a.max_matches.unwrap_or(0),
        };
        match self.file(tenant, &a.at, op).await? {
            FileResult::Matches { matches, truncated } => {
                let found: Vec<String> = matches
                    .iter()
                    .map(|m| format!("{}:{}:{}", m.path, m.line_number, m.line))
                    .collect();
                let text = lines(
                    &found,
                    truncated,
                    "[more matches were cut; narrow the search]",
                );
                Ok(ok(
                    json!({"matches": matches, "truncated": truncated}),
                    text,
                ))
            }
            other => Err(unexpected(other)),
        }
    }
}

/// One item a line, then `cut_note` on a line of its own if some were cut.
fn lines(items: &[String], truncated: bool, cut_note: &str) -> String {
    let mut text = items.join("\n");
    if truncated {
        text.push('\n');
        text.push_str(cut_note);
    }
    text
}
