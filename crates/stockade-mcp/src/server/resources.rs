//! The resources: `sandbox://ID/PATH` (a file or directory listing in one of this
//! connection's sandboxes) and `session://NAME/PATH` (a file in a session's
//! workspace), read inside the sandbox as the sandbox user.

use base64::Engine;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, ResourceContents,
};
use serde_json::{Value, json};
use stockade::{FileKind, FileOp, FileResult};

use super::Handler;
use crate::tools;

/// Where a session's workspace is inside its sandbox (the core's `WORKSPACE_TARGET`).
const SESSION_WORKSPACE: &str = "/work";

/// A `sandbox://ID/path` or `session://NAME/path` URI.
fn parse_uri(uri: &str) -> Option<(&str, &str, String)> {
    let (scheme, rest) = uri.split_once("://")?;
    let (who, path) = rest.split_once('/').unwrap_or((rest, ""));
    if who.is_empty() || !matches!(scheme, "sandbox" | "session") {
        return None;
    }
    Some((scheme, who, format!("/{path}")))
}

/// `text` as the plain-text contents of resource `uri`.
fn text_contents(uri: &str, text: String) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some("text/plain".into()),
        text,
        meta: None,
    }
}

/// `json` as a result of type `T`.
fn from_json<T: serde::de::DeserializeOwned>(json: Value) -> Result<T, McpError> {
    serde_json::from_value(json).map_err(|e| McpError::internal_error(e.to_string(), None))
}

impl Handler {
    /// The working directory of each of this connection's sandboxes.
    pub(super) fn resources(&self) -> Result<ListResourcesResult, McpError> {
        let items: Vec<Value> = self
            .owned_infos()
            .iter()
            .map(|info| {
                let wd = info
                    .spec
                    .get("workdir")
                    .and_then(Value::as_str)
                    .unwrap_or(stockade::spec::DEFAULT_WORKDIR)
                    .trim_start_matches('/')
                    .to_string();
                json!({
                    "uri": format!("sandbox://{}/{wd}", info.id),
                    "name": format!("{} working directory", info.id),
                    "description": "Listing of the sandbox's working directory; read sandbox://ID/PATH for any file.",
                    "mimeType": "text/plain"
                })
            })
            .collect();
        from_json(json!({ "resources": items }))
    }

    pub(super) fn resource_templates(&self) -> Result<ListResourceTemplatesResult, McpError> {
        from_json(json!({"resourceTemplates": [
            {"uriTemplate": "sandbox://{sandbox_id}/{path}", "name": "sandbox file",
             "description": "A file (or directory listing) inside one of this client's sandboxes, read as the sandbox user."},
            {"uriTemplate": "session://{name}/{path}", "name": "session workspace file",
             "description": "A file in a session's workspace (path relative to /work)."}
        ]}))
    }

    /// Reads resource `uri` for `tenant`: a file's contents (text, else a base64
    /// blob) or a directory's listing (directories end in `/`).
    pub(super) async fn read_resource_as(
        &self,
        tenant: &str,
        uri: String,
    ) -> Result<ReadResourceResult, McpError> {
        let not_found = |e: super::ToolError| {
            McpError::resource_not_found(e.message, Some(json!({"uri": uri})))
        };
        let Some((scheme, who, path)) = parse_uri(&uri) else {
            return Err(McpError::invalid_params(
                format!("resource {uri:?} is not sandbox://ID/PATH or session://NAME/PATH"),
                None,
            ));
        };
        let (at, path) = if scheme == "sandbox" {
            (
                tools::TargetFields {
                    sandbox_id: Some(who.to_string()),
                    session: None,
                },
                path,
            )
        } else {
            (
                tools::TargetFields {
                    sandbox_id: None,
                    session: Some(who.to_string()),
                },
                format!("{SESSION_WORKSPACE}{path}"),
            )
        };
        let stat = self
            .file(tenant, &at, FileOp::Stat { path: path.clone() })
            .await
            .map_err(not_found)?;
        let is_dir = matches!(&stat, FileResult::Entries(e) if e.first().is_some_and(|e| e.kind == FileKind::Dir));
        let contents = if is_dir {
            let listing = match self
                .file(tenant, &at, FileOp::Ls { path })
                .await
                .map_err(not_found)?
            {
                FileResult::Entries(e) => e
                    .iter()
                    .map(|e| {
                        if e.kind == FileKind::Dir {
                            format!("{}/", e.name)
                        } else {
                            e.name.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            text_contents(&uri, listing)
        } else {
            let op = FileOp::Read {
                path,
                offset: 0,
                limit: stockade::files::MAX_FILE_BYTES,
            };
            let data = match self.file(tenant, &at, op).await.map_err(not_found)? {
                FileResult::Data { data, .. } => data,
                _ => Vec::new(),
            };
            match String::from_utf8(data) {
                Ok(text) => text_contents(&uri, text),
                Err(e) => ResourceContents::BlobResourceContents {
                    uri: uri.clone(),
                    mime_type: Some("application/octet-stream".into()),
                    blob: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                    meta: None,
                },
            }
        };
        Ok(ReadResourceResult::new(vec![contents]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_parse() {
        assert_eq!(
            parse_uri("sandbox://sb-1/tmp/a.txt"),
            Some(("sandbox", "sb-1", "/tmp/a.txt".to_string()))
        );
        assert_eq!(
            parse_uri("session://proj/src/main.py"),
            Some(("session", "proj", "/src/main.py".to_string()))
        );
        assert_eq!(
            parse_uri("sandbox://sb-1"),
            Some(("sandbox", "sb-1", "/".to_string()))
        );
        assert_eq!(parse_uri("file:///etc/passwd"), None);
        assert_eq!(parse_uri("sandbox:///etc"), None);
    }
}
