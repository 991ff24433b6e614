//! Hardened code mode: a trivial script (`return 1`), start to result,
//! next to the same script in process.
//!
//! Run: `cargo bench -p toolexec-code --bench hardened -- --warm-up-time 1 --measurement-time 5`.
//!
//! - `trivial/in_process`: `CodeEngine::execute` on the worker-thread pool.
//! - `trivial/bubblewrap_cold`: a `hardened` `CodeRunner` through the bubblewrap
//!   runtime with no pool: a new sandbox (namespaces, cgroups, seccomp), the
//!   `toolexec-code-worker` process, the tool-channel handshake, the script, the
//!   outcome frame, teardown.
//! - `trivial/bubblewrap_pool`: the same with a pool of 2 pre-started
//!   sandboxes (the worker binary is the sandbox init too).
//!
//! Without bubblewrap the sandboxed cases print `SKIPPED` and only the
//! in-process figure is measured.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use toolexec::{Availability, CancellationToken, Exec};
use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
use toolexec_code::{CodeEngine, CodeRequest, CodeRunner, CodeStatus};
use toolexec_runtime::{Profile, ProfileMap, Runtime, Runtimes};

fn worker() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toolexec-code-worker"))
}

fn runtimes(pool_size: usize) -> Option<Runtimes> {
    // The worker binary is also the sandbox init (`__sandbox-init`).
    let init = Some(worker());
    let bwrap = BubblewrapRuntime::new(BubblewrapConfig {
        init,
        script_worker: Some(worker()),
        pool_size,
        ..BubblewrapConfig::default()
    });
    if let Availability::Unavailable { reason } = bwrap.availability() {
        eprintln!("SKIPPED: bubblewrap: {reason}");
        return None;
    }
    let mut r = Runtimes::new(ProfileMap::default());
    r.register(bwrap);
    Some(r)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let exec = Exec::new(toolexec_builtins::catalog());
    let mut group = c.benchmark_group("trivial");
    let engine = CodeEngine::new(exec.clone(), 2);
    group.bench_function("in_process", |b| {
        b.iter(|| {
            rt.block_on(async {
                let out = engine.execute(CodeRequest::new("return 1")).await;
                assert_eq!(out.status, CodeStatus::Ok);
            })
        })
    });
    for (name, pool) in [("bubblewrap_cold", 0), ("bubblewrap_pool", 2)] {
        let Some(runtimes) = rt.block_on(async { runtimes(pool) }) else {
            continue;
        };
        let runner = CodeRunner::new(exec.clone(), Profile::Hardened, Some(Arc::new(runtimes)), 2);
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let out = runner
                        .run(CodeRequest::new("return 1"), &CancellationToken::new())
                        .await
                        .expect("runs");
                    assert_eq!(out.status, CodeStatus::Ok, "{out:?}");
                })
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
