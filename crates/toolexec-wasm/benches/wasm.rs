//! WASM runtime benchmarks.
//!
//! Run: `CARGO_TARGET_DIR=/work/targets/wasm cargo bench -p toolexec-wasm --bench wasm -- --warm-up-time 1 --measurement-time 3`.
//!
//! - `instantiate/pooled_cached`: instantiating a small cached module from
//!   the pooling allocator in a fresh store (WASI context, limiter, fuel,
//!   epoch deadline), without running it.
//! - `run/trivial`: a trivial unit start to result through
//!   `WasmRuntime::run` (cache lookup, pool slot, store, instantiation,
//!   entry call, outcome).
//! - `tool_call/*`: 1,000 sequential `math:add` calls from WASM, the same
//!   loop without the calls, and 1,000 `Exec::run_tool` calls from Rust.
//!   The per-call overhead of the WASM import above the tool is
//!   `(wasm_1000 - wasm_empty_loop - rust_1000) / 1000`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolexec::{CancellationToken, Exec};
use toolexec_runtime::{
    Profile, RunContext, RunRequest, Runtime, RuntimeLimits, ToolHost, Unit, WasmCode, WasmUnit,
};
use toolexec_wasm::{WasmConfig, WasmRuntime};

const TRIVIAL: &str = r#"(module
  (import "toolexec" "output" (func $output (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "42")
  (func (export "run") (call $output (i32.const 0) (i32.const 2))))"#;

fn calls(n: u32, with_call: bool) -> String {
    let call = if with_call {
        "(drop (call $call (i32.const 0) (i32.const 8) (i32.const 16) (i32.const 13)))"
    } else {
        ""
    };
    format!(
        r#"(module
  (import "toolexec" "call" (func $call (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "math:add")
  (data (i32.const 16) "{{\"a\":1,\"b\":2}}")
  (func (export "run") (local $i i32)
    (loop $l {call}
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const {n}))))))"#
    )
}

fn unit(text: &str) -> Unit {
    Unit::Wasm(WasmUnit {
        code: WasmCode::Wat(text.into()),
        entry: None,
        input: None,
        args: Vec::new(),
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wasm = WasmRuntime::new(WasmConfig::default());
    let exec = Exec::new(toolexec_testkit::catalog());
    let limits = RuntimeLimits {
        max_tool_calls: 10_000,
        ..RuntimeLimits::default()
    };
    let run = |text: &str| {
        let host = ToolHost::new(exec.clone(), &limits, CancellationToken::new());
        let request = RunRequest::new(unit(text), Profile::Hardened).with_limits(limits.clone());
        let outcome = rt.block_on(wasm.run(
            request,
            RunContext {
                host,
                cancel: CancellationToken::new(),
                output: None,
            },
        ));
        assert!(outcome.is_ok(), "{outcome:?}");
        outcome
    };

    let code = WasmCode::Wat(TRIVIAL.into());
    rt.block_on(wasm.precompile(&code)).unwrap();
    c.bench_function("instantiate/pooled_cached", |b| {
        b.iter(|| rt.block_on(wasm.instantiate(black_box(&code))).unwrap())
    });
    c.bench_function("run/trivial", |b| b.iter(|| black_box(run(TRIVIAL))));

    let with_calls = calls(1000, true);
    let empty = calls(1000, false);
    run(&with_calls);
    let mut group = c.benchmark_group("tool_call");
    group.sample_size(20);
    group.bench_function("wasm_1000", |b| b.iter(|| black_box(run(&with_calls))));
    group.bench_function("wasm_empty_loop", |b| b.iter(|| black_box(run(&empty))));
    group.bench_function("rust_1000", |b| {
        b.iter(|| {
            rt.block_on(async {
                for _ in 0..1000 {
                    black_box(
                        exec.run_tool("math:add", json!({"a": 1, "b": 2}))
                            .await
                            .unwrap(),
                    );
                }
            })
        })
    });
    group.finish();

    // Not timed by criterion: how long one CPU-second of fuel lasts on an
    // arithmetic loop (the calibration of `fuel_per_cpu_second`).
    let spin = r#"(module (memory (export "memory") 1)
      (func (export "run") (local $i i32) (local $x i32)
        (loop $l
          (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 31)) (local.get $i)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $l))))"#;
    let spin_limits = RuntimeLimits {
        wall_time: std::time::Duration::from_secs(60),
        cpu_time: Some(std::time::Duration::from_secs(1)),
        ..RuntimeLimits::default()
    };
    let host = ToolHost::without_tools(&spin_limits);
    let request = RunRequest::new(unit(spin), Profile::Hardened).with_limits(spin_limits);
    let started = std::time::Instant::now();
    let outcome = rt.block_on(wasm.run(
        request,
        RunContext {
            host,
            cancel: CancellationToken::new(),
            output: None,
        },
    ));
    println!(
        "fuel calibration: cpu_time 1 s of fuel ran out after {:.3} s ({})",
        started.elapsed().as_secs_f64(),
        outcome.status.as_str()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
