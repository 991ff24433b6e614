//! The opt-in host runtime: plain host processes with the gateway.

use std::time::Duration;

use toolexec::{CancellationToken, Exec};
use toolexec_runtime::{
    CommandUnit, HostRuntime, LimitKind, Profile, RunContext, RunOutcome, RunRequest, RunStatus,
    Runtime, RuntimeLimits, ToolHost, Unit, UnsandboxedOptIn,
};

async fn run(unit: Unit, limits: RuntimeLimits) -> RunOutcome {
    let runtime = HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed());
    let cancel = CancellationToken::new();
    let host = ToolHost::new(
        Exec::new(toolexec_builtins::catalog()),
        &limits,
        cancel.clone(),
    );
    let request = RunRequest::new(unit, Profile::Dev).with_limits(limits);
    runtime
        .run(
            request,
            RunContext {
                host,
                cancel,
                output: None,
            },
        )
        .await
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
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "python3 missing");
        eprintln!("SKIPPED: python_unit_calls_a_tool_over_fd_3: python3 not found");
        return;
    }
    let source = r#"
import os, json, struct, socket
s = socket.socket(fileno=int(os.environ["TOOLEXEC_GATEWAY_FD"]))
def send(o):
    b = json.dumps(o).encode(); s.sendall(struct.pack('>I', len(b)) + b)
def readn(n):
    buf = b''
    while len(buf) < n:
        buf += s.recv(n - len(buf))
    return buf
def recv():
    return json.loads(readn(struct.unpack('>I', readn(4))[0]))
send({"id": 1, "method": "hello", "protocol": "toolexec-gateway", "version": 1})
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
