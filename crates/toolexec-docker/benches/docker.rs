//! Start-to-result of a trivial unit through `DockerRuntime` vs the docker
//! CLI (`docker run --rm --network none IMAGE true`), against the private
//! daemon of `scripts/start-dockerd.sh` (run it first).

use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use toolexec::{Availability, CancellationToken};
use toolexec_docker::{DockerConfig, DockerRuntime};
use toolexec_runtime::{Profile, RunContext, RunRequest, Runtime, ToolHost, Unit};

const SOCKET: &str = "/run/toolexec-docker.sock";
const IMAGE: &str = "toolexec-test/busybox:1";

fn bench(c: &mut Criterion) {
    let runtime = DockerRuntime::new(DockerConfig::new(IMAGE).with_socket(SOCKET)).unwrap();
    if let Availability::Unavailable { reason } = runtime.availability() {
        eprintln!("SKIPPED: docker bench: {reason} (run scripts/start-dockerd.sh)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("docker_start_to_result");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(15));
    group.bench_function("docker_runtime_true", |b| {
        b.iter(|| {
            rt.block_on(async {
                let request = RunRequest::new(Unit::command(["true"]), Profile::Standard);
                let ctx = RunContext {
                    host: ToolHost::without_tools(&request.limits),
                    cancel: CancellationToken::new(),
                    output: None,
                };
                let outcome = runtime.run(request, ctx).await;
                assert!(outcome.is_ok(), "{outcome:?}");
            })
        })
    });
    group.bench_function("docker_cli_run_rm_true", |b| {
        b.iter(|| {
            let status = Command::new("docker")
                .env("DOCKER_HOST", format!("unix://{SOCKET}"))
                .args(["run", "--rm", "--network", "none", IMAGE, "true"])
                .status()
                .unwrap();
            assert!(status.success());
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
