//! The NATS JetStream fleet end to end: a real `nats-server` with
//! JetStream, `toolexec worker` processes, and a caller in this process
//! (the library a gateway uses: `FleetClient` importing the workers' tools
//! into a catalog). The workers' tool POSTs to a ledger that counts how
//! often each call reached it, so a lost or doubled call shows.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolexec::{Catalog, ErrorCode, Exec, RunOptions};
use toolexec_fleet::{Cluster, ClusterSettings, FleetClient};

use crate::support::{Background, TempDir, dep, free_port, run, toml_str, toolexec};

const PY_LEDGER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/py_ledger.py");

/// Three missed heartbeats and a run is delivered again: kept short so a
/// killed worker's runs move on within a second.
const HEARTBEAT: &str = "300ms";

/// A nats-server with JetStream on a free loopback port, its store in a
/// directory of its own.
struct Nats {
    server: Option<Background>,
    port: u16,
    bin: String,
    store: TempDir,
    extra: Vec<String>,
}

impl Nats {
    fn start(test: &str) -> Option<Nats> {
        Nats::start_with(test, &[])
    }

    /// A server started with `extra` arguments (TLS, authentication).
    fn start_with(test: &str, extra: &[&str]) -> Option<Nats> {
        let bin = dep(test, "TOOLEXEC_NATS_SERVER")?;
        let mut nats = Nats {
            server: None,
            port: free_port(),
            bin,
            store: TempDir::new("nats"),
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        nats.restart();
        Some(nats)
    }

    /// Starts the server (again, on the same port and store).
    fn restart(&mut self) {
        let port = self.port.to_string();
        let store = self.store.path().to_str().unwrap().to_owned();
        let mut server = Background::spawn(
            std::process::Command::new(&self.bin)
                .args(["-js", "-a", "127.0.0.1", "-p", &port, "-sd", &store])
                .args(&self.extra),
        );
        server.wait_listening(self.port);
        self.server = Some(server);
    }

    fn stop(&mut self) {
        self.server = None;
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// The ledger fixture, and its port.
fn ledger(test: &str) -> Option<(Child, u16)> {
    let python = dep(test, "TOOLEXEC_PYTHON")?;
    Some(toolexec_testkit::spawn_printing_port(
        std::process::Command::new(python).arg(PY_LEDGER),
    ))
}

/// The calls the ledger counted, by `n`.
fn ledger_hits(port: u16) -> BTreeMap<u64, u64> {
    let body = crate::support::get_with(port, "/hits", &[]).1;
    let hits: BTreeMap<String, u64> = serde_json::from_str(&body).unwrap();
    hits.into_iter()
        .map(|(n, c)| (n.parse().unwrap(), c))
        .collect()
}

/// A worker's configuration: `ledger:hit` (a POST, so not idempotent) and
/// the math built-ins (pure, so idempotent).
fn worker_config(dir: &TempDir, nats: &Nats, cluster: &str, ledger: u16, extra: &str) -> String {
    let text = format!(
        r#"
[builtins]
enabled = ["math"]

[cluster]
nats = {nats}
name = {cluster}
heartbeat = "{HEARTBEAT}"
{extra}

[[http]]
id = "ledger:hit"
description = "Count one call"
method = "POST"
url = {url}
body = {{ n = "{{n}}", sleep_ms = "{{sleep_ms}}" }}
input_schema = {{ type = "object", properties = {{ n = {{ type = "integer" }}, sleep_ms = {{ type = "integer" }} }}, required = ["n", "sleep_ms"] }}

[[http]]
id = "ledger:wait"
description = "Wait, counting nothing (a GET: read-only, so run again after a loss)"
method = "GET"
url = {wait}
input_schema = {{ type = "object", properties = {{ ms = {{ type = "integer" }} }}, required = ["ms"] }}
"#,
        nats = toml_str(nats.url()),
        cluster = toml_str(cluster),
        url = toml_str(format!("http://127.0.0.1:{ledger}/hit")),
        wait = toml_str(format!("http://127.0.0.1:{ledger}/wait/{{ms}}")),
    );
    let path = dir.write(&format!("worker-{cluster}.toml"), &text);
    path.to_str().unwrap().to_owned()
}

/// `toolexec worker` serving `ledger` and `math`, once it said it is ready.
fn worker(dir: &Path, config: &str, id: &str, capacity: usize) -> Background {
    worker_with(dir, config, id, capacity, &[])
}

/// A worker with more flags (`--code`).
fn worker_with(dir: &Path, config: &str, id: &str, capacity: usize, more: &[&str]) -> Background {
    let capacity = capacity.to_string();
    let mut args = vec![
        "--config",
        config,
        "worker",
        "--namespace",
        "ledger",
        "--namespace",
        "math",
        "--capacity",
        &capacity,
        "--id",
        id,
    ];
    args.extend_from_slice(more);
    let mut w = Background::spawn(&mut toolexec(dir, &args));
    w.wait_stdout_line("worker ");
    w
}

fn settings(nats: &Nats, cluster: &str) -> ClusterSettings {
    let mut s = ClusterSettings::new(vec![nats.url()], cluster);
    s.heartbeat = Duration::from_millis(300);
    s
}

/// A caller: the fleet's tools in a catalog of its own, once `ledger:hit`
/// is there.
async fn caller(nats: &Nats, cluster: &str) -> (Exec, Arc<FleetClient>) {
    let catalog = Arc::new(Catalog::new());
    let connection = Cluster::connect(settings(nats, cluster), "test")
        .await
        .unwrap();
    let client = FleetClient::attach(
        connection,
        vec!["ledger".into(), "math".into()],
        catalog.clone(),
    )
    .await
    .unwrap();
    let start = Instant::now();
    while catalog.get("ledger:hit").is_err() {
        assert!(start.elapsed() < Duration::from_secs(10), "no fleet tools");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (Exec::new(catalog), client)
}

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
    for _ in 0..2 {
        let out = run(&mut toolexec(
            dir.path(),
            &[
                "--config",
                caller_config,
                "--json",
                "run",
                "ledger:hit",
                r#"{"n": 8, "sleep_ms": 0}"#,
                "--idempotency-key",
                "order-8",
            ],
        ));
        out.expect_code(0);
        assert_eq!(out.json()["value"], json!({"n": 8, "hits": 1}), "{out}");
    }
    let hits = ledger_hits(ledger_port);
    assert_eq!(hits.get(&7), Some(&1));
    assert_eq!(hits.get(&8), Some(&1));
    // A different key is another call.
    let out = toolexec_fleet::with_idempotency_key(
        "order-7b",
        exec.run_tool("ledger:hit", json!({"n": 7, "sleep_ms": 0})),
    )
    .await
    .unwrap();
    assert_eq!(out.value, json!({"n": 7, "hits": 2}));
}

/// SIGTERM drains a worker: the run in flight finishes and answers, the
/// worker exits 0 and withdraws its advert; `cluster status` shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_worker() {
    const TEST: &str = "sigterm_drains_a_worker";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "drain", ledger_port, "");
    let mut w = worker(dir.path(), &config, "d0", 2);
    let (exec, _client) = caller(&nats, "drain").await;

    let status = |dir: &Path| {
        let out = run(&mut toolexec(
            dir,
            &["--config", &config, "--json", "cluster", "status"],
        ));
        out.expect_code(0);
        out.json()
    };
    let before = status(dir.path());
    assert_eq!(before["cluster"], "drain", "{before}");
    assert_eq!(before["workers"][0]["id"], "d0", "{before}");
    assert_eq!(before["workers"][0]["capacity"], 2, "{before}");

    let slow = tokio::spawn(async move {
        exec.run_tool("ledger:hit", json!({"n": 1, "sleep_ms": 1500}))
            .await
    });
    // The run is in flight (the ledger counted it) before the signal.
    let start = Instant::now();
    while !ledger_hits(ledger_port).contains_key(&1) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exit = w.signal("-TERM", Duration::from_secs(10));
    assert!(
        exit.is_some_and(|s| s.success()),
        "{exit:?}\n{}",
        w.output()
    );
    let out = slow.await.unwrap().unwrap();
    assert_eq!(out.value, json!({"n": 1, "hits": 1}));
    let after = status(dir.path());
    assert_eq!(after["workers"], json!([]), "{after}");
    let ledger_ns = after["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["namespace"] == "ledger")
        .unwrap();
    assert_eq!(ledger_ns["pending"], 0, "{after}");
    assert_eq!(ledger_ns["running"], 0, "{after}");
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
    let run = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .execute_code(
                    &toolexec_code::CodeRequest::new(script),
                    toolexec_runtime::Profile::Standard,
                    &toolexec::CancellationToken::new(),
                )
                .await
        })
    };
    // Killed while the script waits, between its two ledger calls.
    let start = Instant::now();
    while !ledger_hits(ledger_port).contains_key(&1) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the script never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    let run = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .execute_code(
                    &toolexec_code::CodeRequest::new(script),
                    toolexec_runtime::Profile::Standard,
                    &toolexec::CancellationToken::new(),
                )
                .await
        })
    };
    let start = Instant::now();
    while !ledger_hits(ledger_port).contains_key(&3) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the script never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

/// A server with TLS (a CA made here) and a token: a member with the CA
/// and the token (from a secret source) joins, by library and by
/// `toolexec.toml`; a wrong token, or no CA, is a clear
/// `backend_unavailable` naming what failed, never a connection in the
/// clear, and never shows the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_token_are_enforced() {
    const TEST: &str = "tls_and_token_are_enforced";
    let dir = TempDir::new("fleet-tls");
    let ca = toolexec_testkit::tls::TestCa::new("fleet test CA");
    let server = ca.issue(
        &["127.0.0.1", "localhost"],
        toolexec_testkit::tls::Usage::Server,
    );
    let cert = dir.write("server.pem", &server.cert_pem);
    let key = dir.write("server.key", &server.key_pem);
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let token = "s3cret-fleet-token";
    let Some(nats) = Nats::start_with(
        TEST,
        &[
            "--tls",
            "--tlscert",
            cert.to_str().unwrap(),
            "--tlskey",
            key.to_str().unwrap(),
            "--auth",
            token,
        ],
    ) else {
        return;
    };
    let url = format!("tls://127.0.0.1:{}", nats.port);
    let settings = |token: &str, ca: bool| {
        let mut s = ClusterSettings::new(vec![url.clone()], "secure");
        s.security.token = Some(toolexec::Secret::new(token));
        s.security.ca_file = ca.then(|| ca_file.clone());
        s.security.require_tls = true;
        s
    };
    Cluster::connect(settings(token, true), "test")
        .await
        .unwrap();
    for (what, s) in [
        ("wrong token", settings("wrong", true)),
        ("no CA", settings(token, false)),
    ] {
        let err = Cluster::connect(s, "test").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{what}: {err}");
        assert!(
            err.to_string().contains("cannot connect to NATS"),
            "{what}: {err}"
        );
        assert!(!err.to_string().contains("s3cret"), "{what}: {err}");
    }

    // The CLI: the token from the environment, the CA by path.
    let config = dir.write(
        "secure.toml",
        &format!(
            "[builtins]\nenabled = [\"math\"]\n[cluster]\nnats = {}\nname = \"secure\"\n\
             token = {{ env = \"FLEET_TOKEN\" }}\nca_file = \"ca.pem\"\nrequire_tls = true\n",
            toml_str(&url)
        ),
    );
    let config = config.to_str().unwrap();
    let _worker = {
        let mut w = Background::spawn(
            toolexec(
                dir.path(),
                &[
                    "--config",
                    config,
                    "worker",
                    "--namespace",
                    "math",
                    "--id",
                    "s0",
                ],
            )
            .env("FLEET_TOKEN", token),
        );
        w.wait_stdout_line("worker ");
        w
    };
    let out = run(toolexec(
        dir.path(),
        &["--config", config, "--json", "cluster", "status"],
    )
    .env("FLEET_TOKEN", token));
    out.expect_code(0);
    assert_eq!(out.json()["workers"][0]["id"], "s0", "{out}");
    let out = run(
        toolexec(dir.path(), &["--config", config, "cluster", "status"])
            .env("FLEET_TOKEN", "wrong-one"),
    );
    assert_ne!(out.code(), Some(0), "{out}");
    assert!(out.stderr.contains("backend_unavailable"), "{out}");
    assert!(!out.stderr.contains("wrong-one"), "{out}");
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
    // The script ran on the worker: its calls reach the worker's
    // namespaces only, never the gateway's own tools.
    let script = "return await tools.text.case({text: 'a', to: 'upper'});";
    let r = s.request(
        5,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": script}}),
    );
    assert!(r.to_string().contains("not_allowed"), "{r}");
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
    let run = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .execute_code(
                    &toolexec_code::CodeRequest::new(script),
                    toolexec_runtime::Profile::Standard,
                    &toolexec::CancellationToken::new(),
                )
                .await
        })
    };
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
