//! The remote runtime end to end: a real server on loopback running real
//! runtimes (the opt-in host runtime; bubblewrap when available), a real
//! client runtime with the built-in catalog on the caller's side.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolexec::{Availability, CancellationToken, ErrorCode, Exec, ToolError};
use toolexec_remote::{RemoteRuntime, ServerConfig};
use toolexec_runtime::{
    CommandUnit, LimitKind, Profile, ProfileMap, RunContext, RunRequest, RunStatus, Runtime,
    RuntimeLimits, Runtimes, ToolHost, Unit,
};

use support::*;

fn catalog() -> Exec {
    Exec::new(toolexec_testkit::catalog())
}

// Multi-threaded: the first availability probe blocks its thread while the
// server (in this process) answers on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_stderr_exit_code_and_stdin_come_back() {
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let runtimes = caller_runtimes(remote.clone());
    let exec = catalog();

    let out = runtimes
        .run(
            dev(Unit::command([
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ])),
            Some(&exec),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(out.stdout, "out\n", "{out:?}");
    assert_eq!(out.stderr, "err\n");
    assert_eq!(out.exit_code, Some(3));
    assert!(matches!(out.status, RunStatus::Failed { .. }), "{out:?}");
    assert_eq!(out.runtime, "remote:host");
    // The server's runtime reports its enforcement.
    assert!(
        out.enforced_by(LimitKind::WallTime)
            .is_some_and(|e| e.is_enforced())
    );

    let unit = Unit::Command(CommandUnit {
        argv: vec!["cat".into()],
        stdin: Some("from stdin ✓".into()),
        ..CommandUnit::default()
    });
    let out = run_direct(&remote, dev(unit), &exec).await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "from stdin ✓");

    // More than one output chunk (64 KiB) arrives whole and in order.
    let out = run_direct(
        &remote,
        dev(Unit::command(["sh", "-c", "seq 1 40000"])),
        &exec,
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    let expected: String = (1..=40000).map(|i| format!("{i}\n")).collect();
    assert!(expected.len() > 64 << 10);
    assert_eq!(out.stdout, expected);
    assert_eq!(server.server.stats().runs_started, 3);
    assert_eq!(server.server.stats().runs_active, 0);
}

#[tokio::test]
async fn deadline_and_output_cap_through_the_remote_path() {
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let exec = catalog();
    let limits = RuntimeLimits {
        wall_time: Duration::from_millis(400),
        ..RuntimeLimits::default()
    };
    let started = Instant::now();
    let out = run_direct(
        &remote,
        dev(Unit::command(["sleep", "30"])).with_limits(limits),
        &exec,
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::WallTime), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));

    let limits = RuntimeLimits {
        max_output_bytes: 1000,
        ..RuntimeLimits::default()
    };
    let out = run_direct(
        &remote,
        dev(Unit::command(["yes"])).with_limits(limits),
        &exec,
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::Output), "{out:?}");
    assert_eq!(out.stdout.len(), 1000);
}

/// The unit's tool calls are answered by the caller's catalog (a tool only
/// the caller has), and both the server's and the caller's budget and
/// allowlist hold.
#[tokio::test]
async fn tool_calls_come_back_to_the_callers_catalog() {
    if !python3("tool_calls_come_back_to_the_callers_catalog") {
        return;
    }
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let exec = catalog();
    exec.catalog()
        .tool(
            "caller:secret",
            "A tool only the caller's catalog has",
            |_: serde_json::Value| async move { Ok::<_, ToolError>(json!("only-on-the-caller")) },
        )
        .unwrap();
    let script = format!(
        "{PY_CHANNEL}
a = call('math:add', {{'a': 40, 'b': 2}})
print('add', a['result']['result'])
b = call('caller:secret', {{}})
print('secret', b['result'])
c = call('hash:sha256', {{'text': 'abc'}})
print('sha', c['error']['code'])
hits = search('add numbers')
print('hits', sorted(h['id'] for h in hits['result']))
send({{'method': 'result', 'value': {{'sum': a['result']['result']}}}})
d = call('math:multiply', {{'a': 2, 'b': 3}})
print('over budget', d.get('error', {{}}).get('code'))
sys.stdout.flush()
import time; time.sleep(5)
"
    );
    // Refused calls count against the budget too: add, secret and the
    // refused sha256 spend it; multiply is past it.
    let limits = RuntimeLimits {
        max_tool_calls: 3,
        allowed_tools: vec!["math:*".into(), "caller:*".into()],
        ..RuntimeLimits::default()
    };
    let out = run_direct(
        &remote,
        dev(Unit::command(["python3", "-u", "-c", &script])).with_limits(limits),
        &exec,
    )
    .await;
    assert!(out.stdout.contains("add 42.0\n"), "{out:?}");
    assert!(
        out.stdout.contains("secret only-on-the-caller\n"),
        "{out:?}"
    );
    assert!(out.stdout.contains("sha not_allowed\n"), "{out:?}");
    assert!(out.stdout.contains("hits ['math:add'"), "{out:?}");
    // The fourth call is past the budget: the run ends there.
    assert_eq!(out.status.limit(), Some(LimitKind::ToolCalls), "{out:?}");
    assert_eq!(out.value, Some(json!({"sum": 42.0})));
    let calls: Vec<(&str, bool, Option<ErrorCode>)> = out
        .tool_calls
        .iter()
        .map(|c| (c.tool_id.as_str(), c.ok, c.error.as_ref().map(|e| e.code)))
        .collect();
    // The caller's log (what ran against its catalog), then the calls the
    // server refused itself.
    assert_eq!(
        calls,
        vec![
            ("math:add", true, None),
            ("caller:secret", true, None),
            ("hash:sha256", false, Some(ErrorCode::NotAllowed)),
            ("math:multiply", false, Some(ErrorCode::LimitExceeded)),
        ],
        "{out:?}"
    );
}

/// Calls with big arguments, forwarded and refused, leave bounded records
/// on both sides: the server keeps digests (not arguments) to tell its
/// refusals from the calls it forwarded, and sends only small records.
#[tokio::test]
async fn the_remote_log_keeps_bounded_records() {
    if !python3("the_remote_log_keeps_bounded_records") {
        return;
    }
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let exec = catalog();
    // 512 KiB arguments (within the 1 MiB channel frame): 8 forwarded
    // to the caller, 8 refused by the server's allowlist, alternating.
    let script = format!(
        "{PY_CHANNEL}
big = 'a' * (512 * 1024)
for i in range(8):
    print(call('text:word_count', {{'text': big + str(i)}})['result']['characters'])
    print(call('hash:sha256', {{'text': big + str(i)}})['error']['code'])
"
    );
    let limits = RuntimeLimits {
        max_tool_calls: 20,
        allowed_tools: vec!["text:*".into()],
        ..RuntimeLimits::default()
    };
    let out = run_direct(
        &remote,
        dev(Unit::command(["python3", "-u", "-c", &script])).with_limits(limits),
        &exec,
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(
        out.stdout,
        format!("{}\nnot_allowed\n", 512 * 1024 + 1).repeat(8)
    );
    // The caller's 8 calls, then the server's 8 refusals: none lost, none
    // counted twice.
    assert_eq!(out.tool_calls.len(), 16, "{:?}", out.tool_calls);
    assert!(
        out.tool_calls[..8]
            .iter()
            .all(|c| c.ok && c.tool_id == "text:word_count")
    );
    assert!(out.tool_calls[8..].iter().all(|c| {
        c.tool_id == "hash:sha256"
            && c.error.as_ref().map(|e| e.code) == Some(ErrorCode::NotAllowed)
    }));
    let records: Vec<serde_json::Value> = out
        .tool_calls
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    for r in &records {
        assert_eq!(r["args"]["bytes"], 512 * 1024 + 12, "{r}");
    }
    let retained: usize = records.iter().map(|r| r.to_string().len()).sum();
    assert!(retained < 16 << 10, "{retained} bytes of log");
}

/// A server that forwards more than the caller allows (a server with a
/// bigger budget than the caller's) still cannot spend the caller's tools:
/// the caller's own host refuses.
#[tokio::test]
async fn the_callers_host_enforces_its_own_budget_and_allowlist() {
    if !python3("the_callers_host_enforces_its_own_budget_and_allowlist") {
        return;
    }
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let exec = catalog();
    let script = format!(
        "{PY_CHANNEL}
print('a', call('math:add', {{'a': 1, 'b': 2}}).get('error', {{}}).get('code'))
print('b', call('text:case', {{'text': 'a b', 'to': 'snake'}}).get('error', {{}}).get('code'))
"
    );
    // The request the server gets allows everything, 100 calls; the
    // caller's host allows only `text:*` and 2 calls (its refusal of
    // `math:add` counts as one).
    let request = dev(Unit::command(["python3", "-c", &script]));
    let caller_limits = RuntimeLimits {
        max_tool_calls: 2,
        allowed_tools: vec!["text:*".into()],
        ..RuntimeLimits::default()
    };
    let cancel = CancellationToken::new();
    let host = ToolHost::new(exec.clone(), &caller_limits, cancel.clone());
    let out = remote
        .run(
            request,
            RunContext {
                host,
                cancel,
                output: None,
            },
        )
        .await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "a not_allowed\nb None\n", "{out:?}");
    assert_eq!(out.tool_calls.len(), 2);
    assert_eq!(
        out.tool_calls[0].error.as_ref().map(|e| e.code),
        Some(ErrorCode::NotAllowed)
    );
    assert!(out.tool_calls[1].ok);
}

fn alive(pid: i32) -> bool {
    // A zombie still has /proc/<pid>; a reaped process does not.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

async fn wait_for_pid(path: &std::path::Path) -> i32 {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the unit never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sleeper(dir: &std::path::Path) -> Unit {
    let pid_file = dir.join("pid");
    Unit::command([
        "sh".to_string(),
        "-c".into(),
        format!(
            "echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 30",
            pid_file.display()
        ),
    ])
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolexec-remote-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn until_gone(pid: i32, what: &str) {
    let started = Instant::now();
    while alive(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: unit {pid} still running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_caller_that_disconnects_mid_run_stops_the_unit() {
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let exec = catalog();
    let dir = temp_dir("drop");
    let request = dev(sleeper(&dir));
    let task = {
        let remote = remote.clone();
        tokio::spawn(async move { run_direct(&remote, request, &exec).await })
    };
    let pid = wait_for_pid(&dir.join("pid")).await;
    assert!(alive(pid));
    assert_eq!(server.server.stats().runs_active, 1);
    // Dropping the caller's future closes the connection.
    task.abort();
    until_gone(pid, "after the caller dropped the run").await;
    let started = Instant::now();
    while server.server.stats().runs_active != 0 {
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.server.stats().runs_abandoned, 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn cancelling_the_run_stops_the_remote_unit() {
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let exec = catalog();
    let dir = temp_dir("cancel");
    let request = dev(sleeper(&dir));
    let cancel = CancellationToken::new();
    let host = ToolHost::new(exec, &request.limits, cancel.clone());
    let task = {
        let remote = remote.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            remote
                .run(
                    request,
                    RunContext {
                        host,
                        cancel,
                        output: None,
                    },
                )
                .await
        })
    };
    let pid = wait_for_pid(&dir.join("pid")).await;
    cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    until_gone(pid, "after cancellation").await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn retries_until_a_late_server_comes_up() {
    // Hold a port without listening (connections are refused), and only
    // later listen and serve there.
    let port = ReservedPort::new();
    let mut config = client_config(&port.url());
    config.retry.max_attempts = 30;
    config.retry.initial_backoff = Duration::from_millis(50);
    config.retry.max_backoff = Duration::from_millis(100);
    let remote = Arc::new(RemoteRuntime::new(config).unwrap());
    let run = {
        let remote = remote.clone();
        tokio::spawn(async move {
            run_direct(&remote, dev(Unit::command(["echo", "late"])), &catalog()).await
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!run.is_finished());
    let server = serve_on(port.listen(), host_runtimes(), ServerConfig::new(key()));
    let out = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .unwrap()
        .unwrap();
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "late\n");
    assert!(remote.attempts() >= 2, "attempts: {}", remote.attempts());
    assert_eq!(server.server.stats().runs_started, 1);
}

#[tokio::test]
async fn busy_503_is_retried_a_bounded_number_of_times() {
    let mut config = ServerConfig::new(key());
    config.max_concurrent_runs = 1;
    let server = start(config).await;
    let remote = client(&server.url());
    let exec = catalog();
    let dir = temp_dir("busy");
    let holder = {
        let remote = remote.clone();
        let exec = exec.clone();
        let request = dev(sleeper(&dir));
        tokio::spawn(async move { run_direct(&remote, request, &exec).await })
    };
    let pid = wait_for_pid(&dir.join("pid")).await;
    let second = client(&server.url());
    let before = server.server.stats().requests;
    let out = run_direct(&second, dev(Unit::command(["true"])), &exec).await;
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:?}")
    };
    assert_eq!(error.code, ErrorCode::BackendUnavailable, "{out:?}");
    assert_eq!(second.attempts(), 3, "max_attempts is 3");
    assert_eq!(server.server.stats().requests - before, 3);
    // The run slot is checked before the body is read: a large body the
    // server never reads still gets its 503 (not a reset), and is retried.
    let large = Unit::Command(CommandUnit {
        argv: vec!["cat".into()],
        stdin: Some("x".repeat(2 << 20)),
        ..CommandUnit::default()
    });
    let third = client(&server.url());
    let out = run_direct(&third, dev(large), &exec).await;
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:?}")
    };
    assert_eq!(error.code, ErrorCode::BackendUnavailable, "{out:?}");
    assert!(error.message.contains("503"), "{out:?}");
    assert_eq!(third.attempts(), 3, "{out:?}");
    holder.abort();
    until_gone(pid, "holder").await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_says_why() {
    let remote = RemoteRuntime::new(toolexec_remote::RemoteConfig::new(
        "http://127.0.0.1:9",
        None,
    ))
    .unwrap();
    assert!(
        matches!(remote.availability(), Availability::Unavailable { reason } if reason == "no key configured")
    );
    // A held port nobody listens on: refused, deterministically.
    let port = ReservedPort::new();
    let unreachable = client(&port.url());
    let Availability::Unavailable { reason } = unreachable.availability() else {
        panic!()
    };
    assert!(reason.contains("unreachable"), "{reason}");
    drop(port);

    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    assert_eq!(remote.availability(), Availability::Available);
    // Cached: a second call sends no request.
    let requests = server.server.stats().requests;
    assert_eq!(remote.availability(), Availability::Available);
    assert_eq!(server.server.stats().requests, requests);

    let mut config = client_config(&server.url());
    config.key = Some(toolexec::Secret::new("another-key-0123456789abcdef"));
    let wrong = RemoteRuntime::new(config).unwrap();
    let Availability::Unavailable { reason } = wrong.availability() else {
        panic!()
    };
    assert!(reason.contains("bad_signature"), "{reason}");
    // Through the caller's registry, the remote runtime is selected.
    let runtimes = caller_runtimes(remote);
    assert!(
        runtimes
            .select(Profile::Dev, toolexec_runtime::UnitKind::Command)
            .is_ok()
    );
}

#[tokio::test]
async fn the_requested_profile_selects_the_servers_runtime() {
    let server = start(ServerConfig::new(key())).await;
    let mut config = client_config(&server.url());
    config.max_profile = Profile::Hardened;
    let remote = RemoteRuntime::new(config).unwrap();
    // The server maps `hardened` to bubblewrap/runsc/wasm, none registered
    // there: a typed refusal, not retried.
    let request = RunRequest::new(Unit::command(["true"]), Profile::Hardened);
    let out = run_direct(&remote, request, &catalog()).await;
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:?}")
    };
    assert_eq!(error.code, ErrorCode::BackendUnavailable);
    assert_eq!(error.details.as_ref().unwrap()["http_status"], 422);
    assert_eq!(remote.attempts(), 1);
}

#[tokio::test]
async fn bubblewrap_behind_the_server() {
    use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
    let bwrap = BubblewrapRuntime::new(BubblewrapConfig::default());
    if let Availability::Unavailable { reason } = bwrap.availability() {
        toolexec_testkit::skip!(
            "bubblewrap_behind_the_server",
            format!("bubblewrap: {reason}")
        );
    }
    // Standard: hardened needs the sandbox init (Landlock), which this
    // crate's tests do not build; the bubblewrap suite covers hardened.
    let map = ProfileMap {
        standard: vec![BubblewrapRuntime::NAME.into()],
        ..ProfileMap::default()
    };
    let mut runtimes = Runtimes::new(map);
    runtimes.register(bwrap);
    let server = start_with(runtimes, ServerConfig::new(key())).await;
    let mut config = client_config(&server.url());
    config.max_profile = Profile::Standard;
    let remote = RemoteRuntime::new(config).unwrap();
    let exec = catalog();
    let request = RunRequest::new(
        Unit::command([
            "sh",
            "-c",
            "echo in-sandbox; cat /etc/hostname 2>&1 | head -c 0; id -u",
        ]),
        Profile::Standard,
    );
    let out = run_direct(&remote, request, &exec).await;
    assert!(out.is_ok(), "{out:?}");
    assert!(out.stdout.starts_with("in-sandbox\n"), "{out:?}");
    assert_eq!(out.runtime, "remote:bubblewrap");
    let limits = RuntimeLimits {
        wall_time: Duration::from_millis(500),
        ..RuntimeLimits::default()
    };
    let request =
        RunRequest::new(Unit::command(["sleep", "30"]), Profile::Standard).with_limits(limits);
    let out = run_direct(&remote, request, &exec).await;
    assert_eq!(out.status.limit(), Some(LimitKind::WallTime), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_streams_live_through_the_remote_path() {
    let server = start(ServerConfig::new(key())).await;
    let remote = client(&server.url());
    let limits = RuntimeLimits::default();
    let host = ToolHost::without_tools(&limits);
    let (sink, mut live) = toolexec_runtime::OutputSink::channel();
    let request = dev(Unit::command([
        "sh",
        "-c",
        "echo first; sleep 2; echo second",
    ]));
    let run = tokio::spawn(async move {
        remote
            .run(
                request,
                RunContext::new(host, CancellationToken::new()).with_output(sink),
            )
            .await
    });
    let first = tokio::time::timeout(Duration::from_secs(1), live.recv())
        .await
        .expect("no live output within 1 s of the remote unit's first line")
        .expect("channel closed");
    assert_eq!(first.bytes, b"first\n");
    assert!(
        !run.is_finished(),
        "the remote unit ended before its first chunk arrived"
    );
    let out = run.await.unwrap();
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "first\nsecond\n");
}

/// A fake server: answers every connection's request head with `head`,
/// then writes `chunk` forever (until the peer goes away).
async fn endless_server(head: &'static str, chunk: Vec<u8>) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                if tcp.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                while tcp.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    addr
}

/// An endless error body is read up to 64 KiB, not until a timeout.
#[tokio::test]
async fn an_endless_error_body_is_capped() {
    let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000)).into_bytes();
    let addr = endless_server(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        chunk,
    )
    .await;
    let remote = client(&format!("http://{addr}"));
    let started = Instant::now();
    let Availability::Unavailable { reason } = remote.probe().await else {
        panic!("available?")
    };
    assert!(reason.contains("larger than 65536 bytes"), "{reason}");
    // Not the 5 s read timeout: the cap ended the read.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// A server that sends more output than the run's `max_output_bytes`
/// allows ends the run with an error instead of filling the caller's memory.
#[tokio::test]
async fn endless_output_from_the_server_is_capped() {
    let frame = serde_json::to_vec(&json!({"type": "stdout", "data": "y".repeat(60_000)})).unwrap();
    let mut chunk = (frame.len() as u32).to_be_bytes().to_vec();
    chunk.extend_from_slice(&frame);
    let addr = endless_server(
        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: toolexec-run.v1\r\n\r\n",
        chunk,
    )
    .await;
    let remote = client(&format!("http://{addr}"));
    let limits = RuntimeLimits {
        max_output_bytes: 1000,
        ..RuntimeLimits::default()
    };
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        run_direct(
            &remote,
            dev(Unit::command(["true"])).with_limits(limits),
            &catalog(),
        ),
    )
    .await
    .expect("the caller kept reading output past its cap");
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:?}")
    };
    assert_eq!(error.code, ErrorCode::BackendUnavailable, "{out:?}");
    assert!(
        error.message.contains("more than 3000 bytes of output"),
        "{error:?}"
    );
    assert!(out.stdout.is_empty());
}
