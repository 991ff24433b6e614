//! State shared by the [`Upstream`](super::Upstream) handle, the supervisor
//! task and the tools' backends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::{Peer, RoleClient};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use toolexec::{Availability, Catalog, Tool};

use super::UpstreamStatus;
use super::routing::Router;
use super::session::Endpoint;

/// A snapshot of the connection, published by the supervisor.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    /// Increments on every new session.
    pub(crate) generation: u64,
    pub(crate) status: UpstreamStatus,
    /// Set while connected.
    pub(crate) peer: Option<Peer<RoleClient>>,
    pub(crate) pid: Option<u32>,
    /// A lost HTTP session of generation `generation` is being replaced:
    /// calls wait for the new session instead of failing.
    pub(crate) reinitializing: bool,
}

/// The tools this upstream registered.
#[derive(Debug, Default)]
pub(crate) struct ToolSet {
    /// Set on shutdown: nothing is registered any more.
    pub(crate) closed: bool,
    /// Tool id → (definition, original MCP name).
    pub(crate) tools: BTreeMap<String, (Tool, String)>,
}

/// State shared by the handle, the supervisor task and the tools' backends.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) endpoint: Endpoint,
    pub(crate) call_timeout: Duration,
    /// What is relayed to the client of a call.
    pub(crate) relay: super::ClientRelay,
    pub(crate) max_concurrency: usize,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) router: Arc<Router>,
    /// Concurrency limit of calls.
    pub(crate) slots: Semaphore,
    pub(crate) conn: watch::Sender<Conn>,
    pub(crate) tools: Mutex<ToolSet>,
    pub(crate) shutdown: CancellationToken,
    /// Generation of a session a call found lost (HTTP), for re-initialization.
    pub(crate) reinit: mpsc::UnboundedSender<u64>,
    /// The revisions the server was found to speak.
    pub(crate) era: super::revision::Era,
    /// Calls held across the rounds of clients that answer input themselves.
    pub(crate) held: super::held::HeldCalls,
}

impl Shared {
    /// Available while connected, else unavailable with the reason.
    pub(crate) fn availability(&self) -> Availability {
        match self.conn.borrow().status.unavailable_reason() {
            None => Availability::Available,
            Some(reason) => Availability::Unavailable { reason },
        }
    }

    /// Stops everything: no more registrations, tools unregistered, the
    /// supervisor told to close the session.
    pub(crate) fn stop(&self) {
        self.shutdown.cancel();
        let mut set = self.tools.lock();
        set.closed = true;
        for id in std::mem::take(&mut set.tools).into_keys() {
            let _ = self.catalog.unregister(&id);
        }
    }
}
