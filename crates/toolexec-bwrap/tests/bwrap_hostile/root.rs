//! Host-root escapes: a unit must never be host uid 0, `/proc` must be
//! read-only with its leak-prone files masked, and hardened must fail
//! closed when a mechanism it promises is missing. Run as root (as CI does)
//! and as an unprivileged user (`scripts/test.sh` runs this binary again
//! as `nobody`).

use std::time::{Duration, Instant};

use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime, UidRange};
use toolexec_runtime::{Profile, RunStatus, Runtime, Unit};

use super::{config, is_root, limits, run, run_as, runtime, sh};

/// The uids (real, effective, saved, fs) of a host process.
fn host_uids(pid: &str) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect(),
    )
}

/// Host pids whose command line contains `marker`.
fn host_pids_with(marker: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|pid| pid.chars().all(|c| c.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

#[tokio::test]
async fn proc_is_read_only_and_leaky_files_are_masked() {
    let Some(rt) = runtime("proc_is_read_only_and_leaky_files_are_masked", config(0)) else {
        return;
    };
    let out = run(
        &rt,
        sh(r#"grep -E ' /proc ' /proc/self/mountinfo | cut -d' ' -f6
              for f in keys key-users timer_list kallsyms; do
                [ -e /proc/$f ] && [ -s /proc/$f ] && head -c 64 /proc/$f 2>/dev/null | grep -q . && echo "LEAK $f"
              done
              ls /proc/acpi 2>/dev/null | grep -q . && echo "LEAK acpi"
              echo done"#),
        limits(),
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    let first = out.stdout.lines().next().unwrap_or_default();
    assert!(
        first.split(',').any(|o| o == "ro"),
        "/proc is mounted {first}: {out:?}"
    );
    assert!(!out.stdout.contains("LEAK"), "{out:?}");
    assert!(out.stdout.ends_with("done\n"), "{out:?}");
}

#[tokio::test]
async fn units_never_run_as_host_root() {
    let Some(rt) = runtime("units_never_run_as_host_root", config(0)) else {
        return;
    };
    // A marker only this unit's command line carries.
    let marker = format!("29.{}", std::process::id());
    let unit = Unit::command(["sleep", marker.as_str()]);
    let task = tokio::spawn(async move { run(&rt, unit, limits()).await });
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        // bwrap's own processes carry the marker too (it is in their
        // argv): every one of them must be unprivileged on the host.
        for pid in host_pids_with(&marker) {
            if let Some(uids) = host_uids(&pid) {
                seen.push((pid, uids));
            }
        }
        if seen.iter().any(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(b"sleep"))
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    assert!(!seen.is_empty(), "the unit's processes were never seen");
    for (pid, uids) in &seen {
        assert!(
            uids.iter().all(|&u| u != 0),
            "process {pid} runs as host uid {uids:?}"
        );
    }
    if is_root() {
        let range = UidRange::default();
        assert!(
            seen.iter()
                .all(|(_, u)| u.iter().all(|&x| (range.first..=range.last()).contains(&x))),
            "{seen:?}"
        );
    }
}

/// Concurrent sandboxes never share a host identity: one sandbox (or the
/// host's `nobody`) could otherwise ptrace, signal or take descriptors
/// from another's processes.
#[tokio::test]
async fn concurrent_sandboxes_have_their_own_host_uid() {
    let Some(rt) = runtime("concurrent_sandboxes_have_their_own_host_uid", config(0)) else {
        return;
    };
    if !is_root() {
        // Unprivileged, every sandbox is this user's: nothing to lease.
        eprintln!(
            "concurrent_sandboxes_have_their_own_host_uid: not root, sandboxes run as this user"
        );
        return;
    }
    let rt = std::sync::Arc::new(rt);
    let markers: Vec<String> = (0..3)
        .map(|i| format!("28.{}{i}", std::process::id()))
        .collect();
    let tasks: Vec<_> = markers
        .iter()
        .map(|m| {
            let (rt, unit) = (rt.clone(), Unit::command(["sleep", m.as_str()]));
            tokio::spawn(async move { run(&rt, unit, limits()).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut uids = Vec::new();
    while Instant::now() < deadline && uids.len() < markers.len() {
        uids = markers
            .iter()
            .filter_map(|m| {
                host_pids_with(m)
                    .iter()
                    .find(|pid| {
                        std::fs::read(format!("/proc/{pid}/comm"))
                            .is_ok_and(|c| c.starts_with(b"sleep"))
                    })
                    .and_then(|pid| host_uids(pid))
                    .map(|u| u[0])
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for t in tasks {
        t.abort();
    }
    assert_eq!(
        uids.len(),
        markers.len(),
        "not every sandbox was seen: {uids:?}"
    );
    let mut distinct = uids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        uids.len(),
        "sandboxes share a host uid: {uids:?}"
    );
}

#[test]
fn uid_ranges_with_root_or_nobody_are_refused() {
    for (first, what) in [(0, "root"), (65_000, "nobody")] {
        let rt = BubblewrapRuntime::new(BubblewrapConfig {
            users: UidRange {
                first,
                count: 1000,
                ..UidRange::default()
            },
            ..config(0)
        });
        let reason = match rt.availability() {
            toolexec::Availability::Unavailable { reason } => reason,
            toolexec::Availability::Available => panic!("a range with {what} was accepted"),
        };
        assert!(reason.contains(what), "{reason}");
    }
}

#[tokio::test]
async fn hardened_fails_closed_without_the_init() {
    let Some(rt) = runtime(
        "hardened_fails_closed_without_the_init",
        BubblewrapConfig::default(),
    ) else {
        return;
    };
    assert_eq!(rt.max_profile(), Profile::Standard);
    let missing: Vec<_> = rt
        .mechanisms()
        .into_iter()
        .filter(|m| !m.enforced)
        .collect();
    assert!(missing.iter().any(|m| m.name == "landlock"), "{missing:?}");
    let out = run_as(&rt, sh("echo ran"), limits(), Profile::Hardened).await;
    let RunStatus::Error { error } = &out.status else {
        panic!("a hardened run without the init ran: {out:?}");
    };
    assert_eq!(error.code.as_str(), "backend_unavailable");
    assert!(error.message.contains("landlock"), "{error:?}");
    assert!(out.stdout.is_empty());
    // Standard still runs.
    let out = run_as(&rt, sh("echo ran"), limits(), Profile::Standard).await;
    assert_eq!(out.stdout, "ran\n", "{out:?}");
}

#[tokio::test]
async fn mechanisms_are_measured_inside_the_sandbox() {
    let Some(rt) = runtime("mechanisms_are_measured_inside_the_sandbox", config(0)) else {
        return;
    };
    let mechanisms = rt.mechanisms();
    let get = |name: &str| {
        mechanisms
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name} in {mechanisms:?}"))
    };
    for name in [
        "namespaces",
        "host user",
        "proc",
        "capabilities",
        "seccomp",
        "landlock",
    ] {
        assert!(get(name).enforced, "{:?}", get(name));
    }
    if is_root() {
        // As root (CI) every mechanism hardened promises is in force.
        assert!(get("cgroups").enforced, "{:?}", get("cgroups"));
        assert_eq!(rt.max_profile(), Profile::Hardened, "{mechanisms:?}");
        assert!(
            get("host user").detail.contains("of its own per sandbox"),
            "{:?}",
            get("host user")
        );
    } else {
        // An unprivileged user cannot make cgroups here: no hardened.
        if !get("cgroups").enforced {
            assert_eq!(rt.max_profile(), Profile::Standard);
        }
    }
}
