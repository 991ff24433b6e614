//! Per-caller policy and quotas through the HTTP gateway: callers are
//! told apart by their named bearer tokens; what one may not run it can
//! neither see nor reach (direct tools, `run_tool`, `run_chain`,
//! `execute_code`, search, prompts, resources); quotas hold under 1,000
//! concurrent calls from several clients. Driven by rmcp's client.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, CallToolResult, CompleteRequestParams, ErrorCode,
    GetPromptRequestParams, ReadResourceRequestParams, Reference, SubscribeRequestParams,
};
use rmcp::service::{ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::policy::{Policy, PolicyConfig};
use toolexec::quota::{CallQuota, QuotaConfig, Quotas};
use toolexec::{Catalog, Exec, Secret};
use toolexec_mcp::gateway::{
    self, CodeModeOptions, Expose, Gateway, GatewayOptions, HttpAuth, HttpOptions, RPC_NOT_ALLOWED,
    RunLimits,
};
use toolexec_mcp::upstream::Upstream;

use crate::support::gateway as support;

type Client = RunningService<RoleClient, ()>;

fn policy(v: Value) -> Policy {
    let config: PolicyConfig = serde_json::from_value(v).unwrap();
    Policy::new(&config).unwrap()
}

/// Tokens `ops` and `root`, named after their callers.
fn tokens() -> HttpAuth {
    HttpAuth::Tokens(support::named_tokens(&[
        "ops", "root", "c0", "c1", "c2", "c3",
    ]))
}

async fn serve(gateway: Gateway, options: HttpOptions) -> (SocketAddr, CancellationToken) {
    let shutdown = CancellationToken::new();
    let (addr, server) = gateway::bind_http(gateway, options, shutdown.clone())
        .await
        .expect("bind the HTTP gateway");
    tokio::spawn(server);
    (addr, shutdown)
}

async fn connect(addr: SocketAddr, caller: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(format!("{caller}-secret"));
    ().serve(support::rmcp_http_transport(config))
        .await
        .expect("initialize over HTTP")
}

async fn call(client: &Peer<RoleClient>, name: &str, args: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    client
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn structured(r: &CallToolResult) -> &Value {
    r.structured_content.as_ref().expect("structuredContent")
}

/// An `isError` result refused by `rule`.
fn refused(r: &CallToolResult, rule: &str) {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let error = &structured(r)["error"];
    assert_eq!(error["code"], "not_allowed", "{error}");
    assert_eq!(error["details"]["rule"], rule, "{error}");
}

async fn tool_names(client: &Client) -> Vec<String> {
    let tools = client.list_all_tools().await.unwrap();
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

async fn search_ids(client: &Client, query: &str) -> Vec<String> {
    let r = call(client, "search_tools", json!({"query": query, "limit": 50})).await;
    structured(&r)["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The built-ins and the demo tools, for `ops` and `root`; only `root`
/// may use the `demo` namespace (rule `demo-is-root-only`).
fn demo_exec_for_staff() -> Exec {
    let catalog = toolexec_builtins::catalog();
    support::register_demo_tools(&catalog);
    Exec::builder()
        .catalog(catalog)
        .policy(policy(json!({"rules": [
            {"name": "staff", "effect": "allow", "tokens": ["ops", "root"]},
            {"name": "demo-is-root-only", "effect": "deny", "tokens": ["ops"], "namespaces": ["demo"]},
        ]})))
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn callers_see_and_reach_only_what_the_policy_allows() {
    let exec = demo_exec_for_staff();
    let gateway = Gateway::new(
        exec,
        GatewayOptions {
            expose: Expose::Both,
            ..GatewayOptions::default()
        },
    );
    let options = HttpOptions::new("127.0.0.1:0".parse().unwrap(), tokens());
    let (addr, shutdown) = serve(gateway, options).await;
    let (ops, root) = tokio::join!(connect(addr, "ops"), connect(addr, "root"));

    // Lists and search differ by caller.
    let (ops_names, root_names) = tokio::join!(tool_names(&ops), tool_names(&root));
    assert!(ops_names.contains(&"math__add".to_owned()), "{ops_names:?}");
    assert!(
        !ops_names.iter().any(|n| n.starts_with("demo__")),
        "{ops_names:?}"
    );
    assert!(
        root_names.contains(&"demo__sleep".to_owned()),
        "{root_names:?}"
    );
    assert_eq!(root_names.len(), ops_names.len() + 2);
    let (ops_hits, root_hits) = tokio::join!(
        search_ids(&ops, "sleep progress demo"),
        search_ids(&root, "sleep progress demo")
    );
    assert!(
        !ops_hits.iter().any(|id| id.starts_with("demo:")),
        "{ops_hits:?}"
    );
    assert!(
        root_hits.contains(&"demo:sleep".to_owned()),
        "{root_hits:?}"
    );
    let namespaces = |r: CallToolResult| -> Vec<String> {
        structured(&r)["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let ops_ns = namespaces(call(&ops, "list_namespaces", json!({})).await);
    let root_ns = namespaces(call(&root, "list_namespaces", json!({})).await);
    assert!(!ops_ns.contains(&"demo".to_owned()), "{ops_ns:?}");
    assert!(root_ns.contains(&"demo".to_owned()), "{root_ns:?}");

    // Every path to a denied tool is refused, naming the rule.
    let rule = "demo-is-root-only";
    let sleep = json!({"ms": 1});
    refused(&call(&ops, "demo__sleep", sleep.clone()).await, rule);
    refused(
        &call(
            &ops,
            "run_tool",
            json!({"tool_id": "demo:sleep", "args": sleep}),
        )
        .await,
        rule,
    );
    refused(
        &call(&ops, "describe_tool", json!({"tool_id": "demo:sleep"})).await,
        rule,
    );
    let chain = call(
        &ops,
        "run_chain",
        json!({"steps": [
            {"tool_id": "math:add", "args": {"a": 1, "b": 2}},
            {"tool_id": "demo:sleep", "args": {"ms": 1}},
        ]}),
    )
    .await;
    assert_eq!(chain.is_error, Some(true), "{chain:?}");
    let steps = &structured(&chain)["chain"]["steps"];
    assert!(steps[0]["error"].is_null(), "{steps}");
    assert_eq!(steps[1]["error"]["code"], "not_allowed", "{steps}");
    let code = call(
        &ops,
        "execute_code",
        json!({"code": r#"
            const found = await tools.search("sleep demo", 50);
            try { await tools.run("demo:sleep", {ms: 1}); return "ran"; }
            catch (e) { return {code: e.code, demo: found.filter(t => t.id.startsWith("demo:")).length}; }
        "#}),
    )
    .await;
    assert_eq!(
        structured(&code)["value"],
        json!({"code": "not_allowed", "demo": 0}),
        "{code:?}"
    );

    // The caller the rule is not about runs the tool.
    let r = call(&root, "demo__sleep", json!({"ms": 1})).await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let code = call(
        &root,
        "execute_code",
        json!({"code": "return await tools.run(\"demo:sleep\", {ms: 1})"}),
    )
    .await;
    assert_eq!(
        structured(&code)["value"],
        json!({"slept_ms": 1}),
        "{code:?}"
    );

    ops.cancel().await.unwrap();
    root.cancel().await.unwrap();
    shutdown.cancel();
}

fn rpc_refused<T: std::fmt::Debug>(r: Result<T, ServiceError>, rule: &str) {
    match r {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode(RPC_NOT_ALLOWED), "{e:?}");
            let data = e.data.expect("data");
            assert_eq!(data["code"], "not_allowed", "{data}");
            assert_eq!(data["rule"], rule, "{data}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // resources/subscribe: legacy in 2026-07-28, current in 2025-11-25
async fn upstream_prompts_and_resources_follow_the_policy() {
    let Some(python) = toolexec_testkit::deps(
        "upstream_prompts_and_resources_follow_the_policy",
        &["TOOLEXEC_PYTHON"],
    )
    .map(|mut v| v.remove(0)) else {
        return;
    };
    let catalog = Arc::new(Catalog::new());
    let mut env = BTreeMap::new();
    env.insert("PY_UPSTREAM_LABEL".to_owned(), Secret::new("one"));
    let config = crate::support::upstream::py_stdio_config("one", &python, env);
    let upstream = Arc::new(Upstream::connect(config, catalog.clone()).await.unwrap());
    let exec = Exec::builder()
        .catalog(catalog)
        .policy(policy(json!({"rules": [
            {"name": "staff", "effect": "allow", "tokens": ["ops", "root"]},
            {"name": "no-review", "effect": "deny", "tokens": ["ops"], "prompts": ["one:review"]},
            {"name": "no-static", "effect": "deny", "tokens": ["ops"], "resources": ["test://static/*"]},
            {"name": "no-greetings", "effect": "deny", "tokens": ["ops"], "resources": ["greeting://*"]},
        ]})))
        .build();
    let gateway = Gateway::with_upstreams(exec, GatewayOptions::default(), vec![upstream.clone()]);
    let options = HttpOptions::new("127.0.0.1:0".parse().unwrap(), tokens());
    let (addr, shutdown) = serve(gateway, options).await;
    let (ops, root) = tokio::join!(connect(addr, "ops"), connect(addr, "root"));

    let prompts = |all: Vec<rmcp::model::Prompt>| -> Vec<String> {
        all.into_iter().map(|p| p.name).collect()
    };
    let ops_prompts = prompts(ops.list_all_prompts().await.unwrap());
    assert!(
        !ops_prompts.contains(&"one__review".to_owned()),
        "{ops_prompts:?}"
    );
    let root_prompts = prompts(root.list_all_prompts().await.unwrap());
    assert!(
        root_prompts.contains(&"one__review".to_owned()),
        "{root_prompts:?}"
    );
    let get = GetPromptRequestParams::new("one__review")
        .with_arguments(json!({"code": "x = 1"}).as_object().cloned().unwrap());
    rpc_refused(ops.get_prompt(get.clone()).await, "no-review");
    let got = root.get_prompt(get).await.unwrap();
    assert!(!got.messages.is_empty());

    let uris = |resources: Vec<rmcp::model::Resource>| -> Vec<String> {
        resources.into_iter().map(|r| r.uri.clone()).collect()
    };
    let ops_uris = uris(ops.list_all_resources().await.unwrap());
    let root_uris = uris(root.list_all_resources().await.unwrap());
    assert!(
        ops_uris.contains(&"test://one/only".to_owned()),
        "{ops_uris:?}"
    );
    assert!(
        !ops_uris.iter().any(|u| u.starts_with("test://static/")),
        "{ops_uris:?}"
    );
    assert!(
        root_uris.contains(&"test://static/text".to_owned()),
        "{root_uris:?}"
    );
    let templates = ops.list_all_resource_templates().await.unwrap();
    assert!(templates.is_empty(), "{templates:?}");
    assert_eq!(root.list_all_resource_templates().await.unwrap().len(), 1);

    let read = |uri: &str| ReadResourceRequestParams::new(uri);
    rpc_refused(
        ops.read_resource(read("test://static/text")).await,
        "no-static",
    );
    rpc_refused(
        ops.read_resource(read("greeting://ada")).await,
        "no-greetings",
    );
    ops.read_resource(read("test://one/only")).await.unwrap();
    root.read_resource(read("test://static/text"))
        .await
        .unwrap();
    rpc_refused(
        ops.subscribe(SubscribeRequestParams::new("test://static/text"))
            .await,
        "no-static",
    );
    // So is a 2026-07-28 listener's: rmcp acknowledges the filter before the
    // gateway knows the caller, and the listener then ends with the refusal.
    let modern = rmcp::model::ClientConfig::new(
        Default::default(),
        rmcp::model::Implementation::new("ops-listener", "1"),
    )
    .with_protocol_version(rmcp::model::ProtocolVersion::V_2026_07_28)
    .serve_with_lifecycle(
        support::rmcp_http_transport(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                .auth_header("ops-secret"),
        ),
        rmcp::service::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("server/discover over HTTP");
    let listen = |uri: &str| {
        let mut filter = rmcp::model::SubscriptionFilter::new();
        filter.resource_subscriptions = Some(vec![uri.to_owned()]);
        modern.peer().listen(filter)
    };
    let mut denied = listen("test://static/text").await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), denied.next())
        .await
        .expect("the listener ends in time");
    rpc_refused(ended, "no-static");
    let mut allowed = listen("test://one/only").await.unwrap();
    let open = tokio::time::timeout(Duration::from_millis(300), allowed.next()).await;
    assert!(open.is_err(), "the allowed listener stays open: {open:?}");
    allowed.cancel().await.unwrap();
    modern.cancel().await.unwrap();

    let complete = |r: Reference| CompleteRequestParams::new(r, ArgumentInfo::new("language", "p"));
    rpc_refused(
        ops.complete(complete(Reference::for_prompt("one__review")))
            .await,
        "no-review",
    );
    let done = root
        .complete(complete(Reference::for_prompt("one__review")))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["python", "pascal"]);

    ops.cancel().await.unwrap();
    root.cancel().await.unwrap();
    shutdown.cancel();
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quotas_hold_under_a_thousand_concurrent_calls_from_four_clients() {
    // Each caller's bucket holds 50 calls and refills one an hour.
    let quotas = Quotas::new(&QuotaConfig {
        caller: Some(CallQuota {
            rate: Some(1.0 / 3600.0),
            burst: Some(50),
            concurrent: None,
        }),
        tool: None,
    })
    .unwrap();
    let exec = Exec::builder()
        .catalog(toolexec_builtins::catalog())
        .quotas(quotas)
        .build();
    let gateway = Gateway::new(
        exec,
        GatewayOptions {
            expose: Expose::All,
            runs: RunLimits::new(64, 2000),
            ..GatewayOptions::default()
        },
    );
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap(), tokens());
    options.limits.max_connections = 2000;
    let (addr, shutdown) = serve(gateway, options).await;
    let callers = ["c0", "c1", "c2", "c3"];
    let clients = futures::future::join_all(callers.iter().map(|c| connect(addr, c))).await;
    let calls = (0..1000).map(|i| {
        let client = clients[i % 4].peer().clone();
        async move {
            let r = call(&client, "math__add", json!({"a": i, "b": 1})).await;
            (i % 4, r)
        }
    });
    let mut ok = [0usize; 4];
    let mut refused = [0usize; 4];
    for (c, r) in futures::future::join_all(calls).await {
        if r.is_error == Some(true) {
            let error = &structured(&r)["error"];
            assert_eq!(error["code"], "limit_exceeded", "{error}");
            assert_eq!(error["details"]["limit"], "call_rate", "{error}");
            assert!(error["details"]["retry_after_ms"].as_u64().unwrap() > 0);
            refused[c] += 1;
        } else {
            ok[c] += 1;
        }
    }
    assert_eq!(ok, [50; 4], "refused {refused:?}");
    assert_eq!(refused, [200; 4]);
    for client in clients {
        client.cancel().await.unwrap();
    }
    shutdown.cancel();
}

/// A script in a bubblewrap sandbox calls back through the host's tool
/// channel: the host side decides for the caller that ran the script.
#[tokio::test(flavor = "multi_thread")]
async fn sandboxed_scripts_are_held_to_their_callers_policy() {
    let Some(runtimes) = crate::support::hardened::bubblewrap_runtimes(
        "sandboxed_scripts_are_held_to_their_callers_policy",
    ) else {
        return;
    };
    let exec = demo_exec_for_staff();
    let gateway = Gateway::new(
        exec,
        GatewayOptions {
            code: CodeModeOptions {
                profile: toolexec_runtime::Profile::Hardened,
                max_concurrent: 2,
                ..CodeModeOptions::default()
            },
            runtimes: Some(runtimes),
            ..GatewayOptions::default()
        },
    );
    let options = HttpOptions::new("127.0.0.1:0".parse().unwrap(), tokens());
    let (addr, shutdown) = serve(gateway, options).await;
    let (ops, root) = tokio::join!(connect(addr, "ops"), connect(addr, "root"));
    let script = json!({"code": r#"
        const found = await tools.search("sleep demo", 50);
        let ran;
        try { ran = await tools.run("demo:sleep", {ms: 1}); }
        catch (e) { ran = e.code; }
        return {ran, demo: found.filter(t => t.id.startsWith("demo:")).length};
    "#});
    let r = call(&ops, "execute_code", script.clone()).await;
    assert_eq!(
        structured(&r)["value"],
        json!({"ran": "not_allowed", "demo": 0}),
        "{r:?}"
    );
    let r = call(&root, "execute_code", script).await;
    let value = &structured(&r)["value"];
    assert_eq!(value["ran"], json!({"slept_ms": 1}), "{r:?}");
    assert!(value["demo"].as_u64().unwrap() >= 1, "{r:?}");
    ops.cancel().await.unwrap();
    root.cancel().await.unwrap();
    shutdown.cancel();
}

/// A session belongs to the token that created it: another valid token
/// holding its id gets 404, as for an unknown session.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_its_creators_alone() {
    let gateway = support::demo_gateway(Expose::Meta);
    let options = HttpOptions::new("127.0.0.1:0".parse().unwrap(), tokens());
    let (addr, shutdown) = serve(gateway, options).await;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(toolexec_http::tls::Tls::unused().config)
        .build()
        .unwrap();
    let url = format!("http://{addr}/mcp");
    let send =
        |method: reqwest::Method, token: &str, session: Option<&str>, body: Option<Value>| {
            let mut req = http
                .request(method, &url)
                .bearer_auth(format!("{token}-secret"))
                .header("Accept", "application/json, text/event-stream");
            if let Some(s) = session {
                req = req.header("mcp-session-id", s);
            }
            if let Some(b) = body {
                req = req.json(&b);
            }
            req.send()
        };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let created = send(reqwest::Method::POST, "ops", None, Some(init))
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let id = created.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(created);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    let status = |r: reqwest::Response| r.status().as_u16();
    let other = send(
        reqwest::Method::POST,
        "root",
        Some(&id),
        Some(initialized.clone()),
    );
    assert_eq!(status(other.await.unwrap()), 404);
    let owner = send(reqwest::Method::POST, "ops", Some(&id), Some(initialized));
    assert_eq!(status(owner.await.unwrap()), 202);
    let other = send(reqwest::Method::POST, "root", Some(&id), Some(list.clone()));
    assert_eq!(status(other.await.unwrap()), 404);
    let other = send(reqwest::Method::GET, "root", Some(&id), None);
    assert_eq!(status(other.await.unwrap()), 404);
    let other = send(reqwest::Method::DELETE, "root", Some(&id), None);
    assert_eq!(status(other.await.unwrap()), 404);
    let owner = send(reqwest::Method::POST, "ops", Some(&id), Some(list));
    assert_eq!(status(owner.await.unwrap()), 200);
    let owner = send(reqwest::Method::DELETE, "ops", Some(&id), None);
    assert!(owner.await.unwrap().status().is_success());
    shutdown.cancel();
}
