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
pub(super) const HEARTBEAT: &str = "300ms";

/// A nats-server with JetStream on a free loopback port, its store in a
/// directory of its own.
pub(super) struct Nats {
    server: Option<Background>,
    pub(super) port: u16,
    bin: String,
    store: TempDir,
    extra: Vec<String>,
}

impl Nats {
    pub(super) fn start(test: &str) -> Option<Nats> {
        Nats::start_with(test, &[])
    }

    /// A server started with `extra` arguments (TLS, authentication).
    pub(super) fn start_with(test: &str, extra: &[&str]) -> Option<Nats> {
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
    pub(super) fn restart(&mut self) {
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

    pub(super) fn stop(&mut self) {
        self.server = None;
    }

    pub(super) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// The ledger fixture, and its port.
pub(super) fn ledger(test: &str) -> Option<(Child, u16)> {
    let python = dep(test, "TOOLEXEC_PYTHON")?;
    Some(toolexec_testkit::spawn_printing_port(
        std::process::Command::new(python).arg(PY_LEDGER),
    ))
}

/// The calls the ledger counted, by `n`.
pub(super) fn ledger_hits(port: u16) -> BTreeMap<u64, u64> {
    let body = crate::support::get_with(port, "/hits", &[]).1;
    let hits: BTreeMap<String, u64> = serde_json::from_str(&body).unwrap();
    hits.into_iter()
        .map(|(n, c)| (n.parse().unwrap(), c))
        .collect()
}

/// A worker's configuration: `ledger:hit` (a POST, so not idempotent) and
/// the math built-ins (pure, so idempotent).
pub(super) fn worker_config(
    dir: &TempDir,
    nats: &Nats,
    cluster: &str,
    ledger: u16,
    extra: &str,
) -> String {
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
pub(super) fn worker(dir: &Path, config: &str, id: &str, capacity: usize) -> Background {
    worker_with(dir, config, id, capacity, &[])
}

/// A worker with more flags (`--code`).
pub(super) fn worker_with(
    dir: &Path,
    config: &str,
    id: &str,
    capacity: usize,
    more: &[&str],
) -> Background {
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

pub(super) fn settings(nats: &Nats, cluster: &str) -> ClusterSettings {
    let mut s = ClusterSettings::new(vec![nats.url()], cluster);
    s.heartbeat = Duration::from_millis(300);
    s
}

/// A caller: the fleet's tools in a catalog of its own, once `ledger:hit`
/// is there.
pub(super) async fn caller(nats: &Nats, cluster: &str) -> (Exec, Arc<FleetClient>) {
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

/// Waits until the ledger counted call `n` (the run reached its tool).
pub(super) async fn wait_for_hit(port: u16, n: u64) {
    let start = Instant::now();
    while !ledger_hits(port).contains_key(&n) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "call {n} never reached the ledger"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A standard code run of `script` through `client`, on a task of its own.
pub(super) fn spawn_script(
    client: &Arc<FleetClient>,
    script: &'static str,
) -> tokio::task::JoinHandle<Result<toolexec_code::CodeOutcome, toolexec::Error>> {
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
}

mod calls;
mod code;
mod operations;
mod tasks;
mod units;
