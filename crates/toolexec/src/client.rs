//! Requests back to the client a call came from, made while the call runs:
//! in MCP, an upstream server's `sampling/createMessage`,
//! `elicitation/create` and `roots/list`, and its log messages.
//!
//! An entry point that can reach its client (the MCP gateway) puts a
//! [`ClientLink`] on the call's [`Caller`](crate::telemetry::Caller); a
//! backend that relays such requests (an upstream MCP server) reads it from
//! [`current_caller`](crate::telemetry::current_caller). The link goes
//! wherever the caller goes: streamed runs, chains, code-mode scripts.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::backend::BoxFuture;

/// A caller that answers a tool's requests for client input itself
/// ([`Error::InputRequired`](crate::Error::InputRequired), MCP 2026-07-28's
/// `input_required`) sets this on its call
/// ([`RunOptions::client_input`](crate::RunOptions::client_input)): empty
/// on a first call; on a call made again, the client's answers by key and
/// the state the tool asked to get back. A backend then returns
/// `InputRequired` instead of asking the client during the call, and
/// reads the answers from [`ToolContext::client_input`](crate::ToolContext::client_input).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientInput {
    /// The client's answers, by the keys the tool's requests had.
    pub responses: Option<Map<String, Value>>,
    /// The tool's state, sent back as the tool gave it.
    pub state: Option<String>,
}

/// Requests and notifications to the client a call came from.
pub trait ClientRequests: Send + Sync + fmt::Debug {
    /// Whether the client declared that it answers `method` with these
    /// `params` (an elicitation's mode, for instance).
    fn supports(&self, method: &str, params: &Value) -> bool;

    /// Sends the request `method` and resolves to the client's result.
    /// Dropping the future abandons the request; the client is told so when
    /// its protocol can say it.
    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<'static, Result<Value, ClientError>>;

    /// Sends the notification `method` (a log message) when the client
    /// wants it (a log message below the level it set is not sent).
    fn notify(&self, method: &str, params: Value);

    /// The lowest level of log message the client wants during this call,
    /// as an MCP logging level (`debug`, `info`, … `emergency`); `None`
    /// when it wants none (the default). A server told the level with each
    /// request (MCP 2026-07-28) is told this one.
    fn log_level(&self) -> Option<&str> {
        None
    }
}

/// Why a request to the client has no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The client answered with an error, relayed as it is.
    #[error("the client answered with error {code}: {message}")]
    Answered {
        /// The JSON-RPC error code.
        code: i64,
        /// The client's message.
        message: String,
        /// The client's error data.
        data: Option<Value>,
    },
    /// The client did not declare that it answers this request.
    #[error("the client that made this call does not support {method}")]
    Unsupported {
        /// The request's method.
        method: String,
    },
    /// The request was not answered: the client went away, did not answer
    /// in time, or its call ended first.
    #[error("{0}")]
    Failed(String),
}

/// A [`ClientRequests`] handle, comparable by identity.
#[derive(Clone)]
pub struct ClientLink(pub Arc<dyn ClientRequests>);

impl fmt::Debug for ClientLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for ClientLink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ClientLink {}

impl std::ops::Deref for ClientLink {
    type Target = dyn ClientRequests;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
