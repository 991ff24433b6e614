//! What an upstream server asks its client during a call (sampling,
//! elicitation in form and URL mode, roots) and its log messages, relayed
//! by the gateway to the client that made the call: the Python SDK's server
//! (`tests/fixtures/py_asking_server.py`) behind an HTTP gateway, driven by
//! the Python SDK's client (`tests/fixtures/py_relay_client.py`), with the
//! upstream over stdio (no association on the wire) and over streamable
//! HTTP (the request names its call by the stream it arrives on).

use crate::support::gateway as support;
use crate::support::upstream::{ChildGuard, free_port, wait_listening};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequest, ClientRequest, ServerResult};
#[allow(deprecated)] // sampling: deprecated by SEP-2577, current in 2025-11-25.
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, Implementation,
};
use rmcp::service::{InboundStreamOrigin, PeerRequestOptions, RequestContext};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::{Catalog, Exec};
use toolexec_mcp::gateway::{Expose, Gateway, GatewayOptions, HttpAuth};
use toolexec_mcp::upstream::{ClientRelay, Upstream, UpstreamConfig, UpstreamTransport};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// How the gateway reaches the asking server.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Link {
    Stdio,
    Http,
    /// The 2024-11-05 HTTP+SSE transport: nothing names the call either.
    Sse,
}

/// The asking server as upstream `asking`, relaying to clients, each call
/// (and each relayed request) bounded by `timeout`. Keep the guard alive.
pub(crate) fn upstream(
    python: &str,
    link: Link,
    timeout: Duration,
) -> (UpstreamConfig, Option<ChildGuard>) {
    let (transport, guard) = match link {
        Link::Stdio => (
            UpstreamTransport::Stdio {
                command: python.to_owned(),
                args: vec![fixture("py_asking_server.py"), "stdio".to_owned()],
                env: BTreeMap::new(),
                inherit_env: Vec::new(),
                cwd: Some(std::env::temp_dir()),
            },
            None,
        ),
        Link::Http | Link::Sse => {
            let port = free_port();
            let sse = matches!(link, Link::Sse);
            let child = ChildGuard::spawn(
                std::process::Command::new(python)
                    .arg(fixture("py_asking_server.py"))
                    .arg(if sse { "sse" } else { "http" })
                    .arg(port.to_string()),
            );
            let transport = if sse {
                UpstreamTransport::Sse {
                    url: format!("http://127.0.0.1:{port}/sse"),
                    headers: BTreeMap::new(),
                    bearer_token: None,
                    tls: Default::default(),
                }
            } else {
                UpstreamTransport::Http {
                    url: format!("http://127.0.0.1:{port}/mcp"),
                    headers: BTreeMap::new(),
                    bearer_token: None,
                    tls: Default::default(),
                    oauth: None,
                    token_exchange: None,
                }
            };
            (transport, Some((child, port)))
        }
    };
    let mut config = UpstreamConfig::new("asking", transport);
    config.call_timeout = timeout;
    config.relay = ClientRelay {
        roots: true,
        ..ClientRelay::GATEWAY
    };
    (config, guard.map(|(child, _)| child))
}

/// An HTTP gateway in front of the asking server; its URL.
async fn gateway(
    python: &str,
    link: Link,
    timeout: Duration,
) -> (String, CancellationToken, Arc<Upstream>, Option<ChildGuard>) {
    let (config, guard) = upstream(python, link, timeout);
    let (url, shutdown, upstream) = gateway_of(config).await;
    (url, shutdown, upstream, guard)
}

/// Waits until the HTTP or SSE server of `config` (started by [`upstream`])
/// listens.
async fn until_listening(config: &UpstreamConfig) {
    if let UpstreamTransport::Http { url, .. } | UpstreamTransport::Sse { url, .. } =
        &config.transport
    {
        let port = url
            .trim_start_matches("http://127.0.0.1:")
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        wait_listening(port, Duration::from_secs(30)).await;
    }
}

/// A gateway publishing every tool of the upstream `config`, once its
/// server listens; the upstream.
pub(crate) async fn publishing(config: UpstreamConfig) -> (Gateway, Arc<Upstream>) {
    publishing_as(config, Expose::All).await
}

/// [`publishing`], its tools published as `expose` says.
pub(crate) async fn publishing_as(
    config: UpstreamConfig,
    expose: Expose,
) -> (Gateway, Arc<Upstream>) {
    until_listening(&config).await;
    let catalog = Arc::new(Catalog::new());
    let upstream = Arc::new(Upstream::connect(config, catalog.clone()).await.unwrap());
    let gateway = Gateway::with_upstreams(
        Exec::new(catalog),
        GatewayOptions {
            expose,
            ..GatewayOptions::default()
        },
        vec![upstream.clone()],
    );
    (gateway, upstream)
}

/// An HTTP gateway in front of the upstream `config`; its URL.
async fn gateway_of(config: UpstreamConfig) -> (String, CancellationToken, Arc<Upstream>) {
    let (gateway, upstream) = publishing(config).await;
    let (addr, shutdown) = support::start_http(gateway, HttpAuth::InsecureNoAuth).await;
    (format!("http://{addr}/mcp"), shutdown, upstream)
}

/// Runs the client in `mode`; its exit status and summary (`Null` when it
/// printed none).
async fn client(python: &str, mode: &str, url: &str) -> (Option<i32>, Value, String) {
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture("py_relay_client.py"))
        .args([mode, "http", url]);
    let (status, stdout, stderr) = support::run_with_timeout(cmd, Duration::from_secs(120)).await;
    let summary = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (status.code(), summary, stderr)
}

async fn summary(python: &str, mode: &str, url: &str) -> Value {
    let (status, summary, stderr) = client(python, mode, url).await;
    assert_eq!(status, Some(0), "client {mode} failed:\n{stderr}");
    summary
}

/// A client that declares sampling and never answers it; tells on which
/// HTTP stream the request arrived, and when the gateway abandons it.
#[derive(Clone)]
struct Silent(tokio::sync::mpsc::UnboundedSender<Option<InboundStreamOrigin>>);

impl ClientHandler for Silent {
    #[allow(deprecated)] // sampling: deprecated by SEP-2577, current in 2025-11-25.
    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let origin = context.extensions.get::<InboundStreamOrigin>().cloned();
        context.ct.cancelled().await;
        let _ = self.0.send(origin);
        Err(ErrorData::internal_error("abandoned", None))
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.sampling = Some(Default::default());
        ClientConfig::new(caps, Implementation::new("silent", "1"))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_requests_reach_the_calling_client() {
    let Some(python) = support::dep(
        "upstream_requests_reach_the_calling_client",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    for link in [Link::Stdio, Link::Http, Link::Sse] {
        let (url, shutdown, upstream, _guard) =
            gateway(&python, link, Duration::from_secs(20)).await;

        let s = summary(&python, "answers", &url).await;
        assert_eq!(
            s["sampling"],
            json!({"ok": {"model": "fixture-model", "role": "assistant", "text": "echo: hello"}}),
            "{link:?}: {s}"
        );
        assert_eq!(
            (
                &s["sampling_params"]["text"],
                &s["sampling_params"]["maxTokens"]
            ),
            (&json!("hello"), &json!(64)),
            "{link:?}: {s}"
        );
        // Tagged with the server that asks.
        assert_eq!(
            s["sampling_params"]["meta"]["io.toolexec/server"], "asking",
            "{link:?}: {s}"
        );
        assert_eq!(
            s["elicitation"],
            json!({"ok": {"action": "accept", "data": {"name": "Ada"}}}),
            "{link:?}: {s}"
        );
        assert_eq!(
            s["url_elicitation"],
            json!({"ok": {"action": "accept"}}),
            "{link:?}: {s}"
        );
        assert_eq!(
            s["roots"],
            json!({"ok": ["file:///work/project"]}),
            "{link:?}: {s}"
        );
        // The client's level (info by default, then warning) decides.
        assert_eq!(
            s["logs_info"],
            json!([["info", "chatty info"], ["warning", "chatty warning"]]),
            "{link:?}: {s}"
        );
        assert_eq!(
            s["logs_warning"],
            json!([["warning", "chatty warning"]]),
            "{link:?}: {s}"
        );

        // A client that declared none of them: each is refused, naming it.
        let s = summary(&python, "bare", &url).await;
        for (key, method) in [
            ("sampling", "sampling/createMessage"),
            ("elicitation", "elicitation/create"),
            ("roots", "roots/list"),
        ] {
            let error = &s[key]["error"];
            assert_eq!(error["code"], -32601, "{link:?} {key}: {s}");
            assert!(
                error["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("does not support {method}"))),
                "{link:?} {key}: {s}"
            );
        }
        shutdown.cancel();
        upstream.shutdown().await;
    }
}

/// A server over streamable HTTP sends a call's log messages on the call's
/// own response stream, which the gateway reads as naming the call: alice
/// and bob (two principals) call `chatty` at once, and each hears its own
/// call's messages (at its session's level, `info`) and none of the
/// other's. (Over stdio nothing names the call, and with calls of two
/// principals about, such messages reach no one.)
#[tokio::test(flavor = "multi_thread")]
async fn log_messages_over_http_reach_only_the_client_of_their_call() {
    let test = "log_messages_over_http_reach_only_the_client_of_their_call";
    let Some(python) = support::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let (config, _server) = upstream(&python, Link::Http, Duration::from_secs(20));
    let (gateway, upstream) = publishing(config).await;
    let tokens = support::named_tokens(&["alice", "bob"]);
    let (addr, shutdown) = support::start_http(gateway, HttpAuth::Tokens(tokens)).await;
    let mut clients = Vec::new();
    for name in ["alice", "bob"] {
        let (tx, logs) = tokio::sync::mpsc::unbounded_channel();
        let http = support::rmcp_http_transport(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                .auth_header(format!("{name}-secret")),
        );
        let client = support::Logs(tx, rmcp::model::ProtocolVersion::V_2025_11_25);
        clients.push((name, client.serve(http).await.unwrap(), logs));
    }
    let chatty = |peer: rmcp::Peer<RoleClient>, tag: String| async move {
        let args = json!({ "tag": tag }).as_object().unwrap().clone();
        let call = CallToolRequestParams::new("asking__chatty").with_arguments(args);
        let r = peer.call_tool(call).await.unwrap();
        assert_eq!(r.content[0].as_text().unwrap().text, "said three things");
    };
    let at_once = clients
        .iter()
        .map(|(name, client, _)| chatty(client.peer().clone(), format!(" ({name})")));
    futures::future::join_all(at_once).await;
    for (name, client, logs) in &mut clients {
        // A last call, whose messages mark that the first call's have come.
        chatty(client.peer().clone(), format!(" ({name}, last)")).await;
        let own = [
            ("info", format!("chatty info ({name})")),
            ("warning", format!("chatty warning ({name})")),
            ("info", format!("chatty info ({name}, last)")),
            ("warning", format!("chatty warning ({name}, last)")),
        ];
        let own: Vec<_> = own.iter().map(|(l, t)| (*l, t.as_str())).collect();
        assert_eq!(
            support::next_logs(logs, 4).await,
            support::sorted_logs(&own),
            "{name}"
        );
        assert!(logs.try_recv().is_err(), "{name} heard more");
    }
    for (_, client, _) in clients {
        client.cancel().await.unwrap();
    }
    shutdown.cancel();
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_answers_or_vanishes_ends_only_its_call() {
    let Some(python) = support::dep(
        "a_client_that_never_answers_or_vanishes_ends_only_its_call",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    let (url, shutdown, upstream, _guard) =
        gateway(&python, Link::Stdio, Duration::from_secs(3)).await;

    // Never answers sampling (rmcp's client: the Python SDK's blocks its
    // reading while a callback runs): the call times out, the client is
    // told the request is abandoned, the server gets an error for it.
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel();
    let transport = support::rmcp_http_transport(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.clone(),
        ),
    );
    let silent = Silent(cancelled_tx).serve(transport).await.unwrap();
    let call = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("asking__ask_llm")
            .with_arguments(json!({"prompt": "anyone?"}).as_object().unwrap().clone()),
    ));
    let handle = silent
        .peer()
        .send_request_with_option(call, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let call_id = handle.id.clone();
    let r = match handle.await_response().await.unwrap() {
        ServerResult::CallToolResult(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(format!("{r:?}").contains("timeout"), "{r:?}");
    let origin = tokio::time::timeout(Duration::from_secs(10), cancelled.recv())
        .await
        .expect("the client is told the request is abandoned");
    // It came on the response stream of the call it belongs to.
    assert_eq!(
        origin,
        Some(Some(InboundStreamOrigin::OutboundRequest(call_id)))
    );
    let r = silent
        .call_tool(CallToolRequestParams::new("asking__outcomes"))
        .await
        .unwrap();
    let outcomes = r.structured_content.unwrap();
    let last = outcomes["result"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["kind"], "sampling", "{outcomes}");
    // The same race as below: an error for the ask, or the ask cancelled
    // with the call.
    if last["cancelled"] != true {
        assert_eq!(last["error"]["code"], -32603, "{outcomes}");
    }
    silent.cancel().await.unwrap();

    // Goes away while asked: its call ends at the deadline, the server gets
    // an error, and the gateway serves the next client.
    let (status, _, stderr) = client(&python, "vanish", &url).await;
    assert_eq!(status, Some(3), "{stderr}");
    // The call ends at its 3 s deadline at the latest. The server then
    // either gets an error for its ask, or, when the call's cancellation
    // reaches it before that answer is read, its ask is cancelled with the
    // call: both orders are right, and the fixture records either. Wait
    // for the record, boundedly.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (s, last) = loop {
        let s = summary(&python, "outcomes", &url).await;
        let last = s["outcomes"]["result"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        if last["kind"] == "elicitation" || std::time::Instant::now() > deadline {
            break (s, last);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(last["kind"], "elicitation", "{s}");
    if last["cancelled"] != true {
        assert_eq!(last["error"]["code"], -32603, "{s}");
        let message = last["error"]["message"].as_str().unwrap();
        assert!(
            [
                "ended before the client answered",
                "disconnected",
                "went away"
            ]
            .iter()
            .any(|m| message.contains(m)),
            "{s}"
        );
    }
    shutdown.cancel();
    upstream.shutdown().await;
}

/// server-everything's own sampling, elicitation and roots tools, which it
/// registers only for a client that declares those capabilities, work
/// through the gateway over stdio, streamable HTTP and HTTP+SSE.
#[tokio::test(flavor = "multi_thread")]
async fn server_everything_asks_through_the_gateway() {
    let Some(v) = crate::support::upstream::deps(
        "server_everything_asks_through_the_gateway",
        &[
            "TOOLEXEC_PYTHON",
            "TOOLEXEC_NODE22",
            "TOOLEXEC_MCP_EVERYTHING",
        ],
    ) else {
        return;
    };
    let (python, node, bin) = (&v[0], &v[1], &v[2]);
    for link in [Link::Stdio, Link::Http, Link::Sse] {
        let (transport, _guard) = match link {
            Link::Stdio => (
                UpstreamTransport::Stdio {
                    command: node.clone(),
                    args: vec![bin.clone(), "stdio".into()],
                    env: BTreeMap::new(),
                    inherit_env: Vec::new(),
                    cwd: None,
                },
                None,
            ),
            Link::Http | Link::Sse => {
                let port = free_port();
                let sse = matches!(link, Link::Sse);
                let guard = ChildGuard::spawn(
                    std::process::Command::new(node)
                        .args([bin.as_str(), if sse { "sse" } else { "streamableHttp" }])
                        .env("PORT", port.to_string()),
                );
                let transport = if sse {
                    UpstreamTransport::Sse {
                        url: format!("http://127.0.0.1:{port}/sse"),
                        headers: BTreeMap::new(),
                        bearer_token: None,
                        tls: Default::default(),
                    }
                } else {
                    UpstreamTransport::Http {
                        url: format!("http://127.0.0.1:{port}/mcp"),
                        headers: BTreeMap::new(),
                        bearer_token: None,
                        tls: Default::default(),
                        oauth: None,
                        token_exchange: None,
                    }
                };
                (transport, Some(guard))
            }
        };
        let mut config = UpstreamConfig::new("everything", transport);
        config.call_timeout = Duration::from_secs(20);
        config.relay = ClientRelay {
            roots: true,
            ..ClientRelay::GATEWAY
        };
        let (url, shutdown, upstream) = gateway_of(config).await;
        let s = summary(python, "everything", &url).await;
        let texts = &s["texts"];
        let sampling = texts["sampling"].as_str().unwrap();
        assert!(
            sampling.contains("LLM sampling result") && sampling.contains("fixture-model"),
            "{link:?}: {s}"
        );
        assert!(
            sampling.contains("echo: Resource trigger-sampling-request context: hi"),
            "{link:?}: {s}"
        );
        let elicitation = texts["elicitation"].as_str().unwrap();
        assert!(
            elicitation.contains("User provided the requested information")
                && elicitation.contains("Ada"),
            "{link:?}: {s}"
        );
        let roots = texts["roots"].as_str().unwrap();
        assert!(roots.contains("file:///work/project"), "{link:?}: {s}");
        shutdown.cancel();
        upstream.shutdown().await;
    }
}
