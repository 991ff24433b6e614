//! Start-to-result of a trivial unit (`/bin/true`) through
//! `BubblewrapRuntime`, cold and from the pre-warmed pool, next to raw
//! `bwrap --unshare-all ... /bin/true` in the same run, and next to raw
//! bwrap with the runtime's own sandbox shape (what bwrap and the init
//! cost by themselves, without toolexec's driver).

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use toolexec::Availability;
use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
use toolexec_runtime::{RunContext, RunRequest, Runtime, ToolHost, Unit};

const INIT: &str = env!("CARGO_BIN_EXE_toolexec-sandbox-init");

fn raw_bwrap() -> std::process::Command {
    let mut cmd = std::process::Command::new("bwrap");
    cmd.args([
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "/bin/true",
    ]);
    cmd
}

/// The runtime's command line (namespaces, mounts, environment, the init
/// with Landlock), minus the seccomp descriptors, started the same way as
/// [`raw_bwrap`].
fn runtime_shape_bwrap(init: bool) -> std::process::Command {
    let mut cmd = std::process::Command::new("bwrap");
    cmd.args([
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]);
    for dir in ["/usr", "/lib", "/lib64", "/bin", "/sbin"] {
        match std::fs::read_link(dir) {
            Ok(target) => cmd.arg("--symlink").arg(target).arg(dir),
            Err(_) => cmd.args(["--ro-bind", dir, dir]),
        };
    }
    cmd.args(["--dir", "/etc"]);
    for file in ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/alternatives"] {
        cmd.args(["--ro-bind-try", file, file]);
    }
    cmd.args([
        "--proc", "/proc", "--dev", "/dev", "--size", "67108864", "--tmpfs", "/tmp",
    ]);
    cmd.args(["--ro-bind", INIT, "/run/toolexec/init", "--remount-ro", "/"]);
    cmd.args([
        "--chdir",
        "/tmp",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
    ]);
    cmd.args(["--setenv", "HOME", "/tmp", "--"]);
    if init {
        cmd.args(["/run/toolexec/init", "exec", "--"]);
    }
    cmd.arg("/bin/true");
    cmd
}

fn run_once(rt: &tokio::runtime::Runtime, runtime: &BubblewrapRuntime) {
    // The strongest profile the runtime serves: hardened with the init,
    // standard without it (hardened is refused there).
    let request = RunRequest::new(Unit::command(["/bin/true"]), runtime.max_profile());
    let host = ToolHost::without_tools(&request.limits);
    let outcome = rt.block_on(runtime.run(request, RunContext::new(host, Default::default())));
    assert!(outcome.is_ok(), "{outcome:?}");
}

fn bench(c: &mut Criterion) {
    let cold = BubblewrapRuntime::new(BubblewrapConfig {
        init: Some(INIT.into()),
        ..BubblewrapConfig::default()
    });
    if let Availability::Unavailable { reason } = cold.availability() {
        eprintln!("SKIPPED: bwrap bench: {reason}");
        return;
    }
    let pooled = BubblewrapRuntime::new(BubblewrapConfig {
        init: Some(INIT.into()),
        pool_size: 2,
        ..BubblewrapConfig::default()
    });
    let no_init = BubblewrapRuntime::new(BubblewrapConfig::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("bwrap_true");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("raw_bwrap", |b| {
        b.iter(|| assert!(raw_bwrap().status().unwrap().success()))
    });
    group.bench_function("raw_bwrap_runtime_shape", |b| {
        b.iter(|| assert!(runtime_shape_bwrap(true).status().unwrap().success()))
    });
    group.bench_function("raw_bwrap_runtime_shape_no_init", |b| {
        b.iter(|| assert!(runtime_shape_bwrap(false).status().unwrap().success()))
    });
    group.bench_function("runtime_cold", |b| b.iter(|| run_once(&rt, &cold)));
    group.bench_function("runtime_cold_no_init", |b| {
        b.iter(|| run_once(&rt, &no_init))
    });
    pooled.warm_up();
    group.bench_function("runtime_pool", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Measure start-to-result of a ready entry, as a server
                // with a warm pool sees it between requests.
                while pooled.pool_ready() == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let t = std::time::Instant::now();
                run_once(&rt, &pooled);
                total += t.elapsed();
            }
            total
        })
    });
    group.finish();
    if let Some(rounds) = std::env::var("BWRAP_PAIRED")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        paired(rounds, &rt, &cold, &no_init, &pooled);
    }
}

/// `BWRAP_PAIRED=N`: N rounds, each running every case once in turn, then
/// the median per case. On a loaded machine criterion's per-case blocks
/// see different load; interleaving compares the cases under the same one.
fn paired(
    rounds: usize,
    rt: &tokio::runtime::Runtime,
    cold: &BubblewrapRuntime,
    no_init: &BubblewrapRuntime,
    pooled: &BubblewrapRuntime,
) {
    let time = |f: &dyn Fn()| {
        let t = std::time::Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1000.0
    };
    let cases: [(&str, &dyn Fn()); 6] = [
        ("raw_bwrap", &|| {
            assert!(raw_bwrap().status().unwrap().success())
        }),
        ("raw_bwrap_runtime_shape", &|| {
            assert!(runtime_shape_bwrap(true).status().unwrap().success())
        }),
        ("raw_bwrap_runtime_shape_no_init", &|| {
            assert!(runtime_shape_bwrap(false).status().unwrap().success())
        }),
        ("runtime_cold", &|| run_once(rt, cold)),
        ("runtime_cold_no_init", &|| run_once(rt, no_init)),
        ("runtime_pool", &|| run_once(rt, pooled)),
    ];
    let mut samples = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        // A ready pool entry, as a server sees it between requests.
        while pooled.pool_ready() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for (i, (_, case)) in cases.iter().enumerate() {
            samples[i].push(time(*case));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let raw = median(&mut samples[0]);
    for ((name, _), v) in cases.iter().zip(&mut samples) {
        let m = median(v);
        eprintln!(
            "paired {name:34} median {m:6.2} ms  ({:+5.1}% vs raw_bwrap)",
            (m / raw - 1.0) * 100.0
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
