//! Upstream MCP servers as toolexec backends.
//!
//! [`Upstream::connect`] connects to one MCP server, over **stdio** (a spawned
//! child process) or **streamable HTTP**, and imports its tools into a
//! [`Catalog`] under the server's name as namespace: the MCP tool `get-sum` of
//! server `everything` becomes `everything:get-sum`. Calls go through the
//! usual toolexec pipeline (validation, deadlines, cancellation, streaming) and
//! are relayed to the server as `tools/call`.
//!
//! ```no_run
//! use std::{collections::BTreeMap, sync::Arc};
//! use serde_json::json;
//! use toolexec::{Catalog, Exec};
//! use toolexec_mcp::upstream::{Upstream, UpstreamConfig, UpstreamTransport};
//!
//! # #[tokio::main] async fn main() -> Result<(), toolexec::Error> {
//! let catalog = Arc::new(Catalog::new());
//! let config = UpstreamConfig::new("everything", UpstreamTransport::Stdio {
//!     command: "npx".into(),
//!     args: vec!["-y".into(), "@modelcontextprotocol/server-everything".into()],
//!     env: BTreeMap::new(),
//!     inherit_env: Vec::new(),
//!     cwd: None,
//! });
//! let upstream = Upstream::connect(config, catalog.clone()).await?;
//! let exec = Exec::new(catalog);
//! let out = exec.run_tool("everything:get-sum", json!({"a": 1, "b": 2})).await?;
//! println!("{}", out.value);
//! upstream.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Tools
//!
//! - Tools are listed with `tools/list`, following `nextCursor`.
//! - Names are mapped to valid toolexec names deterministically: characters
//!   outside `[A-Za-z0-9_.-]` become `_`, names longer than 128 bytes are cut
//!   and end in `-` plus 8 hex digits of a hash of the original name. Calls
//!   use the original name. When two names map to the same one, the name that
//!   needed no mapping wins, else the smallest original name; the others are
//!   skipped with a warning.
//! - Title, description, `inputSchema`, `outputSchema` and annotations are
//!   kept. A tool that toolexec rejects (a schema the validator cannot
//!   compile, no object input schema) is skipped with a warning; the server's
//!   other tools are imported.
//! - A tool id already registered by someone else in the catalog is never
//!   replaced: that tool is skipped with a warning.
//! - On `notifications/tools/list_changed` (and after every reconnect) the
//!   tools are listed again and the catalog is updated by difference: new
//!   tools are registered, changed ones replaced, removed ones unregistered,
//!   unchanged ones left alone.
//!
//! # Calls
//!
//! - Arguments are relayed as they are (after the pipeline validated them).
//! - Every request carries a `progressToken`; each `notifications/progress`
//!   for it is relayed to [`ToolContext::progress`](toolexec::ToolContext::progress).
//! - When the call is dropped (the caller cancelled, a deadline passed), the
//!   server is sent `notifications/cancelled` for the request.
//! - A result with `isError: true` is `execution_failed` (message: the text
//!   content joined with newlines; data: `structuredContent`). Otherwise
//!   `structuredContent` is the value (or JSON text content, as
//!   [`ToolOutput::normalize`](toolexec::ToolOutput::normalize) does) and
//!   every content block is kept.
//! - A JSON-RPC error answering `tools/call` is `execution_failed` with the
//!   error's `code` and `data` as data; a server that asks for client input
//!   (elicitation / sampling rounds) or answers with a task fails the same way,
//!   as toolexec cannot provide either.
//! - [`UpstreamConfig::call_timeout`] is the backend's own deadline (`timeout`
//!   error; the pipeline's deadline still applies too), and
//!   [`UpstreamConfig::max_concurrency`] bounds the calls in flight: calls over
//!   the limit wait for a slot, within the timeout.
//!
//! # Resilience
//!
//! - A stdio server that exits or crashes is restarted with exponential
//!   backoff: 100 ms, doubling up to 30 s; the backoff starts over once a
//!   session stayed up for 10 s. Calls in flight when it dies fail with
//!   `backend_unavailable`; calls made while it is down fail at once with
//!   `backend_unavailable` (their tools stay in the catalog, and
//!   [`Backend::availability`](toolexec::Backend::availability) reports
//!   `Unavailable` with the reason); after the restart the tools are listed
//!   again and calls work.
//! - An HTTP session the server lost (a server restart) is re-initialized
//!   once, transparently, and the call retried once:
//!   - HTTP 404 (the spec's answer to an unknown session) is handled by
//!     rmcp's own recovery (new `initialize` on the same transport, request
//!     retried once);
//!   - an *uncorrelated* JSON-RPC error about the session (`id: null`, as
//!     servers built on the TypeScript SDK's examples answer with HTTP 400)
//!     is turned into the same recovery;
//!   - HTTP 401 (or a failed rmcp recovery) makes this upstream open a new
//!     session (new transport, handshake, tools re-listed) and retry the call
//!     once; calls arriving meanwhile wait for the new session.
//!
//!   A correlated JSON-RPC error is never retried: the server processed the
//!   request. An HTTP session that ends for good is reconnected with the same
//!   backoff as a crashed stdio server.
//! - With [`UpstreamConfig::lazy`], [`Upstream::connect`] only validates the
//!   configuration and returns; see there.
//!
//! # Secrets
//!
//! A stdio server gets a cleared environment (see
//! [`UpstreamTransport::Stdio`]). Environment values, header values and the
//! bearer token are
//! [`Secret`]s: they never appear in logs, errors or `Debug` output
//! (header values are marked sensitive for the HTTP stack as well). The
//! server's own stderr is forwarded to `tracing` at debug level (target
//! `toolexec_mcp::upstream::stderr`) unfiltered.

mod call;
mod convert;
mod env;
mod http_client;
mod names;
mod session;
mod supervisor;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::{Peer, RoleClient};
use serde_json::{Map, Value};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use toolexec::{Availability, Catalog, Error, ListRequest, Secret, Tool};

pub use self::env::INHERITED_ENV;

use self::call::ToolBackend;
use self::session::{Endpoint, Router};

/// Default [`UpstreamConfig::call_timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`UpstreamConfig::max_concurrency`].
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;
/// How long one connection attempt (spawn or HTTP session, MCP handshake and
/// the first `tools/list`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// First restart delay; it doubles after each failed attempt.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A session that stayed up this long resets the backoff.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);

/// How to reach one upstream MCP server, and how to call it.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// The server's name: the namespace of its tools (`name:tool`). Must be a
    /// valid toolexec namespace (`A-Z a-z 0-9 _ - .`, at most 128 bytes).
    pub name: String,
    /// Where the server is.
    pub transport: UpstreamTransport,
    /// Deadline of each call, enforced by the backend itself (waiting for a
    /// concurrency slot included). Must not be zero.
    pub call_timeout: Duration,
    /// Most calls in flight at once; more wait for a slot. At least 1.
    pub max_concurrency: usize,
    /// Connect in the background instead of in [`Upstream::connect`].
    pub lazy: bool,
}

impl UpstreamConfig {
    /// A configuration with the defaults: [`DEFAULT_CALL_TIMEOUT`],
    /// [`DEFAULT_MAX_CONCURRENCY`], not lazy.
    ///
    /// ```
    /// use toolexec_mcp::upstream::{UpstreamConfig, UpstreamTransport};
    /// let config = UpstreamConfig::new("remote", UpstreamTransport::Http {
    ///     url: "http://127.0.0.1:3001/mcp".into(),
    ///     headers: Default::default(),
    ///     bearer_token: Some(toolexec::Secret::new("s3cr3t")),
    /// });
    /// assert!(!format!("{config:?}").contains("s3cr3t"));
    /// ```
    pub fn new(name: impl Into<String>, transport: UpstreamTransport) -> Self {
        UpstreamConfig {
            name: name.into(),
            transport,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            lazy: false,
        }
    }
}

/// The transport to an upstream server.
#[derive(Debug, Clone)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout; its stderr goes to
    /// `tracing`. Its environment starts empty: the variables of this process
    /// named in [`INHERITED_ENV`] or `inherit_env` are copied, then `env` is
    /// set, so this process's other variables (tokens, keys, other servers'
    /// secrets) never reach it.
    Stdio {
        /// The program to run (looked up on this process's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it.
        env: BTreeMap<String, Secret>,
        /// More variables to copy from this process's environment when set,
        /// besides [`INHERITED_ENV`]: names, or patterns with `*`
        /// (`"AWS_*"`).
        inherit_env: Vec<String>,
        /// Working directory (default: this process's).
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint (`http://` only: this build has no TLS).
    Http {
        /// The MCP endpoint URL, such as `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Extra headers sent with every request.
        headers: BTreeMap<String, Secret>,
        /// Sent as `Authorization: Bearer <token>`.
        bearer_token: Option<Secret>,
    },
}

/// Where an upstream connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamStatus {
    /// The first connection attempt is under way.
    Connecting,
    /// Connected; `tools` of the server's tools are in the catalog.
    Connected {
        /// Number of imported tools.
        tools: usize,
    },
    /// Disconnected; the next attempt follows after a backoff.
    Restarting {
        /// Failed attempts in a row (1 for the first restart).
        attempt: u32,
        /// Why the last session ended or the last attempt failed (one line).
        last_error: String,
    },
    /// Given up: an error retrying cannot fix (authorization refused, no
    /// common protocol version), or shut down.
    Failed {
        /// Why (one line).
        reason: String,
    },
}

impl UpstreamStatus {
    /// One line for `availability()` and logs.
    fn unavailable_reason(&self) -> Option<String> {
        match self {
            UpstreamStatus::Connected { .. } => None,
            UpstreamStatus::Connecting => Some("connecting to the MCP server".to_owned()),
            UpstreamStatus::Restarting {
                attempt,
                last_error,
            } => Some(format!(
                "disconnected ({last_error}); reconnecting, attempt {attempt}"
            )),
            UpstreamStatus::Failed { reason } => Some(format!("failed: {reason}")),
        }
    }
}

/// A connection to one upstream MCP server whose tools are in a catalog.
///
/// Dropping it, or [`shutdown`](Self::shutdown), unregisters its tools and
/// stops the child process or closes the HTTP session (`shutdown` waits for
/// that; drop finishes it in the background).
#[derive(Debug)]
pub struct Upstream {
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Upstream {
    /// Connects to the server and imports its tools into `catalog`.
    ///
    /// Not lazy: returns once the server is connected and its tools are in
    /// the catalog, or fails with `backend_unavailable` if the first attempt
    /// fails (nothing is retried then).
    ///
    /// Lazy ([`UpstreamConfig::lazy`]): validates the configuration and
    /// returns at once. The first connection is attempted in the background;
    /// until it succeeds none of the server's tools are in the catalog (they
    /// appear when it connects), [`status`](Self::status) is `Connecting`, then
    /// `Restarting` after failed attempts, which are retried with the restart
    /// backoff.
    ///
    /// Either way, configuration errors (invalid name, `https://` URL, header
    /// that is not valid HTTP, zero timeout or concurrency) fail at once.
    /// Needs a Tokio runtime.
    pub async fn connect(config: UpstreamConfig, catalog: Arc<Catalog>) -> Result<Upstream, Error> {
        toolexec::ToolId::new(config.name.clone(), "x", None).map_err(|_| {
            Error::invalid_request(
                "name",
                format!(
                    "{:?} is not a valid namespace (A-Z a-z 0-9 _ - ., at most 128 bytes)",
                    config.name
                ),
            )
        })?;
        if config.call_timeout.is_zero() {
            return Err(Error::invalid_request("call_timeout", "must not be zero"));
        }
        if config.max_concurrency == 0 {
            return Err(Error::invalid_request(
                "max_concurrency",
                "must be at least 1",
            ));
        }
        let endpoint = Endpoint::from_config(&config.name, &config.transport)?;
        let (reinit_tx, reinit_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            name: config.name.as_str().into(),
            endpoint,
            call_timeout: config.call_timeout,
            max_concurrency: config.max_concurrency,
            catalog,
            router: Arc::new(Router::default()),
            slots: Semaphore::new(config.max_concurrency),
            conn: watch::Sender::new(Conn {
                generation: 0,
                status: UpstreamStatus::Connecting,
                peer: None,
                pid: None,
                reinitializing: false,
            }),
            tools: Mutex::new(ToolSet::default()),
            shutdown: CancellationToken::new(),
            reinit: reinit_tx,
        });
        let (first_tx, first_rx) = oneshot::channel();
        let first = (!config.lazy).then_some(first_tx);
        let task = tokio::spawn(supervisor::supervise(shared.clone(), reinit_rx, first));
        let upstream = Upstream {
            shared,
            task: Some(task),
        };
        if !config.lazy {
            match first_rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    upstream.shutdown().await;
                    return Err(e);
                }
                Err(_) => {
                    let name = upstream.shared.name.to_string();
                    upstream.shutdown().await;
                    return Err(Error::backend_unavailable(
                        name,
                        "the connection task ended before connecting",
                    ));
                }
            }
        }
        Ok(upstream)
    }

    /// The server's name (the namespace of its tools).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Where the connection stands.
    pub fn status(&self) -> UpstreamStatus {
        self.shared.conn.borrow().status.clone()
    }

    /// The ids of the tools imported from this server, sorted.
    pub fn tool_ids(&self) -> Vec<String> {
        self.shared.tools.lock().tools.keys().cloned().collect()
    }

    /// Waits until the server is connected (returns `true`) or `timeout`
    /// passes (`false`). Useful after a lazy connect or a restart.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.conn.subscribe();
        tokio::time::timeout(
            timeout,
            rx.wait_for(|c| matches!(c.status, UpstreamStatus::Connected { .. })),
        )
        .await
        .is_ok_and(|r| r.is_ok())
    }

    /// The pid of the current child process (stdio, while connected). For
    /// tests that kill the server.
    #[doc(hidden)]
    pub fn pid(&self) -> Option<u32> {
        self.shared.conn.borrow().pid
    }

    /// Unregisters the tools and stops the child process or closes the HTTP
    /// session, waiting for that to finish.
    pub async fn shutdown(mut self) {
        self.shared.stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.shared.stop();
    }
}

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
    tools: BTreeMap<String, (Tool, String)>,
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
    fn availability(&self) -> Availability {
        match self.conn.borrow().status.unavailable_reason() {
            None => Availability::Available,
            Some(reason) => Availability::Unavailable { reason },
        }
    }

    /// Stops everything: no more registrations, tools unregistered, the
    /// supervisor told to close the session.
    fn stop(&self) {
        self.shutdown.cancel();
        let mut set = self.tools.lock();
        set.closed = true;
        for id in std::mem::take(&mut set.tools).into_keys() {
            let _ = self.catalog.unregister(&id);
        }
    }

    /// Imports a listing into the catalog by difference. Returns the number
    /// of tools imported.
    fn sync_tools(self: &Arc<Self>, raw: Vec<Map<String, Value>>) -> usize {
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
