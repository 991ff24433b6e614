//! What a run returns.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::ErrorBody;

use crate::{LimitKind, ToolCallRecord, Unit};

/// The result of one run: the value, the output, the tool-call log and how
/// each limit was enforced. Returned for failures too, so that no captured
/// output or tool-call record is lost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// The runtime that ran the unit.
    pub runtime: String,
    /// How the run ended.
    pub status: RunStatus,
    /// The unit's result value: what a script returned, what a WASM unit or
    /// a command sent as its channel `result`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Captured stdout (lossy UTF-8; cut at the output limit).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8; cut at the output limit).
    pub stderr: String,
    /// The process exit code, for commands that exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Every tool call the unit made, in order, allowed or not: bounded
    /// records (sizes, digests and previews of the arguments and results,
    /// never the values), charged to the log's byte budget
    /// ([`crate::ToolCallLog`]).
    pub tool_calls: Vec<ToolCallRecord>,
    /// Per limit, the mechanism that enforced it (or why none could).
    pub enforcement: Vec<Enforcement>,
    /// Wall time from start to result, in milliseconds.
    pub duration_ms: f64,
}

impl RunOutcome {
    /// An outcome with nothing captured yet.
    pub fn new(runtime: impl Into<String>, status: RunStatus) -> Self {
        RunOutcome {
            runtime: runtime.into(),
            status,
            value: None,
            stdout: String::new(),
            stderr: String::new(),
            exit_code: None,
            tool_calls: Vec::new(),
            enforcement: Vec::new(),
            duration_ms: 0.0,
        }
    }

    /// The outcome of a request the runtime refused as invalid:
    /// `invalid_request` naming the failing `field`.
    pub fn invalid(runtime: &str, field: &str, message: &str) -> Self {
        RunOutcome::error(runtime, &toolexec::Error::invalid_request(field, message))
    }

    /// The outcome of a run that ended in `error` (serialized here, once,
    /// with its code).
    pub fn error(runtime: &str, error: &toolexec::Error) -> Self {
        RunOutcome::new(
            runtime,
            RunStatus::Error {
                error: error.to_body(),
            },
        )
    }

    /// The outcome of a unit kind the runtime does not run.
    pub fn unsupported(runtime: &str, unit: &Unit) -> Self {
        RunOutcome::invalid(
            runtime,
            "unit.kind",
            &format!(
                "runtime {runtime} does not run {} units",
                unit.kind().as_str()
            ),
        )
    }

    /// True when the unit finished normally (exit code 0, or a returned value).
    pub fn is_ok(&self) -> bool {
        matches!(self.status, RunStatus::Ok)
    }

    /// The mechanism reported for `limit`, if any.
    pub fn enforced_by(&self, limit: LimitKind) -> Option<&Enforcement> {
        self.enforcement.iter().find(|e| e.limit == limit)
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum RunStatus {
    /// Finished normally.
    Ok,
    /// The unit failed on its own: non-zero exit, a signal it did not get
    /// from a limit, a WASM trap, an uncaught script error.
    Failed {
        /// One line on what happened.
        message: String,
    },
    /// A limit ended the run.
    LimitExceeded {
        /// Which limit.
        limit: LimitKind,
        /// One line with the detail (the value, the mechanism).
        message: String,
    },
    /// The caller cancelled the run.
    Cancelled,
    /// The run could not happen or was ended by toolexec: the runtime is
    /// unavailable, the request is invalid, the sandbox broke the channel
    /// protocol (`invalid_request`), an internal error.
    Error {
        /// The stable error.
        error: ErrorBody,
    },
}

impl RunStatus {
    /// The limit, for [`RunStatus::LimitExceeded`].
    pub fn limit(&self) -> Option<LimitKind> {
        match self {
            RunStatus::LimitExceeded { limit, .. } => Some(*limit),
            _ => None,
        }
    }

    /// The stable status name: `ok`, `failed`, `limit_exceeded`, `cancelled`, `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed { .. } => "failed",
            RunStatus::LimitExceeded { .. } => "limit_exceeded",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error { .. } => "error",
        }
    }
}

/// How one limit was enforced in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The limit.
    pub limit: LimitKind,
    /// The mechanism (`cgroup v1 memory.limit_in_bytes`, `RLIMIT_AS`,
    /// `wasmtime fuel`, `host timer`, ...), or `not enforced: <why>`.
    pub mechanism: String,
}

impl Enforcement {
    /// A limit enforced by `mechanism`.
    pub fn by(limit: LimitKind, mechanism: impl Into<String>) -> Self {
        Enforcement {
            limit,
            mechanism: mechanism.into(),
        }
    }

    /// A limit this runtime could not enforce, and why.
    pub fn not_enforced(limit: LimitKind, why: impl AsRef<str>) -> Self {
        Enforcement {
            limit,
            mechanism: format!("not enforced: {}", why.as_ref()),
        }
    }

    /// False for [`Enforcement::not_enforced`] entries.
    pub fn is_enforced(&self) -> bool {
        !self.mechanism.starts_with("not enforced")
    }
}

impl RunOutcome {
    /// Most bytes of stderr [`RunOutcome::stderr_tail`] keeps.
    pub const STDERR_TAIL_BYTES: usize = 1000;

    /// `"; stderr: <the last STDERR_TAIL_BYTES bytes of stderr>"` (cut at a
    /// character boundary, trailing whitespace dropped), or `""` when stderr
    /// is blank: the suffix of an error message about a failed run.
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr.trim_end();
        if t.is_empty() {
            return String::new();
        }
        let mut start = t.len().saturating_sub(Self::STDERR_TAIL_BYTES);
        while !t.is_char_boundary(start) {
            start += 1;
        }
        format!("; stderr: {}", &t[start..])
    }
}

/// [`RunOutcome`] as it serializes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireOutcome {
    runtime: String,
    status: WireStatus,
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    tool_calls: Vec<ToolCallRecord>,
    #[serde(default)]
    enforcement: Vec<Enforcement>,
    duration_ms: f64,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum WireStatus {
    Ok,
    Failed { message: String },
    LimitExceeded { limit: LimitKind, message: String },
    Cancelled,
    Error { error: ErrorBody },
}

impl RunOutcome {
    /// Parses an outcome serialized elsewhere (a remote runtime server, a
    /// fleet worker); the error names the failing field.
    pub fn from_value(value: Value) -> Result<RunOutcome, String> {
        let wire: WireOutcome = serde_path_to_error::deserialize(value)
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
        let status = match wire.status {
            WireStatus::Ok => RunStatus::Ok,
            WireStatus::Failed { message } => RunStatus::Failed { message },
            WireStatus::LimitExceeded { limit, message } => {
                RunStatus::LimitExceeded { limit, message }
            }
            WireStatus::Cancelled => RunStatus::Cancelled,
            WireStatus::Error { error } => RunStatus::Error { error },
        };
        let mut outcome = RunOutcome::new(wire.runtime, status);
        outcome.value = wire.value;
        outcome.stdout = wire.stdout;
        outcome.stderr = wire.stderr;
        outcome.exit_code = wire.exit_code;
        outcome.tool_calls = wire.tool_calls;
        outcome.enforcement = wire.enforcement;
        outcome.duration_ms = wire.duration_ms;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolexec::ErrorCode;

    #[test]
    fn outcome_round_trips() {
        let mut outcome = RunOutcome::new(
            "host",
            RunStatus::LimitExceeded {
                limit: LimitKind::WallTime,
                message: "late".into(),
            },
        );
        outcome.stdout = "out".into();
        outcome.exit_code = Some(3);
        outcome.value = Some(serde_json::json!({"a": 1}));
        outcome.enforcement = vec![Enforcement::by(LimitKind::WallTime, "timer")];
        let mut call = ToolCallRecord::started("math:add", &serde_json::json!({}));
        call.fail(&ErrorBody {
            code: ErrorCode::NotAllowed,
            message: "no".into(),
            details: None,
        });
        let mut cut = call.clone();
        cut.truncate();
        outcome.tool_calls = vec![call, cut];
        outcome.duration_ms = 12.5;
        let back = RunOutcome::from_value(serde_json::to_value(&outcome).unwrap()).unwrap();
        assert_eq!(back, outcome);
        for status in [
            RunStatus::Ok,
            RunStatus::Cancelled,
            RunStatus::Failed {
                message: "x".into(),
            },
        ] {
            let o = RunOutcome::new("r", status);
            assert_eq!(
                RunOutcome::from_value(serde_json::to_value(&o).unwrap()).unwrap(),
                o
            );
        }
    }

    #[test]
    fn bad_outcome_names_the_field() {
        let err = RunOutcome::from_value(serde_json::json!({
            "runtime": "r", "status": {"status": "weird"}, "duration_ms": 1.0
        }))
        .unwrap_err();
        assert!(err.starts_with("status"), "{err}");
    }
}
