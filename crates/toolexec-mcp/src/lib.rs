//! MCP both ways, on the official Rust SDK (`rmcp`):
//!
//! - [`upstream`]: MCP servers (stdio child processes or streamable HTTP) as
//!   toolexec backends, their tools imported into the catalog;
//! - [`gateway`]: an MCP server (stdio or streamable HTTP) that gives agents
//!   search, docs, validated runs and chains over a toolexec catalog.
#![warn(missing_docs)]

pub mod gateway;
pub mod upstream;
