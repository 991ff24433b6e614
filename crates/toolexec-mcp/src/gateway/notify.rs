//! `notifications/tools/list_changed`: when the catalog changes, every
//! initialized client of a gateway that publishes tools directly is told.
//! The initialized clients also get the upstreams' resource and prompt
//! notifications ([`super::passthrough`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::{Peer, RoleServer};
use tokio::sync::broadcast;

use super::server::Gateway;

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
                // Coalesce a burst (a batch registration sends one event per tool).
                tokio::time::sleep(Duration::from_millis(20)).await;
                while !matches!(
                    rx.try_recv(),
                    Err(broadcast::error::TryRecvError::Empty
                        | broadcast::error::TryRecvError::Closed)
                ) {}
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
}
