//! Routing of an upstream's notifications, and of its requests to the
//! client, to the calls and tasks waiting for them.
//!
//! Progress is relayed by the transport, as each message is read, and not
//! by an rmcp notification handler: rmcp runs every handler as a task of
//! its own, apart from delivering a call's response, so a handler could run
//! after its call had returned and unregistered the token, and the call's
//! last progress was lost. [`InOrder`] relays a progress notification
//! before the next message (perhaps the response) is read.
//!
//! A call starts watching its progress token as the transport sends the
//! request (the [`WatchProgress`] extension), not after rmcp hands the
//! request back: a server that reports progress at once could otherwise
//! be read before the watch, and the call's first progress was lost.
//!
//! The same watch records which client a `tools/call` in flight was made
//! for ([`Links`]), so that the server's requests to the client during the
//! call (sampling, elicitation, roots) and its log messages reach that
//! client. Which client is decided as each message is read, like progress.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::RoleClient;
use rmcp::model::{
    ClientNotification, GetExtensions, GetMeta, JsonRpcMessage, ProgressNotificationParam,
    ProgressToken, RequestId, ServerNotification,
};
use rmcp::service::{InboundStreamOrigin, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{Notify, broadcast};
use toolexec::ToolContext;

use super::config::ClientRelay;
use super::links::{ForClient, Links, Target};
use super::passthrough::UpstreamNotice;
use crate::verbatim::{Verbatim, Wanted};

/// A server's notification that a URL-mode elicitation finished.
pub(crate) const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// Where a server's request to the client goes, decided by [`InOrder`] as
/// it reads the request (its extensions, never serialized).
#[derive(Clone, Debug)]
pub(crate) struct RelayTarget(pub(crate) Target);

/// Routes server notifications of every session of one upstream.
#[derive(Debug)]
pub(crate) struct Router {
    /// Progress token of each call in flight → its context.
    progress: Mutex<HashMap<ProgressToken, ToolContext>>,
    /// The calls in flight made for a client that can be asked back.
    pub(crate) links: Links,
    /// What of the server's is relayed to those clients.
    relay: ClientRelay,
    /// Signalled on `notifications/tools/list_changed`.
    pub(crate) tools_changed: Notify,
    /// Resource and prompt notifications, for whoever relays them.
    pub(crate) notices: broadcast::Sender<UpstreamNotice>,
    /// The resources a 2026-07-28 server's listener asks updates of.
    pub(crate) watched: super::watched::Watched,
}

impl Router {
    /// A router relaying `relay` to the clients of calls, remembering ended
    /// calls for `recent` ([`Links::new`]).
    pub(crate) fn new(relay: ClientRelay, recent: Duration) -> Self {
        Router {
            progress: Mutex::default(),
            links: Links::new(recent),
            relay,
            tools_changed: Notify::new(),
            notices: broadcast::Sender::new(NOTICE_BUFFER),
            watched: super::watched::Watched::default(),
        }
    }
}

/// Notices kept for a slow relay before it skips the oldest.
const NOTICE_BUFFER: usize = 256;

impl Default for Router {
    /// Relays nothing to clients.
    fn default() -> Self {
        Router::new(ClientRelay::default(), Duration::ZERO)
    }
}

impl Router {
    /// Relays the progress notifications carrying `token` to `ctx`, until
    /// [`Router::unwatch_progress`].
    pub(crate) fn watch_progress(&self, token: ProgressToken, ctx: ToolContext) {
        if ctx.is_streaming() {
            self.progress.lock().insert(token, ctx);
        }
    }

    pub(crate) fn unwatch_progress(&self, token: &ProgressToken) {
        self.progress.lock().remove(token);
    }

    /// Relays a log message (or another notification for the client,
    /// `method`) to the client it is meant for: that of request `origin`,
    /// on whose HTTP response stream it came ([`origin`](super::origin)),
    /// else by the unassociated rule; dropped when nothing says which
    /// client that is.
    fn relay_notification(
        &self,
        method: &str,
        params: serde_json::Value,
        origin: Option<RequestId>,
    ) {
        let origin = origin.map(InboundStreamOrigin::OutboundRequest);
        match self.links.target(origin.as_ref()) {
            Ok((link, _)) => link.notify(method, params),
            Err(why) => tracing::debug!(method, reason = %why, "not relayed to a client"),
        }
    }

    /// Publishes `notice` to the relays listening (none: dropped).
    pub(crate) fn publish(&self, notice: UpstreamNotice) {
        let _ = self.notices.send(notice);
    }

    /// Relays one progress notification to the call it belongs to (ignored
    /// when no call in flight has its token).
    fn relay_progress(&self, params: &ProgressNotificationParam) {
        let ctx = self.progress.lock().get(&params.progress_token).cloned();
        if let Some(ctx) = ctx {
            ctx.progress(params.progress, params.total, params.message.as_deref());
        }
    }
}

/// Attached to a request (its extensions, never serialized) whose progress
/// notifications go to this context: [`InOrder`] starts the watch on the
/// request's progress token as it sends the request, and records the
/// client it was made for, if that client can be asked back.
#[derive(Clone, Debug)]
pub(crate) struct WatchProgress(pub(crate) ToolContext, pub(crate) Option<ForClient>);

/// A client transport that relays progress notifications in the order they
/// arrive, before the message that follows them is handed to rmcp, and
/// starts the watch a request asks for ([`WatchProgress`]) before sending it.
pub(crate) struct InOrder<T> {
    inner: T,
    router: Arc<Router>,
    /// Where a request marked [`Verbatim`] is recorded, when the transport
    /// below relays answers verbatim.
    wanted: Option<Arc<Wanted>>,
}

impl<T> InOrder<T> {
    pub(crate) fn new(inner: T, router: Arc<Router>) -> Self {
        InOrder {
            inner,
            router,
            wanted: None,
        }
    }

    /// Records the requests marked [`Verbatim`] in `wanted`, which the
    /// transport below reads.
    pub(crate) fn verbatim(mut self, wanted: Arc<Wanted>) -> Self {
        self.wanted = Some(wanted);
        self
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for InOrder<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match (&item, &self.wanted) {
            (JsonRpcMessage::Request(r), Some(wanted)) => {
                if let Some(how) = r.request.extensions().get::<Verbatim>() {
                    wanted.add(&r.id, *how);
                }
            }
            (JsonRpcMessage::Notification(n), Some(wanted)) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    wanted.take(id);
                }
            }
            _ => {}
        }
        if let JsonRpcMessage::Request(r) = &item {
            let watch = r.request.extensions().get::<WatchProgress>();
            if let Some(WatchProgress(ctx, _)) = watch
                && let Some(token) = r.request.get_meta().get_progress_token()
            {
                self.router.watch_progress(token, ctx.clone());
            }
            // Every request: one made for no client still replaces an
            // earlier session's call under its id.
            let client = watch.and_then(|WatchProgress(_, client)| client.as_ref());
            self.router.links.sent(r.id.clone(), client);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut message = self.inner.receive().await;
        // No await between reading the message and relaying it: a dropped
        // receive future cannot skip a relay.
        let router = &self.router;
        match &mut message {
            Some(JsonRpcMessage::Notification(n)) => {
                let origin = super::origin::take(&mut n.notification);
                match &n.notification {
                    ServerNotification::ProgressNotification(p) => router.relay_progress(&p.params),
                    #[allow(deprecated)]
                    // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
                    ServerNotification::LoggingMessageNotification(m) if router.relay.logging => {
                        if let Ok(params) = serde_json::to_value(&m.params) {
                            router.relay_notification("notifications/message", params, origin);
                        }
                    }
                    ServerNotification::CustomNotification(c)
                        if router.relay.elicitation && c.method == ELICITATION_COMPLETE =>
                    {
                        let params = c.params.clone().unwrap_or_default();
                        router.relay_notification(ELICITATION_COMPLETE, params, origin);
                    }
                    _ => {}
                }
            }
            // Which client a request is for is decided as it is read, while
            // the call it belongs to is certainly still recorded.
            Some(JsonRpcMessage::Request(r)) => {
                let origin = r.request.extensions().get::<InboundStreamOrigin>().cloned();
                let target = router.links.target(origin.as_ref());
                r.request.extensions_mut().insert(RelayTarget(target));
            }
            _ => {}
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientRequest, JsonRpcRequest, NumberOrString};
    use rmcp::transport::IntoTransport;
    use serde_json::{Value, json};
    use tokio::io::AsyncWriteExt;
    use toolexec::{
        Catalog, Exec, LocalTool, RunOptions, StreamEvent, StreamRequest, ToolError, ToolOutput,
        raw_handler,
    };

    use super::*;

    /// The server's side of one call: its last progress and its response,
    /// read back to back.
    const PROGRESS_THEN_RESPONSE: &[u8] = b"\
{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1,\"total\":1}}\n\
{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n";

    /// A call that starts watching its token as the request is sent and
    /// stops as soon as its response is read (as `call.rs` does) gets the
    /// progress read before it. On a current-thread runtime nothing else
    /// runs in between, so a relay done anywhere but in `receive` (an rmcp
    /// handler task) would be late.
    #[tokio::test(flavor = "current_thread")]
    async fn progress_is_relayed_before_the_next_message_is_read() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        theirs.write_all(PROGRESS_THEN_RESPONSE).await.unwrap();
        let router = Arc::new(Router::default());
        let transport = IntoTransport::<RoleClient, _, _>::into_transport(tokio::io::split(ours));
        let transport = Arc::new(tokio::sync::Mutex::new(InOrder::new(
            transport,
            router.clone(),
        )));

        let catalog = Arc::new(Catalog::new());
        LocalTool::new(
            "t:relay",
            raw_handler(move |_args: Value, ctx| {
                let (router, transport) = (router.clone(), transport.clone());
                async move {
                    let token = ProgressToken(NumberOrString::String("t".into()));
                    let mut transport = transport.lock().await;
                    // The watch starts as the request is sent.
                    let mut request = ClientRequest::PingRequest(Default::default());
                    request.get_meta_mut().set_progress_token(token.clone());
                    request.extensions_mut().insert(WatchProgress(ctx, None));
                    transport
                        .send(JsonRpcMessage::Request(JsonRpcRequest {
                            jsonrpc: Default::default(),
                            id: NumberOrString::Number(0),
                            request,
                        }))
                        .await
                        .unwrap();
                    let first = transport.receive().await;
                    assert!(
                        matches!(first, Some(JsonRpcMessage::Notification(_))),
                        "{first:?}"
                    );
                    let second = transport.receive().await;
                    assert!(
                        matches!(second, Some(JsonRpcMessage::Response(_))),
                        "{second:?}"
                    );
                    router.unwatch_progress(&token);
                    Ok::<_, ToolError>(ToolOutput::structured(json!({})))
                }
            }),
        )
        .register(&catalog)
        .unwrap();

        let mut stream = Exec::new(catalog).run_stream(
            StreamRequest::Tool {
                id: "t:relay".into(),
                args: json!({}),
            },
            RunOptions::default(),
        );
        let mut events = Vec::new();
        while let Some(event) = stream.next_event().await {
            events.push(event);
        }
        assert!(
            matches!(
                events.as_slice(),
                [
                    StreamEvent::Progress { progress: 1.0, .. },
                    StreamEvent::Done { .. }
                ]
            ),
            "{events:?}"
        );
    }
}
