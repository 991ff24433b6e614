//! Durable code runs, and `toolexec serve` in front of the fleet.

use super::*;

/// A durable code run whose worker is killed between two tool calls ends
/// on another worker: the call made before the crash is replayed from the
/// journal (run once), the read-only call in flight runs again, the rest
/// runs live. A non-idempotent call in flight at the crash ends the run
/// `interrupted`, its journal saying which call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_code_run_survives_its_worker() {
    const TEST: &str = "a_durable_code_run_survives_its_worker";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "durable", ledger_port, "");
    let mut first = worker_with(dir.path(), &config, "c0", 2, &["--code"]);
    let (_exec, client) = caller(&nats, "durable").await;
    let start = Instant::now();
    while client.live_code_workers(toolexec_runtime::Profile::Standard) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no code worker");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let script = r#"
        const a = await tools.ledger.hit({n: 1, sleep_ms: 0});
        console.log("first call done");
        const w = await tools.ledger.wait({ms: 1500});
        const b = await tools.ledger.hit({n: 2, sleep_ms: 0});
        return {a: a.hits, waited: w.waited, b: b.hits};
    "#;
    let run = spawn_script(&client, script);
    // Killed while the script waits, between its two ledger calls.
    wait_for_hit(ledger_port, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.kill();
    let _second = worker_with(dir.path(), &config, "c1", 2, &["--code"]);
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome.status, toolexec_code::CodeStatus::Ok, "{outcome:?}");
    assert_eq!(
        outcome.value,
        Some(json!({"a": 1, "waited": 1500, "b": 1})),
        "{outcome:?}"
    );
    assert_eq!(outcome.stdout, "first call done\n");
    let hits = ledger_hits(ledger_port);
    assert_eq!(
        (hits.get(&1), hits.get(&2)),
        (Some(&1), Some(&1)),
        "{hits:?}"
    );

    // A POST in flight at the crash: not run again, the run is interrupted.
    let script = r#"
        await tools.ledger.hit({n: 3, sleep_ms: 1500});
        await tools.ledger.hit({n: 4, sleep_ms: 0});
        return "unreachable";
    "#;
    let mut third = worker_with(dir.path(), &config, "c2", 2, &["--code"]);
    drop(_second);
    let run = spawn_script(&client, script);
    wait_for_hit(ledger_port, 3).await;
    third.kill();
    let _fourth = worker_with(dir.path(), &config, "c3", 2, &["--code"]);
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.code(), ErrorCode::Interrupted, "{error}");
    let body = error.to_body();
    let journal = &body.details.as_ref().unwrap()["journal"][0];
    assert_eq!(journal["tool"], "ledger:hit", "{body:?}");
    assert_eq!(journal["state"], "replay_impossible", "{body:?}");
    assert!(body.message.contains("in flight"), "{body:?}");
    let hits = ledger_hits(ledger_port);
    assert_eq!((hits.get(&3), hits.get(&4)), (Some(&1), None), "{hits:?}");
}

/// Concurrent calls replay whatever order they finish in: a script whose
/// calls run at once (`Promise.all`) is killed after they are journaled,
/// and its replay on another worker runs none of them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_of_a_code_run_replay() {
    const TEST: &str = "concurrent_calls_of_a_code_run_replay";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "concurrent", ledger_port, "");
    let mut first = worker_with(dir.path(), &config, "p0", 2, &["--code"]);
    let (_exec, client) = caller(&nats, "concurrent").await;
    let script = r#"
        // Each chain's second call is made when its first returns: on the
        // first run in order of the waits, on replay in whatever order the
        // journal answers.
        const hits = await Promise.all([5, 4, 3, 2, 1].map(async (n) => {
            await tools.ledger.wait({ms: n * 40});
            return tools.ledger.hit({n: 100 + n, sleep_ms: 0});
        }));
        await tools.ledger.wait({ms: 1500});
        return hits.map((h) => h.hits);
    "#;
    let run = spawn_script(&client, script);
    let start = Instant::now();
    while ledger_hits(ledger_port).len() < 5 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the calls never ran"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // All five answered and journaled.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.kill();
    let _second = worker_with(dir.path(), &config, "p1", 2, &["--code"]);
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome.status, toolexec_code::CodeStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.value, Some(json!([1, 1, 1, 1, 1])), "{outcome:?}");
    let hits = ledger_hits(ledger_port);
    assert!((101..=105).all(|n| hits.get(&n) == Some(&1)), "{hits:?}");
}

/// `toolexec serve` in front of the fleet: the workers' tools are listed
/// and called like local ones (`[cluster] namespaces`), and `execute_code`
/// scripts run as durable code runs on a code worker (`[cluster] code`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_sends_calls_and_scripts_to_the_fleet() {
    const TEST: &str = "the_gateway_sends_calls_and_scripts_to_the_fleet";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "front", ledger_port, "");
    let _w = worker_with(dir.path(), &config, "g0", 4, &["--code"]);
    let gateway_config = dir.write(
        "gateway.toml",
        &format!(
            "[builtins]\nenabled = [\"text\"]\n[cluster]\nnats = {}\nname = \"front\"\n\
             heartbeat = \"{HEARTBEAT}\"\nnamespaces = [\"ledger\"]\ncode = true\n",
            toml_str(nats.url())
        ),
    );
    let mut s = crate::support::StdioSession::start(&mut toolexec(
        dir.path(),
        &[
            "--config",
            gateway_config.to_str().unwrap(),
            "serve",
            "--expose",
            "both",
        ],
    ));
    let names = s.tool_names(2);
    assert!(names.contains(&"ledger__hit".to_owned()), "{names:?}");
    assert!(!names.contains(&"math__add".to_owned()), "{names:?}");
    let r = s.request(
        3,
        "tools/call",
        json!({"name": "ledger__hit", "arguments": {"n": 21, "sleep_ms": 0}}),
    );
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"n": 21, "hits": 1}),
        "{r}"
    );
    let script = "const r = await tools.ledger.hit({n: 22, sleep_ms: 0}); return r.hits;";
    let r = s.request(
        4,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": script}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["value"], 1, "{r}");
    // The script ran on the worker; its call to one of the gateway's own
    // tools came back to the gateway.
    let script = "return await tools.text.case({text: 'a', to: 'upper'});";
    let r = s.request(
        5,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": script}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["value"],
        json!({"text": "A"}),
        "{r}"
    );
    assert!(s.finish().success(), "{}", s.stderr());
    let hits = ledger_hits(ledger_port);
    assert_eq!(
        (hits.get(&21), hits.get(&22)),
        (Some(&1), Some(&1)),
        "{hits:?}"
    );
    // A hardened script goes only to a worker that runs hardened code (it
    // checked at start that a sandbox runtime enforces it).
    let gateway_config = gateway_config.to_str().unwrap();
    let hardened = |dir: &Path| {
        crate::support::run_with_input(
            &mut toolexec(
                dir,
                &[
                    "--config",
                    gateway_config,
                    "--json",
                    "code",
                    "-",
                    "--profile",
                    "hardened",
                ],
            ),
            Some("return (await tools.ledger.hit({n: 23, sleep_ms: 0})).hits"),
        )
    };
    let out = hardened(dir.path());
    out.expect_code(1);
    assert!(out.stderr.contains("runs hardened code"), "{out}");
    let listing = run(&mut toolexec(dir.path(), &["--json", "runtimes"]));
    if !crate::support::runtime_available(&listing, "bubblewrap", TEST, "bubblewrap") {
        return;
    }
    let _h = worker_with(
        dir.path(),
        &config,
        "g1",
        2,
        &["--code", "--code-profile", "hardened"],
    );
    let start = Instant::now();
    let out = loop {
        let out = hardened(dir.path());
        if out.code() == Some(0) || start.elapsed() > Duration::from_secs(10) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    out.expect_code(0);
    assert_eq!(out.json()["value"], 1, "{out}");
    assert_eq!(ledger_hits(ledger_port).get(&23), Some(&1));
}

/// A script on a worker reaches the caller's own tools: calls outside the
/// worker's namespaces come back to the caller's catalog, behind the
/// script's allowlist. The caller runs each call once: when the worker is
/// killed while such a call (of a tool not marked idempotent) is in
/// flight, the worker that takes the run over asks for it again and gets
/// the first call's result; nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_runs_call_back_to_the_callers_tools() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const TEST: &str = "code_runs_call_back_to_the_callers_tools";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "callback", ledger_port, "");
    let mut first = worker_with(dir.path(), &config, "b0", 2, &["--code"]);
    let (exec, client) = caller(&nats, "callback").await;
    // The caller's own tool, counting its runs by `n` (not idempotent).
    let counts: Arc<std::sync::Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let started = Arc::new(AtomicU64::new(0));
    let (c, s) = (counts.clone(), started.clone());
    exec.catalog()
        .tool(
            "local:count",
            "Counts its runs by n",
            move |a: serde_json::Value| {
                let (c, s) = (c.clone(), s.clone());
                async move {
                    let n = a["n"].as_u64().unwrap_or(0);
                    s.store(n, Ordering::SeqCst);
                    let sleep = a["sleep_ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(sleep)).await;
                    let mut counts = c.lock().unwrap();
                    let runs = counts.entry(n).or_insert(0);
                    *runs += 1;
                    Ok::<_, toolexec::ToolError>(json!({"n": n, "runs": *runs}))
                }
            },
        )
        .unwrap();
    let run_with_tools = |script: &'static str, allowed: &[&str]| {
        let (client, exec) = (client.clone(), exec.clone());
        let mut request = toolexec_code::CodeRequest::new(script);
        request.limits.allowed_tools = allowed.iter().map(|a| (*a).to_owned()).collect();
        tokio::spawn(async move {
            client
                .execute_code_with_tools(
                    &request,
                    toolexec_runtime::Profile::Standard,
                    &toolexec::CancellationToken::new(),
                    exec,
                )
                .await
        })
    };

    let script = r#"
        const a = await tools.local.count({n: 1, sleep_ms: 0});
        const h = await tools.ledger.hit({n: 31, sleep_ms: 0});
        const b = await tools.local.count({n: 2, sleep_ms: 1500});
        const found = (await tools.search("counts its runs", 5)).map((m) => m.id);
        return {a: a.runs, hit: h.hits, b: b.runs, found: found.includes("local:count")};
    "#;
    let run = run_with_tools(script, &[]);
    // Killed while the caller runs the second call back.
    let start = Instant::now();
    while started.load(Ordering::SeqCst) != 2 {
        assert!(start.elapsed() < Duration::from_secs(10), "no call back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();
    let _second = worker_with(dir.path(), &config, "b1", 2, &["--code"]);
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome.status, toolexec_code::CodeStatus::Ok, "{outcome:?}");
    assert_eq!(
        outcome.value,
        Some(json!({"a": 1, "hit": 1, "b": 1, "found": true})),
        "{outcome:?}"
    );
    assert_eq!(
        counts.lock().unwrap().clone(),
        BTreeMap::from([(1, 1), (2, 1)]),
        "a call back ran twice"
    );
    assert_eq!(ledger_hits(ledger_port).get(&31), Some(&1));

    // The script's allowlist holds for calls back.
    let script = "return await tools.local.count({n: 3, sleep_ms: 0});";
    let outcome = run_with_tools(script, &["ledger:*"])
        .await
        .unwrap()
        .unwrap();
    assert_ne!(outcome.status, toolexec_code::CodeStatus::Ok, "{outcome:?}");
    assert!(
        format!("{outcome:?}").contains("not_allowed"),
        "{outcome:?}"
    );
    // Without the caller's tools, a script reaches the worker's only.
    let outcome = spawn_script(&client, script).await.unwrap().unwrap();
    assert!(
        format!("{outcome:?}").contains("not_allowed"),
        "{outcome:?}"
    );
    assert_eq!(counts.lock().unwrap().get(&3), None);
}
