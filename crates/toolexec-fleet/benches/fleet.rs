//! A tool call through the fleet over a local call: a real nats-server
//! with JetStream on loopback (`TOOLEXEC_NATS_SERVER`), a worker and a
//! caller in this process, and the same tool (`math:add` of the fixture
//! catalog) called locally and through the cluster.
//!
//! Then throughput: 64 calls at once of a tool that sleeps 10 ms (so the
//! cores are not the limit), served by 1, 2 and 4 workers of 4 runs each.
//!
//! `cargo bench -p toolexec-fleet --bench fleet`

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolexec::{Catalog, Exec};
use toolexec_fleet::{Cluster, ClusterSettings, FleetClient, Worker, WorkerOptions};

/// The server, and its store (removed when dropped).
struct Server(Child, #[allow(dead_code)] toolexec_testkit::TempDir);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nats() -> Option<(Server, u16)> {
    let bin = toolexec_testkit::dep("fleet bench", "TOOLEXEC_NATS_SERVER")?;
    let port = toolexec_testkit::free_port();
    let store = toolexec_testkit::TempDir::new("nats-bench");
    let child = Command::new(bin)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(store.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nats-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((Server(child, store), port))
}

fn bench(c: &mut Criterion) {
    let Some((_server, port)) = nats() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let settings = ClusterSettings::new(vec![format!("nats://127.0.0.1:{port}")], "bench");
    let local = Exec::new(toolexec_testkit::catalog());
    let remote = rt.block_on(async {
        let cluster = Cluster::connect(settings.clone(), "worker").await.unwrap();
        let options = WorkerOptions {
            id: Some("bench".into()),
            namespaces: vec!["math".into()],
            capacity: 16,
            code: None,
            units: Vec::new(),
            unit_ceilings: Default::default(),
            runtimes: None,
        };
        let worker = Worker::start(cluster, local.clone(), options)
            .await
            .unwrap();
        tokio::spawn(worker.run(CancellationToken::new()));
        let catalog = Arc::new(Catalog::new());
        let cluster = Cluster::connect(settings.clone(), "caller").await.unwrap();
        let client = FleetClient::attach(cluster, vec!["math".into()], catalog.clone())
            .await
            .unwrap();
        while catalog.get("math:add").is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (Exec::new(catalog), client)
    });
    let args = json!({"a": 1, "b": 2});
    let mut group = c.benchmark_group("fleet");
    group.bench_function("local", |b| {
        b.to_async(&rt)
            .iter(|| async { local.run_tool("math:add", args.clone()).await.unwrap() })
    });
    group.bench_function("through_the_cluster", |b| {
        b.to_async(&rt)
            .iter(|| async { remote.0.run_tool("math:add", args.clone()).await.unwrap() })
    });
    group.finish();

    let mut group = c.benchmark_group("fleet_throughput_64_calls_of_10ms");
    group.sample_size(20);
    for workers in [1usize, 2, 4] {
        let caller = rt.block_on(sleepers(&settings, workers));
        group.bench_function(format!("{workers}_workers"), |b| {
            b.to_async(&rt).iter(|| async {
                let calls = (0..64).map(|_| caller.run_tool("nap:sleep", json!({})));
                for out in futures::future::join_all(calls).await {
                    out.unwrap();
                }
            })
        });
    }
    group.finish();
}

/// `workers` workers of 4 runs each serving `nap:sleep` (10 ms) on a
/// cluster of their own, and a caller of that cluster.
async fn sleepers(settings: &ClusterSettings, workers: usize) -> Exec {
    let mut settings = settings.clone();
    settings.name = format!("throughput{workers}");
    for i in 0..workers {
        let catalog = Arc::new(Catalog::new());
        catalog
            .tool("nap:sleep", "Sleeps 10 ms", |_: serde_json::Value| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, toolexec::ToolError>(json!({}))
            })
            .unwrap();
        let cluster = Cluster::connect(settings.clone(), "worker").await.unwrap();
        let options = WorkerOptions {
            id: Some(format!("nap{i}")),
            namespaces: vec!["nap".into()],
            capacity: 4,
            code: None,
            units: Vec::new(),
            unit_ceilings: Default::default(),
            runtimes: None,
        };
        let worker = Worker::start(cluster, Exec::new(catalog), options)
            .await
            .unwrap();
        tokio::spawn(worker.run(CancellationToken::new()));
    }
    let catalog = Arc::new(Catalog::new());
    let cluster = Cluster::connect(settings, "caller").await.unwrap();
    let client = FleetClient::attach(cluster, vec!["nap".into()], catalog.clone())
        .await
        .unwrap();
    // Every worker advertised before the runs start.
    while client.live_workers("nap") < workers {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::mem::forget(client);
    Exec::new(catalog)
}

criterion_group!(benches, bench);
criterion_main!(benches);
