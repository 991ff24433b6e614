//! Routing of an upstream's notifications to the calls and tasks waiting
//! for them.
//!
//! Progress is relayed by the transport, as each message is read, and not
//! by an rmcp notification handler: rmcp runs every handler as a task of
//! its own, apart from delivering a call's response, so a handler could run
//! after its call had returned and unregistered the token, and the call's
//! last progress was lost. [`InOrder`] relays a progress notification
//! before the next message (perhaps the response) is read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, ProgressNotificationParam, ProgressToken, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::Notify;
use toolexec::ToolContext;

/// Routes server notifications of every session of one upstream.
#[derive(Debug, Default)]
pub(crate) struct Router {
    /// Progress token of each call in flight → its context.
    progress: Mutex<HashMap<ProgressToken, ToolContext>>,
    /// Signalled on `notifications/tools/list_changed`.
    pub(crate) tools_changed: Notify,
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

    /// Relays one progress notification to the call it belongs to (ignored
    /// when no call in flight has its token).
    fn relay_progress(&self, params: &ProgressNotificationParam) {
        let ctx = self.progress.lock().get(&params.progress_token).cloned();
        if let Some(ctx) = ctx {
            ctx.progress(params.progress, params.total, params.message.as_deref());
        }
    }
}

/// A client transport that relays progress notifications in the order they
/// arrive, before the message that follows them is handed to rmcp.
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
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        async move {
            let message = self.inner.receive().await;
            // No await between reading the message and relaying it: a
            // dropped receive future cannot skip a relay.
            if let Some(JsonRpcMessage::Notification(n)) = &message
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                self.router.relay_progress(&p.params);
            }
            message
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
