//! Protocol messages.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::ErrorBody;

/// A message from the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Correlates the response; absent on notifications (`result`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The method and its parameters.
    #[serde(flatten)]
    pub body: RequestBody,
}

/// The methods of [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum RequestBody {
    /// Version handshake; answered with `{protocol, version, max_frame_bytes, max_tool_calls}`.
    Hello {
        /// The protocol name, `toolexec-channel`.
        protocol: String,
        /// The version the sandbox speaks.
        version: u32,
    },
    /// Calls a tool; answered with the tool's result value.
    Call {
        /// `ns:name[:version]`.
        tool: String,
        /// Arguments (a JSON object).
        #[serde(default)]
        args: Value,
    },
    /// Ranks allowed tools; answered with `[{id, summary, score}]`.
    Search {
        /// Free text.
        query: String,
        /// Maximum hits (1..=50, default 10).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Documents an allowed tool; answered with its description.
    Describe {
        /// `ns:name[:version]`.
        tool: String,
        /// `summary`, `schema` (default) or `full`.
        #[serde(default)]
        detail: Option<String>,
    },
    /// Sets the unit's result value (a notification: no `id`, no answer).
    Result {
        /// The value.
        value: Value,
    },
}

/// A message from the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// The answer.
    #[serde(flatten)]
    pub body: ResponseBody,
}

/// Success or failure of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseBody {
    /// The result.
    Result(Value),
    /// The error, with its stable code.
    Error(ErrorBody),
}
