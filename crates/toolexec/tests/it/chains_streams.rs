//! Chains and streaming runs.

use std::time::Duration;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolexec::{
    ChainStep, ErrorCode, Exec, RunOptions, RunResult, StreamEvent, StreamRequest, ToolContext,
    ToolError, parse_chain,
};

#[derive(Deserialize, JsonSchema)]
struct Num {
    n: f64,
    #[serde(default)]
    previous: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
struct Count {
    to: u32,
}

fn exec() -> Exec {
    let exec = Exec::builder().build();
    let c = exec.catalog();
    c.tool(
        "m:double",
        "Doubles n (plus previous)",
        |a: Num| async move { Ok::<_, ToolError>(2.0 * a.n + a.previous.unwrap_or(0.0)) },
    )
    .unwrap();
    c.tool("m:fail", "Always fails", |_: Value| async move {
        Err::<Value, _>(ToolError::new("nope"))
    })
    .unwrap();
    c.tool(
        "m:identity",
        "Returns its arguments",
        |v: Value| async move { Ok::<_, ToolError>(v) },
    )
    .unwrap();
    c.tool(
        "m:count",
        "Counts with progress and chunks",
        |a: Count, ctx: ToolContext| async move {
            for i in 1..=a.to {
                ctx.progress(f64::from(i), Some(f64::from(a.to)), Some("counting"));
                ctx.chunk(json!({"i": i})).await;
                tokio::task::yield_now().await;
            }
            Ok::<_, ToolError>(a.to)
        },
    )
    .unwrap();
    c.tool(
        "m:slow",
        "Sleeps until cancelled",
        |_: Value, ctx: ToolContext| async move {
            ctx.cancelled().await;
            Ok::<_, ToolError>("cancelled")
        },
    )
    .unwrap();
    exec
}

#[tokio::test]
async fn use_previous_injects_or_replaces_arguments() {
    let steps = parse_chain(&json!([
        {"tool_id": "m:double", "args": {"n": 1}},
        {"tool_id": "m:double", "args": {"n": 10}, "use_previous": true},
        {"tool_id": "m:identity", "use_previous": true}
    ]))
    .unwrap();
    let r = exec().run_chain(&steps).await.unwrap();
    assert_eq!(r.steps[1].output.as_ref().unwrap().value, json!(22.0));
    // No args: the previous result *is* the arguments; a number is not an
    // object, so the third step fails validation, with the reason.
    assert!(!r.ok);
    assert_eq!(
        r.steps[2].error.as_ref().unwrap().code,
        ErrorCode::ValidationInput
    );
    let steps = parse_chain(&json!([
        {"tool_id": "m:identity", "args": {"k": 1}},
        {"tool_id": "m:identity", "use_previous": true}
    ]))
    .unwrap();
    let r = exec().run_chain(&steps).await.unwrap();
    assert!(r.ok);
    assert_eq!(r.output, Some(json!({"k": 1})));
    assert!(r.steps.iter().all(|s| s.duration_ms >= 0.0 && !s.skipped));
}

#[tokio::test]
async fn stop_on_error_skips_the_rest_and_false_continues() {
    let steps = vec![
        ChainStep::new("m:double", json!({"n": 1})),
        ChainStep::new("m:fail", json!({})),
        ChainStep::new("m:double", json!({"n": 2})),
    ];
    let r = exec().run_chain(&steps).await.unwrap();
    assert!(!r.ok);
    assert_eq!(r.first_error().unwrap().code, ErrorCode::ExecutionFailed);
    assert!(r.steps[2].skipped);
    assert!(r.output.is_none());

    let steps = vec![
        ChainStep::new("m:fail", json!({})).stop_on_error(false),
        ChainStep::new("m:double", json!({"n": 2})),
    ];
    let r = exec().run_chain(&steps).await.unwrap();
    assert!(!r.ok);
    assert!(r.steps[0].error.is_some());
    assert!(!r.steps[1].skipped);
    assert_eq!(r.output, Some(json!(4.0)));
}

#[tokio::test]
async fn use_previous_after_a_failed_step_is_a_clear_error() {
    let steps = vec![
        ChainStep::new("m:fail", json!({})).stop_on_error(false),
        ChainStep::with_previous("m:double", Some(json!({"n": 1}))),
    ];
    let r = exec().run_chain(&steps).await.unwrap();
    let e = r.steps[1].error.as_ref().unwrap();
    assert_eq!(e.code, ErrorCode::ValidationInput);
    assert!(
        e.message.contains("step 0 produced no result"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn malformed_chains_name_the_step_and_field() {
    for (chain, needle) in [
        (json!({"nope": 1}), "steps"),
        (
            json!([{"tool_id": "m:double", "args": {}, "extra": 1}]),
            "steps[0]",
        ),
        (json!([{"tool_id": "m:double"}, {"tool_id": 5}]), "steps[1]"),
    ] {
        let err = parse_chain(&chain).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidRequest);
        assert!(err.to_string().contains(needle), "{err}");
    }
    let err = exec().run_chain(&[]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidRequest);
    let long: Vec<ChainStep> = (0..101)
        .map(|_| ChainStep::new("m:identity", json!({})))
        .collect();
    let err = exec().run_chain(&long).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded);
}

#[tokio::test]
async fn a_tool_streams_progress_and_chunks_then_done() {
    let events: Vec<StreamEvent> = exec()
        .run_stream(
            StreamRequest::Tool {
                id: "m:count".into(),
                args: json!({"to": 3}),
            },
            RunOptions::default(),
        )
        .collect()
        .await;
    let chunks: Vec<&Value> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Chunk { data, .. } => Some(data),
            _ => None,
        })
        .collect();
    assert_eq!(
        chunks,
        [&json!({"i": 1}), &json!({"i": 2}), &json!({"i": 3})]
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Progress { total: Some(t), .. } if *t == 3.0))
    );
    match events.last().unwrap() {
        StreamEvent::Done { result } => {
            assert!(matches!(result.as_ref(), RunResult::Tool(o) if o.value == json!(3)))
        }
        other => panic!("last event {other:?}"),
    }
    let as_json = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(as_json["type"], "done");
}

#[tokio::test]
async fn a_failing_stream_ends_with_error() {
    let events: Vec<StreamEvent> = exec()
        .run_stream(
            StreamRequest::Tool {
                id: "m:nope".into(),
                args: json!({}),
            },
            RunOptions::default(),
        )
        .collect()
        .await;
    assert_eq!(events.len(), 1);
    assert!(
        matches!(&events[0], StreamEvent::Error { error } if error.code == ErrorCode::ToolNotFound)
    );
}

#[tokio::test]
async fn a_chain_streams_step_events() {
    let steps = vec![
        ChainStep::new("m:count", json!({"to": 2})),
        ChainStep::new("m:double", json!({"n": 1})),
    ];
    let events: Vec<StreamEvent> = exec()
        .run_stream(StreamRequest::Chain(steps), RunOptions::default())
        .collect()
        .await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Chunk { step: Some(0), .. }))
    );
    assert!(events.iter().any(
        |e| matches!(e, StreamEvent::Progress { step: Some(1), progress, total: Some(t), .. } if *progress == 2.0 && *t == 2.0)
    ));
    assert!(
        matches!(events.last().unwrap(), StreamEvent::Done { result } if matches!(result.as_ref(), RunResult::Chain(c) if c.ok))
    );
}

#[tokio::test]
async fn dropping_a_stream_cancels_the_run() {
    let exec = exec();
    let token = toolexec::CancellationToken::new();
    let opts = RunOptions {
        timeout: Some(Duration::from_secs(30)),
        cancel: Some(token.clone()),
        ..RunOptions::default()
    };
    let stream = exec.run_stream(
        StreamRequest::Tool {
            id: "m:slow".into(),
            args: json!({}),
        },
        opts,
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!token.is_cancelled());
    drop(stream);
    assert!(token.is_cancelled());
}

/// `run_events` runs on the caller's task: its events are in the channel
/// when it returns, in order, and the result is returned, not sent.
#[tokio::test(flavor = "current_thread")]
async fn run_events_sends_events_and_returns_the_result() {
    let exec = exec();
    let (tx, mut rx) = tokio::sync::mpsc::channel(toolexec::STREAM_BUFFER);
    let request = StreamRequest::Tool {
        id: "m:count".into(),
        args: json!({"to": 3}),
    };
    let out = exec
        .run_events(request, &RunOptions::default(), tx)
        .await
        .unwrap();
    assert!(matches!(out, RunResult::Tool(o) if o.value == json!(3)));
    let mut chunks = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            StreamEvent::Chunk { data, .. } => chunks.push(data),
            StreamEvent::Progress { .. } => {}
            other => panic!("a result sent as an event: {other:?}"),
        }
    }
    assert_eq!(chunks, [json!({"i": 1}), json!({"i": 2}), json!({"i": 3})]);

    // A chain's invalid steps are the error returned, typed.
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let e = exec
        .run_events(StreamRequest::Chain(Vec::new()), &RunOptions::default(), tx)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn dropping_run_events_cancels_the_run() {
    let exec = exec();
    let token = toolexec::CancellationToken::new();
    let opts = RunOptions {
        cancel: Some(token.clone()),
        ..RunOptions::default()
    };
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let request = StreamRequest::Tool {
        id: "m:slow".into(),
        args: json!({}),
    };
    let run = tokio::time::timeout(
        Duration::from_millis(20),
        exec.run_events(request, &opts, tx),
    );
    assert!(
        run.await.is_err(),
        "m:slow returned before it was cancelled"
    );
    assert!(token.is_cancelled());
}

/// What a backend sees of the run's idempotency key: the run's own for a
/// tool, streamed or not; `<key>.<step>` for each step of a chain.
#[tokio::test]
async fn the_idempotency_key_reaches_the_backend() {
    use std::sync::{Arc, Mutex};
    use toolexec::{Backend, BoxFuture, Call, Error, Tool, ToolOutput};

    struct Keys(Arc<Mutex<Vec<Option<String>>>>);
    impl Backend for Keys {
        fn kind(&self) -> &str {
            "keys"
        }
        fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
            let key = call.ctx.idempotency_key().map(str::to_owned);
            self.0.lock().unwrap().push(key);
            Box::pin(async { Ok(ToolOutput::structured(json!({}))) })
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let exec = Exec::builder().build();
    let tool = Tool::builder("k:see")
        .description("Records the key it is called with")
        .input_schema(json!({"type": "object"}))
        .build()
        .unwrap();
    exec.catalog()
        .register(tool, Arc::new(Keys(seen.clone())))
        .unwrap();
    let keyed = RunOptions {
        idempotency_key: Some("order-1".into()),
        ..RunOptions::default()
    };
    exec.run_tool_with("k:see", json!({}), &keyed)
        .await
        .unwrap();
    exec.run_tool("k:see", json!({})).await.unwrap();
    let mut stream = exec.run_stream(
        StreamRequest::Tool {
            id: "k:see".into(),
            args: json!({}),
        },
        keyed.clone(),
    );
    while stream.next_event().await.is_some() {}
    let steps = [
        ChainStep::new("k:see", json!({})),
        ChainStep::new("k:see", json!({})),
    ];
    exec.run_chain_with(&steps, &keyed).await.unwrap();
    let key = |k: &str| Some(k.to_owned());
    assert_eq!(
        *seen.lock().unwrap(),
        [
            key("order-1"),
            None,
            key("order-1"),
            key("order-1.0"),
            key("order-1.1")
        ]
    );
}

/// A caller's answers to a tool's input requests reach the tool it calls
/// (streamed or not), never a chain's steps: they answer one call.
#[tokio::test]
async fn client_input_reaches_the_called_tool_only() {
    use std::sync::{Arc, Mutex};
    use toolexec::{Backend, BoxFuture, Call, ClientInput, Error, Tool, ToolOutput};

    struct Inputs(Arc<Mutex<Vec<Option<ClientInput>>>>);
    impl Backend for Inputs {
        fn kind(&self) -> &str {
            "inputs"
        }
        fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
            self.0
                .lock()
                .unwrap()
                .push(call.ctx.client_input().cloned());
            Box::pin(async { Ok(ToolOutput::structured(json!({}))) })
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let exec = Exec::builder().build();
    let tool = Tool::builder("k:see")
        .description("Records the client input it is called with")
        .input_schema(json!({"type": "object"}))
        .build()
        .unwrap();
    exec.catalog()
        .register(tool, Arc::new(Inputs(seen.clone())))
        .unwrap();
    let input = ClientInput {
        responses: json!({"confirm": {"action": "accept"}})
            .as_object()
            .cloned(),
        state: Some("opaque".into()),
    };
    let answering = RunOptions {
        client_input: Some(input.clone()),
        ..RunOptions::default()
    };
    exec.run_tool_with("k:see", json!({}), &answering)
        .await
        .unwrap();
    let mut stream = exec.run_stream(
        StreamRequest::Tool {
            id: "k:see".into(),
            args: json!({}),
        },
        answering.clone(),
    );
    while stream.next_event().await.is_some() {}
    exec.run_tool("k:see", json!({})).await.unwrap();
    let steps = [
        ChainStep::new("k:see", json!({})),
        ChainStep::new("k:see", json!({})),
    ];
    exec.run_chain_with(&steps, &answering).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [Some(input.clone()), Some(input), None, None, None]
    );
}
