//! Expectation helpers: each returns `Err` saying what went wrong, with
//! the outcome in brief.

use toolexec_runtime::{LimitKind, RunOutcome, RunStatus};

/// The outcome in one line: status, exit code and output tails.
pub fn brief(out: &RunOutcome) -> String {
    let tail = |s: &str| {
        let mut start = s.len().saturating_sub(300);
        while !s.is_char_boundary(start) {
            start += 1;
        }
        s[start..].to_owned()
    };
    let status = match &out.status {
        RunStatus::Failed { message } => format!("failed ({message})"),
        RunStatus::LimitExceeded { limit, message } => {
            format!("limit_exceeded {limit} ({message})")
        }
        RunStatus::Error { error } => format!("error {error:?}"),
        other => other.as_str().to_owned(),
    };
    format!(
        "[status {status}, exit {:?}, stdout {:?}, stderr {:?}]",
        out.exit_code,
        tail(&out.stdout),
        tail(&out.stderr)
    )
}

/// `Err(what + brief)` unless `cond`.
pub fn ensure(cond: bool, out: &RunOutcome, what: impl AsRef<str>) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(format!("{} {}", what.as_ref(), brief(out)))
    }
}

/// The run succeeded.
pub fn ok(out: &RunOutcome) -> Result<(), String> {
    ensure(out.is_ok(), out, "expected status ok")
}

/// stdout is exactly `expected`.
pub fn stdout_is(out: &RunOutcome, expected: &str) -> Result<(), String> {
    ensure(
        out.stdout == expected,
        out,
        format!("expected stdout {expected:?}"),
    )
}

/// Neither stdout nor stderr contains `needle`.
pub fn never(out: &RunOutcome, needle: &str) -> Result<(), String> {
    ensure(
        !out.stdout.contains(needle) && !out.stderr.contains(needle),
        out,
        format!("the output holds {needle:?}"),
    )
}

/// stdout contains `needle`.
pub fn stdout_has(out: &RunOutcome, needle: &str) -> Result<(), String> {
    ensure(
        out.stdout.contains(needle),
        out,
        format!("stdout lacks {needle:?}"),
    )
}

/// The run ended on `limit`.
pub fn limit(out: &RunOutcome, limit: LimitKind) -> Result<(), String> {
    ensure(
        out.status.limit() == Some(limit),
        out,
        format!("expected limit_exceeded {limit}"),
    )
}

/// The run is a typed error with `code` (and, when given, details naming
/// `field`).
pub fn error(out: &RunOutcome, code: &str, field: Option<&str>) -> Result<(), String> {
    let RunStatus::Error { error } = &out.status else {
        return Err(format!("expected error {code} {}", brief(out)));
    };
    if error.code.as_str() != code {
        return Err(format!("expected error code {code}, got {error:?}"));
    }
    if !error.message.starts_with(code) {
        return Err(format!(
            "the message does not start with its code: {error:?}"
        ));
    }
    if let Some(field) = field {
        let named = error.details.as_ref().and_then(|d| d.get("field"));
        if named.and_then(|f| f.as_str()) != Some(field) {
            return Err(format!("expected details.field {field}, got {error:?}"));
        }
    }
    Ok(())
}

/// `name errno` lines of the probe's `syscalls` action.
pub fn errnos(out: &RunOutcome) -> Vec<(String, i32)> {
    out.stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, e)| Some((n.to_owned(), e.trim().parse().ok()?)))
        .collect()
}
