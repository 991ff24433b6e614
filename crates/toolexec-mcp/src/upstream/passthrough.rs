//! What a proxy relays to an upstream besides tools: resources, resource
//! templates, subscriptions, prompts and completion. Requests go out as the
//! client wrote them and come back as the server answered, with the same
//! deadline, concurrency limit and session recovery as tool calls; the
//! server's notifications about them are published as [`UpstreamNotice`]s.

use rmcp::ErrorData;
use rmcp::model::{ClientRequest, GetExtensions as _, ServerCapabilities, ServerResult};
use serde_json::Map;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use toolexec::{ClientInput, ToolContext};

use super::Upstream;
use super::call::RequestError;
use super::held::{Owner, Turn};

/// Why a relayed request failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RelayError {
    /// The server answered with this JSON-RPC error: relay it unchanged.
    Server(ErrorData),
    /// toolexec's side: not connected, timed out, cancelled.
    Local(toolexec::Error),
}

impl From<RequestError> for RelayError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Server(data) => RelayError::Server(data),
            RequestError::Local(e) => RelayError::Local(e),
        }
    }
}

/// A server notification about what it offers besides tools.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamNotice {
    /// `notifications/resources/updated` for a subscribed resource.
    ResourceUpdated {
        /// The resource's URI, as the server wrote it.
        uri: String,
    },
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
}

impl Upstream {
    /// The capabilities the server announced, while connected.
    pub fn server_capabilities(&self) -> Option<ServerCapabilities> {
        let (peer, _) = self.shared.connected_peer().ok()?;
        peer.peer_info().map(|info| info.capabilities.clone())
    }

    /// The protocol revision of the session, while connected: 2026-07-28
    /// for a server that answered `server/discover`, else what `initialize`
    /// agreed on.
    pub fn protocol_version(&self) -> Option<String> {
        let (peer, _) = self.shared.connected_peer().ok()?;
        peer.peer_info()
            .map(|info| info.protocol_version.as_str().to_owned())
    }

    /// Sends one request (`resources/*`, `prompts/*`,
    /// `completion/complete`, ...) as it is and returns the server's
    /// result, an `input_required` one included. Cancelling `cancel`
    /// abandons it and tells the server.
    pub async fn relay(
        &self,
        request: ClientRequest,
        cancel: CancellationToken,
    ) -> Result<ServerResult, RelayError> {
        let label = format!("{} ({})", request.method(), self.shared.name);
        let ctx = ToolContext::with_cancel(cancel);
        Ok(self.shared.request(&label, request, &ctx).await?)
    }

    /// [`Upstream::relay`], for a client that cannot be answered with
    /// `input_required` (one of a revision before 2026-07-28): while the
    /// server answers `prompts/get` or `resources/read` so, its input
    /// requests are put to the client of the request (the current
    /// [`Caller`](toolexec::telemetry::Caller)'s link, as during a tool
    /// call) and the request is sent again with the answers. Also relays
    /// a 2025 server's requests to that client during the request.
    pub async fn relay_answering(
        &self,
        request: ClientRequest,
        cancel: CancellationToken,
    ) -> Result<ServerResult, RelayError> {
        let label = format!("{} ({})", request.method(), self.shared.name);
        let ctx = ToolContext::with_cancel(cancel);
        Ok(self.shared.request_answering(&label, request, &ctx).await?)
    }

    /// [`Upstream::relay`] of `prompts/get` or `resources/read` for a
    /// client that answers input itself (2026-07-28), sent with its answers
    /// and the state it was given (opened): when the server asks its client
    /// during such a request (a revision before 2026-07-28), the request is
    /// held across the client's rounds and the server's requests come back
    /// as `input_required`, as for a tool call.
    pub async fn relay_returning(
        &self,
        mut request: ClientRequest,
        cancel: CancellationToken,
    ) -> Result<ServerResult, RelayError> {
        let (method, target, args, responses, state) = match &request {
            ClientRequest::GetPromptRequest(r) => (
                "prompts/get",
                r.params.name.as_str(),
                r.params.arguments.as_ref(),
                &r.params.input_responses,
                &r.params.request_state,
            ),
            ClientRequest::ReadResourceRequest(r) => (
                "resources/read",
                r.params.uri.as_str(),
                None,
                &r.params.input_responses,
                &r.params.request_state,
            ),
            _ => return self.relay(request, cancel).await,
        };
        if !self.shared.holds(state.as_deref()) {
            return self.relay(request, cancel).await;
        }
        let input = ClientInput {
            responses: responses
                .as_ref()
                .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            state: state.clone(),
        };
        let label = format!("{method} {target} ({})", self.shared.name);
        let owner = Owner::of(&label, args.unwrap_or(&Map::new()));
        // Its answer comes back through the held call, decoded.
        request
            .extensions_mut()
            .remove::<crate::verbatim::Verbatim>();
        let ctx = ToolContext::with_cancel(cancel);
        match self
            .shared
            .held_round(request, &input, owner, &ctx)
            .await
            .map_err(RelayError::Local)?
        {
            Turn::Done(result) => Ok(result?),
            Turn::Asks(asks) => Ok(ServerResult::InputRequiredResult(asks)),
        }
    }

    /// An `input_required` answer of this server as a client that answers
    /// input itself (2026-07-28) gets it: only requests this server's
    /// `relay` setting allows, at most 8, prepared as for a client asked
    /// during a call; else why it cannot have it.
    pub fn returned_inputs(
        &self,
        result: rmcp::model::InputRequiredResult,
    ) -> Result<rmcp::model::InputRequiredResult, String> {
        self.shared.returned_inputs(result)
    }

    /// Asks the server for `notifications/resources/updated` of `uri` (as
    /// [`UpstreamNotice::ResourceUpdated`]): `resources/subscribe` before
    /// 2026-07-28; at 2026-07-28, its listener's `resourceSubscriptions`,
    /// once the server acknowledged a listener with it (one without it is
    /// the server's refusal). Within the server's call timeout.
    #[allow(deprecated)] // resources/subscribe: legacy in 2026-07-28, current in 2025-11-25
    pub async fn subscribe_resource(
        &self,
        uri: &str,
        cancel: CancellationToken,
    ) -> Result<(), RelayError> {
        if !self.is_modern() {
            let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
                rmcp::model::SubscribeRequestParams::new(uri),
            ));
            return self.relay(request, cancel).await.map(drop);
        }
        let watched = &self.shared.router.watched;
        let generation = watched.add(uri);
        let label = || format!("resources/subscribe ({})", self.shared.name);
        let accepted = tokio::select! {
            accepted = tokio::time::timeout(
                self.shared.call_timeout,
                watched.accepted(generation, uri),
            ) => accepted,
            _ = cancel.cancelled() => {
                watched.remove(uri);
                return Err(RelayError::Local(toolexec::Error::Cancelled { tool: label() }));
            }
        };
        match accepted {
            Ok(true) => Ok(()),
            Ok(false) => {
                watched.remove(uri);
                Err(RelayError::Server(ErrorData::invalid_params(
                    format!(
                        "server {} did not accept a subscription to {uri}",
                        self.shared.name
                    ),
                    Some(serde_json::json!({"uri": uri})),
                )))
            }
            Err(_) => {
                watched.remove(uri);
                Err(RelayError::Local(toolexec::Error::Timeout {
                    tool: label(),
                    after: self.shared.call_timeout,
                }))
            }
        }
    }

    /// Stops the updates of `uri` [`Upstream::subscribe_resource`] asked
    /// for: at 2026-07-28, once a listener without it was acknowledged (or
    /// the server's call timeout passed: it opens without it all the same).
    #[allow(deprecated)] // resources/unsubscribe: legacy in 2026-07-28, current in 2025-11-25
    pub async fn unsubscribe_resource(
        &self,
        uri: &str,
        cancel: CancellationToken,
    ) -> Result<(), RelayError> {
        if !self.is_modern() {
            let request = ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
                rmcp::model::UnsubscribeRequestParams::new(uri),
            ));
            return self.relay(request, cancel).await.map(drop);
        }
        let watched = &self.shared.router.watched;
        if let Some(generation) = watched.remove(uri) {
            tokio::select! {
                _ = tokio::time::timeout(
                    self.shared.call_timeout,
                    watched.accepted(generation, uri),
                ) => {}
                _ = cancel.cancelled() => {}
            }
        }
        Ok(())
    }

    /// Whether the session speaks 2026-07-28 (no `initialize`).
    fn is_modern(&self) -> bool {
        self.shared
            .connected_peer()
            .ok()
            .and_then(|(peer, _)| {
                peer.peer_info()
                    .map(|i| !i.protocol_version.has_initialize())
            })
            .unwrap_or(false)
    }

    /// The server's notifications about resources and prompts, from now on.
    /// A receiver that falls behind skips the oldest (see
    /// [`broadcast::Receiver`]).
    pub fn notices(&self) -> broadcast::Receiver<UpstreamNotice> {
        self.shared.router.notices.subscribe()
    }
}
