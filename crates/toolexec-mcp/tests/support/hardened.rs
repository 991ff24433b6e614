//! Sandbox runtimes for the hardened `execute_code` tests: bubblewrap with
//! the real `toolexec-code-worker` binary.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolexec::Availability;
use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
use toolexec_runtime::{ProfileMap, Runtime, Runtimes};

/// [`toolexec_testkit::skip`], then `None`.
fn skip<T>(test: &str, why: &str) -> Option<T> {
    toolexec_testkit::skip(test, why);
    None
}

/// `target/<profile>/toolexec-code-worker`, built with cargo if missing
/// (the binary of another package: cargo does not build it for these tests).
fn code_worker(test: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/<test> → target/<profile>
    let dir = exe.parent()?.parent()?.to_path_buf();
    let worker = dir.join("toolexec-code-worker");
    if worker.is_file() {
        return Some(worker);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args([
            "build",
            "-p",
            "toolexec-code",
            "--bin",
            "toolexec-code-worker",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let Ok(mut child) = build.spawn() else {
        return skip(
            test,
            "toolexec-code-worker is not built and cargo cannot start",
        );
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() && worker.is_file() => return Some(worker),
            Ok(Some(status)) => {
                return skip(
                    test,
                    &format!("cargo build -p toolexec-code --bin toolexec-code-worker: {status}"),
                );
            }
            Ok(None) if start.elapsed() > Duration::from_secs(600) => {
                let _ = child.kill();
                let _ = child.wait();
                return skip(test, "building toolexec-code-worker took over 10 minutes");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return skip(test, &format!("waiting for cargo: {e}")),
        }
    }
}

/// Runtimes where `hardened` (and every profile) maps to bubblewrap running
/// the real code worker; `None` after `SKIPPED` when bubblewrap or the
/// worker is missing.
pub(crate) fn bubblewrap_runtimes(test: &str) -> Option<Arc<Runtimes>> {
    let worker = code_worker(test)?;
    let runtime = BubblewrapRuntime::new(BubblewrapConfig {
        // The worker binary is also the sandbox init (`__sandbox-init`).
        init: Some(worker.clone()),
        script_worker: Some(worker),
        ..BubblewrapConfig::default()
    });
    if let Availability::Unavailable { reason } = runtime.availability() {
        return skip(test, &format!("bubblewrap: {reason}"));
    }
    let mut runtimes = Runtimes::new(ProfileMap::default());
    runtimes.register(runtime);
    Some(Arc::new(runtimes))
}
