//! What a 2026-07-28 upstream (the TypeScript SDK v2's server fixture,
//! `tests/fixtures/ts_modern_server.cjs`) asks of and tells the clients of
//! the gateway: its `input_required` results (to 2025 and 2026-07-28
//! clients, and to a task), its resource updates to subscribers, and its
//! log messages at the level each request names.

use crate::support::gateway as support;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig,
    GetPromptRequestParams, GetPromptResponse, Implementation, InputResponses, ProtocolVersion,
    ReadResourceRequestParams, TaskPayload, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use toolexec::{Catalog, Exec, Secret};
use toolexec_mcp::gateway::{Expose, Gateway, GatewayOptions, HttpAuth};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig};

use super::gateway_revisions::{call, first_text, modern_upstream, serve_duplex};

/// A client of the gateway that answers elicitation (confirming or not, as
/// told) and sampling (echoing the question), and declares the tasks
/// extension when told.
#[derive(Clone)]
struct Answering {
    confirm: bool,
    tasks: bool,
}

impl rmcp::ClientHandler for Answering {
    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let text = serde_json::to_string(&params).unwrap();
        assert!(
            [
                "Deploy to prod?",
                "Greet Ada?",
                "Read fixture://guarded?",
                "Agree (q"
            ]
            .iter()
            .any(|m| text.contains(m)),
            "{text}"
        );
        Ok(serde_json::from_value(if self.confirm {
            json!({"action": "accept", "content": {"confirm": true}})
        } else {
            json!({"action": "decline"})
        })
        .unwrap())
    }

    #[allow(deprecated)] // sampling: deprecated by SEP-2577, current in 2025-11-25.
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        Ok(support::echo_sampling("test-model", &params))
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        caps.sampling = Some(Default::default());
        caps.elicitation = Some(Default::default());
        ClientConfig::new(caps, Implementation::new("answering", "1"))
    }
}

/// A gateway that relays every client request in front of the 2026-07-28
/// fixture (namespace `modern`); `None` when Node 22 or the SDK is missing.
async fn relaying_gateway(test: &str) -> Option<Gateway> {
    let v = toolexec_testkit::deps(test, &["TOOLEXEC_NODE22", "TOOLEXEC_NODE_MODULES"])?;
    let mut config = modern_upstream("modern", &v[0], &v[1]);
    config.relay = toolexec_mcp::upstream::ClientRelay::GATEWAY;
    Some(gateway_in_front_of(config).await)
}

/// A 2026-07-28 client of `gateway` that confirms what it is asked.
async fn confirming_modern_client(gateway: Gateway) -> RunningService<RoleClient, Answering> {
    Answering {
        confirm: true,
        tasks: false,
    }
    .serve_with_lifecycle(
        serve_duplex(gateway, 1 << 16),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap()
}

/// A gateway publishing every tool directly in front of the 2026-07-28
/// upstream `config` (checked to speak that revision).
async fn gateway_in_front_of(config: UpstreamConfig) -> Gateway {
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    assert_eq!(upstream.protocol_version().as_deref(), Some("2026-07-28"));
    Gateway::with_upstreams(
        Exec::new(catalog),
        GatewayOptions {
            expose: Expose::All,
            ..GatewayOptions::default()
        },
        vec![Arc::new(upstream)],
    )
}

/// `deploy`, `ask`, `greet_confirmed` and `fixture://guarded` through
/// `client`, whose handler confirms or not as told: each asks the client
/// first (however the gateway passes the question on), then answers.
async fn answered_as_told(client: &RunningService<RoleClient, Answering>, confirm: bool) {
    let deploy = CallToolRequestParams::new("modern__deploy")
        .with_arguments(json!({"env": "prod"}).as_object().unwrap().clone());
    let r = client.call_tool(deploy).await.unwrap();
    let expected = if confirm {
        "deployed to prod"
    } else {
        "not deployed (decline)"
    };
    assert_eq!(first_text(&r), expected, "{r:?}");
    let ask = CallToolRequestParams::new("modern__ask")
        .with_arguments(json!({"question": "why?"}).as_object().unwrap().clone());
    let r = client.call_tool(ask).await.unwrap();
    assert_eq!(first_text(&r), "model said: echo: why?", "{r:?}");
    let (greeted, read) = guarded(client).await;
    let expected = if confirm {
        ("Hello, Ada", "the guarded text")
    } else {
        ("not greeted (decline)", "not read (decline)")
    };
    assert_eq!((greeted.as_str(), read.as_str()), expected);
}

/// The prompt `greet_confirmed` for Ada.
fn greet_ada() -> GetPromptRequestParams {
    GetPromptRequestParams::new("modern__greet_confirmed")
        .with_arguments(json!({"name": "Ada"}).as_object().unwrap().clone())
}

/// The text of `greet_confirmed` and of `fixture://guarded`, each of which
/// asks the client for a confirmation first.
async fn guarded(client: &RunningService<RoleClient, Answering>) -> (String, String) {
    support::prompt_and_resource_text(client, greet_ada(), "fixture://guarded").await
}

/// A 2026-07-28 upstream asks for client input in its results
/// (`input_required`) to `tools/call`, `prompts/get` and `resources/read`:
/// for a 2025 client the gateway asks the client of the request, as it
/// relays a 2025 server's requests, and sends the request again with the
/// answers; a 2026-07-28 client gets them as they are, answers them itself
/// and sends its request again, whose answers reach the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_upstreams_input_requests_reach_the_caller() {
    let test = "a_modern_upstreams_input_requests_reach_the_caller";
    let Some(v) = toolexec_testkit::deps(test, &["TOOLEXEC_NODE22", "TOOLEXEC_NODE_MODULES"])
    else {
        return;
    };
    let Some(gateway) = relaying_gateway(test).await else {
        return;
    };
    for confirm in [true, false] {
        let client = Answering {
            confirm,
            tasks: false,
        }
        .serve(serve_duplex(gateway.clone(), 1 << 16))
        .await
        .unwrap();
        answered_as_told(&client, confirm).await;
        client.cancel().await.unwrap();
    }

    // A 2026-07-28 client gets the server's input_required as it is, and
    // its answers reach the server unchanged: rmcp's client fulfils the
    // rounds through its handler.
    // Over a pipe and over streamable HTTP (stateless requests).
    let (addr, shutdown) =
        support::start_http(gateway.clone(), HttpAuth::Bearer(Secret::new("mrtr-token"))).await;
    let url = format!("http://{addr}/mcp");
    // A client with the tasks extension gets input_required too, when the
    // call asks before it would become a task.
    for (confirm, over_http, tasks) in [
        (true, false, false),
        (false, false, true),
        (true, true, true),
        (false, true, false),
    ] {
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let answering = Answering { confirm, tasks };
        let client = if over_http {
            let http = support::rmcp_http_transport(
                StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .auth_header("mrtr-token"),
            );
            answering.serve_with_lifecycle(http, lifecycle).await
        } else {
            let pipe = serve_duplex(gateway.clone(), 1 << 16);
            answering.serve_with_lifecycle(pipe, lifecycle).await
        }
        .unwrap();
        let asked = client
            .get_prompt_once(greet_ada())
            .await
            .expect("prompts/get");
        let GetPromptResponse::InputRequired(asked) = asked else {
            panic!("a 2026-07-28 client is answered with input_required: {asked:?}")
        };
        let requests = serde_json::to_value(&asked.input_requests).unwrap();
        assert_eq!(
            requests["confirm"]["method"], "elicitation/create",
            "{requests}"
        );
        // tools/call too, through the pipeline: the first answer asks, the
        // call made again with the answers completes.
        let deploy = CallToolRequestParams::new("modern__deploy")
            .with_arguments(json!({"env": "prod"}).as_object().unwrap().clone());
        let asked = client.call_tool_once(deploy.clone()).await.unwrap();
        let CallToolResponse::InputRequired(asked) = asked else {
            panic!("a 2026-07-28 client is answered with input_required: {asked:?}")
        };
        // The state comes sealed to this tool and caller: sent back with
        // another tool, another method or altered, it is refused.
        let sealed = asked.request_state.clone().expect("a sealed state");
        let answers: rmcp::model::InputResponses = [(
            "confirm".to_owned(),
            json!({"action": "accept", "content": {"confirm": true}}),
        )]
        .into_iter()
        .collect();
        let mut elsewhere = CallToolRequestParams::new("modern__ask")
            .with_arguments(json!({"question": "why?"}).as_object().unwrap().clone());
        elsewhere.input_responses = Some(answers.clone());
        elsewhere.request_state = Some(sealed.clone());
        let mut altered = deploy.clone();
        altered.input_responses = Some(answers);
        altered.request_state = Some(format!("{sealed}A"));
        for refused in [elsewhere, altered] {
            match client.call_tool_once(refused).await.unwrap() {
                CallToolResponse::Complete(r) => {
                    let text = first_text(&r);
                    assert!(
                        r.is_error == Some(true)
                            && text.starts_with("invalid_request")
                            && text.contains("requestState"),
                        "{r:?}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        let mut prompt = greet_ada();
        prompt.request_state = Some(sealed);
        match client.get_prompt_once(prompt).await {
            Err(rmcp::ServiceError::McpError(e)) => {
                assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{e:?}");
                assert!(e.message.contains("requestState"), "{e:?}");
            }
            other => panic!("{other:?}"),
        }
        answered_as_told(&client, confirm).await;
        client.cancel().await.unwrap();
    }

    shutdown.cancel();

    // What a server's `relay` setting does not relay is not passed to a
    // 2026-07-28 client either: here sampling, which the gateway does not
    // declare to this server (so the server itself refuses to ask; one that
    // asked anyway would be refused by the gateway, `returned_inputs`).
    let mut config = modern_upstream("nosampling", &v[0], &v[1]);
    config.relay = toolexec_mcp::upstream::ClientRelay {
        sampling: false,
        ..toolexec_mcp::upstream::ClientRelay::GATEWAY
    };
    let guarded_gateway = gateway_in_front_of(config).await;
    let client = confirming_modern_client(guarded_gateway).await;
    let ask = CallToolRequestParams::new("nosampling__ask")
        .with_arguments(json!({"question": "why?"}).as_object().unwrap().clone());
    let r = client.call_tool(ask).await.unwrap();
    let text = first_text(&r);
    assert!(
        r.is_error == Some(true)
            && text.starts_with("execution_failed")
            && text.contains("sampling/createMessage"),
        "{r:?}"
    );
    let deploy = CallToolRequestParams::new("nosampling__deploy")
        .with_arguments(json!({"env": "prod"}).as_object().unwrap().clone());
    let r = client.call_tool(deploy).await.unwrap();
    assert_eq!(first_text(&r), "deployed to prod", "{r:?}");
    client.cancel().await.unwrap();

    // A client that cannot answer: the call fails with a typed error.
    let client = ().serve(serve_duplex(gateway, 1 << 16)).await.unwrap();
    let r = call(client.peer(), "modern__deploy", json!({"env": "prod"})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = first_text(&r);
    assert!(
        text.starts_with("execution_failed") && text.contains("client input"),
        "{text}"
    );
    // So do its prompts/get and resources/read, each with a typed error,
    // and the session keeps working.
    let e = client.get_prompt(greet_ada()).await.unwrap_err();
    let e = format!("{e:?}");
    assert!(
        e.contains("execution_failed") && e.contains("does not support elicitation/create"),
        "{e}"
    );
    let e = client
        .read_resource(ReadResourceRequestParams::new("fixture://guarded"))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("execution_failed"), "{e:?}");
    let r = call(client.peer(), "modern__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(first_text(&r), "3", "{r:?}");
    client.cancel().await.unwrap();
}

/// A 2026-07-28 upstream that asks for more client inputs at once than
/// the gateway passes on (8): its `tools/call` and `prompts/get` answers
/// become typed errors naming the limit (`returned_inputs`), not an
/// `input_required` for the client; asking for 2 is passed on and
/// answered; the session keeps working.
#[tokio::test(flavor = "multi_thread")]
async fn too_many_inputs_at_once_are_refused() {
    let test = "too_many_inputs_at_once_are_refused";
    let Some(gateway) = relaying_gateway(test).await else {
        return;
    };
    let client = confirming_modern_client(gateway).await;
    let survey = |n: u32| {
        CallToolRequestParams::new("modern__survey")
            .with_arguments(json!({"n": n}).as_object().unwrap().clone())
    };
    match client.call_tool_once(survey(9)).await.unwrap() {
        CallToolResponse::Complete(r) => {
            let text = first_text(&r);
            assert!(
                r.is_error == Some(true)
                    && text.starts_with("execution_failed")
                    && text.contains("9 client inputs at once; at most 8"),
                "{r:?}"
            );
        }
        other => panic!("more inputs than relayed reach the client: {other:?}"),
    }
    let prompt = GetPromptRequestParams::new("modern__survey")
        .with_arguments(json!({"n": "9"}).as_object().unwrap().clone());
    match client.get_prompt_once(prompt).await {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert!(e.message.contains("at most 8"), "{e:?}");
            assert_eq!(
                e.data.as_ref().unwrap()["code"],
                "execution_failed",
                "{e:?}"
            );
        }
        other => panic!("more inputs than relayed reach the client: {other:?}"),
    }
    match client.call_tool_once(survey(2)).await.unwrap() {
        CallToolResponse::InputRequired(asked) => {
            let requests = serde_json::to_value(&asked.input_requests).unwrap();
            assert_eq!(requests.as_object().map(|o| o.len()), Some(2), "{requests}");
        }
        other => panic!("{other:?}"),
    }
    // Answered through the client's handler, rounds and all.
    let r = client.call_tool(survey(2)).await.unwrap();
    assert_eq!(first_text(&r), "2 of 2 agreed", "{r:?}");
    let r = call(client.peer(), "modern__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(first_text(&r), "3", "{r:?}");
    client.cancel().await.unwrap();
}

/// Records the `resources/updated` a client of the gateway gets.
#[derive(Clone)]
struct Updates(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

/// A 2026-07-28 upstream has no `resources/subscribe`: a client's
/// subscription through the gateway becomes a `resourceSubscriptions` of
/// the upstream's listener, whose `resources/updated` reaches the client;
/// unsubscribed, the updates stop.
#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // resources/subscribe: legacy in 2026-07-28, current in 2025-11-25
async fn subscriptions_to_a_modern_upstream() {
    let test = "subscriptions_to_a_modern_upstream";
    let Some(v) = toolexec_testkit::deps(test, &["TOOLEXEC_NODE22", "TOOLEXEC_NODE_MODULES"])
    else {
        return;
    };
    let gateway = gateway_in_front_of(modern_upstream("modern", &v[0], &v[1])).await;
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let client = Updates(tx)
        .serve(serve_duplex(gateway, 1 << 16))
        .await
        .unwrap();
    client
        .subscribe(rmcp::model::SubscribeRequestParams::new("fixture://hello"))
        .await
        .expect("subscribed through the upstream's listener");
    call(
        client.peer(),
        "modern__touch",
        json!({"uri": "fixture://guarded"}),
    )
    .await;
    call(
        client.peer(),
        "modern__touch",
        json!({"uri": "fixture://hello"}),
    )
    .await;
    let uri = tokio::time::timeout(Duration::from_secs(10), updates.recv())
        .await
        .expect("an update in time")
        .unwrap();
    assert_eq!(uri, "fixture://hello");
    client
        .unsubscribe(rmcp::model::UnsubscribeRequestParams::new(
            "fixture://hello",
        ))
        .await
        .unwrap();
    // Unsubscribed once the server acknowledged a listener without it: an
    // update after that is not relayed.
    call(
        client.peer(),
        "modern__touch",
        json!({"uri": "fixture://hello"}),
    )
    .await;
    let late = tokio::time::timeout(Duration::from_millis(500), updates.recv()).await;
    assert!(late.is_err(), "an update after unsubscribing: {late:?}");
    client.cancel().await.unwrap();
}

/// `chatty` called through `peer`, naming `level` in `_meta` when given.
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
async fn chatty(peer: &rmcp::Peer<RoleClient>, level: Option<rmcp::model::LoggingLevel>) {
    let mut params = CallToolRequestParams::new("modern__chatty");
    if let Some(level) = level {
        params = support::with_log_level(params, level);
    }
    let r = peer.call_tool(params).await.unwrap();
    assert_eq!(first_text(&r), "said three things", "{r:?}");
}

/// A 2026-07-28 server sends log messages only for requests that name a
/// level (SEP-2575): the gateway names its client's. A 2025 client of the
/// gateway hears them at its session's level (`info` until it sets
/// another); a 2026-07-28 client, over a pipe and over HTTP, at the level
/// each of its requests names, and none when it names none. (Each client
/// has a server of its own: the pipe's and HTTP's callers are different
/// principals, and a stdio server's log messages, which name no call,
/// reach no one while calls of several principals are about.)
#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
async fn a_modern_upstream_logs_at_the_level_each_request_names() {
    use rmcp::model::LoggingLevel;
    let test = "a_modern_upstream_logs_at_the_level_each_request_names";
    let Some(gateway) = relaying_gateway(test).await else {
        return;
    };
    let (tx, mut logs) = tokio::sync::mpsc::unbounded_channel();

    // 2025-11-25: the session's level.
    let client = support::Logs(tx.clone(), ProtocolVersion::V_2025_11_25)
        .serve(serve_duplex(gateway.clone(), 1 << 16))
        .await
        .unwrap();
    assert_eq!(
        client.peer().peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2025_11_25
    );
    chatty(client.peer(), None).await;
    assert_eq!(
        support::next_logs(&mut logs, 2).await,
        support::sorted_logs(&[("info", "chatty info"), ("warning", "chatty warning")])
    );
    client
        .peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            LoggingLevel::Warning,
        ))
        .await
        .unwrap();
    chatty(client.peer(), None).await;
    assert_eq!(
        support::next_logs(&mut logs, 1).await,
        support::sorted_logs(&[("warning", "chatty warning")])
    );
    client.cancel().await.unwrap();

    // 2026-07-28, on the same gateway over a pipe (the same principal),
    // then on a gateway of its own over HTTP: each request's level; the
    // last call (debug) marks that every message of the first two came.
    let lifecycle = || ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let modern_logs = support::Logs(tx.clone(), ProtocolVersion::V_2026_07_28);
    let pipe = modern_logs
        .clone()
        .serve_with_lifecycle(serve_duplex(gateway, 1 << 16), lifecycle())
        .await
        .unwrap();
    let gateway = relaying_gateway(test).await.unwrap();
    let (addr, shutdown) =
        support::start_http(gateway, HttpAuth::Bearer(Secret::new("logs"))).await;
    let http = modern_logs
        .serve_with_lifecycle(
            support::rmcp_http_transport(
                StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                    .auth_header("logs"),
            ),
            lifecycle(),
        )
        .await
        .unwrap();
    for client in [pipe.peer(), http.peer()] {
        assert_eq!(
            client.peer_info().unwrap().protocol_version,
            ProtocolVersion::V_2026_07_28
        );
        support::chatty_at_each_level(client, "modern__chatty", &mut logs).await;
    }
    pipe.cancel().await.unwrap();
    http.cancel().await.unwrap();
    shutdown.cancel();
}

/// A 2026-07-28 server's `input_required` that comes after the call became
/// a task (its client declared the Tasks extension; the call runs past the
/// gateway's second): the task is
/// `input_required` with the server's requests, each `tasks/update`
/// answers some (those answered leave the task's `inputRequests`; a key
/// that names none is refused), and once all are answered the call is made
/// again with them and the server's state, and the task completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_upstream_asks_a_task_for_input() {
    let test = "a_modern_upstream_asks_a_task_for_input";
    let Some(gateway) = relaying_gateway(test).await else {
        return;
    };
    let client = Answering {
        confirm: true,
        tasks: true,
    }
    .serve_with_lifecycle(
        serve_duplex(gateway, 1 << 16),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap();
    let peer = client.peer();
    let slow = CallToolRequestParams::new("modern__slow_survey")
        .with_arguments(json!({"n": 2, "ms": 1500}).as_object().unwrap().clone());
    let id = match peer.call_tool_once(slow).await.unwrap() {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("expected a task: {other:?}"),
    };
    let outstanding = || async {
        match support::task_settled(peer, &id).await {
            TaskPayload::InputRequired { input_requests } => {
                input_requests.keys().cloned().collect::<Vec<_>>()
            }
            other => panic!("expected input_required: {other:?}"),
        }
    };
    let keys = outstanding().await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let yes = |key: &str| -> InputResponses {
        serde_json::from_value(json!({key: {"action": "accept", "content": {"confirm": true}}}))
            .unwrap()
    };
    let update =
        |responses: InputResponses| peer.update_task(UpdateTaskParams::new(&id, responses));
    update(yes(&keys[0])).await.unwrap();
    assert_eq!(outstanding().await, [keys[1].clone()]);
    let refused = update(yes("nope")).await;
    assert!(
        matches!(&refused, Err(ServiceError::McpError(e)) if e.code.0 == -32602),
        "{refused:?}"
    );
    update(yes(&keys[1])).await.unwrap();
    match support::task_settled(peer, &id).await {
        TaskPayload::Completed { result } => {
            let text = result["content"][0]["text"].as_str().unwrap_or_default();
            assert_eq!(text, "2 of 2 agreed", "{result:?}");
        }
        other => panic!("expected completed: {other:?}"),
    }
    client.cancel().await.unwrap();
}
