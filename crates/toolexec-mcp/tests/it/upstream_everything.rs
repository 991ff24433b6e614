//! Upstream MCP servers against the reference server
//! (`@modelcontextprotocol/server-everything`), over stdio and streamable HTTP.
//! Needs `TOOLEXEC_NODE22` and `TOOLEXEC_MCP_EVERYTHING` (see
//! `scripts/install-test-deps.sh`); skipped without them, failed under `CI`.

use crate::support::upstream as support;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{ChildGuard, assert_code, collect_events, deps, free_port, kill_pid, progress_of};
use toolexec::{
    Availability, Catalog, Content, Error, Exec, RunOptions, Secret, StreamEvent, StreamRequest,
};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig, UpstreamStatus, UpstreamTransport};

struct Everything {
    node: String,
    bin: String,
}

impl Everything {
    fn from_env(test: &str) -> Option<Everything> {
        let v = deps(test, &["TOOLEXEC_NODE22", "TOOLEXEC_MCP_EVERYTHING"])?;
        Some(Everything {
            node: v[0].clone(),
            bin: v[1].clone(),
        })
    }

    fn stdio(&self, name: &str) -> UpstreamConfig {
        let mut config = UpstreamConfig::new(
            name,
            UpstreamTransport::Stdio {
                command: self.node.clone(),
                args: vec![self.bin.clone(), "stdio".into()],
                env: BTreeMap::new(),
                inherit_env: Vec::new(),
                cwd: None,
            },
        );
        config.call_timeout = Duration::from_secs(20);
        config
    }

    /// Starts the streamable HTTP server on `port`.
    async fn start_http(&self, port: u16) -> ChildGuard {
        let guard = ChildGuard::spawn(
            Command::new(&self.node)
                .args([&self.bin, "streamableHttp"])
                .env("PORT", port.to_string()),
        );
        support::wait_listening(port, Duration::from_secs(15)).await;
        guard
    }
}

/// [`support::http_config`] plus a secret header and bearer token, which
/// must never show in `Debug` output or errors.
fn http_config(name: &str, port: u16) -> UpstreamConfig {
    let mut config = support::http_config(name, port);
    if let UpstreamTransport::Http {
        headers,
        bearer_token,
        ..
    } = &mut config.transport
    {
        headers.insert("x-test-header".to_owned(), Secret::new("header-secret"));
        *bearer_token = Some(Secret::new("bearer-secret"));
    }
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_tools_calls_progress_errors_and_cancellation() {
    let Some(ev) = Everything::from_env("stdio_tools_calls_progress_errors_and_cancellation")
    else {
        return;
    };
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(ev.stdio("everything"), catalog.clone())
        .await
        .expect("connect over stdio");
    assert_eq!(upstream.name(), "everything");
    let UpstreamStatus::Connected { tools } = upstream.status() else {
        panic!("not connected: {:?}", upstream.status());
    };
    assert!(tools >= 10, "only {tools} tools");
    assert!(upstream.pid().is_some());

    // Imported under the namespace, with title, schemas and annotations.
    let echo = catalog.get("everything:echo").expect("echo imported");
    let t = echo.tool();
    assert_eq!(t.title.as_deref(), Some("Echo Tool"));
    assert_eq!(t.description, "Echoes back the input string");
    assert_eq!(t.input_schema["properties"]["message"]["type"], "string");
    assert_eq!(t.annotations.as_ref().unwrap().read_only_hint, Some(true));
    assert_eq!(echo.backend().kind(), "mcp");
    assert_eq!(echo.backend().availability(), Availability::Available);
    let structured = catalog.get("everything:get-structured-content").unwrap();
    assert!(structured.tool().output_schema.is_some());
    assert!(
        catalog
            .get("everything:trigger-long-running-operation")
            .is_ok()
    );
    assert_eq!(upstream.tool_ids().len(), tools);

    // Calls through the validating pipeline.
    let exec = Exec::new(catalog.clone());
    let out = exec
        .run_tool("everything:echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("Echo: hi"));
    let out = exec
        .run_tool("everything:get-sum", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert!(out.value.as_str().unwrap().contains('5'), "{}", out.value);
    assert_code(
        exec.run_tool("everything:echo", json!({"message": 7}))
            .await,
        "validation_input",
    );
    // structuredContent is the value, validated against the output schema.
    let out = exec
        .run_tool(
            "everything:get-structured-content",
            json!({"location": "Chicago"}),
        )
        .await
        .unwrap();
    assert_eq!(out.value["temperature"], 36);
    // Content blocks: image, embedded resource, resource links.
    let out = exec
        .run_tool("everything:get-tiny-image", json!({}))
        .await
        .unwrap();
    assert!(
        out.content
            .iter()
            .any(|c| matches!(c, Content::Image { mime_type, .. } if mime_type == "image/png"))
    );
    let out = exec
        .run_tool(
            "everything:gzip-file-as-resource",
            json!({"name": "a.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resource"}),
        )
        .await
        .unwrap();
    assert!(
        matches!(&out.content[0], Content::Resource { resource } if resource["blob"].is_string()),
        "{:?}",
        out.content
    );
    let out = exec
        .run_tool("everything:get-resource-links", json!({"count": 2}))
        .await
        .unwrap();
    let links = out
        .content
        .iter()
        .filter(|c| matches!(c, Content::ResourceLink { uri, .. } if uri.starts_with("demo://")))
        .count();
    assert_eq!(links, 2, "{:?}", out.content);

    // isError → execution_failed, with the text as message.
    let err = assert_code(
        exec.run_tool(
            "everything:gzip-file-as-resource",
            json!({"data": "ftp://example.invalid/x"}),
        )
        .await,
        "execution_failed",
    );
    assert!(err.is_tool_error());
    assert!(
        err.to_string().contains("Unsupported URL protocol"),
        "{err}"
    );

    // Progress notifications are relayed to the stream.
    assert_progress_relayed(&exec, "everything", 4).await;
    // Cancellation returns `cancelled` quickly, and the server keeps working.
    assert_cancellation_is_prompt(&exec, "everything").await;
    let out = exec
        .run_tool("everything:echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("Echo: still here"));

    upstream.shutdown().await;
    assert!(
        catalog.get("everything:echo").is_err(),
        "tools unregistered"
    );
    assert!(catalog.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_timeout_and_concurrency_limit() {
    let Some(ev) = Everything::from_env("stdio_timeout_and_concurrency_limit") else {
        return;
    };
    let catalog = Arc::new(Catalog::new());
    let mut config = ev.stdio("slow");
    config.call_timeout = Duration::from_millis(1500);
    config.max_concurrency = 1;
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    let exec = Exec::new(catalog);

    // The per-server timeout is the backend's own deadline.
    let start = Instant::now();
    let err = assert_code(
        exec.run_tool(
            "slow:trigger-long-running-operation",
            json!({"duration": 10, "steps": 10}),
        )
        .await,
        "timeout",
    );
    assert!(matches!(err, Error::Timeout { after, .. } if after == Duration::from_millis(1500)));
    assert!(start.elapsed() < Duration::from_secs(3));

    // With one slot, a second call waits for the first.
    let start = Instant::now();
    let exec2 = exec.clone();
    let long = tokio::spawn(async move {
        exec2
            .run_tool(
                "slow:trigger-long-running-operation",
                json!({"duration": 0.8, "steps": 1}),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    exec.run_tool("slow:echo", json!({"message": "queued"}))
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(750),
        "echo did not wait for the slot: {:?}",
        start.elapsed()
    );
    long.await.unwrap().unwrap();
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_server_killed_is_restarted() {
    let Some(ev) = Everything::from_env("stdio_server_killed_is_restarted") else {
        return;
    };
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(ev.stdio("crashy"), catalog.clone())
        .await
        .unwrap();
    let exec = Exec::new(catalog.clone());
    let first_pid = upstream.pid().unwrap();

    let exec2 = exec.clone();
    let in_flight = tokio::spawn(async move {
        exec2
            .run_tool(
                "crashy:trigger-long-running-operation",
                json!({"duration": 20, "steps": 20}),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    kill_pid(first_pid);
    let r = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("in-flight call did not fail after the kill")
        .unwrap();
    let err = assert_code(r, "backend_unavailable");
    assert!(err.to_string().contains("crashy"), "{err}");

    // Restarted with backoff; the tools stay registered meanwhile.
    assert!(catalog.get("crashy:echo").is_ok());
    support::eventually(Duration::from_secs(15), "a new server process", || {
        upstream.pid().is_some_and(|pid| pid != first_pid)
    })
    .await;
    assert!(upstream.wait_connected(Duration::from_secs(1)).await);
    let second_pid = upstream.pid().unwrap();
    let out = exec
        .run_tool("crashy:echo", json!({"message": "back"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("Echo: back"));

    drop(upstream);
    assert!(catalog.is_empty(), "drop unregisters the tools");
    // The child is stopped in the background after drop.
    support::eventually(Duration::from_secs(10), "the child to exit", || {
        !std::path::Path::new(&format!("/proc/{second_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{second_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_calls_progress_and_reinit_after_server_restart() {
    let Some(ev) = Everything::from_env("http_calls_progress_and_reinit_after_server_restart")
    else {
        return;
    };
    support::init_tracing();
    let port = free_port();
    let server = ev.start_http(port).await;
    let catalog = Arc::new(Catalog::new());
    let config = http_config("web", port);
    let debug = format!("{config:?}");
    assert!(!debug.contains("bearer-secret") && !debug.contains("header-secret"));
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    let debug = format!("{upstream:?}");
    assert!(
        !debug.contains("bearer-secret") && !debug.contains("header-secret"),
        "{debug}"
    );
    let exec = Exec::new(catalog.clone());
    assert!(catalog.get("web:get-structured-content").is_ok());
    let out = exec
        .run_tool("web:echo", json!({"message": "over http"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("Echo: over http"));

    assert_progress_relayed(&exec, "web", 3).await;
    // Cancellation over HTTP.
    assert_cancellation_is_prompt(&exec, "web").await;

    // The server restarts on the same port and forgets the session: the next
    // call re-initializes transparently.
    drop(server);
    let _server = ev.start_http(port).await;
    let out = exec
        .run_tool("web:echo", json!({"message": "after restart"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("Echo: after restart"));
    assert!(matches!(
        upstream.status(),
        UpstreamStatus::Connected { .. }
    ));
    upstream.shutdown().await;
    assert!(catalog.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn lazy_http_connect_waits_for_the_server() {
    let Some(ev) = Everything::from_env("lazy_http_connect_waits_for_the_server") else {
        return;
    };
    let port = free_port();
    let catalog = Arc::new(Catalog::new());
    let mut config = http_config("later", port);
    config.lazy = true;
    let start = Instant::now();
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "lazy connect blocked"
    );
    assert!(catalog.is_empty(), "no tools before the server is up");
    assert!(!matches!(
        upstream.status(),
        UpstreamStatus::Connected { .. }
    ));
    let _server = ev.start_http(port).await;
    assert!(
        upstream.wait_connected(Duration::from_secs(20)).await,
        "{:?}",
        upstream.status()
    );
    let exec = Exec::new(catalog.clone());
    let out = exec
        .run_tool("later:echo", json!({"message": "lazy"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("Echo: lazy"));
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_errors_fail_fast_without_leaking_secrets() {
    let catalog = Arc::new(Catalog::new());
    // A TLS file that cannot be read is refused up front, lazy or not,
    // naming the field and the file.
    let mut config = http_config("tls", 443);
    if let UpstreamTransport::Http { url, tls, .. } = &mut config.transport {
        *url = "https://example.invalid/mcp".into();
        tls.ca_file = Some("/nonexistent/ca.pem".into());
    }
    let err = assert_code(
        Upstream::connect(config.clone(), catalog.clone()).await,
        "invalid_request",
    );
    assert!(
        err.to_string().contains("tls.ca_file") && err.to_string().contains("/nonexistent/ca.pem"),
        "{err}"
    );
    config.lazy = true;
    assert_code(
        Upstream::connect(config.clone(), catalog.clone()).await,
        "invalid_request",
    );
    // TLS settings on an http:// URL are a mistake, not ignored.
    if let UpstreamTransport::Http { url, .. } = &mut config.transport {
        *url = "http://127.0.0.1:1/mcp".into();
    }
    let err = assert_code(
        Upstream::connect(config, catalog.clone()).await,
        "invalid_request",
    );
    assert!(err.to_string().contains("https://"), "{err}");

    let mut bad = http_config("bad name!", 1);
    assert_code(
        Upstream::connect(bad.clone(), catalog.clone()).await,
        "invalid_request",
    );
    bad.name = "ok".into();
    bad.max_concurrency = 0;
    assert_code(
        Upstream::connect(bad, catalog.clone()).await,
        "invalid_request",
    );

    // A header value that is not valid HTTP: the error names the header, not the value.
    let mut headers = BTreeMap::new();
    headers.insert("x-key".to_owned(), Secret::new("line\nbreak-secret"));
    let config = UpstreamConfig::new(
        "hdr",
        UpstreamTransport::Http {
            url: "http://127.0.0.1:1/mcp".into(),
            headers,
            bearer_token: None,
            tls: Default::default(),
            oauth: None,
            token_exchange: None,
        },
    );
    let err = assert_code(
        Upstream::connect(config, catalog.clone()).await,
        "invalid_request",
    );
    assert!(err.to_string().contains("x-key") && !err.to_string().contains("break-secret"));

    // A server that cannot start fails the (non-lazy) connect; no secret in the error.
    let mut env = BTreeMap::new();
    env.insert("API_KEY".to_owned(), Secret::new("env-secret-value"));
    let config = UpstreamConfig::new(
        "missing",
        UpstreamTransport::Stdio {
            command: "/nonexistent/toolexec-mcp-server".into(),
            args: vec![],
            env,
            inherit_env: Vec::new(),
            cwd: None,
        },
    );
    assert!(!format!("{config:?}").contains("env-secret-value"));
    let err = assert_code(
        Upstream::connect(config, catalog.clone()).await,
        "backend_unavailable",
    );
    assert!(!format!("{err} {err:?}").contains("env-secret-value"));

    // Nothing reachable on a closed port: the first attempt fails.
    let port = free_port();
    let err = assert_code(
        Upstream::connect(http_config("closed", port), catalog.clone()).await,
        "backend_unavailable",
    );
    let text = format!("{err} {err:?}");
    assert!(
        !text.contains("bearer-secret") && !text.contains("header-secret"),
        "{text}"
    );
    assert!(catalog.is_empty());
}

/// Runs the long-running tool of namespace `ns` as a stream and checks that
/// `steps` progress notifications (with the total) arrive before `done`.
async fn assert_progress_relayed(exec: &Exec, ns: &str, steps: u32) {
    let events = collect_events(exec.run_stream(
        StreamRequest::Tool {
            id: format!("{ns}:trigger-long-running-operation"),
            args: json!({"duration": 0.2 * f64::from(steps), "steps": steps}),
        },
        RunOptions::default(),
    ))
    .await;
    let progress = progress_of(&events);
    assert!(progress.len() >= 2, "{events:?}");
    assert!(
        progress
            .iter()
            .all(|(_, total, _)| *total == Some(f64::from(steps)))
    );
    assert!(
        matches!(events.last(), Some(StreamEvent::Done { .. })),
        "{events:?}"
    );
}

/// Cancels a 30-second call of namespace `ns` after 300 ms and checks it
/// ends with `cancelled` within a second.
async fn assert_cancellation_is_prompt(exec: &Exec, ns: &str) {
    let cancel = Exec::cancellation_token();
    let opts = RunOptions {
        timeout: None,
        cancel: Some(cancel.clone()),
        ..RunOptions::default()
    };
    let exec2 = exec.clone();
    let id = format!("{ns}:trigger-long-running-operation");
    let call = tokio::spawn(async move {
        exec2
            .run_tool_with(&id, json!({"duration": 30, "steps": 30}), &opts)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    cancel.cancel();
    assert_code(call.await.unwrap(), "cancelled");
    assert!(start.elapsed() < Duration::from_secs(1));
}
