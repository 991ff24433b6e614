//! MCP Tasks through a gateway in front of the fleet: kept in the cluster,
//! so another gateway answers for them.

use super::*;

/// A task on a fleet tool outlives its gateway: the gateway is killed
/// while the call runs on a worker, and a new gateway answers `tasks/get`
/// with the call's result. The call ran once (the ledger counts it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_its_gateway() {
    const TEST: &str = "a_task_outlives_its_gateway";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "tasks", ledger_port, "");
    let _w = worker(dir.path(), &config, "t0", 4);
    let gateway_config = dir.write(
        "gateway.toml",
        &format!(
            "[gateway]\ntask_after = \"200ms\"\n[cluster]\nnats = {}\nname = \"tasks\"\n\
             heartbeat = \"{HEARTBEAT}\"\nnamespaces = [\"ledger\"]\n",
            toml_str(nats.url())
        ),
    );
    let gateway = |dir: &Path| {
        crate::support::StdioSession::start_with(
            &mut toolexec(
                dir,
                &[
                    "--config",
                    gateway_config.to_str().unwrap(),
                    "serve",
                    "--expose",
                    "both",
                ],
            ),
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        )
    };
    let mut first = gateway(dir.path());
    assert!(first.tool_names(2).contains(&"ledger__hit".to_owned()));
    // With a progress token, as many clients send: the run streams, and
    // keeps the task's key.
    let r = first.request(
        3,
        "tools/call",
        json!({"name": "ledger__hit", "arguments": {"n": 41, "sleep_ms": 2500},
               "_meta": {"progressToken": "p41"}}),
    );
    let id = r["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {r}"))
        .to_owned();
    // The gateway dies with the call in flight on the worker.
    wait_for_hit(ledger_port, 41).await;
    let _ = std::process::Command::new("kill")
        .args(["-9", &first.pid().to_string()])
        .status();

    let mut second = gateway(dir.path());
    let start = Instant::now();
    let task = loop {
        let r = second.request(4, "tasks/get", json!({"taskId": id}));
        let status = r["result"]["status"].clone();
        assert!(r["error"].is_null(), "{r}");
        if status != "working" {
            break r;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(task["result"]["status"], "completed", "{task}");
    assert_eq!(
        task["result"]["result"]["structuredContent"],
        json!({"n": 41, "hits": 1}),
        "{task}"
    );
    assert_eq!(ledger_hits(ledger_port).get(&41), Some(&1));
    // Kept in the cluster: a third gateway finds it ended, and nobody else
    // knows the id.
    drop(second);
    let mut third = gateway(dir.path());
    let r = third.request(5, "tasks/get", json!({"taskId": id}));
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let r = third.request(6, "tasks/get", json!({"taskId": "0".repeat(32)}));
    assert!(!r["error"].is_null(), "{r}");
    assert_eq!(ledger_hits(ledger_port).get(&41), Some(&1));

    // Both gateways alive: the third one resumes a task the fourth holds
    // (the run is waited for, not made again), then cancels another the
    // fourth holds, which stops its run on the worker.
    let mut fourth = gateway(dir.path());
    let task_of = |s: &mut crate::support::StdioSession, id: u64, n: u64, ms: u64| {
        let r = s.request(
            id,
            "tools/call",
            json!({"name": "ledger__hit", "arguments": {"n": n, "sleep_ms": ms},
                   "_meta": {"progressToken": format!("p{n}")}}),
        );
        r["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("not a task: {r}"))
            .to_owned()
    };
    let shared = task_of(&mut fourth, 7, 42, 1500);
    let settled = |s: &mut crate::support::StdioSession, id: &str| {
        let start = Instant::now();
        loop {
            let r = s.request(8, "tasks/get", json!({"taskId": id}));
            assert!(r["error"].is_null(), "{r}");
            if r["result"]["status"] != "working" {
                break r;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{r}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let via_third = settled(&mut third, &shared);
    let via_fourth = settled(&mut fourth, &shared);
    for r in [&via_third, &via_fourth] {
        assert_eq!(
            r["result"]["result"]["structuredContent"],
            json!({"n": 42, "hits": 1}),
            "{r}"
        );
    }
    assert_eq!(ledger_hits(ledger_port).get(&42), Some(&1));

    let doomed = task_of(&mut fourth, 9, 44, 5000);
    wait_for_hit(ledger_port, 44).await;
    let r = third.request(10, "tasks/cancel", json!({"taskId": doomed}));
    assert!(r["error"].is_null(), "{r}");
    let r = settled(&mut third, &doomed);
    assert_eq!(r["result"]["status"], "cancelled", "{r}");
    // The holder's run was stopped by the worker: cancelled there too,
    // well before the tool's five seconds.
    let start = Instant::now();
    let r = settled(&mut fourth, &doomed);
    assert_eq!(r["result"]["status"], "cancelled", "{r}");
    assert!(start.elapsed() < Duration::from_secs(4), "{r}");
}
