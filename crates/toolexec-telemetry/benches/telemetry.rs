//! What telemetry adds to a validated local call (`math:add`, input and
//! output validated; the same call as the core `run` bench): off (no
//! subscriber, no observer), an observer that does nothing (the pipeline's
//! own cost of observing), metrics only (the observer), then with the
//! OTLP exporter running, spans alone and spans plus metrics (the
//! collector address refuses connections, so spans are dropped and
//! counted after leaving the call; the call's own cost is the same either
//! way). The groups run in that order because the subscriber is
//! process-wide and cannot be removed.

use std::future::Future;
use std::net::TcpListener;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::telemetry::CallObserver;
use toolexec::{Exec, ToolError};
use toolexec_telemetry::{Metrics, MetricsOptions, OtlpOptions, Telemetry, TelemetryOptions};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

/// An observer that does nothing: what observing a call costs the pipeline.
#[derive(Debug)]
struct Noop;

impl CallObserver for Noop {
    fn call_finished(&self, _call: &toolexec::telemetry::CallRecord<'_>) {}
}

fn exec(observer: Option<Arc<dyn CallObserver>>) -> Exec {
    let mut builder = Exec::builder();
    if let Some(o) = observer {
        builder = builder.observer(o);
    }
    let exec = builder.build();
    exec.catalog()
        .tool("math:add", "Adds two numbers", |a: AddArgs| async move {
            Ok::<_, ToolError>(Sum { sum: a.a + a.b })
        })
        .unwrap();
    exec
}

fn poll_ready<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("local tool did not complete on first poll"),
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let args = json!({"a": 1.5, "b": 2.5});
    let mut group = c.benchmark_group("telemetry");
    let mut run = |name: &str, exec: &Exec| {
        let out = poll_ready(exec.run_tool("math:add", args.clone())).unwrap();
        assert_eq!(out.value, json!({"sum": 4.0}));
        group.bench_function(name, |b| {
            b.iter_batched(
                || args.clone(),
                |a| poll_ready(exec.run_tool("math:add", a)),
                BatchSize::SmallInput,
            )
        });
    };
    run("off", &exec(None));
    run("observer", &exec(Some(Arc::new(Noop))));
    let metrics: Arc<dyn CallObserver> = Arc::new(Metrics::new(MetricsOptions::default()));
    run("metrics", &exec(Some(metrics)));
    // A port nothing listens on: the exporter runs and fails fast.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let telemetry = Telemetry::install(TelemetryOptions {
        otlp: Some(OtlpOptions::new(format!("http://127.0.0.1:{port}"))),
        metrics: Some(MetricsOptions::default()),
        ..TelemetryOptions::default()
    })
    .unwrap();
    run("spans", &exec(None));
    run("spans_and_metrics", &exec(telemetry.observer()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
