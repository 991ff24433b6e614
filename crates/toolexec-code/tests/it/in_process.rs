//! The `in_process` runtime: script units in this process's QuickJS
//! engine, selected through the registry, with the host's tool budget,
//! allowlist and log, and its outcome readable by
//! `outcome_from_run`.

use std::time::{Duration, Instant};

use serde_json::json;
use toolexec::{CancellationToken, ErrorCode, Exec};
use toolexec_code::{
    CodeLimit, CodeLimits, CodeOutcome, CodeRequest, CodeRunner, CodeStatus, ExecCodeExt,
    InProcessRuntime, Placement, outcome_from_run,
};
use toolexec_runtime::{
    LimitKind, NetworkPolicy, Profile, ProfileMap, RunContext, RunOutcome, RunRequest, RunStatus,
    Runtime, RuntimeLimits, Runtimes, ToolHost, Unit, UnitKind, ValueSummary,
};

fn exec() -> Exec {
    Exec::new(toolexec_builtins::catalog())
}

/// A registry with only `in_process`, mapped to `profile`.
fn runtimes_for(profile: Profile) -> Runtimes {
    let mut map = ProfileMap {
        dev: vec![],
        standard: vec![],
        hardened: vec![],
    };
    map.candidates_mut(profile)
        .push(InProcessRuntime::NAME.into());
    let mut runtimes = Runtimes::new(map);
    runtimes.register(InProcessRuntime::new(2));
    runtimes
}

/// Code mode through `runtimes` for `profile` (a runner placed there).
async fn execute_code_with_profile(
    runtimes: &Runtimes,
    exec: &Exec,
    code: &str,
    limits: CodeLimits,
    profile: Profile,
    cancel: CancellationToken,
) -> Result<CodeOutcome, toolexec::ErrorBody> {
    let runner = CodeRunner::with_placement(
        exec.clone(),
        Placement::Runtime(profile),
        std::sync::Arc::new(runtimes.clone()),
        1,
    );
    let request = CodeRequest::new(code).with_limits(limits);
    runner.run(request, &cancel).await
}

async fn run(source: &str, limits: RuntimeLimits) -> RunOutcome {
    let request = RunRequest::new(Unit::javascript(source), Profile::Standard).with_limits(limits);
    runtimes_for(Profile::Standard)
        .run(request, Some(&exec()), CancellationToken::new())
        .await
}

fn error_field(outcome: &RunOutcome) -> (ErrorCode, String) {
    let RunStatus::Error { error } = &outcome.status else {
        panic!("not an error: {outcome:?}")
    };
    let field = error.details.as_ref().unwrap()["field"].as_str().unwrap();
    (error.code, field.to_owned())
}

#[tokio::test]
async fn runs_a_script_with_the_hosts_tools_under_standard() {
    let run = run(
        "console.log('adding'); console.error('warn'); return (await tools.math.add({a:1,b:2})).result",
        RuntimeLimits::default(),
    )
    .await;
    assert!(run.is_ok(), "{run:?}");
    assert_eq!(run.runtime, "in_process");
    assert_eq!(run.stdout, "adding\n");
    assert_eq!(run.stderr, "warn\n");
    assert_eq!(run.tool_calls.len(), 1, "{run:?}");
    assert!(run.tool_calls[0].ok);
    assert_eq!(
        run.tool_calls[0].result,
        Some(ValueSummary::of(&json!({"result": 3.0})))
    );
    // Every limit is accounted for, mechanism or reason.
    for kind in [
        LimitKind::WallTime,
        LimitKind::CpuTime,
        LimitKind::Memory,
        LimitKind::Processes,
        LimitKind::Output,
        LimitKind::Disk,
        LimitKind::Network,
        LimitKind::ToolCalls,
    ] {
        assert!(run.enforced_by(kind).is_some(), "{kind}: {run:?}");
    }
    for kind in [LimitKind::Processes, LimitKind::Disk, LimitKind::Network] {
        let e = run.enforced_by(kind).unwrap();
        assert!(
            e.mechanism.contains("no such capability in the engine"),
            "{e:?}"
        );
    }

    // The value is the worker's shape: the hardened reader rebuilds the
    // same outcome as code mode run directly.
    let code = outcome_from_run(run, &CodeLimits::default()).unwrap();
    assert_eq!(code.status, CodeStatus::Ok);
    assert_eq!(code.value, Some(json!(3)));
    assert_eq!(code.tool_calls.len(), 1);
    assert_eq!(code.stdout, "adding\n");
    let direct = exec()
        .execute_code(
            "console.log('adding'); console.error('warn'); return (await tools.math.add({a:1,b:2})).result",
            CodeLimits::default(),
        )
        .await;
    assert_eq!(
        (
            &direct.status,
            &direct.value,
            &direct.stdout,
            &direct.stderr
        ),
        (&code.status, &code.value, &code.stdout, &code.stderr)
    );
}

#[tokio::test]
async fn code_mode_under_standard_gets_its_own_limits_back() {
    let runtimes = runtimes_for(Profile::Standard);
    let limits = CodeLimits {
        max_tool_calls: 3,
        ..CodeLimits::default()
    };
    let code = execute_code_with_profile(
        &runtimes,
        &exec(),
        "const r = await tools.run('math:multiply', {a: 6, b: 7}); return r.result",
        limits,
        Profile::Standard,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(code.status, CodeStatus::Ok, "{code:?}");
    assert_eq!(code.value, Some(json!(42)));
    assert_eq!(code.tool_calls[0].tool_id, "math:multiply");
}

#[tokio::test]
async fn budget_exhaustion_ends_the_run() {
    let limits = RuntimeLimits {
        max_tool_calls: 2,
        ..RuntimeLimits::default()
    };
    // Catching the error does not help: the budget stop is uncatchable.
    let script = r#"
        console.log("start");
        for (let i = 0; i < 10; i++) {
            try { await tools.math.add({a: i, b: 1}); } catch (e) {}
        }
        return "finished";
    "#;
    let run = run(script, limits).await;
    assert_eq!(run.status.limit(), Some(LimitKind::ToolCalls), "{run:?}");
    assert_eq!(run.tool_calls.len(), 2, "{run:?}");
    assert!(run.tool_calls.iter().all(|c| c.ok));
    assert_eq!(run.stdout, "start\n");
    let code = outcome_from_run(run, &CodeLimits::default()).unwrap();
    assert_eq!(code.status.limit(), Some(CodeLimit::ToolCalls), "{code:?}");
    assert_eq!(code.tool_calls.len(), 2);
}

#[tokio::test]
async fn the_hosts_budget_is_authoritative() {
    // A host with a smaller budget than the request says: the host refuses
    // (and logs) the call past its budget, and the run ends there even
    // though the script catches the refusal. A call refused by the
    // allowlist counts too.
    let exec = exec();
    let cancel = CancellationToken::new();
    let host_limits = RuntimeLimits {
        max_tool_calls: 2,
        allowed_tools: vec!["math:*".into()],
        ..RuntimeLimits::default()
    };
    let ctx = RunContext::new(ToolHost::new(exec, &host_limits, cancel.clone()), cancel);
    let script = r#"
        try { await tools.text.case({text: "x", mode: "upper"}); } catch (e) { console.log(e.code); }
        await tools.math.add({a: 1, b: 1});
        try { await tools.math.add({a: 1, b: 1}); } catch (e) { console.log(e.code); }
        for (;;) {}
    "#;
    let request = RunRequest::new(Unit::javascript(script), Profile::Standard);
    let run = InProcessRuntime::new(1).run(request, ctx).await;
    assert_eq!(run.status.limit(), Some(LimitKind::ToolCalls), "{run:?}");
    let calls: Vec<_> = run
        .tool_calls
        .iter()
        .map(|c| (c.tool_id.as_str(), c.ok, c.error.as_ref().map(|e| e.code)))
        .collect();
    assert_eq!(
        calls,
        [
            ("text:case", false, Some(ErrorCode::NotAllowed)),
            ("math:add", true, None),
            ("math:add", false, Some(ErrorCode::LimitExceeded)),
        ],
        "{run:?}"
    );
}

#[tokio::test]
async fn an_endless_loop_hits_the_wall_time_limit() {
    let started = Instant::now();
    let limits = RuntimeLimits {
        wall_time: Duration::from_millis(1800),
        ..RuntimeLimits::default()
    };
    let run = run("console.log('spin'); for (;;) {}", limits).await;
    assert_eq!(run.status.limit(), Some(LimitKind::WallTime), "{run:?}");
    assert_eq!(run.stdout, "spin\n");
    assert!(started.elapsed() < Duration::from_secs(10));
    let code = outcome_from_run(run, &CodeLimits::default()).unwrap();
    assert_eq!(code.status.limit(), Some(CodeLimit::Timeout), "{code:?}");

    // Through code mode: the script's own timeout.
    let code = execute_code_with_profile(
        &runtimes_for(Profile::Dev),
        &exec(),
        "for (;;) {}",
        CodeLimits {
            timeout: Duration::from_millis(200),
            ..CodeLimits::default()
        },
        Profile::Dev,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(code.status.limit(), Some(CodeLimit::Timeout), "{code:?}");
}

#[tokio::test]
async fn memory_bombs_hit_the_memory_limit() {
    let limits = RuntimeLimits {
        // 8 MiB of JavaScript heap after the worker overhead is taken off.
        memory_bytes: Some(
            toolexec_code::runtime_limits_from_code(&CodeLimits {
                memory_bytes: 8 << 20,
                ..CodeLimits::default()
            })
            .memory_bytes
            .unwrap(),
        ),
        ..RuntimeLimits::default()
    };
    let run = run(
        "const a = []; for (;;) a.push('x'.repeat(1000) + a.length);",
        limits,
    )
    .await;
    assert_eq!(run.status.limit(), Some(LimitKind::Memory), "{run:?}");
    let memory = run.enforced_by(LimitKind::Memory).unwrap();
    assert!(
        memory.mechanism.contains(&(8u64 << 20).to_string()),
        "{memory:?}"
    );
}

#[tokio::test]
async fn script_failures_are_failed_with_the_detail_in_the_value() {
    let out = run("return (", RuntimeLimits::default()).await;
    let RunStatus::Failed { message } = &out.status else {
        panic!("{out:?}")
    };
    assert!(message.starts_with("syntax_error"), "{message}");
    assert_eq!(
        out.value.as_ref().unwrap()["status"]["kind"],
        "syntax_error"
    );

    let out = run("throw new TypeError('boom')", RuntimeLimits::default()).await;
    let RunStatus::Failed { message } = &out.status else {
        panic!("{out:?}")
    };
    assert!(message.contains("TypeError: boom"), "{message}");
    assert!(!message.contains('\n'), "{message}");

    // An uncaught tool error names the call.
    let out = run(
        "await tools.run('math:divide', {a: 1, b: 0})",
        RuntimeLimits::default(),
    )
    .await;
    let RunStatus::Failed { message } = &out.status else {
        panic!("{out:?}")
    };
    assert!(
        message.starts_with("tool_error: call 0 (math:divide)"),
        "{message}"
    );
    assert_eq!(out.tool_calls.len(), 1);
    assert!(!out.tool_calls[0].ok);
}

#[tokio::test]
async fn cancellation_stops_a_running_script() {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.cancel();
    });
    let request = RunRequest::new(Unit::javascript("for (;;) {}"), Profile::Standard);
    let runtimes = runtimes_for(Profile::Standard);
    let out = runtimes.run(request, Some(&exec()), cancel).await;
    assert_eq!(out.status, RunStatus::Cancelled, "{out:?}");
    // The engine is free again: the next run on the same runtime goes through.
    let request = RunRequest::new(Unit::javascript("return 1"), Profile::Standard);
    let out = runtimes
        .run(request, Some(&exec()), CancellationToken::new())
        .await;
    assert!(out.is_ok(), "{out:?}");
}

#[tokio::test]
async fn invalid_requests_name_the_field() {
    let exec = exec();
    let rt = InProcessRuntime::new(1);
    let go = |unit: Unit, limits: RuntimeLimits| {
        let host = ToolHost::new(exec.clone(), &limits, CancellationToken::new());
        let request = RunRequest::new(unit, Profile::Standard).with_limits(limits);
        rt.run(request, RunContext::new(host, CancellationToken::new()))
    };
    let python = Unit::Script(toolexec_runtime::ScriptUnit {
        language: "python".into(),
        source: "print(1)".into(),
    });
    let out = go(python, RuntimeLimits::default()).await;
    assert_eq!(
        error_field(&out),
        (ErrorCode::InvalidRequest, "unit.language".into())
    );
    let out = go(Unit::command(["true"]), RuntimeLimits::default()).await;
    assert_eq!(
        error_field(&out),
        (ErrorCode::InvalidRequest, "unit.kind".into())
    );
    let allow = RuntimeLimits {
        network: NetworkPolicy::Allow {
            hosts: vec!["example.com".into()],
        },
        ..RuntimeLimits::default()
    };
    let out = go(Unit::javascript("return 1"), allow).await;
    assert_eq!(
        error_field(&out),
        (ErrorCode::InvalidRequest, "limits.network".into())
    );
    let huge = "/*".to_owned() + &"x".repeat(9 << 20) + "*/";
    let out = go(Unit::javascript(huge), RuntimeLimits::default()).await;
    assert_eq!(
        error_field(&out),
        (ErrorCode::InvalidRequest, "unit.source".into())
    );
}

#[tokio::test]
async fn hardened_selection_refuses_it() {
    let rt = InProcessRuntime::default();
    assert_eq!(rt.max_profile(), Profile::Standard);
    assert_eq!(rt.unit_kinds(), [UnitKind::Script]);
    let runtimes = runtimes_for(Profile::Hardened);
    let err = runtimes
        .select(Profile::Hardened, UnitKind::Script)
        .err()
        .expect("in_process must not serve hardened");
    assert_eq!(err.code, ErrorCode::BackendUnavailable);
    assert!(
        err.message
            .contains("in_process: only fit for profile standard or weaker"),
        "{}",
        err.message
    );
    let request = RunRequest::new(Unit::javascript("return 1"), Profile::Hardened);
    let run = runtimes
        .run(request, Some(&exec()), CancellationToken::new())
        .await;
    assert_eq!(run.runtime, "none");
    assert_eq!(run.status.as_str(), "error");
    // Listed, but serving no profile: hardened is above its maximum.
    let info = &runtimes.list()[0];
    assert_eq!(info.name, "in_process");
    assert!(info.available);
    assert!(info.profiles.is_empty(), "{info:?}");
}

/// A script whose calls carry more than a channel frame (1 MiB) of
/// arguments and results, with little output of its own.
const BIG_TOOL_RESULTS: &str = r#"
const s = "x".repeat(300000);
let n = 0;
for (let i = 0; i < 4; i++) n += (await tools.text.case({text: s, to: "upper"})).text.length;
console.log("done");
return n;
"#;

#[tokio::test]
async fn large_tool_results_do_not_count_as_output() {
    let run = run(BIG_TOOL_RESULTS, RuntimeLimits::default()).await;
    assert!(run.is_ok(), "{:?}", run.status);
    assert_eq!(run.tool_calls.len(), 4);
    // The value is what the reader needs, not a second copy of the log.
    let value = run.value.as_ref().unwrap();
    assert!(value.get("tool_calls").is_none_or(|c| c == &json!([])));
    let code = outcome_from_run(run, &CodeLimits::default()).unwrap();
    assert_eq!(code.status, CodeStatus::Ok, "{:?}", code.status);
    assert_eq!(code.value, Some(json!(1_200_000)));
    assert_eq!(code.stdout, "done\n");
    assert_eq!(code.tool_calls.len(), 4);
}

/// A tool (here behind a forwarding host) whose own error is
/// `limit_exceeded` with `limit: "tool_calls"`, e.g. a nested run that hit
/// its budget.
struct QuotaTool;

impl toolexec::ToolAccess for QuotaTool {
    fn call(
        &self,
        _tool_id: &str,
        _args: serde_json::Value,
        _cancel: CancellationToken,
    ) -> toolexec::BoxFuture<'static, Result<serde_json::Value, toolexec::Error>> {
        Box::pin(async {
            Err(toolexec::Error::from(toolexec::ErrorBody {
                code: ErrorCode::LimitExceeded,
                message: "limit_exceeded: the upstream's own budget of 1 call is spent".into(),
                details: Some(json!({"limit": "tool_calls", "max": 1})),
            }))
        })
    }
    fn search(
        &self,
        _query: &str,
        _limit: usize,
    ) -> toolexec::BoxFuture<'static, Result<serde_json::Value, toolexec::Error>> {
        Box::pin(async { Ok(json!([])) })
    }
    fn describe(
        &self,
        tool_id: &str,
        _level: toolexec::DetailLevel,
    ) -> toolexec::BoxFuture<'static, Result<serde_json::Value, toolexec::Error>> {
        let id = tool_id.to_owned();
        Box::pin(async move { Ok(json!({"id": id})) })
    }
}

#[tokio::test]
async fn a_tools_own_tool_calls_error_is_not_the_runs_budget() {
    // The run's one call is spent on a tool whose error looks like a budget
    // refusal; only the host's own refusal ends the run.
    let limits = RuntimeLimits {
        max_tool_calls: 1,
        ..RuntimeLimits::default()
    };
    let cancel = CancellationToken::new();
    let host = ToolHost::with_tools(std::sync::Arc::new(QuotaTool), &limits, cancel.clone());
    let script = r#"
        try { await tools.run("up:quota", {}); } catch (e) { console.log(e.code, e.details.limit); }
        return "carried on";
    "#;
    let request = RunRequest::new(Unit::javascript(script), Profile::Standard).with_limits(limits);
    let run = InProcessRuntime::new(1)
        .run(request, RunContext::new(host, cancel))
        .await;
    assert!(run.is_ok(), "{run:?}");
    assert_eq!(run.stdout, "limit_exceeded tool_calls\n");
    assert_eq!(run.value.as_ref().unwrap()["value"], "carried on");
    assert_eq!(run.tool_calls.len(), 1);
    assert!(!run.tool_calls[0].ok);
}

#[tokio::test]
async fn the_hosts_budget_signal_ends_the_run_without_an_error_to_see() {
    // Past the host's lookup budget a search just comes back empty; only
    // the host's budget signal says the run is over.
    let limits = RuntimeLimits {
        max_tool_calls: 1,
        ..RuntimeLimits::default()
    };
    let cancel = CancellationToken::new();
    let host = ToolHost::new(exec(), &limits, cancel.clone());
    let request = RunRequest::new(
        Unit::javascript("for (;;) await tools.search('add numbers', 1);"),
        Profile::Standard,
    )
    .with_limits(limits);
    let run = InProcessRuntime::new(1)
        .run(request, RunContext::new(host, cancel))
        .await;
    // Not the 30 s wall time: the signal stopped it.
    assert_eq!(run.status.limit(), Some(LimitKind::ToolCalls), "{run:?}");
}
