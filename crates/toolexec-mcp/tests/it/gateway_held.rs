//! A 2025 server's requests to its client during a call made by a
//! 2026-07-28 client, which takes no requests from its server: the gateway
//! holds the upstream call across the client's `input_required` rounds.
//! The Python SDK's asking server (`tests/fixtures/py_asking_server.py`,
//! revision 2025-11-25) behind an in-process gateway, over stdio and
//! streamable HTTP, and rmcp's client pinned to 2026-07-28.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequest, ClientRequest};
#[allow(deprecated)] // sampling and roots: deprecated by SEP-2577, current in 2025-11-25.
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, GetPromptRequestParams, Implementation, InputRequests, InputRequiredResult,
    InputResponses, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProtocolVersion, RootsCapabilities, TaskPayload, TaskStatus,
    UpdateTaskParams,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, PeerRequestOptions, RequestContext, RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use toolexec::Secret;
use toolexec_mcp::gateway::{Expose, HttpAuth};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig};

use super::gateway_relay::{Link, publishing_as, upstream};
use crate::support::gateway as support;

/// A 2026-07-28 client that answers sampling, elicitation and roots, and
/// passes on the progress and log messages (level, text) it is sent;
/// with `tasks`, it declares the Tasks extension.
#[derive(Clone, Default)]
struct Answers {
    progress: Option<tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>>,
    logs: Option<tokio::sync::mpsc::UnboundedSender<(String, String)>>,
    tasks: bool,
}

impl ClientHandler for Answers {
    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Some(tx) = &self.logs {
            let _ = tx.send(support::log_entry(&params));
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Some(tx) = &self.progress {
            let _ = tx.send(params);
        }
    }

    #[allow(deprecated)] // sampling: deprecated by SEP-2577, current in 2025-11-25.
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Ok(support::echo_sampling("modern-model", &params))
    }

    async fn create_elicitation(
        &self,
        _: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Ada"}}))
                .unwrap(),
        )
    }

    #[allow(deprecated)] // roots: deprecated by SEP-2577, current in 2025-11-25.
    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(serde_json::from_value(json!({"roots": [{"uri": "file:///work/modern"}]})).unwrap())
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.sampling = Some(Default::default());
        caps.elicitation = Some(Default::default());
        caps.roots = Some(RootsCapabilities::default());
        if self.tasks {
            caps.extensions = ClientCapabilities::builder()
                .enable_tasks()
                .build()
                .extensions;
        }
        ClientConfig::new(caps, Implementation::new("modern-answers", "1"))
    }
}

/// How the 2026-07-28 client reaches the gateway.
#[derive(Clone, Copy, Debug)]
enum Front {
    /// An in-memory pipe (as stdio).
    Pipe,
    /// Streamable HTTP, each request on its own (stateless).
    Http,
}

/// A 2026-07-28 client of a gateway in front of the asking server; what
/// must live as long as it.
struct Setup {
    client: RunningService<RoleClient, Answers>,
    upstream: Arc<Upstream>,
    _server: Option<crate::support::upstream::ChildGuard>,
    _gateway: Option<tokio_util::sync::DropGuard>,
}

impl Setup {
    async fn close(self) {
        self.client.cancel().await.unwrap();
        self.upstream.shutdown().await;
    }
}

/// A gateway publishing every tool and the meta-tools in front of the
/// asking server over `link`, whose calls end by `timeout`; a 2026-07-28
/// client of it.
async fn modern_client_of(python: &str, link: Link, timeout: Duration) -> Setup {
    tuned_client_of(
        python,
        link,
        Front::Pipe,
        timeout,
        |_| {},
        Answers::default(),
    )
    .await
}

/// [`modern_client_of`] through `front`, the upstream's configuration
/// changed by `tune`.
async fn tuned_client_of(
    python: &str,
    link: Link,
    front: Front,
    timeout: Duration,
    tune: impl FnOnce(&mut UpstreamConfig),
    answers: Answers,
) -> Setup {
    let (mut config, server) = upstream(python, link, timeout);
    tune(&mut config);
    // The meta-tools too: a held call can be made through `run_tool`.
    let (gateway, upstream) = publishing_as(config, Expose::Both).await;
    assert_ne!(upstream.protocol_version().as_deref(), Some("2026-07-28"));
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let (client, gateway) = match front {
        Front::Pipe => {
            let (server_io, client_io) = tokio::io::duplex(1 << 16);
            tokio::spawn(async move {
                if let Ok(running) = gateway.serve(server_io).await {
                    let _ = running.waiting().await;
                }
            });
            let client = answers.serve_with_lifecycle(client_io, lifecycle).await;
            (client.unwrap(), None)
        }
        Front::Http => {
            let token = "held-token";
            let (addr, shutdown) =
                support::start_http(gateway, HttpAuth::Bearer(Secret::new(token))).await;
            let http = support::rmcp_http_transport(
                StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
                    .auth_header(token),
            );
            let client = answers.serve_with_lifecycle(http, lifecycle).await;
            (client.unwrap(), Some(shutdown.drop_guard()))
        }
    };
    Setup {
        client,
        upstream,
        _server: server,
        _gateway: gateway,
    }
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let args: Map<String, Value> = args.as_object().unwrap().clone();
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args)
}

fn result_of(r: CallToolResponse) -> CallToolResult {
    match r {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a result: {other:?}"),
    }
}

fn asks_of(r: CallToolResponse) -> InputRequiredResult {
    match r {
        CallToolResponse::InputRequired(asks) => asks,
        other => panic!("expected input_required: {other:?}"),
    }
}

fn text_of(r: &CallToolResult) -> &str {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map_or("", |t| t.text.as_str())
}

/// The key of the first request of `asks`.
fn first_key(asks: &InputRequiredResult) -> String {
    asks.input_requests
        .as_ref()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone()
}

/// The asking server's outcomes so far, polled every 100 ms until one
/// matches `wanted` (within `within`); that outcome.
async fn outcome_where(
    client: &RunningService<RoleClient, Answers>,
    within: Duration,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let outcomes = outcomes_until(client, within, |all| all.iter().any(&wanted)).await;
    outcomes.into_iter().find(|o| wanted(o)).unwrap()
}

/// The asking server's outcomes, polled every 100 ms until `done` holds
/// for them (within `within`).
async fn outcomes_until(
    client: &RunningService<RoleClient, Answers>,
    within: Duration,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let r = client
            .call_tool(params("asking__outcomes", json!({})))
            .await
            .unwrap();
        let outcomes = r.structured_content.unwrap()["result"].clone();
        let all = outcomes.as_array().unwrap();
        if done(all) {
            return all.clone();
        }
        assert!(std::time::Instant::now() < deadline, "{outcomes}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `params` again with `answers` and `state`.
fn again(
    params: &CallToolRequestParams,
    answers: Value,
    state: Option<&str>,
) -> CallToolRequestParams {
    let mut params = params.clone();
    params.input_responses = Some(serde_json::from_value(answers).unwrap());
    params.request_state = state.map(str::to_owned);
    params
}

/// Refused with `invalid_request` naming `requestState`.
fn refused_state(r: CallToolResponse) {
    let r = result_of(r);
    let text = text_of(&r);
    assert!(
        r.is_error == Some(true)
            && text.starts_with("invalid_request")
            && text.contains("requestState"),
        "{r:?}"
    );
}

/// The prompt `greeting` and the resource `asking://profile/7`, each of
/// which asks the client for a name first: their texts.
async fn prompt_and_resource(client: &RunningService<RoleClient, Answers>) -> (String, String) {
    let greeting = GetPromptRequestParams::new("asking__greeting")
        .with_arguments(json!({"salutation": "Hello"}).as_object().unwrap().clone());
    support::prompt_and_resource_text(client, greeting, "asking://profile/7").await
}

/// Each of sampling, form elicitation and roots, asked by the 2025 server
/// during a call, reaches the 2026-07-28 client as `input_required` and
/// its answer reaches the server, which finishes the same call; over
/// stdio (nothing names the call on the wire) and streamable HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_client_answers_what_an_older_server_asks() {
    let test = "a_modern_client_answers_what_an_older_server_asks";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    for (link, front) in [
        (Link::Stdio, Front::Pipe),
        (Link::Http, Front::Pipe),
        (Link::Stdio, Front::Http),
    ] {
        let timeout = Duration::from_secs(20);
        let setup =
            tuned_client_of(&python, link, front, timeout, |_| {}, Answers::default()).await;
        let client = &setup.client;
        let r = client
            .call_tool(params("asking__ask_llm", json!({"prompt": "hello"})))
            .await
            .unwrap();
        assert_eq!(
            r.structured_content,
            Some(
                json!({"ok": {"model": "modern-model", "role": "assistant", "text": "echo: hello"}})
            ),
            "{link:?} {front:?}: {r:?}"
        );
        let r = client
            .call_tool(params(
                "asking__ask_name",
                json!({"question": "Your name?"}),
            ))
            .await
            .unwrap();
        assert_eq!(
            r.structured_content,
            Some(json!({"ok": {"action": "accept", "data": {"name": "Ada"}}})),
            "{link:?} {front:?}: {r:?}"
        );
        let r = client
            .call_tool(params("asking__my_roots", json!({})))
            .await
            .unwrap();
        assert_eq!(
            r.structured_content,
            Some(json!({"ok": ["file:///work/modern"]})),
            "{link:?} {front:?}: {r:?}"
        );

        // One round at a time: the request as the client gets it, tagged
        // with the server, under a state that is not the gateway's token.
        let ask = params("asking__ask_name", json!({"question": "Who?"}));
        let asks = asks_of(client.call_tool_once(ask.clone()).await.unwrap());
        let requests = serde_json::to_value(asks.input_requests.as_ref().unwrap()).unwrap();
        let (key, request) = requests.as_object().unwrap().iter().next().unwrap();
        assert_eq!(requests.as_object().unwrap().len(), 1, "{requests}");
        assert_eq!(request["method"], "elicitation/create", "{requests}");
        assert_eq!(request["params"]["message"], "Who?", "{requests}");
        assert_eq!(
            request["params"]["_meta"]["io.toolexec/server"], "asking",
            "{requests}"
        );
        let state = asks.request_state.clone().unwrap();
        assert!(state.len() > 32, "{state}");
        let answer = json!({key.clone(): {"action": "accept", "content": {"name": "Grace"}}});
        // The state with other arguments, or altered, resumes nothing and
        // leaves the call waiting.
        let other = params("asking__ask_name", json!({"question": "Whom?"}));
        refused_state(
            client
                .call_tool_once(again(&other, answer.clone(), Some(&state)))
                .await
                .unwrap(),
        );
        refused_state(
            client
                .call_tool_once(again(&ask, answer.clone(), Some(&format!("{state}A"))))
                .await
                .unwrap(),
        );
        let r = result_of(
            client
                .call_tool_once(again(&ask, answer.clone(), Some(&state)))
                .await
                .unwrap(),
        );
        assert_eq!(
            r.structured_content,
            Some(json!({"ok": {"action": "accept", "data": {"name": "Grace"}}})),
            "{link:?} {front:?}: {r:?}"
        );
        // Replayed: the call it held is over.
        refused_state(
            client
                .call_tool_once(again(&ask, answer, Some(&state)))
                .await
                .unwrap(),
        );

        // No answer for the request: the server gets an error for it.
        let asks = asks_of(client.call_tool_once(ask.clone()).await.unwrap());
        let r = result_of(
            client
                .call_tool_once(again(&ask, json!({}), asks.request_state.as_deref()))
                .await
                .unwrap(),
        );
        let error = &r.structured_content.as_ref().unwrap()["error"];
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("no answer for input")),
            "{link:?} {front:?}: {r:?}"
        );
        // A prompt and a resource that ask, each held the same way.
        let (greeted, read) = prompt_and_resource(client).await;
        assert_eq!(
            (greeted.as_str(), read.as_str()),
            ("Hello, Ada", "profile 7 of Ada"),
            "{link:?} {front:?}"
        );
        let r = client
            .call_tool(params("asking__chatty", json!({})))
            .await
            .unwrap();
        assert_eq!(text_of(&r), "said three things", "{r:?}");
        setup.close().await;
    }
}

/// A client that does not come back within the call's timeout: the call
/// ends at its deadline (the server is told), and the client's late round
/// gets that outcome rather than a lost call; the session keeps working.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_call_ends_at_its_deadline() {
    let test = "a_held_call_ends_at_its_deadline";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let setup = modern_client_of(&python, Link::Stdio, Duration::from_secs(2)).await;
    let client = &setup.client;
    let ask = params("asking__ask_llm", json!({"prompt": "late"}));
    let asks = asks_of(client.call_tool_once(ask.clone()).await.unwrap());
    let key = first_key(&asks);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let answer = json!({key: {"model": "m", "role": "assistant", "content": {"type": "text", "text": "too late"}}});
    let r = result_of(
        client
            .call_tool_once(again(&ask, answer, asks.request_state.as_deref()))
            .await
            .unwrap(),
    );
    assert!(
        r.is_error == Some(true) && text_of(&r).starts_with("timeout"),
        "{r:?}"
    );
    // The server was told: its ask ended with an error or was cancelled.
    let last = outcome_where(client, Duration::from_secs(20), |o| o["kind"] == "sampling").await;
    assert!(
        last["cancelled"] == true || last["error"]["code"].is_i64(),
        "{last}"
    );
    setup.close().await;
}

/// One principal holds at most half the server's concurrency slots: with
/// 2 slots, a second call that asks while the first is held gets an error
/// for its request (over HTTP, where each request names its call); over
/// stdio, where nothing does, a request during a held call and another is
/// refused rather than guessed. Both first calls then finish.
#[tokio::test(flavor = "multi_thread")]
async fn held_calls_are_bounded_and_never_guessed() {
    let test = "held_calls_are_bounded_and_never_guessed";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    for (link, refusal) in [
        (Link::Http, "waiting for its answers"),
        (Link::Stdio, "waiting for its client's answers"),
    ] {
        let two_slots = |c: &mut UpstreamConfig| c.max_concurrency = 2;
        let timeout = Duration::from_secs(20);
        let setup = tuned_client_of(
            &python,
            link,
            Front::Pipe,
            timeout,
            two_slots,
            Answers::default(),
        )
        .await;
        let client = &setup.client;
        let ask = params("asking__ask_name", json!({"question": "Who?"}));
        let asks = asks_of(client.call_tool_once(ask.clone()).await.unwrap());
        let key = first_key(&asks);
        let r = result_of(
            client
                .call_tool_once(params("asking__ask_llm", json!({"prompt": "too"})))
                .await
                .unwrap(),
        );
        let error = &r.structured_content.as_ref().unwrap()["error"];
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains(refusal)),
            "{link:?}: {r:?}"
        );
        let answer = json!({key: {"action": "accept", "content": {"name": "Ada"}}});
        let r = result_of(
            client
                .call_tool_once(again(&ask, answer, asks.request_state.as_deref()))
                .await
                .unwrap(),
        );
        assert_eq!(
            r.structured_content,
            Some(json!({"ok": {"action": "accept", "data": {"name": "Ada"}}})),
            "{link:?}: {r:?}"
        );
        // Nothing held now: the next call that asks is held again.
        let r = client
            .call_tool(params("asking__ask_llm", json!({"prompt": "again"})))
            .await
            .unwrap();
        assert_eq!(
            r.structured_content.unwrap()["ok"]["text"],
            "echo: again",
            "{link:?}"
        );
        setup.close().await;
    }
}

/// A client that cancels a round abandons the held call: the server is
/// told (its tool's work is cancelled), and the session keeps working.
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_round_abandons_the_held_call() {
    let test = "cancelling_a_round_abandons_the_held_call";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let setup = modern_client_of(&python, Link::Stdio, Duration::from_secs(20)).await;
    let client = &setup.client;
    let ask = params(
        "asking__ask_then_work",
        json!({"question": "Who?", "seconds": 30}),
    );
    let asks = asks_of(client.call_tool_once(ask.clone()).await.unwrap());
    let key = first_key(&asks);
    let answer = json!({key: {"action": "accept", "content": {"name": "Ada"}}});
    let resume = ClientRequest::CallToolRequest(CallToolRequest::new(again(
        &ask,
        answer,
        asks.request_state.as_deref(),
    )));
    let handle = client
        .peer()
        .send_request_with_option(resume, PeerRequestOptions::no_options())
        .await
        .unwrap();
    // The server has the answer and works on.
    let asked = outcome_where(client, Duration::from_secs(20), |o| {
        o["kind"] == "elicitation"
    })
    .await;
    assert_eq!(asked["ok"]["action"], "accept", "{asked}");
    handle
        .cancel(Some("the user gave up".into()))
        .await
        .unwrap();
    // Well before the call's own 20 s deadline would end it.
    let work = outcome_where(client, Duration::from_secs(5), |o| o["kind"] == "work").await;
    assert_eq!(work["cancelled"], true, "{work}");
    setup.close().await;
}

/// The server's progress and log messages during a held call reach the
/// round that waits for it, log messages at the level the client's first
/// round named: the first round hears what the server logged before it
/// asked, the second (which sent the answer and waits for the work) its
/// progress and what it logged after. A call that names no level gets no
/// log messages (SEP-2575), one that names `warning` only those.
#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
async fn a_held_call_reports_progress_and_logs_to_the_round_that_waits() {
    let test = "a_held_call_reports_progress_and_logs_to_the_round_that_waits";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let (progress_tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let (logs_tx, mut logs) = tokio::sync::mpsc::unbounded_channel();
    let answers = Answers {
        progress: Some(progress_tx),
        logs: Some(logs_tx),
        tasks: false,
    };
    let timeout = Duration::from_secs(20);
    let setup = tuned_client_of(&python, Link::Stdio, Front::Pipe, timeout, |_| {}, answers).await;
    let client = &setup.client;

    support::chatty_at_each_level(client.peer(), "asking__chatty", &mut logs).await;

    let ask = params(
        "asking__ask_then_work",
        json!({"question": "Who?", "seconds": 0.5}),
    );
    let first = support::with_log_level(ask.clone(), LoggingLevel::Info);
    let asks = asks_of(client.call_tool_once(first.clone()).await.unwrap());
    assert_eq!(
        support::next_logs(&mut logs, 1).await,
        support::sorted_logs(&[("info", "asking: Who?")])
    );
    let key = first_key(&asks);
    let answer = json!({key: {"action": "accept", "content": {"name": "Ada"}}});
    let second = support::with_log_level(
        again(&ask, answer, asks.request_state.as_deref()),
        LoggingLevel::Warning,
    );
    let r = result_of(client.call_tool_once(second).await.unwrap());
    assert_eq!(
        r.structured_content,
        Some(json!({"ok": {"action": "accept"}})),
        "{r:?}"
    );
    // Relayed before the answer; the client's handler may see it a moment
    // later.
    let mut seen = Vec::new();
    let wait = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(p) = progress.recv().await {
            seen.push((p.progress, p.total));
            if p.progress >= 1.0 && p.total == Some(5.0) {
                return;
            }
        }
    });
    assert!(wait.await.is_ok(), "{seen:?}");
    // The second round named `warning`: the server's `info` is not sent.
    assert_eq!(
        support::next_logs(&mut logs, 1).await,
        support::sorted_logs(&[("warning", "work done, loudly")])
    );
    setup.close().await;
}

/// A client that declares the Tasks extension, of a gateway in front of
/// the asking server over stdio, whose calls end by `timeout`.
async fn tasks_client_of(python: &str, timeout: Duration) -> Setup {
    let answers = Answers {
        tasks: true,
        ..Answers::default()
    };
    tuned_client_of(python, Link::Stdio, Front::Pipe, timeout, |_| {}, answers).await
}

/// `call` (the asking server's `work_then_ask`, which asks after it
/// worked past the gateway's second) as a task: its id once it is
/// `input_required`, and the requests it waits for.
async fn asking_task(
    peer: &rmcp::Peer<RoleClient>,
    call: CallToolRequestParams,
) -> (String, InputRequests) {
    let id = match peer.call_tool_once(call).await.unwrap() {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("expected a task: {other:?}"),
    };
    match support::task_settled(peer, &id).await {
        TaskPayload::InputRequired { input_requests } => (id, input_requests),
        other => panic!("expected input_required: {other:?}"),
    }
}

/// A held call that asks after it became a task (the client declared the
/// Tasks extension; the call runs past the gateway's second): the task is
/// `input_required` with the server's request, `tasks/update` answers it
/// (a key that names no request is refused), and the task completes with
/// the server's result; then it takes no more input.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_call_that_became_a_task_takes_its_input_by_tasks_update() {
    let test = "a_held_call_that_became_a_task_takes_its_input_by_tasks_update";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let setup = tasks_client_of(&python, Duration::from_secs(20)).await;
    let peer = setup.client.peer();
    let slow = params(
        "asking__work_then_ask",
        json!({"seconds": 1.5, "question": "Who, later?"}),
    );
    let (id, requests) = asking_task(peer, slow).await;
    let (key, request) = requests.iter().next().unwrap();
    let request = serde_json::to_value(request).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Who, later?", "{request}");

    let answer = |key: &str| -> InputResponses {
        serde_json::from_value(json!({key: {"action": "accept", "content": {"name": "Ada"}}}))
            .unwrap()
    };
    let refused = |r: Result<(), rmcp::service::ServiceError>| {
        assert!(
            matches!(&r, Err(rmcp::service::ServiceError::McpError(e)) if e.code.0 == -32602),
            "{r:?}"
        );
    };
    refused(
        peer.update_task(UpdateTaskParams::new(id.clone(), answer("input-99")))
            .await,
    );
    peer.update_task(UpdateTaskParams::new(id.clone(), answer(key)))
        .await
        .unwrap();
    match support::task_settled(peer, &id).await {
        TaskPayload::Completed { result } => assert_eq!(
            result["structuredContent"],
            json!({"ok": {"action": "accept", "data": {"name": "Ada"}}}),
            "{result:?}"
        ),
        other => panic!("expected completed: {other:?}"),
    }
    refused(
        peer.update_task(UpdateTaskParams::new(id.clone(), answer(key)))
            .await,
    );

    // Cancelled while it waits for input: the held call ends now (the
    // server's ask ends with an error or is cancelled within 5 s), not at
    // its 20 s deadline; so too for a task of `run_tool`.
    let args = json!({"seconds": 1.5, "question": "Who, never?"});
    let run_tool = json!({"tool_id": "asking:work_then_ask", "args": args.clone()});
    for (n, slow) in [
        params("asking__work_then_ask", args),
        params("run_tool", run_tool),
    ]
    .into_iter()
    .enumerate()
    {
        let (id, _) = asking_task(peer, slow).await;
        peer.cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .unwrap();
        assert_eq!(
            support::task_settled(peer, &id).await,
            TaskPayload::Cancelled
        );
        let ended = |o: &Value| {
            o["kind"] == "late_elicitation"
                && (o["cancelled"] == true || o["error"]["code"].is_i64())
        };
        outcomes_until(&setup.client, Duration::from_secs(5), |all| {
            all.iter().filter(|o| ended(o)).count() > n
        })
        .await;
    }
    setup.close().await;
}

/// A task waits for the answers to a held call's requests only as long as
/// the call may wait (its server's `call_timeout`, here 3 s, against the
/// task's hour): then it ends with `timeout`, which it can still be asked
/// for.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_waits_for_input_only_as_long_as_its_held_call() {
    let test = "a_task_waits_for_input_only_as_long_as_its_held_call";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let setup = tasks_client_of(&python, Duration::from_secs(3)).await;
    let peer = setup.client.peer();
    let slow = params(
        "asking__work_then_ask",
        json!({"seconds": 1.2, "question": "Who, too late?"}),
    );
    let (id, _) = asking_task(peer, slow).await;
    let waiting = [TaskStatus::Working, TaskStatus::InputRequired];
    match support::task_past(peer, &id, &waiting).await {
        TaskPayload::Completed { result } => {
            assert_eq!(result["isError"], true, "{result:?}");
            assert_eq!(
                result["structuredContent"]["error"]["code"], "timeout",
                "{result:?}"
            );
        }
        other => panic!("expected a timeout: {other:?}"),
    }
    setup.close().await;
}

/// A held call that ends by itself while its task waits for input (its
/// server gives up asking after a second): the task takes the call's
/// result then, rather than ending with `timeout` at the call's 30 s
/// deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_takes_the_result_of_a_held_call_that_stopped_asking() {
    let test = "a_task_takes_the_result_of_a_held_call_that_stopped_asking";
    let Some(python) = crate::support::gateway::dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let setup = tasks_client_of(&python, Duration::from_secs(30)).await;
    let peer = setup.client.peer();
    let impatient = params(
        "asking__work_then_ask",
        json!({"seconds": 1.5, "question": "Who, quickly?", "patience": 1.0}),
    );
    let (id, _) = asking_task(peer, impatient).await;
    let waiting = [TaskStatus::Working, TaskStatus::InputRequired];
    match support::task_past(peer, &id, &waiting).await {
        TaskPayload::Completed { result } => assert_eq!(
            result["structuredContent"],
            json!({"gave_up": true}),
            "{result:?}"
        ),
        other => panic!("expected the call's result: {other:?}"),
    }
    setup.close().await;
}
