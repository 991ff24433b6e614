//! # toolexec-code
//!
//! Code mode for toolexec: an agent sends **one JavaScript script** that calls
//! many tools, instead of one model round trip per tool call. The script runs
//! in an embedded [QuickJS](https://github.com/quickjs-ng/quickjs) engine
//! (through `rquickjs`), in process, with no ambient authority: no file
//! system, network, environment, process access, timers, module loading or
//! host `eval`. The only way out of the sandbox is the `tools` object, and
//! every call through it goes through the normal toolexec pipeline
//! ([`toolexec::Exec::run_tool_with`]: id parsing, input and output
//! validation, deadlines, cancellation) plus this crate's allowlist and call
//! budget.
//!
//! ```
//! use serde_json::json;
//! use toolexec_code::{CodeLimits, CodeStatus, ExecCodeExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let exec = toolexec::Exec::new(toolexec_builtins::catalog());
//! let outcome = exec
//!     .execute_code(
//!         r#"
//!         const [a, b] = await Promise.all([
//!             tools.math.add({a: 1, b: 2}),
//!             tools.run("math:multiply", {a: 3, b: 4}),
//!         ]);
//!         console.log("partial results", a, b);
//!         return a.result + b.result;
//!         "#,
//!         CodeLimits::default(),
//!     )
//!     .await;
//! assert_eq!(outcome.status, CodeStatus::Ok);
//! assert_eq!(outcome.value, Some(json!(15)));
//! assert_eq!(outcome.tool_calls.len(), 2);
//! assert!(outcome.stdout.starts_with("partial results {\"result\":3}"));
//! # }
//! ```
//!
//! ## The script
//!
//! The script is the body of an `async` function: top-level `await` and
//! `return` work, and the returned value (converted to JSON; `undefined`
//! becomes `null`) is [`CodeOutcome::value`]. Globals besides the standard
//! ECMAScript library:
//!
//! - `await tools.run("ns:name", args)` runs a tool. `await tools.ns.name(args)`
//!   is the same call through a typed proxy (names with `-` or `.`:
//!   `tools["ns"]["na-me"](args)`; the names `run`, `search`, `describe` and
//!   `then` are reserved on `tools`, and `then` on namespaces, so use
//!   `tools.run` for tools or namespaces with those names).
//!   A failed call rejects with an `Error` whose `name` is `"ToolError"` and
//!   which carries `code` (the stable [`toolexec::ErrorCode`] string),
//!   `message`, `details`, `toolId` and `callIndex`. A script may catch it; if
//!   it does not, the outcome is [`CodeStatus::ToolError`] naming the call.
//! - `await tools.search(query, limit = 10)` ranks tools (allowed ones only) and
//!   resolves to `[{id, title?, summary, tags?, score}]`.
//! - `await tools.describe(id, detail = "schema")` resolves to the tool's
//!   documentation (`"summary"`, `"schema"` or `"full"`).
//! - `console.log/info/debug` (captured into [`CodeOutcome::stdout`]) and
//!   `console.warn/error` (into [`CodeOutcome::stderr`]); non-string arguments
//!   are JSON-formatted.
//!
//! `Promise.all` over tool calls runs them concurrently. [`typescript_declarations`]
//! renders TypeScript types for the catalog, to show a model what it can call.
//!
//! ## Limits
//!
//! Each limit of [`CodeLimits`] ends the execution with its own
//! [`CodeLimit`] class; the outcome still carries the tool-call log and the
//! output captured so far. Wall time, memory, tool-call budget and output
//! size are hard limits: once passed, the script is stopped with an
//! uncatchable interrupt, even inside `try`/`catch`/`finally`. A stack
//! overflow is a catchable `RangeError`, as in every JavaScript engine, and
//! is reported as [`CodeLimit::Stack`] when it ends the script.
//!
//! Once any limit trips, the execution's allocator also refuses every new
//! allocation, so a script busy in expensive native operations fails fast
//! into the next interrupt check. QuickJS checks every 10,000 operations,
//! but never inside a single native builtin: one call such as
//! `'a'.repeat(2 ** 25).includes('a'.repeat(2 ** 24) + 'b')` can run for
//! hours. If a script is still inside native code 500 ms after its
//! deadline, the caller gets its timeout outcome anyway (with the tool-call
//! log and output so far), but the stuck worker keeps its pool slot until
//! the operation returns: stuck scripts never occupy more threads (or
//! cores) than the pool's size. While every slot is held by such stuck
//! work (still running 5 s after its caller was answered), or too many
//! executions already wait for a slot, a new execution ends at once with
//! [`CodeLimit::Workers`]; one that waits for a slot past
//! its own timeout ends with [`CodeLimit::Timeout`]. Run untrusted scripts
//! in the sandboxed worker ([`hardened`]) to have them killed instead.
//!
//! ## Threading
//!
//! [`CodeEngine`] runs each execution on a dedicated worker thread from a
//! bounded pool with a fresh QuickJS runtime, so a script spinning the CPU
//! never blocks the async runtime or other executions; tool calls run on the
//! caller's Tokio runtime. The pool never runs more than its size of
//! threads ([`CodeEngine::stats`]). See [`CodeEngine`].
#![warn(missing_docs)]

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::{ErrorBody, Exec};

mod access;
mod allow;
mod engine;
pub mod hardened;
mod in_process;
mod limits_map;
mod memory;
mod sandbox;
mod ts;
pub mod worker;

pub use access::{BoxFuture, ToolAccess};
pub use allow::glob_match;
pub use engine::{CodeEngine, DEFAULT_MAX_CONCURRENT, MAX_QUEUED_PER_WORKER, PoolStats};
pub use in_process::InProcessRuntime;
pub use limits_map::{code_limits_from_runtime, runtime_limits_from_code};
pub use ts::{typescript_declaration, typescript_declarations};

#[doc(hidden)]
pub mod bench_support {
    //! Measurement hooks for the benchmarks; not a stable API.
    pub use crate::sandbox::idle_context_bytes;
}

/// Limits of one code execution. Every field is explicit; [`Default`] gives
/// the documented defaults.
///
/// ```
/// use std::time::Duration;
/// let limits = toolexec_code::CodeLimits {
///     timeout: Duration::from_secs(5),
///     allowed_tools: vec!["math:*".into(), "text:case".into()],
///     ..Default::default()
/// };
/// assert_eq!(limits.max_tool_calls, 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLimits {
    /// Wall time of the whole execution, from the call to
    /// [`CodeEngine::execute`] (so time spent waiting for a free worker
    /// counts) until the result is ready, including time the script spends
    /// awaiting tools. Default 30 s.
    pub timeout: Duration,
    /// Most memory the script's JavaScript heap may use, in bytes: every
    /// allocation of its QuickJS runtime, including the ~200 KB the engine
    /// and the globals take before the script starts (a smaller limit ends
    /// the execution before it starts). Default 64 MiB.
    pub memory_bytes: usize,
    /// Most tool calls (`tools.run` and the typed proxies, allowed or not).
    /// Default 100.
    pub max_tool_calls: usize,
    /// Most bytes of captured console output plus the result's JSON.
    /// Default 1 MiB.
    pub max_output_bytes: usize,
    /// Tools the script may call: exact ids (`"math:add"`) or globs where `*`
    /// matches any run of characters and `?` one character (`"math:*"`,
    /// `"*:*"`). A pattern matches a call if it matches the id as written or
    /// its `namespace:name` part. Empty: every tool. Search and describe only
    /// show allowed tools.
    pub allowed_tools: Vec<String>,
    /// Most native stack the interpreter may use, in bytes. Default 1 MiB
    /// (QuickJS's own default); clamped to 64 KiB..=8 MiB (workers have
    /// 16 MiB stacks).
    pub max_stack_bytes: usize,
}

impl Default for CodeLimits {
    fn default() -> Self {
        CodeLimits {
            timeout: Duration::from_secs(30),
            memory_bytes: 64 << 20,
            max_tool_calls: 100,
            max_output_bytes: 1 << 20,
            allowed_tools: Vec::new(),
            max_stack_bytes: 1 << 20,
        }
    }
}

/// One script to execute, with its limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CodeRequest {
    /// The script: the body of an `async` function.
    pub code: String,
    /// Its limits.
    pub limits: CodeLimits,
}

impl CodeRequest {
    /// A request with default limits.
    ///
    /// ```
    /// let req = toolexec_code::CodeRequest::new("return 1 + 1");
    /// assert_eq!(req.limits, toolexec_code::CodeLimits::default());
    /// ```
    pub fn new(code: impl Into<String>) -> Self {
        CodeRequest {
            code: code.into(),
            limits: CodeLimits::default(),
        }
    }

    /// Replaces the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: CodeLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// Which limit ended an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeLimit {
    /// [`CodeLimits::timeout`] passed (also: the script awaited something
    /// that could never settle, or the caller dropped the execution).
    Timeout,
    /// [`CodeLimits::memory_bytes`] was reached.
    Memory,
    /// More than [`CodeLimits::max_tool_calls`] tool calls.
    ToolCalls,
    /// Console output plus result passed [`CodeLimits::max_output_bytes`].
    Output,
    /// The interpreter ran out of stack ([`CodeLimits::max_stack_bytes`]).
    Stack,
    /// No worker could take the execution: every slot of the engine's pool
    /// is held by scripts stuck in long native operations past their
    /// deadlines, or [`MAX_QUEUED_PER_WORKER`] executions per worker
    /// already wait for one. Nothing ran; try again later.
    Workers,
}

impl CodeLimit {
    /// The stable `snake_case` name.
    pub const fn as_str(self) -> &'static str {
        match self {
            CodeLimit::Timeout => "timeout",
            CodeLimit::Memory => "memory",
            CodeLimit::ToolCalls => "tool_calls",
            CodeLimit::Output => "output",
            CodeLimit::Stack => "stack",
            CodeLimit::Workers => "workers",
        }
    }
}

impl std::fmt::Display for CodeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an execution ended. Serializes with a stable `"kind"` tag
/// (`"ok"`, `"syntax_error"`, `"exception"`, `"limit_exceeded"`,
/// `"tool_error"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CodeStatus {
    /// The script returned; [`CodeOutcome::value`] holds the result.
    Ok,
    /// The script does not parse; nothing ran.
    SyntaxError {
        /// The parser's message.
        message: String,
        /// 1-based line in the submitted code.
        line: u32,
        /// 1-based column in the submitted code.
        column: u32,
    },
    /// The script threw (or returned a value that is not JSON). Non-`Error`
    /// throws are rendered: `throw 42` gives `"Uncaught 42"`.
    Exception {
        /// `"TypeError: x is not a function"`, `"Uncaught {\"a\":1}"`, ...
        message: String,
        /// The JavaScript stack, when the thrown value had one.
        #[serde(skip_serializing_if = "Option::is_none")]
        stack: Option<String>,
    },
    /// A limit ended the execution.
    LimitExceeded {
        /// Which limit.
        limit: CodeLimit,
        /// Human detail.
        message: String,
    },
    /// A tool call failed and the script did not catch the error.
    ToolError {
        /// Index of the failed call in [`CodeOutcome::tool_calls`].
        call_index: usize,
        /// The tool id as the script wrote it.
        tool_id: String,
        /// The pipeline's error (`not_allowed` for a tool outside
        /// [`CodeLimits::allowed_tools`]).
        error: ErrorBody,
    },
}

impl CodeStatus {
    /// True for [`CodeStatus::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, CodeStatus::Ok)
    }

    /// The limit, for [`CodeStatus::LimitExceeded`].
    pub fn limit(&self) -> Option<CodeLimit> {
        match self {
            CodeStatus::LimitExceeded { limit, .. } => Some(*limit),
            _ => None,
        }
    }

    /// One human line (plus a stack or details when there are any) starting
    /// with the status kind, or `None` for [`CodeStatus::Ok`]. `source`
    /// names the script (a file name) in syntax errors as `source:line:col`.
    ///
    /// ```
    /// use toolexec_code::CodeStatus;
    /// let s = CodeStatus::SyntaxError { message: "unexpected token".into(), line: 2, column: 5 };
    /// assert_eq!(s.failure_text(Some("a.js")).unwrap(), "syntax_error: a.js:2:5: unexpected token");
    /// assert_eq!(s.failure_text(None).unwrap(), "syntax_error: line 2, column 5: unexpected token");
    /// assert!(CodeStatus::Ok.failure_text(None).is_none());
    /// ```
    pub fn failure_text(&self, source: Option<&str>) -> Option<String> {
        Some(match self {
            CodeStatus::Ok => return None,
            CodeStatus::SyntaxError {
                message,
                line,
                column,
            } => match source {
                Some(src) => format!("syntax_error: {src}:{line}:{column}: {message}"),
                None => format!("syntax_error: line {line}, column {column}: {message}"),
            },
            CodeStatus::Exception { message, stack } => match stack.as_deref().map(str::trim_end) {
                Some(stack) if !stack.is_empty() => format!("exception: {message}\n{stack}"),
                _ => format!("exception: {message}"),
            },
            CodeStatus::LimitExceeded { limit, message } => {
                format!("limit_exceeded: {limit}: {message}")
            }
            CodeStatus::ToolError {
                call_index,
                tool_id,
                error,
            } => {
                let mut s = format!(
                    "tool_error: call {call_index} ({tool_id}) failed: {}",
                    error.message
                );
                if let Some(d) = &error.details {
                    s.push_str(&format!("\ndetails: {d}"));
                }
                s
            }
        })
    }
}

/// One tool call made by a script, in call order: the same record as a
/// sandboxed unit's (a call still running when the execution ended is
/// recorded as `cancelled`).
pub use toolexec_runtime::ToolCallRecord;

/// The result of one execution. Always carries the tool-call log and the
/// output captured so far, whatever the status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeOutcome {
    /// How it ended.
    pub status: CodeStatus,
    /// The returned value as JSON, when `status` is [`CodeStatus::Ok`].
    pub value: Option<Value>,
    /// `console.log/info/debug` output, one line per call.
    pub stdout: String,
    /// `console.warn/error` output, one line per call.
    pub stderr: String,
    /// Every tool call, in call order: bounded records (sizes, digests and
    /// previews of the arguments and results, never the values) within the
    /// log's byte budget ([`toolexec_runtime::ToolCallLog`]).
    pub tool_calls: Vec<ToolCallRecord>,
    /// Wall time from the call to [`CodeEngine::execute`] until the outcome,
    /// in milliseconds.
    pub duration_ms: f64,
}

impl CodeOutcome {
    pub(crate) fn status_only(status: CodeStatus, duration: Duration) -> Self {
        CodeOutcome {
            status,
            value: None,
            stdout: String::new(),
            stderr: String::new(),
            tool_calls: Vec::new(),
            duration_ms: duration.as_secs_f64() * 1000.0,
        }
    }
}

/// Runs scripts directly on an [`Exec`]:
/// `exec.execute_code(code, limits).await`.
///
/// Uses one process-wide pool of [`DEFAULT_MAX_CONCURRENT`] workers, created
/// on first use and shared by every `Exec`; build a [`CodeEngine`] to size a
/// pool yourself.
pub trait ExecCodeExt {
    /// Executes `code` with `limits` against this executor's catalog.
    /// Needs a Tokio runtime (with the time driver), like async tools do.
    fn execute_code(
        &self,
        code: &str,
        limits: CodeLimits,
    ) -> impl Future<Output = CodeOutcome> + Send;
}

impl ExecCodeExt for Exec {
    fn execute_code(
        &self,
        code: &str,
        limits: CodeLimits,
    ) -> impl Future<Output = CodeOutcome> + Send {
        static SHARED: OnceLock<engine::Pool> = OnceLock::new();
        let pool = SHARED.get_or_init(|| engine::Pool::new(DEFAULT_MAX_CONCURRENT));
        let engine = CodeEngine::with_pool(self.clone(), pool.clone());
        let req = CodeRequest {
            code: code.to_owned(),
            limits,
        };
        async move { engine.execute(req).await }
    }
}
