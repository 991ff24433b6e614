//! Long calls as tasks (the MCP Tasks extension, SEP-2663) through the
//! HTTP gateway, driven by rmcp's client: a call that outlasts
//! `TaskOptions::after` is answered with a task that survives the client
//! going away, belongs to its principal, can be cancelled, and ends with
//! the call's result; short calls, and clients without the extension, get
//! plain results.

use crate::support::gateway as support;

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelTaskParams, CancelTaskRequest,
    ClientCapabilities, ClientConfig, ClientRequest, GetTaskParams, GetTaskRequest, Implementation,
    ServerResult, TaskPayload, TaskStatus, UpdateTaskParams, UpdateTaskRequest,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use toolexec_mcp::gateway::{Expose, Gateway, GatewayOptions, HttpAuth, TaskOptions};

type Client = RunningService<RoleClient, ClientConfig>;

/// A client of `principal`, declaring the tasks extension or not.
async fn client(url: &str, principal: &str, tasks: bool) -> Client {
    let transport = support::rmcp_http_transport(
        StreamableHttpClientTransportConfig::with_uri(url)
            .auth_header(format!("{principal}-secret")),
    );
    let caps = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    ClientConfig::new(caps, Implementation::new("tasks-test", "1"))
        .serve(transport)
        .await
        .expect("initialize")
}

async fn send(client: &Client, request: ClientRequest) -> Result<ServerResult, ServiceError> {
    client.peer().send_request(request).await
}

fn call(name: &str, args: Value) -> ClientRequest {
    ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(name.to_owned())
            .with_arguments(args.as_object().unwrap().clone()),
    ))
}

fn get(id: &str) -> ClientRequest {
    ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id)))
}

/// Polls task `id` until it leaves `working`.
async fn settled(client: &Client, id: &str) -> TaskPayload {
    let start = Instant::now();
    loop {
        match send(client, get(id)).await.unwrap() {
            ServerResult::GetTaskResult(r) if r.task.status() == TaskStatus::Working => {}
            ServerResult::GetTaskResult(r) => return r.task.payload,
            other => panic!("{other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "task {id} never settled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn mcp_code(r: Result<ServerResult, ServiceError>) -> i32 {
    match r {
        Err(ServiceError::McpError(e)) => e.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn long_calls_become_tasks_that_outlive_the_connection() {
    let tokens = support::named_tokens(&["alice", "bob"]);
    let gateway = Gateway::new(
        support::demo_exec(),
        GatewayOptions {
            expose: Expose::All,
            tasks: TaskOptions {
                after: Duration::from_millis(200),
                ..TaskOptions::default()
            },
            ..GatewayOptions::default()
        },
    );
    let (addr, shutdown) = support::start_http(gateway, HttpAuth::Tokens(tokens)).await;
    let url = format!("http://{addr}/mcp");

    // The gateway declares the extension.
    let alice = client(&url, "alice", true).await;
    let info = alice.peer().peer_info().unwrap();
    assert!(info.capabilities.supports_tasks(), "{info:?}");

    // A short call is answered as usual.
    match send(&alice, call("math__add", json!({"a": 2, "b": 3})))
        .await
        .unwrap()
    {
        ServerResult::CallToolResult(r) => {
            assert_eq!(r.structured_content, Some(json!({"result": 5.0})))
        }
        other => panic!("{other:?}"),
    }

    // A long one becomes a task; the client goes away.
    let task = match send(&alice, call("demo__sleep", json!({"ms": 1500})))
        .await
        .unwrap()
    {
        ServerResult::CreateTaskResult(r) => r.task,
        other => panic!("{other:?}"),
    };
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.task_id.len(), 32);
    assert!(
        task.poll_interval_ms.is_some() && task.ttl_ms.is_some(),
        "{task:?}"
    );
    alice.cancel().await.unwrap();

    // Another principal cannot see it.
    let bob = client(&url, "bob", true).await;
    assert_eq!(mcp_code(send(&bob, get(&task.task_id)).await), -32602);

    // Alice, on a new connection, gets its result.
    let alice = client(&url, "alice", true).await;
    match settled(&alice, &task.task_id).await {
        TaskPayload::Completed { result } => {
            assert_eq!(
                result["structuredContent"],
                json!({"slept_ms": 1500}),
                "{result:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A task that waits for no input takes none.
    let update = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(UpdateTaskParams::new(
        task.task_id.clone(),
        Default::default(),
    )));
    assert_eq!(mcp_code(send(&alice, update).await), -32602);

    // Cancelled: the tool sees it, the task says so.
    let task = match send(&alice, call("demo__sleep", json!({"ms": 60000})))
        .await
        .unwrap()
    {
        ServerResult::CreateTaskResult(r) => r.task,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        mcp_code(
            send(
                &bob,
                ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(
                    task.task_id.clone()
                )))
            )
            .await
        ),
        -32602,
        "bob cannot cancel alice's task"
    );
    send(
        &alice,
        ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(
            task.task_id.clone(),
        ))),
    )
    .await
    .unwrap();
    assert!(matches!(
        settled(&alice, &task.task_id).await,
        TaskPayload::Cancelled
    ));

    // A call that fails at once is answered as usual; so is an unknown tool.
    let tool_error = match send(&alice, call("demo__sleep", json!({"ms": -1}))).await {
        Ok(ServerResult::CallToolResult(r)) => r.is_error,
        other => panic!("{other:?}"),
    };
    assert_eq!(tool_error, Some(true));
    assert_eq!(
        mcp_code(send(&alice, call("nope__nope", json!({}))).await),
        -32602
    );

    // A client without the extension waits for the result as before.
    let plain = client(&url, "bob", false).await;
    match send(&plain, call("demo__sleep", json!({"ms": 400})))
        .await
        .unwrap()
    {
        ServerResult::CallToolResult(r) => {
            assert_eq!(r.structured_content, Some(json!({"slept_ms": 400})))
        }
        other => panic!("{other:?}"),
    }
    assert_ne!(mcp_code(send(&plain, get(&task.task_id)).await), 0);
    shutdown.cancel();
}
