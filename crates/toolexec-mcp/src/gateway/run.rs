//! One tool run or chain, from `run_tool`, `run_chain` or a directly
//! published tool: a slot from the shared bound ([`RunLimits`]), the run
//! (streamed through the progress [`Relay`] when the client sent a
//! `progressToken`), and its MCP result.
//!
//! [`RunLimits`]: super::RunLimits

use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use serde_json::Value;
use toolexec::{
    ChainStep, ClientInput, ErrorBody, ErrorCode, RunOptions, RunResult, StreamRequest,
};

use super::limits::RunPermit;
use super::relay::Relay;
use super::result::{self, Shape};
use super::server::Gateway;

#[cfg(feature = "upstream")]
use super::passthrough::Round;

/// A call an upstream server holds for its client's answers to the input
/// requests it was given ([`Gateway::held_input`]).
pub(super) struct HeldInput {
    /// How long the answers may still come: the call ends at its deadline.
    pub(super) within: std::time::Duration,
    /// Resolves if the call ends before (its server gave up asking): the
    /// next round, with or without answers, takes its result.
    pub(super) ended: toolexec::BoxFuture<'static, ()>,
}

impl Gateway {
    /// The answer to a 2026-07-28 client whose call of `id` failed for
    /// want of the input its upstream MCP server asks for: the server's
    /// requests, their state sealed to this tool and caller. Only that
    /// tool's own (`details.tool`): an `input_required` relayed from
    /// elsewhere (a worker, a sandbox) stays an error.
    #[cfg(feature = "upstream")]
    fn input_required(
        &self,
        id: &str,
        body: &ErrorBody,
        context: &RequestContext<RoleServer>,
    ) -> Option<CallToolResponse> {
        if body.code != ErrorCode::InputRequired
            || context.extensions.get::<ClientInput>().is_none()
        {
            return None;
        }
        let details = body.details.as_ref()?;
        let entry = self.exec().catalog().get(id).ok()?;
        let tool_id = entry.tool().id.to_string();
        if entry.backend().kind() != "mcp" || details.get("tool")?.as_str()? != tool_id {
            return None;
        }
        let asks: rmcp::model::InputRequiredResult =
            serde_json::from_value(details.get("input")?.clone()).ok()?;
        let round = Round {
            method: "tools/call",
            server: entry.tool().namespace(),
            target: &tool_id,
        };
        Some(
            match self.shared.passthrough.input_states.seal(round, asks) {
                Ok(asks) => CallToolResponse::InputRequired(asks),
                Err(e) => result::error(&ErrorBody {
                    code: ErrorCode::ExecutionFailed,
                    message: format!("execution_failed: tool {tool_id}: {}", e.message),
                    details: None,
                })
                .into(),
            },
        )
    }

    /// Without upstream servers no tool asks for input.
    #[cfg(not(feature = "upstream"))]
    fn input_required(
        &self,
        _: &str,
        _: &ErrorBody,
        _: &RequestContext<RoleServer>,
    ) -> Option<CallToolResponse> {
        None
    }

    /// The client input a run of `id` takes: a 2026-07-28 client's answers,
    /// and the server's own state opened from the `requestState` the
    /// gateway sealed for this tool and caller (else the error result).
    #[cfg(feature = "upstream")]
    fn client_input(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<ClientInput>, CallToolResult> {
        let Some(input) = context.extensions.get::<ClientInput>() else {
            return Ok(None);
        };
        let mut input = input.clone();
        if let Some(sealed) = input.state.take() {
            let entry = self
                .exec()
                .catalog()
                .get(id)
                .map_err(|e| result::error(&e.to_body()))?;
            let tool_id = entry.tool().id.to_string();
            let round = Round {
                method: "tools/call",
                server: entry.tool().namespace(),
                target: &tool_id,
            };
            input.state = self
                .shared
                .passthrough
                .input_states
                .open(round, &sealed)
                .map_err(|e| {
                    result::error(&ErrorBody {
                        code: ErrorCode::InvalidRequest,
                        message: format!("invalid_request: requestState: {}", e.message),
                        details: Some(serde_json::json!({"field": "requestState"})),
                    })
                })?;
        }
        Ok(Some(input))
    }

    /// The upstream server of tool `id` and its own state under the
    /// `requestState` `sealed` the gateway gave the current caller for it.
    #[cfg(feature = "upstream")]
    fn opened_input(&self, id: &str, sealed: &str) -> Option<(String, String)> {
        let entry = self.exec().catalog().get(id).ok()?;
        let tool_id = entry.tool().id.to_string();
        let server = entry.tool().namespace();
        let round = Round {
            method: "tools/call",
            server,
            target: &tool_id,
        };
        let state = self
            .shared
            .passthrough
            .input_states
            .open(round, sealed)
            .ok()??;
        Some((server.to_owned(), state))
    }

    /// Tells the upstream of tool `id` that the client will not answer the
    /// input requests it was given with the `requestState` `sealed` (a task
    /// that waited for them was cancelled or ran out of time): a call the
    /// server holds for them ends, and the server is told.
    #[cfg(feature = "upstream")]
    pub(super) fn abandon_input(&self, id: &str, sealed: &str) {
        if let Some((server, state)) = self.opened_input(id, sealed)
            && self.shared.passthrough.abandon_held(&server, &state)
        {
            tracing::debug!(tool = %id, "abandoned a held call: its client will not answer");
        }
    }

    /// The call the upstream of tool `id` holds for the answers to the
    /// input requests given with `sealed`; `None` when nothing is held for
    /// them (a 2026-07-28 server's state keeps as long as the gateway's
    /// seal).
    #[cfg(feature = "upstream")]
    pub(super) fn held_input(&self, id: &str, sealed: &str) -> Option<HeldInput> {
        let (server, state) = self.opened_input(id, sealed)?;
        let (within, ended) = self.shared.passthrough.held_wait(&server, &state)?;
        Some(HeldInput { within, ended })
    }

    /// Without upstream servers no call is held.
    #[cfg(not(feature = "upstream"))]
    pub(super) fn abandon_input(&self, _: &str, _: &str) {}

    /// Without upstream servers no call is held.
    #[cfg(not(feature = "upstream"))]
    pub(super) fn held_input(&self, _: &str, _: &str) -> Option<HeldInput> {
        None
    }

    /// Without upstream servers no tool takes client input.
    #[cfg(not(feature = "upstream"))]
    fn client_input(
        &self,
        _: &str,
        _: &RequestContext<RoleServer>,
    ) -> Result<Option<ClientInput>, CallToolResult> {
        Ok(None)
    }

    /// A slot for one tool run
    /// ([`GatewayOptions::runs`](super::GatewayOptions::runs)), or the
    /// result to answer with: `backend_unavailable` when the line is full,
    /// `cancelled` when the client cancels while waiting.
    async fn run_permit(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<RunPermit, CallToolResult> {
        tokio::select! {
            permit = self.shared.runs.acquire() => permit.map_err(|body| result::error(&body)),
            _ = context.ct.cancelled() => Err(result::error(&ErrorBody {
                code: ErrorCode::Cancelled,
                message: "cancelled: the client cancelled the request while it waited for a run slot"
                    .into(),
                details: None,
            })),
        }
    }

    /// Runs the tool `id` and shapes its output as its published output
    /// schema says; a tool's requests for client input go to a client that
    /// answers them itself as `input_required`.
    pub(super) async fn run_tool(
        &self,
        id: String,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let _permit = match self.run_permit(context).await {
            Ok(permit) => permit,
            Err(refused) => return refused.into(),
        };
        let shape = self
            .exec()
            .catalog()
            .get(&id)
            .map(|e| Shape::of(e.tool().output_schema.as_ref()))
            .unwrap_or(Shape::Undeclared);
        let mut opts = run_options(context);
        opts.client_input = match self.client_input(&id, context) {
            Ok(input) => input,
            Err(refused) => return refused.into(),
        };
        let id_of_call = id.clone();
        let outcome = match context.meta.get_progress_token() {
            Some(token) => {
                let relay = Relay::new(self, token, context, None);
                match relay.run(StreamRequest::Tool { id, args }, opts).await {
                    Ok(RunResult::Tool(out)) => Ok(out),
                    Ok(RunResult::Chain(c)) => return result::chain(&c).into(),
                    Err(body) => Err(body),
                }
            }
            None => self
                .exec()
                .run_tool_with(&id, args, &opts)
                .await
                .map_err(|e| e.to_body()),
        };
        match outcome {
            Ok(out) => result::tool_output(shape, out).into(),
            Err(body) => self
                .input_required(&id_of_call, &body, context)
                .unwrap_or_else(|| result::error(&body).into()),
        }
    }

    /// Runs a chain; a failed step makes an error result carrying the
    /// chain.
    pub(super) async fn run_chain(
        &self,
        steps: Vec<ChainStep>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let _permit = match self.run_permit(context).await {
            Ok(permit) => permit,
            Err(refused) => return refused,
        };
        let opts = run_options(context);
        let outcome = match context.meta.get_progress_token() {
            Some(token) => {
                let ids = steps.iter().map(|s| s.tool_id.clone()).collect();
                let relay = Relay::new(self, token, context, Some(ids));
                match relay.run(StreamRequest::Chain(steps), opts).await {
                    Ok(RunResult::Chain(c)) => Ok(c),
                    Ok(RunResult::Tool(out)) => {
                        return result::tool_output(Shape::Undeclared, out);
                    }
                    Err(body) => Err(body),
                }
            }
            None => self
                .exec()
                .run_chain_with(&steps, &opts)
                .await
                .map_err(|e| e.to_body()),
        };
        match outcome {
            Ok(c) => result::chain(&c),
            Err(body) => result::error(&body),
        }
    }
}

/// Run options carrying the client's cancellation, and the key of the
/// task the run serves, when the task is kept beyond this gateway
/// ([`TaskKey`](super::tasks::TaskKey)).
fn run_options(context: &RequestContext<RoleServer>) -> RunOptions {
    RunOptions {
        cancel: Some(context.ct.child_token()),
        idempotency_key: context
            .extensions
            .get::<super::tasks::TaskKey>()
            .map(|k| k.0.clone()),
        ..RunOptions::default()
    }
}
