//! The client of one MCP request as a [`ClientRequests`]: what an upstream
//! server asks during a call made for this request (sampling, elicitation,
//! roots) is sent to this client, on the HTTP stream of the request it
//! belongs to; the server's log messages reach it at the level it set,
//! in order, before the request's own answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

// MCP logging: deprecated by SEP-2577, current in 2025-11-25.
#[allow(deprecated)]
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{
    CustomNotification, GetExtensions as _, RequestId, ServerNotification, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolexec::{BoxFuture, ClientError, ClientRequests};

use super::session::{LogGate, Session};

/// Log messages of one request waiting for the client; more are dropped.
const LOG_BACKLOG: usize = 256;
/// Requests to the client in flight at once for one request; more are
/// refused.
const MAX_ASKS: usize = 8;
/// Longest wait for the log messages of a request to be sent before its
/// answer goes out.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// What the sender of a request's notifications is handed.
enum Outgoing {
    Notification(ServerNotification),
    /// Answered once everything queued before it was sent.
    Flush(oneshot::Sender<()>),
}

/// Whether the client of the request `context` answers a server's
/// requests for input itself, from an `input_required` result (2026-07-28),
/// rather than being asked during the request.
pub(super) fn answers_inputs_itself(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// The client of one request.
pub(super) struct Downstream {
    peer: Peer<RoleServer>,
    /// The client's request that the relayed requests belong to.
    request: RequestId,
    /// Cancelled when the client cancels that request (or goes away).
    cancelled: CancellationToken,
    session: Arc<Session>,
    /// Which log messages it wants.
    logs: LogGate,
    /// Notifications on their way to the client, in the order they came.
    outgoing: OnceLock<mpsc::Sender<Outgoing>>,
    /// Requests to the client in flight.
    asks: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream")
            .field("request", &self.request)
            .field("session", &self.session.id)
            .finish_non_exhaustive()
    }
}

impl Downstream {
    /// The client of the request `context` answers.
    pub(super) fn new(context: &RequestContext<RoleServer>, session: &Arc<Session>) -> Arc<Self> {
        Arc::new(Downstream {
            peer: context.peer.clone(),
            request: context.id.clone(),
            cancelled: context.ct.clone(),
            session: session.clone(),
            logs: LogGate::of(context, session),
            outgoing: OnceLock::new(),
            asks: Arc::default(),
        })
    }

    /// Waits (a moment at most) until the notifications relayed so far were
    /// sent, so that they reach the client before the request's answer.
    pub(super) async fn flush(&self) {
        let Some(outgoing) = self.outgoing.get() else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        if outgoing.try_send(Outgoing::Flush(tx)).is_ok() {
            let _ = tokio::time::timeout(FLUSH_WAIT, rx).await;
        }
    }

    /// Queues `notification` for the client: one sender task per request
    /// keeps the order.
    fn send(&self, notification: ServerNotification) {
        let outgoing = self.outgoing.get_or_init(|| {
            let (tx, mut rx) = mpsc::channel::<Outgoing>(LOG_BACKLOG);
            let peer = self.peer.clone();
            tokio::spawn(async move {
                while let Some(item) = rx.recv().await {
                    match item {
                        Outgoing::Notification(n) => {
                            if let Err(e) = peer.send_notification(n).await {
                                tracing::debug!(error = %e, "could not relay a notification");
                                return;
                            }
                        }
                        Outgoing::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
            tx
        });
        if outgoing
            .try_send(Outgoing::Notification(notification))
            .is_err()
        {
            tracing::debug!("a notification for a slow client was dropped");
        }
    }
}

impl ClientRequests for Downstream {
    fn supports(&self, method: &str, params: &Value) -> bool {
        let Some(info) = self.peer.peer_info() else {
            return false;
        };
        // A 2026-07-28 client takes no requests from its server (rmcp
        // refuses to send them): it would be asked through `input_required`
        // results, which the gateway does not answer with.
        if !info.protocol_version.has_initialize() {
            return false;
        }
        let caps = &info.capabilities;
        match method {
            "sampling/createMessage" => caps.sampling.as_ref().is_some_and(|s| {
                let tools = params.get("tools").is_some() || params.get("toolChoice").is_some();
                !tools || s.tools.is_some()
            }),
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
        let method = method.to_owned();
        let parsed = serde_json::from_value::<ServerRequest>(json!({
            "method": method,
            "params": params,
        }));
        let (peer, origin, cancelled) = (
            self.peer.clone(),
            self.request.clone(),
            self.cancelled.clone(),
        );
        let asks = self.asks.clone();
        Box::pin(async move {
            let mut request = parsed.map_err(|e| {
                ClientError::Failed(format!("{method} with these parameters is malformed: {e}"))
            })?;
            if asks.fetch_add(1, Ordering::AcqRel) >= MAX_ASKS {
                asks.fetch_sub(1, Ordering::AcqRel);
                return Err(ClientError::Failed(format!(
                    "{MAX_ASKS} requests to the client are already waiting for this call"
                )));
            }
            let _ask = Ask(asks);
            // Name the client's request, so that HTTP sends this one on its
            // stream. Sent from a task of its own: rmcp would otherwise
            // replace the name with the request this code runs for (the
            // upstream server's).
            request
                .extensions_mut()
                .insert(OriginatingRequestId(origin));
            let send = tokio::spawn(async move {
                let handle = peer
                    .send_request_with_option(request, PeerRequestOptions::no_options())
                    .await?;
                let mut guard = CancelOnDrop {
                    peer: peer.clone(),
                    id: Some(handle.id.clone()),
                };
                let answer = handle.await_response().await;
                guard.id = None;
                answer
            });
            let mut send = AbortOnDrop(send);
            let answer = tokio::select! {
                answer = &mut send.0 => answer,
                _ = cancelled.cancelled() => return Err(ClientError::Failed(
                    "the call the request belongs to was cancelled (the client cancelled it \
                     or went away)"
                        .to_owned(),
                )),
            };
            let result = match answer {
                Ok(answer) => answer.map_err(|e| failed(&method, e))?,
                Err(e) => return Err(ClientError::Failed(format!("{method} to the client: {e}"))),
            };
            serde_json::to_value(result)
                .map_err(|e| ClientError::Failed(format!("encoding the client's answer: {e}")))
        })
    }

    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    fn notify(&self, method: &str, params: Value) {
        let notification = match method {
            "notifications/message" => {
                let Ok(param) = serde_json::from_value::<LoggingMessageNotificationParam>(params)
                else {
                    return;
                };
                if !self.logs.wants(param.level) {
                    return;
                }
                ServerNotification::LoggingMessageNotification(
                    rmcp::model::LoggingMessageNotification::new(param),
                )
            }
            "notifications/elicitation/complete" => {
                let has_url_mode = self
                    .peer
                    .peer_info()
                    .and_then(|i| i.capabilities.elicitation.as_ref().map(|e| e.url.is_some()))
                    .unwrap_or(false);
                if !has_url_mode {
                    return;
                }
                ServerNotification::CustomNotification(CustomNotification::new(
                    method,
                    Some(params),
                ))
            }
            _ => return,
        };
        self.send(notification);
    }

    fn log_level(&self) -> Option<&str> {
        self.logs.lowest().map(level_name)
    }
}

/// `debug`, `info`, … as on the wire.
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
fn level_name(level: rmcp::model::LoggingLevel) -> &'static str {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => "debug",
        L::Info => "info",
        L::Notice => "notice",
        L::Warning => "warning",
        L::Error => "error",
        L::Critical => "critical",
        L::Alert => "alert",
        L::Emergency => "emergency",
    }
}

/// One request to the client counted in flight.
struct Ask(Arc<AtomicUsize>);

impl Drop for Ask {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Aborts the task when dropped (the relay was abandoned): its
/// [`CancelOnDrop`] then tells the client.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
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
