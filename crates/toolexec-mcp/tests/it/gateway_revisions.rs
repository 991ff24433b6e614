//! The gateway speaks every revision a client may: `initialize` up to
//! 2025-11-25 (2025-06-18 included), and the 2026-07-28 revision's
//! stateless requests (`server/discover`, per-request metadata, the
//! `Mcp-Method`/`Mcp-Name` headers over HTTP, `subscriptions/listen` for
//! list changes), driven by rmcp's client and by the TypeScript SDK v2's;
//! and the upstream client reaches a 2026-07-28 server (the TypeScript SDK
//! v2's) with `server/discover`, a 2025 server with `initialize`.

use crate::support::gateway as support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, GetPromptRequestParams,
    Implementation, ProtocolVersion, ReadResourceRequestParams, ServerNotification,
    SubscriptionFilter,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, Subscription};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use toolexec::{Catalog, Exec, LocalTool, Secret, ToolError, ToolOutput, raw_handler};
use toolexec_mcp::gateway::{Expose, Gateway, GatewayOptions, HttpAuth};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig, UpstreamTransport};

type Client = RunningService<RoleClient, ClientConfig>;

pub(crate) fn info(version: ProtocolVersion) -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("revisions-test", "1"),
    )
    .with_protocol_version(version)
}

/// `gateway` served over an in-memory pipe of `buffer` bytes; the client's
/// end.
pub(crate) fn serve_duplex(gateway: Gateway, buffer: usize) -> tokio::io::DuplexStream {
    let (server_io, client_io) = tokio::io::duplex(buffer);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    client_io
}

/// A 2026-07-28 client (`server/discover`, no `initialize`) over `io`.
async fn modern_client(io: tokio::io::DuplexStream) -> Client {
    info(ProtocolVersion::V_2026_07_28)
        .serve_with_lifecycle(
            io,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
}

/// Registers a tool in `catalog` and waits for `listening` to hear of it.
async fn add_tool_and_hear_it(catalog: &Catalog, listening: &mut Subscription) {
    LocalTool::new(
        "late:tool",
        raw_handler(|_: serde_json::Value, _| async {
            Ok::<_, ToolError>(ToolOutput::structured(json!({})))
        }),
    )
    .register(catalog)
    .unwrap();
    let note = tokio::time::timeout(Duration::from_secs(10), listening.next())
        .await
        .expect("a list change in time")
        .unwrap();
    assert!(
        matches!(
            note,
            Some(ServerNotification::ToolListChangedNotification(_))
        ),
        "{note:?}"
    );
}

/// `tools/call` of `name` with the object `args`, through `peer`.
pub(crate) async fn call(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    name: &'static str,
    args: serde_json::Value,
) -> rmcp::model::CallToolResult {
    let args = args.as_object().unwrap().clone();
    peer.call_tool(CallToolRequestParams::new(name).with_arguments(args))
        .await
        .unwrap()
}

/// The text of a result's first content block; empty when it has none.
pub(crate) fn first_text(r: &rmcp::model::CallToolResult) -> &str {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map_or("", |t| t.text.as_str())
}

async fn exercise(client: &Client) {
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "math__add"), "{tools:?}");
    let r = call(client.peer(), "math__add", json!({"a": 2, "b": 5})).await;
    assert_eq!(r.structured_content, Some(json!({"result": 7.0})), "{r:?}");
    let r = client
        .call_tool(CallToolRequestParams::new("nope__nope"))
        .await;
    assert!(r.is_err(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_revision_over_http_and_stdio() {
    let exec = support::demo_exec();
    let catalog = exec.catalog().clone();
    let gateway = Gateway::new(
        exec,
        GatewayOptions {
            expose: Expose::Both,
            ..GatewayOptions::default()
        },
    );
    let (addr, shutdown) =
        support::start_http(gateway, HttpAuth::Bearer(Secret::new("rev-token"))).await;
    let url = format!("http://{addr}/mcp");
    let http = || {
        support::rmcp_http_transport(
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header("rev-token"),
        )
    };

    // initialize, at the revision the client asks for.
    for version in [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25] {
        let client = info(version.clone()).serve(http()).await.unwrap();
        let negotiated = client.peer().peer_info().unwrap().protocol_version.clone();
        assert_eq!(negotiated, version);
        exercise(&client).await;
        client.cancel().await.unwrap();
    }

    // 2026-07-28: discover, then stateless requests.
    let client = info(ProtocolVersion::V_2026_07_28)
        .serve_with_lifecycle(
            http(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        client.peer().peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    exercise(&client).await;
    // List changes reach a listener (`subscriptions/listen`).
    let mut listening = client
        .peer()
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .unwrap();
    assert_eq!(listening.acknowledged().tools_list_changed, Some(true));
    add_tool_and_hear_it(&catalog, &mut listening).await;
    client.cancel().await.unwrap();

    // The same over stdio.
    let client = modern_client(serve_duplex(support::demo_gateway(Expose::Both), 1 << 16)).await;
    exercise(&client).await;
    client.cancel().await.unwrap();
    shutdown.cancel();
}

/// The TypeScript SDK v2's server fixture over stdio as upstream `name`.
pub(crate) fn modern_upstream(name: &str, node: &str, modules: &str) -> UpstreamConfig {
    let mut env = BTreeMap::new();
    env.insert("NODE_PATH".to_owned(), Secret::new(modules));
    let mut config = UpstreamConfig::new(
        name,
        UpstreamTransport::Stdio {
            command: node.to_owned(),
            args: vec![
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/ts_modern_server.cjs"
                )
                .into(),
            ],
            env,
            inherit_env: Vec::new(),
            cwd: None,
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

/// A 2026-07-28 upstream (the TypeScript SDK v2) is reached with
/// `server/discover`, its list changes come through `subscriptions/listen`,
/// and a 2026-07-28 client of the gateway sees its tools, prompts and
/// resources, and hears of its new tool; a 2025 server beside it still gets
/// `initialize`.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_upstream_behind_the_gateway() {
    let test = "a_modern_upstream_behind_the_gateway";
    let Some(v) = toolexec_testkit::deps(
        test,
        &[
            "TOOLEXEC_NODE22",
            "TOOLEXEC_NODE_MODULES",
            "TOOLEXEC_PYTHON",
        ],
    ) else {
        return;
    };
    let (node, modules, python) = (&v[0], &v[1], &v[2]);
    let catalog = Arc::new(Catalog::new());
    let modern = Arc::new(
        Upstream::connect(modern_upstream("modern", node, modules), catalog.clone())
            .await
            .unwrap(),
    );
    assert_eq!(modern.protocol_version().as_deref(), Some("2026-07-28"));
    let legacy = Arc::new(
        Upstream::connect(
            crate::support::upstream::py_stdio_config("legacy", python, BTreeMap::new()),
            catalog.clone(),
        )
        .await
        .unwrap(),
    );
    assert_eq!(legacy.protocol_version().as_deref(), Some("2025-11-25"));

    let gateway = Gateway::with_upstreams(
        Exec::new(catalog.clone()),
        GatewayOptions {
            expose: Expose::All,
            ..GatewayOptions::default()
        },
        vec![modern.clone(), legacy.clone()],
    );
    let client = modern_client(serve_duplex(gateway, 1 << 16)).await;

    // Tools of both, called through the gateway.
    let r = call(client.peer(), "modern__add", json!({"a": 2, "b": 40})).await;
    assert_eq!(first_text(&r), "42", "{r:?}");
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "legacy__add"), "{tools:?}");

    // The modern server's prompt and resource pass through.
    let prompt = client
        .get_prompt(
            GetPromptRequestParams::new("modern__greet")
                .with_arguments(json!({"name": "Ada"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let text = serde_json::to_string(&prompt.messages).unwrap();
    assert!(text.contains("Hello, Ada"), "{text}");
    let read = client
        .read_resource(ReadResourceRequestParams::new("fixture://hello"))
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&read.contents)
            .unwrap()
            .contains("hello from a 2026-07-28 server"),
        "{read:?}"
    );

    // A tool, a prompt and a resource the modern server adds at run time:
    // its list changes reach toolexec through its listener, the catalog
    // gains the tool, and the gateway's listener tells this client of all
    // three.
    let mut listening = client
        .peer()
        .listen(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .build(),
        )
        .await
        .unwrap();
    let acked = listening.acknowledged().clone();
    assert_eq!(
        (
            acked.tools_list_changed,
            acked.prompts_list_changed,
            acked.resources_list_changed
        ),
        (Some(true), Some(true), Some(true)),
        "{acked:?}"
    );
    client
        .call_tool(CallToolRequestParams::new("modern__grow"))
        .await
        .unwrap();
    let (mut tools, mut prompts, mut resources) = (false, false, false);
    while !(tools && prompts && resources) {
        let note = tokio::time::timeout(Duration::from_secs(10), listening.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "list changes in time: tools {tools}, prompts {prompts}, resources {resources}"
                )
            })
            .unwrap();
        match note {
            Some(ServerNotification::ToolListChangedNotification(_)) => tools = true,
            Some(ServerNotification::PromptListChangedNotification(_)) => prompts = true,
            Some(ServerNotification::ResourceListChangedNotification(_)) => resources = true,
            other => panic!("{other:?}"),
        }
    }
    crate::support::upstream::eventually(
        Duration::from_secs(10),
        "modern:grown registered",
        || catalog.get("modern:grown").is_ok(),
    )
    .await;
    let r = client
        .call_tool(CallToolRequestParams::new("modern__grown"))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "grown", "{r:?}");
    client.cancel().await.unwrap();
}

/// The TypeScript SDK v2's client, pinned to 2026-07-28, against the HTTP
/// gateway: a real client of that revision sees the tools and calls them.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_v2_client_over_http() {
    let test = "the_typescript_sdk_v2_client_over_http";
    let Some(v) = toolexec_testkit::deps(test, &["TOOLEXEC_NODE22", "TOOLEXEC_NODE_MODULES"])
    else {
        return;
    };
    let gateway = support::demo_gateway(Expose::Both);
    let (addr, shutdown) =
        support::start_http(gateway, HttpAuth::Bearer(Secret::new("ts-token"))).await;
    let mut cmd = tokio::process::Command::new(&v[0]);
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ts_modern_client.cjs"
    ))
    .arg(format!("http://{addr}/mcp"))
    .arg("ts-token")
    .env("NODE_PATH", &v[1]);
    let (status, out, err) = support::run_with_timeout(cmd, Duration::from_secs(60)).await;
    assert!(status.success(), "{out}\n{err}");
    let report: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report["version"], "2026-07-28", "{report}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert!(
        tools.contains(&"math__add") && tools.contains(&"search_tools"),
        "{tools:?}"
    );
    assert_eq!(report["sum"]["result"].as_f64(), Some(7.0), "{report}");
    assert!(
        report["unknown"]["isError"] == true || report["unknown"]["error"].is_string(),
        "{report}"
    );
    shutdown.cancel();
}

/// A 2025 server that exits on any request before `initialize` (as servers
/// of some SDKs do) is started again and offered `initialize`, and its next
/// sessions start with `initialize`: the probe never costs it its tools.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_exits_on_discover_gets_initialize() {
    let test = "a_server_that_exits_on_discover_gets_initialize";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = toolexec_testkit::TempDir::new("strict-init");
    let log = dir.path().join("starts");
    let mut env = BTreeMap::new();
    env.insert("STRICT_LOG".to_owned(), Secret::new(log.to_str().unwrap()));
    let mut config = crate::support::upstream::py_stdio_config("strict", &python, env);
    let starts = || std::fs::read_to_string(&log).unwrap_or_default();
    if let UpstreamTransport::Stdio { args, .. } = &mut config.transport {
        args.insert(
            0,
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/py_strict_init.py"
            )
            .to_owned(),
        );
        args.remove(1);
    }
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    assert_eq!(upstream.protocol_version().as_deref(), Some("2025-11-25"));
    assert_eq!(starts(), "server/discover\ninitialize\n");
    let exec = Exec::new(catalog);
    let sum = exec
        .run_tool("strict:add", json!({"a": 1, "b": 2}))
        .await
        .unwrap();
    assert_eq!(sum.value, json!({"result": 3}), "{sum:?}");

    // A restart goes straight to `initialize` (a probe would end the
    // server again, and then a retry would start it once more).
    let first = upstream.pid().unwrap();
    crate::support::upstream::kill_pid(first);
    crate::support::upstream::eventually(Duration::from_secs(15), "a new session", || {
        upstream.pid().is_some_and(|p| p != first)
    })
    .await;
    assert!(upstream.wait_connected(Duration::from_secs(15)).await);
    let sum = exec
        .run_tool("strict:add", json!({"a": 2, "b": 2}))
        .await
        .unwrap();
    assert_eq!(sum.value, json!({"result": 4}), "{sum:?}");
    assert_eq!(starts(), "server/discover\ninitialize\ninitialize\n");
}

/// Over streamable HTTP too: toolexec's upstream client reaches a
/// 2026-07-28 server (a toolexec gateway) without a session, and calls it.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_upstream_over_http() {
    let (addr, shutdown) = support::start_http(
        support::demo_gateway(Expose::All),
        HttpAuth::Bearer(Secret::new("up-token")),
    )
    .await;
    let config = UpstreamConfig::new(
        "inner",
        UpstreamTransport::Http {
            url: format!("http://{addr}/mcp"),
            headers: Default::default(),
            bearer_token: Some(Secret::new("up-token")),
            tls: Default::default(),
            oauth: None,
            token_exchange: None,
        },
    );
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    assert_eq!(upstream.protocol_version().as_deref(), Some("2026-07-28"));
    let sum = Exec::new(catalog)
        .run_tool("inner:math__add", json!({"a": 20, "b": 22}))
        .await
        .unwrap();
    assert_eq!(sum.value, json!({"result": 42.0}), "{sum:?}");
    shutdown.cancel();
}

/// A gateway holds at most 1024 `subscriptions/listen` streams open; one
/// more ends at once with an error, and the others keep working.
#[tokio::test(flavor = "multi_thread")]
async fn listeners_are_bounded() {
    let gateway = support::demo_gateway(Expose::All);
    let catalog = gateway.exec().catalog().clone();
    let client = modern_client(serve_duplex(gateway, 1 << 20)).await;
    let filter = || SubscriptionFilter::builder().tools_list_changed().build();
    let mut held = Vec::new();
    for _ in 0..1024 {
        held.push(client.peer().listen(filter()).await.unwrap());
    }
    let refused = client.peer().listen(filter()).await;
    let ended = match refused {
        Err(e) => e.to_string(),
        Ok(mut one_more) => {
            let next = tokio::time::timeout(Duration::from_secs(10), one_more.next())
                .await
                .expect("the extra listener ends in time");
            format!("{next:?}")
        }
    };
    assert!(ended.contains("subscription limit reached"), "{ended}");
    // The held ones still hear of a change.
    add_tool_and_hear_it(&catalog, &mut held[1023]).await;
    client.cancel().await.unwrap();
}
