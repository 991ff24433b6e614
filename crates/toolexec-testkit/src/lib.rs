//! # toolexec-testkit
//!
//! What the workspace's tests and benchmarks share (a dev-dependency only,
//! never published):
//!
//! Place in the workspace: a test-only crate every crate's tests may use (see
//! ARCHITECTURE.md).
//!
//! - [`catalog`]: a small fixture catalog (`math:add`, `math:multiply`,
//!   `text:case`, `text:word_count`) with the same ids, argument and result
//!   shapes as the built-in tools, so that a test which only needs *some*
//!   tool to call does not build the whole built-in catalog (jq, the time
//!   zone database, regex).
//! - [`skip()`] and [`skip!`]: a test that cannot run here (a missing
//!   runtime, binary or test dependency) prints `SKIPPED: <test>: <why>`
//!   and passes, except under `CI`, where every component must be there and
//!   the skip fails the test instead; [`skip_runtime`] for a sandbox
//!   runtime, required when `TOOLEXEC_REQUIRE_RUNTIMES` names it.
//! - [`dep`] / [`deps`]: the external test dependencies that
//!   `scripts/install-test-deps.sh` installs (MCP reference servers, Node,
//!   the Python SDK), from the environment or its `env.sh`.
//! - [`TempDir`], [`free_port`], [`python3`]: small helpers more than one
//!   crate's tests used to copy.
//! - [`tls`]: a CA and certificates made in the test (for TLS upstreams).
//! - [`retrieval`]: the StableToolBench tool-retrieval set and its metrics.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! let exec = toolexec::Exec::new(toolexec_testkit::catalog());
//! let out = exec.run_tool("math:add", json!({"a": 2, "b": 3})).await.unwrap();
//! assert_eq!(out.value, json!({"result": 5.0}));
//! # }
//! ```

#![forbid(unsafe_code)]
mod catalog;
mod deps;
pub mod retrieval;
mod skip;
mod temp;
pub mod tls;

pub use catalog::catalog;
pub use deps::{dep, deps, python3};
pub use skip::{required, runtime_required, skip, skip_runtime};
pub use temp::{TempDir, free_port, spawn_printing_port};
