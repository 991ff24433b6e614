//! HTTP providers for toolexec: the operations of an OpenAPI document and
//! plain HTTP endpoints as validated, searchable tools; and the TLS of
//! every outbound HTTP client (MCP upstreams use [`TlsOptions`] too).
//!
//! An [`Api`] is one HTTP service: its base URL, a pooled client with TLS,
//! timeouts, a concurrency limit and retries ([`ClientOptions`]), and the
//! credentials of its security schemes ([`Credentials`]). Its tools come
//! from an OpenAPI 3.0 or 3.1 document ([`openapi::import`]) or are declared
//! one by one ([`PlainTool`]); each tool is an [`Operation`], the
//! [`Backend`](toolexec::Backend) that turns validated arguments into one
//! HTTP request and its response into a [`ToolOutput`](toolexec::ToolOutput).
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolexec::Error> {
//! use toolexec_http::openapi::{self, ImportOptions};
//!
//! let exec = toolexec::Exec::builder().build();
//! let api = openapi::import(ImportOptions::new("petstore", "petstore.yaml")).await?;
//! for skipped in &api.skipped {
//!     eprintln!("skipped {}: {}", skipped.operation, skipped.reason);
//! }
//! exec.catalog().register_many(api.tools(), false)?;
//! let pet = exec.run_tool("petstore:get_pet", serde_json::json!({"pet_id": 1})).await?;
//! # Ok(()) }
//! ```
//!
//! Errors: a non-2xx response is `execution_failed` carrying the status and
//! an excerpt of the body; a response larger than
//! [`ClientOptions::max_response_bytes`] is `limit_exceeded` (output), cut
//! off without being read whole; a server that cannot be reached is
//! `backend_unavailable`; a timeout is `timeout`.

pub mod auth;
pub mod body;
pub mod client;
mod endpoint;
pub mod openapi;
mod plain;
pub mod tls;

pub use auth::{Credential, Credentials};
pub use client::{Api, ClientOptions, RetryPolicy};
pub use endpoint::Operation;
pub use plain::PlainTool;
pub use tls::TlsOptions;
