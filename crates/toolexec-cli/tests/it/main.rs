//! The `toolexec` binary end to end, one test binary (one link) for all:
//! every test runs the real binary (`CARGO_BIN_EXE_toolexec`) as a child
//! process, so none needs a process of its own. A test whose external
//! dependency is missing prints `SKIPPED: <test>: <why>`, or fails under
//! `CI` (`toolexec_testkit::skip`).

mod support;

mod auth;
mod cli;
mod code;
mod config;
mod conformance;
mod fleet;
mod grpc_apis;
mod http_apis;
mod remote;
mod runtimes;
mod search;
mod serve;
mod serve_auth;
mod serve_hostile;
mod serve_verbatim;
mod telemetry;
