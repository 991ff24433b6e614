// Shared body of the `run` and `run_mimalloc` benchmarks.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::{Exec, ToolError};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

fn exec(validate: bool) -> Exec {
    let exec = Exec::builder()
        .validate_input(validate)
        .validate_output(validate)
        .build();
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

fn bench_run_tool(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let args = json!({"a": 1.5, "b": 2.5});
    let mut group = c.benchmark_group("run_tool");
    for (name, validate) in [("validated", true), ("unvalidated", false)] {
        let exec = exec(validate);
        // Sanity: the benchmark measures successful calls.
        let out = poll_ready(exec.run_tool("math:add", args.clone())).unwrap();
        assert_eq!(out.value, json!({"sum": 4.0}));
        group.bench_function(name, |b| {
            b.iter_batched(
                || args.clone(),
                |a| poll_ready(exec.run_tool("math:add", a)),
                BatchSize::SmallInput,
            )
        });
        group.bench_function(format!("{name}_tokio_block_on"), |b| {
            b.iter_batched(
                || args.clone(),
                |a| rt.block_on(exec.run_tool("math:add", a)),
                BatchSize::SmallInput,
            )
        });
    }
    // Floor: what the harness plus dropping the argument map alone costs.
    group.bench_function("baseline_drop_args", |b| {
        b.iter_batched(|| args.clone(), drop, BatchSize::SmallInput)
    });
    // Floor: decode the arguments and encode the result, nothing else.
    group.bench_function("baseline_serde_only", |b| {
        b.iter_batched(
            || args.clone(),
            |a| {
                let a: AddArgs = serde_json::from_value(a).unwrap();
                serde_json::to_value(Sum { sum: a.a + a.b }).unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    // The failure path: invalid input with violation details collected.
    let exec = exec(true);
    let bad = json!({"a": "x", "b": 2});
    group.bench_function("invalid_input_error", |b| {
        b.iter_batched(
            || bad.clone(),
            |a| poll_ready(exec.run_tool("math:add", a)),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_run_tool);
criterion_main!(benches);
