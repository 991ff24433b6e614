//! Normal units: output, exit codes, stdin, environment, live output,
//! script units.

use std::collections::BTreeMap;

use serde_json::json;
use toolexec_runtime::{CommandUnit, LimitKind, RunStatus, Unit, ValueSummary};

use crate::Case;
use crate::case::Drive;
use crate::check::{self, ensure};
use crate::subject::sh;

/// A script calling `math:add` twice through the channel.
const SCRIPT: &str = r#"
const r = await tools.math.add({a: 1, b: 2});
console.log("sum", r.result);
const s = await tools.math.add({a: r.result, b: 0});
return s.result * 2;
"#;

fn script_units(s: &crate::Subject) -> Result<(), String> {
    if s.script_units {
        Ok(())
    } else {
        Err("the runtime runs no script units".into())
    }
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "echo",
            |_, _, _| Unit::command(["echo", "hello"]),
            |_, _, o| {
                check::ok(&o.outcome)?;
                check::stdout_is(&o.outcome, "hello\n")?;
                ensure(
                    o.outcome.exit_code == Some(0),
                    &o.outcome,
                    "expected exit code 0",
                )
            },
        ),
        Case::new(
            "exit_code",
            |_, _, _| sh("echo oops >&2; exit 7"),
            |_, _, o| {
                let out = &o.outcome;
                ensure(out.exit_code == Some(7), out, "expected exit code 7")?;
                ensure(
                    matches!(out.status, RunStatus::Failed { .. }),
                    out,
                    "expected status failed",
                )?;
                ensure(out.stderr == "oops\n", out, "expected stderr \"oops\\n\"")
            },
        ),
        Case::new(
            "stdin",
            |_, _, _| {
                Unit::Command(CommandUnit {
                    argv: vec!["cat".into()],
                    stdin: Some("piped\nin\n".into()),
                    ..CommandUnit::default()
                })
            },
            |_, _, o| {
                check::ok(&o.outcome)?;
                check::stdout_is(&o.outcome, "piped\nin\n")
            },
        ),
        Case::new(
            "separate_streams",
            |_, _, _| sh("echo out; echo err >&2"),
            |_, _, o| {
                check::ok(&o.outcome)?;
                check::stdout_is(&o.outcome, "out\n")?;
                ensure(
                    o.outcome.stderr == "err\n",
                    &o.outcome,
                    "expected stderr \"err\\n\"",
                )
            },
        ),
        Case::new(
            "env_and_cwd",
            |_, _, _| {
                Unit::Command(CommandUnit {
                    argv: vec!["sh".into(), "-c".into(), "echo \"$GREETING\"; pwd".into()],
                    env: BTreeMap::from([("GREETING".to_owned(), "hi there".to_owned())]),
                    cwd: Some("/tmp".into()),
                    ..CommandUnit::default()
                })
            },
            |_, _, o| {
                check::ok(&o.outcome)?;
                check::stdout_is(&o.outcome, "hi there\n/tmp\n")
            },
        ),
        Case::new(
            "missing_program_is_the_units_failure",
            |_, _, _| Unit::command(["/no/such/program"]),
            |_, _, o| {
                ensure(
                    matches!(o.outcome.status, RunStatus::Failed { .. }),
                    &o.outcome,
                    "expected status failed",
                )
            },
        ),
        Case::new(
            "every_limit_has_a_mechanism",
            |_, _, _| Unit::command(["true"]),
            |s, _, o| {
                let out = &o.outcome;
                check::ok(out)?;
                let mut enforced = vec![
                    LimitKind::WallTime,
                    LimitKind::Output,
                    LimitKind::Network,
                    LimitKind::ToolCalls,
                    LimitKind::Disk,
                    LimitKind::CpuTime,
                ];
                if s.cgroup_limits {
                    enforced.extend([LimitKind::Memory, LimitKind::Processes]);
                }
                for limit in enforced {
                    let Some(e) = out.enforced_by(limit) else {
                        return Err(format!(
                            "no enforcement reported for {limit}: {:?}",
                            out.enforcement
                        ));
                    };
                    if !e.is_enforced() {
                        return Err(format!("{limit} is not enforced: {e:?}"));
                    }
                }
                Ok(())
            },
        ),
        Case::new(
            "live_output",
            |_, _, _| sh("echo live-marker; sleep 10; echo end"),
            |_, _, o| {
                ensure(
                    o.live_before_end,
                    &o.outcome,
                    "the output sink got nothing while the unit ran",
                )
            },
        )
        .drive(Drive::LiveOutput {
            marker: "live-marker",
        }),
        Case::new(
            "script_unit",
            |_, _, _| Unit::javascript(SCRIPT),
            |_, _, o| {
                let out = &o.outcome;
                check::ok(out)?;
                let value = out.value.clone().unwrap_or_default();
                ensure(
                    value["value"] == json!(6),
                    out,
                    format!("expected value 6 in {value}"),
                )?;
                ensure(
                    value["stdout"].as_str().unwrap_or("").contains("sum 3"),
                    out,
                    format!("expected \"sum 3\" in {value}"),
                )?;
                ensure(
                    out.tool_calls.len() == 2,
                    out,
                    format!("expected 2 tool calls: {:?}", out.tool_calls),
                )?;
                ensure(
                    out.tool_calls[0].result == Some(ValueSummary::of(&json!({"result": 3.0}))),
                    out,
                    format!("first call: {:?}", out.tool_calls[0]),
                )
            },
        )
        .tools()
        .applies(script_units),
        Case::new(
            "script_unit_budget",
            |_, _, _| Unit::javascript(SCRIPT),
            |_, _, o| {
                let out = &o.outcome;
                let value = out.value.clone().unwrap_or_default();
                ensure(
                    value["status"]["limit"] == json!("tool_calls"),
                    out,
                    format!("expected the script's status limit tool_calls in {value}"),
                )?;
                ensure(
                    out.tool_calls.len() == 1 && out.tool_calls[0].ok,
                    out,
                    format!("expected one successful call logged: {:?}", out.tool_calls),
                )
            },
        )
        .tools()
        .limits(|_, l| l.max_tool_calls = 1)
        .applies(script_units),
        Case::new(
            "threads_start",
            |s, _, _| s.probe(&["threads"]),
            |_, _, o| {
                check::ok(&o.outcome)?;
                check::stdout_is(&o.outcome, "thread ok\n")
            },
        ),
    ]
}
