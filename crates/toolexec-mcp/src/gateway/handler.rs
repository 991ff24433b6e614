//! The gateway as an rmcp [`ServerHandler`]: `initialize` (capabilities,
//! server info, instructions), `tools/list`, `tools/call`,
//! `logging/setLevel` and the `initialized` notification.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, ToolsCapability,
};
// MCP logging is deprecated by SEP-2577 (2026-07-28) but current in the
// 2025-11-25 revision the gateway speaks.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use super::meta::DEFAULT_INSTRUCTIONS;
use super::server::Gateway;

#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        let options = &self.shared.options;
        let mut tools = ToolsCapability::default();
        tools.list_changed = Some(options.expose.direct());
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = Some(tools);
        capabilities.logging = Some(JsonObject::new());
        let mut config = ServerConfig::new(capabilities)
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            .with_server_info(
                Implementation::new(&options.server_name, env!("CARGO_PKG_VERSION"))
                    .with_title("toolexec MCP gateway"),
            );
        let instructions = match &options.instructions {
            Some(s) => (!s.is_empty()).then(|| s.clone()),
            None => options
                .expose
                .meta()
                .then(|| DEFAULT_INSTRUCTIONS.to_owned()),
        };
        if let Some(i) = instructions {
            config = config.with_instructions(i);
        }
        config
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.list_page(request.and_then(|r| r.cursor))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, &context)
            .await
            .map(CallToolResponse::from)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.set_level(request.level);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.register_peer(context.peer);
    }
}
