//! The `Backend` trait: what does the work behind a tool.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde_json::Value;

use crate::context::ToolContext;
use crate::error::Error;
use crate::output::ToolOutput;
use crate::tool::Tool;

/// A boxed, sendable future, as backends return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One call handed to a backend, after the pipeline resolved the tool and
/// validated the arguments.
#[derive(Debug)]
pub struct Call<'a> {
    /// The tool being called.
    pub tool: &'a Tool,
    /// Validated arguments (a JSON object).
    pub args: Value,
    /// Progress, chunks and cancellation.
    pub ctx: ToolContext,
}

/// Whether a backend can serve calls on this machine now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Availability {
    /// Ready.
    Available,
    /// Cannot serve calls; `reason` says what is missing, in one line.
    Unavailable {
        /// What is missing.
        reason: String,
    },
}

/// What executes tool calls: typed Rust functions, MCP servers, HTTP
/// providers, sandboxes, remote workers. Small by design, like a tower
/// `Service`: the pipeline does resolution, validation, deadlines,
/// cancellation, panic isolation and normalization around it.
///
/// A backend returns `Err(Error::ExecutionFailed{..})` when the tool reports a
/// failure, and infrastructure errors (`BackendUnavailable`, ...) otherwise.
pub trait Backend: Send + Sync + 'static {
    /// Short kind name (`local`, `mcp`, `http`, ...), for listings and errors.
    fn kind(&self) -> &str;

    /// Runs one call. Dropping the returned future must abandon the call.
    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>>;

    /// Whether calls can be served now.
    fn availability(&self) -> Availability {
        Availability::Available
    }
}
