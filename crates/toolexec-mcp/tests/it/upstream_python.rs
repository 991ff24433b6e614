//! Upstream MCP servers against a server on the official Python SDK
//! (`tests/fixtures/py_upstream_server.py`, FastMCP), over stdio,
//! streamable HTTP and the 2024-11-05 HTTP+SSE transport. Needs `TOOLEXEC_PYTHON` (a Python with `mcp==1.30.0`, see
//! `scripts/install-test-deps.sh`); skipped without it, failed under `CI`.

use crate::support::upstream as support;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    ChildGuard, assert_code, collect_events, deps, eventually, free_port, http_config, progress_of,
};
use toolexec::{Catalog, CatalogEvent, Exec, RunOptions, Secret, StreamEvent, StreamRequest};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig, UpstreamStatus, UpstreamTransport};

const FIXTURE: &str = support::PY_FIXTURE;

fn python(test: &str) -> Option<String> {
    deps(test, &["TOOLEXEC_PYTHON"]).map(|mut v| v.remove(0))
}

fn stdio_config(python: &str, env: BTreeMap<String, Secret>) -> UpstreamConfig {
    support::py_stdio_config("py", python, env)
}

async fn start_http(python: &str, port: u16, extra: &[&str]) -> ChildGuard {
    let guard = ChildGuard::spawn(
        Command::new(python)
            .arg(FIXTURE)
            .args(["http", &port.to_string()])
            .args(extra),
    );
    support::wait_listening(port, Duration::from_secs(20)).await;
    guard
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stdio_server() {
    let Some(python) = python("python_stdio_server") else {
        return;
    };
    support::init_tracing();
    let catalog = Arc::new(Catalog::new());
    let mut env = BTreeMap::new();
    env.insert(
        "TOOLEXEC_UPSTREAM_TEST_KEY".to_owned(),
        Secret::new("py-env-secret"),
    );
    let config = stdio_config(&python, env);
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    assert!(!format!("{upstream:?}").contains("py-env-secret"));

    // Names: "dup/name" and "dup:name" both map to dup_name (the smaller
    // original wins); the 200-char name is cut with a hash; the tool whose
    // schema the validator rejects is skipped, the others are imported.
    let ids = upstream.tool_ids();
    assert!(ids.contains(&"py:dup_name".to_owned()), "{ids:?}");
    assert!(!ids.iter().any(|id| id.contains("bad_schema")), "{ids:?}");
    let long: Vec<_> = ids.iter().filter(|id| id.starts_with("py:xxx")).collect();
    assert_eq!(long.len(), 1, "{ids:?}");
    assert_eq!(long[0].len(), "py:".len() + 128);
    assert_eq!(
        upstream.status(),
        UpstreamStatus::Connected { tools: ids.len() }
    );
    assert_eq!(ids.len(), 17, "{ids:?}");

    let exec = Exec::new(catalog.clone());
    // Calls use the original names.
    let out = exec.run_tool("py:dup_name", json!({})).await.unwrap();
    assert_eq!(out.value, json!({"result": "dup/name"}));
    let out = exec.run_tool(long[0], json!({})).await.unwrap();
    assert_eq!(out.value, json!({"result": "long"}));

    // Structured output, validated against the declared output schema.
    let weather = catalog.get("py:weather").unwrap();
    assert!(weather.tool().output_schema.is_some());
    let out = exec
        .run_tool("py:weather", json!({"city": "Paris"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"city": "Paris", "temperature": 21.5}));
    let out = exec
        .run_tool("py:add", json!({"a": 1, "b": 2}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 3}));
    assert_code(
        exec.run_tool("py:add", json!({"a": "one", "b": 2})).await,
        "validation_input",
    );

    // The environment reaches the child.
    let out = exec
        .run_tool("py:show_env", json!({"name": "TOOLEXEC_UPSTREAM_TEST_KEY"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": "py-env-secret"}));

    // A raised exception is isError: execution_failed with the text.
    let err = assert_code(
        exec.run_tool("py:fail", json!({"message": "boom"})).await,
        "execution_failed",
    );
    assert!(err.is_tool_error());
    assert!(err.to_string().contains("boom"), "{err}");

    // Progress with messages.
    let events = collect_events(exec.run_stream(
        StreamRequest::Tool {
            id: "py:slow_progress".into(),
            args: json!({"steps": 3, "delay": 0.05}),
        },
        RunOptions::default(),
    ))
    .await;
    let progress = progress_of(&events);
    let expected: Vec<_> = (1..=3)
        .map(|i| (f64::from(i), Some(3.0), Some(format!("step {i} of 3"))))
        .collect();
    assert_eq!(progress, expected, "{events:?}");
    assert!(matches!(events.last(), Some(StreamEvent::Done { .. })));

    // Cancellation reaches the server as notifications/cancelled.
    let cancel = Exec::cancellation_token();
    let opts = RunOptions {
        timeout: None,
        cancel: Some(cancel.clone()),
        ..RunOptions::default()
    };
    let exec2 = exec.clone();
    let call = tokio::spawn(async move {
        exec2
            .run_tool_with("py:sleepy", json!({"seconds": 30}), &opts)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    cancel.cancel();
    assert_code(call.await.unwrap(), "cancelled");
    assert!(start.elapsed() < Duration::from_secs(1));
    let start = Instant::now();
    loop {
        let out = exec
            .run_tool("py:cancelled_count", json!({}))
            .await
            .unwrap();
        if out.value == json!({"result": 1}) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the server never saw the cancellation: {}",
            out.value
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // tools/list_changed: the new tool appears, nothing else is touched.
    let mut events = catalog.subscribe();
    exec.run_tool("py:add_tool", json!({"name": "fresh"}))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "py:fresh to appear", || {
        catalog.get("py:fresh").is_ok()
    })
    .await;
    let out = exec.run_tool("py:fresh", json!({})).await.unwrap();
    assert_eq!(out.value, json!({"result": "I am fresh"}));
    exec.run_tool("py:remove_tool", json!({"name": "fresh"}))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "py:fresh to go", || {
        catalog.get("py:fresh").is_err()
    })
    .await;
    let mut seen = Vec::new();
    while let Ok(ev) = events.try_recv() {
        seen.push(ev);
    }
    assert_eq!(
        seen,
        [
            CatalogEvent::Registered {
                id: "py:fresh".into()
            },
            CatalogEvent::Unregistered {
                id: "py:fresh".into()
            },
        ],
        "unchanged tools must not be churned"
    );
    assert_eq!(upstream.status(), UpstreamStatus::Connected { tools: 17 });

    upstream.shutdown().await;
    assert!(catalog.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn python_http_server_restarts() {
    let Some(python) = python("python_http_server_restarts") else {
        return;
    };
    support::init_tracing();
    // A restarted server answers the old session with 404: rmcp re-initializes.
    let port = free_port();
    let server = start_http(&python, port, &[]).await;
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(http_config("pyweb", port), catalog.clone())
        .await
        .unwrap();
    let exec = Exec::new(catalog.clone());
    let out = exec
        .run_tool("pyweb:add", json!({"a": 2, "b": 2}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 4}));
    let events = collect_events(exec.run_stream(
        StreamRequest::Tool {
            id: "pyweb:slow_progress".into(),
            args: json!({"steps": 2, "delay": 0.05}),
        },
        RunOptions::default(),
    ))
    .await;
    assert!(!progress_of(&events).is_empty(), "{events:?}");
    drop(server);
    let _server = start_http(&python, port, &[]).await;
    let out = exec
        .run_tool("pyweb:add", json!({"a": 3, "b": 3}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 6}));
    upstream.shutdown().await;

    // A restarted server that answers the old session with 401: the upstream
    // opens a new session and retries the call once.
    let port = free_port();
    let server = start_http(&python, port, &["stale-401"]).await;
    let upstream = Upstream::connect(http_config("pyauth", port), catalog.clone())
        .await
        .unwrap();
    let out = exec
        .run_tool("pyauth:add", json!({"a": 1, "b": 1}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 2}));
    drop(server);
    let _server = start_http(&python, port, &["stale-401"]).await;
    let out = exec
        .run_tool("pyauth:add", json!({"a": 5, "b": 5}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 10}));
    assert!(matches!(
        upstream.status(),
        UpstreamStatus::Connected { .. }
    ));
    upstream.shutdown().await;
    assert!(catalog.is_empty());
}

/// The fixture on the 2024-11-05 HTTP+SSE transport (`sse` mode) as
/// upstream `name`.
fn sse_config(name: &str, port: u16) -> UpstreamConfig {
    let mut config = UpstreamConfig::new(
        name,
        UpstreamTransport::Sse {
            url: format!("http://127.0.0.1:{port}/sse"),
            headers: BTreeMap::new(),
            bearer_token: Some(Secret::new("sse-bearer-secret")),
            tls: Default::default(),
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn python_legacy_sse_server() {
    let Some(python) = python("python_legacy_sse_server") else {
        return;
    };
    support::init_tracing();
    let port = free_port();
    let start = || {
        ChildGuard::spawn(
            Command::new(&python)
                .arg(FIXTURE)
                .args(["sse", &port.to_string()]),
        )
    };
    let server = start();
    support::wait_listening(port, Duration::from_secs(20)).await;
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(sse_config("pysse", port), catalog.clone())
        .await
        .unwrap();
    assert!(!format!("{upstream:?}").contains("sse-bearer-secret"));
    assert_eq!(upstream.tool_ids().len(), 17);
    let exec = Exec::new(catalog.clone());
    let out = exec
        .run_tool("pysse:weather", json!({"city": "Oslo"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"city": "Oslo", "temperature": 21.5}));
    let e = assert_code(
        exec.run_tool("pysse:fail", json!({"message": "no way"}))
            .await,
        "execution_failed",
    );
    assert!(e.to_string().contains("no way"), "{e}");
    // Progress arrives on the event stream before the response.
    let events = collect_events(exec.run_stream(
        StreamRequest::Tool {
            id: "pysse:slow_progress".into(),
            args: json!({"steps": 3, "delay": 0.02}),
        },
        RunOptions::default(),
    ))
    .await;
    assert_eq!(progress_of(&events).len(), 3, "{events:?}");
    // Concurrent calls are matched to their responses.
    let calls = (0..20).map(|i| exec.run_tool("pysse:add", json!({"a": i, "b": 1})));
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(out.unwrap().value, json!({"result": i + 1}));
    }

    // The server goes away: the stream ends, calls fail as unavailable,
    // and once it is back the session is opened again by itself.
    drop(server);
    eventually(Duration::from_secs(10), "the upstream notices", || {
        !matches!(upstream.status(), UpstreamStatus::Connected { .. })
    })
    .await;
    assert_code(
        exec.run_tool("pysse:add", json!({"a": 1, "b": 1})).await,
        "backend_unavailable",
    );
    let _server = start();
    eventually(Duration::from_secs(30), "the upstream reconnects", || {
        matches!(upstream.status(), UpstreamStatus::Connected { .. })
    })
    .await;
    let out = exec
        .run_tool("pysse:add", json!({"a": 3, "b": 3}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 6}));
    upstream.shutdown().await;

    // A streamable HTTP server configured as SSE: a clear, typed error.
    let port = free_port();
    let _http = start_http(&python, port, &[]).await;
    let mut config = sse_config("wrong", port);
    if let UpstreamTransport::Sse { url, .. } = &mut config.transport {
        *url = format!("http://127.0.0.1:{port}/mcp");
    }
    let e = Upstream::connect(config, catalog.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "backend_unavailable", "{e}");
    assert!(e.to_string().contains("SSE event stream"), "{e}");
    assert!(!e.to_string().contains("sse-bearer-secret"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stdio_restart_backoff_and_availability() {
    let Some(python) = python("python_stdio_restart_backoff_and_availability") else {
        return;
    };
    support::init_tracing();
    // A copy of the fixture that the test can make disappear, so restarts fail.
    let dir = std::env::temp_dir().join(format!(
        "toolexec-upstream-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("server.py");
    let parked = dir.join("server.py.off");
    std::fs::copy(FIXTURE, &script).unwrap();
    let mut config = UpstreamConfig::new(
        "flaky",
        UpstreamTransport::Stdio {
            command: python.clone(),
            args: vec![script.display().to_string(), "stdio".to_owned()],
            env: BTreeMap::new(),
            inherit_env: Vec::new(),
            cwd: None,
        },
    );
    config.call_timeout = Duration::from_secs(10);
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    let exec = Exec::new(catalog.clone());
    let add = catalog.get("flaky:add").unwrap();
    assert_eq!(
        add.backend().availability(),
        toolexec::Availability::Available
    );

    // The server dies and cannot start again: restarts fail with backoff.
    std::fs::rename(&script, &parked).unwrap();
    support::kill_pid(upstream.pid().unwrap());
    eventually(
        Duration::from_secs(10),
        "a failed restart",
        || matches!(upstream.status(), UpstreamStatus::Restarting { attempt, .. } if attempt >= 2),
    )
    .await;
    match add.backend().availability() {
        toolexec::Availability::Unavailable { reason } => {
            assert!(reason.contains("reconnecting"), "{reason}");
            assert!(!reason.contains('\n'), "one line: {reason}");
        }
        a => panic!("expected unavailable, got {a:?}"),
    }
    // The tools stay registered; calls fail at once.
    let start = Instant::now();
    let err = assert_code(
        exec.run_tool("flaky:add", json!({"a": 1, "b": 1})).await,
        "backend_unavailable",
    );
    assert!(start.elapsed() < Duration::from_secs(1), "{err}");

    // Once the server can start again, a restart succeeds and calls work.
    std::fs::rename(&parked, &script).unwrap();
    assert!(
        upstream.wait_connected(Duration::from_secs(15)).await,
        "{:?}",
        upstream.status()
    );
    let out = exec
        .run_tool("flaky:add", json!({"a": 1, "b": 1}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 2}));
    upstream.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every progress notification an upstream sends before its result reaches
/// the caller, in order, even when the result follows the last one at once
/// (rmcp handles notifications on tasks of their own: relaying them there
/// lost a call's last progress whenever its result won the race).
#[tokio::test(flavor = "multi_thread")]
async fn progress_sent_before_the_result_is_never_lost() {
    let Some(python) = python("progress_sent_before_the_result_is_never_lost") else {
        return;
    };
    support::init_tracing();
    let port = free_port();
    let _server = start_http(&python, port, &[]).await;
    let catalog = Arc::new(Catalog::new());
    let _stdio = Upstream::connect(stdio_config(&python, BTreeMap::new()), catalog.clone())
        .await
        .unwrap();
    let _http = Upstream::connect(http_config("pyweb", port), catalog.clone())
        .await
        .unwrap();
    let exec = Exec::new(catalog);
    const STEPS: u32 = 4;
    const CALLS: usize = 40;
    let expected: Vec<_> = (1..=STEPS)
        .map(|i| {
            (
                f64::from(i),
                Some(f64::from(STEPS)),
                Some(format!("step {i} of {STEPS}")),
            )
        })
        .collect();
    for server in ["py", "pyweb"] {
        // Four calls at a time: concurrent calls make the race likelier.
        for round in 0..CALLS / 4 {
            let calls = (0..4).map(|_| {
                collect_events(exec.run_stream(
                    StreamRequest::Tool {
                        id: format!("{server}:slow_progress"),
                        args: json!({"steps": STEPS, "delay": 0}),
                    },
                    RunOptions::default(),
                ))
            });
            for events in futures::future::join_all(calls).await {
                assert!(
                    matches!(events.last(), Some(StreamEvent::Done { .. })),
                    "{server}, round {round}: {events:?}"
                );
                assert_eq!(
                    progress_of(&events),
                    expected,
                    "{server}, round {round}: {events:?}"
                );
            }
        }
    }
}
