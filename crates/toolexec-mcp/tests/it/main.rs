//! MCP both ways against real clients and servers (rmcp, the Python SDK,
//! the reference servers, Inspector, the conformance suite), one test
//! binary (one link) for all but `upstream_env`, which sets this process's
//! environment and so keeps a process of its own. A test whose external
//! dependency is missing prints `SKIPPED: <test>: <why>`, or fails under
//! `CI` (`toolexec_testkit::skip`).

mod gateway_code;
mod gateway_conformance;
mod gateway_held;
mod gateway_inspector;
mod gateway_limits;
mod gateway_modern_upstream;
mod gateway_oauth;
mod gateway_passthrough;
mod gateway_policy;
mod gateway_python;
mod gateway_relay;
mod gateway_revisions;
mod gateway_rmcp;
mod gateway_tasks;
#[path = "../support/mod.rs"]
mod support;
mod upstream_conformance;
mod upstream_everything;
mod upstream_python;
mod upstream_tls;
