//! # toolexec
//!
//! The execution layer between AI agents and the tools they call: a catalog
//! of MCP-style tools with ranked search and docs, and a run pipeline that
//! validates, executes (with deadlines, cancellation and panic isolation),
//! normalizes and streams.
//!
//! Place in the workspace: the core every other crate builds on; entry point
//! of every call (`Exec::run_tool`, step 1–2 of ARCHITECTURE.md's call flow).
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use toolexec::{Exec, ToolError};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct AddArgs { a: f64, b: f64 }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let exec = Exec::builder().build();
//! exec.catalog()
//!     .tool("math:add", "Adds two numbers", |a: AddArgs| async move {
//!         Ok::<_, ToolError>(a.a + a.b)
//!     })
//!     .unwrap();
//! let out = exec.run_tool("math:add", json!({"a": 2, "b": 3})).await.unwrap();
//! assert_eq!(out.value, json!(5.0));
//! let err = exec.run_tool("math:add", json!({"a": "two"})).await.unwrap_err();
//! assert_eq!(err.code().as_str(), "validation_input");
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod access;
pub mod allow;
pub mod backend;
pub mod catalog;
pub mod chain;
pub mod client;
pub mod context;
pub mod docs;
pub mod error;
pub mod exec;
mod gate;
pub mod id;
pub mod limits;
pub mod local;
pub mod names;
pub mod output;
pub mod policy;
pub mod quota;
mod run;
pub mod schema;
pub mod search;
pub mod secret;
pub mod stream;
pub mod telemetry;
pub mod tool;
pub mod units;

pub use access::{ToolAccess, until_cancelled};
pub use allow::{AllowList, glob_match};
pub use backend::{Availability, Backend, BoxFuture, Call};
pub use catalog::{
    Catalog, CatalogEvent, ListRequest, NamespaceInfo, Page, RegisteredTool, SearchResult,
};
pub use chain::{ChainResult, ChainStep, StepResult, parse_chain};
pub use client::{ClientError, ClientInput, ClientLink, ClientRequests};
pub use context::ToolContext;
pub use docs::{DetailLevel, ToolDescription, ToolDocs, ToolExample};
pub use error::{Error, ErrorBody, ErrorCode, LimitKind, ValidationFailure};
pub use exec::{Exec, ExecBuilder, StreamRequest, ToolMatch};
pub use id::{ToolId, ToolIdRef};
pub use limits::Limits;
pub use local::{LocalTool, ToolError, raw_handler};
pub use output::{Content, ToolOutput};
pub use run::RunOptions;
pub use schema::{CompiledSchema, Violation};
pub use secret::Secret;
pub use stream::{EventStream, RunResult, STREAM_BUFFER, StreamEvent};
pub use tokio_util::sync::CancellationToken;
pub use tool::{Tool, ToolAnnotations, ToolBuilder, normalize_tags};
