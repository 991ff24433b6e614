//! What a script unit reports as its run's value, and how the host reads
//! the [`RunOutcome`] of any runtime (the sandboxed worker,
//! [`crate::InProcessRuntime`]) back into the [`CodeOutcome`] code mode
//! returns everywhere.
//!
//! What the sandbox says is trusted only for what it cannot lie about to
//! its advantage: the script's status, value and console output. The tool
//! calls come from the host's own log ([`RunOutcome::tool_calls`]), and a
//! sandbox-level ending (deadline, memory, output, a broken protocol) is
//! mapped onto [`CodeStatus`] by the host.

use serde::Deserialize;
use serde_json::Value as Json;
use toolexec::{ErrorBody, ErrorCode};
use toolexec_runtime::{RunOutcome, RunStatus};

use crate::{CodeLimit, CodeLimits, CodeOutcome, CodeStatus, ToolCallRecord};

/// The value a script unit reports as its run's [`RunOutcome::value`]: the
/// [`CodeOutcome`] JSON without its tool calls, which the host logs itself
/// (so the calls' arguments and results never count against the report).
pub(crate) fn report(outcome: &mut CodeOutcome) -> Json {
    outcome.tool_calls.clear();
    serde_json::to_value(&*outcome).unwrap_or(Json::Null)
}

/// What the worker reports; everything else about the run comes from the host.
#[derive(Deserialize)]
struct Reported {
    status: CodeStatus,
    #[serde(default)]
    value: Option<Json>,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
}

/// Rebuilds the [`CodeOutcome`] of a script run as a unit. `Err` when the run never
/// started (the runtime is `none`: selection or validation failed).
pub fn outcome_from_run(run: RunOutcome, limits: &CodeLimits) -> Result<CodeOutcome, ErrorBody> {
    // The host's log, never the sandbox's word.
    let tool_calls: Vec<ToolCallRecord> = run.tool_calls.clone();
    let reported = run.value.clone().map(serde_json::from_value::<Reported>);
    let mut outcome = CodeOutcome {
        status: CodeStatus::Ok,
        value: None,
        stdout: String::new(),
        stderr: String::new(),
        tool_calls,
        duration_ms: run.duration_ms,
    };
    let exception = |message: String| CodeStatus::Exception {
        message,
        stack: None,
    };
    let limit = |limit: CodeLimit, message: String| CodeStatus::LimitExceeded { limit, message };
    outcome.status = match (&run.status, reported) {
        // A runtime that reports the script's own failure as the run's
        // (in_process) sends the full outcome too: keep its kind and output.
        (RunStatus::Failed { .. }, Some(Ok(r))) if !r.status.is_ok() => {
            outcome.stdout = r.stdout;
            outcome.stderr = r.stderr;
            check_tool_error(r.status, &outcome.tool_calls)
        }
        // A limit the host enforced stays the host's verdict; the output
        // captured before it is the worker's.
        (RunStatus::LimitExceeded { .. }, Some(Ok(r))) if !r.status.is_ok() => {
            outcome.stdout = r.stdout;
            outcome.stderr = r.stderr;
            host_limit(&run)
        }
        (RunStatus::Ok, Some(Ok(r))) => {
            outcome.stdout = r.stdout;
            outcome.stderr = r.stderr;
            outcome.value = if r.status.is_ok() { r.value } else { None };
            check_tool_error(r.status, &outcome.tool_calls)
        }
        (RunStatus::Ok, Some(Err(e))) => exception(format!(
            "sandbox error: the worker's result is not a code outcome: {e}"
        )),
        (RunStatus::Ok, None) => exception(format!(
            "sandbox error: the worker exited without a result{}",
            run.stderr_tail()
        )),
        (RunStatus::LimitExceeded { .. }, _) => host_limit(&run),
        (RunStatus::Cancelled, _) => limit(
            CodeLimit::Timeout,
            "the execution was cancelled by its caller".into(),
        ),
        (RunStatus::Failed { message }, _) => {
            if run.stderr.contains("memory allocation of") {
                limit(
                    CodeLimit::Memory,
                    format!(
                        "the sandboxed worker ran out of memory (limit {} bytes of heap): {message}",
                        limits.memory_bytes
                    ),
                )
            } else {
                exception(format!(
                    "sandbox error: the worker failed: {message}{}",
                    run.stderr_tail()
                ))
            }
        }
        (RunStatus::Error { error }, _) if run.runtime == "none" => return Err(error.clone()),
        (RunStatus::Error { error }, _) => exception(format!("sandbox error: {}", error.message)),
    };
    limit_output(&mut outcome, limits.max_output_bytes);
    Ok(outcome)
}

/// Holds the reported console output and value to the caller's
/// `max_output_bytes`, as the engine does (console bytes, plus the value's
/// JSON): a worker cannot return more than the caller allowed. Over it, the
/// output is cut at a character boundary, the value dropped, and the status
/// becomes `limit_exceeded: output` unless the host already ended the run
/// on a limit.
fn limit_output(outcome: &mut CodeOutcome, max: usize) {
    let console = outcome.stdout.len() + outcome.stderr.len();
    let value = outcome
        .value
        .as_ref()
        .map_or(0, |v| serde_json::to_vec(v).map_or(usize::MAX, |b| b.len()));
    if console.saturating_add(value) <= max {
        return;
    }
    let message = if console > max {
        let stdout_end = outcome.stdout.floor_char_boundary(max);
        outcome.stdout.truncate(stdout_end);
        let room = max - outcome.stdout.len();
        let stderr_end = outcome.stderr.floor_char_boundary(room);
        outcome.stderr.truncate(stderr_end);
        format!(
            "the sandbox reported {console} bytes of console output, over the limit of {max} bytes"
        )
    } else {
        format!(
            "the result ({value} bytes of JSON) plus {console} bytes of console output exceeds {max} bytes"
        )
    };
    outcome.value = None;
    if !matches!(outcome.status, CodeStatus::LimitExceeded { .. }) {
        outcome.status = CodeStatus::LimitExceeded {
            limit: CodeLimit::Output,
            message,
        };
    }
}

/// The code-mode status for a limit the runtime enforced.
fn host_limit(run: &RunOutcome) -> CodeStatus {
    let RunStatus::LimitExceeded {
        limit: kind,
        message,
    } = &run.status
    else {
        return CodeStatus::Ok;
    };
    let message = format!("sandbox ({}): {message}", run.runtime);
    match CodeLimit::from_limit_kind(*kind) {
        Some(limit) => CodeStatus::LimitExceeded { limit, message },
        None => CodeStatus::Exception {
            message: format!("sandbox limit {kind} exceeded: {message}"),
            stack: None,
        },
    }
}

/// A reported tool error must name a call the host saw fail; the sandbox
/// cannot blame (or invent) a call. Sandbox-local failures (arguments that
/// are not JSON, a non-string id) never reach the host and are kept as
/// reported when no host call carries their index.
fn check_tool_error(status: CodeStatus, calls: &[ToolCallRecord]) -> CodeStatus {
    let CodeStatus::ToolError {
        call_index,
        tool_id,
        error,
    } = status
    else {
        return status;
    };
    let local = matches!(
        error.code,
        ErrorCode::ValidationInput | ErrorCode::InvalidToolId
    );
    match calls.get(call_index) {
        Some(c) if c.tool_id == tool_id && !c.ok => CodeStatus::ToolError {
            call_index,
            tool_id,
            error: c.error.clone().unwrap_or(error),
        },
        _ if local => CodeStatus::ToolError {
            call_index,
            tool_id,
            error,
        },
        _ => CodeStatus::Exception {
            message: format!(
                "sandbox error: the worker reported a failure of tool call {call_index} ({tool_id}) that the host did not see"
            ),
            stack: None,
        },
    }
}
