//! The run pipeline end to end: resolution, validation, execution, errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolexec::{
    Availability, Backend, BoxFuture, Call, CancellationToken, Catalog, Content, ErrorCode, Exec,
    Limits, LocalTool, RunOptions, Tool, ToolContext, ToolError, ToolOutput, raw_handler,
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

#[derive(Deserialize, JsonSchema)]
struct Sleep {
    ms: u64,
}

fn exec() -> Exec {
    let exec = Exec::builder().build();
    let c = exec.catalog();
    c.tool("math:add", "Adds two numbers", |a: AddArgs| async move {
        Ok::<_, ToolError>(Sum { sum: a.a + a.b })
    })
    .unwrap();
    c.tool("math:div", "Divides", |a: AddArgs| async move {
        if a.b == 0.0 {
            return Err(ToolError::new("division by zero").with_data(json!({"b": 0})));
        }
        Ok(a.a / a.b)
    })
    .unwrap();
    c.tool("test:panic", "Panics", |_: Value| async move {
        if true {
            panic!("handler exploded");
        }
        Ok::<_, ToolError>(1)
    })
    .unwrap();
    c.tool(
        "test:sleep",
        "Sleeps",
        |s: Sleep, ctx: ToolContext| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(s.ms)) => Ok::<_, ToolError>("slept"),
                _ = ctx.cancelled() => Err(ToolError::new("saw cancellation")),
            }
        },
    )
    .unwrap();
    LocalTool::new("test:liar", |_: Value| async move {
        Ok::<_, ToolError>(json!({"n": "not a number"}))
    })
    .output_schema(json!({"type": "object", "properties": {"n": {"type": "number"}}}))
    .register(c)
    .unwrap();
    exec
}

#[tokio::test]
async fn typed_tool_runs_and_returns_structured_value() {
    let out = exec()
        .run_tool("math:add", json!({"a": 1.5, "b": 2}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"sum": 3.5}));
    assert!(out.content.is_empty());
}

#[tokio::test]
async fn invalid_input_lists_every_violation_with_paths() {
    let err = exec()
        .run_tool("math:add", json!({"a": "one", "c": 3}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ValidationInput);
    let toolexec::Error::ValidationInput(f) = &err else {
        panic!("{err}")
    };
    assert_eq!(f.tool, "math:add");
    let mut got: Vec<(String, String)> = f
        .violations
        .iter()
        .map(|v| (v.instance_path.clone(), v.keyword.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("".to_owned(), "additionalProperties".to_owned()),
            ("".to_owned(), "required".to_owned()),
            ("/a".to_owned(), "type".to_owned()),
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("validation_input: tool math:add: 3 violations"),
        "{msg}"
    );
}

#[tokio::test]
async fn violations_are_capped() {
    let exec = Exec::builder()
        .limits(Limits {
            max_violations: 1,
            ..Limits::default()
        })
        .build();
    exec.catalog()
        .tool("math:add", "Adds", |a: AddArgs| async move {
            Ok::<_, ToolError>(a.a + a.b)
        })
        .unwrap();
    let err = exec
        .run_tool("math:add", json!({"a": "x", "b": "y"}))
        .await
        .unwrap_err();
    let toolexec::Error::ValidationInput(f) = err else {
        panic!()
    };
    assert_eq!(f.violations.len(), 1);
    assert!(f.truncated);
}

#[tokio::test]
async fn non_object_arguments_are_rejected_and_null_means_empty() {
    let exec = exec();
    for bad in [json!([1, 2]), json!("a=1"), json!(3), json!(true)] {
        let err = exec.run_tool("math:add", bad.clone()).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::ValidationInput, "{bad}");
        assert!(err.to_string().contains("must be a JSON object"), "{err}");
    }
    // null is treated as {} (MCP allows omitting arguments): then `required` fails.
    let err = exec.run_tool("math:add", Value::Null).await.unwrap_err();
    assert!(err.to_string().contains("required"), "{err}");
}

#[tokio::test]
async fn ids_are_checked_before_anything_runs() {
    let exec = exec();
    let err = exec.run_tool("math", json!({})).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidToolId);
    let err = exec.run_tool("math:nope", json!({})).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::ToolNotFound);
    assert!(err.to_string().contains("math:nope"));
    let err = exec.run_tool("math:add:9", json!({})).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::ToolNotFound);
}

#[tokio::test]
async fn huge_and_deep_arguments_hit_limits() {
    let exec = Exec::builder()
        .limits(Limits {
            max_input_bytes: 1000,
            max_input_depth: 8,
            ..Limits::default()
        })
        .build();
    exec.catalog()
        .tool("t:echo", "Echoes", |v: Value| async move {
            Ok::<_, ToolError>(v)
        })
        .unwrap();
    let big = json!({"s": "x".repeat(2000)});
    let err = exec.run_tool("t:echo", big).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded);
    assert!(err.to_string().contains("input_bytes"), "{err}");
    let mut deep = json!(1);
    for _ in 0..50 {
        deep = json!({"d": deep});
    }
    let err = exec.run_tool("t:echo", deep).await.unwrap_err();
    assert!(err.to_string().contains("input_depth"), "{err}");
}

#[tokio::test]
async fn output_limits_apply_too() {
    let exec = Exec::builder()
        .limits(Limits {
            max_output_bytes: 100,
            ..Limits::default()
        })
        .build();
    exec.catalog()
        .tool("t:big", "Big", |_: Value| async move {
            Ok::<_, ToolError>("y".repeat(500))
        })
        .unwrap();
    let err = exec.run_tool("t:big", json!({})).await.unwrap_err();
    assert!(err.to_string().contains("output_bytes"), "{err}");
}

#[tokio::test]
async fn tool_failure_is_distinct_from_infrastructure_failure() {
    let err = exec()
        .run_tool("math:div", json!({"a": 1, "b": 0}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionFailed);
    assert!(err.is_tool_error());
    assert!(err.to_string().contains("division by zero"));
    let body = err.to_body();
    assert_eq!(body.details.unwrap()["data"], json!({"b": 0}));
}

#[tokio::test]
async fn output_breaking_its_schema_is_validation_output() {
    let err = exec().run_tool("test:liar", json!({})).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::ValidationOutput);
    assert!(err.to_string().contains("/n"), "{err}");
    // With output validation off the same call succeeds.
    let exec = exec();
    let lax = Exec::builder()
        .catalog(exec.catalog().clone())
        .validate_output(false)
        .build();
    assert!(lax.run_tool("test:liar", json!({})).await.is_ok());
}

#[tokio::test]
async fn a_panicking_handler_fails_one_call_and_the_process_keeps_serving() {
    let exec = exec();
    for _ in 0..3 {
        let err = exec.run_tool("test:panic", json!({})).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::ExecutionFailed);
        assert!(!err.is_tool_error());
        assert!(err.to_string().contains("handler exploded"), "{err}");
        let ok = exec
            .run_tool("math:add", json!({"a": 1, "b": 1}))
            .await
            .unwrap();
        assert_eq!(ok.value, json!({"sum": 2.0}));
    }
}

#[tokio::test]
async fn a_panic_before_the_future_exists_is_caught_too() {
    let exec = Exec::builder().build();
    #[allow(unreachable_code)]
    exec.catalog()
        .tool("t:eager", "Panics while building its future", |_: Value| {
            panic!("eager panic");
            async move { Ok::<_, ToolError>(0) }
        })
        .unwrap();
    let err = exec.run_tool("t:eager", json!({})).await.unwrap_err();
    assert!(err.to_string().contains("eager panic"), "{err}");
}

#[tokio::test]
async fn a_hanging_handler_times_out() {
    let exec = exec();
    let err = exec
        .run_tool_with(
            "test:sleep",
            json!({"ms": 60_000}),
            &RunOptions::timeout(Duration::from_millis(50)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout);
    assert!(err.to_string().contains("50ms"), "{err}");
}

#[tokio::test]
async fn cancellation_stops_the_call() {
    let exec = exec();
    let token = CancellationToken::new();
    let opts = RunOptions {
        timeout: None,
        cancel: Some(token.clone()),
        ..RunOptions::default()
    };
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            token.cancel();
        })
    };
    let err = exec
        .run_tool_with("test:sleep", json!({"ms": 60_000}), &opts)
        .await
        .unwrap_err();
    canceller.await.unwrap();
    // Either the pipeline noticed first (cancelled) or the handler did
    // (it returns a tool error saying so); both stop the call promptly.
    assert!(
        err.code() == ErrorCode::Cancelled || err.to_string().contains("saw cancellation"),
        "{err}"
    );
    // An already-cancelled token never reaches the backend.
    let err = exec
        .run_tool_with("math:add", json!({"a": 1, "b": 2}), &opts)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Cancelled);
}

/// A tool whose first poll is followed at once by the cancellation (as
/// when it lands from another thread between the tool's poll and the
/// pipeline's check): it is polled once more, sees it, and the run ends
/// `cancelled`.
struct CancelledBetweenPolls {
    token: CancellationToken,
    saw: Arc<AtomicUsize>,
}

impl Backend for CancelledBetweenPolls {
    fn kind(&self) -> &str {
        "test"
    }
    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, toolexec::Error>> {
        let mut polls = 0;
        Box::pin(std::future::poll_fn(move |_cx| {
            polls += 1;
            if polls == 1 {
                self.token.cancel();
                return std::task::Poll::Pending;
            }
            if call.ctx.is_cancelled() {
                self.saw.fetch_add(1, Ordering::SeqCst);
            }
            std::task::Poll::Ready(Ok(ToolOutput::default()))
        }))
    }
}

#[tokio::test]
async fn a_tool_sees_a_cancellation_that_lands_between_polls() {
    let token = CancellationToken::new();
    let saw = Arc::new(AtomicUsize::new(0));
    let catalog = Arc::new(Catalog::new());
    catalog
        .register(
            Tool::builder("test:racy").build().unwrap(),
            Arc::new(CancelledBetweenPolls {
                token: token.clone(),
                saw: saw.clone(),
            }),
        )
        .unwrap();
    let opts = RunOptions {
        timeout: None,
        cancel: Some(token),
        ..RunOptions::default()
    };
    let err = Exec::new(catalog)
        .run_tool_with("test:racy", json!({}), &opts)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    assert_eq!(
        saw.load(Ordering::SeqCst),
        1,
        "the tool never saw its cancellation"
    );
}

struct Offline;

impl Backend for Offline {
    fn kind(&self) -> &str {
        "test"
    }
    fn call<'a>(&'a self, _call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, toolexec::Error>> {
        Box::pin(async {
            Err(toolexec::Error::backend_unavailable(
                "test",
                "server is down",
            ))
        })
    }
    fn availability(&self) -> Availability {
        Availability::Unavailable {
            reason: "server is down".into(),
        }
    }
}

#[tokio::test]
async fn custom_backends_plug_in() {
    let exec = Exec::builder().build();
    let tool = Tool::builder("remote:thing")
        .description("Remote")
        .build()
        .unwrap();
    exec.catalog().register(tool, Arc::new(Offline)).unwrap();
    let err = exec.run_tool("remote:thing", json!({})).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable);
    let entry = exec.catalog().get("remote:thing").unwrap();
    assert_eq!(entry.backend().kind(), "test");
    assert!(matches!(
        entry.backend().availability(),
        Availability::Unavailable { .. }
    ));
}

#[tokio::test]
async fn raw_handlers_return_content_that_is_normalized() {
    let exec = Exec::builder().build();
    LocalTool::new(
        "raw:json_text",
        raw_handler(|args: Value, _ctx| async move {
            Ok(ToolOutput::from_content(vec![Content::text(format!(
                "{{\"echo\": {args}}}"
            ))]))
        }),
    )
    .input_schema(json!({"type": "object", "properties": {"x": {"type": "integer"}}}))
    .output_schema(json!({"type": "object", "required": ["echo"]}))
    .register(exec.catalog())
    .unwrap();
    let out = exec
        .run_tool("raw:json_text", json!({"x": 1}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"echo": {"x": 1}}));
    assert_eq!(out.content.len(), 1);
    let err = exec
        .run_tool("raw:json_text", json!({"x": "1"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ValidationInput);
}

#[tokio::test]
async fn versions_resolve_to_the_newest_unless_named() {
    let exec = Exec::builder().build();
    for v in ["1.9", "1.10", "1.2"] {
        let version = v.to_owned();
        LocalTool::new(&format!("svc:ver:{v}"), move |_: Value| {
            let version = version.clone();
            async move { Ok::<_, ToolError>(version) }
        })
        .register(exec.catalog())
        .unwrap();
    }
    let newest = exec.run_tool("svc:ver", json!({})).await.unwrap();
    assert_eq!(newest.value, json!("1.10"));
    let pinned = exec.run_tool("svc:ver:1.2", json!({})).await.unwrap();
    assert_eq!(pinned.value, json!("1.2"));
    exec.catalog().unregister("svc:ver:1.10").unwrap();
    assert_eq!(
        exec.run_tool("svc:ver", json!({})).await.unwrap().value,
        json!("1.9")
    );
}

#[tokio::test]
async fn typed_arguments_that_pass_a_loose_schema_still_fail_cleanly() {
    // Validation off: serde decoding is the last line of defence.
    let exec = Exec::builder().validate_input(false).build();
    exec.catalog()
        .tool("math:add", "Adds", |a: AddArgs| async move {
            Ok::<_, ToolError>(a.a + a.b)
        })
        .unwrap();
    let err = exec
        .run_tool("math:add", json!({"a": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ValidationInput);
    assert!(err.to_string().contains("handler's type"), "{err}");
}

#[tokio::test]
async fn many_concurrent_calls_share_one_exec() {
    let exec = exec();
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let exec = exec.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let out = exec
                .run_tool("math:add", json!({"a": i, "b": 1}))
                .await
                .unwrap();
            assert_eq!(out.value["sum"], json!(f64::from(i) + 1.0));
            done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(done.load(Ordering::Relaxed), 200);
}

#[test]
fn synchronous_tools_run_without_a_tokio_runtime() {
    let exec = exec();
    let out =
        futures::executor::block_on(exec.run_tool("math:add", json!({"a": 1, "b": 2}))).unwrap();
    assert_eq!(out.value, json!({"sum": 3.0}));
    // An asynchronous tool cannot have its deadline enforced: clear error, no panic.
    exec.catalog()
        .tool("test:pending", "Never finishes", |_: Value| async move {
            std::future::pending::<()>().await;
            Ok::<_, ToolError>(())
        })
        .unwrap();
    let err = futures::executor::block_on(exec.run_tool("test:pending", json!({}))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable);
    assert!(err.to_string().contains("Tokio runtime"), "{err}");
}

#[test]
fn catalog_is_usable_without_exec() {
    let c = Catalog::new();
    c.tool("a:b", "B", |v: Value| async move { Ok::<_, ToolError>(v) })
        .unwrap();
    assert_eq!(c.len(), 1);
}
