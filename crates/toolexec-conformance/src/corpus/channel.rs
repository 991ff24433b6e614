//! Tool calls through the sandbox↔host channel: calls, the budget, the
//! allowlist, forged frames, the result.

use serde_json::{Value, json};
use toolexec_runtime::{Unit, ValueSummary};

use crate::check::{self, ensure};
use crate::probe::{frame, hex};
use crate::{Case, Subject};

/// The probe writing `bytes` to the channel, printing `reads` answers,
/// then sleeping `pause` seconds.
fn channel(s: &Subject, bytes: &[u8], reads: usize, pause: u32) -> Unit {
    s.probe(&[
        "channel".to_owned(),
        hex(bytes),
        reads.to_string(),
        pause.to_string(),
    ])
}

fn call(id: u64, tool: &str) -> Value {
    json!({"id": id, "method": "call", "tool": tool, "args": {"a": id, "b": 2}})
}

fn calls(n: u64, tool: &str) -> Vec<u8> {
    (1..=n).flat_map(|i| frame(&call(i, tool))).collect()
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "channel_tool_call",
            |s, _, _| channel(s, &calls(1, "math:add"), 1, 0),
            |_, _, o| {
                let out = &o.outcome;
                check::ok(out)?;
                check::stdout_has(out, r#""id":1"#)?;
                ensure(
                    out.tool_calls.len() == 1 && out.tool_calls[0].ok,
                    out,
                    format!("calls: {:?}", out.tool_calls),
                )?;
                ensure(
                    out.tool_calls[0].result == Some(ValueSummary::of(&json!({"result": 3.0}))),
                    out,
                    format!("call result: {:?}", out.tool_calls[0]),
                )
            },
        )
        .tools(),
        Case::new(
            "channel_budget_ends_the_run",
            |s, _, _| channel(s, &calls(5, "math:add"), 5, 10),
            |_, _, o| {
                let out = &o.outcome;
                check::limit(out, toolexec_runtime::LimitKind::ToolCalls)?;
                let ok = out.tool_calls.iter().filter(|c| c.ok).count();
                ensure(
                    ok == 2,
                    out,
                    format!(
                        "{ok} calls succeeded under a budget of 2: {:?}",
                        out.tool_calls
                    ),
                )
            },
        )
        .tools()
        .limits(|_, l| l.max_tool_calls = 2),
        Case::new(
            "channel_allowlist_refuses_other_tools",
            |s, _, _| channel(s, &calls(1, "math:add"), 1, 0),
            |_, _, o| {
                let out = &o.outcome;
                check::stdout_has(out, "not_allowed")?;
                let refused = out
                    .tool_calls
                    .first()
                    .and_then(|c| c.error.as_ref())
                    .map(|e| e.code.as_str());
                ensure(
                    refused == Some("not_allowed"),
                    out,
                    format!("calls: {:?}", out.tool_calls),
                )
            },
        )
        .tools()
        .limits(|_, l| l.allowed_tools = vec!["text:*".into()]),
        Case::new(
            "channel_malformed_frame_ends_the_run",
            |s, _, _| {
                let mut bytes = 5u32.to_be_bytes().to_vec();
                bytes.extend(b"{nope");
                channel(s, &bytes, 0, 10)
            },
            |_, _, o| {
                check::error(&o.outcome, "invalid_request", None)?;
                check::ensure(
                    format!("{:?}", o.outcome.status).contains("malformed"),
                    &o.outcome,
                    "the error does not say the frame is malformed",
                )
            },
        )
        .tools(),
        Case::new(
            "channel_oversized_frame_ends_the_run",
            |s, _, _| {
                let mut bytes = (1u32 << 30).to_be_bytes().to_vec();
                bytes.extend([b'x'; 1024]);
                channel(s, &bytes, 0, 10)
            },
            |_, _, o| {
                check::error(&o.outcome, "invalid_request", None)?;
                check::ensure(
                    format!("{:?}", o.outcome.status).contains("maximum"),
                    &o.outcome,
                    "the error does not name the frame maximum",
                )
            },
        )
        .tools(),
        Case::new(
            "channel_result_is_the_value",
            |s, _, _| {
                channel(
                    s,
                    &frame(&json!({"method": "result", "value": {"answer": 42}})),
                    0,
                    0,
                )
            },
            |_, _, o| {
                check::ok(&o.outcome)?;
                ensure(
                    o.outcome.value == Some(json!({"answer": 42})),
                    &o.outcome,
                    format!("value {:?}", o.outcome.value),
                )
            },
        )
        .tools(),
    ]
}
