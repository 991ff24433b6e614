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
//! Place in the workspace: beside the pipeline: `execute_code` (gateway and
//! CLI) runs here, in process or as a script unit through `toolexec-runtime`
//! (see ARCHITECTURE.md's call flow).
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
//! in a sandbox ([`CodeRunner`] with the `hardened` profile, through the
//! [`worker`]) to have them killed instead.
//!
//! ## Threading
//!
//! [`CodeEngine`] runs each execution on a dedicated worker thread from a
//! bounded pool with a fresh QuickJS runtime, so a script spinning the CPU
//! never blocks the async runtime or other executions; tool calls run on the
//! caller's Tokio runtime. The pool never runs more than its size of
//! threads ([`CodeEngine::stats`]). See [`CodeEngine`].
//!
//! ## Where scripts run
//!
//! Front ends (the MCP gateway's `execute_code`, `toolexec code`) go
//! through one [`CodeRunner`]: it takes the profile and runs `dev` and
//! `standard` scripts in process on a [`CodeEngine`], and `hardened` ones
//! as a script unit in the sandbox runtime a
//! [`Runtimes`](toolexec_runtime::Runtimes) registry selects, where the
//! [`worker`] process runs the same engine behind the tool channel.
//! Either way the result is a [`CodeOutcome`] of the same shape. Inside the
//! crate: `quickjs` is the interpreter glue (one execution on one thread),
//! `engine` the bounded pool around it, `unit` both ends of a script run as
//! a runtime unit ([`InProcessRuntime`], the [`worker`], the limits mapping
//! and [`outcome_from_run`]).
#![warn(missing_docs)]

use std::future::Future;
use std::sync::OnceLock;

use toolexec::Exec;

mod allow;
mod engine;
mod outcome;
mod quickjs;
mod request;
mod runner;
mod ts;
mod unit;

pub use allow::glob_match;
pub use engine::{CodeEngine, DEFAULT_MAX_CONCURRENT, MAX_QUEUED_PER_WORKER, PoolStats};
pub use outcome::{CodeLimit, CodeOutcome, CodeStatus, ToolCallRecord};
pub use request::{CodeLimits, CodeRequest};
pub use runner::{CANCEL_GRACE, CodeExecutor, CodeRunner, Placement};
pub use ts::{typescript_declaration, typescript_declarations};
pub use unit::{
    InProcessRuntime, code_limits_from_runtime, outcome_from_run, runtime_limits_from_code, worker,
};

#[doc(hidden)]
pub mod bench_support {
    //! Measurement hooks for the benchmarks; not a stable API.
    pub use crate::quickjs::idle_context_bytes;
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
