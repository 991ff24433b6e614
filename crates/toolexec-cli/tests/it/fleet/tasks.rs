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
    let r = first.request(
        3,
        "tools/call",
        json!({"name": "ledger__hit", "arguments": {"n": 41, "sleep_ms": 2500}}),
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
}
