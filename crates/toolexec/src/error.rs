//! Typed errors with a stable, machine-readable code per class.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::Violation;

/// Stable machine-readable class of an [`Error`]. The `snake_case` string of
/// each variant ([`ErrorCode::as_str`]) is part of the public contract: the
/// CLI prints it, the MCP gateway returns it, and callers match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// No tool with that id is registered.
    ToolNotFound,
    /// The id is not of the form `namespace:name[:version]`.
    InvalidToolId,
    /// Arguments break the tool's input schema (or are not a JSON object).
    ValidationInput,
    /// The tool's result breaks its output schema.
    ValidationOutput,
    /// The tool reported a failure, or its handler panicked.
    ExecutionFailed,
    /// The call did not finish within its deadline.
    Timeout,
    /// The caller cancelled the call.
    Cancelled,
    /// The backend cannot serve calls right now (not running, not installed, crashed).
    BackendUnavailable,
    /// A configured limit (size, depth, steps, ...) was exceeded.
    LimitExceeded,
    /// A tool definition was rejected at registration (bad name, schema, ...).
    InvalidDefinition,
    /// A tool with the same id is already registered.
    AlreadyExists,
    /// A request (chain, paging cursor, options) is malformed.
    InvalidRequest,
    /// The caller may not use this tool (an allowlist, such as code mode's
    /// `allowed_tools`, excludes it).
    NotAllowed,
    /// The worker running the call was lost mid-call and the tool is not
    /// idempotent, so it was not run again: it may or may not have taken
    /// effect. The details carry the journal of what did happen.
    Interrupted,
    /// The tool needs input from the client (an elicitation, a sampled
    /// message, its roots) before it can answer, and the caller answers
    /// such requests itself ([`ClientInput`](crate::ClientInput)): the
    /// details carry the requests and the state to call again with.
    InputRequired,
}

impl ErrorCode {
    /// The stable `snake_case` code string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ToolNotFound => "tool_not_found",
            ErrorCode::InvalidToolId => "invalid_tool_id",
            ErrorCode::ValidationInput => "validation_input",
            ErrorCode::ValidationOutput => "validation_output",
            ErrorCode::ExecutionFailed => "execution_failed",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::BackendUnavailable => "backend_unavailable",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::InvalidDefinition => "invalid_definition",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::NotAllowed => "not_allowed",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::InputRequired => "input_required",
        }
    }

    /// False for an outcome that is not a failure of the call
    /// ([`InputRequired`](ErrorCode::InputRequired): the call asks its
    /// client for input and goes on when called again). Telemetry marks a
    /// call's span as an error only when this is true.
    pub const fn is_failure(self) -> bool {
        !matches!(self, ErrorCode::InputRequired)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The schema violations that made a value invalid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationFailure {
    /// The tool whose schema was violated.
    pub tool: String,
    /// Every violation found, up to the configured cap.
    pub violations: Vec<Violation>,
    /// True when more violations existed than were kept.
    pub truncated: bool,
}

impl fmt::Display for ValidationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.violations.len();
        write!(
            f,
            "tool {}: {n}{} violation{}",
            self.tool,
            if self.truncated { "+" } else { "" },
            if n == 1 { "" } else { "s" }
        )?;
        for (i, v) in self.violations.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

/// Which limit an [`Error::LimitExceeded`] refers to: the pipeline's own
/// (argument and result size and depth, chain length) and those of
/// sandboxed runs (`toolexec-runtime` reports its outcomes with this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitKind {
    /// Serialized size of the arguments.
    InputBytes,
    /// Nesting depth of the arguments.
    InputDepth,
    /// Serialized size of the result.
    OutputBytes,
    /// Nesting depth of the result.
    OutputDepth,
    /// Number of steps in a chain.
    ChainSteps,
    /// Wall-clock time of a sandboxed run.
    WallTime,
    /// CPU time of a sandboxed run.
    CpuTime,
    /// Memory of a sandboxed run.
    Memory,
    /// Processes or threads of a sandboxed run.
    Processes,
    /// Bytes a sandboxed run wrote to stdout and stderr.
    Output,
    /// Bytes a sandboxed run wrote to its scratch disk.
    Disk,
    /// Network access a sandboxed run attempted beyond its policy.
    Network,
    /// Tool calls a sandboxed run made beyond its budget.
    ToolCalls,
    /// Calls per second of a caller or a tool ([`Quotas`](crate::quota::Quotas)).
    CallRate,
    /// Calls in flight at once of a caller or a tool.
    ConcurrentCalls,
}

impl LimitKind {
    /// Stable name of the limit.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitKind::InputBytes => "input_bytes",
            LimitKind::InputDepth => "input_depth",
            LimitKind::OutputBytes => "output_bytes",
            LimitKind::OutputDepth => "output_depth",
            LimitKind::ChainSteps => "chain_steps",
            LimitKind::WallTime => "wall_time",
            LimitKind::CpuTime => "cpu_time",
            LimitKind::Memory => "memory",
            LimitKind::Processes => "processes",
            LimitKind::Output => "output",
            LimitKind::Disk => "disk",
            LimitKind::Network => "network",
            LimitKind::ToolCalls => "tool_calls",
            LimitKind::CallRate => "call_rate",
            LimitKind::ConcurrentCalls => "concurrent_calls",
        }
    }
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every failure toolexec reports. Each variant maps to one [`ErrorCode`];
/// `Display` always starts with that code.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// See [`ErrorCode::InvalidToolId`].
    #[error("invalid_tool_id: {id:?}: {reason}")]
    InvalidToolId {
        /// The offending id (truncated if huge).
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// See [`ErrorCode::ToolNotFound`].
    #[error("tool_not_found: no tool {id:?} is registered")]
    ToolNotFound {
        /// The id that was asked for.
        id: String,
    },
    /// See [`ErrorCode::ValidationInput`].
    #[error("validation_input: {0}")]
    ValidationInput(Box<ValidationFailure>),
    /// See [`ErrorCode::ValidationOutput`].
    #[error("validation_output: {0}")]
    ValidationOutput(Box<ValidationFailure>),
    /// See [`ErrorCode::ExecutionFailed`].
    #[error("execution_failed: tool {tool}: {message}")]
    ExecutionFailed {
        /// The tool that failed.
        tool: String,
        /// The tool's own message.
        message: String,
        /// Optional structured detail the tool attached.
        data: Option<Value>,
        /// True when the handler panicked rather than returning an error.
        panicked: bool,
    },
    /// See [`ErrorCode::Timeout`].
    #[error("timeout: tool {tool} did not finish within {}ms", after.as_millis())]
    Timeout {
        /// The tool that timed out.
        tool: String,
        /// The deadline that passed.
        after: Duration,
    },
    /// See [`ErrorCode::Cancelled`].
    #[error("cancelled: call to {tool} was cancelled")]
    Cancelled {
        /// The tool whose call was cancelled.
        tool: String,
    },
    /// See [`ErrorCode::BackendUnavailable`].
    #[error("backend_unavailable: {backend}: {message}")]
    BackendUnavailable {
        /// The backend's name.
        backend: String,
        /// Why it is unavailable.
        message: String,
    },
    /// See [`ErrorCode::LimitExceeded`].
    #[error("limit_exceeded: {} {message}", limit.as_str())]
    LimitExceeded {
        /// Which limit.
        limit: LimitKind,
        /// Human detail (value and maximum).
        message: String,
    },
    /// See [`ErrorCode::InvalidDefinition`].
    #[error("invalid_definition: {tool}: {field}: {message}")]
    InvalidDefinition {
        /// The tool being registered.
        tool: String,
        /// The offending field (`name`, `input_schema`, `tags[2]`, ...).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// See [`ErrorCode::AlreadyExists`].
    #[error("already_exists: tool {id} is already registered (use replace)")]
    AlreadyExists {
        /// The duplicate id.
        id: String,
    },
    /// See [`ErrorCode::NotAllowed`].
    #[error("not_allowed: tool {tool} is not allowed here: {reason}")]
    NotAllowed {
        /// The tool that was asked for.
        tool: String,
        /// Which rule excludes it.
        reason: String,
    },
    /// See [`ErrorCode::NotAllowed`]: a [`Policy`](crate::policy::Policy)
    /// rule (or its default) denies the caller this tool, prompt or
    /// resource.
    #[error("not_allowed: {target} is denied to this caller by policy rule {rule:?}")]
    Denied {
        /// The tool id, `namespace:prompt` or resource URI.
        target: String,
        /// The deciding rule's name (`default` when no rule matched).
        rule: String,
    },
    /// See [`ErrorCode::LimitExceeded`]: a caller's or tool's call rate or
    /// concurrent calls ([`Quotas`](crate::quota::Quotas)) are used up.
    #[error("limit_exceeded: {} {message}", limit.as_str())]
    Throttled {
        /// [`LimitKind::CallRate`] or [`LimitKind::ConcurrentCalls`].
        limit: LimitKind,
        /// Whose limit, and its value.
        message: String,
        /// When a retry can succeed (rate limits; `None` for concurrency,
        /// which frees up when a call ends).
        retry_after: Option<Duration>,
    },
    /// See [`ErrorCode::InputRequired`].
    #[error("input_required: tool {tool} needs input from the client before it can answer")]
    InputRequired {
        /// The tool that asks.
        tool: String,
        /// Its requests and state as its protocol wrote them (MCP's
        /// `InputRequiredResult`).
        input: Value,
    },
    /// See [`ErrorCode::InvalidRequest`].
    #[error("invalid_request: {field}: {message}")]
    InvalidRequest {
        /// The offending field or path (`steps[2].tool_id`, `cursor`, ...).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An error that crossed a process or wire boundary (a sandbox, a
    /// remote worker, a script's tool call) as an [`ErrorBody`], kept as it
    /// came: its code, message and details, never wrapped in another code.
    /// Build it with `Error::from(body)`.
    #[error("{}", .0.message)]
    Relayed(Box<ErrorBody>),
}

impl From<ErrorBody> for Error {
    /// Keeps `body` whole; a message that does not start with its code
    /// gets the code put in front, as every [`Error`]'s `Display` does.
    fn from(mut body: ErrorBody) -> Self {
        if !body.message.starts_with(body.code.as_str()) {
            body.message = format!("{}: {}", body.code.as_str(), body.message);
        }
        Error::Relayed(Box::new(body))
    }
}

impl Error {
    /// The stable class of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidToolId { .. } => ErrorCode::InvalidToolId,
            Error::ToolNotFound { .. } => ErrorCode::ToolNotFound,
            Error::ValidationInput(_) => ErrorCode::ValidationInput,
            Error::ValidationOutput(_) => ErrorCode::ValidationOutput,
            Error::ExecutionFailed { .. } => ErrorCode::ExecutionFailed,
            Error::Timeout { .. } => ErrorCode::Timeout,
            Error::Cancelled { .. } => ErrorCode::Cancelled,
            Error::BackendUnavailable { .. } => ErrorCode::BackendUnavailable,
            Error::LimitExceeded { .. } => ErrorCode::LimitExceeded,
            Error::InvalidDefinition { .. } => ErrorCode::InvalidDefinition,
            Error::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            Error::InvalidRequest { .. } => ErrorCode::InvalidRequest,
            Error::NotAllowed { .. } | Error::Denied { .. } => ErrorCode::NotAllowed,
            Error::Throttled { .. } => ErrorCode::LimitExceeded,
            Error::InputRequired { .. } => ErrorCode::InputRequired,
            Error::Relayed(body) => body.code,
        }
    }

    /// True when the tool itself reported the failure (as opposed to the
    /// infrastructure: timeouts, unavailable backends, validation, ...).
    pub fn is_tool_error(&self) -> bool {
        match self {
            Error::ExecutionFailed { panicked, .. } => !panicked,
            Error::Relayed(body) => {
                body.code == ErrorCode::ExecutionFailed
                    && body.details.as_ref().and_then(|d| d.get("panicked"))
                        != Some(&Value::Bool(true))
            }
            _ => false,
        }
    }

    /// A tool-reported failure.
    pub fn execution_failed(tool: impl Into<String>, message: impl Into<String>) -> Self {
        Error::ExecutionFailed {
            tool: tool.into(),
            message: message.into(),
            data: None,
            panicked: false,
        }
    }

    /// A backend that cannot serve calls.
    pub fn backend_unavailable(backend: impl Into<String>, message: impl Into<String>) -> Self {
        Error::BackendUnavailable {
            backend: backend.into(),
            message: message.into(),
        }
    }

    /// A limit that was hit; `message` follows the limit's name
    /// (`"limit_exceeded: memory over 64 MiB"`).
    pub fn limit_exceeded(limit: LimitKind, message: impl Into<String>) -> Self {
        Error::LimitExceeded {
            limit,
            message: message.into(),
        }
    }

    /// A malformed request field.
    pub fn invalid_request(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The field and the bare message of a refused value: for
    /// `invalid_request` its own field and message (without the code
    /// prefix); for any other error its field (else `fallback`) and its
    /// whole message. For a caller that reports the refusal under its own
    /// code or position, so a code never ends up inside another's message.
    ///
    /// ```
    /// let e = toolexec::Error::invalid_request("wasm.pool_instances", "must be at least 1");
    /// assert_eq!(
    ///     e.into_field_message("request"),
    ///     ("wasm.pool_instances".to_owned(), "must be at least 1".to_owned())
    /// );
    /// ```
    pub fn into_field_message(self, fallback: &str) -> (String, String) {
        match self {
            Error::InvalidRequest { field, message } => (field, message),
            other => (
                other.field().unwrap_or(fallback).to_owned(),
                other.to_body().message,
            ),
        }
    }

    /// The failing field or path, for errors that name one
    /// (`invalid_request`, `invalid_definition`, and relayed bodies whose
    /// details carry a `field`).
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::InvalidRequest { field, .. } | Error::InvalidDefinition { field, .. } => {
                Some(field)
            }
            Error::Relayed(body) => body.details.as_ref()?.get("field")?.as_str(),
            _ => None,
        }
    }

    /// Machine-readable form: `{"code", "message", ...details}`.
    pub fn to_body(&self) -> ErrorBody {
        if let Error::Relayed(body) = self {
            return body.as_ref().clone();
        }
        let details = match self {
            Error::ValidationInput(f) | Error::ValidationOutput(f) => {
                serde_json::to_value(f.as_ref()).ok()
            }
            Error::ExecutionFailed {
                tool,
                data,
                panicked,
                ..
            } => Some(serde_json::json!({"tool": tool, "data": data, "panicked": panicked})),
            Error::LimitExceeded { limit, .. } => Some(serde_json::json!({"limit": limit})),
            Error::InvalidRequest { field, .. } => Some(serde_json::json!({"field": field})),
            Error::InvalidDefinition { tool, field, .. } => {
                Some(serde_json::json!({"tool": tool, "field": field}))
            }
            Error::NotAllowed { tool, reason } => {
                Some(serde_json::json!({"tool": tool, "reason": reason}))
            }
            Error::Denied { target, rule } => {
                Some(serde_json::json!({"target": target, "rule": rule}))
            }
            Error::Throttled {
                limit, retry_after, ..
            } => Some(match retry_after {
                Some(after) => serde_json::json!({
                    "limit": limit,
                    "retry_after_ms": after.as_millis().max(1) as u64,
                }),
                None => serde_json::json!({"limit": limit}),
            }),
            Error::InputRequired { tool, input } => {
                Some(serde_json::json!({"tool": tool, "input": input}))
            }
            Error::Timeout { tool, after } => {
                Some(serde_json::json!({"tool": tool, "after_ms": after.as_millis() as u64}))
            }
            _ => None,
        };
        ErrorBody {
            code: self.code(),
            message: self.to_string(),
            details,
        }
    }
}

/// Serializable form of an [`Error`], as the CLI and the gateway print it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable class.
    pub code: ErrorCode,
    /// Human message, starting with the code.
    pub message: String,
    /// Structured details (violations, limit, ...), when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
pub(crate) fn truncate_for_message(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_starts_with_code() {
        let errors = [
            Error::ToolNotFound { id: "a:b".into() },
            Error::execution_failed("a:b", "boom"),
            Error::backend_unavailable("mcp:x", "crashed"),
            Error::invalid_request("steps[0]", "missing"),
        ];
        for e in errors {
            assert!(
                e.to_string().starts_with(e.code().as_str()),
                "{e} should start with {}",
                e.code()
            );
        }
    }

    /// A body that crossed a boundary comes back as the same error: code,
    /// message and details intact, the code never doubled or wrapped.
    #[test]
    fn relayed_bodies_keep_their_code() {
        let original = Error::invalid_request("unit.argv", "contains a NUL byte");
        let relayed = Error::from(original.to_body());
        assert_eq!(relayed.code(), ErrorCode::InvalidRequest);
        assert_eq!(relayed.to_string(), original.to_string());
        assert_eq!(relayed.to_body(), original.to_body());
        let bare = Error::from(ErrorBody {
            code: ErrorCode::Timeout,
            message: "took too long".into(),
            details: None,
        });
        assert_eq!(bare.to_string(), "timeout: took too long");
        assert!(Error::from(Error::execution_failed("a:b", "boom").to_body()).is_tool_error());
        assert!(!relayed.is_tool_error());
    }

    #[test]
    fn code_serializes_snake_case() {
        let v = serde_json::to_value(ErrorCode::BackendUnavailable).unwrap();
        assert_eq!(v, "backend_unavailable");
    }

    #[test]
    fn limit_kind_names_match_serde() {
        use LimitKind::*;
        let all = [
            InputBytes,
            InputDepth,
            OutputBytes,
            OutputDepth,
            ChainSteps,
            WallTime,
            CpuTime,
            Memory,
            Processes,
            Output,
            Disk,
            Network,
            ToolCalls,
        ];
        let mut names = std::collections::HashSet::new();
        for kind in all {
            let v = serde_json::to_value(kind).unwrap();
            assert_eq!(v, kind.as_str(), "{kind:?}");
            assert!(names.insert(kind.as_str()), "duplicate name {kind:?}");
        }
        let e = Error::LimitExceeded {
            limit: Memory,
            message: "over 64 MiB".into(),
        };
        assert_eq!(e.to_string(), "limit_exceeded: memory over 64 MiB");
        assert_eq!(e.to_body().details.unwrap()["limit"], "memory");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "ééééé";
        let t = truncate_for_message(s, 3);
        assert_eq!(t, "é…");
    }
}
