//! The gateway driven by rmcp's own client: in-process (duplex), over a
//! child process's stdio, and over streamable HTTP.

use crate::support::gateway as support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ErrorCode, JsonObject,
    ProgressNotificationParam, Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use toolexec::{LocalTool, Secret, ToolContext, ToolError, ToolOutput, raw_handler};
use toolexec_mcp::gateway::{Expose, Gateway, HttpAuth};

const WAIT: Duration = Duration::from_secs(10);

/// What the client saw besides responses.
#[derive(Debug)]
enum Note {
    Progress(ProgressNotificationParam),
    ListChanged,
    Log(Value),
}

#[derive(Clone)]
struct Recorder(mpsc::UnboundedSender<Note>);

#[allow(deprecated)] // logging notifications: deprecated by SEP-2577, current in 2025-11-25
impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(Note::Progress(params));
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(Note::ListChanged);
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(Note::Log(params.data));
    }
}

type Client = RunningService<RoleClient, Recorder>;

fn recorder() -> (Recorder, mpsc::UnboundedReceiver<Note>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Recorder(tx), rx)
}

async fn connect_duplex(gateway: Gateway) -> (Client, mpsc::UnboundedReceiver<Note>) {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let (rec, rx) = recorder();
    (rec.serve(client_io).await.expect("initialize"), rx)
}

async fn connect_http(
    addr: std::net::SocketAddr,
    token: Option<&str>,
) -> (Client, mpsc::UnboundedReceiver<Note>) {
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"));
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let (rec, rx) = recorder();
    let client = rec
        .serve(support::rmcp_http_transport(config))
        .await
        .expect("initialize over HTTP");
    (client, rx)
}

fn args(v: Value) -> JsonObject {
    v.as_object().cloned().expect("object")
}

async fn call(client: &Client, name: &str, a: Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args(a)))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn structured(r: &CallToolResult) -> &Value {
    r.structured_content.as_ref().expect("structuredContent")
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn json_rpc_code(e: ServiceError) -> ErrorCode {
    match e {
        ServiceError::McpError(data) => data.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn meta_tools_over_duplex() {
    let (client, _notes) = connect_duplex(support::demo_gateway(Expose::Meta)).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "toolexec");
    assert_eq!(info.protocol_version.as_str(), "2025-11-25");
    assert!(
        info.instructions
            .as_deref()
            .unwrap()
            .contains("search_tools")
    );
    assert!(info.capabilities.tools.is_some());

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "search_tools",
            "list_namespaces",
            "describe_tool",
            "run_tool",
            "run_chain",
            "execute_code"
        ]
    );
    for t in &tools {
        assert_eq!(t.input_schema["type"], "object", "{}", t.name);
        let out = t.output_schema.as_ref().expect("output schema");
        assert_eq!(out["type"], "object", "{}", t.name);
        assert!(t.description.as_ref().unwrap().len() > 100, "{}", t.name);
    }
    let chain = tools.iter().find(|t| t.name == "run_chain").unwrap();
    let step = &chain.input_schema["properties"]["steps"]["items"]["properties"];
    for key in ["tool_id", "args", "use_previous", "stop_on_error"] {
        assert!(step.get(key).is_some(), "run_chain step lacks {key}");
    }

    // search_tools
    let r = call(
        &client,
        "search_tools",
        json!({"query": "sha256 hash", "limit": 5}),
    )
    .await;
    assert_eq!(r.is_error, Some(false));
    let results = structured(&r)["results"].as_array().unwrap();
    assert_eq!(results[0]["id"], "hash:sha256", "{results:?}");
    let from_text: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(&from_text, structured(&r));

    // list_namespaces
    let r = call(&client, "list_namespaces", json!({})).await;
    let namespaces = structured(&r)["namespaces"].as_array().unwrap();
    assert!(
        namespaces
            .iter()
            .any(|n| n["name"] == "hash" && n["tools"] == 2),
        "{namespaces:?}"
    );

    // describe_tool at each level
    let r = call(&client, "describe_tool", json!({"tool_id": "hash:sha256"})).await;
    let d = structured(&r);
    assert_eq!(d["id"], "hash:sha256");
    assert_eq!(d["input_schema"]["type"], "object");
    assert!(d.get("examples").is_none());
    let r = call(
        &client,
        "describe_tool",
        json!({"tool_id": "hash:sha256", "detail": "full"}),
    )
    .await;
    assert!(!structured(&r)["examples"].as_array().unwrap().is_empty());
    let r = call(&client, "describe_tool", json!({"tool_id": "nope:nothing"})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(structured(&r)["error"]["code"], "tool_not_found");

    // run_tool: success, validation error, unknown tool
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "math:add", "args": {"a": 2, "b": 3}}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(structured(&r), &json!({"result": 5.0}));
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "hash:sha256", "args": {"text": "hello"}}),
    )
    .await;
    assert_eq!(
        structured(&r)["hex"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "math:add", "args": {"a": "two", "b": 3}}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).starts_with("validation_input"), "{}", text(&r));
    let err = &structured(&r)["error"];
    assert_eq!(err["code"], "validation_input");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("validation_input")
    );
    assert_eq!(
        err["details"]["violations"][0]["instance_path"], "/a",
        "{err}"
    );
    let r = call(&client, "run_tool", json!({"tool_id": "math:nothing"})).await;
    assert_eq!(structured(&r)["error"]["code"], "tool_not_found");
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "math:divide", "args": {"a": 1, "b": 0}}),
    )
    .await;
    assert_eq!(structured(&r)["error"]["code"], "execution_failed");

    // run_chain: success with use_previous, and a failing step
    let r = call(
        &client,
        "run_chain",
        json!({"steps": [
            {"tool_id": "encoding:base64_encode", "args": {"text": "hi"}},
            {"tool_id": "encoding:base64_decode", "use_previous": true}
        ]}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(structured(&r)["ok"], true);
    assert_eq!(structured(&r)["output"], json!({"text": "hi"}));
    let r = call(
        &client,
        "run_chain",
        json!({"steps": [
            {"tool_id": "math:add", "args": {"a": 1, "b": 2}},
            {"tool_id": "math:multiply", "args": {"a": 10}},
            {"tool_id": "math:add", "args": {"a": 1, "b": 2}}
        ]}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).starts_with("validation_input: step 1 (math:multiply)"),
        "{}",
        text(&r)
    );
    let s = structured(&r);
    assert_eq!(s["error"]["code"], "validation_input");
    assert_eq!(s["chain"]["steps"][2]["skipped"], true);
    let r = call(&client, "run_chain", json!({"steps": []})).await;
    assert_eq!(structured(&r)["error"]["code"], "invalid_request");

    // Protocol errors: unknown tool, malformed meta-tool arguments.
    let bad = [
        ("math__add", json!({"a": 1, "b": 2})),
        ("describe_tool", json!({"detail": "full"})),
        (
            "describe_tool",
            json!({"tool_id": "hash:sha256", "detail": "everything"}),
        ),
        ("search_tools", json!({"query": "x", "limit": 1000})),
        ("run_tool", json!({"tool": "math:add"})),
        ("run_chain", json!({"steps": [{"args": {}}]})),
    ];
    for (name, a) in bad {
        let e = client
            .call_tool(CallToolRequestParams::new(name).with_arguments(args(a.clone())))
            .await
            .expect_err(name);
        assert_eq!(json_rpc_code(e), ErrorCode::INVALID_PARAMS, "{name} {a}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn expose_all_publishes_catalog_tools() {
    let (client, _notes) = connect_duplex(support::demo_gateway(Expose::All)).await;
    let info = client.peer_info().unwrap();
    assert_eq!(
        info.capabilities.tools.as_ref().unwrap().list_changed,
        Some(true)
    );
    assert!(info.instructions.is_none());
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().all(|t| t.name != "search_tools"));
    let add = tools
        .iter()
        .find(|t| t.name == "math__add")
        .expect("math__add");
    assert_eq!(add.input_schema["type"], "object");
    assert!(add.input_schema["properties"].get("a").is_some());
    assert_eq!(add.output_schema.as_ref().unwrap()["type"], "object");
    assert_eq!(add.meta.as_ref().unwrap().0["toolexec/id"], "math:add");
    assert_eq!(add.annotations.as_ref().unwrap().read_only_hint, Some(true));
    assert_eq!(tools.len(), toolexec_builtins::catalog().len() + 2);

    let r = call(&client, "math__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(r.is_error, Some(false));
    assert_eq!(structured(&r), &json!({"result": 5.0}));
    let r = call(&client, "math__add", json!({"a": 2})).await;
    assert_eq!(structured(&r)["error"]["code"], "validation_input");
    let e = client
        .call_tool(
            CallToolRequestParams::new("search_tools").with_arguments(args(json!({"query": "x"}))),
        )
        .await
        .unwrap_err();
    assert_eq!(json_rpc_code(e), ErrorCode::INVALID_PARAMS);
    client.cancel().await.unwrap();

    let (client, _notes) = connect_duplex(support::demo_gateway(Expose::Both)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "run_chain"));
    assert!(tools.iter().any(|t| t.name == "hash__sha256"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn non_object_results_are_wrapped() {
    let gateway = support::demo_gateway(Expose::Both);
    let catalog = gateway.exec().catalog().clone();
    LocalTool::new(
        "test:answer",
        raw_handler(|_args: Value, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(ToolOutput::structured(json!(42)))
        }),
    )
    .description("The answer")
    .output_schema(json!({"type": "integer"}))
    .register(&catalog)
    .unwrap();
    let (client, mut notes) = connect_duplex(gateway).await;
    let tools = client.list_all_tools().await.unwrap();
    let t = tools.iter().find(|t| t.name == "test__answer").unwrap();
    let schema = t.output_schema.as_ref().unwrap();
    assert_eq!(schema["properties"]["result"]["type"], "integer");
    assert_eq!(schema["required"], json!(["result"]));
    let r = call(&client, "test__answer", json!({})).await;
    assert_eq!(structured(&r), &json!({"result": 42}));
    let r = call(&client, "run_tool", json!({"tool_id": "test:answer"})).await;
    assert_eq!(structured(&r), &json!({"result": 42}));
    let r = call(&client, "run_tool", json!({"tool_id": "test:answer:"})).await;
    assert_eq!(structured(&r)["error"]["code"], "invalid_tool_id");

    // A versioned tool: `ns__name__version`. `test:answer` now resolves to
    // it (the newest), so the unversioned entry is no longer published and
    // `test__answer` runs version 2.1, like `run_tool` does.
    LocalTool::new(
        "test:answer:2.1",
        raw_handler(|_args: Value, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(ToolOutput::structured(json!({"answer": 42})))
        }),
    )
    .description("The answer, version 2.1")
    .register(&catalog)
    .unwrap();
    // The client caches tools/list until it hears of the change.
    wait_for(&mut notes, |n| matches!(n, Note::ListChanged)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().all(|t| t.name != "test__answer"));
    let v2 = tools
        .iter()
        .find(|t| t.name == "test__answer__2.1")
        .unwrap();
    assert_eq!(
        v2.meta.as_ref().unwrap().0["toolexec/id"],
        "test:answer:2.1"
    );
    assert!(v2.output_schema.is_none());
    let r = call(&client, "test__answer__2.1", json!({})).await;
    assert_eq!(structured(&r), &json!({"answer": 42}));
    let r = call(&client, "test__answer", json!({})).await;
    assert_eq!(structured(&r), &json!({"answer": 42}));
    let r = call(&client, "run_tool", json!({"tool_id": "test:answer"})).await;
    assert_eq!(structured(&r), &json!({"answer": 42}));
    client.cancel().await.unwrap();
}

async fn wait_for(
    notes: &mut mpsc::UnboundedReceiver<Note>,
    mut pred: impl FnMut(&Note) -> bool,
) -> Vec<Note> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, notes.recv()).await {
            Ok(Some(n)) => {
                let done = pred(&n);
                seen.push(n);
                if done {
                    return seen;
                }
            }
            _ => panic!("notification not received; saw {seen:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn list_changed_after_registering_a_tool() {
    let gateway = support::demo_gateway(Expose::Both);
    let catalog = gateway.exec().catalog().clone();
    let (client, mut notes) = connect_duplex(gateway).await;
    let before = client.list_all_tools().await.unwrap().len();
    catalog
        .tool("late:echo", "Echoes", |v: LateArgs| async move {
            Ok::<_, ToolError>(v.text)
        })
        .unwrap();
    wait_for(&mut notes, |n| matches!(n, Note::ListChanged)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), before + 1);
    let r = call(&client, "late__echo", json!({"text": "hi"})).await;
    assert_eq!(structured(&r), &json!({"result": "hi"}));
    catalog.unregister("late:echo").unwrap();
    wait_for(&mut notes, |n| matches!(n, Note::ListChanged)).await;
    client.cancel().await.unwrap();
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LateArgs {
    text: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_and_chunks_are_relayed() {
    let gateway = support::demo_gateway(Expose::Meta);
    LocalTool::new(
        "test:steps",
        raw_handler(|_args: Value, ctx: ToolContext| async move {
            for i in 1..=4 {
                ctx.progress(f64::from(i), Some(4.0), Some(&format!("did {i}")));
                ctx.chunk(json!({"part": i})).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok::<_, ToolError>(ToolOutput::structured(json!({"done": true})))
        }),
    )
    .description("Four steps with progress")
    .register(gateway.exec().catalog())
    .unwrap();
    let (client, mut notes) = connect_duplex(gateway).await;

    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(
                CallToolRequestParams::new("run_tool")
                    .with_arguments(args(json!({"tool_id": "test:steps"}))),
            )),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let token = handle.progress_token.clone();
    let response = handle.await_response().await.unwrap();
    let rmcp::model::ServerResult::CallToolResult(r) = response else {
        panic!("unexpected response {response:?}")
    };
    assert_eq!(structured(&r), &json!({"done": true}));
    let seen = wait_for(
        &mut notes,
        |n| matches!(n, Note::Progress(p) if p.progress == 4.0),
    )
    .await;
    let progress: Vec<&ProgressNotificationParam> = seen
        .iter()
        .filter_map(|n| match n {
            Note::Progress(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(progress.len(), 4, "{seen:?}");
    assert!(
        progress
            .iter()
            .all(|p| p.progress_token == token && p.total == Some(4.0))
    );
    assert_eq!(progress[0].message.as_deref(), Some("did 1"));
    let mut chunks: Vec<Value> = seen
        .into_iter()
        .filter_map(|n| match n {
            Note::Log(v) => Some(v),
            _ => None,
        })
        .collect();
    while chunks.len() < 4 {
        match tokio::time::timeout(WAIT, notes.recv()).await {
            Ok(Some(Note::Log(v))) => chunks.push(v),
            Ok(Some(_)) => {}
            _ => panic!("chunks missing: {chunks:?}"),
        }
    }
    assert_eq!(chunks[0]["event"], "chunk");
    assert_eq!(chunks[3]["data"], json!({"part": 4}));

    // A chain reports one increasing progress sequence over all steps.
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(
                CallToolRequestParams::new("run_chain").with_arguments(args(json!({"steps": [
                    {"tool_id": "test:steps"},
                    {"tool_id": "math:add", "args": {"a": 1, "b": 2}}
                ]}))),
            )),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    handle.await_response().await.unwrap();
    let seen = wait_for(
        &mut notes,
        |n| matches!(n, Note::Progress(p) if p.progress == 2.0),
    )
    .await;
    let values: Vec<f64> = seen
        .iter()
        .filter_map(|n| match n {
            Note::Progress(p) => Some(p.progress),
            _ => None,
        })
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert!(values.len() >= 3, "{values:?}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_stops_a_long_tool() {
    let gateway = support::demo_gateway(Expose::Meta);
    let (started_tx, mut started_rx) = mpsc::unbounded_channel::<()>();
    let stopped = Arc::new(AtomicBool::new(false));
    let (stopped_tx, mut stopped_rx) = mpsc::unbounded_channel::<()>();
    {
        let stopped = stopped.clone();
        LocalTool::new(
            "test:forever",
            raw_handler(move |_args: Value, ctx: ToolContext| {
                let started = started_tx.clone();
                let stopped = stopped.clone();
                let stopped_tx = stopped_tx.clone();
                async move {
                    let _ = started.send(());
                    tokio::select! {
                        _ = ctx.cancelled() => {
                            stopped.store(true, Ordering::SeqCst);
                            let _ = stopped_tx.send(());
                            Err(ToolError::new("stopped"))
                        }
                        _ = tokio::time::sleep(Duration::from_secs(600)) => Ok(ToolOutput::default()),
                    }
                }
            }),
        )
        .description("Runs until cancelled")
        .register(gateway.exec().catalog())
        .unwrap();
    }
    let (client, _notes) = connect_duplex(gateway).await;
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(
                CallToolRequestParams::new("run_tool")
                    .with_arguments(args(json!({"tool_id": "test:forever"}))),
            )),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::timeout(WAIT, started_rx.recv())
        .await
        .expect("tool started");
    handle.cancel(Some("test".into())).await.unwrap();
    tokio::time::timeout(WAIT, stopped_rx.recv())
        .await
        .expect("the tool saw the cancellation");
    assert!(stopped.load(Ordering::SeqCst));
    // The connection stays usable.
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "math:add", "args": {"a": 1, "b": 1}}),
    )
    .await;
    assert_eq!(structured(&r), &json!({"result": 2.0}));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_child_process() {
    let bin = support::gateway_server_bin();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["--expose", "both"]);
    let (rec, _notes) = recorder();
    let client = rec
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .expect("initialize over stdio");
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "run_tool"));
    assert!(tools.iter().any(|t| t.name == "math__add"));
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "math:multiply", "args": {"a": 6, "b": 7}}),
    )
    .await;
    assert_eq!(structured(&r), &json!({"result": 42.0}));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn http_sessions_progress_and_list_changed() {
    let gateway = support::demo_gateway(Expose::Both);
    let catalog = gateway.exec().catalog().clone();
    let (addr, shutdown) =
        support::start_http(gateway, HttpAuth::Bearer(Secret::new("s3cret"))).await;

    let ((a, mut a_notes), (b, mut b_notes)) = tokio::join!(
        connect_http(addr, Some("s3cret")),
        connect_http(addr, Some("s3cret"))
    );
    // Two sessions run concurrently: each call sleeps 400 ms.
    let started = Instant::now();
    let (ra, rb) = tokio::join!(
        call(
            &a,
            "run_tool",
            json!({"tool_id": "demo:sleep", "args": {"ms": 400}})
        ),
        call(&b, "demo__sleep", json!({"ms": 400}))
    );
    assert_eq!(structured(&ra), &json!({"slept_ms": 400}));
    assert_eq!(structured(&rb), &json!({"slept_ms": 400}));
    assert!(
        started.elapsed() < Duration::from_millis(790),
        "{:?}",
        started.elapsed()
    );

    // Progress rides the request's SSE stream.
    let r = call(
        &a,
        "run_tool",
        json!({"tool_id": "demo:progress", "args": {"steps": 3, "delay_ms": 10}}),
    )
    .await;
    assert_eq!(structured(&r), &json!({"steps": 3}));
    wait_for(
        &mut a_notes,
        |n| matches!(n, Note::Progress(p) if p.progress == 3.0),
    )
    .await;

    // Both sessions hear about catalog changes.
    catalog
        .tool("late:echo", "Echoes", |v: LateArgs| async move {
            Ok::<_, ToolError>(v.text)
        })
        .unwrap();
    wait_for(&mut a_notes, |n| matches!(n, Note::ListChanged)).await;
    wait_for(&mut b_notes, |n| matches!(n, Note::ListChanged)).await;
    assert!(
        b.list_all_tools()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "late__echo")
    );

    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
    shutdown.cancel();
}

/// One raw HTTP/1.1 request; returns the status code and the head.
async fn raw_post(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> (u16, String) {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head)
}

#[tokio::test(flavor = "multi_thread")]
async fn http_auth_and_origin_checks() {
    let (addr, shutdown) = support::start_http(
        support::demo_gateway(Expose::Meta),
        HttpAuth::Bearer(Secret::new("right-token")),
    )
    .await;

    let (status, head) = raw_post(addr, &[]).await;
    assert_eq!(status, 401, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{head}"
    );
    let (status, _) = raw_post(addr, &[("Authorization", "Bearer wrong-token")]).await;
    assert_eq!(status, 401);
    let (status, _) = raw_post(addr, &[("Authorization", "Basic cmlnaHQtdG9rZW4=")]).await;
    assert_eq!(status, 401);
    let (status, head) = raw_post(
        addr,
        &[
            ("Authorization", "Bearer right-token"),
            ("Origin", "http://evil.example.com"),
        ],
    )
    .await;
    assert_eq!(status, 403, "{head}");
    let (status, _) = raw_post(addr, &[("Origin", "http://evil.example.com")]).await;
    assert_eq!(status, 403);
    let (status, head) = raw_post(
        addr,
        &[
            ("Authorization", "Bearer right-token"),
            ("Origin", "http://localhost:6274"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{head}");
    let (status, head) = raw_post(addr, &[("Authorization", "Bearer right-token")]).await;
    assert_eq!(status, 200, "{head}");
    // DNS rebinding: a loopback server refuses foreign Host names.
    let (status, head) = raw_post(
        addr,
        &[
            ("Authorization", "Bearer right-token"),
            ("Host", "evil.example.com"),
        ],
    )
    .await;
    assert!((400..500).contains(&status), "{head}");

    // The rmcp client with a wrong token fails to connect.
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"));
    config = config.auth_header("wrong-token");
    let (rec, _notes) = recorder();
    assert!(
        rec.serve(support::rmcp_http_transport(config))
            .await
            .is_err()
    );
    shutdown.cancel();

    // Without auth, any request passes the token check.
    let (addr, shutdown) = support::start_http(
        support::demo_gateway(Expose::Meta),
        HttpAuth::InsecureNoAuth,
    )
    .await;
    let (status, _) = raw_post(addr, &[]).await;
    assert_eq!(status, 200);
    let (client, _notes) = connect_http(addr, None).await;
    assert_eq!(client.list_all_tools().await.unwrap().len(), 6);
    client.cancel().await.unwrap();
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn http_shutdown_ends_sessions_and_the_server() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (addr, server) = toolexec_mcp::gateway::bind_http(
        support::demo_gateway(Expose::Meta),
        toolexec_mcp::gateway::HttpOptions::new(
            "127.0.0.1:0".parse().unwrap(),
            HttpAuth::InsecureNoAuth,
        ),
        shutdown.clone(),
    )
    .await
    .unwrap();
    let server = tokio::spawn(server);
    let (client, _notes) = connect_http(addr, None).await;
    assert_eq!(client.list_all_tools().await.unwrap().len(), 6);

    // The port is taken now.
    let err = toolexec_mcp::gateway::bind_http(
        support::demo_gateway(Expose::Meta),
        toolexec_mcp::gateway::HttpOptions::new(addr, HttpAuth::InsecureNoAuth),
        shutdown.clone(),
    )
    .await
    .err()
    .expect("second bind fails");
    assert_eq!(err.code().as_str(), "backend_unavailable", "{err}");
    // An empty token is refused up front.
    let err = toolexec_mcp::gateway::bind_http(
        support::demo_gateway(Expose::Meta),
        toolexec_mcp::gateway::HttpOptions::new(
            "127.0.0.1:0".parse().unwrap(),
            HttpAuth::Bearer(Secret::new("")),
        ),
        shutdown.clone(),
    )
    .await
    .err()
    .expect("empty token");
    assert_eq!(err.code().as_str(), "invalid_request");

    // With a client still connected (its SSE stream open), shutdown completes.
    shutdown.cancel();
    tokio::time::timeout(WAIT, server)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
    drop(client);
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_list_pages_through_large_catalogs() {
    let catalog = Arc::new(toolexec::Catalog::new());
    let tools: Vec<_> = (0..1500)
        .map(|i| {
            LocalTool::new(
                &format!("bulk:tool{i:04}"),
                raw_handler(|_args: Value, _ctx: ToolContext| async move {
                    Ok::<_, ToolError>(ToolOutput::default())
                }),
            )
            .description("A generated tool")
            .build()
            .unwrap()
        })
        .collect();
    catalog.register_many(tools, false).unwrap();
    let gateway = Gateway::new(
        toolexec::Exec::new(catalog),
        toolexec_mcp::gateway::GatewayOptions {
            expose: Expose::Both,
            ..Default::default()
        },
    );
    let (client, _notes) = connect_duplex(gateway).await;
    let first = client.list_tools(None).await.unwrap();
    assert_eq!(first.tools.len(), 6 + toolexec_mcp::gateway::TOOLS_PAGE);
    let cursor = first.next_cursor.clone().expect("a second page");
    let second = client
        .list_tools(Some(
            rmcp::model::PaginatedRequestParams::default().with_cursor(Some(cursor)),
        ))
        .await
        .unwrap();
    assert_eq!(second.tools.len(), 500);
    assert!(second.next_cursor.is_none());
    assert_eq!(second.tools[0].name, "bulk__tool1000");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 1506);
    let e = client
        .list_tools(Some(
            rmcp::model::PaginatedRequestParams::default().with_cursor(Some("not a cursor".into())),
        ))
        .await
        .unwrap_err();
    assert_eq!(json_rpc_code(e), ErrorCode::INVALID_PARAMS);
    client.cancel().await.unwrap();
}
