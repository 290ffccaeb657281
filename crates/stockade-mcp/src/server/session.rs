//! Named sessions: a persistent workspace per name and tenant, its sandbox created on
//! first use, and the `session_exec` tool.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use stockade::Provider;

use super::error::{ToolError, ToolResult};
use super::exec::{exec_result, shell};
use super::{Handler, LOCAL};
use crate::tools;

impl Handler {
    /// `session_exec`: a shell command in the session's sandbox.
    pub(super) async fn session_exec(
        &self,
        a: tools::SessionExec,
        tenant: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let (provider, id) = self.session(tenant, &a.name).await?;
        let req = self.request(shell(&a.command), a.timeout, a.stdin)?;
        let out = self.exec(&provider, &id, req, ctx).await?;
        Ok(exec_result(&out, Some(&id)))
    }

    /// The session's sandbox (created on first use), namespaced by tenant.
    pub(super) async fn session(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<(Arc<dyn Provider>, String), ToolError> {
        let valid = !name.is_empty()
            && name.len() <= 40
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(ToolError::invalid(
                format!(
                    "session name {name:?} is not 1-40 of A-Z a-z 0-9 . _ - (not starting with .)"
                ),
                "pick a name such as my-project",
            ));
        }
        let shared = self.shared();
        let backend = shared.policy.provider(None)?;
        let provider = shared.provider(tenant, &backend)?;
        if let Some(r) = &shared.remote {
            // Tenants never share sessions: another token's `foo` is another one.
            let scoped = if tenant == LOCAL {
                name.to_string()
            } else {
                format!("{tenant}.{name}")
            };
            let info = r.session_get(&scoped).await?;
            return Ok((provider, info.id));
        }
        // The embedded daemon keeps each tenant's sessions apart itself.
        let info = shared
            .tenant_view(tenant, &backend)?
            .session_get(name)
            .await?;
        Ok((provider, info.id))
    }
}
