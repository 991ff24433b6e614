//! State shared by the [`Upstream`](super::Upstream) handle, the supervisor
//! task and the tools' backends, and the import of a server's tool listing
//! into the catalog.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::{Peer, RoleClient};
use serde_json::{Map, Value};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use toolexec::{Availability, Catalog, ListRequest, Tool};

use super::UpstreamStatus;
use super::call::ToolBackend;
use super::session::{Endpoint, Router};
use super::{convert, names};

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
    closed: bool,
    /// Tool id → (definition, original MCP name).
    pub(crate) tools: BTreeMap<String, (Tool, String)>,
}

/// State shared by the handle, the supervisor task and the tools' backends.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) endpoint: Endpoint,
    pub(crate) call_timeout: Duration,
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

    /// Imports a listing into the catalog by difference. Returns the number
    /// of tools imported.
    pub(crate) fn sync_tools(self: &Arc<Self>, raw: Vec<Map<String, Value>>) -> usize {
        let by_name: BTreeMap<&str, &Map<String, Value>> = raw
            .iter()
            .filter_map(|t| match t.get("name").and_then(Value::as_str) {
                Some(name) => Some((name, t)),
                None => {
                    tracing::warn!(server = %self.name, "skipping a tool without a name");
                    None
                }
            })
            .collect();
        let mapping = names::map_names(by_name.keys().copied());
        for (original, mapped, winner) in &mapping.collisions {
            tracing::warn!(
                server = %self.name,
                tool = %original,
                id = %format!("{}:{mapped}", self.name),
                kept = %winner,
                "skipping MCP tool: its mapped name collides with another tool's"
            );
        }
        let mut set = self.tools.lock();
        if set.closed {
            return 0;
        }
        let foreign = self.foreign_ids(&set);
        let mut next: BTreeMap<String, (Tool, String)> = BTreeMap::new();
        for (mapped, original) in mapping.kept {
            let id = format!("{}:{mapped}", self.name);
            if foreign.contains(&id) {
                tracing::warn!(server = %self.name, %id, "skipping MCP tool: the id is registered by another backend");
                continue;
            }
            let tool = match convert::tool_from_mcp(&id, by_name[original.as_str()]) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(server = %self.name, tool = %original, error = %e, "skipping MCP tool");
                    continue;
                }
            };
            if let Some((old, old_original)) = set.tools.get(&id)
                && *old == tool
                && *old_original == original
            {
                next.insert(id, (tool, original));
                continue;
            }
            let backend = Arc::new(ToolBackend {
                shared: self.clone(),
                remote_name: original.clone(),
            });
            match self.catalog.replace(tool.clone(), backend) {
                Ok(_) => {
                    next.insert(id, (tool, original));
                }
                Err(e) => {
                    tracing::warn!(server = %self.name, tool = %original, error = %e, "skipping MCP tool");
                }
            }
        }
        for id in set.tools.keys() {
            if !next.contains_key(id) {
                let _ = self.catalog.unregister(id);
            }
        }
        set.tools = next;
        set.tools.len()
    }

    /// Ids in our namespace registered by someone else.
    fn foreign_ids(&self, set: &ToolSet) -> HashSet<String> {
        let mut foreign = HashSet::new();
        let mut req = ListRequest {
            namespace: Some(self.name.to_string()),
            cursor: None,
            limit: Some(toolexec::catalog::MAX_PAGE),
        };
        while let Ok(page) = self.catalog.list(&req) {
            for t in &page.tools {
                let id = t.tool().id.to_string();
                if !set.tools.contains_key(&id) {
                    foreign.insert(id);
                }
            }
            match page.next_cursor {
                Some(c) => req.cursor = Some(c),
                None => break,
            }
        }
        foreign
    }
}
