//! How an execution ended: [`CodeOutcome`], its [`CodeStatus`] and the
//! [`CodeLimit`] that stopped it, the one result of code mode wherever the
//! script ran.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::{ErrorBody, LimitKind};

/// Which limit ended an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeLimit {
    /// [`CodeLimits::timeout`](crate::CodeLimits::timeout) passed (also: the script awaited something
    /// that could never settle, or the caller dropped the execution).
    Timeout,
    /// [`CodeLimits::memory_bytes`](crate::CodeLimits::memory_bytes) was reached.
    Memory,
    /// More than [`CodeLimits::max_tool_calls`](crate::CodeLimits::max_tool_calls) tool calls.
    ToolCalls,
    /// Console output plus result passed [`CodeLimits::max_output_bytes`](crate::CodeLimits::max_output_bytes).
    Output,
    /// The interpreter ran out of stack ([`CodeLimits::max_stack_bytes`](crate::CodeLimits::max_stack_bytes)).
    Stack,
    /// No worker could take the execution: every slot of the engine's pool
    /// is held by scripts stuck in long native operations past their
    /// deadlines, or [`MAX_QUEUED_PER_WORKER`](crate::MAX_QUEUED_PER_WORKER) executions per worker
    /// already wait for one. Nothing ran; try again later.
    Workers,
}

impl CodeLimit {
    /// The stable `snake_case` name.
    pub const fn as_str(self) -> &'static str {
        match self {
            CodeLimit::Timeout => "timeout",
            CodeLimit::Memory => "memory",
            CodeLimit::ToolCalls => "tool_calls",
            CodeLimit::Output => "output",
            CodeLimit::Stack => "stack",
            CodeLimit::Workers => "workers",
        }
    }
}

impl CodeLimit {
    /// The runtime limit that stands for this one when the script runs as a
    /// unit (`None`: the stack and the pool, which have none).
    pub(crate) const fn limit_kind(self) -> Option<LimitKind> {
        match self {
            CodeLimit::Timeout => Some(LimitKind::WallTime),
            CodeLimit::Memory => Some(LimitKind::Memory),
            CodeLimit::ToolCalls => Some(LimitKind::ToolCalls),
            CodeLimit::Output => Some(LimitKind::Output),
            CodeLimit::Stack | CodeLimit::Workers => None,
        }
    }

    /// The script limit a runtime's limit verdict means: wall and CPU time
    /// both end the script as a timeout (`None`: processes, disk, network,
    /// which a script has no way to reach).
    pub(crate) const fn from_limit_kind(kind: LimitKind) -> Option<CodeLimit> {
        match kind {
            LimitKind::WallTime | LimitKind::CpuTime => Some(CodeLimit::Timeout),
            LimitKind::Memory => Some(CodeLimit::Memory),
            LimitKind::Output => Some(CodeLimit::Output),
            LimitKind::ToolCalls => Some(CodeLimit::ToolCalls),
            _ => None,
        }
    }
}

impl std::fmt::Display for CodeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an execution ended. Serializes with a stable `"kind"` tag
/// (`"ok"`, `"syntax_error"`, `"exception"`, `"limit_exceeded"`,
/// `"tool_error"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CodeStatus {
    /// The script returned; [`CodeOutcome::value`] holds the result.
    Ok,
    /// The script does not parse; nothing ran.
    SyntaxError {
        /// The parser's message.
        message: String,
        /// 1-based line in the submitted code.
        line: u32,
        /// 1-based column in the submitted code.
        column: u32,
    },
    /// The script threw (or returned a value that is not JSON). Non-`Error`
    /// throws are rendered: `throw 42` gives `"Uncaught 42"`.
    Exception {
        /// `"TypeError: x is not a function"`, `"Uncaught {\"a\":1}"`, ...
        message: String,
        /// The JavaScript stack, when the thrown value had one.
        #[serde(skip_serializing_if = "Option::is_none")]
        stack: Option<String>,
    },
    /// A limit ended the execution.
    LimitExceeded {
        /// Which limit.
        limit: CodeLimit,
        /// Human detail.
        message: String,
    },
    /// A tool call failed and the script did not catch the error.
    ToolError {
        /// Index of the failed call in [`CodeOutcome::tool_calls`].
        call_index: usize,
        /// The tool id as the script wrote it.
        tool_id: String,
        /// The pipeline's error (`not_allowed` for a tool outside
        /// [`CodeLimits::allowed_tools`](crate::CodeLimits::allowed_tools)).
        error: ErrorBody,
    },
}

impl CodeStatus {
    /// True for [`CodeStatus::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, CodeStatus::Ok)
    }

    /// The limit, for [`CodeStatus::LimitExceeded`].
    pub fn limit(&self) -> Option<CodeLimit> {
        match self {
            CodeStatus::LimitExceeded { limit, .. } => Some(*limit),
            _ => None,
        }
    }

    /// One human line (plus a stack or details when there are any) starting
    /// with the status kind, or `None` for [`CodeStatus::Ok`]. `source`
    /// names the script (a file name) in syntax errors as `source:line:col`.
    ///
    /// ```
    /// use toolexec_code::CodeStatus;
    /// let s = CodeStatus::SyntaxError { message: "unexpected token".into(), line: 2, column: 5 };
    /// assert_eq!(s.failure_text(Some("a.js")).unwrap(), "syntax_error: a.js:2:5: unexpected token");
    /// assert_eq!(s.failure_text(None).unwrap(), "syntax_error: line 2, column 5: unexpected token");
    /// assert!(CodeStatus::Ok.failure_text(None).is_none());
    /// ```
    pub fn failure_text(&self, source: Option<&str>) -> Option<String> {
        Some(match self {
            CodeStatus::Ok => return None,
            CodeStatus::SyntaxError {
                message,
                line,
                column,
            } => match source {
                Some(src) => format!("syntax_error: {src}:{line}:{column}: {message}"),
                None => format!("syntax_error: line {line}, column {column}: {message}"),
            },
            CodeStatus::Exception { message, stack } => match stack.as_deref().map(str::trim_end) {
                Some(stack) if !stack.is_empty() => format!("exception: {message}\n{stack}"),
                _ => format!("exception: {message}"),
            },
            CodeStatus::LimitExceeded { limit, message } => {
                format!("limit_exceeded: {limit}: {message}")
            }
            CodeStatus::ToolError {
                call_index,
                tool_id,
                error,
            } => {
                let mut s = format!(
                    "tool_error: call {call_index} ({tool_id}) failed: {}",
                    error.message
                );
                if let Some(d) = &error.details {
                    s.push_str(&format!("\ndetails: {d}"));
                }
                s
            }
        })
    }
}

/// One tool call made by a script, in call order: the same record as a
/// sandboxed unit's (a call still running when the execution ended is
/// recorded as `cancelled`).
pub use toolexec_runtime::ToolCallRecord;

/// The result of one execution. Always carries the tool-call log and the
/// output captured so far, whatever the status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeOutcome {
    /// How it ended.
    pub status: CodeStatus,
    /// The returned value as JSON, when `status` is [`CodeStatus::Ok`].
    pub value: Option<Value>,
    /// `console.log/info/debug` output, one line per call.
    pub stdout: String,
    /// `console.warn/error` output, one line per call.
    pub stderr: String,
    /// Every tool call, in call order: bounded records (sizes, digests and
    /// previews of the arguments and results, never the values) within the
    /// log's byte budget ([`toolexec_runtime::ToolCallLog`]).
    pub tool_calls: Vec<ToolCallRecord>,
    /// Wall time from the call to [`CodeEngine::execute`](crate::CodeEngine::execute) until the outcome,
    /// in milliseconds.
    pub duration_ms: f64,
}

impl CodeOutcome {
    pub(crate) fn status_only(status: CodeStatus, duration: Duration) -> Self {
        CodeOutcome {
            status,
            value: None,
            stdout: String::new(),
            stderr: String::new(),
            tool_calls: Vec::new(),
            duration_ms: duration.as_secs_f64() * 1000.0,
        }
    }
}
