//! Hostile tests of code mode against the real engine (no mocks): every
//! script ends with the right outcome, and the pool stays healthy after it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;
use toolexec::ErrorCode;
use toolexec_code::{CodeLimit, CodeLimits, CodeStatus, ExecCodeExt};

fn limit_of(out: &toolexec_code::CodeOutcome) -> Option<CodeLimit> {
    out.status.limit()
}

#[track_caller]
fn assert_limit(out: &toolexec_code::CodeOutcome, limit: CodeLimit) {
    assert_eq!(limit_of(out), Some(limit), "{out:#?}");
    assert!(out.value.is_none(), "{out:#?}");
}

#[track_caller]
fn exception_message(out: &toolexec_code::CodeOutcome) -> String {
    match &out.status {
        CodeStatus::Exception { message, .. } => message.clone(),
        other => panic!("expected an exception, got {other:#?}"),
    }
}

// ---------------------------------------------------------------- results

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_values_become_json() {
    let f = fixture(4);
    let cases = [
        ("return 1 + 1", json!(2)),
        // Work left running in the background does not hold up the result.
        (
            "(async () => { for (;;) await null; })(); return 'done'",
            json!("done"),
        ),
        (
            "tools.test.hang(); return 'not awaited'",
            json!("not awaited"),
        ),
        ("return", json!(null)),
        ("1 + 1", json!(null)), // no return: undefined → null
        (
            "return {a: [1, 'x', true, null], b: undefined, c: NaN}",
            json!({"a": [1, "x", true, null], "c": null}),
        ),
        ("return 'héllo'", json!("héllo")),
        ("const x = await 5; return x * 2", json!(10)),
        ("return await Promise.resolve([1, 2, 3])", json!([1, 2, 3])),
    ];
    for (code, want) in cases {
        let out = f.run(code, limits()).await;
        assert_eq!(out.status, CodeStatus::Ok, "{code}: {out:#?}");
        assert_eq!(out.value, Some(want), "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_results_are_clear_errors() {
    let f = fixture(2);
    let out = f.run("return function foo() {}", limits()).await;
    let m = exception_message(&out);
    assert!(
        m.contains("returned a function") && m.contains("not JSON-serializable"),
        "{m}"
    );
    let out = f.run("return Symbol('s')", limits()).await;
    assert!(exception_message(&out).contains("symbol"));
    let out = f.run("return 10n", limits()).await;
    let m = exception_message(&out);
    assert!(
        m.contains("not JSON-serializable") && m.contains("BigInt"),
        "{m}"
    );
    let out = f.run("const a = {}; a.self = a; return a", limits()).await;
    let m = exception_message(&out);
    assert!(
        m.contains("not JSON-serializable") && m.contains("circular"),
        "{m}"
    );
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realistic_multi_tool_script_over_builtins() {
    let f = fixture(2);
    let code = r#"
        // Discover, then use several namespaces; mix sequential and parallel calls.
        const found = await tools.search("square root of a number", 3);
        console.log("found", found.map(m => m.id));
        const doc = await tools.describe("math:stats");
        const prices = [12.5, 3, 40, 7.25];
        const [stats, upper, digest] = await Promise.all([
            tools.math.stats({values: prices}),
            tools.text.case({text: "order summary", to: "upper"}),
            tools.hash.sha256({text: "order-42"}),
        ]);
        const expensive = await tools.json.query({
            data: {items: prices.map((p, i) => ({id: i, price: p}))},
            filter: "[.items[] | select(.price > 10) | .id]",
        });
        const encoded = await tools.run("encoding:base64_encode", {text: upper.text});
        let rejected = null;
        try {
            await tools.math.sqrt({value: "sixteen"});
        } catch (e) {
            rejected = {code: e.code, name: e.name, tool: e.toolId, index: e.callIndex};
        }
        console.warn("done with", stats.count, "prices");
        return {
            firstHit: found[0].id,
            statsHasSchema: typeof doc.input_schema === "object",
            mean: stats.mean,
            title: upper.text,
            digestLength: digest.hex.length,
            expensive: expensive.results[0],
            encoded: encoded.base64,
            rejected,
        };
    "#;
    let out = f.run(code, limits()).await;
    assert_eq!(out.status, CodeStatus::Ok, "{out:#?}");
    let v = out.value.clone().unwrap();
    assert_eq!(v["firstHit"], "math:sqrt", "{v}");
    assert_eq!(v["statsHasSchema"], true);
    assert_eq!(v["mean"], json!(15.6875));
    assert_eq!(v["title"], "ORDER SUMMARY");
    assert_eq!(v["digestLength"], 64);
    assert_eq!(v["expensive"], json!([0, 2]));
    assert_eq!(v["encoded"], "T1JERVIgU1VNTUFSWQ==");
    assert_eq!(
        v["rejected"],
        json!({"code": "validation_input", "name": "ToolError", "tool": "math:sqrt", "index": 5})
    );
    // The log is in call order (search and describe are not tool calls),
    // with the failed call recorded.
    let ids: Vec<&str> = out.tool_calls.iter().map(|c| c.tool_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "math:stats",
            "text:case",
            "hash:sha256",
            "json:query",
            "encoding:base64_encode",
            "math:sqrt"
        ]
    );
    assert!(
        out.tool_calls[..5]
            .iter()
            .all(|c| c.ok && c.error.is_none())
    );
    let bad = &out.tool_calls[5];
    assert!(!bad.ok && bad.result.is_none());
    assert_eq!(bad.error.as_ref().unwrap().code, ErrorCode::ValidationInput);
    assert_eq!(bad.args.preview.as_deref(), Some(r#"{"value":"sixteen"}"#));
    assert!(
        out.stdout.starts_with("found [\"math:sqrt\""),
        "{}",
        out.stdout
    );
    assert_eq!(out.stderr, "done with 4 prices\n");
    assert!(out.duration_ms > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_proxies_and_odd_names() {
    let f = fixture(2);
    let out = f
        .run(
            r#"return [
                await tools.test["na-me"](),
                await tools["test"]["na-me"]({}),
                await tools.run("test:na-me"),
                (await tools.test.echo({deep: {x: [1, 2]}})).deep.x[1],
                typeof tools.math.then,
                typeof tools.then,
            ]"#,
            limits(),
        )
        .await;
    assert_eq!(
        out.value,
        Some(json!([
            "dashed",
            "dashed",
            "dashed",
            2,
            "undefined",
            "undefined"
        ])),
        "{out:#?}"
    );
    // Awaiting a namespace does not call a tool named `then`.
    let out = f
        .run("const ns = await tools.math; return typeof ns", limits())
        .await;
    assert_eq!(out.value, Some(json!("object")), "{out:#?}");
    assert!(out.tool_calls.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_is_captured_and_formatted() {
    let f = fixture(2);
    let out = f
        .run(
            r#"
            console.log("a", 1, true, null, undefined, {x: [1, "y"]}, [1, 2]);
            console.info("info");
            console.debug(Symbol("s"), function named() {}, 10n);
            console.warn("careful", new TypeError("bad type"));
            console.error({nested: {deep: 1}});
            const cyc = {}; cyc.self = cyc;
            console.log(cyc);
            "#,
            limits(),
        )
        .await;
    assert!(out.status.is_ok(), "{out:#?}");
    assert_eq!(
        out.stdout,
        "a 1 true null undefined {\"x\":[1,\"y\"]} [1,2]\ninfo\nSymbol(s) [Function: named] 10\n\
         [object: not JSON-serializable: circular reference]\n"
    );
    assert_eq!(
        out.stderr,
        "careful TypeError: bad type\n{\"nested\":{\"deep\":1}}\n"
    );
}

// ------------------------------------------------------------ concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise_all_runs_tool_calls_concurrently() {
    let f = fixture(2);
    let started = Instant::now();
    let out = f
        .run(
            r#"
            const t0 = Date.now();
            const rs = await Promise.all([300, 300, 300, 300, 300].map(ms => tools.test.sleep({ms})));
            return {slept: rs.map(r => r.slept), elapsed: Date.now() - t0};
            "#,
            limits(),
        )
        .await;
    let wall = started.elapsed();
    assert!(out.status.is_ok(), "{out:#?}");
    let v = out.value.unwrap();
    assert_eq!(v["slept"], json!([300, 300, 300, 300, 300]));
    // Sequential would be 1.5 s; concurrent is ~0.3 s.
    assert!(v["elapsed"].as_f64().unwrap() < 900.0, "{v}");
    assert!(wall < Duration::from_millis(900), "{wall:?}");
    assert_eq!(out.tool_calls.len(), 5);
    for c in &out.tool_calls {
        assert!(c.ok && c.duration_ms >= 290.0, "{c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_executions() {
    let f = fixture(16);
    let engine = f.engine.clone();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let code = format!(
                    "let s = 0; for (let k = 0; k < 5; k++) {{ s += (await tools.math.add({{a: {i}, b: k}})).result; }} \
                     const slow = await tools.test.sleep({{ms: 5}}); return s + slow.slept"
                );
                engine
                    .execute(toolexec_code::CodeRequest::new(code))
                    .await
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let out = t.await.unwrap();
        assert!(out.status.is_ok(), "{i}: {out:#?}");
        assert_eq!(out.value, Some(json!(5 * i + 10 + 5)), "{i}");
        assert_eq!(out.tool_calls.len(), 6);
    }
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_scripts_do_not_starve_others() {
    let f = fixture(4);
    // Two workers spin for 3 s; the other two keep serving.
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let e = f.engine.clone();
            tokio::spawn(async move {
                e.execute(toolexec_code::CodeRequest::new("for (;;) {}").with_limits(quick(3000)))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    for _ in 0..20 {
        let out = f
            .run(
                "return (await tools.math.multiply({a: 6, b: 7})).result",
                limits(),
            )
            .await;
        assert_eq!(out.value, Some(json!(42)), "{out:#?}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    for s in spinners {
        assert_limit(&s.await.unwrap(), CodeLimit::Timeout);
    }
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_future_stops_the_script_and_frees_the_worker() {
    let f = fixture(1);
    let r = tokio::time::timeout(
        Duration::from_millis(200),
        f.run("while (true) {}", quick(60_000)),
    )
    .await;
    assert!(r.is_err(), "should still be running");
    // The single worker is free again well before the 60 s deadline.
    let started = Instant::now();
    f.assert_healthy().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_wait_counts_toward_the_timeout() {
    let f = fixture(1);
    let e = f.engine.clone();
    let hog = tokio::spawn(async move {
        e.execute(toolexec_code::CodeRequest::new("for (;;) {}").with_limits(quick(1500)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let out = f.run("return 1", quick(300)).await;
    assert_limit(&out, CodeLimit::Timeout);
    match &out.status {
        CodeStatus::LimitExceeded { message, .. } => {
            assert!(message.contains("no worker"), "{message}")
        }
        _ => unreachable!(),
    }
    assert_limit(&hog.await.unwrap(), CodeLimit::Timeout);
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_queue_is_bounded() {
    let f = fixture(1);
    let e = f.engine.clone();
    let hog = tokio::spawn(async move {
        e.execute(toolexec_code::CodeRequest::new("for (;;) {}").with_limits(quick(2000)))
            .await
    });
    let max = toolexec_code::MAX_QUEUED_PER_WORKER;
    let waiters: Vec<_> = (0..max)
        .map(|_| {
            let e = f.engine.clone();
            tokio::spawn(
                async move { e.execute(toolexec_code::CodeRequest::new("return 1")).await },
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.engine.stats().queued < max {
        assert!(Instant::now() < deadline, "{:?}", f.engine.stats());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // One more is refused at once, with its own limit.
    let started = Instant::now();
    let out = f.run("return 1", limits()).await;
    assert_limit(&out, CodeLimit::Workers);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        out.status
            .failure_text(None)
            .unwrap()
            .contains("already waiting"),
        "{out:?}"
    );
    // The queued ones all run once the hog is stopped.
    assert_limit(&hog.await.unwrap(), CodeLimit::Timeout);
    for w in waiters {
        assert_eq!(w.await.unwrap().value, Some(json!(1)));
    }
    assert_eq!(f.engine.stats().queued, 0);
}

// ------------------------------------------------------------ wall time

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loops_are_stopped_even_when_they_swallow_the_interrupt() {
    let f = fixture(2);
    let scripts = [
        "while (true) {}",
        "for (;;) { try { for (;;) {} } catch (e) { /* swallow */ } }",
        "for (;;) { try { for (;;) {} } finally { continue; } }",
        "while (true) { try { while (true) {} } catch { try { while (true) {} } finally { while (true) {} } } }",
        "await null; for (;;) { try { for (;;) {} } catch (e) {} }",
        "for (;;) { await null; }", // a microtask loop, not a CPU loop inside one job
        "const spin = async () => { for (;;) { try { await Promise.resolve(); } catch {} } }; await Promise.all([spin(), spin()]);",
        "function f() { try { return f(); } catch (e) { return f(); } } f(); for(;;){}",
        "JSON.parse('[' + '1,'.repeat(1e6) + '1]').sort(() => { for (;;) {} })",
        "/(a+)+$/.test('a'.repeat(40) + 'b')", // catastrophic backtracking
        "await tools.math.add({a: 1, b: 2}); while (true) { try { await tools.math.add({a: 1, b: 2}) } catch {} for (;;) {} }",
    ];
    for code in scripts {
        let started = Instant::now();
        let out = f.run(code, quick(300)).await;
        let took = started.elapsed();
        assert_limit(&out, CodeLimit::Timeout);
        assert!(took < Duration::from_millis(1500), "{code}: took {took:?}");
        f.assert_healthy().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaiting_a_slow_tool_times_out_and_cancels_it() {
    let f = fixture(2);
    let started = Instant::now();
    let out = f
        .run(
            "console.log('before'); await tools.math.add({a: 1, b: 1}); await tools.test.hang(); return 'never'",
            quick(300),
        )
        .await;
    assert_limit(&out, CodeLimit::Timeout);
    assert!(started.elapsed() < Duration::from_millis(1500));
    // The log and output so far are kept; the hanging call is marked cancelled.
    assert_eq!(out.stdout, "before\n");
    assert_eq!(out.tool_calls.len(), 2);
    assert!(out.tool_calls[0].ok);
    let hang = &out.tool_calls[1];
    assert_eq!(hang.error.as_ref().unwrap().code, ErrorCode::Cancelled);
    // And the tool's future was actually dropped (cancelled) on the runtime.
    let deadline = Instant::now() + Duration::from_secs(2);
    while f.hang_dropped.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(f.hang_dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promises_that_can_never_settle_end_as_timeouts_immediately() {
    let f = fixture(2);
    for code in [
        "await new Promise(() => {})",
        "let resolve; const p = new Promise(r => { resolve = r; }); await p; return 1",
        "await Promise.all([tools.math.add({a: 1, b: 2}), new Promise(() => {})])",
    ] {
        let started = Instant::now();
        let out = f.run(code, quick(5_000)).await;
        assert_limit(&out, CodeLimit::Timeout);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{code}: no need to wait out the timeout"
        );
    }
    // No timers exist to resolve anything.
    let out = f
        .run("await new Promise(r => setTimeout(r, 10))", limits())
        .await;
    assert!(exception_message(&out).contains("setTimeout"), "{out:#?}");
    f.assert_healthy().await;
}

// ------------------------------------------------------------ memory

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bombs_hit_the_memory_limit() {
    let f = fixture(2);
    let mem = |mb: usize| CodeLimits {
        memory_bytes: mb << 20,
        ..limits()
    };
    let bombs = [
        // String doubling (flattened so ropes cannot cheat).
        "let s = 'x'; for (;;) { s = s + s; s.indexOf('y'); }",
        // Array growth.
        "const a = []; for (let i = 0; ; i++) a.push({i, s: 'abc' + i});",
        // Typed arrays.
        "const keep = []; for (;;) keep.push(new Float64Array(1 << 20));",
        // Catching the out-of-memory error does not help: the limit is terminal.
        "const keep = []; for (;;) { try { keep.push(new Float64Array(1 << 18)); } catch (e) { keep.length = 0; } }",
        "const parts = []; for (let i = 0; ; i++) { try { parts.push('x'.repeat(1 << 20) + i); } catch (e) { parts.length = 0; } }",
        // Huge allocation in one go.
        "new ArrayBuffer(1e9)",
        // Growing a Map of strings.
        "const m = new Map(); for (let i = 0; ; i++) m.set('k' + i, 'v'.repeat(100) + i);",
    ];
    for code in bombs {
        let started = Instant::now();
        let out = f.run(code, mem(16)).await;
        println!("{code}: {:?} {:?}", started.elapsed(), out.status);
        assert_limit(&out, CodeLimit::Memory);
        assert!(started.elapsed() < Duration::from_secs(10), "{code}");
        f.assert_healthy().await;
    }
    // A limit too small for the engine itself.
    let out = f
        .run(
            "return 1",
            CodeLimits {
                memory_bytes: 4096,
                ..limits()
            },
        )
        .await;
    assert_limit(&out, CodeLimit::Memory);
    // A reasonable script inside a small limit works.
    let out = f
        .run(
            "return new Array(1000).fill(7).reduce((a, b) => a + b)",
            mem(2),
        )
        .await;
    assert_eq!(out.value, Some(json!(7000)), "{out:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_hits_the_stack_limit() {
    let f = fixture(2);
    for code in [
        "function f(n) { return f(n + 1) + 1; } return f(0);",
        "const f = async (n) => 1 + await f(n + 1); return await f(0);",
        "function f(o) { return f({o}); } f({});",
        "return JSON.parse('['.repeat(1e6) + ']'.repeat(1e6))",
        "const a = []; let c = a; for (let i = 0; i < 1e5; i++) { const n = []; c.push(n); c = n; } return JSON.stringify(a).length",
    ] {
        let out = f.run(code, limits()).await;
        println!("{code}: {:?}", out.status);
        assert_limit(&out, CodeLimit::Stack);
        f.assert_healthy().await;
    }
    // A caught overflow is an ordinary RangeError: the script may go on.
    let out = f
        .run(
            "function f() { return f(); } try { f(); } catch (e) { return e instanceof RangeError; }",
            limits(),
        )
        .await;
    assert_eq!(out.value, Some(json!(true)), "{out:#?}");
    // A small stack limit is honoured; a big one allows deeper recursion.
    let depth = "let d = 0; function f() { d++; f(); } try { f(); } catch {} return d;";
    let small = f
        .run(
            depth,
            CodeLimits {
                max_stack_bytes: 128 << 10,
                ..limits()
            },
        )
        .await;
    let big = f
        .run(
            depth,
            CodeLimits {
                max_stack_bytes: 4 << 20,
                ..limits()
            },
        )
        .await;
    let (small, big) = (
        small.value.unwrap().as_f64().unwrap(),
        big.value.unwrap().as_f64().unwrap(),
    );
    assert!(big > small * 10.0, "small {small}, big {big}");
}

// ------------------------------------------------------------ output

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_results_and_logs_hit_the_output_limit() {
    let f = fixture(2);
    let out_limit = |bytes: usize| CodeLimits {
        max_output_bytes: bytes,
        ..limits()
    };
    // A result just under the limit passes; just over fails.
    let out = f.run("return 'x'.repeat(1000 - 2)", out_limit(1000)).await;
    assert!(out.status.is_ok(), "{out:#?}");
    let out = f.run("return 'x'.repeat(1000 - 1)", out_limit(1000)).await;
    assert_limit(&out, CodeLimit::Output);
    // Huge values.
    let out = f.run("return 'x'.repeat(5e6)", limits()).await;
    assert_limit(&out, CodeLimit::Output);
    let out = f
        .run(
            "return Array.from({length: 2e5}, (_, i) => ({i, name: 'item' + i}))",
            limits(),
        )
        .await;
    assert_limit(&out, CodeLimit::Output);
    // One giant log line: cut at the limit, capture stops.
    let out = f
        .run("console.log('y'.repeat(3e6)); return 1", limits())
        .await;
    assert_limit(&out, CodeLimit::Output);
    assert_eq!(out.stdout.len(), 1 << 20);
    // Many lines, errors swallowed: still terminal.
    let out = f
        .run(
            "for (let i = 0; ; i++) { try { console.error('line ' + i + ' ' + 'z'.repeat(100)); } catch {} }",
            limits(),
        )
        .await;
    assert_limit(&out, CodeLimit::Output);
    assert!(out.stderr.len() <= 1 << 20 && out.stderr.len() > (1 << 20) - 200);
    // Console output and the result share the budget.
    let out = f
        .run(
            "console.log('a'.repeat(600)); return 'b'.repeat(600)",
            out_limit(1000),
        )
        .await;
    assert_limit(&out, CodeLimit::Output);
    assert_eq!(out.stdout.len(), 601, "the output so far is kept");
    f.assert_healthy().await;
}

// ------------------------------------------------------------ tool calls

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncaught_tool_errors_name_the_call() {
    let f = fixture(2);
    let out = f
        .run(
            "await tools.math.add({a: 1, b: 2}); await tools.test.fail({message: 'boom'}); return 'unreachable'",
            limits(),
        )
        .await;
    match &out.status {
        CodeStatus::ToolError {
            call_index,
            tool_id,
            error,
        } => {
            assert_eq!(*call_index, 1);
            assert_eq!(tool_id, "test:fail");
            assert_eq!(error.code, ErrorCode::ExecutionFailed);
            assert!(error.message.contains("boom"));
            assert_eq!(
                error.details.as_ref().unwrap()["data"],
                json!({"why": "asked to"})
            );
        }
        other => panic!("{other:#?}"),
    }
    assert_eq!(out.tool_calls.len(), 2);
    // Caught, the error carries code and message; the script goes on.
    let out = f
        .run(
            r#"
            try { await tools.test.fail({message: 'boom'}); }
            catch (e) { return [e instanceof Error, e.name, e.code, e.message, e.toolId, e.callIndex, e.details.data]; }
            "#,
            limits(),
        )
        .await;
    assert_eq!(
        out.value,
        Some(
            json!([true, "ToolError", "execution_failed", "execution_failed: tool test:fail: boom", "test:fail", 0, {"why": "asked to"}])
        ),
        "{out:#?}"
    );
    // Rethrowing the same error is still the tool's error; wrapping it is the script's.
    let out = f
        .run(
            "try { await tools.test.fail({message: 'x'}); } catch (e) { throw e; }",
            limits(),
        )
        .await;
    assert!(
        matches!(out.status, CodeStatus::ToolError { call_index: 0, .. }),
        "{out:#?}"
    );
    let out = f
        .run(
            "try { await tools.test.fail({message: 'x'}); } catch (e) { throw new Error('wrapped: ' + e.code); }",
            limits(),
        )
        .await;
    assert_eq!(exception_message(&out), "Error: wrapped: execution_failed");
    // Schema violations, bad ids and bad arguments.
    let out = f.run("await tools.math.add({a: 'one'})", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, .. } if error.code == ErrorCode::ValidationInput),
        "{out:#?}"
    );
    let out = f.run("await tools.run('not an id', {})", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, .. } if error.code == ErrorCode::InvalidToolId),
        "{out:#?}"
    );
    let out = f.run("await tools.run(42)", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, tool_id, .. } if error.code == ErrorCode::InvalidToolId && tool_id == "<number>"),
        "{out:#?}"
    );
    let out = f.run("await tools.test.echo({n: 1n})", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, .. } if error.code == ErrorCode::ValidationInput && error.message.contains("BigInt")),
        "{out:#?}"
    );
    let out = f.run("await tools.test.echo(() => 1)", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, .. } if error.code == ErrorCode::ValidationInput),
        "{out:#?}"
    );
    let out = f.run("await tools.math.add([1, 2])", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, .. } if error.code == ErrorCode::ValidationInput),
        "{out:#?}"
    );
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disallowed_and_unknown_tools() {
    let f = fixture(2);
    let only_math = CodeLimits {
        allowed_tools: vec!["math:*".into(), "test:na-me".into()],
        ..limits()
    };
    let out = f
        .run("await tools.hash.sha256({text: 'x'})", only_math.clone())
        .await;
    match &out.status {
        CodeStatus::ToolError { tool_id, error, .. } => {
            assert_eq!(tool_id, "hash:sha256");
            assert_eq!(error.code, ErrorCode::NotAllowed);
            assert!(error.message.contains("allowed_tools"), "{}", error.message);
            assert_eq!(error.details.as_ref().unwrap()["tool"], "hash:sha256");
        }
        other => panic!("{other:#?}"),
    }
    // Recorded, but never run.
    assert_eq!(out.tool_calls.len(), 1);
    assert!(!out.tool_calls[0].ok);
    let out = f.run("await tools.test.count()", only_math.clone()).await;
    assert!(matches!(out.status, CodeStatus::ToolError { .. }));
    assert_eq!(f.counted.load(Ordering::SeqCst), 0);
    // Allowed ones work, including versions and odd names; search and describe
    // only show allowed tools.
    let out = f
        .run(
            r#"
            const a = await tools.math.add({a: 1, b: 1});
            const d = await tools.test["na-me"]();
            const hits = await tools.search("hash sha256 digest", 10);
            let described = null;
            try { await tools.describe("hash:sha256"); } catch (e) { described = e.code; }
            const ok = (await tools.describe("math:add", "summary")).id;
            return [a.result, d, hits.every(h => h.id.startsWith("math:")), described, ok];
            "#,
            only_math,
        )
        .await;
    assert_eq!(
        out.value,
        Some(json!([2, "dashed", true, "not_allowed", "math:add"])),
        "{out:#?}"
    );
    // Unknown tools.
    let out = f.run("await tools.nope.nothing({})", limits()).await;
    assert!(
        matches!(&out.status, CodeStatus::ToolError { error, tool_id, .. } if error.code == ErrorCode::ToolNotFound && tool_id == "nope:nothing"),
        "{out:#?}"
    );
    let out = f
        .run(
            "try { await tools.describe('nope:nothing') } catch (e) { return e.code }",
            limits(),
        )
        .await;
    assert_eq!(out.value, Some(json!("tool_not_found")));
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_budget_is_terminal() {
    let f = fixture(2);
    let budget = CodeLimits {
        max_tool_calls: 10,
        ..limits()
    };
    let out = f
        .run(
            "for (let i = 0; i < 1000; i++) await tools.math.add({a: i, b: 1}); return 'done'",
            budget.clone(),
        )
        .await;
    assert_limit(&out, CodeLimit::ToolCalls);
    assert_eq!(out.tool_calls.len(), 10);
    assert!(out.tool_calls.iter().all(|c| c.ok));
    // Swallowing the budget error does not help.
    let out = f
        .run(
            "let n = 0; for (let i = 0; i < 1000; i++) { try { await tools.math.add({a: i, b: 1}); n++; } catch {} } return n",
            budget.clone(),
        )
        .await;
    assert_limit(&out, CodeLimit::ToolCalls);
    // Parallel calls count too; denied calls count.
    let out = f
        .run(
            "await Promise.all(Array.from({length: 11}, () => tools.nope.x()))",
            budget,
        )
        .await;
    assert_limit(&out, CodeLimit::ToolCalls);
    assert_eq!(out.tool_calls.len(), 10);
    f.assert_healthy().await;
}

// ------------------------------------------------------------ throws

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thrown_values_are_rendered() {
    let f = fixture(2);
    let cases = [
        ("throw 42", "Uncaught 42"),
        ("throw {a: 1}", "Uncaught {\"a\":1}"),
        ("throw null", "Uncaught null"),
        ("throw undefined", "Uncaught undefined"),
        ("throw 'plain string'", "Uncaught plain string"),
        ("throw [1, 'two']", "Uncaught [1,\"two\"]"),
        ("throw Symbol('sym')", "Uncaught Symbol(sym)"),
        ("await Promise.reject(7)", "Uncaught 7"),
        ("throw new TypeError('bad')", "TypeError: bad"),
        (
            "class MyError extends Error { constructor(m) { super(m); this.name = 'MyError'; } } throw new MyError('custom')",
            "MyError: custom",
        ),
        ("null.x", "TypeError: cannot read property 'x' of null"),
        (
            "undefinedFunction()",
            "ReferenceError: undefinedFunction is not defined",
        ),
        (
            "throw {get message() { throw 1 }}",
            "Uncaught [object: not JSON-serializable: ]",
        ),
    ];
    for (code, want) in cases {
        let out = f.run(code, limits()).await;
        assert_eq!(exception_message(&out), want, "{code}");
    }
    let out = f
        .run(
            "function inner() { throw new Error('deep') }\ninner()",
            limits(),
        )
        .await;
    match &out.status {
        CodeStatus::Exception { message, stack } => {
            assert_eq!(message, "Error: deep");
            let stack = stack.as_deref().unwrap();
            assert!(
                stack.contains("inner") && stack.contains("script.js:1"),
                "{stack}"
            );
        }
        other => panic!("{other:#?}"),
    }
    // Output before the throw is kept.
    let out = f.run("console.log('so far'); throw 1", limits()).await;
    assert_eq!(out.stdout, "so far\n");
    f.assert_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syntax_errors_report_line_and_column() {
    let f = fixture(2);
    let cases = [
        ("let x = ;", 1, 9),
        ("const a = 1;\nconst b = a +;\nreturn b", 2, 14),
        ("return 1\n  foo bar", 2, 7),
        ("if (x) {\n  y();", 2, 7), // unclosed block: reported at the end of the code
        ("const s = 'unterminated", 1, 11),
        ("await import('fs')", 0, 0), // not a syntax error: dynamic import compiles
    ];
    for (code, line, column) in cases {
        let out = f.run(code, limits()).await;
        if line == 0 {
            assert!(
                !matches!(out.status, CodeStatus::SyntaxError { .. }),
                "{out:#?}"
            );
            continue;
        }
        match &out.status {
            CodeStatus::SyntaxError {
                line: l,
                column: c,
                message,
            } => {
                assert_eq!((*l, *c), (line, column), "{code}: {message}");
                assert!(!message.is_empty());
            }
            other => panic!("{code}: {other:#?}"),
        }
        assert!(out.tool_calls.is_empty() && out.stdout.is_empty());
    }
    // Nothing ran: the console call on line 1 never happened.
    let out = f.run("console.log('ran');\nlet = = 1;", limits()).await;
    assert!(
        matches!(out.status, CodeStatus::SyntaxError { line: 2, .. }),
        "{out:#?}"
    );
    assert_eq!(out.stdout, "");
    let out = f.run("return 1\0", limits()).await;
    assert!(
        matches!(
            out.status,
            CodeStatus::SyntaxError {
                line: 1,
                column: 9,
                ..
            }
        ),
        "{out:#?}"
    );
}

// ------------------------------------------------------------ sandbox

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ambient_authority() {
    let f = fixture(2);
    let out = f
        .run(
            r#"
            const names = ["require", "process", "fetch", "setTimeout", "setInterval", "std", "os",
                           "XMLHttpRequest", "WebSocket", "Deno", "Bun", "module", "exports", "__dirname",
                           "scriptArgs", "print", "WebAssembly"];
            const present = names.filter(n => typeof globalThis[n] !== "undefined");
            let importError = null;
            try { await import("fs"); } catch (e) { importError = String(e); }
            let waitError = null;
            try { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0); } catch (e) { waitError = e.name; }
            // eval runs inside the same sandbox: no new authority.
            const viaEval = eval("typeof require");
            const viaFunction = Function("return typeof process")();
            return {present, importError, waitError, viaEval, viaFunction};
            "#,
            limits(),
        )
        .await;
    assert!(out.status.is_ok(), "{out:#?}");
    let v = out.value.unwrap();
    assert_eq!(v["present"], json!([]), "{v}");
    assert!(
        v["importError"]
            .as_str()
            .unwrap()
            .contains("could not load module"),
        "{v}"
    );
    assert_eq!(
        v["waitError"], "TypeError",
        "Atomics.wait must not block a worker: {v}"
    );
    assert_eq!(v["viaEval"], "undefined");
    assert_eq!(v["viaFunction"], "undefined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampering_cannot_break_the_host_or_other_executions() {
    let f = fixture(2);
    let out = f
        .run(
            r#"
            const run = tools.run, math = tools.math, log = console.log;
            // Break everything the prelude or host might touch.
            Object.prototype.then = undefined;
            Object.defineProperty(Object.prototype, "toJSON", {value: undefined, writable: true, configurable: true});
            Array.prototype.push = () => { throw new Error("no push"); };
            Array.prototype[Symbol.iterator] = function* () { throw new Error("no iteration"); };
            Array.prototype.map = null;
            JSON.stringify = () => "{\"evil\":true}";
            JSON.parse = () => ({evil: true});
            Function.prototype.call = Function.prototype.apply = Function.prototype.bind = null;
            Object.defineProperty(Object.prototype, "code", {set() { throw new Error("setter hit"); }, configurable: true});
            Object.create = Object.defineProperty = Object.freeze = null;
            globalThis.Proxy = globalThis.Promise = globalThis.Error = null;
            delete globalThis.tools;
            globalThis.console = null;
            // The saved references still reach the host, and results are intact.
            const a = await math.add({a: 20, b: 22});
            const b = await run("test:echo", {keep: [1, 2, 3]});
            let code = null;
            try { await run("test:fail", {message: "m"}); } catch (e) { code = Object.getOwnPropertyDescriptor(e, "code").value; }
            log("still logging", {x: 1});
            return {sum: a.result, keep: b.keep.length, code};
            "#,
            limits(),
        )
        .await;
    assert!(out.status.is_ok(), "{out:#?}");
    assert_eq!(
        out.value,
        Some(json!({"sum": 42, "keep": 3, "code": "execution_failed"}))
    );
    assert_eq!(out.stdout, "still logging {\"x\":1}\n");
    assert_eq!(
        out.tool_calls[1].args.preview.as_deref(),
        Some(r#"{"keep":[1,2,3]}"#)
    );
    // Deleting tools makes the next call a ReferenceError, nothing worse.
    let out = f
        .run(
            "delete globalThis.tools; await tools.math.add({a: 1, b: 2})",
            limits(),
        )
        .await;
    assert!(
        exception_message(&out).contains("ReferenceError"),
        "{out:#?}"
    );
    // A getter-based toJSON in the arguments runs inside the sandbox.
    let out = f
        .run(
            "return (await tools.test.echo({toJSON() { return {swapped: true}; }})).swapped",
            limits(),
        )
        .await;
    assert_eq!(out.value, Some(json!(true)));
    // A fresh runtime per execution: none of that leaked.
    f.assert_healthy().await;
    let out = f
        .run(
            "return [typeof Object.prototype.then, typeof Array.prototype.push, typeof Proxy, JSON.parse('[1]')[0]]",
            limits(),
        )
        .await;
    assert_eq!(
        out.value,
        Some(json!(["undefined", "function", "function", 1]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_serialize_with_a_stable_kind_tag() {
    let f = fixture(2);
    let ok = serde_json::to_value(f.run("return 1", limits()).await).unwrap();
    assert_eq!(ok["status"], json!({"kind": "ok"}));
    assert_eq!(ok["value"], 1);
    let syn = serde_json::to_value(f.run("let = ;", limits()).await).unwrap();
    assert_eq!(syn["status"]["kind"], "syntax_error");
    assert_eq!(syn["status"]["line"], 1);
    let lim = serde_json::to_value(f.run("for(;;){}", quick(100)).await).unwrap();
    assert_eq!(lim["status"]["kind"], "limit_exceeded");
    assert_eq!(lim["status"]["limit"], "timeout");
    let exc = serde_json::to_value(f.run("throw 1", limits()).await).unwrap();
    assert_eq!(
        exc["status"],
        json!({"kind": "exception", "message": "Uncaught 1"})
    );
    let te = serde_json::to_value(f.run("await tools.nope.x()", limits()).await).unwrap();
    assert_eq!(te["status"]["kind"], "tool_error");
    assert_eq!(te["status"]["error"]["code"], "tool_not_found");
    assert_eq!(te["tool_calls"][0]["ok"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_extension_uses_a_shared_engine() {
    let f = fixture(1);
    let outs = futures_join(
        (0..8)
            .map(|i| {
                let exec = f.exec.clone();
                tokio::spawn(async move {
                    exec.execute_code(
                        &format!("return (await tools.math.add({{a: {i}, b: 1}})).result"),
                        limits(),
                    )
                    .await
                })
            })
            .collect(),
    )
    .await;
    for (i, out) in outs.into_iter().enumerate() {
        assert_eq!(out.value, Some(json!(i + 1)), "{out:#?}");
    }
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn works_on_a_current_thread_runtime() {
    // Tool calls are spawned on the caller's runtime; a current-thread
    // runtime is free to run them while `execute` awaits the worker.
    let f = fixture(2);
    let out = f
        .run(
            "const r = await Promise.all([tools.test.sleep({ms: 50}), tools.test.sleep({ms: 50})]); return r.map(x => x.slept)",
            limits(),
        )
        .await;
    assert_eq!(out.value, Some(json!([50, 50])), "{out:#?}");
}
