//! What telemetry adds to a validated local call (`math:add`, input and
//! output validated; the same call as the core `run` bench), with the
//! process's telemetry installed (OTLP exporter running, metrics kept) and
//! each executor wired as its variant says:
//!
//! - `off`: nothing wired (a call takes the pipeline's fast path);
//! - `observer`: an observer that does nothing (the pipeline's own cost of
//!   observing a call);
//! - `metrics`: the Prometheus observer;
//! - `spans`: the call tracer (each call's span queued for export);
//! - `spans_and_metrics`: both, as `toolexec serve` wires them.
//!
//! The collector address refuses connections, so spans are dropped and
//! counted after leaving the call; the call's own cost is the same either
//! way.
//!
//! `TELEMETRY_PAIRED=N` also runs N rounds, each timing a slice of calls of
//! every variant in turn, and prints the median per variant and the median
//! of each variant's difference to `off` within a round: on a machine whose
//! speed drifts, criterion's per-variant blocks see different speeds, while
//! a round sees one.

use std::future::Future;
use std::net::TcpListener;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolexec::telemetry::{CallObserver, CallRecord, CallTracer};
use toolexec::{Exec, ToolError};
use toolexec_telemetry::{MetricsOptions, OtlpOptions, Telemetry, TelemetryOptions};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

/// An observer that does nothing.
#[derive(Debug)]
struct Noop;

impl CallObserver for Noop {
    fn call_finished(&self, _call: &CallRecord<'_>) {}
}

fn exec(observer: Option<Arc<dyn CallObserver>>, tracer: Option<&'static dyn CallTracer>) -> Exec {
    let mut builder = Exec::builder();
    if let Some(o) = observer {
        builder = builder.observer(o);
    }
    if let Some(t) = tracer {
        builder = builder.call_tracer(t);
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

fn variants(telemetry: &Telemetry) -> Vec<(&'static str, Exec)> {
    let tracer = telemetry.call_tracer();
    let metrics = telemetry.observer();
    vec![
        ("off", exec(None, None)),
        ("observer", exec(Some(Arc::new(Noop)), None)),
        ("metrics", exec(metrics.clone(), None)),
        ("spans", exec(None, tracer)),
        ("spans_and_metrics", exec(metrics, tracer)),
    ]
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
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
    assert!(telemetry.call_tracer().is_some() && telemetry.observer().is_some());
    let variants = variants(&telemetry);
    let args = json!({"a": 1.5, "b": 2.5});
    let mut group = c.benchmark_group("telemetry");
    for (name, exec) in &variants {
        let out = poll_ready(exec.run_tool("math:add", args.clone())).unwrap();
        assert_eq!(out.value, json!({"sum": 4.0}));
        group.bench_function(*name, |b| {
            b.iter_batched(
                || args.clone(),
                |a| poll_ready(exec.run_tool("math:add", a)),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    if let Some(rounds) = std::env::var("TELEMETRY_PAIRED")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        paired(rounds, &variants, &args);
    }
}

/// `TELEMETRY_PAIRED=N`: see the file's comment.
fn paired(rounds: usize, variants: &[(&'static str, Exec)], args: &Value) {
    const SLICE: u32 = 4000;
    let time = |exec: &Exec| {
        let t = Instant::now();
        for _ in 0..SLICE {
            std::hint::black_box(poll_ready(exec.run_tool("math:add", args.clone())).unwrap());
        }
        t.elapsed().as_nanos() as f64 / f64::from(SLICE)
    };
    // A few rounds to warm caches and the exporter up.
    for _ in 0..10 {
        variants.iter().for_each(|(_, e)| {
            time(e);
        });
    }
    let mut per: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); variants.len()];
    for _ in 0..rounds {
        for (i, (_, exec)) in variants.iter().enumerate() {
            per[i].push(time(exec));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("\n{rounds} rounds of {SLICE} calls per variant");
    println!("| variant | median | min | median above `off` in a round |");
    println!("|---|---|---|---|");
    for (i, (name, _)) in variants.iter().enumerate() {
        let above: Vec<f64> = per[i].iter().zip(&per[0]).map(|(v, o)| v - o).collect();
        let min = per[i].iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "| `{name}` | {:.0} ns | {min:.0} ns | {:+.0} ns |",
            median(per[i].clone()),
            median(above)
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
