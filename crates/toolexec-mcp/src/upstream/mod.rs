//! Upstream MCP servers as toolexec backends.
//!
//! [`Upstream::connect`] connects to one MCP server, over **stdio** (a spawned
//! child process), **streamable HTTP**, or the **HTTP+SSE** transport of
//! revision 2024-11-05 ([`UpstreamTransport::Sse`], for servers that predate
//! streamable HTTP: one `GET` event stream, messages posted to the URL its
//! `endpoint` event names, which must keep the stream's origin; the stream
//! ending ends the session, which is reopened like a crashed stdio server's),
//! and imports its tools into a
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
//!   error's `code` and `data` as data; a server that answers with a task or
//!   an input-required result (the 2026-07-28 multi-round-trip form) fails
//!   the same way, as toolexec polls neither.
//!
//! # Requests to the client
//!
//! [`UpstreamConfig::relay`] ([`ClientRelay`]; `toolexec serve` sets
//! [`ClientRelay::GATEWAY`] unless `[[servers]] relay` says otherwise)
//! declares sampling (with tools), elicitation (form and URL) and roots to
//! the server, as far as it names them, and relays the server's
//! `sampling/createMessage`, `elicitation/create` and `roots/list` to the
//! client of the `tools/call` they belong to: the
//! [`ClientLink`](toolexec::ClientLink) on the call's
//! [`Caller`](toolexec::telemetry::Caller), which the gateway sets for each
//! MCP request. The client's answer, or its JSON-RPC error, goes back as it
//! is.
//!
//! - **Which call.** Over streamable HTTP a server sends the request on the
//!   response stream of the call it belongs to, which names the call.
//!   Otherwise (stdio, the standalone HTTP stream, HTTP+SSE) nothing does:
//!   the request goes to the calls in flight only when every call in flight
//!   on that server, and every one that ended there within its
//!   `call_timeout`, was made for one principal; else it is refused
//!   (`-32601`, saying why), so that one client is never asked, or shown a
//!   log line, on another's behalf. This is decided as the transport reads
//!   the request, while its call is certainly still recorded.
//! - **What the client declared.** A client that did not declare the
//!   capability (or URL-mode elicitation, or sampling with tools) is not
//!   asked: `-32601` naming the method.
//! - **What it is told.** Each relayed request carries `_meta`
//!   [`SERVER_META_KEY`] naming the server, so a client can tell the servers
//!   behind the gateway apart. A sampling request's `includeContext` is sent
//!   as `none`: through the gateway, "this server" would be every server.
//! - **How long, how many.** A relayed request waits until the client
//!   answers, the server cancels it, the call it belongs to ends, or the
//!   server's [`call_timeout`](UpstreamConfig::call_timeout) passes
//!   (`-32603` saying which); an abandoned request is cancelled at the
//!   client. At most 8 wait at once per call.
//! - **Log messages** (`notifications/message`, with
//!   [`ClientRelay::logging`]) go to the client of the calls in flight
//!   under the same rule, in order, at or above the level it set (`info`
//!   until it sets one; a 2026-07-28 client names one with each request,
//!   and gets none when it names none), and before the call's answer. A
//!   2026-07-28 server, which logs only for requests that name a level, is
//!   told the client's
//!   ([`ClientRequests::log_level`](toolexec::ClientRequests::log_level)).
//!   `notifications/elicitation/complete` goes the same way, to a client
//!   that declared URL mode. Progress is relayed by its token, as before.
//! - **Roots** are not in [`ClientRelay::GATEWAY`]: they describe a whole
//!   session, one upstream session serves every client of a gateway, and a
//!   server that keeps the roots one client answered would apply them to
//!   everyone's calls. Name them in `relay` for a gateway with one user.
//! - Without a relay (the default, as for `toolexec run`, where no client
//!   could answer) nothing is declared, and a request is refused with
//!   `-32601`.

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
//! # TLS
//!
//! `https://` URLs use rustls with graviola's pure-Rust crypto provider
//! (never a process-wide default). The server's certificate is verified
//! against the system's roots, or [`TlsOptions::ca_file`] alone; a client
//! certificate ([`TlsOptions::client_cert`], `client_key`) is presented when
//! the server asks. A certificate that is not trusted, expired or for another
//! host, or a server refusing the client's certificate, fails the connection
//! with `backend_unavailable` saying which; it is not retried. reqwest is
//! built with rustls but no crypto provider of its own (feature
//! `rustls-no-provider`), so any other reqwest 0.13 client in the same
//! program (rmcp's default one included) needs a TLS configuration of its
//! own or a process-wide provider, such as
//! `rustls_graviola::default_provider().install_default()`.
//!
//! # Secrets
//!
//! A stdio server gets a cleared environment (see
//! [`UpstreamTransport::Stdio`]). Environment values, header values and the
//! bearer token are [`Secret`](toolexec::Secret)s: they never appear in
//! logs, errors or `Debug` output (header values are marked sensitive for
//! the HTTP stack as well). The
//! server's own stderr is forwarded to `tracing` at debug level (target
//! `toolexec_mcp::upstream::stderr`) unfiltered.

mod call;
mod child;
mod client_requests;
mod config;
mod convert;
mod env;
mod held;
mod http_client;
mod import;
mod input;
mod links;
pub mod oauth;
mod origin;
mod passthrough;
mod revision;
mod routing;
mod session;
mod shared;
mod sse;
mod supervisor;
mod watched;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use toolexec::{Catalog, Error};

pub use self::client_requests::SERVER_META_KEY;
pub use self::config::{
    ClientRelay, DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_CONCURRENCY, TlsOptions, UpstreamConfig,
    UpstreamTransport,
};
pub use self::env::INHERITED_ENV;
pub use self::passthrough::{RelayError, UpstreamNotice};
pub use self::supervisor::{CONNECT_TIMEOUT, HEALTHY_AFTER, INITIAL_BACKOFF, MAX_BACKOFF};

use self::routing::Router;
use self::session::Endpoint;
use self::shared::{Conn, Shared, ToolSet};

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
    task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
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
    /// Either way, configuration errors (invalid name, URL that is not
    /// `http://` or `https://`, header that is not valid HTTP, TLS file that
    /// cannot be read or parsed, zero timeout or concurrency) fail at once.
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
            relay: config.relay,
            max_concurrency: config.max_concurrency,
            catalog,
            router: Arc::new(Router::new(config.relay, config.call_timeout)),
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
            era: Default::default(),
            held: Default::default(),
        });
        let (first_tx, first_rx) = oneshot::channel();
        let first = (!config.lazy).then_some(first_tx);
        let task = tokio::spawn(supervisor::supervise(shared.clone(), reinit_rx, first));
        let upstream = Upstream {
            shared,
            task: parking_lot::Mutex::new(Some(task)),
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

    /// Sessions started after the first (process restarts, re-initialized
    /// HTTP sessions), for metrics.
    pub fn restarts(&self) -> u64 {
        self.shared.conn.borrow().generation.saturating_sub(1)
    }

    /// Ends the call held for a 2026-07-28 client under `state` (the
    /// server's state as the gateway opened it from a `requestState`): the
    /// client will not answer. Whether a call was held under it.
    #[cfg(feature = "gateway")]
    pub(crate) fn abandon_held(&self, state: &str) -> bool {
        self.shared.abandon_held(state)
    }

    /// The call held under `state` for its client's answers: how long they
    /// may still come (until the server's `call_timeout` ends the call), and
    /// a future that resolves if the call ends first. `None` when no call
    /// waits under it.
    #[cfg(feature = "gateway")]
    pub(crate) fn held_wait(
        &self,
        state: &str,
    ) -> Option<(Duration, toolexec::BoxFuture<'static, ()>)> {
        self.shared.held_wait(state)
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
    /// session, waiting for that to finish. Also through a shared handle
    /// (the gateway holds one); later calls return at once.
    pub async fn shutdown(&self) {
        self.shared.stop();
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.shared.stop();
    }
}
