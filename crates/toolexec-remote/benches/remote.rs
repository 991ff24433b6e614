//! The remote runtime's overhead over loopback: the same unit on the same
//! host runtime, run locally and through a runtime server on 127.0.0.1.
//!
//! `cargo bench -p toolexec-remote --bench remote`

use criterion::{Criterion, criterion_group, criterion_main};
use toolexec::{CancellationToken, Exec, Secret};
use toolexec_remote::{RemoteConfig, RemoteRuntime, RuntimeServer, ServerConfig};
use toolexec_runtime::{
    Profile, ProfileMap, RunContext, RunRequest, Runtime, Runtimes, ToolHost, Unit,
};
use toolexec_sandbox::{HostRuntime, UnsandboxedOptIn};

const KEY: &str = "bench-key-0123456789abcdef-remote";

fn host() -> HostRuntime {
    HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed())
}

async fn once(runtime: &dyn Runtime, exec: &Exec, unit: &Unit) {
    let request = RunRequest::new(unit.clone(), Profile::Dev);
    let cancel = CancellationToken::new();
    let host = ToolHost::new(exec.clone(), &request.limits, cancel.clone());
    let out = runtime
        .run(
            request,
            RunContext {
                host,
                cancel,
                output: None,
            },
        )
        .await;
    assert!(out.is_ok(), "{out:?}");
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let remote = rt.block_on(async {
        let map = ProfileMap {
            dev: vec![HostRuntime::NAME.into()],
            ..ProfileMap::default()
        };
        let mut runtimes = Runtimes::new(map);
        runtimes.register(host());
        let server = RuntimeServer::new(runtimes, ServerConfig::new(Secret::new(KEY)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(server.serve(listener, std::future::pending()));
        let mut config = RemoteConfig::new(url, Some(Secret::new(KEY)));
        config.max_profile = Profile::Dev;
        RemoteRuntime::new(config).unwrap()
    });
    let local = host();
    let exec = Exec::new(toolexec_testkit::catalog());
    let units = [
        ("true", Unit::command(["true"])),
        (
            "echo_64KiB",
            Unit::command(["head", "-c", "65536", "/dev/zero"]),
        ),
    ];
    let mut group = c.benchmark_group("remote_overhead");
    group.sample_size(50);
    for (name, unit) in &units {
        group.bench_function(format!("local/{name}"), |b| {
            b.iter(|| rt.block_on(once(&local, &exec, unit)))
        });
        group.bench_function(format!("remote/{name}"), |b| {
            b.iter(|| rt.block_on(once(&remote, &exec, unit)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
