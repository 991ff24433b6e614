//! Start-to-result of a trivial unit (`/bin/true` in the busybox rootfs
//! of `scripts/make-test-rootfs.sh`) through `OciRuntime` for runc and
//! runsc, next to the raw `runc run` / `runsc --platform=ptrace run` of a
//! pre-made bundle with the same root, mounts, namespaces, user and
//! memory/pids limits in the same run.
//!
//! `cargo bench -p toolexec-oci --bench oci`
//!
//! The raw bundle lacks what toolexec adds per run: writing the bundle,
//! the seccomp profile, toolexec's own cgroups (created, read, removed),
//! the channel (descriptor or socket) and the forced delete.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolexec::Availability;
use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, RootfsSource};
use toolexec_runtime::{RunContext, RunRequest, Runtime, RuntimeLimits, ToolHost, Unit};

fn limits() -> RuntimeLimits {
    RuntimeLimits {
        wall_time: Duration::from_secs(30),
        cpu_time: Some(Duration::from_secs(3)),
        memory_bytes: Some(64 << 20),
        max_processes: Some(32),
        disk_bytes: Some(4 << 20),
        ..RuntimeLimits::default()
    }
}

/// A bundle `runc run` / `runsc run` can start directly.
fn raw_bundle(dir: &Path, rootfs: &Path) {
    let limits = limits();
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 65534, "gid": 65534},
            "args": ["/bin/true"],
            "env": ["PATH=/bin"],
            "cwd": "/tmp",
            "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
            "rlimits": [{"type": "RLIMIT_CORE", "soft": 0, "hard": 0}],
            "noNewPrivileges": true,
        },
        "root": {"path": rootfs, "readonly": true},
        "hostname": "bench",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755", "size=65536"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777", format!("size={}", limits.disk_bytes.unwrap_or(4096))]},
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "resources": {
                "devices": [{"allow": false, "access": "rwm"}],
                "memory": {"limit": limits.memory_bytes},
                "pids": {"limit": limits.max_processes},
            },
        },
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), spec.to_string()).unwrap();
}

/// `runc run` / `runsc run` of the pre-made bundle under a fresh id.
fn raw_run(flavor: OciFlavor, state: &Path, bundle: &Path) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = format!(
        "toolexec-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut cmd = Command::new(flavor.name());
    cmd.arg("--root").arg(state);
    if flavor == OciFlavor::Runsc {
        cmd.args(["--platform=ptrace", "--network=none"]);
    }
    let status = cmd
        .args(["run", "--bundle"])
        .arg(bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "raw {} run failed: {status}",
        flavor.name()
    );
}

fn run_once(rt: &tokio::runtime::Runtime, runtime: &OciRuntime) {
    let request =
        RunRequest::new(Unit::command(["/bin/true"]), runtime.max_profile()).with_limits(limits());
    let host = ToolHost::without_tools(&request.limits);
    let outcome = rt.block_on(runtime.run(
        request,
        RunContext {
            host,
            cancel: Default::default(),
            output: None,
        },
    ));
    assert!(outcome.is_ok(), "{outcome:?}");
}

fn bench(c: &mut Criterion) {
    let base: PathBuf =
        std::env::temp_dir().join(format!("toolexec-oci-bench-{}", std::process::id()));
    let rootfs = base.join("rootfs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-test-rootfs.sh");
    let made = Command::new("sh")
        .arg(script)
        .arg(&rootfs)
        .stdout(Stdio::null())
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: oci bench: make-test-rootfs.sh failed");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("oci_true");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for flavor in [OciFlavor::Runc, OciFlavor::Runsc] {
        let name = flavor.name();
        let mut config = OciConfig::new(flavor, RootfsSource::Dir(rootfs.clone()));
        config.work_dir = base.join(format!("bundles-{name}"));
        config.state_dir = base.join(format!("state-{name}"));
        config.cache_dir = base.join("cache");
        config.cgroup_parent = format!("toolexec-oci-bench-{}", std::process::id());
        let runtime = OciRuntime::new(config);
        if let Availability::Unavailable { reason } = runtime.availability() {
            eprintln!("SKIPPED: oci bench {name}: {reason}");
            continue;
        }
        let bundle = base.join(format!("raw-{name}"));
        raw_bundle(&bundle, &rootfs);
        let state = base.join(format!("raw-state-{name}"));
        group.bench_function(format!("raw_{name}"), |b| {
            b.iter(|| raw_run(flavor, &state, &bundle))
        });
        group.bench_function(format!("oci_runtime_{name}"), |b| {
            b.iter(|| run_once(&rt, &runtime))
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&base);
}

criterion_group!(benches, bench);
criterion_main!(benches);
