//! The MCP side of a [`Handler`]: rmcp's `ServerHandler` (server info, protocol
//! versions, the tool list, resources) and the dispatch of a tool call to its tool.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, InitializeRequestParams, InitializeResult, JsonObject,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::json;

use super::Handler;
use super::error::{ToolError, ToolResult, parse};
use crate::policy::OperatorPolicy;
use crate::tools;

impl Handler {
    /// Runs tool `name` for `tenant`.
    async fn dispatch(
        &self,
        name: &str,
        args: Option<JsonObject>,
        tenant: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        match name {
            "run_code" => self.run_code(parse(name, args)?, ctx).await,
            "sandbox_create" => self.create(parse(name, args)?, ctx).await,
            "sandbox_exec" => self.sandbox_exec(parse(name, args)?, ctx).await,
            "sandbox_destroy" => self.destroy(parse(name, args)?).await,
            "sandbox_list" => {
                let _: tools::Nothing = parse(name, args)?;
                Ok(self.list())
            }
            "session_exec" => self.session_exec(parse(name, args)?, tenant, ctx).await,
            "read_file" => self.read_file(tenant, parse(name, args)?).await,
            "write_file" => self.write_file(tenant, parse(name, args)?).await,
            "edit_file" => self.edit_file(tenant, parse(name, args)?).await,
            "list_dir" => self.list_dir(tenant, parse(name, args)?).await,
            "glob" => self.glob(tenant, parse(name, args)?).await,
            "grep" => self.grep(tenant, parse(name, args)?).await,
            "terminal_open" => self.terminal_open(tenant, parse(name, args)?).await,
            "terminal_send" => self.terminal_send(parse(name, args)?).await,
            "terminal_close" => self.terminal_close(parse(name, args)?).await,
            other => Err(ToolError::invalid(
                format!("unknown tool {other:?}"),
                "call tools/list for the tools of this server",
            )),
        }
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let caps =
            serde_json::from_value(json!({"tools": {}, "resources": {}})).unwrap_or_default();
        ServerConfig::new(caps)
            .with_server_info(rmcp::model::Implementation::new(
                "stockade",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Stockade runs code in isolated, secure-by-default sandboxes (no network, \
                 read-only root, memory/CPU limits). Use run_code for one-off snippets; \
                 sandbox_create + sandbox_exec + the file tools for multi-step work in one \
                 sandbox; terminal_open + terminal_send for interactive programs (a shell, a \
                 REPL); session_exec for a workspace that persists across conversations. \
                 Failed calls say what went wrong and what to try.",
            )
    }

    /// Sessions (and so the 2026-07-28 stateless protocol) are needed: sandboxes are
    /// per-connection state.
    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::known_up_to(
            &rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    /// Binds the session to the caller's token at once, so every later request of
    /// the session must carry the same one.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.tenant(&context)?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(all_tools(
            self.shared().policy(),
        )))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        all_tools(self.shared().policy())
            .into_iter()
            .find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tenant = self.tenant(&ctx)?;
        let r = match self
            .dispatch(&request.name, request.arguments, &tenant, &ctx)
            .await
        {
            Ok(r) => r,
            Err(e) => e.result(),
        };
        Ok(r.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.resources()
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.resource_templates()
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let tenant = self.tenant(&ctx)?;
        Ok(self.read_resource_as(&tenant, request.uri).await?.into())
    }
}

/// The tool definitions as rmcp `Tool`s.
pub fn all_tools(policy: &OperatorPolicy) -> Vec<Tool> {
    tools::definitions(Some(policy))
        .into_iter()
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}
