//! Test catalog: the built-in tools plus local tools that sleep, fail, hang
//! and echo.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolexec::{Exec, LocalTool, ToolError, ToolOutput, raw_handler};
use toolexec_code::{CodeEngine, CodeLimits, CodeOutcome, CodeRequest};

#[derive(Deserialize, JsonSchema)]
pub(crate) struct SleepArgs {
    /// Milliseconds to sleep.
    pub ms: u64,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct FailArgs {
    /// The error message.
    pub message: String,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct NoArgs {}

/// Counts drops of a hanging tool's future (i.e. cancellations).
struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) struct Fixture {
    pub exec: Exec,
    pub engine: CodeEngine,
    /// How many `test:hang` calls were cancelled (their future dropped).
    pub hang_dropped: Arc<AtomicUsize>,
    /// How many `test:count` calls ran.
    pub counted: Arc<AtomicUsize>,
}

pub(crate) fn fixture(max_concurrent: usize) -> Fixture {
    let exec = Exec::new(toolexec_builtins::catalog());
    let c = exec.catalog();
    c.tool(
        "test:sleep",
        "Sleeps for ms milliseconds, then returns {slept: ms}",
        |a: SleepArgs| async move {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            Ok::<_, ToolError>(json!({"slept": a.ms}))
        },
    )
    .unwrap();
    c.tool(
        "test:fail",
        "Always fails with the given message",
        |a: FailArgs| async move {
            Err::<Value, _>(ToolError::new(a.message).with_data(json!({"why": "asked to"})))
        },
    )
    .unwrap();
    let hang_dropped = Arc::new(AtomicUsize::new(0));
    let hd = hang_dropped.clone();
    c.tool("test:hang", "Never finishes", move |_: NoArgs| {
        let guard = DropCounter(hd.clone());
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok::<_, ToolError>(json!(null))
        }
    })
    .unwrap();
    let counted = Arc::new(AtomicUsize::new(0));
    let cn = counted.clone();
    c.tool("test:count", "Counts calls", move |_: NoArgs| {
        let n = cn.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, ToolError>(json!({"n": n})) }
    })
    .unwrap();
    LocalTool::new(
        "test:echo",
        raw_handler(
            |args: Value, _ctx| async move { Ok::<_, ToolError>(ToolOutput::structured(args)) },
        ),
    )
    .description("Returns its arguments")
    .register(c)
    .unwrap();
    LocalTool::new(
        "test:na-me",
        raw_handler(|_args: Value, _ctx| async move {
            Ok::<_, ToolError>(ToolOutput::structured(json!("dashed")))
        }),
    )
    .description("A tool whose name has a dash")
    .register(c)
    .unwrap();
    let engine = CodeEngine::new(exec.clone(), max_concurrent);
    Fixture {
        exec,
        engine,
        hang_dropped,
        counted,
    }
}

pub(crate) fn limits() -> CodeLimits {
    CodeLimits {
        timeout: Duration::from_secs(10),
        ..Default::default()
    }
}

pub(crate) fn quick(ms: u64) -> CodeLimits {
    CodeLimits {
        timeout: Duration::from_millis(ms),
        ..Default::default()
    }
}

impl Fixture {
    pub(crate) async fn run(&self, code: &str, limits: CodeLimits) -> CodeOutcome {
        self.engine
            .execute(CodeRequest {
                code: code.to_owned(),
                limits,
            })
            .await
    }

    /// Runs a trivial script and checks the pool still works normally.
    pub(crate) async fn assert_healthy(&self) {
        let out = self
            .run(
                "const r = await tools.math.add({a: 2, b: 3}); console.log('ok'); \
                 return [r.result, [1, 2].map(x => x * 2), JSON.stringify({a: 1}), typeof tools.run];",
                limits(),
            )
            .await;
        assert!(out.status.is_ok(), "pool unhealthy: {out:#?}");
        assert_eq!(
            out.value,
            Some(json!([5, [2, 4], "{\"a\":1}", "function"])),
            "{out:#?}"
        );
        assert_eq!(out.stdout, "ok\n");
    }
}
