//! Hostile units against runc and runsc, each on a busybox root built by
//! `scripts/make-test-rootfs.sh`. A missing runtime prints
//! `SKIPPED: <test>: <why>`, or fails under `CI`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::json;
use toolexec::{Availability, CancellationToken, Exec};
use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, ReadOnlyBind, RootfsSource};
use toolexec_runtime::{
    LimitKind, RunContext, RunOutcome, RunRequest, RunStatus, Runtime, RuntimeLimits, ToolHost,
    Unit,
};

use toolexec_testkit::skip;

fn base_dir() -> PathBuf {
    std::env::temp_dir().join(format!("toolexec-oci-tests-{}", std::process::id()))
}

/// The busybox rootfs, built once per test process.
fn busybox_rootfs() -> Result<PathBuf, String> {
    static ROOTFS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ROOTFS
        .get_or_init(|| {
            let dir = base_dir().join("busybox-rootfs");
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-test-rootfs.sh");
            let out = std::process::Command::new("sh")
                .arg(script)
                .arg(&dir)
                .arg("--tar")
                .arg(base_dir().join("busybox.tar"))
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "make-test-rootfs.sh failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(dir)
        })
        .clone()
}

/// A configuration with work and cgroup directories of the test's own.
fn config(flavor: OciFlavor, rootfs: RootfsSource, test: &str) -> OciConfig {
    let mut config = OciConfig::new(flavor, rootfs);
    let base = base_dir();
    config.work_dir = base.join(format!("bundles-{}-{test}", flavor.name()));
    config.cache_dir = base.join("cache");
    config.state_dir = base.join(format!("state-{}", flavor.name()));
    config.channel_dir = base.join("gw");
    config.cgroup_parent = format!(
        "toolexec-oci-test-{}/{}-{test}",
        std::process::id(),
        flavor.name()
    );
    config
}

/// The runtime on the busybox root, or `None` after saying why.
fn runtime(test: &str, flavor: OciFlavor) -> Option<OciRuntime> {
    let rootfs = match busybox_rootfs() {
        Ok(dir) => dir,
        Err(why) => {
            skip(test, &why);
            return None;
        }
    };
    available(
        test,
        OciRuntime::new(config(flavor, RootfsSource::Dir(rootfs), test)),
    )
}

fn available(test: &str, runtime: OciRuntime) -> Option<OciRuntime> {
    match runtime.availability() {
        Availability::Available => Some(runtime),
        Availability::Unavailable { reason } => {
            skip(test, &reason);
            None
        }
    }
}

fn limits() -> RuntimeLimits {
    RuntimeLimits {
        wall_time: Duration::from_secs(30),
        cpu_time: Some(Duration::from_secs(3)),
        memory_bytes: Some(64 << 20),
        max_processes: Some(32),
        max_output_bytes: 1 << 20,
        disk_bytes: Some(4 << 20),
        ..RuntimeLimits::default()
    }
}

async fn run_with(
    rt: &OciRuntime,
    unit: Unit,
    limits: RuntimeLimits,
    host: ToolHost,
    cancel: CancellationToken,
) -> RunOutcome {
    let request = RunRequest::new(unit, rt.max_profile()).with_limits(limits);
    rt.run(
        request,
        RunContext {
            host,
            cancel,
            output: None,
        },
    )
    .await
}

async fn sh(rt: &OciRuntime, script: &str, limits: RuntimeLimits) -> RunOutcome {
    let host = ToolHost::without_tools(&limits);
    run_with(
        rt,
        Unit::command(["sh", "-c", script]),
        limits,
        host,
        CancellationToken::new(),
    )
    .await
}

fn assert_clean(rt: &OciRuntime) {
    let work = &rt.config().work_dir;
    let left: Vec<_> = std::fs::read_dir(work)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "bundles left behind: {left:?}");
    let cg = rt
        .config()
        .cgroup_root
        .join("memory")
        .join(&rt.config().cgroup_parent);
    let runs: Vec<_> = std::fs::read_dir(&cg)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name())
                .collect()
        })
        .unwrap_or_default();
    assert!(runs.is_empty(), "cgroups left behind: {runs:?}");
    // Empty parents go too, below every controller.
    for ctrl in ["memory", "pids", "cpuacct", "cpu", "devices", "freezer"] {
        let parent = rt
            .config()
            .cgroup_root
            .join(ctrl)
            .join(&rt.config().cgroup_parent);
        assert!(
            !parent.exists(),
            "parent cgroup left behind: {}",
            parent.display()
        );
    }
}

/// The unpacked roots in a rootfs cache (not the `.partial` scratch
/// directories), each with its inode: a re-unpack would change it.
fn unpacked_roots(cache: &Path) -> Vec<(std::ffi::OsString, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut roots: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (e.file_name(), e.metadata().unwrap().ino()))
        .collect();
    roots.sort();
    roots
}

/// [`assert_clean`] once cleanup started elsewhere (a dropped run) is
/// done, waiting up to 30 s for it.
async fn eventually_clean(rt: &OciRuntime) {
    for _ in 0..300 {
        if std::panic::catch_unwind(|| assert_clean(rt)).is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_clean(rt);
}

fn limit_of(outcome: &RunOutcome) -> Option<LimitKind> {
    outcome.status.limit()
}

/// A process in one of the runtime's run cgroups, as the host sees it.
#[derive(Debug)]
struct HostProcess {
    pid: u32,
    /// The parent's pid (`/proc/<pid>/stat`).
    ppid: u32,
    /// Real, effective, saved and filesystem uid (`/proc/<pid>/status`).
    uids: Vec<u32>,
    cmdline: String,
}

/// Every process in the runtime's run cgroups (pids controller), nested
/// ones included (runc puts the container in `<run>/c`).
fn cgroup_processes(config: &OciConfig) -> Vec<HostProcess> {
    let parent = config.cgroup_root.join("pids").join(&config.cgroup_parent);
    let mut found = Vec::new();
    let mut dirs = vec![parent];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                })
                .unwrap_or(0);
            let uids = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|l| {
                    l.split_whitespace()
                        .filter_map(|u| u.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .replace('\0', " ")
                        .trim()
                        .to_owned()
                })
                .unwrap_or_default();
            found.push(HostProcess {
                pid,
                ppid,
                uids,
                cmdline,
            });
        }
    }
    found
}

/// Whether `p` is a gVisor sandbox process (`runsc-sandbox`) or descends
/// from one, following parents within `seen` (a stub's parent is the
/// sandbox or another stub, all in the run's cgroup).
fn in_sandbox(seen: &[HostProcess], p: &HostProcess) -> bool {
    let mut current = p;
    for _ in 0..=seen.len() {
        if current.cmdline.starts_with("runsc-sandbox") {
            return true;
        }
        match seen.iter().find(|q| q.pid == current.ppid) {
            Some(parent) => current = parent,
            None => return false,
        }
    }
    false
}

/// A configuration whose root is the host's `/usr` bound read-only (for
/// dynamically linked programs: python3, the script worker).
fn usr_config(flavor: OciFlavor, test: &str) -> OciConfig {
    let root = base_dir().join(format!("usr-rootfs-{}-{test}", flavor.name()));
    for dir in ["usr", "tmp", "proc", "dev", "etc", "run"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    // runc gives the /tmp tmpfs the mode of the directory it covers.
    std::fs::set_permissions(
        root.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("sbin", "usr/sbin"),
    ] {
        let _ = std::os::unix::fs::symlink(to, root.join(link));
    }
    let mut config = config(flavor, RootfsSource::Dir(root), test);
    config.binds = vec![ReadOnlyBind {
        source: "/usr".into(),
        destination: "/usr".into(),
    }];
    config
}

/// The `script-worker` example next to this test binary (built by
/// `cargo test -p toolexec-oci`, which builds the crate's examples).
fn script_worker() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let worker = exe.parent()?.parent()?.join("examples/script-worker");
    worker.is_file().then_some(worker)
}

const SCRIPT: &str = r#"
const r = await tools.math.add({a: 1, b: 2});
console.log("sum", r.result);
const s = await tools.math.add({a: r.result, b: 0});
return s.result * 2;
"#;

macro_rules! hostile_suite {
    ($module:ident, $flavor:expr) => {
        mod $module {
            use super::*;

            const FLAVOR: OciFlavor = $flavor;

            #[tokio::test]
            async fn sleep_past_deadline_and_cancel() {
                let Some(rt) = runtime("sleep_past_deadline_and_cancel", FLAVOR) else { return };
                let mut l = limits();
                l.wall_time = Duration::from_millis(1500);
                let out = sh(&rt, "sleep 60", l).await;
                assert_eq!(limit_of(&out), Some(LimitKind::WallTime), "{out:?}");
                assert_clean(&rt);
                let cancel = CancellationToken::new();
                let c = cancel.clone();
                tokio::spawn(async move { tokio::time::sleep(Duration::from_millis(800)).await; c.cancel() });
                let out = run_with(&rt, Unit::command(["sleep", "60"]), limits(), ToolHost::without_tools(&limits()), cancel).await;
                assert_eq!(out.status, RunStatus::Cancelled, "{out:?}");
                assert_clean(&rt);
                // Dropping the future midway cleans up too.
                let run = sh(&rt, "sleep 60", limits());
                let _ = tokio::time::timeout(Duration::from_millis(1500), run).await;
                // Drop-time cleanup runs on a thread of its own.
                eventually_clean(&rt).await;
            }

            #[tokio::test]
            async fn symlink_proc_and_syscall_escapes() {
                let Some(rt) = runtime("symlink_proc_and_syscall_escapes", FLAVOR) else { return };
                let script = "ln -s / /tmp/up; cat /tmp/up/etc/shadow /tmp/up/../../etc/shadow /proc/1/root/etc/shadow; \
                     ls /proc/1/cwd/; cat /proc/self/mountinfo >/dev/null; \
                     unshare -U true && echo unshared; mount -t tmpfs none /tmp && echo mounted; \
                     chroot / true && echo chrooted; echo 1 > /proc/sysrq-trigger && echo sysrq; \
                     kill -9 1; echo still-here";
                let out = sh(&rt, script, limits()).await;
                for bad in ["unshared", "mounted", "chrooted", "sysrq"] {
                    assert!(!out.stdout.contains(bad), "{bad}: {out:?}");
                }
                if let Ok(shadow) = std::fs::read_to_string("/etc/shadow") {
                    let first = shadow.lines().next().unwrap_or("root:");
                    assert!(!out.stdout.contains(first), "host /etc/shadow leaked: {out:?}");
                }
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn tarball_rootfs_is_unpacked_once() {
                let test = "tarball_rootfs_is_unpacked_once";
                if let Err(why) = busybox_rootfs() { return skip(test, &why) }
                let Some(rt) = available(test, OciRuntime::new(config(FLAVOR, RootfsSource::Tarball(base_dir().join("busybox.tar")), test))) else { return };
                let out = sh(&rt, "echo from-tar", limits()).await;
                assert!(out.is_ok(), "{out:?}");
                assert_eq!(out.stdout, "from-tar\n");
                // The runc and runsc variants share the cache and the
                // tarball: one unpacked root, whoever came first; scratch
                // (dot) directories of a concurrent unpack do not count.
                let cached = unpacked_roots(&rt.config().cache_dir);
                assert_eq!(cached.len(), 1, "{cached:?}");
                assert!(sh(&rt, "true", limits()).await.is_ok());
                assert_eq!(unpacked_roots(&rt.config().cache_dir), cached);
                let hostile = base_dir().join(format!("not-a-tar-{}", FLAVOR.name()));
                std::fs::write(&hostile, b"definitely not a tarball").unwrap();
                let broken = OciRuntime::new(config(FLAVOR, RootfsSource::Tarball(hostile), "broken-tar"));
                let out = sh(&broken, "true", limits()).await;
                let RunStatus::Error { error } = &out.status else { panic!("{out:?}") };
                assert_eq!(error.code.as_str(), "backend_unavailable");
                assert!(matches!(broken.availability(), Availability::Unavailable { .. }));
            }

            /// Issue 10: seen from the host, no process running the unit
            /// is uid 0 (real, effective, saved or filesystem uid). Under
            /// runsc, the unit runs in the sandbox process and its ptrace
            /// stubs; the `runsc run` launcher and gVisor's gofer (a file
            /// proxy), which run no unit code, are root by gVisor's design
            /// and are the exceptions.
            #[tokio::test]
            async fn unit_is_not_host_root() {
                let Some(rt) = runtime("unit_is_not_host_root", FLAVOR) else { return };
                let cancel = CancellationToken::new();
                let unit = run_with(&rt, Unit::command(["sleep", "120"]), limits(),
                    ToolHost::without_tools(&limits()), cancel.clone());
                let watch = async {
                    let mut seen = Vec::new();
                    // Up to 60 s for the unit to be running.
                    for _ in 0..600 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        seen = cgroup_processes(rt.config());
                        let running = match FLAVOR {
                            OciFlavor::Runc => seen.iter().any(|p| p.cmdline.starts_with("sleep 120")),
                            // The sandbox and at least one ptrace stub
                            // (stubs have no command line).
                            OciFlavor::Runsc => seen.iter().any(|p| p.cmdline.starts_with("runsc-sandbox"))
                                && seen.iter().any(|p| p.cmdline.is_empty() && in_sandbox(&seen, p)),
                        };
                        if running {
                            break;
                        }
                    }
                    cancel.cancel();
                    seen
                };
                let (out, seen) = tokio::join!(unit, watch);
                assert_eq!(out.status, RunStatus::Cancelled, "{out:?}");
                // Under runsc the unit runs in the sandbox and its ptrace
                // stubs (its descendants); the launcher and the gofer are
                // not below it. Decided by the process tree: a command
                // line is empty for a stub, but also for a process caught
                // mid-exec or exited (gVisor's gofer re-executes itself).
                let gvisor_host_side = |p: &HostProcess| FLAVOR == OciFlavor::Runsc && !in_sandbox(&seen, p);
                let unit_processes: Vec<_> = seen.iter().filter(|p| !gvisor_host_side(p)).collect();
                assert!(!unit_processes.is_empty(), "the unit never ran: {seen:?}");
                for p in &unit_processes {
                    assert_eq!(p.uids.len(), 4, "{p:?}");
                    assert!(p.uids.iter().all(|&u| u == 65534), "unit process {} has host uids other than nobody: {p:?} (all: {seen:?})", p.pid);
                }
                if FLAVOR == OciFlavor::Runc {
                    // No user namespace: the unit's ids are the host's.
                    let map = sh(&rt, "cat /proc/self/uid_map; id -u", limits()).await;
                    assert!(map.stdout.ends_with("\n65534\n"), "{map:?}");
                }
                assert_clean(&rt);
            }

            /// Issue 10: a unit user that is root on the host is refused
            /// with a typed error before anything starts.
            #[tokio::test]
            async fn root_unit_user_is_refused() {
                let test = "root_unit_user_is_refused";
                let rootfs = match busybox_rootfs() {
                    Ok(dir) => dir,
                    Err(why) => return skip(test, &why),
                };
                for user in [(0, 0), (0, 65534), (65534, 0)] {
                    let mut config = config(FLAVOR, RootfsSource::Dir(rootfs.clone()), test);
                    config.user = user;
                    let rt = OciRuntime::new(config);
                    let out = sh(&rt, "id -u", limits()).await;
                    let RunStatus::Error { error } = &out.status else { panic!("{user:?} ran: {out:?}") };
                    assert_eq!(error.code.as_str(), "backend_unavailable", "{error:?}");
                    assert_eq!(error.details.as_ref().unwrap()["field"], "runtime.user");
                    assert!(matches!(rt.availability(), Availability::Unavailable { .. }));
                    assert_clean(&rt);
                }
            }

            /// Issue 10, defect 6: bundles, runtime state, the rootfs cache
            /// and the channel sockets' parent are refused (typed, naming
            /// the setting and the path) when another local user owns them
            /// or a directory above them, or when they are symlinks; nothing
            /// is written there and nothing runs.
            #[tokio::test]
            async fn directories_others_control_are_refused() {
                let test = "directories_others_control_are_refused";
                let Some(rt) = runtime(test, FLAVOR) else { return };
                assert_eq!(toolexec_sandbox::channel_socket::euid(), 0, "runtime() needs root");
                let attack = base_dir().join(format!("attack-{}", FLAVOR.name()));
                let _ = std::fs::remove_dir_all(&attack);
                std::fs::create_dir_all(&attack).unwrap();
                // The attacker's directory, their symlink to it, and a
                // symlink of ours to it.
                let theirs = attack.join("theirs");
                std::fs::create_dir(&theirs).unwrap();
                std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
                let their_link = attack.join("their-link");
                std::os::unix::fs::symlink(&theirs, &their_link).unwrap();
                std::os::unix::fs::lchown(&their_link, Some(65534), Some(65534)).unwrap();
                let our_link = attack.join("our-link");
                std::os::unix::fs::symlink(&theirs, &our_link).unwrap();
                type Set = fn(&mut OciConfig, PathBuf);
                let mut settings: Vec<(&str, Set)> = vec![
                    ("runtime.work_dir", |c, p| c.work_dir = p),
                    ("runtime.state_dir", |c, p| c.state_dir = p),
                    ("runtime.cache_dir", |c, p| {
                        c.cache_dir = p;
                        c.rootfs = RootfsSource::Tarball(base_dir().join("busybox.tar"));
                    }),
                ];
                if FLAVOR == OciFlavor::Runsc {
                    settings.push(("runtime.channel_dir", |c, p| c.channel_dir = p));
                }
                let cases = [
                    (theirs.clone(), theirs.clone()),
                    (theirs.join("below"), theirs.clone()),
                    (their_link.join("below"), their_link.clone()),
                    (our_link.clone(), our_link.clone()),
                ];
                for (field, set) in settings {
                    for (path, offending) in &cases {
                        let mut config = rt.config().clone();
                        set(&mut config, path.clone());
                        let out = sh(&OciRuntime::new(config), "echo ran", limits()).await;
                        let RunStatus::Error { error } = &out.status else { panic!("{field} = {}: {out:?}", path.display()) };
                        assert_eq!(error.code.as_str(), "backend_unavailable", "{error:?}");
                        let details = error.details.as_ref().unwrap();
                        assert_eq!(details["field"], field, "{error:?}");
                        assert_eq!(details["path"], offending.display().to_string(), "{error:?}");
                        assert!(!out.stdout.contains("ran"));
                        let planted: Vec<_> = std::fs::read_dir(&theirs).unwrap().flatten().map(|e| e.path()).collect();
                        assert!(planted.is_empty(), "{field}: written into the attacker's directory: {planted:?}");
                    }
                }
                assert_clean(&rt);
                std::fs::remove_dir_all(&attack).unwrap();
            }

            /// The default directories are private and not in the shared
            /// temporary directory when running as root.
            #[tokio::test]
            async fn default_directories_are_private() {
                let config = OciConfig::new(FLAVOR, RootfsSource::Dir("/nonexistent".into()));
                if toolexec_sandbox::channel_socket::euid() == 0 {
                    for dir in [&config.work_dir, &config.state_dir, &config.cache_dir, &config.channel_dir] {
                        assert!(!dir.starts_with(std::env::temp_dir()), "{}", dir.display());
                        assert!(!dir.starts_with("/tmp"), "{}", dir.display());
                    }
                }
                assert_eq!(config.user, (65534, 65534));
            }

            /// Runs of one runtime start and end concurrently below one
            /// parent: each run's cleanup removes the parent once empty,
            /// which must never pull it from under a run being set up
            /// (runc once failed reading the parent's `cpuset.cpus`).
            #[tokio::test]
            async fn concurrent_runs_share_the_parent() {
                const RUNS: usize = 8;
                const ROUNDS: usize = 3;
                let Some(rt) = runtime("concurrent_runs_share_the_parent", FLAVOR) else { return };
                let rt = std::sync::Arc::new(rt);
                for _ in 0..ROUNDS {
                    let mut runs = tokio::task::JoinSet::new();
                    for i in 0..RUNS {
                        let rt = rt.clone();
                        // Staggered ends: cleanups land while others set up.
                        let script = format!("sleep 0.{i}; echo {i}");
                        runs.spawn(async move { (i, sh(&rt, &script, limits()).await) });
                    }
                    while let Some(joined) = runs.join_next().await {
                        let (i, out) = joined.unwrap();
                        assert!(out.is_ok() && out.stdout == format!("{i}\n"), "run {i}: {out:?}");
                    }
                }
                assert_clean(&rt);
            }

            /// A script unit runs through the worker bound into the
            /// container and calls tools via the channel under the budget;
            /// without a worker, script units are a typed refusal.
            #[tokio::test]
            async fn script_unit_through_worker() {
                let test = "script_unit_through_worker";
                let Some(worker) = script_worker() else {
                    return skip(test, "examples/script-worker is not built (cargo build -p toolexec-oci --example script-worker)");
                };
                let mut config = usr_config(FLAVOR, test);
                config.script_worker = Some(worker);
                let Some(rt) = available(test, OciRuntime::new(config)) else { return };
                assert!(rt.unit_kinds().contains(&toolexec_runtime::UnitKind::Script));
                let run = |budget: usize| {
                    let exec = Exec::builder().catalog(toolexec_testkit::catalog()).build();
                    let mut l = limits();
                    l.max_tool_calls = budget;
                    l.memory_bytes = Some(256 << 20);
                    let host = ToolHost::new(exec, &l, CancellationToken::new());
                    run_with(&rt, Unit::javascript(SCRIPT), l, host, CancellationToken::new())
                };
                let out = run(5).await;
                assert!(out.is_ok(), "{out:?}");
                let value = out.value.clone().unwrap_or_else(|| panic!("no value: {out:?}"));
                assert_eq!(value["value"], json!(6), "{out:?}");
                assert!(value["stdout"].as_str().unwrap_or("").contains("sum 3"), "{out:?}");
                assert_eq!(out.tool_calls.len(), 2, "{out:?}");
                // Budget 1: the second call is refused, the host logs one.
                let out = run(1).await;
                let value = out.value.clone().unwrap_or_else(|| panic!("no value: {out:?}"));
                assert_eq!(value["status"]["limit"], json!("tool_calls"), "{out:?}");
                assert_eq!(out.tool_calls.len(), 1, "{out:?}");
                assert!(out.tool_calls[0].ok, "{out:?}");
                assert_clean(&rt);

                let mut missing = usr_config(FLAVOR, "script-missing-worker");
                missing.script_worker = None;
                let rt = OciRuntime::new(missing);
                assert!(!rt.unit_kinds().contains(&toolexec_runtime::UnitKind::Script));
                let out = run_with(&rt, Unit::javascript("1"), limits(), ToolHost::without_tools(&limits()), CancellationToken::new()).await;
                let RunStatus::Error { error } = &out.status else { panic!("{out:?}") };
                assert_eq!(error.code.as_str(), "backend_unavailable");
                assert_eq!(error.details.as_ref().unwrap()["field"], "runtime.script_worker");
            }

            /// The last channel frame a unit writes before it exits (the
            /// script worker's `result`, a notification nobody answers)
            /// is kept even when the host sees the launcher's exit before
            /// it reads the frame. The host's only thread is held from the
            /// unit's `freeze` line until the launcher has exited (a zombie:
            /// nothing reaps it while the thread is held) and the run's
            /// cgroups hold no process, so the frame, the exit and the
            /// pipes' end all arrive in one batch.
            #[tokio::test(flavor = "current_thread")]
            async fn last_frame_before_exit_is_kept() {
                let test = "last_frame_before_exit_is_kept";
                if !Path::new("/usr/bin/python3").exists() {
                    return skip(test, "/usr/bin/python3 is missing");
                }
                let Some(rt) = available(test, OciRuntime::new(usr_config(FLAVOR, test))) else { return };
                let mut l = limits();
                l.memory_bytes = Some(256 << 20);
                let (sink, mut chunks) = toolexec_runtime::OutputSink::channel();
                let config = rt.config().clone();
                let freezer = tokio::spawn(async move {
                    let mut seen = Vec::new();
                    while let Some(chunk) = chunks.recv().await {
                        seen.extend_from_slice(&chunk.bytes);
                        if seen.ends_with(b"freeze\n") {
                            wait_exited(launcher_pid(&config.work_dir));
                            for _ in 0..12_000 {
                                if cgroup_processes(&config).is_empty() {
                                    return true;
                                }
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            panic!("the sandbox outlived its launcher: {:?}", cgroup_processes(&config));
                        }
                    }
                    false
                });
                let ctx = RunContext { host: ToolHost::without_tools(&l), cancel: CancellationToken::new(), output: Some(sink) };
                let request = RunRequest::new(Unit::command(["python3", "-c", PY_LAST_FRAME]), rt.max_profile()).with_limits(l);
                let out = rt.run(request, ctx).await;
                assert!(freezer.await.unwrap(), "the unit never asked to freeze: {out:?}");
                assert!(out.is_ok(), "{out:?}");
                assert_eq!(out.value, Some(json!({"kept": true})), "{out:?}");
                assert_clean(&rt);
            }

        }
    };
}

/// A unit that says hello, prints `freeze`, and two seconds later sends its
/// `result` and exits.
const PY_LAST_FRAME: &str = r#"
import json, os, socket, struct, sys, time
if 'TOOLEXEC_CHANNEL_FD' in os.environ:
    s = socket.socket(fileno=int(os.environ['TOOLEXEC_CHANNEL_FD']))
else:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ['TOOLEXEC_CHANNEL_SOCKET'])
def send(message):
    body = json.dumps(message).encode()
    s.sendall(struct.pack('>I', len(body)) + body)
send({"id": 1, "method": "hello", "protocol": "toolexec-channel", "version": 1})
(n,) = struct.unpack('>I', s.recv(4, socket.MSG_WAITALL))
s.recv(n, socket.MSG_WAITALL)
print("freeze", flush=True)
time.sleep(2)
send({"method": "result", "value": {"kept": True}})
"#;

/// The pid of this process's child whose command line names a bundle in
/// `bundles` (the launcher of the one run there).
fn launcher_pid(bundles: &Path) -> u32 {
    let me = std::process::id();
    let needle = bundles.display().to_string();
    let found: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(me.to_string().as_str())
                && String::from_utf8_lossy(&cmdline).contains(&needle)
        })
        .collect();
    assert_eq!(found.len(), 1, "launchers of {needle}: {found:?}");
    found[0]
}

/// Blocks the calling thread until `pid`, a child of this process, has
/// exited (its whole thread group: what a wait would report), without
/// reaping it, at most 120 s.
fn wait_exited(pid: u32) {
    for _ in 0..12_000 {
        // SAFETY: a zeroed siginfo_t is valid; waitid only writes to it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall; WNOWAIT leaves the child to its owner.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        // SAFETY: the pid field is set when waitid reports a child.
        if r != 0 || unsafe { info.si_pid() } == pid as libc::pid_t {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("launcher {pid} still runs after 120 s");
}

hostile_suite!(runc, OciFlavor::Runc);
hostile_suite!(runsc, OciFlavor::Runsc);
