//! Code mode benchmarks (issue #4).
//!
//! Run: `cargo bench -p toolexec-code --bench code -- --warm-up-time 1 --measurement-time 3`.
//!
//! - `cold_start/*`: one execution of a trivial script, end to end through
//!   `CodeEngine::execute` (queue, worker hand-off, a fresh QuickJS runtime
//!   and context, globals, compile, run, teardown, reply).
//! - `tool_call/*`: scripts making 1,000 sequential calls of `math:add`, an
//!   empty 1,000-iteration loop, and the same 1,000 calls made from Rust with
//!   `Exec::run_tool`; the per-call overhead of a JS call above the tool is
//!   `(js_1000 - js_empty_loop - rust_1000) / 1000`.
//! - `concurrent/*`: 1,000 executions started at once, each making 10 tool
//!   calls (a synchronous built-in, or a local tool that yields to the
//!   runtime once so every call takes the cross-thread path).
//! - The memory of an idle execution context is printed (not timed):
//!   bytes held by the QuickJS allocator, and resident-set growth, averaged
//!   over 200 contexts alive at once.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolexec::{Exec, ToolError};
use toolexec_code::{CodeEngine, CodeLimits, CodeRequest, CodeStatus};

#[derive(Deserialize, JsonSchema)]
struct YieldArgs {
    /// Any number.
    n: f64,
}

fn exec() -> Exec {
    let exec = Exec::new(toolexec_builtins::catalog());
    exec.catalog()
        .tool(
            "bench:yield",
            "Yields to the runtime once, then returns n",
            |a: YieldArgs| async move {
                tokio::task::yield_now().await;
                Ok::<_, ToolError>(json!({"n": a.n}))
            },
        )
        .unwrap();
    exec
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn req(code: &str) -> CodeRequest {
    CodeRequest {
        code: code.to_owned(),
        limits: CodeLimits {
            timeout: Duration::from_secs(120),
            ..Default::default()
        },
    }
}

fn cold_start(c: &mut Criterion) {
    let rt = runtime();
    let engine = CodeEngine::new(exec(), 4);
    let mut g = c.benchmark_group("cold_start");
    g.bench_function("return_1", |b| {
        b.iter(|| {
            let out = rt.block_on(engine.execute(req("return 1")));
            assert_eq!(out.status, CodeStatus::Ok);
            black_box(out)
        })
    });
    g.bench_function("one_tool_call", |b| {
        b.iter(|| {
            let out = rt.block_on(
                engine.execute(req("return (await tools.math.add({a: 1, b: 2})).result")),
            );
            assert_eq!(out.status, CodeStatus::Ok);
            black_box(out)
        })
    });
    g.finish();
}

fn tool_call(c: &mut Criterion) {
    let rt = runtime();
    let exec = exec();
    let engine = CodeEngine::new(exec.clone(), 4);
    let mut g = c.benchmark_group("tool_call");
    g.sample_size(30);
    let check = |code: &str, calls: usize| {
        let out = rt.block_on(engine.execute(CodeRequest {
            limits: CodeLimits {
                max_tool_calls: 10_000,
                max_output_bytes: 64 << 20,
                timeout: Duration::from_secs(120),
                ..Default::default()
            },
            code: code.to_owned(),
        }));
        assert_eq!(out.status, CodeStatus::Ok, "{out:?}");
        assert_eq!(out.tool_calls.len(), calls);
        out
    };
    let js_1000 = "let s = 0; for (let i = 0; i < 1000; i++) s += (await tools.math.add({a: i, b: 1})).result; return s";
    let js_1000_run = "let s = 0; for (let i = 0; i < 1000; i++) s += (await tools.run('math:add', {a: i, b: 1})).result; return s";
    let js_1000_all = "const rs = await Promise.all(Array.from({length: 1000}, (_, i) => tools.math.add({a: i, b: 1}))); return rs.length";
    let js_empty = "let s = 0; for (let i = 0; i < 1000; i++) s += (await Promise.resolve({result: i + 1})).result; return s";
    g.bench_function("js_1000_sequential_proxy", |b| {
        b.iter(|| check(js_1000, 1000))
    });
    g.bench_function("js_1000_sequential_run", |b| {
        b.iter(|| check(js_1000_run, 1000))
    });
    g.bench_function("js_1000_promise_all", |b| {
        b.iter(|| check(js_1000_all, 1000))
    });
    g.bench_function("js_empty_loop_1000_awaits", |b| {
        b.iter(|| check(js_empty, 0))
    });
    g.bench_function("rust_1000_run_tool", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut s = 0.0;
                for i in 0..1000 {
                    let out = exec
                        .run_tool("math:add", json!({"a": i, "b": 1}))
                        .await
                        .unwrap();
                    s += out.value["result"].as_f64().unwrap();
                }
                black_box(s)
            })
        })
    });
    g.finish();
}

fn concurrent(c: &mut Criterion) {
    let rt = runtime();
    let exec = exec();
    let mut g = c.benchmark_group("concurrent");
    g.sample_size(10);
    let sync_code = "let s = 0; for (let i = 0; i < 10; i++) s += (await tools.math.add({a: i, b: 1})).result; return s";
    let async_code = "let s = 0; for (let i = 0; i < 10; i++) s += (await tools.bench.yield({n: i})).n; return s";
    for pool in [64, 256] {
        let engine = CodeEngine::new(exec.clone(), pool);
        for (name, code, want) in [("sync_tool", sync_code, 55), ("async_tool", async_code, 45)] {
            g.bench_function(format!("1000x10_calls_{name}_pool{pool}"), |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let tasks: Vec<_> = (0..1000)
                            .map(|_| {
                                let e = engine.clone();
                                tokio::spawn(async move { e.execute(req(code)).await })
                            })
                            .collect();
                        for t in tasks {
                            let out = t.await.unwrap();
                            assert_eq!(out.status, CodeStatus::Ok, "{out:?}");
                            assert_eq!(out.value, Some(json!(want)));
                            assert_eq!(out.tool_calls.len(), 10);
                        }
                    })
                })
            });
        }
    }
    g.finish();
}

fn idle_memory(_c: &mut Criterion) {
    let exec = exec();
    let n = 200;
    let started = Instant::now();
    let (heap, rss) = toolexec_code::bench_support::idle_context_bytes(&exec, n);
    eprintln!(
        "idle execution context: {heap} bytes in the QuickJS allocator, {rss} bytes of RSS growth \
         (average of {n} alive at once; built in {:?})",
        started.elapsed()
    );
}

criterion_group!(benches, idle_memory, cold_start, tool_call, concurrent);
criterion_main!(benches);
