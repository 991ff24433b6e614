//! Which protocol revision a session with an upstream speaks: the
//! `server/discover` probe and its fallback to `initialize` ([`Era`],
//! [`probe_failed`]), and the listener that brings a 2026-07-28 server's
//! list changes ([`listen_for_changes`]).

use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::{ClientInitializeError, ClientLifecycleMode};

use super::passthrough::UpstreamNotice;
use super::session::{Handler, Running};

/// How long a server found to speak only an earlier revision is offered
/// `initialize` first, before it is probed again (it may have been
/// upgraded, or the probe's failure may have been a passing one).
const LEGACY_MEMORY: std::time::Duration = std::time::Duration::from_secs(600);

/// Which revisions a server was found to speak, remembered across its
/// sessions for [`LEGACY_MEMORY`].
#[derive(Debug, Default)]
pub(crate) struct Era {
    /// Until when later sessions start with `initialize`: set when a
    /// session ended on an `initialize` revision after a probe.
    legacy_until: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl Era {
    /// How a session starts: `server/discover` at 2026-07-28 first, and the
    /// `initialize` handshake at 2025-11-25 when the server answers it as a
    /// server of an earlier revision does (an error, or silence for 10 s).
    /// Each server gets the newest revision it speaks.
    pub(super) fn lifecycle(&self) -> ClientLifecycleMode {
        if self
            .legacy_until
            .lock()
            .is_some_and(|until| std::time::Instant::now() < until)
        {
            return ClientLifecycleMode::Initialize;
        }
        ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        }
    }

    /// After a session opened with `lifecycle`: remembers a server that
    /// ended on an earlier revision; forgets it after any failure, so the
    /// next session probes again.
    pub(super) fn learn(&self, lifecycle_probed: bool, opened: Option<&Running>) {
        let mut until = self.legacy_until.lock();
        match opened {
            Some(running) if lifecycle_probed => {
                let legacy = running
                    .peer()
                    .peer_info()
                    .is_some_and(|info| info.protocol_version.has_initialize());
                if legacy {
                    *until = Some(std::time::Instant::now() + LEGACY_MEMORY);
                }
            }
            Some(_) => {}
            None => *until = None,
        }
    }
}

/// A 2026-07-28 server sends list changes, and updates of the resources
/// subscribed to, only to a listener (`subscriptions/listen`), not to the
/// session as earlier revisions do: one listener per session passes them
/// to the handler, as the session's own notifications would be. Its
/// `resourceSubscriptions` are the router's watched URIs
/// ([`Watched`](super::watched::Watched)); when they change it opens again
/// at once, and each acknowledgment says which the server accepted. A
/// listener the server refuses or ends is opened again (after a pause that
/// grows to 30 s), and what may have changed meanwhile is read again. It
/// ends with the session.
pub(super) fn listen_for_changes(running: &Running, handler: Handler) {
    let peer = running.peer().clone();
    let modern = peer
        .peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize());
    if !modern {
        return;
    }
    tokio::spawn(async move {
        let watched = &handler.router.watched;
        let mut changes = watched.changes();
        let mut pause = std::time::Duration::from_secs(1);
        let mut first = true;
        while !peer.is_transport_closed() {
            changes.mark_unchanged();
            let (generation, uris) = watched.current();
            let mut filter = SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .build();
            if !uris.is_empty() {
                filter.resource_subscriptions = Some(uris.into_iter().collect());
            }
            let mut reopen = false;
            match peer.listen(filter).await {
                Ok(mut subscription) => {
                    let accepted = subscription
                        .acknowledged()
                        .resource_subscriptions
                        .clone()
                        .unwrap_or_default();
                    watched.acknowledge(generation, accepted.into_iter().collect());
                    if !first {
                        // Changes while no listener was open are not lost.
                        handler.tools_changed();
                        handler.router.publish(UpstreamNotice::PromptsChanged);
                        handler.router.publish(UpstreamNotice::ResourcesChanged);
                    }
                    let opened = std::time::Instant::now();
                    loop {
                        let next = tokio::select! {
                            next = subscription.next() => next,
                            changed = changes.changed() => {
                                if changed.is_ok() {
                                    reopen = true;
                                }
                                break;
                            }
                        };
                        match next {
                            Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                                handler.tools_changed()
                            }
                            Ok(Some(ServerNotification::PromptListChangedNotification(_))) => {
                                handler.router.publish(UpstreamNotice::PromptsChanged)
                            }
                            Ok(Some(ServerNotification::ResourceListChangedNotification(_))) => {
                                handler.router.publish(UpstreamNotice::ResourcesChanged)
                            }
                            Ok(Some(ServerNotification::ResourceUpdatedNotification(n))) => handler
                                .router
                                .publish(UpstreamNotice::ResourceUpdated { uri: n.params.uri }),
                            Ok(Some(_)) => {}
                            Ok(None) => {
                                tracing::debug!(server = %handler.server, "the server ended the list-change listener");
                                break;
                            }
                            Err(e) => {
                                tracing::debug!(server = %handler.server, error = %e, "the list-change listener failed");
                                break;
                            }
                        }
                    }
                    if reopen {
                        // The watched resources changed: a listener with
                        // the new set, now.
                        let _ = subscription.cancel().await;
                        continue;
                    }
                    // A listener that lived long was no flapping one.
                    if opened.elapsed() > std::time::Duration::from_secs(60) {
                        pause = std::time::Duration::from_secs(1);
                    }
                }
                Err(e) => {
                    // Nothing is watched until a listener is accepted.
                    watched.acknowledge(generation, Default::default());
                    tracing::warn!(server = %handler.server, error = %e, "subscriptions/listen refused: list changes of this server are not seen until it is accepted");
                }
            }
            first = false;
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                // A subscription waits for a listener: do not make it wait
                // out the pause.
                _ = changes.changed() => {}
            }
            pause = (pause * 2).min(std::time::Duration::from_secs(30));
        }
    });
}

/// Whether the handshake failed on the `server/discover` probe itself
/// ([`ConnectError::probe`]): an answer that is no discover result and no
/// error, or, over stdio, the server ending the session on it. Not an
/// unreachable server, a refused credential or a certificate (over HTTP,
/// transport failures are those).
pub(super) fn probe_failed(e: &ClientInitializeError, http: bool) -> bool {
    match e {
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ConflictInitResponseId(..)
        | ClientInitializeError::UncorrelatedErrorResponse { .. }
        | ClientInitializeError::LegacyFallbackFailed { .. } => true,
        ClientInitializeError::ConnectionClosed(_)
        | ClientInitializeError::TransportError { .. } => !http,
        _ => false,
    }
}
