//! The client of one MCP request as a [`ClientRequests`]: what an upstream
//! server asks during a call made for this request (sampling, elicitation,
//! roots) is sent to this client, on the HTTP stream of the request it
//! belongs to; the server's log messages reach it at the level it set.

use std::sync::{Arc, OnceLock};

#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{GetExtensions as _, RequestId, ServerRequest};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolexec::{BoxFuture, ClientError, ClientLink, ClientRequests};

use super::session::Session;

/// The client of one request.
pub(super) struct Downstream {
    peer: Peer<RoleServer>,
    /// The client's request that the relayed requests belong to.
    request: RequestId,
    /// Cancelled when the client cancels that request.
    cancelled: CancellationToken,
    session: Arc<Session>,
    /// Log messages on their way to the client, in the order they came.
    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    logs: OnceLock<mpsc::Sender<LoggingMessageNotificationParam>>,
}

/// Log messages of one request waiting for the client; more are dropped.
const LOG_BACKLOG: usize = 256;

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream")
            .field("request", &self.request)
            .field("session", &self.session.id)
            .finish_non_exhaustive()
    }
}

impl Downstream {
    /// The link to the client of the request `context` answers.
    pub(super) fn link(context: &RequestContext<RoleServer>, session: &Arc<Session>) -> ClientLink {
        ClientLink(Arc::new(Downstream {
            peer: context.peer.clone(),
            request: context.id.clone(),
            cancelled: context.ct.clone(),
            session: session.clone(),
            logs: OnceLock::new(),
        }))
    }
}

impl ClientRequests for Downstream {
    fn supports(&self, method: &str, params: &Value) -> bool {
        let Some(info) = self.peer.peer_info() else {
            return false;
        };
        let caps = &info.capabilities;
        match method {
            "sampling/createMessage" => caps
                .sampling
                .as_ref()
                .is_some_and(|s| params.get("tools").is_none() || s.tools.is_some()),
            // An empty `elicitation: {}` declares form mode (2025-06-18).
            "elicitation/create" => caps.elicitation.as_ref().is_some_and(|e| {
                match params.get("mode").and_then(Value::as_str) {
                    Some("url") => e.url.is_some(),
                    _ => e.form.is_some() || e.url.is_none(),
                }
            }),
            "roots/list" => caps.roots.is_some(),
            _ => false,
        }
    }

    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<'static, Result<Value, ClientError>> {
        let parsed = serde_json::from_value::<ServerRequest>(json!({
            "method": method,
            "params": params,
        }));
        let (peer, origin, cancelled) = (
            self.peer.clone(),
            self.request.clone(),
            self.cancelled.clone(),
        );
        let method = method.to_owned();
        Box::pin(async move {
            let mut request = parsed.map_err(|e| {
                ClientError::Failed(format!("{method} with these parameters is malformed: {e}"))
            })?;
            // Sent from another task than the request's handler: name the
            // request, so that HTTP sends it on that request's stream.
            request
                .extensions_mut()
                .insert(OriginatingRequestId(origin));
            let handle = peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
                .map_err(|e| failed(&method, e))?;
            let mut guard = CancelOnDrop {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
            };
            let answer = tokio::select! {
                answer = handle.await_response() => answer,
                _ = cancelled.cancelled() => return Err(ClientError::Failed(
                    "the call the request belongs to was cancelled (the client cancelled it \
                     or went away)"
                        .to_owned(),
                )),
            };
            guard.id = None;
            let result = answer.map_err(|e| failed(&method, e))?;
            serde_json::to_value(result)
                .map_err(|e| ClientError::Failed(format!("encoding the client's answer: {e}")))
        })
    }

    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    fn notify(&self, method: &str, params: Value) {
        if method != "notifications/message" {
            return;
        }
        let Ok(param) = serde_json::from_value::<LoggingMessageNotificationParam>(params) else {
            return;
        };
        if !self.session.wants(param.level) {
            return;
        }
        // One sender task per request keeps the messages in order.
        let logs = self.logs.get_or_init(|| {
            let (tx, mut rx) = mpsc::channel::<LoggingMessageNotificationParam>(LOG_BACKLOG);
            let peer = self.peer.clone();
            tokio::spawn(async move {
                while let Some(param) = rx.recv().await {
                    if let Err(e) = peer.notify_logging_message(param).await {
                        tracing::debug!(error = %e, "could not relay a log message");
                        return;
                    }
                }
            });
            tx
        });
        if logs.try_send(param).is_err() {
            tracing::debug!("a log message for a slow client was dropped");
        }
    }
}

/// The error of a request the client did not answer with a result.
fn failed(method: &str, e: ServiceError) -> ClientError {
    match e {
        ServiceError::McpError(data) => ClientError::Answered {
            code: data.code.0.into(),
            message: data.message.into_owned(),
            data: data.data,
        },
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ClientError::Failed(
            format!("the client disconnected before it answered {method}"),
        ),
        other => ClientError::Failed(format!("{method} to the client failed: {other}")),
    }
}

/// Sends `notifications/cancelled` for a request abandoned while armed.
struct CancelOnDrop {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let param = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("the server that asked abandoned the request".to_owned()),
                );
                if let Err(e) = peer.notify_cancelled(param).await {
                    tracing::debug!(error = %e, "could not send notifications/cancelled");
                }
            });
        }
    }
}
