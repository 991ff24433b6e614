//! Resource subscriptions on a 2026-07-28 server, which has no
//! `resources/subscribe`: the URIs go in the `resourceSubscriptions` of the
//! session's listener ([`listen_for_changes`](super::revision::listen_for_changes)),
//! which opens again whenever the set changes, and a subscription holds
//! once the server acknowledged a listener with its URI.

use std::collections::BTreeSet;

use parking_lot::Mutex;
use tokio::sync::watch;

/// The URIs a 2026-07-28 server is asked to report updates of.
#[derive(Debug)]
pub(crate) struct Watched {
    uris: Mutex<BTreeSet<String>>,
    /// Bumped on every change of `uris`: the listener opens again with them.
    generation: watch::Sender<u64>,
    /// The URIs of the last listener the server acknowledged, and the
    /// generation it was opened for.
    acknowledged: watch::Sender<(u64, BTreeSet<String>)>,
}

impl Default for Watched {
    fn default() -> Self {
        Watched {
            uris: Mutex::default(),
            generation: watch::Sender::new(0),
            acknowledged: watch::Sender::new((0, BTreeSet::new())),
        }
    }
}

impl Watched {
    /// Adds `uri`; the generation whose listener will carry it.
    pub(crate) fn add(&self, uri: &str) -> u64 {
        let mut uris = self.uris.lock();
        uris.insert(uri.to_owned());
        self.bump()
    }

    /// Removes `uri`; the generation whose listener will not carry it
    /// (`None` when it was not there).
    pub(crate) fn remove(&self, uri: &str) -> Option<u64> {
        let mut uris = self.uris.lock();
        uris.remove(uri).then(|| self.bump())
    }

    fn bump(&self) -> u64 {
        let mut next = 0;
        self.generation.send_modify(|g| {
            *g += 1;
            next = *g;
        });
        next
    }

    /// The current set and its generation, for a listener to open with.
    pub(crate) fn current(&self) -> (u64, BTreeSet<String>) {
        let uris = self.uris.lock();
        (*self.generation.borrow(), uris.clone())
    }

    /// Told of each change of the set.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// A listener of `generation` was acknowledged with `accepted`.
    pub(crate) fn acknowledge(&self, generation: u64, accepted: BTreeSet<String>) {
        self.acknowledged.send_replace((generation, accepted));
    }

    /// Whether a listener of `generation` or later was acknowledged with
    /// `uri`; waits for one (as long as the caller lets it).
    pub(crate) async fn accepted(&self, generation: u64, uri: &str) -> bool {
        let mut acknowledged = self.acknowledged.subscribe();
        loop {
            {
                let (g, uris) = &*acknowledged.borrow_and_update();
                if *g >= generation {
                    return uris.contains(uri);
                }
            }
            if acknowledged.changed().await.is_err() {
                return false;
            }
        }
    }
}
