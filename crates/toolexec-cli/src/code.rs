//! `toolexec code`: code mode from the command line, and the TypeScript
//! declarations shown by `tools types` and `tools describe`.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use toolexec::{CancellationToken, Error, Exec, ToolDescription};
use toolexec_code::{CodeLimits, CodeOutcome, CodeRequest, CodeRunner, CodeStatus};
use toolexec_runtime::{Profile, Runtimes};

use crate::args::{CodeArgs, CodeProfile};
use crate::commands::{
    EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE, Failure, exit_code as error_exit_code, read_capped,
    report,
};
use crate::render;

/// Largest script read from a file or stdin.
pub(crate) const MAX_SCRIPT_BYTES: u64 = 1 << 20;

/// `toolexec code FILE|-`.
pub(crate) async fn run(
    exec: &Exec,
    runtimes: &Arc<Runtimes>,
    fleet: Option<Arc<toolexec_fleet::FleetClient>>,
    args: CodeArgs,
    json: bool,
) -> Result<u8, Failure> {
    let (code, source) = if args.file == Path::new("-") {
        (
            read_capped(io::stdin().lock(), "script on stdin", MAX_SCRIPT_BYTES)?,
            "<stdin>".to_owned(),
        )
    } else {
        let file = std::fs::File::open(&args.file).map_err(|e| {
            Error::invalid_request("file", format!("cannot open {}: {e}", args.file.display()))
        })?;
        let name = args.file.display().to_string();
        let what = format!("script {name}");
        (read_capped(file, &what, MAX_SCRIPT_BYTES)?, name)
    };
    let profile = match args.profile {
        CodeProfile::Standard => Profile::Standard,
        CodeProfile::Hardened => Profile::Hardened,
    };
    let request = CodeRequest {
        code,
        limits: limits(&args),
    };
    let ran = match fleet {
        // Calls outside the worker's namespaces come back to this catalog.
        Some(fleet) => fleet
            .execute_code_with_tools(&request, profile, &CancellationToken::new(), exec.clone())
            .await
            .map_err(|e| e.to_body()),
        None => {
            // One script at a time.
            let runner = CodeRunner::new(exec.clone(), profile, Some(runtimes.clone()), 1);
            runner.run(request, &CancellationToken::new()).await
        }
    };
    let outcome = match ran {
        Ok(outcome) => outcome,
        Err(body) => return Ok(report(&body, json, error_exit_code(&body))),
    };
    if json {
        render::json(&mut io::stdout().lock(), &outcome)?;
    } else {
        print_outcome(&outcome, &source)?;
    }
    Ok(exit_code(&outcome.status))
}

/// The code-mode limits from the flags; unset flags keep the defaults.
fn limits(args: &CodeArgs) -> CodeLimits {
    let mut limits = CodeLimits::default();
    if let Some(t) = args.timeout {
        limits.timeout = t;
    }
    if let Some(m) = args.memory {
        limits.memory_bytes = m;
    }
    if let Some(n) = args.max_tool_calls {
        limits.max_tool_calls = n;
    }
    if let Some(n) = args.max_output {
        limits.max_output_bytes = n;
    }
    limits.allowed_tools = args.allow.clone();
    limits
}

/// 0 for success, 2 for a script that does not parse (bad input, like
/// malformed JSON elsewhere), 1 for everything that went wrong while it ran.
pub(crate) fn exit_code(status: &CodeStatus) -> u8 {
    match status {
        CodeStatus::Ok => EXIT_OK,
        CodeStatus::SyntaxError { .. } => EXIT_USAGE,
        _ => EXIT_TOOL_ERROR,
    }
}

/// For people: the script's stdout and stderr as they were captured, then
/// the returned value (strings raw, `null` omitted, the rest pretty JSON),
/// or on failure an `error: <kind>: ...` line on stderr.
fn print_outcome(outcome: &CodeOutcome, source: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    write_lines(&mut out, &outcome.stdout)?;
    if let Some(v) = outcome.value.as_ref().filter(|v| !v.is_null()) {
        render::value(&mut out, v)?;
    }
    out.flush()?;
    let mut err = io::stderr().lock();
    write_lines(&mut err, &outcome.stderr)?;
    if let Some(line) = failure(&outcome.status, source) {
        writeln!(err, "error: {line}")?;
    }
    Ok(())
}

fn write_lines(w: &mut impl Write, text: &str) -> io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    w.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(w)?;
    }
    Ok(())
}

/// The failure line (without `error: `), `None` for success.
fn failure(status: &CodeStatus, source: &str) -> Option<String> {
    status.failure_text(Some(source))
}

/// `tools describe --json`: the description plus the tool's TypeScript
/// declaration (schema and full detail).
#[derive(Serialize)]
pub(crate) struct Described<'a> {
    #[serde(flatten)]
    pub description: &'a ToolDescription,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub typescript: Option<String>,
}

/// `tools describe` for people: the Markdown plus a TypeScript section.
pub(crate) fn describe_markdown(d: &Described<'_>) -> String {
    let mut s = d.description.to_markdown();
    if let Some(ts) = &d.typescript {
        s.push_str("\n## TypeScript (code mode: `toolexec code`)\n```ts\n");
        s.push_str(ts);
        if !ts.ends_with('\n') {
            s.push('\n');
        }
        s.push_str("```\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolexec::{ErrorBody, ErrorCode};
    use toolexec_code::CodeLimit;

    #[test]
    fn failure_lines_name_the_kind() {
        let syntax = CodeStatus::SyntaxError {
            message: "unexpected token".into(),
            line: 2,
            column: 14,
        };
        assert_eq!(
            failure(&syntax, "a.js").unwrap(),
            "syntax_error: a.js:2:14: unexpected token"
        );
        assert_eq!(exit_code(&syntax), EXIT_USAGE);
        let limit = CodeStatus::LimitExceeded {
            limit: CodeLimit::Memory,
            message: "out of memory".into(),
        };
        assert_eq!(
            failure(&limit, "-").unwrap(),
            "limit_exceeded: memory: out of memory"
        );
        assert_eq!(exit_code(&limit), EXIT_TOOL_ERROR);
        let tool = CodeStatus::ToolError {
            call_index: 1,
            tool_id: "hash:sha256".into(),
            error: ErrorBody {
                code: ErrorCode::NotAllowed,
                message: "not_allowed: no".into(),
                details: None,
            },
        };
        assert_eq!(
            failure(&tool, "-").unwrap(),
            "tool_error: call 1 (hash:sha256) failed: not_allowed: no"
        );
        assert!(failure(&CodeStatus::Ok, "-").is_none());
        assert_eq!(exit_code(&CodeStatus::Ok), EXIT_OK);
    }
}
