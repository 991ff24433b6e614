//! The MCP gateway: an MCP server (stdio or streamable HTTP) over a toolexec
//! [`Exec`], built on the official Rust SDK (`rmcp`).
//!
//! # What clients see
//!
//! - **Meta-tools** ([`Expose::Meta`], [`Expose::Both`]) for progressive
//!   discovery: `search_tools`, `list_namespaces`, `describe_tool`,
//!   `run_tool` and `run_chain`, each with an input and an output schema,
//!   and, with the feature `code` (on by default), `execute_code` for code
//!   mode: one JavaScript script that calls many tools ([`toolexec_code`],
//!   limits from [`CodeModeOptions`]); `describe_tool` at detail
//!   `schema`/`full` then adds a `typescript` declaration of the tool.
//! - **Direct tools** ([`Expose::All`], [`Expose::Both`]): every catalog tool
//!   under an MCP-safe name, `ns:name[:version]` → `ns__name[__version]`
//!   (see [`id_to_mcp_name`]), with its own schemas. When the catalog changes
//!   connected clients get `notifications/tools/list_changed` (the `tools`
//!   capability declares `listChanged`).
//! - **Upstream resources, prompts and completion**
//!   ([`Gateway::with_upstreams`], feature `upstream`): `resources/list`,
//!   `resources/templates/list`, `resources/read`, `resources/subscribe`,
//!   `prompts/list`, `prompts/get` and `completion/complete` reach the
//!   upstream server that owns the URI, template or prompt, and come back as
//!   it answered (its JSON-RPC errors too). Lists are merged in
//!   configuration order; prompts are named `server__name`; a URI two
//!   servers list is published by the later one as `toolexec://<server>/
//!   <percent-encoded URI>`. `notifications/resources/updated` reaches only
//!   the sessions subscribed, list changes every client.
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
//! # Callers, policy and quotas
//!
//! Every request runs for a [`Caller`](toolexec::telemetry::Caller): over
//! HTTP, the name of the token it carries ([`HttpAuth::Tokens`]) or the
//! subject, scopes and claims of an OAuth access token
//! ([`HttpAuth::OAuth`], [`ResourceServer`]); over stdio, the local user.
//! A session belongs to the principal that created it. The executor's
//! [`Policy`](toolexec::policy::Policy) and
//! [`Quotas`](toolexec::quota::Quotas) decide every call in its pipeline
//! (so chain steps and scripts' calls too); the gateway also filters
//! `tools/list`, `search_tools`, `list_namespaces`, prompts, resources and
//! templates by the policy, and refuses `resources/read`, `subscribe`,
//! `prompts/get` and completion with [`RPC_NOT_ALLOWED`].
//!
//! # Protocol versions
//!
//! The gateway speaks the session-based MCP revisions 2024-11-05 through
//! 2025-11-25 (with the `initialize` handshake); list-changed notifications
//! need a session.
//!
//! # Where things are
//!
//! [`GatewayOptions`] and [`Expose`] in `options`; the [`Gateway`] value and
//! its shared and per-connection state in `server` and `session`; the rmcp
//! [`ServerHandler`](rmcp::ServerHandler) in `handler`, which hands
//! `tools/list` to `list`, `tools/call` to `dispatch` (meta-tools, whose
//! definitions are in `meta`) and `run` (tool runs and chains, streamed
//! through the progress `relay`), and catalog changes to `notify`. `code` is
//! `execute_code` (feature `code`), `result` shapes MCP results, `names`
//! maps tool ids to MCP names, `limits` bounds runs and HTTP clients, and
//! `stdio`, `http` and `listener` are the transports.
//!
//! [`Exec`]: toolexec::Exec
//! [`Exec::run_stream`]: toolexec::Exec::run_stream

mod auth;
#[cfg(feature = "code")]
mod code;
mod dispatch;
mod downstream;
mod handler;
mod http;
mod limits;
mod list;
mod listener;
mod meta;
mod names;
mod notify;
#[cfg(feature = "oauth")]
mod oauth;
mod options;
#[cfg(feature = "upstream")]
mod passthrough;
mod relay;
mod result;
mod run;
mod server;
mod session;
mod stdio;
mod tasks;
mod trace;

pub use auth::{BEARER_TOKEN_NAME, HttpAuth, NamedToken};
#[cfg(feature = "code")]
pub use code::CodeModeOptions;
pub use http::{DEFAULT_ALLOWED_ORIGINS, HttpOptions, MCP_PATH, bind_http, serve_http};
pub use limits::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_QUEUED_RUNS, DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_TIMEOUT, HttpLimits, RunLimits,
};
pub use list::{META_ID_KEY, TOOLS_PAGE};
pub use meta::{DEFAULT_INSTRUCTIONS, META_TOOLS};
pub use names::{NameConflict, id_to_mcp_name, mcp_name_to_id};
#[cfg(feature = "oauth")]
pub use oauth::{OAuthOptions, PROTECTED_RESOURCE_PATH, Refusal, ResourceServer};
pub use options::{Expose, GatewayOptions};
#[cfg(feature = "upstream")]
pub use passthrough::RPC_NOT_ALLOWED;
pub use relay::CHUNK_LOGGER;
pub use result::RESULT_KEY;
pub use server::Gateway;
pub use stdio::serve_stdio;
pub use tasks::{CallAnswer, TaskJournal, TaskOptions};
