//! Requests to an upstream (a tool's `tools/call`, and relayed requests), with the
//! per-server deadline and concurrency limit, progress relay, cancellation,
//! and one transparent retry after an HTTP session loss.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    GetExtensions as _, ProgressToken, RequestId, RequestMetaObject, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use rmcp::{ErrorData, Peer, RoleClient};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::{Availability, Backend, BoxFuture, Call, Error, ToolContext, ToolOutput};
use tracing::Instrument;

use super::held::{Owner, Turn};
use super::http_client::ActAs;
use super::links::{ForClient, Relayed};
use super::routing::{Router, WatchProgress};
use super::session::error_chain;
use super::shared::Shared;
use super::{UpstreamStatus, convert};

/// Reason sent with `notifications/cancelled`.
const ABANDONED: &str = "the toolexec caller abandoned the call (cancelled or timed out)";

/// The backend of one imported tool.
#[derive(Debug)]
pub(crate) struct ToolBackend {
    pub(crate) shared: Arc<Shared>,
    /// The tool's name on the server.
    pub(crate) remote_name: String,
}

impl Backend for ToolBackend {
    fn kind(&self) -> &str {
        "mcp"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        Box::pin(self.shared.call_tool(&self.remote_name, call))
    }

    fn availability(&self) -> Availability {
        self.shared.availability()
    }
}

/// Why one attempt failed.
enum Failure {
    /// The HTTP session is gone; re-initialize and retry once.
    SessionLost(String),
    Error(RequestError),
}

/// Why a request to an upstream failed.
#[derive(Debug)]
pub(crate) enum RequestError {
    /// The server answered with a JSON-RPC error.
    Server(ErrorData),
    /// toolexec's side: not connected, timed out, cancelled.
    Local(Error),
}

impl Shared {
    /// `tools/call` on the upstream, in an `upstream_request` span whose
    /// trace context goes with the request (`_meta.traceparent`).
    async fn call_tool(
        self: &Arc<Self>,
        remote: &str,
        call: Call<'_>,
    ) -> Result<ToolOutput, Error> {
        let span = tracing::info_span!(
            target: "toolexec::upstream",
            "upstream_request",
            otel.name = format!("tools/call {remote}"),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            gen_ai.tool.name = remote,
            toolexec.upstream = %self.name,
            error.type = tracing::field::Empty,
        );
        let result = self.send_call(remote, call).instrument(span.clone()).await;
        if let Err(e) = &result
            && e.code().is_failure()
        {
            span.record("error.type", e.code().as_str());
        }
        result
    }

    async fn send_call(
        self: &Arc<Self>,
        remote: &str,
        call: Call<'_>,
    ) -> Result<ToolOutput, Error> {
        let tool = call.tool.id.to_string();
        let args = match call.args {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => return Err(Error::invalid_request("args", "must be a JSON object")),
        };
        let mut params = CallToolRequestParams::new(remote.to_owned()).with_arguments(args);
        if let Some(trace) = toolexec::telemetry::current_trace() {
            let mut meta = RequestMetaObject::new();
            meta.set_traceparent(trace.traceparent);
            if let Some(state) = trace.tracestate {
                meta.set_tracestate(state);
            }
            params.meta = Some(meta);
        }
        // A caller that answers input requests itself sends its answers with
        // the call again.
        if let Some(input) = call.ctx.client_input() {
            params.input_responses = input
                .responses
                .as_ref()
                .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
            params.request_state = input.state.clone();
        }
        // A server that asks during its calls, for a caller that answers
        // input itself: the call is held across its rounds.
        let held = (call.ctx.client_input())
            .filter(|input| self.holds(input.state.as_deref()))
            .map(|input| {
                let no_args = Map::new();
                let args = params.arguments.as_ref().unwrap_or(&no_args);
                (input, Owner::of(&tool, args))
            });
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let turn = match held {
            Some((input, owner)) => self.held_round(request, input, owner, &call.ctx).await?,
            // One deadline for the whole call, its input rounds included.
            None => Turn::Done(self.request_answering(&tool, request, &call.ctx).await),
        };
        let result = match turn {
            Turn::Done(result) => result,
            Turn::Asks(asks) => {
                return Err(Error::InputRequired {
                    tool,
                    input: serde_json::to_value(asks).unwrap_or_default(),
                });
            }
        };
        let result = result.map_err(|e| match e {
            RequestError::Server(data) => Error::ExecutionFailed {
                tool: tool.clone(),
                message: format!(
                    "the server answered with JSON-RPC error {}: {}",
                    data.code.0, data.message
                ),
                data: Some(json!({"code": data.code.0, "data": data.data})),
                panicked: false,
            },
            RequestError::Local(e) => e,
        })?;
        match result {
            ServerResult::CallToolResult(r) => convert::output_from_mcp(&tool, r),
            ServerResult::InputRequiredResult(r) if call.ctx.client_input().is_some() => {
                match self.returned_inputs(r) {
                    Ok(r) => Err(Error::InputRequired {
                        tool,
                        input: serde_json::to_value(r).unwrap_or_default(),
                    }),
                    Err(why) => Err(Error::ExecutionFailed {
                        tool,
                        message: why,
                        data: None,
                        panicked: false,
                    }),
                }
            }
            ServerResult::InputRequiredResult(r) => Err(Error::ExecutionFailed {
                tool,
                message: "the server asked for client input (elicitation or sampling), which \
                          toolexec relays only when it serves clients as a gateway"
                    .to_owned(),
                data: serde_json::to_value(r).ok(),
                panicked: false,
            }),
            ServerResult::CreateTaskResult(r) => Err(Error::ExecutionFailed {
                tool,
                message: "the server answered with a task, which toolexec does not poll".to_owned(),
                data: serde_json::to_value(r).ok(),
                panicked: false,
            }),
            other => Err(Error::ExecutionFailed {
                tool,
                message: "the server answered tools/call with an unexpected result".to_owned(),
                data: serde_json::to_value(other).ok(),
                panicked: false,
            }),
        }
    }

    /// Sends `request` on the current session and waits for its result:
    /// within a concurrency slot and the server's deadline, until `ctx` is
    /// cancelled, retried once on a new session after an HTTP session loss.
    /// Progress carrying the request's token reaches `ctx`. `label` names
    /// the request in errors (a tool id, or the method and server).
    pub(crate) async fn request(
        &self,
        label: &str,
        request: ClientRequest,
        ctx: &ToolContext,
    ) -> Result<ServerResult, RequestError> {
        self.request_for(label, request, ctx, Relayed::No).await
    }

    /// [`Shared::request`]; unless [`Relayed::No`], the server's requests
    /// to the client and its log messages during it may be relayed to the
    /// client the request is made for ([`Links`](super::links::Links)).
    pub(super) async fn request_for(
        &self,
        label: &str,
        request: ClientRequest,
        ctx: &ToolContext,
        relayed: Relayed,
    ) -> Result<ServerResult, RequestError> {
        let work = async {
            let request = self
                .as_caller(label, request)
                .await
                .map_err(RequestError::Local)?;
            let _slot = self
                .slots
                .acquire()
                .await
                .map_err(|_| RequestError::Local(self.unavailable("shut down")))?;
            let mut retried = false;
            loop {
                let (peer, generation) = match self.connected_peer() {
                    Ok(connected) => connected,
                    // Another call found the HTTP session lost: wait for the
                    // new one (once) instead of failing.
                    Err((_, Some(replaced))) if !retried => {
                        retried = true;
                        self.wait_for_new_session(replaced)
                            .await
                            .map_err(RequestError::Local)?;
                        continue;
                    }
                    Err((e, _)) => return Err(RequestError::Local(e)),
                };
                match self
                    .send_once(&peer, label, request.clone(), ctx, relayed)
                    .await
                {
                    Ok(out) => return Ok(out),
                    Err(Failure::Error(e)) => return Err(e),
                    Err(Failure::SessionLost(why)) if !retried => {
                        tracing::info!(server = %self.name, reason = %why, "HTTP session lost; re-initializing and retrying once");
                        retried = true;
                        let _ = self.reinit.send(generation);
                        self.wait_for_new_session(generation)
                            .await
                            .map_err(RequestError::Local)?;
                    }
                    Err(Failure::SessionLost(why)) => {
                        return Err(RequestError::Local(self.unavailable(&format!(
                            "the HTTP session was lost again after re-initializing: {why}"
                        ))));
                    }
                }
            }
        };
        tokio::select! {
            r = tokio::time::timeout(self.call_timeout, work) => r.unwrap_or_else(|_| {
                Err(RequestError::Local(Error::Timeout { tool: label.to_owned(), after: self.call_timeout }))
            }),
            _ = ctx.cancelled() => Err(RequestError::Local(Error::Cancelled { tool: label.to_owned() })),
        }
    }

    pub(crate) fn unavailable(&self, message: &str) -> Error {
        Error::backend_unavailable(self.name.to_string(), message)
    }

    /// The peer of the current session; otherwise why there is none, and the
    /// generation being replaced when a lost HTTP session is re-initialized.
    pub(crate) fn connected_peer(&self) -> Result<(Peer<RoleClient>, u64), (Error, Option<u64>)> {
        let conn = self.conn.borrow();
        match (&conn.peer, &conn.status) {
            (Some(peer), UpstreamStatus::Connected { .. }) => Ok((peer.clone(), conn.generation)),
            (_, status) => Err((
                self.unavailable(
                    &status
                        .unavailable_reason()
                        .unwrap_or_else(|| "not connected".to_owned()),
                ),
                conn.reinitializing.then_some(conn.generation),
            )),
        }
    }

    /// Waits until a session newer than `generation` is up (the caller's
    /// deadline bounds the wait), or the reconnect failed.
    async fn wait_for_new_session(&self, generation: u64) -> Result<(), Error> {
        let mut rx = self.conn.subscribe();
        let ready = rx
            .wait_for(|c| {
                c.generation > generation
                    || matches!(c.status, UpstreamStatus::Failed { .. })
                    || matches!(&c.status, UpstreamStatus::Restarting { attempt, .. } if *attempt > 1)
            })
            .await;
        match ready {
            Ok(c) if c.generation > generation => Ok(()),
            Ok(c) => Err(self.unavailable(
                &c.status
                    .unavailable_reason()
                    .unwrap_or_else(|| "re-initialization failed".to_owned()),
            )),
            Err(_) => Err(self.unavailable("shut down")),
        }
    }

    /// For a server that acts as the caller, `request` with the token
    /// exchanged for the caller's access token attached (sent instead of
    /// the server's own credential); refused for a caller without one.
    async fn as_caller(
        &self,
        label: &str,
        mut request: ClientRequest,
    ) -> Result<ClientRequest, Error> {
        let Some(exchange) = self.endpoint.exchange() else {
            return Ok(request);
        };
        let caller = toolexec::telemetry::current_caller();
        let Some(subject) = caller.as_ref().and_then(|c| c.credential.as_ref()) else {
            return Err(Error::NotAllowed {
                tool: label.to_owned(),
                reason: format!(
                    "{} acts as the calling user (token exchange), and this caller has no \
                     OAuth access token to exchange",
                    self.name
                ),
            });
        };
        let token = exchange.token_for(subject.expose()).await?;
        request.extensions_mut().insert(ActAs(token));
        Ok(request)
    }

    async fn send_once(
        &self,
        peer: &Peer<RoleClient>,
        label: &str,
        mut request: ClientRequest,
        ctx: &ToolContext,
        relayed: Relayed,
    ) -> Result<ServerResult, Failure> {
        // Ends what is relayed to the client for this request however this
        // future ends, even before the transport sent the request.
        let ended = CancellationToken::new();
        let _ended = ended.clone().drop_guard();
        let client = (relayed != Relayed::No)
            .then(toolexec::telemetry::current_caller)
            .flatten()
            .filter(|c| c.link.is_some())
            .map(|caller| ForClient::new(caller, ended.clone(), relayed == Relayed::ToHeld));
        let serial = client.as_ref().map(|c| c.serial);
        if let Some(level) = client.as_ref().and_then(|c| self.log_level_for(peer, c)) {
            rmcp::model::GetMeta::get_meta_mut(&mut request).set_log_level(level);
        }
        request
            .extensions_mut()
            .insert(WatchProgress(ctx.clone(), client));
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.failure(label, e))?;
        // No await between sending and arming the guard: dropping the call
        // from here on cancels the request on the server.
        let mut guard = InFlight {
            router: &self.router,
            peer: peer.clone(),
            sent: (handle.id.clone(), serial),
            id: Some(handle.id.clone()),
            progress: handle.progress_token.clone(),
        };
        let result = handle.await_response().await;
        guard.id = None;
        result.map_err(|e| self.failure(label, e))
    }

    /// The level a 2026-07-28 server is told for a request made for
    /// `client` (`_meta` `io.modelcontextprotocol/logLevel`): such a server
    /// sends log messages only for requests that name one (SEP-2575). The
    /// client's own level, when this server's log messages are relayed and
    /// the client wants some; a server of an earlier revision is not told
    /// per request.
    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    fn log_level_for(
        &self,
        peer: &Peer<RoleClient>,
        client: &ForClient,
    ) -> Option<rmcp::model::LoggingLevel> {
        if !self.relay.logging
            || peer
                .peer_info()
                .is_none_or(|info| info.protocol_version.has_initialize())
        {
            return None;
        }
        let level = client.caller.link.as_ref()?.0.log_level()?;
        serde_json::from_value(Value::String(level.to_owned())).ok()
    }

    /// Classifies an rmcp error.
    fn failure(&self, label: &str, e: ServiceError) -> Failure {
        let http = self.endpoint.is_http();
        match e {
            // A correlated error answers this request: the server processed
            // it, so it is never retried (a lost session is answered with
            // HTTP 404/401, or an uncorrelated error; see `http_client`).
            ServiceError::McpError(data) => Failure::Error(RequestError::Server(data)),
            ServiceError::TransportSend(err) => {
                let detail = error_chain(err.error.as_ref());
                if http && session_lost_in_chain(err.error.as_ref()) {
                    return Failure::SessionLost(detail);
                }
                if let Some(hint) = self.endpoint.auth_refusal(err.error.as_ref()) {
                    return Failure::Error(RequestError::Local(self.unavailable(&hint)));
                }
                Failure::Error(RequestError::Local(
                    self.unavailable(&format!("sending the request failed: {detail}")),
                ))
            }
            ServiceError::TransportClosed => Failure::Error(RequestError::Local(self.unavailable(
                "the connection to the server closed before the result arrived \
                 (the server exited or the session ended)",
            ))),
            ServiceError::Cancelled { .. } => {
                Failure::Error(RequestError::Local(Error::Cancelled {
                    tool: label.to_owned(),
                }))
            }
            ServiceError::Timeout { timeout } => {
                Failure::Error(RequestError::Local(Error::Timeout {
                    tool: label.to_owned(),
                    after: timeout,
                }))
            }
            other => Failure::Error(RequestError::Local(self.unavailable(&other.to_string()))),
        }
    }
}

/// HTTP 404 (after rmcp's own re-initialization failed) or 401 on a request.
fn session_lost_in_chain(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(http) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            match http {
                StreamableHttpError::SessionExpired | StreamableHttpError::AuthRequired(_) => {
                    return true;
                }
                StreamableHttpError::UnexpectedServerResponse(msg)
                    if msg.starts_with("HTTP 401") || msg.starts_with("HTTP 404") =>
                {
                    return true;
                }
                StreamableHttpError::Client(re)
                    if re
                        .status()
                        .is_some_and(|s| s.as_u16() == 401 || s.as_u16() == 404) =>
                {
                    return true;
                }
                _ => {}
            }
        }
        cur = err.source();
    }
    false
}

/// A request in flight. Dropped while armed (`id` set), it sends
/// `notifications/cancelled` for the request. Always stops the progress relay
/// and ends what was relayed to the client for it.
struct InFlight<'a> {
    router: &'a Router,
    peer: Peer<RoleClient>,
    /// The request's id, and its registration for a client.
    sent: (RequestId, Option<u64>),
    /// Set while armed.
    id: Option<RequestId>,
    progress: ProgressToken,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.router.unwatch_progress(&self.progress);
        if let (id, Some(serial)) = &self.sent {
            self.router.links.ended(id, *serial);
        }
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let param = CancelledNotificationParam::new(Some(id), Some(ABANDONED.to_owned()));
                if let Err(e) = peer.notify_cancelled(param).await {
                    tracing::debug!(error = %e, "could not send notifications/cancelled");
                }
            });
        }
    }
}
