//! `notifications/tools/list_changed`: when the catalog changes, every
//! initialized client of a gateway that publishes tools directly is told,
//! and so is every 2026-07-28 client listening for it
//! (`subscriptions/listen`). The initialized clients also get the
//! upstreams' resource and prompt notifications ([`super::passthrough`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::model::{ServerNotification, SubscriptionFilter, ToolListChangedNotification};
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use tokio::sync::{broadcast, mpsc};

use super::server::Gateway;

/// Most `subscriptions/listen` streams one gateway holds open at once, over
/// every connection; one more is ended at once with an error.
pub(super) const MAX_LISTENERS: usize = 1024;
/// Most watches started for acknowledged listeners not yet served; the
/// oldest is dropped past that (a listener that finds none starts its own).
const MAX_PENDING_LISTENS: usize = 64;
/// Most resources one listener is subscribed to (as one session may be).
#[cfg(feature = "upstream")]
const MAX_LISTENED_RESOURCES: usize = 1_000;
/// `resources/updated` waiting for one listener; more are dropped.
#[cfg(feature = "upstream")]
const UPDATE_BACKLOG: usize = 256;

/// What one listener watches, started before it is acknowledged.
pub(super) struct Watch {
    tools: broadcast::Receiver<toolexec::CatalogEvent>,
    upstream: Option<broadcast::Receiver<ListNotice>>,
}

impl Gateway {
    /// Registers an initialized client for list-changed notifications.
    pub(super) fn register_peer(&self, peer: Peer<RoleServer>) {
        {
            let mut peers = self.shared.peers.lock();
            peers.retain(|p| !p.is_transport_closed());
            peers.push(peer);
        }
        if self.shared.options.expose.direct() {
            self.start_watcher();
        }
        #[cfg(feature = "upstream")]
        if !self.shared.passthrough.is_empty() {
            self.shared.passthrough.start_notices(&self.shared.peers);
        }
    }

    /// Starts the task that turns catalog events into list-changed
    /// notifications (once per gateway).
    fn start_watcher(&self) {
        if self.shared.watcher_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(mut rx) = self.shared.changes.lock().take() else {
            return;
        };
        let weak = Arc::downgrade(&self.shared);
        let stop = self.shared.stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    r = rx.recv() => if let Err(broadcast::error::RecvError::Closed) = r {
                        break;
                    },
                }
                coalesce(&mut rx).await;
                let Some(shared) = weak.upgrade() else { break };
                let peers: Vec<_> = {
                    let mut peers = shared.peers.lock();
                    peers.retain(|p| !p.is_transport_closed());
                    peers.clone()
                };
                drop(shared);
                for peer in peers {
                    tokio::spawn(async move {
                        if let Err(e) = peer.notify_tool_list_changed().await {
                            tracing::debug!(error = %e, "could not send tools/list_changed");
                        }
                    });
                }
            }
        });
    }

    /// What a 2026-07-28 client may listen for: tool list changes when
    /// tools are published directly, and the upstreams' prompt and resource
    /// list changes and resource updates (`resourceSubscriptions`, the
    /// first [`MAX_LISTENED_RESOURCES`]) when some upstream offers prompts
    /// or resources. Which upstream owns each resource, and whether the
    /// caller may read it, are decided as the listener starts
    /// ([`Gateway::serve_listen`]): rmcp asks for this filter without the
    /// request.
    pub(super) fn listenable(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        let asked = |flag: Option<bool>| (flag == Some(true)).then_some(true);
        if self.shared.options.expose.direct() {
            accepted.tools_list_changed = asked(requested.tools_list_changed);
        }
        #[cfg(feature = "upstream")]
        {
            let passthrough = &self.shared.passthrough;
            if !passthrough.is_empty() {
                if passthrough.offers(|c| c.prompts.is_some()) {
                    accepted.prompts_list_changed = asked(requested.prompts_list_changed);
                }
                if passthrough.offers(|c| c.resources.is_some()) {
                    accepted.resources_list_changed = asked(requested.resources_list_changed);
                    accepted.resource_subscriptions = requested
                        .resource_subscriptions
                        .as_ref()
                        .map(|uris| uris.iter().take(MAX_LISTENED_RESOURCES).cloned().collect());
                }
            }
        }
        // rmcp acknowledges the listener before `listen` runs: what changes
        // after the acknowledgment must reach it, so it watches from here.
        let watch = Watch {
            tools: self.exec().catalog().subscribe(),
            upstream: self.upstream_watch(),
        };
        let mut pending = self.shared.pending_listens.lock();
        if pending.len() >= MAX_PENDING_LISTENS {
            pending.pop_front();
        }
        pending.push_back(watch);
        Some(accepted)
    }

    /// Serves one `subscriptions/listen` until the client ends it: each
    /// accepted kind of list change, a tool burst coalesced as for
    /// initialized clients, and `resources/updated` of the accepted
    /// resources. Those are subscribed first, for the client's caller: a
    /// resource no upstream owns, or that the caller may not read, ends the
    /// listener at once with the error (the acknowledgment came before,
    /// from rmcp), and nothing stays subscribed.
    pub(super) async fn serve_listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let Ok(_slot) = self.shared.listeners.clone().try_acquire_owned() else {
            return Err(McpError::internal_error(
                format!("subscription limit reached: {MAX_LISTENERS} listeners are open"),
                None,
            ));
        };
        let accepted = context.accepted().clone();
        // The oldest watch waiting was started no later than this
        // listener's acknowledgment (each `listenable` queues one, and
        // each listener takes the oldest), so no change after it is missed.
        let watch = self.shared.pending_listens.lock().pop_front();
        let Watch { tools, upstream } = watch.unwrap_or_else(|| Watch {
            tools: self.exec().catalog().subscribe(),
            upstream: self.upstream_watch(),
        });
        let mut tools = (accepted.tools_list_changed == Some(true)).then_some(tools);
        let mut upstream = upstream.filter(|_| {
            accepted.prompts_list_changed == Some(true)
                || accepted.resources_list_changed == Some(true)
        });
        #[cfg(feature = "upstream")]
        let (mut updates, _held) = match self.listen_to_resources(&context).await? {
            Some((rx, held)) => (Some(rx), Some(held)),
            None => (None, None),
        };
        #[cfg(not(feature = "upstream"))]
        let mut updates: Option<mpsc::Receiver<String>> = None;
        loop {
            let changed = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                Some(uri) = next_update(updates.as_mut()) => {
                    ServerNotification::ResourceUpdatedNotification(
                        rmcp::model::ResourceUpdatedNotification::new(
                            rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                        ),
                    )
                }
                Some(r) = recv(tools.as_mut()) => match r {
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                    _ => {
                        if let Some(rx) = tools.as_mut() {
                            coalesce(rx).await;
                        }
                        ServerNotification::ToolListChangedNotification(
                            ToolListChangedNotification::default(),
                        )
                    }
                },
                Some(r) = recv(upstream.as_mut()) => match r {
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                    // Missed changes: each accepted kind may have changed.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        for n in all_list_notifications(&accepted) {
                            if context.sink().send(n).await.is_err() {
                                return Ok(());
                            }
                        }
                        continue;
                    }
                    Ok(notice) => match list_notification(notice, &accepted) {
                        Some(n) => n,
                        None => continue,
                    },
                },
            };
            if let Err(e) = context.sink().send(changed).await {
                tracing::debug!(error = %e, "could not send a list change to a listener");
                return Ok(());
            }
        }
    }

    /// Subscribes a listener to the resources it was accepted for, as its
    /// caller: the updates come on the receiver while the guard lives.
    #[cfg(feature = "upstream")]
    async fn listen_to_resources(
        &self,
        context: &SubscriptionContext,
    ) -> Result<
        Option<(
            mpsc::Receiver<String>,
            super::passthrough::ListenerSubscriptions,
        )>,
        McpError,
    > {
        let Some(uris) = context
            .accepted()
            .resource_subscriptions
            .as_ref()
            .filter(|uris| !uris.is_empty())
        else {
            return Ok(None);
        };
        let (tx, rx) = mpsc::channel(UPDATE_BACKLOG);
        let request = context.request_context();
        let id = super::session::listener_id();
        let work = self
            .shared
            .passthrough
            .subscribe_listener(id, uris, tx, request.ct.clone());
        let held = self
            .traced(
                "subscriptions/listen",
                None,
                request,
                super::handler::rpc_failure,
                work,
            )
            .await?;
        Ok(Some((rx, held)))
    }

    /// The upstreams' list changes, when there are upstreams.
    #[cfg(feature = "upstream")]
    fn upstream_watch(&self) -> Option<broadcast::Receiver<ListNotice>> {
        let passthrough = &self.shared.passthrough;
        if passthrough.is_empty() {
            return None;
        }
        passthrough.start_notices(&self.shared.peers);
        Some(passthrough.list_changes())
    }

    /// Without upstreams there are none.
    #[cfg(not(feature = "upstream"))]
    fn upstream_watch(&self) -> Option<broadcast::Receiver<ListNotice>> {
        None
    }
}

#[cfg(feature = "upstream")]
type ListNotice = crate::upstream::UpstreamNotice;
#[cfg(not(feature = "upstream"))]
type ListNotice = ();

/// The notification a listener gets for an upstream's list change, if it
/// accepted that kind.
#[cfg(feature = "upstream")]
fn list_notification(
    notice: ListNotice,
    accepted: &SubscriptionFilter,
) -> Option<ServerNotification> {
    use crate::upstream::UpstreamNotice;
    match notice {
        UpstreamNotice::PromptsChanged if accepted.prompts_list_changed == Some(true) => Some(
            ServerNotification::PromptListChangedNotification(Default::default()),
        ),
        UpstreamNotice::ResourcesChanged if accepted.resources_list_changed == Some(true) => Some(
            ServerNotification::ResourceListChangedNotification(Default::default()),
        ),
        _ => None,
    }
}

/// A notification of every upstream list change `accepted` takes.
fn all_list_notifications(accepted: &SubscriptionFilter) -> Vec<ServerNotification> {
    let mut all = Vec::new();
    if accepted.prompts_list_changed == Some(true) {
        all.push(ServerNotification::PromptListChangedNotification(
            Default::default(),
        ));
    }
    if accepted.resources_list_changed == Some(true) {
        all.push(ServerNotification::ResourceListChangedNotification(
            Default::default(),
        ));
    }
    all
}

#[cfg(not(feature = "upstream"))]
fn list_notification(_: ListNotice, _: &SubscriptionFilter) -> Option<ServerNotification> {
    None
}

/// The next resource update of `rx`; never when there is none to watch.
async fn next_update(rx: Option<&mut mpsc::Receiver<String>>) -> Option<String> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next event of `rx`, or never when there is none to watch.
async fn recv<T: Clone>(
    rx: Option<&mut broadcast::Receiver<T>>,
) -> Option<Result<T, broadcast::error::RecvError>> {
    match rx {
        Some(rx) => Some(rx.recv().await),
        None => std::future::pending().await,
    }
}

/// Lets a burst of catalog events end (a batch registration sends one per
/// tool) and drops them, so it makes one notification.
async fn coalesce<T: Clone>(rx: &mut broadcast::Receiver<T>) {
    tokio::time::sleep(Duration::from_millis(20)).await;
    while !matches!(
        rx.try_recv(),
        Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
    ) {}
}
