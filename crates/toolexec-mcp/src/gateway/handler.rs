//! The gateway as an rmcp [`ServerHandler`]: `initialize` (capabilities,
//! server info, instructions), `tools/list`, `tools/call`,
//! `logging/setLevel`, the `initialized` notification, and the requests
//! relayed to upstream servers (resources, prompts, completion).

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, SubscriptionFilter, TASKS_EXTENSION_ID, ToolsCapability,
    UpdateTaskParams,
};
// MCP logging is deprecated by SEP-2577 (2026-07-28) but current in the
// 2025-11-25 revision the gateway speaks.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

#[cfg(feature = "upstream")]
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResponse, ResourcesCapability, SubscribeRequestParams,
    UnsubscribeRequestParams,
};

use super::meta::DEFAULT_INSTRUCTIONS;
#[cfg(feature = "upstream")]
use super::passthrough::Inputs;
use super::server::Gateway;
use toolexec::ClientInput;

impl Gateway {
    /// Without upstreams to relay, `M` is not a method of this server
    /// (`-32601`), as for a gateway built without them.
    #[cfg(feature = "upstream")]
    fn relaying<M: rmcp::model::ConstString>(&self) -> Result<(), McpError> {
        if self.shared.passthrough.is_empty() {
            return Err(McpError::method_not_found::<M>());
        }
        Ok(())
    }

    /// Resources (with subscriptions), prompts and completion, when an
    /// upstream may offer them ([`super::passthrough`]).
    #[cfg(feature = "upstream")]
    fn relayed_capabilities(&self, capabilities: &mut ServerCapabilities) {
        let relayed = &self.shared.passthrough;
        if relayed.is_empty() {
            return;
        }
        if relayed.offers(|c| c.resources.is_some()) {
            let mut resources = ResourcesCapability::default();
            resources.subscribe = Some(true);
            resources.list_changed = Some(true);
            capabilities.resources = Some(resources);
        }
        if relayed.offers(|c| c.prompts.is_some()) {
            let mut prompts = PromptsCapability::default();
            prompts.list_changed = Some(true);
            capabilities.prompts = Some(prompts);
        }
        if relayed.offers(|c| c.completions.is_some()) {
            capabilities.completions = Some(JsonObject::new());
        }
    }
}

#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        let options = &self.shared.options;
        let mut tools = ToolsCapability::default();
        tools.list_changed = Some(options.expose.direct());
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = Some(tools);
        capabilities.logging = Some(JsonObject::new());
        if options.tasks.enabled {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        }
        #[cfg(feature = "upstream")]
        self.relayed_capabilities(&mut capabilities);
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

    /// Every revision up to 2026-07-28: `initialize` negotiates up to
    /// 2025-11-25, `server/discover` and per-request metadata reach
    /// 2026-07-28.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let page = async { self.list_page(request.and_then(|r| r.cursor)) };
        self.traced("tools/list", None, &context, rpc_failure, page)
            .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.clone();
        // A 2026-07-28 client answers a tool's requests for input itself:
        // its answers (on a call made again) go to the tool.
        if super::downstream::answers_inputs_itself(&context) {
            context.extensions.insert(ClientInput {
                responses: request
                    .input_responses
                    .as_ref()
                    .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
                state: request.request_state.clone(),
            });
        }
        if self.offers_task(&context) {
            let failed = |r: &Result<CallToolResponse, McpError>| match r {
                Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                    Some("tool_error")
                }
                Ok(_) => None,
                Err(_) => Some("jsonrpc_error"),
            };
            let work = self.call_or_task(request, &context);
            return self
                .traced("tools/call", Some(&name), &context, failed, work)
                .await;
        }
        let failed = |r: &Result<CallToolResponse, McpError>| match r {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Some("tool_error")
            }
            Ok(_) => None,
            Err(_) => Some("jsonrpc_error"),
        };
        self.traced(
            "tools/call",
            Some(&name),
            &context,
            failed,
            self.call(request, &context),
        )
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.listenable(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.serve_listen(context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let id = request.task_id;
        let work = self.task_state(&id, &context);
        self.traced("tasks/get", Some(&id), &context, rpc_failure, work)
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let id = request.task_id;
        let work = self.cancel_task_of_caller(&id, &context);
        self.traced("tasks/cancel", Some(&id), &context, rpc_failure, work)
            .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let id = request.task_id;
        let work = self.update_task_of_caller(&id, request.input_responses, &context);
        self.traced("tasks/update", Some(&id), &context, rpc_failure, work)
            .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.set_level(request.level);
        Ok(())
    }

    #[cfg(feature = "upstream")]
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let work = self
            .shared
            .passthrough
            .list_resources(cursor, context.ct.clone());
        self.traced("resources/list", None, &context, rpc_failure, work)
            .await
    }

    #[cfg(feature = "upstream")]
    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let work = self
            .shared
            .passthrough
            .list_resource_templates(cursor, context.ct.clone());
        self.traced(
            "resources/templates/list",
            None,
            &context,
            rpc_failure,
            work,
        )
        .await
    }

    #[cfg(feature = "upstream")]
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.relaying::<rmcp::model::ReadResourceRequestMethod>()?;
        let uri = request.uri.clone();
        let inputs = Inputs::of(&context);
        // The writer finds placeholders among short lines only.
        let verbatim = self.session.verbatim()
            && serde_json::to_string(&context.id)
                .is_ok_and(|id| id.len() <= crate::verbatim::MAX_ID_BYTES);
        let work =
            self.shared
                .passthrough
                .read_resource(request, context.ct.clone(), inputs, verbatim);
        self.traced("resources/read", Some(&uri), &context, rpc_failure, work)
            .await
    }

    #[cfg(feature = "upstream")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.relaying::<rmcp::model::SubscribeRequestMethod>()?;
        let uri = request.uri.clone();
        let work = self.shared.passthrough.subscribe(
            self.session.id,
            context.peer.clone(),
            request.uri,
            context.ct.clone(),
        );
        self.traced(
            "resources/subscribe",
            Some(&uri),
            &context,
            rpc_failure,
            work,
        )
        .await
    }

    #[cfg(feature = "upstream")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.relaying::<rmcp::model::UnsubscribeRequestMethod>()?;
        let uri = request.uri.clone();
        let work =
            self.shared
                .passthrough
                .unsubscribe(self.session.id, request.uri, context.ct.clone());
        self.traced(
            "resources/unsubscribe",
            Some(&uri),
            &context,
            rpc_failure,
            work,
        )
        .await
    }

    #[cfg(feature = "upstream")]
    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let work = self
            .shared
            .passthrough
            .list_prompts(cursor, context.ct.clone());
        self.traced("prompts/list", None, &context, rpc_failure, work)
            .await
    }

    #[cfg(feature = "upstream")]
    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.relaying::<rmcp::model::GetPromptRequestMethod>()?;
        let name = request.name.clone();
        let inputs = Inputs::of(&context);
        let work = self
            .shared
            .passthrough
            .get_prompt(request, context.ct.clone(), inputs);
        self.traced("prompts/get", Some(&name), &context, rpc_failure, work)
            .await
    }

    #[cfg(feature = "upstream")]
    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        if self.shared.passthrough.is_empty() {
            // Nothing to complete: an empty answer, as rmcp's default.
            return Ok(CompleteResult::default());
        }
        let work = self
            .shared
            .passthrough
            .complete(request, context.ct.clone());
        self.traced("completion/complete", None, &context, rpc_failure, work)
            .await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.register_peer(context.peer);
    }
}

/// `error.type` for a JSON-RPC error answer.
pub(super) fn rpc_failure<T>(r: &Result<T, McpError>) -> Option<&'static str> {
    r.is_err().then_some("jsonrpc_error")
}
