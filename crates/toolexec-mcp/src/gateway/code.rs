//! The `execute_code` meta-tool: code mode ([`toolexec_code`]) over MCP.

use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Deserialize;
use serde_json::{Value, json};
use toolexec_code::{CodeLimits, CodeOutcome};
use toolexec_runtime::Profile;

/// How the gateway runs `execute_code` scripts: the size of its worker pool,
/// the limits a client gets when it names none, and the most it may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeModeOptions {
    /// Scripts that run at once across every connection of the gateway;
    /// more wait for a free worker (the wait counts toward their timeout).
    /// Default 16.
    pub max_concurrent: usize,
    /// Timeout when the client gives no `timeout_ms`. Default 30 s.
    pub default_timeout: Duration,
    /// Largest `timeout_ms` a client may ask for. Default 5 min.
    pub max_timeout: Duration,
    /// Tool-call budget when the client gives no `max_tool_calls`.
    /// Default 100.
    pub default_max_tool_calls: usize,
    /// Largest `max_tool_calls` a client may ask for. Default 1000.
    pub max_tool_calls: usize,
    /// Memory limit of each script's heap, in bytes. Default 64 MiB.
    pub memory_bytes: usize,
    /// Most bytes of console output plus result per script. Default 1 MiB.
    pub max_output_bytes: usize,
    /// Largest script accepted, in bytes. Default 1 MiB.
    pub max_code_bytes: usize,
    /// Where scripts run ([`toolexec_code::Placement::for_profile`]): `dev`
    /// and `standard` in process (QuickJS with enforced limits); `hardened`
    /// in a sandbox runtime selected from
    /// [`GatewayOptions::runtimes`](super::GatewayOptions::runtimes) (a
    /// separate worker process under kernel isolation). Default `standard`.
    pub profile: Profile,
}

impl Default for CodeModeOptions {
    fn default() -> Self {
        let limits = CodeLimits::default();
        CodeModeOptions {
            max_concurrent: 16,
            default_timeout: limits.timeout,
            max_timeout: Duration::from_secs(300),
            default_max_tool_calls: limits.max_tool_calls,
            max_tool_calls: 1000,
            memory_bytes: limits.memory_bytes,
            max_output_bytes: limits.max_output_bytes,
            max_code_bytes: 1 << 20,
            profile: Profile::Standard,
        }
    }
}

/// Arguments of `execute_code`, as [`CodeModeOptions::input_schema`]
/// declares them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CodeArgs {
    /// The script.
    pub(crate) code: String,
    /// Wall-time limit in milliseconds.
    #[serde(default)]
    pub(crate) timeout_ms: Option<u64>,
    /// Tool-call budget.
    #[serde(default)]
    pub(crate) max_tool_calls: Option<usize>,
    /// Tool ids or globs the script may call.
    #[serde(default)]
    pub(crate) allowed_tools: Option<Vec<String>>,
}

impl CodeModeOptions {
    /// The limits for one call: the client's values within the server's
    /// maxima, the server's defaults for the rest. A value out of range is
    /// an error (the input schema declares the ranges).
    pub(crate) fn limits(&self, args: &CodeArgs) -> Result<CodeLimits, String> {
        let bad = |m: String| format!("invalid arguments for execute_code: {m}");
        if args.code.len() > self.max_code_bytes {
            return Err(bad(format!(
                "code is {} bytes; the most accepted is {}",
                args.code.len(),
                self.max_code_bytes
            )));
        }
        let max_ms = self.max_timeout_ms();
        let timeout = match args.timeout_ms {
            None => self.default_timeout,
            Some(ms) if (1..=max_ms).contains(&ms) => Duration::from_millis(ms),
            Some(_) => {
                return Err(bad(format!("timeout_ms must be between 1 and {max_ms}")));
            }
        };
        let max_tool_calls = match args.max_tool_calls {
            None => self.default_max_tool_calls.min(self.max_tool_calls),
            Some(n) if n <= self.max_tool_calls => n,
            Some(_) => {
                return Err(bad(format!(
                    "max_tool_calls must be between 0 and {}",
                    self.max_tool_calls
                )));
            }
        };
        let allowed_tools = args.allowed_tools.clone().unwrap_or_default();
        if allowed_tools.iter().any(|p| p.trim().is_empty()) {
            return Err(bad("allowed_tools: patterns must not be empty".into()));
        }
        Ok(CodeLimits {
            timeout,
            memory_bytes: self.memory_bytes,
            max_tool_calls,
            max_output_bytes: self.max_output_bytes,
            allowed_tools,
            ..CodeLimits::default()
        })
    }

    fn max_timeout_ms(&self) -> u64 {
        u64::try_from(self.max_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// The meta-tool's description, written for a model.
    pub fn description(&self) -> String {
        format!(
            "\
Run a JavaScript script that calls several tools in one request, instead of \
one `run_tool` call per tool. Use it when a task needs many tool calls, loops, \
conditions, or combining results. The script runs in a sandbox (no file \
system, network, timers, modules or environment); the `tools` object is its \
only way out.\n\
\n\
The script is the body of an async function: use `await`, and `return` the \
result (any JSON value; without `return` the value is null). Inside it:\n\
- `await tools.run(\"ns:name\", args)` calls a tool by id and resolves to its \
JSON result; `await tools.ns.name(args)` is the same call (e.g. \
`tools.math.add({{a: 1, b: 2}})` resolves to `{{result: 3}}`; for names with \
`-` or `.` write `tools[\"ns\"][\"na-me\"](args)`). `args` must match the \
tool's input schema.\n\
- A failed call rejects with an Error whose `code` is a stable error code \
(`validation_input`, `not_allowed`, `tool_not_found`, ...) plus `message` and \
`details`: catch it with try/catch, or it ends the script as `tool_error`.\n\
- `await Promise.all([...])` runs calls concurrently.\n\
- `await tools.search(query, limit)` ranks tools: `[{{id, summary, score}}]`; \
`await tools.describe(id)` returns a tool's docs with its JSON Schemas.\n\
- `console.log/info` output is captured as `stdout`, `console.warn/error` as \
`stderr`; objects print as JSON.\n\
\n\
Types: `describe_tool` (detail `schema` or `full`) returns a `typescript` \
field declaring the tool's function with its argument and result types; find \
tools with `search_tools` first.\n\
\n\
Limits: `timeout_ms` for the whole script including its tool calls (default \
{default_timeout}, at most {max_timeout}); `max_tool_calls` (default \
{default_calls}, at most {max_calls}); memory {memory} MiB; console output \
plus result {output} KiB; `allowed_tools`: tool ids or globs (`math:*`) the \
script may call (default: every tool). A limit ends the script at once.\n\
\n\
Result: `{{status, value, stdout, stderr, tool_calls, duration_ms}}`. \
`status.kind` is `ok` (`value` holds what the script returned), \
`syntax_error` (`message`, `line`, `column`; nothing ran), `exception` \
(`message`, `stack`), `limit_exceeded` (`limit`: timeout, memory, \
tool_calls, output, stack, or workers: the code-mode workers are all busy, \
retry later) or `tool_error` (`call_index`, `tool_id`, \
`error`). Anything but `ok` is an error result whose text starts with the \
kind; `stdout`, `stderr` and the log of tool calls (`tool_calls`: each with \
`tool_id`, `ok`, `error` on failure, and `args` and `result` summarized as \
`{{bytes, sha256, preview}}`: size, SHA-256 and the first 256 bytes of their \
JSON, never the values) come back in every case, in `structuredContent`; the \
text is a short summary.\n\
\n\
Example: `const [sum, digest] = await Promise.all([tools.math.add({{a: 2, b: \
3}}), tools.hash.sha256({{text: \"hi\"}})]); console.log(\"sum\", sum.result); \
return {{sum: sum.result, hex: digest.hex}};`",
            default_timeout = ms_text(self.default_timeout.as_millis()),
            max_timeout = ms_text(self.max_timeout.as_millis()),
            default_calls = self.default_max_tool_calls,
            max_calls = self.max_tool_calls,
            memory = self.memory_bytes >> 20,
            output = self.max_output_bytes >> 10,
        )
    }

    /// The meta-tool's input schema.
    pub fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The script: the body of an async function (use await; return the result)"
                },
                "timeout_ms": {
                    "type": "integer", "minimum": 1, "maximum": self.max_timeout_ms(),
                    "default": self.default_timeout.as_millis() as u64,
                    "description": "Wall-time limit of the whole script, in milliseconds"
                },
                "max_tool_calls": {
                    "type": "integer", "minimum": 0, "maximum": self.max_tool_calls,
                    "default": self.default_max_tool_calls,
                    "description": "Most tool calls the script may make"
                },
                "allowed_tools": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "description": "Tool ids or globs (`math:*`) the script may call; default: every tool"
                }
            },
            "required": ["code"],
            "additionalProperties": false
        })
    }

    /// The meta-tool's output schema: a serialized [`CodeOutcome`].
    pub fn output_schema(error_body: Value) -> Value {
        let summary = json!({
            "type": "object",
            "description": "A JSON value summarized: its compact JSON's size, SHA-256 and first bytes",
            "properties": {
                "bytes": {"type": "integer"},
                "sha256": {"type": "string"},
                "preview": {"type": "string"}
            },
            "required": ["bytes", "sha256"]
        });
        json!({
            "type": "object",
            "properties": {
                "status": {
                    "type": "object",
                    "properties": {
                        "kind": {
                            "type": "string",
                            "enum": ["ok", "syntax_error", "exception", "limit_exceeded", "tool_error"]
                        },
                        "message": {"type": "string"},
                        "line": {"type": "integer", "description": "syntax_error: 1-based line"},
                        "column": {"type": "integer", "description": "syntax_error: 1-based column"},
                        "stack": {"type": "string", "description": "exception: the JavaScript stack"},
                        "limit": {
                            "type": "string",
                            "enum": ["timeout", "memory", "tool_calls", "output", "stack", "workers"],
                            "description": "limit_exceeded: which limit"
                        },
                        "call_index": {"type": "integer", "description": "tool_error: index into tool_calls"},
                        "tool_id": {"type": "string", "description": "tool_error: the failed tool"},
                        "error": error_body.clone()
                    },
                    "required": ["kind"]
                },
                "value": {"description": "What the script returned (status ok), else null"},
                "stdout": {"type": "string", "description": "console.log/info/debug output"},
                "stderr": {"type": "string", "description": "console.warn/error output"},
                "tool_calls": {
                    "type": "array",
                    "description": "The log: one bounded record per call (never the arguments or results themselves)",
                    "items": {
                        "type": "object",
                        "properties": {
                            "tool_id": {"type": "string"},
                            "args": summary.clone(),
                            "ok": {"type": "boolean"},
                            "result": summary,
                            "error": error_body,
                            "duration_ms": {"type": "number"},
                            "truncated": {
                                "type": "boolean",
                                "description": "The log's byte budget was spent: no previews or error details"
                            }
                        },
                        "required": ["tool_id", "args", "ok", "duration_ms"]
                    }
                },
                "duration_ms": {"type": "number"}
            },
            "required": ["status", "stdout", "stderr", "tool_calls", "duration_ms"]
        })
    }
}

fn ms_text(ms: u128) -> String {
    if ms >= 60_000 && ms.is_multiple_of(60_000) {
        format!("{ms} ms = {} min", ms / 60_000)
    } else if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{ms} ms = {} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// Most bytes of the text summary of an `execute_code` result.
pub(crate) const SUMMARY_BYTES: usize = 4 << 10;
/// Most bytes of the returned value's JSON the summary quotes.
const SUMMARY_VALUE_BYTES: usize = 1 << 10;

/// An outcome as a `tools/call` result, sent once: `structuredContent` is
/// the outcome (what the output schema declares), and the one text block a
/// short summary of it (at most [`SUMMARY_BYTES`]): the status (for a
/// status other than `ok`, an error result whose text starts with the
/// status kind), the start of the returned value, and the sizes of the
/// rest.
pub(super) fn outcome_result(outcome: &CodeOutcome) -> CallToolResult {
    let structured = serde_json::to_value(outcome).unwrap_or(Value::Null);
    let text = ContentBlock::text(summary(outcome));
    let mut r = if outcome.status.is_ok() {
        CallToolResult::success(vec![text])
    } else {
        CallToolResult::error(vec![text])
    };
    r.structured_content = Some(structured);
    r
}

/// The text summary of an outcome.
fn summary(outcome: &CodeOutcome) -> String {
    let mut s = outcome
        .status
        .failure_text(None)
        .unwrap_or_else(|| "ok".to_owned());
    s.truncate(s.floor_char_boundary(SUMMARY_BYTES / 2));
    if let Some(value) = &outcome.value {
        let json = value.to_string();
        let end = json.floor_char_boundary(SUMMARY_VALUE_BYTES);
        s.push_str("\nvalue: ");
        s.push_str(&json[..end]);
        if end < json.len() {
            s.push_str(&format!("… ({} bytes)", json.len()));
        }
    }
    let truncated = outcome.tool_calls.iter().filter(|c| c.truncated).count();
    s.push_str(&format!(
        "\nstdout: {} bytes, stderr: {} bytes, tool calls: {} ({truncated} truncated records); \
         the whole outcome is the structured content",
        outcome.stdout.len(),
        outcome.stderr.len(),
        outcome.tool_calls.len(),
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> CodeArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn client_limits_stay_within_the_maxima() {
        let o = CodeModeOptions::default();
        let l = o.limits(&args(json!({"code": "1"}))).unwrap();
        assert_eq!(l.timeout, Duration::from_secs(30));
        assert_eq!(l.max_tool_calls, 100);
        assert!(l.allowed_tools.is_empty());
        let l = o
            .limits(&args(json!({"code": "1", "timeout_ms": 300000, "max_tool_calls": 1000, "allowed_tools": ["math:*"]})))
            .unwrap();
        assert_eq!(l.timeout, Duration::from_secs(300));
        assert_eq!(l.max_tool_calls, 1000);
        assert_eq!(l.allowed_tools, ["math:*"]);
        for bad in [
            json!({"code": "1", "timeout_ms": 300001}),
            json!({"code": "1", "timeout_ms": 0}),
            json!({"code": "1", "max_tool_calls": 1001}),
            json!({"code": "1", "allowed_tools": [""]}),
        ] {
            assert!(o.limits(&args(bad.clone())).is_err(), "{bad}");
        }
        let big = "x".repeat(o.max_code_bytes + 1);
        assert!(o.limits(&args(json!({"code": big}))).is_err());
    }

    #[test]
    fn description_states_the_limits() {
        let d = CodeModeOptions::default().description();
        assert!(
            d.contains("default 30000 ms = 30 s, at most 300000 ms = 5 min"),
            "{d}"
        );
        assert!(d.contains("(default 100, at most 1000)"), "{d}");
        assert!(d.contains("memory 64 MiB"), "{d}");
        assert!(d.contains("tools.run(\"ns:name\", args)"), "{d}");
    }
}
