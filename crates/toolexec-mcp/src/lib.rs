//! MCP both ways, on the official Rust SDK (`rmcp`):
//!
//! - [`upstream`] (feature `upstream`): MCP servers (stdio child processes or
//!   streamable HTTP) as toolexec backends, their tools imported into the
//!   catalog;
//! - [`gateway`] (feature `gateway`): an MCP server (stdio or streamable
//!   HTTP) that gives agents search, docs, validated runs and chains over a
//!   toolexec catalog; with the feature `code`, also `execute_code` (code
//!   mode, QuickJS through `toolexec-code`).
//!
//! Place in the workspace: the protocol edge: the gateway is an entry point
//! of every MCP call (step 1 of ARCHITECTURE.md's call flow), upstream
//! servers are backends (step 3).
//!
//! All three features are on by default; a user of upstream backends alone
//! builds with `default-features = false, features = ["upstream"]` and does
//! not compile the gateway's HTTP server or QuickJS.
#![warn(missing_docs)]

#[cfg(feature = "gateway")]
pub mod gateway;
#[cfg(feature = "upstream")]
mod pipes;
#[cfg(feature = "upstream")]
pub mod upstream;
#[cfg(feature = "upstream")]
mod verbatim;
