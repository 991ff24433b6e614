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
//! The same watch records which client a request in flight was made for
//! ([`Caller::link`]), so that the server's requests to the client during
//! the call (sampling, elicitation, roots) and its log messages reach that
//! client ([`Router::link_for`]). Log messages are relayed as they are
//! read, like progress.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::RoleClient;
use rmcp::model::{
    GetExtensions, GetMeta, JsonRpcMessage, ProgressNotificationParam, ProgressToken, RequestId,
    ServerNotification,
};
use rmcp::service::{InboundStreamOrigin, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use toolexec::telemetry::Caller;
use toolexec::{ClientLink, ToolContext};

use super::passthrough::UpstreamNotice;

/// Routes server notifications of every session of one upstream.
#[derive(Debug)]
pub(crate) struct Router {
    /// Progress token of each call in flight → its context.
    progress: Mutex<HashMap<ProgressToken, ToolContext>>,
    /// Requests in flight made for a client that can be asked back.
    linked: Mutex<HashMap<RequestId, Linked>>,
    /// Signalled on `notifications/tools/list_changed`.
    pub(crate) tools_changed: Notify,
    /// Resource and prompt notifications, for whoever relays them.
    pub(crate) notices: broadcast::Sender<UpstreamNotice>,
}

impl Default for Router {
    fn default() -> Self {
        Router {
            progress: Mutex::default(),
            linked: Mutex::default(),
            tools_changed: Notify::new(),
            notices: broadcast::Sender::new(NOTICE_BUFFER),
        }
    }
}

/// Notices kept for a slow relay before it skips the oldest.
const NOTICE_BUFFER: usize = 256;

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

    /// Forgets the request `id`: what was relayed to its client for it is
    /// abandoned ([`Linked::ended`]).
    pub(crate) fn end_request(&self, id: &RequestId) {
        let mut linked = self.linked.lock();
        if let Some(l) = linked.remove(id) {
            l.ended.cancel();
        }
        // An entry the transport recorded after its request ended.
        linked.retain(|_, l| !l.ended.is_cancelled());
    }

    /// The client that a request from the server (arrived on `origin`, the
    /// stream HTTP carried it on, if known) is meant for.
    ///
    /// Over streamable HTTP a server sends it on the response stream of
    /// the request it belongs to, which names it. Otherwise (stdio, or the
    /// standalone HTTP stream) nothing does: it goes to the client of the
    /// requests in flight when they were all made for one client session,
    /// and is refused when they were made for several, so that one client
    /// is never asked on another's behalf.
    pub(crate) fn link_for(
        &self,
        origin: Option<&InboundStreamOrigin>,
    ) -> Result<(ClientLink, CancellationToken), String> {
        let mut linked = self.linked.lock();
        linked.retain(|_, l| !l.ended.is_cancelled());
        match origin {
            Some(InboundStreamOrigin::OutboundRequest(id)) => linked
                .get(id)
                .map(|l| (l.link.clone(), l.ended.clone()))
                .ok_or_else(|| {
                    "the request it arrived with is not a call made for a client that \
                     toolexec can ask"
                        .to_owned()
                }),
            // The standalone stream (a server that does not say which
            // request it asks for), or a transport without streams.
            Some(InboundStreamOrigin::Unassociated) | None => {
                let mut sessions = linked.values().map(|l| &l.session);
                let Some(first) = sessions.next() else {
                    return Err("no call made for a client is in flight on this server; \
                         toolexec relays requests to a client only during one of its calls"
                        .to_owned());
                };
                if sessions.any(|s| s != first) {
                    return Err(format!(
                        "calls from {} client sessions are in flight on this server, and \
                         this transport does not say which one the request belongs to",
                        linked
                            .values()
                            .map(|l| &l.session)
                            .collect::<std::collections::HashSet<_>>()
                            .len()
                    ));
                }
                let l = linked.values().next().expect("not empty");
                Ok((l.link.clone(), l.ended.clone()))
            }
        }
    }

    /// Relays a log message to the client it is meant for: the one client
    /// session with requests in flight (none, or several: dropped).
    fn relay_log(&self, params: serde_json::Value) {
        match self.link_for(None) {
            Ok((link, _)) => link.notify("notifications/message", params),
            Err(why) => tracing::debug!(reason = %why, "an upstream log message was not relayed"),
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

/// A request in flight made for a client that can be asked back.
#[derive(Debug)]
struct Linked {
    link: ClientLink,
    /// The client's session: requests of one session may use any link.
    session: Option<String>,
    /// Cancelled when the request ends: relayed requests stop waiting.
    ended: CancellationToken,
}

/// The client a request is made for, and the token its guard cancels when
/// the request ends (perhaps before the transport sent it).
#[derive(Clone, Debug)]
pub(crate) struct ForClient {
    pub(crate) caller: Arc<Caller>,
    pub(crate) ended: CancellationToken,
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
}

impl<T> InOrder<T> {
    pub(crate) fn new(inner: T, router: Arc<Router>) -> Self {
        InOrder { inner, router }
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
        if let JsonRpcMessage::Request(r) = &item
            && let Some(WatchProgress(ctx, caller)) = r.request.extensions().get::<WatchProgress>()
        {
            if let Some(token) = r.request.get_meta().get_progress_token() {
                self.router.watch_progress(token, ctx.clone());
            }
            if let Some(ForClient { caller, ended }) = caller
                && let Some(link) = &caller.link
                && !ended.is_cancelled()
            {
                self.router.linked.lock().insert(
                    r.id.clone(),
                    Linked {
                        link: link.clone(),
                        session: caller.session.clone(),
                        ended: ended.clone(),
                    },
                );
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        // No await between reading the message and relaying it: a dropped
        // receive future cannot skip a relay.
        if let Some(JsonRpcMessage::Notification(n)) = &message {
            match &n.notification {
                ServerNotification::ProgressNotification(p) => {
                    self.router.relay_progress(&p.params)
                }
                #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
                ServerNotification::LoggingMessageNotification(m) => {
                    if let Ok(params) = serde_json::to_value(&m.params) {
                        self.router.relay_log(params);
                    }
                }
                _ => {}
            }
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
    use toolexec::{BoxFuture, ClientError, ClientRequests};
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

    /// A client link that answers nothing: these tests look at routing only.
    #[derive(Debug)]
    struct Named(#[allow(dead_code)] &'static str); // read through `Debug`

    impl ClientRequests for Named {
        fn supports(&self, _: &str, _: &Value) -> bool {
            true
        }
        fn request(&self, _: &str, _: Value) -> BoxFuture<'static, Result<Value, ClientError>> {
            Box::pin(async { Err(ClientError::Failed("unused".into())) })
        }
        fn notify(&self, _: &str, _: Value) {}
    }

    fn link_name(link: &ClientLink) -> String {
        format!("{:?}", link.0)
    }

    /// Records request `id` as made for `client` of `session`, as the
    /// transport does when it sends it.
    fn sent(router: &Router, id: i64, client: &'static str, session: &str) -> CancellationToken {
        let ended = CancellationToken::new();
        let caller = Caller {
            session: Some(session.to_owned()),
            link: Some(ClientLink(Arc::new(Named(client)))),
            ..Caller::default()
        };
        router.linked.lock().insert(
            NumberOrString::Number(id),
            Linked {
                link: caller.link.clone().unwrap(),
                session: caller.session.clone(),
                ended: ended.clone(),
            },
        );
        ended
    }

    #[test]
    fn requests_go_to_the_client_of_their_call_and_never_to_a_guess() {
        let router = Router::default();
        let no_call = router.link_for(None).unwrap_err();
        assert!(no_call.contains("no call"), "{no_call}");

        // One session in flight (two of its calls): no association needed.
        let a1 = sent(&router, 1, "a1", "session-a");
        let _a2 = sent(&router, 2, "a2", "session-a");
        let (link, _) = router.link_for(None).unwrap();
        assert!(link_name(&link).starts_with("Named(\"a"), "{link:?}");

        // Two sessions: without association, refused; with it, exact.
        let _b = sent(&router, 3, "b", "session-b");
        let refused = router
            .link_for(Some(&InboundStreamOrigin::Unassociated))
            .unwrap_err();
        assert!(refused.contains("2 client sessions"), "{refused}");
        let origin = InboundStreamOrigin::OutboundRequest(NumberOrString::Number(3));
        let (link, ended) = router.link_for(Some(&origin)).unwrap();
        assert_eq!(link_name(&link), "Named(\"b\")");
        assert!(!ended.is_cancelled());
        let unknown = InboundStreamOrigin::OutboundRequest(NumberOrString::Number(9));
        assert!(router.link_for(Some(&unknown)).is_err());

        // A call that ended is never asked again, even if its entry stayed.
        router.end_request(&NumberOrString::Number(3));
        assert!(ended.is_cancelled());
        a1.cancel();
        let (link, _) = router.link_for(None).unwrap();
        assert_eq!(link_name(&link), "Named(\"a2\")");
        assert!(router.link_for(Some(&origin)).is_err());
    }
}
