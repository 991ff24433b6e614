//! The gateway as a proxy of its upstreams' resources, resource templates,
//! subscriptions, prompts and completion: two instances of the Python SDK
//! fixture (`one`, `two`) behind one gateway, driven by rmcp's client.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, ClientCapabilities, ClientConfig, CompleteRequestParams,
    ErrorCode, GetPromptRequestParams, Implementation, PaginatedRequestParams, ProtocolVersion,
    Reference, ResourceContents, ResourceUpdatedNotificationParam, ServerNotification,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;
use toolexec::{Catalog, Exec, Secret};
use toolexec_mcp::gateway::{Expose, Gateway, GatewayOptions};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Note {
    Updated(String),
    ResourcesChanged,
}

#[derive(Clone)]
struct Recorder(mpsc::UnboundedSender<Note>);

impl ClientHandler for Recorder {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(Note::Updated(params.uri));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(Note::ResourcesChanged);
    }
}

type Client = RunningService<RoleClient, Recorder>;

fn fixture(python: &str, label: &str) -> UpstreamConfig {
    let mut env = BTreeMap::new();
    env.insert("PY_UPSTREAM_LABEL".to_owned(), Secret::new(label));
    crate::support::upstream::py_stdio_config(label, python, env)
}

/// A gateway in front of `one` and `two`, and a client connected to it.
async fn setup(python: &str) -> (Client, mpsc::UnboundedReceiver<Note>, Vec<Arc<Upstream>>) {
    let options = GatewayOptions {
        expose: Expose::All,
        ..GatewayOptions::default()
    };
    let (client, notes, upstreams, _) = setup_with(python, options).await;
    (client, notes, upstreams)
}

/// [`setup`] with `options`; also the gateway.
async fn setup_with(
    python: &str,
    options: GatewayOptions,
) -> (
    Client,
    mpsc::UnboundedReceiver<Note>,
    Vec<Arc<Upstream>>,
    Gateway,
) {
    let catalog = Arc::new(Catalog::new());
    let mut upstreams = Vec::new();
    for label in ["one", "two"] {
        let upstream = Upstream::connect(fixture(python, label), catalog.clone())
            .await
            .unwrap();
        upstreams.push(Arc::new(upstream));
    }
    let gateway = Gateway::with_upstreams(Exec::new(catalog), options, upstreams.clone());
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let serving = gateway.clone();
    tokio::spawn(async move {
        let gateway = serving;
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let client = Recorder(tx).serve(client_io).await.expect("initialize");
    (client, rx, upstreams, gateway)
}

async fn next_note(notes: &mut mpsc::UnboundedReceiver<Note>) -> Note {
    tokio::time::timeout(WAIT, notes.recv())
        .await
        .expect("a notification in time")
        .expect("the client is running")
}

fn mcp_error(r: Result<impl std::fmt::Debug, ServiceError>) -> rmcp::ErrorData {
    match r {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

fn text(contents: &ResourceContents) -> (&str, &str) {
    match contents {
        ResourceContents::TextResourceContents { uri, text, .. } => (uri, text),
        other => panic!("not text: {other:?}"),
    }
}

async fn call(client: &Client, name: &str, args: serde_json::Value) -> serde_json::Value {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = args.as_object().cloned();
    let r = client.call_tool(params).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    serde_json::to_value(r.structured_content).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // resources/subscribe: legacy in 2026-07-28, current in 2025-11-25
async fn resources_prompts_and_completion_of_two_upstreams() {
    let Some(python) = toolexec_testkit::deps(
        "resources_prompts_and_completion_of_two_upstreams",
        &["TOOLEXEC_PYTHON"],
    )
    .map(|mut v| v.remove(0)) else {
        return;
    };
    let (client, mut notes, upstreams) = setup(&python).await;

    // Capabilities of the servers behind the gateway.
    let info = client.peer_info().expect("server info");
    let resources = info.capabilities.resources.as_ref().expect("resources");
    assert_eq!(resources.subscribe, Some(true));
    assert!(info.capabilities.prompts.is_some());
    assert!(info.capabilities.completions.is_some());

    // resources/list, merged page by page: the shared URIs stay as written
    // for `one`, `two` publishes them rewritten.
    let mut uris = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = client
            .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .unwrap();
        pages += 1;
        uris.extend(page.resources.into_iter().map(|r| r.uri));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, 2, "one page per upstream: {uris:?}");
    let rewritten = "toolexec://two/test%3A%2F%2Fstatic%2Ftext";
    assert_eq!(
        uris,
        [
            "test://static/text",
            "test://static/blob",
            "test://one/only",
            rewritten,
            "toolexec://two/test%3A%2F%2Fstatic%2Fblob",
            "test://two/only",
        ],
    );
    // The whole merged list in one call, as rmcp's helper reads it.
    assert_eq!(client.list_all_resources().await.unwrap().len(), 6);

    // resources/read goes to the owner; a rewritten URI reads back from
    // the later server, under the URI the client asked for.
    let read = |uri: &str| {
        client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri.to_owned()))
    };
    let r = read("test://static/text").await.unwrap();
    assert_eq!(
        text(&r.contents[0]),
        ("test://static/text", "static text from one")
    );
    let r = read(rewritten).await.unwrap();
    assert_eq!(text(&r.contents[0]), (rewritten, "static text from two"));
    let r = read("test://two/only").await.unwrap();
    assert_eq!(text(&r.contents[0]).1, "only in two");
    let r = read("test://static/blob").await.unwrap();
    match &r.contents[0] {
        ResourceContents::BlobResourceContents { blob, .. } => assert_eq!(blob, "AAEC/w=="),
        other => panic!("not a blob: {other:?}"),
    }

    // Templates: merged; a URI from a template reads from the first server
    // that has it.
    let templates = client.list_all_resource_templates().await.unwrap();
    let names: Vec<_> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(names, ["greeting://{name}", "greeting://{name}"]);
    let r = read("greeting://ada").await.unwrap();
    assert_eq!(text(&r.contents[0]).1, "Hello, ada from one");

    // An unknown URI: a typed error naming it, and the session goes on.
    let e = mcp_error(read("nothing://here").await);
    assert_eq!(e.code, ErrorCode(-32002), "{e:?}");
    assert_eq!(e.data, Some(json!({"uri": "nothing://here"})));

    // Prompts: published as server__name, relayed under their own name.
    let prompts = client.list_all_prompts().await.unwrap();
    let names: Vec<_> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["one__review", "two__review"]);
    let mut params = GetPromptRequestParams::new("two__review");
    params.arguments = json!({"code": "x = 1"}).as_object().cloned();
    let prompt = client.get_prompt(params).await.unwrap();
    assert_eq!(
        serde_json::to_value(&prompt.messages[0].content).unwrap(),
        json!({"type": "text", "text": "Review this python code (two):\nx = 1"})
    );
    // A missing argument is the server's own error, relayed unchanged.
    let e = mcp_error(
        client
            .get_prompt(GetPromptRequestParams::new("one__review"))
            .await,
    );
    assert!(e.message.contains("code"), "{e:?}");
    let e = mcp_error(
        client
            .get_prompt(GetPromptRequestParams::new("nobody__review"))
            .await,
    );
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");

    // Completion: a prompt argument, and a template variable.
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("one__review"),
            ArgumentInfo::new("language", "p"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["python", "pascal"]);
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_resource("greeting://{name}"),
            ArgumentInfo::new("name", "a"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["ada", "alan"]);

    // Subscriptions: the owner is subscribed; its resources/updated reaches
    // the client under the URI it subscribed with.
    client
        .subscribe(SubscribeRequestParams::new(rewritten))
        .await
        .unwrap();
    assert_eq!(
        call(&client, "two__subscriptions", json!({})).await,
        json!({"result": ["test://static/text"]})
    );
    assert_eq!(
        call(&client, "one__subscriptions", json!({})).await,
        json!({"result": []})
    );
    // An update of a resource nobody subscribed to is not relayed; one of
    // the subscribed resource is.
    call(&client, "two__touch", json!({"uri": "test://two/only"})).await;
    call(&client, "two__touch", json!({"uri": "test://static/text"})).await;
    match next_note(&mut notes).await {
        Note::Updated(uri) => assert_eq!(uri, rewritten),
        other => panic!("unexpected {other:?}"),
    }
    client
        .unsubscribe(UnsubscribeRequestParams::new(rewritten))
        .await
        .unwrap();
    assert_eq!(
        call(&client, "two__subscriptions", json!({})).await,
        json!({"result": []})
    );

    // A server's resources/list_changed reaches the client, and the new
    // resource is listed and read.
    call(&client, "one__add_resource", json!({"name": "fresh"})).await;
    assert!(matches!(
        next_note(&mut notes).await,
        Note::ResourcesChanged
    ));
    let r = read("test://one/fresh").await.unwrap();
    assert_eq!(text(&r.contents[0]).1, "added fresh");

    // Nothing else arrived (the unsubscribed update, for one).
    let quiet = Instant::now() + Duration::from_millis(200);
    if let Ok(Some(n)) = tokio::time::timeout_at(quiet.into(), notes.recv()).await {
        panic!("unexpected notification {n:?}");
    }
    // A session holds at most 1,000 subscriptions; past that a typed
    // error, and the session goes on.
    for i in 0..1000 {
        client
            .subscribe(SubscribeRequestParams::new(format!("greeting://n{i}")))
            .await
            .unwrap();
    }
    let e = mcp_error(
        client
            .subscribe(SubscribeRequestParams::new("greeting://one-too-many"))
            .await,
    );
    assert_eq!(e.code, ErrorCode::INVALID_REQUEST, "{e:?}");
    assert!(e.message.contains("1000"), "{e:?}");
    let r = read("greeting://ada").await.unwrap();
    assert_eq!(text(&r.contents[0]).1, "Hello, ada from one");

    client.cancel().await.unwrap();
    // Dropping the last handle stops each server.
    drop(upstreams);
}

async fn tool_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

async fn prompt_text(client: &Client, name: &str) -> serde_json::Value {
    let mut params = GetPromptRequestParams::new(name);
    params.arguments = json!({"code": "x = 1"}).as_object().cloned();
    let prompt = client.get_prompt(params).await.unwrap();
    serde_json::to_value(&prompt.messages[0].content).unwrap()["text"].clone()
}

/// `prefix = false` (`GatewayOptions::unprefixed`): `one`'s tools and
/// prompts under their own names, `two`'s prefixed; no conflict.
#[tokio::test(flavor = "multi_thread")]
async fn an_unprefixed_server_keeps_its_names() {
    let Some(python) =
        toolexec_testkit::deps("an_unprefixed_server_keeps_its_names", &["TOOLEXEC_PYTHON"])
            .map(|mut v| v.remove(0))
    else {
        return;
    };
    let options = GatewayOptions {
        expose: Expose::All,
        unprefixed: vec!["one".into()],
        ..GatewayOptions::default()
    };
    let (client, _notes, _upstreams, gateway) = setup_with(&python, options).await;
    assert_eq!(gateway.name_conflicts().await, []);

    let names = tool_names(&client).await;
    for name in ["add", "show_env", "dup_name", "two__add", "two__show_env"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!names.iter().any(|n| n.starts_with("one__")), "{names:?}");
    // Each name runs its own server's tool; the prefixed form of an
    // unprefixed server's tool is not a name.
    let label = json!({"name": "PY_UPSTREAM_LABEL"});
    assert_eq!(
        call(&client, "show_env", label.clone()).await,
        json!({"result": "one"})
    );
    assert_eq!(
        call(&client, "two__show_env", label.clone()).await,
        json!({"result": "two"})
    );
    let mut params = CallToolRequestParams::new("one__show_env");
    params.arguments = label.as_object().cloned();
    let e = mcp_error(client.call_tool(params).await);
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");

    // Prompts: `review` is one's, `two__review` two's; completion follows.
    let prompts = client.list_all_prompts().await.unwrap();
    let names: Vec<_> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["review", "two__review"]);
    assert_eq!(
        prompt_text(&client, "review").await,
        "Review this python code (one):\nx = 1"
    );
    assert_eq!(
        prompt_text(&client, "two__review").await,
        "Review this python code (two):\nx = 1"
    );
    let e = mcp_error(
        client
            .get_prompt(GetPromptRequestParams::new("one__review"))
            .await,
    );
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("review"),
            ArgumentInfo::new("language", "r"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, ["rust"]);

    // `one` cannot pose as `two__review`, or as a prompt of its own in
    // the prefixed form: such names are never an unprefixed server's.
    for name in ["two__review", "one__other"] {
        let mut params = CallToolRequestParams::new("add_prompt");
        params.arguments = json!({"name": name}).as_object().cloned();
        client.call_tool(params).await.unwrap();
    }
    let prompts = client.list_all_prompts().await.unwrap();
    let names: Vec<_> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["review", "two__review"]);
    assert_eq!(
        prompt_text(&client, "two__review").await,
        "Review this python code (two):\nx = 1"
    );
    let e = mcp_error(
        client
            .get_prompt(GetPromptRequestParams::new("one__other"))
            .await,
    );
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
    client.cancel().await.unwrap();
}

/// Two unprefixed servers with the same tools and prompts: no one gets a
/// shared name (listing it would let whoever comes first, or adds a tool
/// later, take calls meant for the other), calling it is an error naming
/// both, and the conflicts are reported; a tool a server adds at run time
/// under a meta-tool's name is a conflict too, and the meta-tool keeps the
/// name.
#[tokio::test(flavor = "multi_thread")]
async fn unprefixed_servers_that_share_names_conflict() {
    let Some(python) = toolexec_testkit::deps(
        "unprefixed_servers_that_share_names_conflict",
        &["TOOLEXEC_PYTHON"],
    )
    .map(|mut v| v.remove(0)) else {
        return;
    };
    let options = GatewayOptions {
        expose: Expose::Both,
        unprefixed: vec!["one".into(), "two".into()],
        ..GatewayOptions::default()
    };
    let (client, _notes, _upstreams, gateway) = setup_with(&python, options).await;
    let conflicts = gateway.name_conflicts().await;
    let add = conflicts
        .iter()
        .find(|c| c.name == "add")
        .unwrap_or_else(|| panic!("add in {conflicts:?}"));
    assert_eq!(
        (add.kind, &add.claimants[..]),
        ("tool", &["one:add".to_owned(), "two:add".to_owned()][..])
    );
    let review = conflicts
        .iter()
        .find(|c| c.kind == "prompt")
        .unwrap_or_else(|| panic!("a prompt in {conflicts:?}"));
    assert_eq!(review.name, "review");
    assert_eq!(review.claimants, ["one:review", "two:review"]);

    // Shared names are not published; calling one is an error naming both.
    let names = tool_names(&client).await;
    assert!(
        !names.iter().any(|n| n == "show_env" || n == "add"),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "run_tool"), "{names:?}");
    let mut params = CallToolRequestParams::new("show_env");
    params.arguments = json!({"name": "PY_UPSTREAM_LABEL"}).as_object().cloned();
    let e = mcp_error(client.call_tool(params).await);
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
    assert!(
        e.message.contains("one:show_env") && e.message.contains("two:show_env"),
        "{e:?}"
    );
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(prompts.is_empty(), "{prompts:?}");
    let e = mcp_error(
        client
            .get_prompt(GetPromptRequestParams::new("review"))
            .await,
    );
    assert!(
        e.message.contains("one") && e.message.contains("two"),
        "{e:?}"
    );
    // run_tool reaches each by id.
    let r = call(
        &client,
        "run_tool",
        json!({"tool_id": "two:show_env", "args": {"name": "PY_UPSTREAM_LABEL"}}),
    )
    .await;
    assert_eq!(r, json!({"result": "two"}));

    // A tool named like a meta-tool, added at run time: the meta-tool
    // keeps the name.
    let mut params = CallToolRequestParams::new("run_tool");
    params.arguments = json!({"tool_id": "one:add_tool", "args": {"name": "run_tool"}})
        .as_object()
        .cloned();
    client.call_tool(params).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while gateway.exec().catalog().get("one:run_tool").is_err() {
        assert!(Instant::now() < deadline, "one:run_tool never imported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let conflicts = gateway.name_conflicts().await;
    assert!(
        conflicts
            .iter()
            .any(|c| c.name == "run_tool" && c.claimants == ["meta-tool", "one:run_tool"]),
        "{conflicts:?}"
    );
    let names = tool_names(&client).await;
    assert_eq!(
        names.iter().filter(|n| *n == "run_tool").count(),
        1,
        "{names:?}"
    );
    client.cancel().await.unwrap();
}

/// A 2026-07-28 client listens for updates of resources
/// (`subscriptions/listen` with `resourceSubscriptions`): the owner is
/// subscribed while the listener is open, its `resources/updated` reaches
/// the listener under the URI the client asked for, and the owner is
/// unsubscribed when the listener ends. A resource no server owns ends the
/// listener with the server's typed error, and leaves nothing subscribed.
#[tokio::test(flavor = "multi_thread")]
async fn a_2026_listener_gets_resource_updates() {
    let Some(python) = toolexec_testkit::deps(
        "a_2026_listener_gets_resource_updates",
        &["TOOLEXEC_PYTHON"],
    )
    .map(|mut v| v.remove(0)) else {
        return;
    };
    let options = GatewayOptions {
        expose: Expose::All,
        ..GatewayOptions::default()
    };
    let (client, _notes, _upstreams, gateway) = setup_with(&python, options).await;
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let modern = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("listener", "1"),
    )
    .with_protocol_version(ProtocolVersion::V_2026_07_28)
    .serve_with_lifecycle(
        client_io,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("server/discover");
    let subscribed = |uris: &[&str]| {
        let mut filter = SubscriptionFilter::new();
        filter.resource_subscriptions = Some(uris.iter().map(|u| u.to_string()).collect());
        filter
    };
    // What a server is subscribed to, once it is so (subscribing and
    // unsubscribing finish after the acknowledgment and the end).
    let until = |tool: &'static str, expected: serde_json::Value| {
        let client = &client;
        async move {
            let deadline = Instant::now() + WAIT;
            loop {
                let now = call(client, tool, json!({})).await;
                if now == expected {
                    return;
                }
                assert!(Instant::now() < deadline, "{now} never became {expected}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    let rewritten = "toolexec://two/test%3A%2F%2Fstatic%2Ftext";
    let mut listener = modern
        .peer()
        .listen(subscribed(&[rewritten]))
        .await
        .unwrap();
    assert_eq!(
        listener.acknowledged().resource_subscriptions,
        Some(vec![rewritten.to_owned()])
    );
    until(
        "two__subscriptions",
        json!({"result": ["test://static/text"]}),
    )
    .await;
    // An update of a resource not listened to is not relayed; one of the
    // listened resource is, under the client's URI.
    call(&client, "two__touch", json!({"uri": "test://two/only"})).await;
    call(&client, "two__touch", json!({"uri": "test://static/text"})).await;
    match tokio::time::timeout(WAIT, listener.next()).await {
        Ok(Ok(Some(ServerNotification::ResourceUpdatedNotification(n)))) => {
            assert_eq!(n.params.uri, rewritten)
        }
        other => panic!("expected resources/updated, got {other:?}"),
    }
    listener.cancel().await.unwrap();
    until("two__subscriptions", json!({"result": []})).await;

    // test://one/only is owned; nothing://here is not: the listener ends
    // with resource-not-found, and `one` is left unsubscribed (it was
    // subscribed first).
    let mut listener = modern
        .peer()
        .listen(subscribed(&["test://one/only", "nothing://here"]))
        .await
        .unwrap();
    match tokio::time::timeout(WAIT, listener.next()).await {
        // -32602: the 2026-07-28 code for an unknown resource (SEP-2164).
        Ok(Err(ServiceError::McpError(e))) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
            assert_eq!(e.data, Some(json!({"uri": "nothing://here"})));
        }
        other => panic!("expected the listener to end with an error, got {other:?}"),
    }
    until("one__subscriptions", json!({"result": []})).await;
    modern.cancel().await.unwrap();
}
