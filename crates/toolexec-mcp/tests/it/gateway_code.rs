//! The `execute_code` meta-tool (code mode over MCP), driven by rmcp's own
//! client in process: listing and schemas, scripts that call tools, failure
//! outcomes as `isError` results, limits and their server-side maxima,
//! `allowed_tools`, cancellation, and `describe_tool`'s TypeScript.

use crate::support::gateway as support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ErrorCode, JsonObject, Request,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use toolexec::{LocalTool, ToolContext, ToolError, ToolOutput, raw_handler};
use toolexec_mcp::gateway::{CodeModeOptions, Expose, Gateway, GatewayOptions};

const WAIT: Duration = Duration::from_secs(10);

type Client = RunningService<RoleClient, ()>;

async fn connect(gateway: Gateway) -> Client {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.expect("initialize")
}

fn args(v: Value) -> JsonObject {
    v.as_object().cloned().expect("object")
}

async fn try_call(client: &Client, name: &str, a: Value) -> Result<CallToolResult, ServiceError> {
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args(a)))
        .await
}

async fn call(client: &Client, name: &str, a: Value) -> CallToolResult {
    try_call(client, name, a)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

async fn run_code(client: &Client, a: Value) -> CallToolResult {
    call(client, "execute_code", a).await
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

/// Asserts an error result of `kind` and returns its structured outcome.
#[track_caller]
fn expect_failure<'a>(r: &'a CallToolResult, kind: &str) -> &'a Value {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(
        text(r).starts_with(&format!("{kind}: ")),
        "expected {kind}: {}",
        text(r)
    );
    let s = structured(r);
    assert_eq!(s["status"]["kind"], kind, "{s}");
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn execute_code_is_listed_with_schemas() {
    for expose in [Expose::Meta, Expose::Both] {
        let client = connect(support::demo_gateway(expose)).await;
        let tools = client.list_all_tools().await.unwrap();
        let t = tools
            .iter()
            .find(|t| t.name == "execute_code")
            .unwrap_or_else(|| panic!("{expose}: execute_code not listed"));
        let input = &t.input_schema;
        assert_eq!(input["type"], "object");
        assert_eq!(input["required"], json!(["code"]));
        let props = input["properties"].as_object().unwrap();
        for key in ["code", "timeout_ms", "max_tool_calls", "allowed_tools"] {
            assert!(props.contains_key(key), "input schema lacks {key}");
        }
        assert_eq!(props["timeout_ms"]["maximum"], 300_000);
        assert_eq!(props["timeout_ms"]["default"], 30_000);
        assert_eq!(props["max_tool_calls"]["maximum"], 1000);
        let output = t.output_schema.as_ref().expect("output schema");
        assert_eq!(output["type"], "object");
        for key in ["status", "value", "stdout", "stderr", "tool_calls"] {
            assert!(
                output["properties"].get(key).is_some(),
                "output lacks {key}"
            );
        }
        let d = t.description.as_deref().unwrap();
        for needle in [
            "async function",
            "tools.run(\"ns:name\", args)",
            "tools.search",
            "tools.describe",
            "Promise.all",
            "`typescript`",
            "at most 300000 ms",
            "console",
        ] {
            assert!(d.contains(needle), "description lacks {needle:?}:\n{d}");
        }
        client.cancel().await.unwrap();
    }
    let client = connect(support::demo_gateway(Expose::All)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name == "execute_code"));
    let err = try_call(&client, "execute_code", json!({"code": "return 1"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ServiceError::McpError(e) if e.code == ErrorCode::INVALID_PARAMS));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_call_tools_and_return_the_outcome() {
    let client = connect(support::demo_gateway(Expose::Meta)).await;
    let r = run_code(
        &client,
        json!({"code": r#"
            const [sum, digest, words] = await Promise.all([
                tools.math.add({a: 2, b: 3}),
                tools.run("hash:sha256", {text: "abc"}),
                tools.text.word_count({text: "one two three"}),
            ]);
            console.log("sum is", sum.result);
            console.error("careful");
            const found = await tools.search("sha256 digest", 3);
            return {sum: sum.result, hex: digest.hex.slice(0, 8), words: words.words, top: found[0].id};
        "#}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let s = structured(&r);
    assert_eq!(s["status"], json!({"kind": "ok"}), "{s}");
    assert_eq!(
        s["value"],
        json!({"sum": 5, "hex": "ba7816bf", "words": 3, "top": "hash:sha256"})
    );
    assert_eq!(s["stdout"], "sum is 5\n");
    assert_eq!(s["stderr"], "careful\n");
    let calls = s["tool_calls"].as_array().unwrap();
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c["tool_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["math:add", "hash:sha256", "text:word_count"]);
    assert!(calls.iter().all(|c| c["ok"] == true));
    // The log summarizes: size, digest and preview, never the values.
    assert_eq!(calls[0]["args"]["preview"], r#"{"a":2,"b":3}"#);
    assert_eq!(calls[0]["args"]["bytes"], 13);
    assert_eq!(calls[0]["result"]["preview"], r#"{"result":5.0}"#);
    assert_eq!(calls[0]["result"]["sha256"].as_str().unwrap().len(), 64);
    assert!(s["duration_ms"].as_f64().unwrap() > 0.0);
    // The outcome is sent once: the one text block is a short summary.
    assert_eq!(r.content.len(), 1);
    let summary = text(&r);
    assert!(summary.starts_with("ok\nvalue: {"), "{summary}");
    assert!(summary.contains("tool calls: 3"), "{summary}");
    assert!(
        serde_json::from_str::<Value>(&summary).is_err(),
        "{summary}"
    );

    // A caught tool error is just data; no return gives null.
    let r = run_code(
        &client,
        json!({"code": "try { await tools.math.divide({a: 1, b: 0}) } catch (e) { console.log(e.code) }"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(structured(&r)["value"], Value::Null);
    assert_eq!(structured(&r)["stdout"], "execution_failed\n");
    client.cancel().await.unwrap();
}

/// Twenty calls with a 2 MiB argument each (tools that accept them): the response (serialized as
/// rmcp sends it) stays under the 1 MiB output limit, because the log keeps
/// records of sizes, digests and previews and the outcome is sent once.
#[tokio::test(flavor = "multi_thread")]
async fn big_tool_arguments_keep_the_response_under_the_output_limit() {
    let options = CodeModeOptions::default();
    assert_eq!(options.max_output_bytes, 1 << 20);
    // Tools accept arguments of up to 4 MiB here (1 MiB by default).
    let exec = toolexec::Exec::builder()
        .catalog(support::demo_exec().catalog().clone())
        .limits(toolexec::Limits {
            max_input_bytes: 4 << 20,
            ..toolexec::Limits::default()
        })
        .build();
    let gateway = Gateway::new(
        exec,
        GatewayOptions {
            expose: Expose::Meta,
            ..GatewayOptions::default()
        },
    );
    let client = connect(gateway).await;
    for (code, kind) in [
        (
            "const s = 'a'.repeat(2 << 20); let n = 0;
             for (let i = 0; i < 20; i++) n += (await tools.text.word_count({text: s})).words;
             return n;",
            "ok",
        ),
        // The same ending in a failure: the log comes back with it.
        (
            "const s = 'a'.repeat(2 << 20);
             for (let i = 0; i < 20; i++) await tools.text.word_count({text: s});
             throw new Error('after the calls');",
            "exception",
        ),
    ] {
        // Bounded, so a response the client never gets (the old 84 MB one
        // stalled the in-process client) fails instead of hanging.
        let r = tokio::time::timeout(
            Duration::from_secs(300),
            run_code(
                &client,
                json!({"code": code, "timeout_ms": 120000, "max_tool_calls": 20}),
            ),
        )
        .await
        .expect("no execute_code response within 5 minutes");
        let s = structured(&r);
        assert_eq!(s["status"]["kind"], kind, "{}", text(&r));
        if kind == "ok" {
            assert_eq!(s["value"], 20);
        }
        let calls = s["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 20);
        assert!(calls.iter().all(|c| c["args"]["bytes"] == (2 << 20) + 11));
        let size = serde_json::to_vec(&r).unwrap().len();
        eprintln!("execute_code response ({kind}): {size} bytes");
        assert!(
            size < options.max_output_bytes,
            "{size} bytes, over the output limit"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_come_back_as_error_results_with_their_kind() {
    let client = connect(support::demo_gateway(Expose::Meta)).await;

    let r = run_code(
        &client,
        json!({"code": "console.log('never');\nconst x = 1 +;"}),
    )
    .await;
    let s = expect_failure(&r, "syntax_error");
    assert_eq!(
        (&s["status"]["line"], &s["status"]["column"]),
        (&json!(2), &json!(14))
    );
    assert!(
        text(&r).starts_with("syntax_error: line 2, column 14: "),
        "{}",
        text(&r)
    );
    assert_eq!(s["stdout"], "");

    let r = run_code(
        &client,
        json!({"code": "function boom() { throw new RangeError('no way') }\nboom()"}),
    )
    .await;
    let s = expect_failure(&r, "exception");
    assert_eq!(s["status"]["message"], "RangeError: no way");
    assert!(
        s["status"]["stack"].as_str().unwrap().contains("boom"),
        "{s}"
    );

    let started = Instant::now();
    let r = run_code(
        &client,
        json!({"code": "console.log('spinning'); for (;;) {}", "timeout_ms": 200}),
    )
    .await;
    let s = expect_failure(&r, "limit_exceeded");
    assert_eq!(s["status"]["limit"], "timeout");
    assert_eq!(s["stdout"], "spinning\n", "output so far is kept");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let r = run_code(
        &client,
        json!({"code": "for (let i = 0; i < 5; i++) await tools.math.add({a: i, b: 1})", "max_tool_calls": 2}),
    )
    .await;
    let s = expect_failure(&r, "limit_exceeded");
    assert_eq!(s["status"]["limit"], "tool_calls");
    assert_eq!(s["tool_calls"].as_array().unwrap().len(), 2);

    let r = run_code(
        &client,
        json!({"code": "await tools.math.add({a: 1, b: 2});\nawait tools.math.add({a: 'one'})"}),
    )
    .await;
    let s = expect_failure(&r, "tool_error");
    assert_eq!(s["status"]["call_index"], 1);
    assert_eq!(s["status"]["tool_id"], "math:add");
    assert_eq!(s["status"]["error"]["code"], "validation_input");
    assert!(
        text(&r).starts_with("tool_error: call 1 (math:add) failed: validation_input"),
        "{}",
        text(&r)
    );
    assert_eq!(s["tool_calls"][0]["ok"], true);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_tools_and_limit_maxima_are_enforced() {
    let client = connect(support::demo_gateway(Expose::Meta)).await;
    let only_math = |code: &str| json!({"code": code, "allowed_tools": ["math:*"]});
    let r = run_code(
        &client,
        only_math("return (await tools.math.multiply({a: 6, b: 7})).result"),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(structured(&r)["value"], 42);
    let r = run_code(&client, only_math("await tools.hash.sha256({text: 'x'})")).await;
    let s = expect_failure(&r, "tool_error");
    assert_eq!(s["status"]["error"]["code"], "not_allowed", "{s}");
    assert_eq!(s["status"]["tool_id"], "hash:sha256");
    // Search only shows allowed tools.
    let r = run_code(
        &client,
        only_math("return (await tools.search('sha256 hash', 10)).map(m => m.id)"),
    )
    .await;
    let ids = structured(&r)["value"].as_array().unwrap().clone();
    assert!(
        ids.iter()
            .all(|id| id.as_str().unwrap().starts_with("math:")),
        "{ids:?}"
    );

    // Limits beyond the server's maxima, and malformed arguments, are
    // protocol errors (the input schema declares the ranges).
    for bad in [
        json!({"code": "1", "timeout_ms": 300_001}),
        json!({"code": "1", "timeout_ms": 0}),
        json!({"code": "1", "max_tool_calls": 1001}),
        json!({"code": "1", "memory": 1}),
        json!({"timeout_ms": 10}),
        json!({"code": "1", "allowed_tools": "math:*"}),
    ] {
        let err = try_call(&client, "execute_code", bad.clone())
            .await
            .expect_err(&bad.to_string());
        match err {
            ServiceError::McpError(e) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{bad}");
                assert!(e.message.contains("execute_code"), "{bad}: {}", e.message);
            }
            other => panic!("{bad}: {other}"),
        }
    }

    // The server's options set the defaults and maxima.
    let gateway = Gateway::new(
        support::demo_exec(),
        GatewayOptions {
            code: CodeModeOptions {
                default_max_tool_calls: 1,
                max_tool_calls: 3,
                ..CodeModeOptions::default()
            },
            ..GatewayOptions::default()
        },
    );
    let strict = connect(gateway).await;
    let r = run_code(
        &strict,
        json!({"code": "await tools.math.add({a: 1, b: 1}); await tools.math.add({a: 1, b: 1})"}),
    )
    .await;
    assert_eq!(
        expect_failure(&r, "limit_exceeded")["status"]["limit"],
        "tool_calls"
    );
    assert!(
        try_call(
            &strict,
            "execute_code",
            json!({"code": "1", "max_tool_calls": 4})
        )
        .await
        .is_err()
    );
    strict.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn client_cancellation_stops_the_script_and_its_tool_calls() {
    // One worker: the slot must come back after the cancellation.
    let gateway = Gateway::new(
        support::demo_exec(),
        GatewayOptions {
            code: CodeModeOptions {
                max_concurrent: 1,
                ..CodeModeOptions::default()
            },
            ..GatewayOptions::default()
        },
    );
    let (event_tx, mut events) = mpsc::unbounded_channel::<&'static str>();
    LocalTool::new(
        "test:wait",
        raw_handler(move |_args: Value, ctx: ToolContext| {
            let events = event_tx.clone();
            async move {
                let _ = events.send("started");
                tokio::select! {
                    _ = ctx.cancelled() => {
                        let _ = events.send("cancelled");
                        Err(ToolError::new("cancelled"))
                    }
                    _ = tokio::time::sleep(Duration::from_secs(600)) => Ok(ToolOutput::default()),
                }
            }
        }),
    )
    .description("Waits until cancelled")
    .register(gateway.exec().catalog())
    .unwrap();
    let ticks = Arc::new(AtomicUsize::new(0));
    {
        let ticks = ticks.clone();
        LocalTool::new(
            "test:tick",
            raw_handler(move |_args: Value, _ctx: ToolContext| {
                let ticks = ticks.clone();
                async move {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok::<_, ToolError>(ToolOutput::default())
                }
            }),
        )
        .description("Counts its calls")
        .register(gateway.exec().catalog())
        .unwrap();
    }
    let client = connect(gateway).await;
    let start = |code: &str| {
        let request = ClientRequest::CallToolRequest(Request::new(
            CallToolRequestParams::new("execute_code").with_arguments(args(
                json!({"code": code, "timeout_ms": 120_000, "max_tool_calls": 1000}),
            )),
        ));
        client.send_cancellable_request(request, PeerRequestOptions::no_options())
    };

    // A script awaiting a long tool call: the call sees the cancellation.
    let handle = start("await tools.test.wait({}); return 'finished'")
        .await
        .unwrap();
    let first = tokio::time::timeout(WAIT, events.recv()).await.unwrap();
    assert_eq!(first, Some("started"));
    let cancelled_at = Instant::now();
    handle.cancel(Some("test".into())).await.unwrap();
    let next = tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("the tool call saw the cancellation");
    assert_eq!(next, Some("cancelled"));
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        cancelled_at.elapsed()
    );

    // A script busy in a loop of tool calls: the calls stop.
    let handle = start("for (;;) await tools.test.tick({})").await.unwrap();
    let deadline = Instant::now() + WAIT;
    while ticks.load(Ordering::SeqCst) < 5 {
        assert!(Instant::now() < deadline, "the script never ticked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.cancel(Some("test".into())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_cancel = ticks.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ticks.load(Ordering::SeqCst),
        after_cancel,
        "the script kept running"
    );

    // A CPU-bound script: cancelled, and the single worker slot is free
    // again at once for the next script.
    let handle = start("for (;;) {}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    handle.cancel(Some("test".into())).await.unwrap();
    let started = Instant::now();
    let r = run_code(
        &client,
        json!({"code": "return 'next'", "timeout_ms": 5000}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(structured(&r)["value"], "next");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn describe_tool_includes_typescript() {
    let client = connect(support::demo_gateway(Expose::Meta)).await;
    for detail in ["schema", "full"] {
        let r = call(
            &client,
            "describe_tool",
            json!({"tool_id": "math:add", "detail": detail}),
        )
        .await;
        let ts = structured(&r)["typescript"]
            .as_str()
            .unwrap_or_else(|| panic!("{detail}: no typescript in {}", structured(&r)));
        assert!(ts.contains("interface MathTools {"), "{ts}");
        assert!(ts.contains("  add(args: {"), "{ts}");
        assert!(ts.contains("    a: number;"), "{ts}");
        assert!(ts.contains("Promise<{"), "{ts}");
        assert!(ts.contains("Tool id: `math:add`."), "{ts}");
    }
    let r = call(
        &client,
        "describe_tool",
        json!({"tool_id": "math:add", "detail": "summary"}),
    )
    .await;
    assert!(structured(&r).get("typescript").is_none());
    let tools = client.list_all_tools().await.unwrap();
    let describe = tools.iter().find(|t| t.name == "describe_tool").unwrap();
    assert!(
        describe
            .description
            .as_deref()
            .unwrap()
            .contains("typescript")
    );
    assert!(describe.output_schema.as_ref().unwrap()["properties"]["typescript"].is_object());
    client.cancel().await.unwrap();
}

use crate::support::hardened;

/// A gateway running `execute_code` under profile `hardened` on `runtimes`.
fn hardened_gateway(runtimes: Option<Arc<toolexec_runtime::Runtimes>>) -> Gateway {
    Gateway::new(
        support::demo_exec(),
        GatewayOptions {
            code: CodeModeOptions {
                profile: toolexec_runtime::Profile::Hardened,
                max_concurrent: 2,
                ..CodeModeOptions::default()
            },
            runtimes,
            ..GatewayOptions::default()
        },
    )
}

const SHAPE_SCRIPT: &str = r#"
const [a, b] = await Promise.all([
    tools.math.add({a: 2, b: 3}),
    tools.run("hash:sha256", {text: "abc"}),
]);
console.log("sum", a.result);
console.warn("careful");
const hits = await tools.search("multiply two numbers", 2);
const d = await tools.describe("math:add");
return {sum: a.result, hex: b.hex.slice(0, 8), hit: hits[0].id, described: d.id};
"#;

#[tokio::test(flavor = "multi_thread")]
async fn hardened_execute_code_matches_in_process_results() {
    let Some(runtimes) =
        hardened::bubblewrap_runtimes("hardened_execute_code_matches_in_process_results")
    else {
        return;
    };
    let standard = connect(support::demo_gateway(Expose::Meta)).await;
    let hardened = connect(hardened_gateway(Some(runtimes))).await;
    let s = run_code(&standard, json!({"code": SHAPE_SCRIPT})).await;
    let h = run_code(&hardened, json!({"code": SHAPE_SCRIPT})).await;
    assert_ne!(h.is_error, Some(true), "{h:?}");
    let (s, h) = (structured(&s).clone(), structured(&h).clone());
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&h), keys(&s), "{h}");
    for field in ["status", "value", "stdout", "stderr"] {
        assert_eq!(h[field], s[field], "{field}: {h}");
    }
    assert_eq!(h["value"]["described"], "math:add", "{h}");
    let calls = |v: &Value| {
        v["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["tool_id"].clone(), c["args"].clone(), c["ok"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&h), calls(&s));
    assert_eq!(h["tool_calls"].as_array().unwrap().len(), 2, "{h}");

    // Failures keep their kinds: syntax, exception, not allowed.
    let r = run_code(&hardened, json!({"code": "return 1 +"})).await;
    expect_failure(&r, "syntax_error");
    let r = run_code(&hardened, json!({"code": "throw new Error('boom')"})).await;
    assert!(text(&r).contains("boom"), "{}", text(&r));
    expect_failure(&r, "exception");
    let r = run_code(
        &hardened,
        json!({"code": "return await tools.hash.sha256({text: 'x'})", "allowed_tools": ["math:*"]}),
    )
    .await;
    let s = expect_failure(&r, "tool_error");
    assert_eq!(s["status"]["error"]["code"], "not_allowed", "{s}");
    assert_eq!(s["tool_calls"][0]["ok"], false, "{s}");
    standard.cancel().await.unwrap();
    hardened.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_hardened_scripts_hit_their_limits() {
    let Some(runtimes) = hardened::bubblewrap_runtimes("hostile_hardened_scripts_hit_their_limits")
    else {
        return;
    };
    let client = connect(hardened_gateway(Some(runtimes))).await;
    let limit = |r: &CallToolResult| structured(r)["status"]["limit"].clone();

    let r = run_code(&client, json!({"code": "for (;;) {}", "timeout_ms": 1000})).await;
    expect_failure(&r, "limit_exceeded");
    assert_eq!(limit(&r), "timeout", "{r:?}");

    let r = run_code(
        &client,
        json!({"code": "const a = []; for (;;) a.push('x'.repeat(1 << 20) + a.length);"}),
    )
    .await;
    expect_failure(&r, "limit_exceeded");
    assert_eq!(limit(&r), "memory", "{r:?}");

    let r = run_code(
        &client,
        json!({"code": "for (let i = 0; ; i++) await tools.math.add({a: i, b: 1});", "max_tool_calls": 4}),
    )
    .await;
    let s = expect_failure(&r, "limit_exceeded");
    assert_eq!(s["status"]["limit"], "tool_calls", "{s}");
    // The host's log: exactly the budget.
    assert_eq!(s["tool_calls"].as_array().unwrap().len(), 4, "{s}");

    // No host access from the sandboxed script.
    let r = run_code(
        &client,
        json!({"code": "return typeof require + typeof process + typeof fetch"}),
    )
    .await;
    assert_eq!(structured(&r)["value"], "undefinedundefinedundefined");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hardened_without_a_runtime_never_runs_in_process() {
    for runtimes in [None, Some(Arc::new(toolexec_runtime::Runtimes::default()))] {
        let client = connect(hardened_gateway(runtimes)).await;
        let r = run_code(&client, json!({"code": "return 1"})).await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let t = text(&r);
        assert!(t.starts_with("backend_unavailable"), "{t}");
        assert!(t.contains("hardened"), "{t}");
        assert_eq!(
            structured(&r)["error"]["code"],
            "backend_unavailable",
            "{r:?}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hardened_client_cancellation_stops_the_sandbox() {
    let Some(runtimes) =
        hardened::bubblewrap_runtimes("hardened_client_cancellation_stops_the_sandbox")
    else {
        return;
    };
    let gateway = hardened_gateway(Some(runtimes));
    let (event_tx, mut events) = mpsc::unbounded_channel::<&'static str>();
    LocalTool::new(
        "test:wait",
        raw_handler(move |_args: Value, ctx: ToolContext| {
            let events = event_tx.clone();
            async move {
                let _ = events.send("started");
                tokio::select! {
                    _ = ctx.cancelled() => {
                        let _ = events.send("cancelled");
                        Err(ToolError::new("cancelled"))
                    }
                    _ = tokio::time::sleep(Duration::from_secs(600)) => Ok(ToolOutput::default()),
                }
            }
        }),
    )
    .description("Waits until cancelled")
    .register(gateway.exec().catalog())
    .unwrap();
    let client = connect(gateway).await;
    let request = ClientRequest::CallToolRequest(Request::new(
        CallToolRequestParams::new("execute_code").with_arguments(args(
            json!({"code": "await tools.test.wait({}); return 'finished'", "timeout_ms": 120_000}),
        )),
    ));
    let handle = client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .expect("the sandboxed script called the tool");
    assert_eq!(first, Some("started"));
    handle.cancel(Some("test".into())).await.unwrap();
    let next = tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("the tool call saw the cancellation");
    assert_eq!(next, Some("cancelled"));
    // The server still answers, and runs the next hardened script.
    let r = run_code(&client, json!({"code": "return 2"})).await;
    assert_eq!(structured(&r)["value"], 2, "{r:?}");
    client.cancel().await.unwrap();
}
