//! Tool calls through the fleet: lost workers, idempotency keys, the queue bound, a NATS restart, a run whose last worker died.

use super::*;

/// Many calls from several callers while workers are killed with SIGKILL
/// and replaced: every call ends, with its own result or `interrupted`;
/// none runs twice; idempotent calls always complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_survive_killed_workers() {
    const TEST: &str = "calls_survive_killed_workers";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let calls: u64 = std::env::var("TOOLEXEC_FLEET_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "chaos", ledger_port, "");
    let mut workers: Vec<Background> = (0..3)
        .map(|i| worker(dir.path(), &config, &format!("w{i}"), 8))
        .collect();
    let (exec, _client) = caller(&nats, "chaos").await;
    let exec = Arc::new(exec);

    // Every tenth call is math:add (idempotent: run again after a loss).
    const CLIENTS: u64 = 16;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let exec = exec.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                let mut n = c;
                while n < calls {
                    let options = RunOptions::timeout(Duration::from_secs(60));
                    let result = if n % 10 == 9 {
                        exec.run_tool_with("math:add", json!({"a": n, "b": 1}), &options)
                            .await
                    } else {
                        exec.run_tool_with("ledger:hit", json!({"n": n, "sleep_ms": 0}), &options)
                            .await
                    };
                    outcomes.push((n, result));
                    n += CLIENTS;
                }
                outcomes
            })
        })
        .collect();

    // SIGKILL a worker every 2 seconds and start a new one in its place,
    // until the calls are done.
    let mut killed = 0;
    let killer = async {
        let mut next = 3;
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let victim = killed % workers.len();
            workers[victim].kill();
            killed += 1;
            workers[victim] = worker(dir.path(), &config, &format!("w{next}"), 8);
            next += 1;
        }
    };
    let all = tokio::select! {
        all = futures::future::join_all(tasks) => all,
        () = killer => unreachable!(),
    };
    let elapsed = started.elapsed();

    let hits = ledger_hits(ledger_port);
    let (mut ok, mut interrupted) = (0u64, 0u64);
    for (n, result) in all.into_iter().flat_map(|t| t.unwrap()) {
        match result {
            Ok(out) if n % 10 == 9 => {
                assert_eq!(out.value, json!({"result": (n + 1) as f64}), "call {n}");
                ok += 1;
            }
            Ok(out) => {
                assert_eq!(out.value, json!({"n": n, "hits": 1}), "call {n}");
                assert_eq!(
                    hits.get(&n),
                    Some(&1),
                    "call {n} ran {:?} times",
                    hits.get(&n)
                );
                ok += 1;
            }
            Err(e) if e.code() == ErrorCode::Interrupted && n % 10 != 9 => {
                let body = e.to_body();
                let journal = &body.details.as_ref().unwrap()["journal"];
                assert_eq!(journal[0]["tool"], "ledger:hit", "{body:?}");
                assert!(hits.get(&n).copied().unwrap_or(0) <= 1, "call {n}");
                interrupted += 1;
            }
            Err(e) => panic!("call {n} failed: {e}"),
        }
    }
    assert_eq!(ok + interrupted, calls);
    let doubled: Vec<_> = hits.iter().filter(|(_, c)| **c > 1).collect();
    assert!(doubled.is_empty(), "calls run twice: {doubled:?}");
    assert!(
        killed >= 1,
        "no worker was killed: the calls ended too soon"
    );
    eprintln!(
        "fleet chaos: {calls} calls in {elapsed:.1?}, {killed} workers killed, \
         {ok} ok, {interrupted} interrupted"
    );
    drop(nats);
}

/// A call made again with the same idempotency key gets the recorded
/// result, from the library and from `toolexec run --idempotency-key`; the
/// ledger counts one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_runs_once() {
    const TEST: &str = "an_idempotency_key_runs_once";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(
        &dir,
        &nats,
        "keys",
        ledger_port,
        "namespaces = [\"ledger\"]",
    );
    let _w = worker(dir.path(), &config, "k0", 2);
    let (exec, _client) = caller(&nats, "keys").await;
    for _ in 0..3 {
        let out = toolexec_fleet::with_idempotency_key(
            "order-7",
            exec.run_tool("ledger:hit", json!({"n": 7, "sleep_ms": 0})),
        )
        .await
        .unwrap();
        assert_eq!(out.value, json!({"n": 7, "hits": 1}));
    }
    // The CLI, configured as a caller of the same cluster ([cluster]
    // namespaces = ["ledger"]; its own catalog has no ledger tools).
    let caller_config = dir.write(
        "caller.toml",
        &format!(
            "[builtins]\nenabled = [\"text\"]\n[cluster]\nnats = {}\nname = \"keys\"\nheartbeat = \"{HEARTBEAT}\"\nnamespaces = [\"ledger\"]\n",
            toml_str(nats.url())
        ),
    );
    let caller_config = caller_config.to_str().unwrap();
    // `toolexec run ledger:hit ARGS --idempotency-key KEY [MORE]`.
    let keyed_run = |args: &str, key: &str, more: &[&str]| {
        let mut all = vec![
            "--config",
            caller_config,
            "--json",
            "run",
            "ledger:hit",
            args,
            "--idempotency-key",
            key,
        ];
        all.extend_from_slice(more);
        run(&mut toolexec(dir.path(), &all))
    };
    for _ in 0..2 {
        let out = keyed_run(r#"{"n": 8, "sleep_ms": 0}"#, "order-8", &[]);
        out.expect_code(0);
        assert_eq!(out.json()["value"], json!({"n": 8, "hits": 1}), "{out}");
    }
    // Streamed runs (a task of their own) carry the key too.
    for _ in 0..2 {
        let out = keyed_run(r#"{"n": 9, "sleep_ms": 0}"#, "order-9", &["--stream"]);
        out.expect_code(0);
        assert!(out.stdout.contains(r#""hits":1"#), "{out}");
    }
    let hits = ledger_hits(ledger_port);
    assert_eq!(hits.get(&7), Some(&1));
    assert_eq!(hits.get(&8), Some(&1));
    assert_eq!(hits.get(&9), Some(&1));
    // A different key is another call.
    let out = toolexec_fleet::with_idempotency_key(
        "order-7b",
        exec.run_tool("ledger:hit", json!({"n": 7, "sleep_ms": 0})),
    )
    .await
    .unwrap();
    assert_eq!(out.value, json!({"n": 7, "hits": 2}));
}

/// Past the queue bound, a call is refused at once with a clear
/// `backend_unavailable`; the calls already queued still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_fleet_refuses_calls() {
    const TEST: &str = "a_saturated_fleet_refuses_calls";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "full", ledger_port, "max_queue = 4");
    let _w = worker(dir.path(), &config, "f0", 1);
    let (exec, _client) = caller(&nats, "full").await;
    let exec = Arc::new(exec);
    let calls: Vec<_> = (0..10)
        .map(|n| {
            let exec = exec.clone();
            tokio::spawn(async move {
                exec.run_tool("ledger:hit", json!({"n": n, "sleep_ms": 300}))
                    .await
            })
        })
        .collect();
    let (mut ok, mut refused) = (0usize, 0usize);
    for call in calls {
        match call.await.unwrap() {
            Ok(out) => {
                assert_eq!(out.value["hits"], 1);
                ok += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::BackendUnavailable, "{e}");
                assert!(e.to_string().contains("saturated"), "{e}");
                refused += 1;
            }
        }
    }
    assert!(ok >= 4 && refused >= 1, "ok {ok}, refused {refused}");
    let hits = ledger_hits(ledger_port);
    assert_eq!(hits.len(), ok, "{hits:?}");
}

/// nats-server restarted under load: calls fail or wait, never return a
/// wrong result or run twice; the cluster serves again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_restart_loses_nothing() {
    const TEST: &str = "a_nats_restart_loses_nothing";
    let Some(mut nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "restart", ledger_port, "");
    let _workers: Vec<_> = (0..2)
        .map(|i| worker(dir.path(), &config, &format!("r{i}"), 4))
        .collect();
    let (exec, _client) = caller(&nats, "restart").await;
    let exec = Arc::new(exec);
    let tasks: Vec<_> = (0..4u64)
        .map(|c| {
            let exec = exec.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for i in 0..150u64 {
                    let n = c * 1000 + i;
                    let options = RunOptions::timeout(Duration::from_secs(30));
                    let result = exec
                        .run_tool_with("ledger:hit", json!({"n": n, "sleep_ms": 5}), &options)
                        .await;
                    outcomes.push((n, result));
                }
                outcomes
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    nats.stop();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nats.restart();
    let restarted = Instant::now();
    let (mut ok, mut failed) = (0, 0);
    let mut failures = BTreeMap::<String, usize>::new();
    for (n, result) in futures::future::join_all(tasks)
        .await
        .into_iter()
        .flat_map(|t| t.unwrap())
    {
        match result {
            Ok(out) => {
                assert_eq!(out.value["n"], n, "call {n}");
                assert_eq!(out.value["hits"], 1, "call {n}");
                ok += 1;
            }
            Err(e) => {
                assert!(
                    matches!(
                        e.code(),
                        ErrorCode::BackendUnavailable | ErrorCode::Interrupted | ErrorCode::Timeout
                    ),
                    "call {n}: {e}"
                );
                let message = e.to_string();
                let kind = message.split(':').take(3).collect::<Vec<_>>().join(":");
                *failures.entry(kind).or_insert(0) += 1;
                failed += 1;
            }
        }
    }
    let hits = ledger_hits(ledger_port);
    let doubled: Vec<_> = hits.iter().filter(|(_, c)| **c > 1).collect();
    assert!(doubled.is_empty(), "calls run twice: {doubled:?}");
    // Serving again after the restart.
    let out = exec
        .run_tool("ledger:hit", json!({"n": 99_999, "sleep_ms": 0}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"n": 99_999, "hits": 1}));
    eprintln!(
        "fleet restart: {ok} ok, {failed} failed {failures:?}, all done {:.1?} after the restart",
        restarted.elapsed()
    );
}

/// A run whose last delivery's worker dies is never delivered again: its
/// caller settles it `interrupted` once the holder has been gone longer
/// than every delivery could take, instead of waiting for its deadline.
/// (The last delivery runs a run only when the ones before never claimed
/// it: here a worker without the tool sends it back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_last_worker_died_is_settled() {
    const TEST: &str = "a_run_whose_last_worker_died_is_settled";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "last", ledger_port, "max_deliver = 2");
    // A worker of the namespace without `ledger:wait`.
    let partial = dir.write(
        "partial.toml",
        &format!(
            "[cluster]\nnats = {}\nname = \"last\"\nheartbeat = \"{HEARTBEAT}\"\nmax_deliver = 2\n\
             [[http]]\nid = \"ledger:hit\"\nmethod = \"POST\"\nurl = {}\n\
             input_schema = {{ type = \"object\" }}\n",
            toml_str(nats.url()),
            toml_str(format!("http://127.0.0.1:{ledger_port}/hit")),
        ),
    );
    let partial = partial.to_str().unwrap();
    let mut full = worker(dir.path(), &config, "l0", 2);
    let (exec, client) = caller(&nats, "last").await;
    // Drained: its advert is withdrawn.
    assert!(full.signal("-TERM", Duration::from_secs(10)).is_some());
    let mut without = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "--config",
            partial,
            "worker",
            "--namespace",
            "ledger",
            "--id",
            "l1",
        ],
    ));
    without.wait_stdout_line("worker ");
    let start = Instant::now();
    while client.live_workers("ledger") == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no live worker");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    let call = tokio::spawn(async move {
        let options = RunOptions::timeout(Duration::from_secs(60));
        exec.run_tool_with("ledger:wait", json!({"ms": 5000}), &options)
            .await
    });
    // Delivery 1: sent back (no such tool there), and its worker gone.
    tokio::time::sleep(Duration::from_millis(150)).await;
    without.kill();
    // Delivery 2, the last: claimed and run, and its worker dies too.
    let mut last = worker(dir.path(), &config, "l2", 2);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    last.kill();
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code(), ErrorCode::Interrupted, "{error}");
    assert!(
        error.to_string().contains("no delivery of the run remains"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
