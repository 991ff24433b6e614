//! The `CallObserver` hook: every call that leaves the pipeline is reported
//! once, with its outcome, backend, arguments when asked for, and the
//! caller, including runs streamed on a task of their own and chain steps.

use std::sync::Arc;

use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use toolexec::telemetry::{CallObserver, CallRecord, Caller, with_caller};
use toolexec::{ChainStep, Exec, StreamRequest, ToolError};

/// What was observed of one call: tool, backend, outcome, arguments, principal.
type Observation = (String, String, String, Option<Value>, Option<String>);

#[derive(Debug, Default)]
struct Seen(Mutex<Vec<Observation>>);

impl CallObserver for Seen {
    fn wants_arguments(&self) -> bool {
        true
    }

    fn call_finished(&self, call: &CallRecord<'_>) {
        self.0.lock().push((
            call.tool.to_owned(),
            call.backend.to_owned(),
            call.error
                .map_or("ok".into(), |e| e.code().as_str().to_owned()),
            call.arguments.cloned(),
            call.caller.and_then(|c| c.principal.clone()),
        ));
    }
}

fn exec(seen: Arc<Seen>) -> Exec {
    let exec = Exec::builder().observer(seen).build();
    exec.catalog()
        .tool("demo:echo", "Echoes", |v: Value| async move {
            Ok::<_, ToolError>(v)
        })
        .unwrap();
    exec
}

#[tokio::test]
async fn every_outcome_is_observed_with_its_caller() {
    let seen = Arc::new(Seen::default());
    let exec = exec(seen.clone());
    let caller = Arc::new(Caller {
        principal: Some("alice".into()),
        ..Caller::default()
    });
    with_caller(caller, async {
        exec.run_tool("demo:echo", json!({"x": 1})).await.unwrap();
        exec.run_tool("demo:nope", json!({})).await.unwrap_err();
        exec.run_tool("demo:echo", json!([1])).await.unwrap_err();
        // A streamed run goes on a task of its own and keeps the caller.
        let mut stream = exec.run_stream(
            StreamRequest::Chain(vec![ChainStep {
                tool_id: "demo:echo".into(),
                args: Some(json!({"y": 2})),
                use_previous: false,
                stop_on_error: true,
            }]),
            Default::default(),
        );
        while stream.next().await.is_some() {}
    })
    .await;
    let seen = seen.0.lock().clone();
    let alice = Some("alice".to_owned());
    assert_eq!(
        seen,
        vec![
            (
                "demo:echo".into(),
                "local".into(),
                "ok".into(),
                Some(json!({"x": 1})),
                alice.clone()
            ),
            (
                "unknown".into(), // an unresolved id is never reported as sent
                "none".into(),
                "tool_not_found".into(),
                None,
                alice.clone()
            ),
            (
                "demo:echo".into(),
                "local".into(),
                "validation_input".into(),
                None,
                alice.clone()
            ),
            (
                "demo:echo".into(),
                "local".into(),
                "ok".into(),
                Some(json!({"y": 2})),
                alice
            ),
        ]
    );
}
