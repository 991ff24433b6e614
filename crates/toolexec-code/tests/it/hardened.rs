//! Hardened code mode through a real worker process and the real tool channel
//! protocol. The runtime here starts the worker as a plain child process
//! (the process driver of `toolexec-runtime`: descriptor 3, deadline,
//! output cap, budget stop) and is registered for the `dev` profile only,
//! because it does not isolate; the bubblewrap runtime is exercised by the
//! CLI tests. Hostile "workers" written in Python speak the protocol
//! directly to check that the host ignores their claims.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use toolexec::{Availability, BoxFuture, CancellationToken, Exec};
use toolexec_code::{
    CodeLimit, CodeLimits, CodeOutcome, CodeRequest, CodeRunner, CodeStatus, ExecCodeExt, Placement,
};
use toolexec_runtime::{
    Enforcement, LimitKind, Profile, ProfileMap, RunContext, RunOutcome, RunRequest, Runtime,
    Runtimes, Unit, UnitKind,
};
use toolexec_sandbox::process::{ProcessSpec, run_process};

/// Runs script units as `<program> <args...>` child processes (no isolation).
struct ProcessScripts {
    program: PathBuf,
    args: Vec<String>,
}

impl Runtime for ProcessScripts {
    fn name(&self) -> &str {
        "test-process"
    }
    fn isolation(&self) -> &str {
        "none (test harness: a plain child process)"
    }
    fn max_profile(&self) -> Profile {
        Profile::Dev
    }
    fn unit_kinds(&self) -> &[UnitKind] {
        &[UnitKind::Script]
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(async move {
            let Unit::Script(script) = &request.unit else {
                panic!("script units only");
            };
            let stdin = serde_json::to_vec(&json!({
                "language": script.language,
                "source": script.source,
                "limits": request.limits,
            }))
            .unwrap();
            let spec = ProcessSpec {
                program: self.program.clone(),
                args: self.args.iter().map(OsString::from).collect(),
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                stdin: Some(stdin),
                channel: true,
                ..ProcessSpec::default()
            };
            let run = run_process(spec, &request.limits, &ctx)
                .await
                .expect("spawn");
            let mut outcome = run.into_outcome(self.name(), &ctx, &request.limits, false);
            outcome.enforcement = vec![Enforcement::by(LimitKind::WallTime, "host timer")];
            outcome
        })
    }
}

fn runtimes(program: PathBuf, args: &[&str]) -> Runtimes {
    let map = ProfileMap {
        dev: vec!["test-process".into()],
        ..ProfileMap::default()
    };
    let mut r = Runtimes::new(map);
    r.register(ProcessScripts {
        program,
        args: args.iter().map(|s| s.to_string()).collect(),
    });
    r
}

fn worker() -> Runtimes {
    runtimes(
        PathBuf::from(env!("CARGO_BIN_EXE_toolexec-code-worker")),
        &["__script-worker"],
    )
}

fn exec() -> Exec {
    Exec::new(toolexec_builtins::catalog())
}

async fn hardened(r: &Runtimes, exec: &Exec, code: &str, limits: CodeLimits) -> CodeOutcome {
    let runner = CodeRunner::with_placement(
        exec.clone(),
        Placement::Runtime(Profile::Dev),
        std::sync::Arc::new(r.clone()),
        1,
    );
    runner
        .run(
            CodeRequest::new(code).with_limits(limits),
            &CancellationToken::new(),
        )
        .await
        .expect("the run starts")
}

fn quick() -> CodeLimits {
    CodeLimits {
        timeout: Duration::from_secs(10),
        ..CodeLimits::default()
    }
}

const SCRIPT: &str = r#"
const [a, b] = await Promise.all([
    tools.math.add({a: 1, b: 2}),
    tools.run("math:multiply", {a: 3, b: 4}),
]);
console.log("sum", a.result);
console.warn("careful");
const hits = await tools.search("add numbers", 3);
const doc = await tools.describe("math:add");
let caught = null;
try { await tools.math.divide({a: 1, b: 0}); } catch (e) { caught = e.code; }
return {total: a.result + b.result, found: hits.length > 0, doc: doc.id, caught};
"#;

#[tokio::test]
async fn hardened_outcome_has_the_in_process_shape() {
    let exec = exec();
    let local = exec.execute_code(SCRIPT, quick()).await;
    let remote = hardened(&worker(), &exec, SCRIPT, quick()).await;
    assert_eq!(local.status, CodeStatus::Ok, "{local:?}");
    assert_eq!(remote.status, local.status, "{remote:?}");
    assert_eq!(remote.value, local.value);
    assert_eq!(remote.stdout, local.stdout);
    assert_eq!(remote.stderr, local.stderr);
    let calls = |o: &CodeOutcome| {
        o.tool_calls
            .iter()
            .map(|c| (c.tool_id.clone(), c.args.clone(), c.ok, c.result.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&remote), calls(&local));
    assert_eq!(remote.tool_calls.len(), 3);
    // Both serialize to the same keys.
    let keys = |o: &CodeOutcome| {
        let v = serde_json::to_value(o).unwrap();
        v.as_object().unwrap().keys().cloned().collect::<Vec<_>>()
    };
    assert_eq!(keys(&remote), keys(&local));
}

#[tokio::test]
async fn hardened_failures_match_in_process_ones() {
    let exec = exec();
    let limits = CodeLimits {
        allowed_tools: vec!["math:add".into()],
        ..quick()
    };
    for code in [
        "return (",
        "throw new TypeError('nope')",
        "await tools.hash.sha256({text: 'x'})",
        "await tools.math.add({a: 'one'})",
    ] {
        let local = exec.execute_code(code, limits.clone()).await;
        let remote = hardened(&worker(), &exec, code, limits.clone()).await;
        assert_eq!(
            std::mem::discriminant(&remote.status),
            std::mem::discriminant(&local.status),
            "{code}: {remote:?} vs {local:?}"
        );
        assert_eq!(remote.tool_calls.len(), local.tool_calls.len(), "{code}");
        if let (CodeStatus::ToolError { error: r, .. }, CodeStatus::ToolError { error: l, .. }) =
            (&remote.status, &local.status)
        {
            assert_eq!(r.code, l.code, "{code}");
        }
    }
}

#[tokio::test]
async fn hostile_scripts_are_contained() {
    let exec = exec();
    let r = worker();
    let spin = hardened(
        &r,
        &exec,
        "for (;;) {}",
        CodeLimits {
            timeout: Duration::from_millis(500),
            ..quick()
        },
    )
    .await;
    assert_eq!(spin.status.limit(), Some(CodeLimit::Timeout), "{spin:?}");

    let bomb = hardened(
        &r,
        &exec,
        "const a = []; for (;;) a.push('x'.repeat(1 << 20) + a.length);",
        CodeLimits {
            memory_bytes: 16 << 20,
            ..quick()
        },
    )
    .await;
    assert_eq!(bomb.status.limit(), Some(CodeLimit::Memory), "{bomb:?}");

    let budget = hardened(
        &r,
        &exec,
        "for (let i = 0; ; i++) await tools.math.add({a: i, b: 1});",
        CodeLimits {
            max_tool_calls: 5,
            ..quick()
        },
    )
    .await;
    assert_eq!(
        budget.status.limit(),
        Some(CodeLimit::ToolCalls),
        "{budget:?}"
    );
    assert_eq!(budget.tool_calls.len(), 5);
}

/// A worker that lies: one real call, then a result claiming ten calls and
/// blaming a call the host never saw.
const LIAR: &str = r#"
import json, os, struct, sys
sys.stdin.read()
fd = int(os.environ["TOOLEXEC_CHANNEL_FD"])
def send(msg):
    data = json.dumps(msg).encode()
    os.write(fd, struct.pack(">I", len(data)) + data)
def recv():
    n = struct.unpack(">I", os.read(fd, 4))[0]
    buf = b""
    while len(buf) < n:
        buf += os.read(fd, n - len(buf))
    return json.loads(buf)
send({"id": 1, "method": "call", "tool": "math:add", "args": {"a": 1, "b": 1}})
recv()
fake = {"tool_id": "hash:sha256", "args": {}, "ok": True, "result": {"hex": "0"}, "duration_ms": 1}
send({"method": "result", "value": {
    "status": {"kind": MODE_STATUS},
    "value": 42, "stdout": "hi\n", "stderr": "",
    "tool_calls": [fake] * 10, "duration_ms": 0}})
"#;

fn python() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/python3");
    if p.is_file() {
        return Some(p);
    }
    toolexec_testkit::skip("hostile workers", "/usr/bin/python3 is missing");
    None
}

#[tokio::test]
async fn the_sandbox_claims_about_tool_calls_are_ignored() {
    let Some(py) = python() else { return };
    let exec = exec();
    let ok = LIAR.replace("MODE_STATUS", "\"ok\"");
    let r = runtimes(py.clone(), &["-c", &ok]);
    let out = hardened(&r, &exec, "ignored", quick()).await;
    assert_eq!(out.status, CodeStatus::Ok, "{out:?}");
    assert_eq!(out.value, Some(json!(42)));
    assert_eq!(out.tool_calls.len(), 1, "{:?}", out.tool_calls);
    assert_eq!(out.tool_calls[0].tool_id, "math:add");
    assert_eq!(
        out.tool_calls[0].result,
        Some(toolexec_runtime::ValueSummary::of(&json!({"result": 2.0})))
    );

    // Blaming a call the host never saw is a sandbox error, not a tool error.
    let blame = LIAR.replace(
        "MODE_STATUS",
        r#""tool_error", "call_index": 7, "tool_id": "hash:sha256", "error": {"code": "execution_failed", "message": "x"}"#,
    );
    let r = runtimes(py, &["-c", &blame]);
    let out = hardened(&r, &exec, "ignored", quick()).await;
    match &out.status {
        CodeStatus::Exception { message, .. } => {
            assert!(message.contains("did not see"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(out.tool_calls.len(), 1);
}

#[tokio::test]
async fn a_worker_past_the_budget_is_stopped_by_the_host() {
    let Some(py) = python() else { return };
    let flood = r#"
import json, os, struct, sys
sys.stdin.read()
fd = int(os.environ["TOOLEXEC_CHANNEL_FD"])
for i in range(1, 50):
    data = json.dumps({"id": i, "method": "call", "tool": "math:add", "args": {"a": i, "b": 1}}).encode()
    os.write(fd, struct.pack(">I", len(data)) + data)
import time
time.sleep(30)
"#;
    let r = runtimes(py, &["-c", flood]);
    let limits = CodeLimits {
        max_tool_calls: 3,
        ..quick()
    };
    let started = std::time::Instant::now();
    let out = hardened(&r, &exec(), "ignored", limits).await;
    assert_eq!(out.status.limit(), Some(CodeLimit::ToolCalls), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let ok = out.tool_calls.iter().filter(|c| c.ok).count();
    assert_eq!(ok, 3, "{:?}", out.tool_calls);
}

#[tokio::test]
async fn broken_workers_become_exceptions() {
    let Some(py) = python() else { return };
    let exec = exec();
    // Exits without a result.
    let r = runtimes(
        py.clone(),
        &["-c", "import sys; sys.stderr.write('boom\\n')"],
    );
    let out = hardened(&r, &exec, "return 1", quick()).await;
    match &out.status {
        CodeStatus::Exception { message, .. } => {
            assert!(
                message.contains("without a result") && message.contains("boom"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Sends garbage frames.
    let garbage =
        "import os; os.write(int(os.environ['TOOLEXEC_CHANNEL_FD']), b'\\x00\\x00\\x00\\x03abc')";
    let r = runtimes(py, &["-c", garbage]);
    let out = hardened(&r, &exec, "return 1", quick()).await;
    match &out.status {
        CodeStatus::Exception { message, .. } => {
            assert!(message.contains("channel"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_runtime_is_an_error_not_an_outcome() {
    let r = Runtimes::new(ProfileMap::default());
    let runner = CodeRunner::new(exec(), Profile::Hardened, Some(std::sync::Arc::new(r)), 1);
    let err = runner
        .run(
            CodeRequest::new("return 1").with_limits(quick()),
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code.as_str(), "backend_unavailable");
    assert!(err.message.contains("hardened"), "{}", err.message);
}

#[tokio::test]
async fn large_tool_results_do_not_fill_the_result_frame() {
    // 4 calls of 300 kB arguments and 300 kB results: 2.4 MB of call log,
    // more than one channel frame, but the script's output is small.
    let script = r#"
        const s = "x".repeat(300000);
        let n = 0;
        for (let i = 0; i < 4; i++) n += (await tools.text.case({text: s, to: "upper"})).text.length;
        console.log("done");
        return n;
    "#;
    let out = hardened(&worker(), &exec(), script, quick()).await;
    assert_eq!(out.status, CodeStatus::Ok, "{:?}", out.status);
    assert_eq!(out.value, Some(json!(1_200_000)));
    assert_eq!(out.stdout, "done\n");
    assert_eq!(out.tool_calls.len(), 4);
    assert!(out.tool_calls.iter().all(|c| c.ok));
}

#[test]
fn the_worker_sends_no_call_log() {
    use toolexec_code::worker::result_value;
    let big = json!({"text": "x".repeat(600_000)});
    let mut call = toolexec_code::ToolCallRecord::started("text:case", &big);
    call.finish(&Ok(big), std::time::Duration::from_millis(1));
    let outcome = CodeOutcome {
        status: CodeStatus::Ok,
        value: Some(json!(7)),
        stdout: "hi\n".into(),
        stderr: String::new(),
        tool_calls: vec![call; 2],
        duration_ms: 1.0,
    };
    let sent = result_value(outcome);
    assert_eq!(sent["status"]["kind"], "ok", "{}", sent["status"]);
    assert_eq!(sent["value"], 7);
    assert_eq!(sent["stdout"], "hi\n");
    assert_eq!(sent["tool_calls"], json!([]));

    // Output that cannot fit one frame is cut, and says so.
    let outcome = CodeOutcome {
        status: CodeStatus::Ok,
        value: Some(json!(7)),
        stdout: "\u{e9}".repeat(1 << 20),
        stderr: String::new(),
        tool_calls: Vec::new(),
        duration_ms: 1.0,
    };
    let sent = result_value(outcome);
    assert_eq!(sent["status"]["limit"], "output", "{}", sent["status"]);
    assert_eq!(sent["value"], json!(null));
    let stdout = sent["stdout"].as_str().unwrap();
    assert!(!stdout.is_empty() && stdout.len() < 1 << 20);
    assert!(serde_json::to_vec(&sent).unwrap().len() < 1 << 20);
}

/// A report as a compromised worker might forge it.
fn forged(stdout: &str, stderr: &str, value: serde_json::Value) -> RunOutcome {
    let mut run = RunOutcome::new("forged", toolexec_runtime::RunStatus::Ok);
    run.value = Some(json!({
        "status": {"kind": "ok"},
        "value": value,
        "stdout": stdout,
        "stderr": stderr,
    }));
    run
}

#[test]
fn forged_oversized_reports_are_held_to_the_callers_limit() {
    use toolexec_code::outcome_from_run;
    let limits = CodeLimits {
        max_output_bytes: 1001,
        ..CodeLimits::default()
    };
    // Console output over the limit: cut at a character boundary (2-byte
    // characters, odd limit), the value dropped.
    let run = forged(&"\u{e9}".repeat(1500), "err\n", json!("v"));
    let out = outcome_from_run(run, &limits).unwrap();
    assert_eq!(
        out.status.limit(),
        Some(CodeLimit::Output),
        "{:?}",
        out.status
    );
    assert_eq!(out.stdout, "\u{e9}".repeat(500));
    assert_eq!(out.stderr, "e", "the one byte left");
    assert_eq!(out.value, None);
    // Small output, oversized value.
    let run = forged("hi\n", "", json!("v".repeat(5000)));
    let out = outcome_from_run(run, &limits).unwrap();
    assert_eq!(
        out.status.limit(),
        Some(CodeLimit::Output),
        "{:?}",
        out.status
    );
    assert_eq!(out.stdout, "hi\n");
    assert_eq!(out.value, None);
    // Within the limit: kept as reported.
    let run = forged("hi\n", "warn\n", json!("v".repeat(900)));
    let out = outcome_from_run(run, &limits).unwrap();
    assert_eq!(out.status, CodeStatus::Ok, "{:?}", out.status);
    assert_eq!(out.value, Some(json!("v".repeat(900))));
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("hi\n", "warn\n")
    );
}

#[test]
fn worker_input_is_checked() {
    use toolexec_code::worker::read_input;
    let ok = read_input(&br#"{"language": "javascript", "source": "return 1"}"#[..]).unwrap();
    assert_eq!(ok.source, "return 1");
    for bad in [
        &b"not json"[..],
        br#"{"language": "python", "source": "1"}"#,
        br#"{"language": "javascript"}"#,
        br#"{"language": "javascript", "source": "1", "limits": {"wall_time": "soon"}}"#,
    ] {
        let e = read_input(bad).unwrap_err().to_string();
        assert!(e.starts_with("invalid_request: stdin"), "{e}");
    }
}
