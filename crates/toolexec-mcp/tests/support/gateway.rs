//! Shared helpers for the gateway tests (and `examples/gateway_server.rs`):
//! the demo catalog, the external test dependencies, the example server
//! binary and an in-process HTTP gateway. It has no tests of its own.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::{Exec, LocalTool, ToolContext, ToolError, ToolOutput, raw_handler};
use toolexec_mcp::gateway::{self, Expose, Gateway, GatewayOptions, HttpAuth, HttpOptions};

/// The built-in catalog plus `demo:progress` (reports progress and streams
/// chunks) and `demo:sleep` (waits, honouring cancellation).
pub(crate) fn demo_exec() -> Exec {
    let catalog = toolexec_builtins::catalog();
    register_demo_tools(&catalog);
    Exec::new(catalog)
}

/// Registers the demo tools.
pub(crate) fn register_demo_tools(catalog: &toolexec::Catalog) {
    LocalTool::new(
        "demo:progress",
        raw_handler(|args: Value, ctx: ToolContext| async move {
            let steps = args["steps"].as_u64().unwrap_or(3);
            let delay = args["delay_ms"].as_u64().unwrap_or(20);
            for i in 1..=steps {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                ctx.progress(i as f64, Some(steps as f64), Some(&format!("step {i}")));
                ctx.chunk(json!({ "step": i })).await;
            }
            Ok::<_, ToolError>(ToolOutput::structured(json!({ "steps": steps })))
        }),
    )
    .description(
        "Counts to `steps`, reporting progress and streaming a chunk at each step. For tests.",
    )
    .input_schema(json!({
        "type": "object",
        "properties": {
            "steps": {"type": "integer", "minimum": 1, "maximum": 100},
            "delay_ms": {"type": "integer", "minimum": 0, "maximum": 10000}
        },
        "additionalProperties": false
    }))
    .output_schema(json!({
        "type": "object",
        "properties": {"steps": {"type": "integer"}},
        "required": ["steps"]
    }))
    .register(catalog)
    .expect("register demo:progress");
    LocalTool::new(
        "demo:sleep",
        raw_handler(|args: Value, ctx: ToolContext| async move {
            let ms = args["ms"].as_u64().unwrap_or(1000);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = ctx.cancelled() => return Err(ToolError::new("cancelled while sleeping")),
            }
            Ok(ToolOutput::structured(json!({ "slept_ms": ms })))
        }),
    )
    .description("Sleeps `ms` milliseconds, stopping early when cancelled. For tests.")
    .input_schema(json!({
        "type": "object",
        "properties": {"ms": {"type": "integer", "minimum": 0}},
        "additionalProperties": false
    }))
    .register(catalog)
    .expect("register demo:sleep");
}

/// A gateway over [`demo_exec`].
pub(crate) fn demo_gateway(expose: Expose) -> Gateway {
    Gateway::new(
        demo_exec(),
        GatewayOptions {
            expose,
            ..GatewayOptions::default()
        },
    )
}

/// An HTTP gateway on 127.0.0.1 with a free port, served in the background
/// until the returned token is cancelled.
pub(crate) async fn start_http(
    gateway: Gateway,
    auth: HttpAuth,
) -> (SocketAddr, CancellationToken) {
    let shutdown = CancellationToken::new();
    let (addr, server) = gateway::bind_http(
        gateway,
        HttpOptions::new("127.0.0.1:0".parse().unwrap(), auth),
        shutdown.clone(),
    )
    .await
    .expect("bind the HTTP gateway");
    tokio::spawn(server);
    (addr, shutdown)
}

#[allow(unused_imports)] // not every includer needs it
pub(crate) use toolexec_testkit::dep;

/// Path of the `gateway_server` example, built on first use (cargo builds
/// examples for `cargo test`, but not for `cargo test --test ...`).
pub(crate) fn gateway_server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| example_bin("gateway_server")).clone()
}

/// Builds example `name` of this crate and returns its path.
pub(crate) fn example_bin(name: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", name, "--manifest-path"])
        .arg(&manifest)
        .output()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(
        out.status.success(),
        "cargo build --example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let test_exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>/examples/<name>
    let profile_dir = test_exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// The failed checks (`"id: <message_key>"`) of a conformance-suite result
/// directory in `dir` whose name is `prefix` followed by a timestamp, or
/// `None` when the scenario did not run.
#[allow(dead_code)] // not every includer needs it
pub(crate) fn failed_checks(dir: &Path, prefix: &str, message_key: &str) -> Option<Vec<String>> {
    let entry = std::fs::read_dir(dir).ok()?.flatten().find(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })?;
    let text = std::fs::read_to_string(entry.path().join("checks.json")).ok()?;
    let checks: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
    Some(
        checks
            .iter()
            .filter(|c| c["status"] == "FAILURE")
            .map(|c| format!("{}: {}", c["id"], c[message_key]))
            .collect(),
    )
}

/// Runs `cmd` with a deadline, returning (status, stdout, stderr).
pub(crate) async fn run_with_timeout(
    mut cmd: tokio::process::Command,
    timeout: Duration,
) -> (std::process::ExitStatus, String, String) {
    cmd.kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn");
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?}: {cmd:?}"))
        .expect("wait");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// rmcp's streamable HTTP client transport, over rmcp's default reqwest
/// client. toolexec-mcp builds reqwest with rustls but without a crypto
/// provider (its upstream clients get a configuration with graviola's), so
/// a default client needs a process-wide provider: graviola's, installed
/// here once for the test process.
pub(crate) fn rmcp_http_transport(
    config: rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig,
) -> rmcp::transport::StreamableHttpClientTransport<reqwest::Client> {
    let _ = rustls_graviola::default_provider().install_default();
    rmcp::transport::StreamableHttpClientTransport::from_config(config)
}

/// A client's answer to a sampling request: the model `model` echoing the
/// text of the request's first message (`echo: <text>`).
#[allow(deprecated)] // sampling: deprecated by SEP-2577, current in 2025-11-25.
pub(crate) fn echo_sampling(
    model: &str,
    params: &rmcp::model::CreateMessageRequestParams,
) -> rmcp::model::CreateMessageResult {
    let text = serde_json::to_value(&params.messages).unwrap()[0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_value(serde_json::json!({
        "model": model,
        "role": "assistant",
        "content": {"type": "text", "text": format!("echo: {text}")},
    }))
    .unwrap()
}

/// The first text of the prompt `prompt` and of the resource `uri`, got
/// through `client` (its handler answering what their servers ask).
pub(crate) async fn prompt_and_resource_text<S: rmcp::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, S>,
    prompt: rmcp::model::GetPromptRequestParams,
    uri: &str,
) -> (String, String) {
    let prompt = client.get_prompt(prompt).await.expect("prompts/get");
    let greeted = prompt.messages[0]
        .content
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_else(|| panic!("{prompt:?}"));
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .expect("resources/read");
    let read = match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    (greeted, read)
}

/// Task `id`'s payload once it is no longer `working`, polled through
/// `peer` every 50 ms; fails after 20 s.
pub(crate) async fn task_settled(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    id: &str,
) -> rmcp::model::TaskPayload {
    task_past(peer, id, &[rmcp::model::TaskStatus::Working]).await
}

/// Task `id`'s payload once its status is none of `waiting`, polled
/// through `peer` every 50 ms; fails after 20 s.
pub(crate) async fn task_past(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    id: &str,
    waiting: &[rmcp::model::TaskStatus],
) -> rmcp::model::TaskPayload {
    let start = std::time::Instant::now();
    loop {
        let r = peer
            .get_task(rmcp::model::GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if !waiting.contains(&r.task.status()) {
            return r.task.payload;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "task {id} never settled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A log message as (level, text): what the log tests compare.
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
pub(crate) fn log_entry(params: &rmcp::model::LoggingMessageNotificationParam) -> (String, String) {
    let level = serde_json::to_value(params.level).unwrap();
    let text = params.data.as_str().unwrap_or_default().to_owned();
    (level.as_str().unwrap().to_owned(), text)
}

/// The next `n` log messages from `logs`, sorted (a client's handler may
/// see them out of order); fails after 5 s.
pub(crate) async fn next_logs(
    logs: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
    n: usize,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let wait = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while seen.len() < n {
            seen.push(logs.recv().await.unwrap());
        }
    });
    assert!(wait.await.is_ok(), "{seen:?}");
    seen.sort();
    seen
}

/// `expected` as [`next_logs`] returns it.
pub(crate) fn sorted_logs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = expected
        .iter()
        .map(|(l, t)| (l.to_string(), t.to_string()))
        .collect();
    v.sort();
    v
}

/// `params` naming the log level `level` (`_meta`
/// `io.modelcontextprotocol/logLevel`), as a 2026-07-28 client opts in to
/// log messages.
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
pub(crate) fn with_log_level(
    mut params: rmcp::model::CallToolRequestParams,
    level: rmcp::model::LoggingLevel,
) -> rmcp::model::CallToolRequestParams {
    let mut meta = params.meta.take().unwrap_or_default();
    meta.set_log_level(level);
    params.meta = Some(meta);
    params
}

/// Calls `tool` (a fixture's `chatty`: it logs `chatty debug`, `chatty
/// info` and `chatty warning`, then answers) through `peer` of a
/// 2026-07-28 client three times: naming no log level (so it hears
/// nothing), `warning` (the warning) and `debug` (all three, and a marker
/// that the first two calls' messages have all come); checks what `logs`
/// got.
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
pub(crate) async fn chatty_at_each_level(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    tool: &'static str,
    logs: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
) {
    use rmcp::model::LoggingLevel;
    for level in [None, Some(LoggingLevel::Warning), Some(LoggingLevel::Debug)] {
        let mut params = rmcp::model::CallToolRequestParams::new(tool);
        if let Some(level) = level {
            params = with_log_level(params, level);
        }
        let r = peer.call_tool(params).await.expect("tools/call");
        let text = r
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.as_str());
        assert_eq!(text, Some("said three things"), "{r:?}");
    }
    assert_eq!(
        next_logs(logs, 4).await,
        sorted_logs(&[
            ("warning", "chatty warning"),
            ("debug", "chatty debug"),
            ("info", "chatty info"),
            ("warning", "chatty warning"),
        ])
    );
}

/// A client of revision `.1` that passes on the log messages (level,
/// text) it is sent.
#[derive(Clone)]
pub(crate) struct Logs(
    pub(crate) tokio::sync::mpsc::UnboundedSender<(String, String)>,
    pub(crate) rmcp::model::ProtocolVersion,
);

impl rmcp::ClientHandler for Logs {
    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(log_entry(&params));
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("logs-test", "1"),
        )
        .with_protocol_version(self.1.clone())
    }
}

/// Named tokens (`HttpAuth::Tokens`), one for each of `names`, each
/// `NAME-secret`.
pub(crate) fn named_tokens(names: &[&str]) -> Vec<toolexec_mcp::gateway::NamedToken> {
    names
        .iter()
        .map(|name| toolexec_mcp::gateway::NamedToken {
            name: (*name).into(),
            token: toolexec::Secret::new(format!("{name}-secret")),
        })
        .collect()
}
