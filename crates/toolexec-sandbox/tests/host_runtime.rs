//! The opt-in host runtime: plain host processes with the channel.

use std::time::Duration;

use std::sync::Arc;

use toolexec::{BoxFuture, CancellationToken, DetailLevel, Error, Exec, ToolAccess};
use toolexec_runtime::{
    CommandUnit, LimitKind, Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime,
    RuntimeLimits, ToolHost, Unit,
};
use toolexec_sandbox::process::{ProcessSpec, run_process};
use toolexec_sandbox::rlimits::{Rlimit, RlimitResource};
use toolexec_sandbox::{HostRuntime, UnsandboxedOptIn};

async fn run(unit: Unit, limits: RuntimeLimits) -> RunOutcome {
    let runtime = HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed());
    let cancel = CancellationToken::new();
    let host = ToolHost::new(
        Exec::new(toolexec_testkit::catalog()),
        &limits,
        cancel.clone(),
    );
    let request = RunRequest::new(unit, Profile::Dev).with_limits(limits);
    runtime.run(request, RunContext::new(host, cancel)).await
}

/// A tool that takes a minute: its call is still running when the unit's
/// wall time ends.
struct SlowTools;

impl ToolAccess for SlowTools {
    fn call(
        &self,
        _tool_id: &str,
        _args: serde_json::Value,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<serde_json::Value, Error>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(serde_json::json!("too late"))
        })
    }
    fn search(
        &self,
        _query: &str,
        _limit: usize,
    ) -> BoxFuture<'static, Result<serde_json::Value, Error>> {
        Box::pin(async { Ok(serde_json::json!([])) })
    }
    fn describe(
        &self,
        _tool_id: &str,
        _level: DetailLevel,
    ) -> BoxFuture<'static, Result<serde_json::Value, Error>> {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

#[tokio::test]
async fn echo_stdin_and_exit_codes() {
    let out = run(Unit::command(["echo", "hello"]), RuntimeLimits::default()).await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "hello\n");
    let unit = Unit::Command(CommandUnit {
        argv: vec!["cat".into()],
        stdin: Some("from stdin".into()),
        ..CommandUnit::default()
    });
    assert_eq!(
        run(unit, RuntimeLimits::default()).await.stdout,
        "from stdin"
    );
    let out = run(
        Unit::command(["sh", "-c", "echo err >&2; exit 3"]),
        RuntimeLimits::default(),
    )
    .await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stderr, "err\n");
    assert!(matches!(out.status, RunStatus::Failed { .. }));
    let missing = run(
        Unit::command(["no-such-program-xyz"]),
        RuntimeLimits::default(),
    )
    .await;
    assert!(
        matches!(missing.status, RunStatus::Error { .. }),
        "{missing:?}"
    );
}

#[tokio::test]
async fn deadline_and_output_cap() {
    let limits = RuntimeLimits {
        wall_time: Duration::from_millis(300),
        ..RuntimeLimits::default()
    };
    let out = run(Unit::command(["sleep", "30"]), limits).await;
    assert_eq!(out.status.limit(), Some(LimitKind::WallTime));
    assert!(out.duration_ms < 10_000.0);
    let limits = RuntimeLimits {
        max_output_bytes: 1000,
        ..RuntimeLimits::default()
    };
    let out = run(Unit::command(["yes"]), limits).await;
    assert_eq!(out.status.limit(), Some(LimitKind::Output));
    assert_eq!(out.stdout.len(), 1000);
}

#[tokio::test]
async fn python_unit_calls_a_tool_over_fd_3() {
    if !toolexec_testkit::python3("python_unit_calls_a_tool_over_fd_3") {
        return;
    }
    let source = r#"
import os, json, struct, socket
s = socket.socket(fileno=int(os.environ["TOOLEXEC_CHANNEL_FD"]))
def send(o):
    b = json.dumps(o).encode(); s.sendall(struct.pack('>I', len(b)) + b)
def readn(n):
    buf = b''
    while len(buf) < n:
        buf += s.recv(n - len(buf))
    return buf
def recv():
    return json.loads(readn(struct.unpack('>I', readn(4))[0]))
send({"id": 1, "method": "hello", "protocol": "toolexec-channel", "version": 1})
assert recv()["result"]["version"] == 1
send({"id": 2, "method": "call", "tool": "math:add", "args": {"a": 40, "b": 2}})
answer = recv()
print(answer["result"]["result"])
send({"method": "result", "value": {"sum": answer["result"]["result"]}})
"#;
    let out = run(
        Unit::command(["python3", "-c", source]),
        RuntimeLimits::default(),
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "42.0\n");
    assert_eq!(out.value, Some(serde_json::json!({"sum": 42.0})));
    assert_eq!(out.tool_calls.len(), 1);
    assert_eq!(out.tool_calls[0].tool_id, "math:add");
}

#[tokio::test]
async fn output_streams_live_while_the_unit_runs() {
    let runtime = HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed());
    let limits = RuntimeLimits::default();
    let host = ToolHost::without_tools(&limits);
    let (sink, mut live) = toolexec_runtime::OutputSink::channel();
    let unit = Unit::command([
        "sh",
        "-c",
        "echo first; echo oops >&2; sleep 2; echo second",
    ]);
    let request = RunRequest::new(unit, Profile::Dev).with_limits(limits);
    let run = tokio::spawn(async move {
        runtime
            .run(
                request,
                RunContext::new(host, CancellationToken::new()).with_output(sink),
            )
            .await
    });
    // The first line arrives while the unit still sleeps.
    let first = tokio::time::timeout(Duration::from_secs(1), live.recv())
        .await
        .expect("no live output within 1 s")
        .expect("channel closed");
    assert!(
        !run.is_finished(),
        "the unit ended before its first chunk arrived"
    );
    let mut chunks = vec![first];
    let out = run.await.unwrap();
    while let Ok(chunk) = live.try_recv() {
        chunks.push(chunk);
    }
    let joined = |stream| {
        chunks
            .iter()
            .filter(|c| c.stream == stream)
            .flat_map(|c| c.bytes.clone())
            .collect::<Vec<u8>>()
    };
    assert_eq!(
        joined(toolexec_runtime::OutputStream::Stdout),
        out.stdout.as_bytes()
    );
    assert_eq!(
        joined(toolexec_runtime::OutputStream::Stderr),
        out.stderr.as_bytes()
    );
    assert_eq!(out.stdout, "first\nsecond\n");
}

#[tokio::test]
async fn a_call_in_flight_at_the_deadline_is_logged_cancelled() {
    if !toolexec_testkit::python3("a_call_in_flight_at_the_deadline_is_logged_cancelled") {
        return;
    }
    let source = r#"
import os, json, struct, socket, time
s = socket.socket(fileno=int(os.environ["TOOLEXEC_CHANNEL_FD"]))
b = json.dumps({"id": 1, "method": "call", "tool": "slow:op", "args": {"n": 7}}).encode()
s.sendall(struct.pack('>I', len(b)) + b)
time.sleep(60)
"#;
    let runtime = HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed());
    let limits = RuntimeLimits {
        wall_time: Duration::from_millis(1500),
        ..RuntimeLimits::default()
    };
    let cancel = CancellationToken::new();
    let host = ToolHost::with_tools(Arc::new(SlowTools), &limits, cancel.clone());
    let request =
        RunRequest::new(Unit::command(["python3", "-c", source]), Profile::Dev).with_limits(limits);
    let out = runtime.run(request, RunContext::new(host, cancel)).await;
    assert!(
        matches!(
            out.status,
            RunStatus::LimitExceeded {
                limit: LimitKind::WallTime,
                ..
            }
        ),
        "{out:?}"
    );
    assert_eq!(out.tool_calls.len(), 1, "{out:?}");
    let call = &out.tool_calls[0];
    assert_eq!(call.tool_id, "slow:op");
    assert_eq!(
        call.args,
        toolexec_runtime::ValueSummary::of(&serde_json::json!({"n": 7}))
    );
    assert!(!call.ok);
    assert_eq!(call.error.as_ref().unwrap().code.as_str(), "cancelled");
}

#[tokio::test]
async fn exit_code_152_is_not_a_cpu_verdict() {
    let limits = RuntimeLimits {
        cpu_time: Some(Duration::from_secs(5)),
        ..RuntimeLimits::default()
    };
    let out = run(Unit::command(["sh", "-c", "exit 152"]), limits).await;
    assert!(matches!(out.status, RunStatus::Failed { .. }), "{out:?}");
    assert_eq!(out.exit_code, Some(152));
}

#[tokio::test]
async fn descriptor_moves_survive_a_low_open_files_limit() {
    // Descriptors 0-2, the channel at 3 and one inherited at 9: a limit of
    // 16 is below the scratch range the moves use (64 and up).
    let (read, write) = std::io::pipe().unwrap();
    drop(write);
    let spec = ProcessSpec {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "ulimit -n; test -e /proc/self/fd/3 && test -e /proc/self/fd/9 && echo moved".into(),
        ],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        rlimits: vec![Rlimit {
            resource: RlimitResource::OpenFiles,
            soft: 16,
            hard: 16,
        }],
        channel: true,
        inherit: vec![(read.into(), 9)],
        ..ProcessSpec::default()
    };
    let limits = RuntimeLimits::default();
    let ctx = RunContext::new(ToolHost::without_tools(&limits), CancellationToken::new());
    let run = run_process(spec, &limits, &ctx).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "16\nmoved\n");
    assert!(run.status.unwrap().success());
}

/// Command tools on the host runtime (it enforces output capture and
/// RLIMIT_CPU): the limits come back as `limit_exceeded` with their kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_tool_limits_are_limit_exceeded() {
    use serde_json::json;
    use toolexec_runtime::{CommandTool, CommandToolDef, ProfileMap, Runtimes};
    let map = ProfileMap {
        dev: vec![HostRuntime::NAME.into()],
        ..ProfileMap::default()
    };
    let mut runtimes = Runtimes::new(map);
    runtimes.register(HostRuntime::new(
        UnsandboxedOptIn::i_understand_units_run_unsandboxed(),
    ));
    let runtimes = Arc::new(runtimes);
    let exec = toolexec::Exec::builder().build();
    let define = |id: &str, argv: &[&str], limits: RuntimeLimits| CommandToolDef {
        id: id.into(),
        description: "limit test".into(),
        input_schema: json!({"type": "object"}),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        profile: Profile::Dev,
        limits,
        ..CommandToolDef::default()
    };
    let output = RuntimeLimits {
        max_output_bytes: 4096,
        wall_time: Duration::from_secs(20),
        ..RuntimeLimits::default()
    };
    let cpu = RuntimeLimits {
        cpu_time: Some(Duration::from_secs(1)),
        wall_time: Duration::from_secs(20),
        ..RuntimeLimits::default()
    };
    CommandTool::register(
        exec.catalog(),
        define("t:yes", &["yes"], output),
        runtimes.clone(),
    )
    .unwrap();
    CommandTool::register(
        exec.catalog(),
        define("t:spin", &["sh", "-c", "while :; do :; done"], cpu),
        runtimes.clone(),
    )
    .unwrap();
    for (id, kind) in [("t:yes", "output"), ("t:spin", "cpu_time")] {
        let err = exec.run_tool(id, json!({})).await.unwrap_err();
        let body = err.to_body();
        assert_eq!(body.code.as_str(), "limit_exceeded", "{id}: {body:?}");
        assert_eq!(body.details.unwrap()["limit"], kind, "{id}");
    }
}
