//! The MCP gateway: an MCP server (stdio or streamable HTTP) over a toolexec
//! [`Exec`], built on the official Rust SDK (`rmcp`).
//!
//! # What clients see
//!
//! - **Meta-tools** ([`Expose::Meta`], [`Expose::Both`]) for progressive
//!   discovery: `search_tools`, `list_namespaces`, `describe_tool`,
//!   `run_tool` and `run_chain`, each with an input and an output schema,
//!   and `execute_code` for code mode: one JavaScript script that calls many
//!   tools ([`toolexec_code`], limits from [`CodeModeOptions`]).
//!   `describe_tool` at detail `schema`/`full` adds a `typescript`
//!   declaration of the tool.
//! - **Direct tools** ([`Expose::All`], [`Expose::Both`]): every catalog tool
//!   under an MCP-safe name, `ns:name[:version]` → `ns__name[__version]`
//!   (see [`id_to_mcp_name`]), with its own schemas. When the catalog changes
//!   connected clients get `notifications/tools/list_changed` (the `tools`
//!   capability declares `listChanged`).
//!
//! # Results
//!
//! `structuredContent` is always a JSON object: a tool whose output schema is
//! an object schema returns its value as-is; other values are wrapped as
//! `{"result": value}` (and the published output schema is wrapped the same
//! way). A text block with the JSON follows for clients that ignore
//! structured content (or the tool's own content blocks, when it returned
//! some).
//!
//! Tool and pipeline failures are results with `isError: true`: the text
//! starts with the stable error code (`validation_input: ...`) and
//! `structuredContent` is `{"error": {code, message, details}}`. A chain with
//! a failed step is an error result too, carrying `{"error", "chain"}`.
//! `execute_code` returns the whole [`CodeOutcome`](toolexec_code::CodeOutcome)
//! once, as `structuredContent`, with a short text summary (at most 4 KiB);
//! any status but `ok` makes it an error result
//! whose text starts with the status kind (`syntax_error: ...`). Its size is
//! bounded by the script's output limit (console output plus result) and
//! the tool-call log's budget
//! ([`ToolCallLog::BUDGET_BYTES`](toolexec_runtime::ToolCallLog::BUDGET_BYTES):
//! records of sizes, digests and previews, never the calls' arguments or
//! results).
//! Protocol errors are JSON-RPC errors (`-32602`): an unknown tool name, or
//! meta-tool arguments that do not fit the meta-tool's input schema.
//!
//! # Progress, chunks and cancellation
//!
//! When a `tools/call` carries a `progressToken`, the run is streamed
//! ([`Exec::run_stream`]) and the tool's progress is relayed as
//! `notifications/progress` (only strictly increasing values, as MCP
//! requires; for chains the value is `step + fraction` out of the number of
//! steps, and each finished step counts one). Streamed chunks are sent as
//! `notifications/message` log messages at level `info`, logger `toolexec`,
//! data `{"event": "chunk", "progressToken", "step", "data"}`, unless the
//! client raised the level with `logging/setLevel`. A client's
//! `notifications/cancelled` cancels the run (the tool sees
//! [`ToolContext::is_cancelled`](toolexec::ToolContext::is_cancelled));
//! for `execute_code` it stops the script and cancels its tool calls.
//!
//! # Limits
//!
//! Tool runs (`run_tool`, `run_chain` and direct tools) share one bound over
//! every client ([`GatewayOptions::runs`], [`RunLimits`]): past
//! `max_concurrent` runs, calls wait in line; past `max_queued` waiting, a
//! call gets an `isError` result with code `backend_unavailable` and
//! `details.reason = "at_capacity"`. Over HTTP, [`HttpLimits`] bounds
//! connections, the time to send headers and bodies, and sessions.
//!
//! # Protocol versions
//!
//! The gateway speaks the session-based MCP revisions 2024-11-05 through
//! 2025-11-25 (with the `initialize` handshake); list-changed notifications
//! need a session.

mod code;
mod http;
mod limits;
mod listener;
mod meta;
mod names;
mod result;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, MetaObject, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool as McpTool,
    ToolAnnotations as McpAnnotations, ToolsCapability,
};
// MCP logging is deprecated by SEP-2577 (2026-07-28) but current in the
// 2025-11-25 revision the gateway speaks; chunks are relayed as log messages.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use toolexec::{
    ChainStep, DetailLevel, ErrorBody, ErrorCode, Exec, ListRequest, RegisteredTool, RunOptions,
    RunResult, StreamEvent, StreamRequest, ToolMatch,
};
use toolexec_code::{CodeLimits, CodeRequest, CodeRunner};
use toolexec_runtime::Runtimes;

pub use code::CodeModeOptions;
pub use http::{DEFAULT_ALLOWED_ORIGINS, HttpAuth, HttpOptions, MCP_PATH, bind_http, serve_http};
pub use limits::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_QUEUED_RUNS, DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_TIMEOUT, HttpLimits, RunLimits,
};
pub use meta::{DEFAULT_INSTRUCTIONS, META_TOOLS};
pub use names::{id_to_mcp_name, mcp_name_to_id};
pub use result::RESULT_KEY;

use result::Shape;

/// Largest page of `tools/list` (meta-tools come on the first page).
pub const TOOLS_PAGE: usize = 1000;

/// `_meta` key carrying a directly published tool's toolexec id.
pub const META_ID_KEY: &str = "toolexec/id";

/// Logger name of relayed chunks.
pub const CHUNK_LOGGER: &str = "toolexec";

/// What the gateway publishes in `tools/list`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Expose {
    /// Only the meta-tools (`search_tools`, `describe_tool`, `run_tool`, ...).
    #[default]
    Meta,
    /// Only the catalog tools, each under its MCP name (`ns__name`).
    All,
    /// The meta-tools and every catalog tool.
    Both,
}

impl Expose {
    /// True when the meta-tools are published.
    pub fn meta(self) -> bool {
        matches!(self, Expose::Meta | Expose::Both)
    }

    /// True when catalog tools are published directly.
    pub fn direct(self) -> bool {
        matches!(self, Expose::All | Expose::Both)
    }

    /// The lowercase name (`meta`, `all`, `both`).
    pub fn as_str(self) -> &'static str {
        match self {
            Expose::Meta => "meta",
            Expose::All => "all",
            Expose::Both => "both",
        }
    }
}

impl std::fmt::Display for Expose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Expose {
    type Err = toolexec::Error;

    /// Parses `meta`, `all` or `both`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "meta" => Ok(Expose::Meta),
            "all" => Ok(Expose::All),
            "both" => Ok(Expose::Both),
            _ => Err(toolexec::Error::invalid_request(
                "expose",
                format!("expected meta, all or both, got {s:?}"),
            )),
        }
    }
}

/// How the gateway presents itself.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// What `tools/list` publishes.
    pub expose: Expose,
    /// `serverInfo.name` in the `initialize` result.
    pub server_name: String,
    /// `instructions` in the `initialize` result. `None` uses
    /// [`DEFAULT_INSTRUCTIONS`] when the meta-tools are published (none
    /// otherwise); `Some("")` sends none.
    pub instructions: Option<String>,
    /// How `execute_code` runs scripts: worker pool, default and maximum
    /// limits, profile.
    pub code: CodeModeOptions,
    /// The sandbox runtimes `execute_code` uses when
    /// [`CodeModeOptions::profile`] is `hardened`. `None`: no runtime, so
    /// hardened scripts fail `backend_unavailable` (never silently in
    /// process).
    pub runtimes: Option<Arc<Runtimes>>,
    /// How many tool runs (`run_tool`, `run_chain`, direct tools) may be in
    /// flight and waiting, over all clients.
    pub runs: RunLimits,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            expose: Expose::Meta,
            server_name: "toolexec".into(),
            instructions: None,
            code: CodeModeOptions::default(),
            runtimes: None,
            runs: RunLimits::default(),
        }
    }
}

/// An MCP server over an [`Exec`]. Implements [`rmcp::ServerHandler`], so it
/// can be served over any rmcp transport (`gateway.serve(transport)`), or
/// with [`serve_stdio`] and [`serve_http`].
///
/// Cheap to clone. One value serves one connection at a time as far as
/// per-connection state goes (the `logging/setLevel` level); [`serve_http`]
/// gives each HTTP session its own.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    session: Arc<Session>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

struct Shared {
    exec: Exec,
    options: GatewayOptions,
    /// Runs `execute_code` scripts where the code profile says, at most
    /// `code.max_concurrent` at once over every connection.
    code: CodeRunner,
    /// Bounds tool runs over every connection.
    runs: limits::RunSlots,
    /// Initialized clients to notify of catalog changes.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Catalog changes since the gateway was created, until the watcher
    /// task takes the receiver.
    changes: Mutex<Option<broadcast::Receiver<toolexec::CatalogEvent>>>,
    watcher_started: AtomicBool,
    /// Stops the watcher when the last clone of the gateway goes.
    stop: CancellationToken,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Per-connection state.
struct Session {
    /// Lowest log level sent, as an index into [`LEVELS`].
    min_level: AtomicU8,
}

#[allow(deprecated)]
impl Session {
    fn new() -> Arc<Self> {
        Arc::new(Session {
            min_level: AtomicU8::new(level_index(LoggingLevel::Info)),
        })
    }
}

#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
const LEVELS: [LoggingLevel; 8] = [
    LoggingLevel::Debug,
    LoggingLevel::Info,
    LoggingLevel::Notice,
    LoggingLevel::Warning,
    LoggingLevel::Error,
    LoggingLevel::Critical,
    LoggingLevel::Alert,
    LoggingLevel::Emergency,
];

#[allow(deprecated)]
fn level_index(level: LoggingLevel) -> u8 {
    LEVELS.iter().position(|l| *l == level).unwrap_or(1) as u8
}

impl Gateway {
    /// A gateway over `exec`.
    pub fn new(exec: Exec, options: GatewayOptions) -> Self {
        let changes = options.expose.direct().then(|| exec.catalog().subscribe());
        let code = CodeRunner::new(
            exec.clone(),
            options.code.profile,
            options.runtimes.clone(),
            options.code.max_concurrent,
        );
        let runs = limits::RunSlots::new(options.runs);
        Gateway {
            shared: Arc::new(Shared {
                exec,
                options,
                code,
                runs,
                peers: Mutex::new(Vec::new()),
                changes: Mutex::new(changes),
                watcher_started: AtomicBool::new(false),
                stop: CancellationToken::new(),
            }),
            session: Session::new(),
        }
    }

    /// The executor.
    pub fn exec(&self) -> &Exec {
        &self.shared.exec
    }

    /// The options.
    pub fn options(&self) -> &GatewayOptions {
        &self.shared.options
    }

    /// A copy sharing the executor and notifications but with fresh
    /// per-connection state.
    pub fn for_new_connection(&self) -> Self {
        Gateway {
            shared: self.shared.clone(),
            session: Session::new(),
        }
    }

    /// The MCP tools `tools/list` shows for this page.
    fn list_page(&self, cursor: Option<String>) -> Result<ListToolsResult, McpError> {
        let expose = self.shared.options.expose;
        let mut tools = Vec::new();
        if cursor.is_none() && expose.meta() {
            tools.extend(meta_tools(&self.shared.options.code));
        }
        let mut next_cursor = None;
        if expose.direct() {
            let page = self
                .exec()
                .catalog()
                .list(&ListRequest {
                    namespace: None,
                    cursor,
                    limit: Some(TOOLS_PAGE),
                })
                .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
            let catalog = self.exec().catalog();
            tools.extend(
                page.tools
                    .iter()
                    // An unversioned entry shadowed by versions resolves to
                    // the newest version: it cannot be called, so skip it.
                    .filter(|t| {
                        t.tool().id.version().is_some()
                            || catalog
                                .get(&t.tool().id.to_string())
                                .is_ok_and(|e| Arc::ptr_eq(&e, t))
                    })
                    .filter_map(|t| direct_tool(t)),
            );
            next_cursor = page.next_cursor;
        } else if cursor.is_some() {
            return Err(McpError::invalid_params(
                "cursor: not a cursor returned by a previous page",
                None,
            ));
        }
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next_cursor;
        Ok(result)
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let expose = self.shared.options.expose;
        let name = request.name.as_ref();
        let args = request.arguments;
        if expose.meta() && META_TOOLS.contains(&name) {
            return self.call_meta(name, args, context).await;
        }
        if expose.direct()
            && let Some(id) = mcp_name_to_id(name)
            && self.exec().catalog().get(&id).is_ok()
        {
            let args = args.map(Value::Object).unwrap_or(Value::Null);
            return Ok(self.run_tool(id, args, context).await);
        }
        Err(McpError::invalid_params(
            format!("unknown tool: {name:?}"),
            Some(json!({"tool": name})),
        ))
    }

    async fn call_meta(
        &self,
        name: &str,
        args: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let bad = |m: String| McpError::invalid_params(m, None);
        match name {
            meta::SEARCH_TOOLS => {
                let a: meta::SearchArgs = meta::parse(name, args).map_err(bad)?;
                let limit = a.limit.unwrap_or(meta::DEFAULT_SEARCH_LIMIT);
                if !(1..=meta::MAX_SEARCH_LIMIT).contains(&limit) {
                    return Err(bad(format!(
                        "invalid arguments for {name}: limit must be between 1 and {}",
                        meta::MAX_SEARCH_LIMIT
                    )));
                }
                let results: Vec<ToolMatch> = self
                    .exec()
                    .catalog()
                    .search(&a.query, limit, a.namespace.as_deref())
                    .iter()
                    .map(ToolMatch::from)
                    .collect();
                Ok(result::success(json!({ "results": results }), &[]))
            }
            meta::LIST_NAMESPACES => {
                let _: meta::NoArgs = meta::parse(name, args).map_err(bad)?;
                let namespaces = self.exec().list_namespaces();
                Ok(result::success(json!({ "namespaces": namespaces }), &[]))
            }
            meta::DESCRIBE_TOOL => {
                let a: meta::DescribeArgs = meta::parse(name, args).map_err(bad)?;
                Ok(match self.exec().describe_tool(&a.tool_id, a.detail) {
                    Ok(d) => {
                        let mut v = serde_json::to_value(d).unwrap_or_default();
                        if a.detail != DetailLevel::Summary
                            && let (Ok(entry), Value::Object(m)) =
                                (self.exec().catalog().get(&a.tool_id), &mut v)
                        {
                            let ts = toolexec_code::typescript_declaration(entry.tool());
                            m.insert("typescript".into(), Value::String(ts));
                        }
                        result::success(v, &[])
                    }
                    Err(e) => result::error(&e.to_body()),
                })
            }
            meta::RUN_TOOL => {
                let a: meta::RunArgs = meta::parse(name, args).map_err(bad)?;
                Ok(self
                    .run_tool(a.tool_id, a.args.unwrap_or(Value::Null), context)
                    .await)
            }
            meta::RUN_CHAIN => {
                let a: meta::ChainArgs = meta::parse(name, args).map_err(bad)?;
                Ok(self.run_chain(a.steps, context).await)
            }
            meta::EXECUTE_CODE => {
                let a: code::CodeArgs = meta::parse(name, args).map_err(bad)?;
                let limits = self.shared.options.code.limits(&a).map_err(bad)?;
                Ok(self.execute_code(a.code, limits, context).await)
            }
            _ => Err(McpError::invalid_params(
                format!("unknown tool: {name:?}"),
                None,
            )),
        }
    }

    /// A slot for one tool run ([`GatewayOptions::runs`]), or the result to
    /// answer with: `backend_unavailable` when the line is full, `cancelled`
    /// when the client cancels while waiting.
    async fn run_permit(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<limits::RunPermit, CallToolResult> {
        tokio::select! {
            permit = self.shared.runs.acquire() => permit.map_err(|body| result::error(&body)),
            _ = context.ct.cancelled() => Err(result::error(&ErrorBody {
                code: ErrorCode::Cancelled,
                message: "cancelled: the client cancelled the request while it waited for a run slot"
                    .into(),
                details: None,
            })),
        }
    }

    async fn run_tool(
        &self,
        id: String,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let _permit = match self.run_permit(context).await {
            Ok(permit) => permit,
            Err(refused) => return refused,
        };
        let shape = self
            .exec()
            .catalog()
            .get(&id)
            .map(|e| Shape::of(e.tool().output_schema.as_ref()))
            .unwrap_or(Shape::Undeclared);
        let opts = run_options(context);
        let outcome = match context.meta.get_progress_token() {
            Some(token) => {
                let relay = Relay::new(self, token, context, None);
                match relay.run(StreamRequest::Tool { id, args }, opts).await {
                    Ok(RunResult::Tool(out)) => Ok(out),
                    Ok(RunResult::Chain(c)) => return result::chain(&c),
                    Err(body) => Err(body),
                }
            }
            None => self
                .exec()
                .run_tool_with(&id, args, &opts)
                .await
                .map_err(|e| e.to_body()),
        };
        match outcome {
            Ok(out) => result::tool_output(shape, out),
            Err(body) => result::error(&body),
        }
    }

    async fn run_chain(
        &self,
        steps: Vec<ChainStep>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let _permit = match self.run_permit(context).await {
            Ok(permit) => permit,
            Err(refused) => return refused,
        };
        let opts = run_options(context);
        let outcome = match context.meta.get_progress_token() {
            Some(token) => {
                let ids = steps.iter().map(|s| s.tool_id.clone()).collect();
                let relay = Relay::new(self, token, context, Some(ids));
                match relay.run(StreamRequest::Chain(steps), opts).await {
                    Ok(RunResult::Chain(c)) => Ok(c),
                    Ok(RunResult::Tool(out)) => {
                        return result::tool_output(Shape::Undeclared, out);
                    }
                    Err(body) => Err(body),
                }
            }
            None => self
                .exec()
                .run_chain_with(&steps, &opts)
                .await
                .map_err(|e| e.to_body()),
        };
        match outcome {
            Ok(c) => result::chain(&c),
            Err(body) => result::error(&body),
        }
    }

    /// Runs a script through the gateway's [`CodeRunner`]. The client's
    /// cancellation stops the script at once and cancels its tool calls in
    /// flight; the answer is then `cancelled`.
    async fn execute_code(
        &self,
        code: String,
        limits: CodeLimits,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let request = CodeRequest { code, limits };
        let outcome = self.shared.code.run(request, &context.ct).await;
        if context.ct.is_cancelled() {
            return result::error(&ErrorBody {
                code: ErrorCode::Cancelled,
                message: "cancelled: the client cancelled the request; the script was stopped"
                    .into(),
                details: None,
            });
        }
        match outcome {
            Ok(outcome) => code::outcome_result(&outcome),
            Err(body) => result::error(&body),
        }
    }

    /// Registers an initialized client for list-changed notifications.
    fn register_peer(&self, peer: Peer<RoleServer>) {
        if !self.shared.options.expose.direct() {
            return;
        }
        {
            let mut peers = self.shared.peers.lock();
            peers.retain(|p| !p.is_transport_closed());
            peers.push(peer);
        }
        self.start_watcher();
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

    #[allow(deprecated)]
    fn chunk_logging_enabled(&self) -> bool {
        self.session.min_level.load(Ordering::Relaxed) <= level_index(LoggingLevel::Info)
    }
}

fn run_options(context: &RequestContext<RoleServer>) -> RunOptions {
    RunOptions {
        cancel: Some(context.ct.child_token()),
        ..RunOptions::default()
    }
}

/// The meta-tools as MCP tools.
fn meta_tools(code: &CodeModeOptions) -> Vec<McpTool> {
    meta::all(code)
        .into_iter()
        .map(|m| {
            let annotations = McpAnnotations::from_raw(
                Some(m.title.to_owned()),
                Some(m.read_only),
                Some(false),
                Some(m.read_only),
                Some(!m.read_only),
            );
            McpTool::new(m.name, m.description, Arc::new(object(m.input_schema)))
                .with_title(m.title)
                .with_raw_output_schema(Arc::new(object(m.output_schema)))
                .with_annotations(annotations)
        })
        .collect()
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// A catalog tool as a directly published MCP tool, or `None` when its id
/// has no MCP name.
fn direct_tool(entry: &RegisteredTool) -> Option<McpTool> {
    let t = entry.tool();
    let id = t.id.to_string();
    let Some(name) = id_to_mcp_name(&id) else {
        tracing::debug!(%id, "tool id has no MCP name; not published directly");
        return None;
    };
    let description = if t.description.trim().is_empty() {
        t.summary().to_owned()
    } else {
        t.description.clone()
    };
    let mut tool = McpTool::new_with_raw(
        name,
        Some(description.into()),
        Arc::new(result::mcp_input_schema(&t.input_schema)),
    );
    if let Some(title) = t
        .title
        .clone()
        .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone()))
    {
        tool = tool.with_title(title);
    }
    if let Some(schema) = result::mcp_output_schema(t.output_schema.as_ref()) {
        tool = tool.with_raw_output_schema(Arc::new(schema));
    }
    if let Some(a) = &t.annotations {
        tool = tool.with_annotations(McpAnnotations::from_raw(
            a.title.clone(),
            a.read_only_hint,
            a.destructive_hint,
            a.idempotent_hint,
            a.open_world_hint,
        ));
    }
    let mut meta = MetaObject::new();
    meta.0.insert(META_ID_KEY.into(), json!(id));
    Some(tool.with_meta(meta))
}

/// Relays a streamed run's events to the client.
struct Relay<'a> {
    gateway: &'a Gateway,
    token: ProgressToken,
    context: &'a RequestContext<RoleServer>,
    /// The chain's tool ids, for chains.
    chain: Option<Vec<String>>,
    last: Option<f64>,
}

impl<'a> Relay<'a> {
    fn new(
        gateway: &'a Gateway,
        token: ProgressToken,
        context: &'a RequestContext<RoleServer>,
        chain: Option<Vec<String>>,
    ) -> Self {
        Relay {
            gateway,
            token,
            context,
            chain,
            last: None,
        }
    }

    async fn run(
        mut self,
        request: StreamRequest,
        opts: RunOptions,
    ) -> Result<RunResult, ErrorBody> {
        let mut stream = self.gateway.exec().run_stream(request, opts);
        while let Some(event) = stream.next_event().await {
            match event {
                StreamEvent::Progress {
                    step,
                    progress,
                    total,
                    message,
                } => self.progress(step, progress, total, message).await,
                StreamEvent::Chunk { step, data } => self.chunk(step, data).await,
                StreamEvent::Done { result } => return Ok(*result),
                StreamEvent::Error { error } => return Err(error),
            }
        }
        Err(ErrorBody {
            code: ErrorCode::ExecutionFailed,
            message: "execution_failed: the run ended without a result".into(),
            details: None,
        })
    }

    async fn progress(
        &mut self,
        step: Option<usize>,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) {
        let (value, total, message) = match (&self.chain, step) {
            (Some(ids), Some(i)) => {
                let n = ids.len() as f64;
                let tool = ids.get(i).map(String::as_str).unwrap_or("?");
                let step_done = total == Some(n)
                    && progress == (i + 1) as f64
                    && message
                        .as_deref()
                        .is_some_and(|m| m.starts_with(&format!("step {i} (")));
                if step_done {
                    (progress, Some(n), message)
                } else {
                    let fraction = match total {
                        Some(t) if t > 0.0 => (progress / t).clamp(0.0, 1.0),
                        _ if progress >= 0.0 => progress / (progress + 1.0),
                        _ => 0.0,
                    };
                    let message = message.map(|m| format!("step {i} ({tool}): {m}"));
                    (i as f64 + 0.99 * fraction, Some(n), message)
                }
            }
            _ => (progress, total, message),
        };
        if !value.is_finite() || self.last.is_some_and(|l| value <= l) {
            return;
        }
        self.last = Some(value);
        let mut param = ProgressNotificationParam::new(self.token.clone(), value);
        param.total = total;
        param.message = message;
        if let Err(e) = self.context.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "could not send progress");
        }
    }

    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    async fn chunk(&self, step: Option<usize>, data: Value) {
        if !self.gateway.chunk_logging_enabled() {
            return;
        }
        let data = json!({
            "event": "chunk",
            "progressToken": self.token,
            "step": step,
            "data": data,
        });
        let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, data)
            .with_logger(CHUNK_LOGGER);
        if let Err(e) = self.context.peer.notify_logging_message(param).await {
            tracing::debug!(error = %e, "could not send chunk");
        }
    }
}

#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        let options = &self.shared.options;
        let mut tools = ToolsCapability::default();
        tools.list_changed = Some(options.expose.direct());
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = Some(tools);
        capabilities.logging = Some(JsonObject::new());
        let mut config = ServerConfig::new(capabilities)
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            .with_server_info(
                Implementation::new(&options.server_name, env!("CARGO_PKG_VERSION"))
                    .with_title("toolexec MCP gateway"),
            );
        let instructions = match &options.instructions {
            Some(s) => (!s.is_empty()).then(|| s.clone()),
            None => options
                .expose
                .meta()
                .then(|| DEFAULT_INSTRUCTIONS.to_owned()),
        };
        if let Some(i) = instructions {
            config = config.with_instructions(i);
        }
        config
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.list_page(request.and_then(|r| r.cursor))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, &context)
            .await
            .map(CallToolResponse::from)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session
            .min_level
            .store(level_index(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.register_peer(context.peer);
    }
}

/// Serves `gateway` over stdin/stdout until stdin closes.
///
/// When both are pipes (how MCP clients launch servers) they are driven by
/// Tokio's non-blocking pipe reactor rather than the blocking thread pool,
/// which halves per-call latency (see BENCHMARKS.md); otherwise the blocking
/// handles are used. Needs a Tokio runtime with IO enabled.
pub async fn serve_stdio(gateway: Gateway) -> Result<(), toolexec::Error> {
    let unavailable = |m: String| toolexec::Error::backend_unavailable("mcp-gateway", m);
    let running = match gateway.serve(rmcp::transport::stdio_pipes()).await {
        Ok(r) => r,
        // stdin closed before a client said hello: nothing to serve.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(unavailable(format!("stdio handshake failed: {e}"))),
    };
    running
        .waiting()
        .await
        .map_err(|e| unavailable(format!("stdio server task failed: {e}")))?;
    Ok(())
}
