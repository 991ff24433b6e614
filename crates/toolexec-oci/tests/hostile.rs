//! Hostile units against runc and runsc, each on a busybox root built by
//! `scripts/make-test-rootfs.sh`. A missing runtime prints
//! `SKIPPED: <test>: <why>`, or fails under `CI`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::json;
use toolexec::{Availability, CancellationToken, Exec};
use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, ReadOnlyBind, RootfsSource};
use toolexec_runtime::{
    LimitKind, NetworkPolicy, RunContext, RunOutcome, RunRequest, RunStatus, Runtime,
    RuntimeLimits, ToolHost, Unit,
};
use toolexec_sandbox::seccomp::DENIED;

fn skip(test: &str, why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

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
    config.gateway_dir = base.join("gw");
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

/// Issue 10's escape, as a unit script: rewrite kernel settings with their
/// own values (harmless if it works, but it must not), poke sysrq, /sys and
/// kernel memory. Each success prints an `ESCAPE` line.
const HOST_KERNEL_SCRIPT: &str = r#"
echo "$(cat /proc/sys/kernel/core_pattern)" > /proc/sys/kernel/core_pattern && echo ESCAPE core_pattern
echo "$(cat /proc/sys/kernel/modprobe)" > /proc/sys/kernel/modprobe && echo ESCAPE modprobe
echo h > /proc/sysrq-trigger && echo ESCAPE sysrq-trigger
for f in /sys/kernel/uevent_helper /sys/kernel/profiling /sys/module/printk/parameters/time; do
  if [ -e "$f" ]; then v=$(cat "$f"); echo "$v" > "$f" && echo "ESCAPE $f"; fi
done
touch /sys/toolexec-probe && echo ESCAPE sys-create
mkdir /sys/fs/toolexec-probe && echo ESCAPE sys-mkdir
head -c 16 /proc/kcore > /dev/null && echo ESCAPE kcore
head -c 16 /proc/keys > /dev/null && cat /proc/keys | grep -q . && echo ESCAPE keys
echo "uid_map: $(cat /proc/self/uid_map)"
echo "id: $(id -u):$(id -g)"
"#;

/// A configuration whose root is the host's `/usr` bound read-only (for
/// dynamically linked programs: python3, the script worker).
fn usr_config(flavor: OciFlavor, test: &str) -> OciConfig {
    let root = base_dir().join(format!("usr-rootfs-{}-{test}", flavor.name()));
    for dir in ["usr", "tmp", "proc", "dev", "etc", "run"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
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

/// A python3 script calling, by number, system calls of the shared
/// deny-list that would succeed (or fail with another errno) without the
/// filter, printing each one's errno (0: it ran) after a control call
/// that must work; and the names it probes.
fn deny_probe() -> (String, Vec<&'static str>) {
    // Arguments: on the caller itself, or a bad descriptor.
    const PROBES: [(&str, &str); 4] = [
        ("kcmp", "me, me, 1, 0, 0"),
        ("pidfd_getfd", "-1, 0, 0"),
        ("unshare", "0"),
        ("modify_ldt", "0, ctypes.addressof(buf), 16"),
    ];
    let mut script = format!(
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def call(nr, *args):\n    \
             ctypes.set_errno(0)\n    \
             r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n    \
             return 0 if r >= 0 else ctypes.get_errno()\n\
         me = os.getpid()\n\
         buf = ctypes.create_string_buffer(16)\n\
         print('getpid', call({}))\n",
        libc::SYS_getpid
    );
    let mut probed = Vec::new();
    for (name, args) in PROBES {
        let Some((_, nr)) = DENIED.iter().find(|(n, _)| *n == name) else {
            continue; // not on the list for this architecture
        };
        script.push_str(&format!("print('{name}', call({nr}, {args}))\n"));
        probed.push(name);
    }
    (script, probed)
}

macro_rules! hostile_suite {
    ($module:ident, $flavor:expr) => {
        mod $module {
            use super::*;

            const FLAVOR: OciFlavor = $flavor;

            #[tokio::test]
            async fn echo_and_exit_codes() {
                let Some(rt) = runtime("echo_and_exit_codes", FLAVOR) else { return };
                let ok = sh(&rt, "echo hello; id -u", limits()).await;
                assert!(ok.is_ok(), "{ok:?}");
                assert_eq!(ok.stdout, "hello\n65534\n");
                assert!(ok.enforcement.iter().all(|e| e.is_enforced()), "{:?}", ok.enforcement);
                let failed = sh(&rt, "echo oops >&2; exit 7", limits()).await;
                assert_eq!(failed.exit_code, Some(7), "{failed:?}");
                assert!(matches!(failed.status, RunStatus::Failed { .. }));
                assert_eq!(failed.stderr, "oops\n");
                let stdin = run_with(&rt, Unit::Command(toolexec_runtime::CommandUnit {
                    argv: vec!["cat".into()], stdin: Some("piped".into()), ..Default::default()
                }), limits(), ToolHost::without_tools(&limits()), CancellationToken::new()).await;
                assert_eq!(stdin.stdout, "piped", "{stdin:?}");
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn host_secrets_stay_out() {
                let Some(rt) = runtime("host_secrets_stay_out", FLAVOR) else { return };
                // SAFETY: set once, before any container starts from this test.
                unsafe { std::env::set_var("TOOLEXEC_OCI_TEST_SECRET", "s3cr3t-value") };
                let out = sh(&rt, "env; cat /etc/shadow; cat /proc/1/environ; ls /root", limits()).await;
                assert!(!out.stdout.contains("s3cr3t-value") && !out.stderr.contains("s3cr3t-value"), "{out:?}");
                if let Ok(shadow) = std::fs::read_to_string("/etc/shadow") {
                    let first = shadow.lines().next().unwrap_or("root:");
                    assert!(!out.stdout.contains(first), "host /etc/shadow leaked: {out:?}");
                }
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn writes_outside_tmp_fail() {
                let Some(rt) = runtime("writes_outside_tmp_fail", FLAVOR) else { return };
                let marker = rt.config().work_dir.parent().unwrap().join(format!("marker-{}", FLAVOR.name()));
                std::fs::write(&marker, "untouched").unwrap();
                let script = format!(
                    "echo x > /pwned || echo ro1; echo x >> /etc/passwd || echo ro2; echo x > {m} || echo ro3; \
                     echo ok > /tmp/f && cat /tmp/f; head -c 8000000 /dev/zero > /tmp/big || echo full",
                    m = marker.display()
                );
                let out = sh(&rt, &script, limits()).await;
                for word in ["ro1", "ro2", "ro3", "ok", "full"] {
                    assert!(out.stdout.contains(word), "missing {word}: {out:?}");
                }
                assert_eq!(std::fs::read_to_string(&marker).unwrap(), "untouched");
                assert!(!rt.config().work_dir.join("pwned").exists());
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn network_is_off() {
                let Some(rt) = runtime("network_is_off", FLAVOR) else { return };
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                listener.set_nonblocking(true).unwrap();
                let port = listener.local_addr().unwrap().port();
                let out = sh(&rt, &format!("echo hi | nc -w 2 127.0.0.1 {port} && echo connected; ip link 2>/dev/null; cat /proc/net/dev"), limits()).await;
                assert!(!out.stdout.contains("connected"), "{out:?}");
                assert!(listener.accept().is_err(), "the container reached the host listener");
                assert!(!out.stdout.contains("eth0"), "an interface besides loopback: {out:?}");
                let mut allow = limits();
                allow.network = NetworkPolicy::Allow { hosts: vec!["example.com".into()] };
                let refused = sh(&rt, "true", allow).await;
                let RunStatus::Error { error } = &refused.status else { panic!("{refused:?}") };
                assert_eq!(error.code.as_str(), "invalid_request");
                assert_eq!(error.details.as_ref().unwrap()["field"], "limits.network");
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn fork_bomb_hits_pids_limit() {
                let Some(rt) = runtime("fork_bomb_hits_pids_limit", FLAVOR) else { return };
                let mut l = limits();
                l.wall_time = Duration::from_secs(4);
                let out = sh(&rt, "f() { f | f & }; f; sleep 30", l).await;
                assert_eq!(limit_of(&out), Some(LimitKind::Processes), "{:?}", out.status);
                assert_clean(&rt);
                assert!(sh(&rt, "echo alive", limits()).await.is_ok());
            }

            #[tokio::test]
            async fn memory_bomb_is_oom_killed() {
                let Some(rt) = runtime("memory_bomb_is_oom_killed", FLAVOR) else { return };
                let mut l = limits();
                l.wall_time = Duration::from_secs(60);
                l.cpu_time = None;
                let out = sh(&rt, "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}", l).await;
                assert_eq!(limit_of(&out), Some(LimitKind::Memory), "{out:?}");
                assert!(!out.stdout.contains("survived"));
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn cpu_spin_hits_cpu_limit() {
                let Some(rt) = runtime("cpu_spin_hits_cpu_limit", FLAVOR) else { return };
                let mut l = limits();
                l.cpu_time = Some(Duration::from_secs(1));
                let out = sh(&rt, "while :; do :; done", l).await;
                assert_eq!(limit_of(&out), Some(LimitKind::CpuTime), "{out:?}");
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn giant_output_is_cut() {
                let Some(rt) = runtime("giant_output_is_cut", FLAVOR) else { return };
                let mut l = limits();
                l.max_output_bytes = 64 * 1024;
                let out = sh(&rt, "yes aaaaaaaaaaaaaaaaaaaaaaaa", l).await;
                assert_eq!(limit_of(&out), Some(LimitKind::Output), "{:?}", out.status);
                assert!(out.stdout.len() + out.stderr.len() <= 64 * 1024);
                assert_clean(&rt);
            }

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
            async fn signals_cannot_reach_the_parent() {
                let Some(rt) = runtime("signals_cannot_reach_the_parent", FLAVOR) else { return };
                let me = std::process::id();
                let out = sh(&rt, &format!("kill -9 {me} && echo killed; kill -9 -1; echo after"), limits()).await;
                assert!(!out.stdout.contains("killed"), "{out:?}");
                // Still alive: a normal unit runs.
                let ok = sh(&rt, "echo alive", limits()).await;
                assert!(ok.is_ok() && ok.stdout == "alive\n", "{ok:?}");
                assert_clean(&rt);
            }

            #[tokio::test]
            async fn bad_requests_are_typed_errors() {
                let Some(rt) = runtime("bad_requests_are_typed_errors", FLAVOR) else { return };
                let cases = [
                    (Unit::command(Vec::<String>::new()), "unit.argv"),
                    (Unit::command(["echo", "a\0b"]), "unit.argv"),
                    (Unit::Wasm(toolexec_runtime::WasmUnit {
                        code: toolexec_runtime::WasmCode::Wat("(module)".into()),
                        entry: None, input: None, args: Vec::new(),
                    }), "unit.kind"),
                    (Unit::Command(toolexec_runtime::CommandUnit {
                        argv: vec!["true".into()], cwd: Some("relative".into()), ..Default::default()
                    }), "unit.cwd"),
                    (Unit::Command(toolexec_runtime::CommandUnit {
                        argv: vec!["true".into()],
                        env: [("TOOLEXEC_GATEWAY_FD".to_owned(), "9".to_owned())].into(),
                        ..Default::default()
                    }), "unit.env"),
                    (Unit::Command(toolexec_runtime::CommandUnit {
                        argv: vec!["true".into()],
                        env: [("A=B".to_owned(), "x".to_owned())].into(),
                        ..Default::default()
                    }), "unit.env"),
                ];
                for (unit, field) in cases {
                    let out = run_with(&rt, unit, limits(), ToolHost::without_tools(&limits()), CancellationToken::new()).await;
                    let RunStatus::Error { error } = &out.status else { panic!("{field}: {out:?}") };
                    assert_eq!(error.code.as_str(), "invalid_request", "{error:?}");
                    assert_eq!(error.details.as_ref().unwrap()["field"], field);
                }
                let missing = sh(&rt, "exec /no/such/program", limits()).await;
                assert!(!missing.is_ok());
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

            /// Issue 10: as root on the host, a unit cannot write host
            /// kernel settings (`/proc/sys`), sysrq or `/sys`, nor read
            /// kernel memory, and it is not uid 0.
            #[tokio::test]
            async fn host_kernel_is_out_of_reach() {
                let Some(rt) = runtime("host_kernel_is_out_of_reach", FLAVOR) else { return };
                let core_before = std::fs::read("/proc/sys/kernel/core_pattern").unwrap();
                let out = sh(&rt, HOST_KERNEL_SCRIPT, limits()).await;
                assert!(out.is_ok(), "{out:?}");
                assert!(!out.stdout.contains("ESCAPE"), "{}", out.stdout);
                assert!(out.stdout.contains("id: 65534:65534"), "{out:?}");
                assert_eq!(std::fs::read("/proc/sys/kernel/core_pattern").unwrap(), core_before);
                assert_clean(&rt);
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
            /// and the gateway sockets' parent are refused (typed, naming
            /// the setting and the path) when another local user owns them
            /// or a directory above them, or when they are symlinks; nothing
            /// is written there and nothing runs.
            #[tokio::test]
            async fn directories_others_control_are_refused() {
                let test = "directories_others_control_are_refused";
                let Some(rt) = runtime(test, FLAVOR) else { return };
                assert_eq!(toolexec_sandbox::gateway_socket::euid(), 0, "runtime() needs root");
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
                    settings.push(("runtime.gateway_dir", |c, p| c.gateway_dir = p));
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
                if toolexec_sandbox::gateway_socket::euid() == 0 {
                    for dir in [&config.work_dir, &config.state_dir, &config.cache_dir, &config.gateway_dir] {
                        assert!(!dir.starts_with(std::env::temp_dir()), "{}", dir.display());
                        assert!(!dir.starts_with("/tmp"), "{}", dir.display());
                    }
                }
                assert_eq!(config.user, (65534, 65534));
            }

            /// Threads start (glibc tries clone3 first; the seccomp
            /// profile must let it fall back or succeed).
            #[tokio::test]
            async fn threads_start() {
                let test = "threads_start";
                if !Path::new("/usr/bin/python3").exists() {
                    return skip(test, "/usr/bin/python3 is missing");
                }
                let Some(rt) = available(test, OciRuntime::new(usr_config(FLAVOR, test))) else { return };
                let mut l = limits();
                l.memory_bytes = Some(256 << 20);
                let py = "import threading\nt = threading.Thread(target=lambda: print('thread ok'))\nt.start(); t.join()";
                let out = run_with(&rt, Unit::command(["python3", "-c", py]), l.clone(), ToolHost::without_tools(&l), CancellationToken::new()).await;
                assert!(out.is_ok() && out.stdout == "thread ok\n", "{out:?}");
                assert_clean(&rt);
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

            /// The deny-list shared with bubblewrap binds here too: calls
            /// an unprivileged process may make on itself, and that fail
            /// differently without the filter (`kcmp` and `modify_ldt`
            /// succeed, `pidfd_getfd` on a bad descriptor is `EBADF`),
            /// are `EPERM`.
            #[tokio::test]
            async fn shared_deny_list_is_enforced() {
                let test = "shared_deny_list_is_enforced";
                if !Path::new("/usr/bin/python3").exists() {
                    return skip(test, "/usr/bin/python3 is missing");
                }
                let Some(rt) = available(test, OciRuntime::new(usr_config(FLAVOR, test))) else { return };
                let mut l = limits();
                l.memory_bytes = Some(256 << 20);
                let (script, probed) = deny_probe();
                let out = run_with(&rt, Unit::command(["python3", "-c", &script]), l.clone(), ToolHost::without_tools(&l), CancellationToken::new()).await;
                assert!(out.is_ok(), "{out:?}");
                let answers: Vec<(&str, i32)> = out.stdout.lines()
                    .filter_map(|l| l.split_once(' '))
                    .map(|(name, errno)| (name, errno.parse().unwrap()))
                    .collect();
                assert_eq!(answers.first(), Some(&("getpid", 0)), "{out:?}");
                let names: Vec<&str> = answers[1..].iter().map(|(n, _)| *n).collect();
                assert_eq!(names, probed, "{out:?}");
                for (name, errno) in &answers[1..] {
                    // runsc: the filter's EPERM, or ENOSYS for a call the
                    // gVisor kernel lacks (measured: pidfd_getfd).
                    let refused = *errno == libc::EPERM
                        || (FLAVOR == OciFlavor::Runsc && *errno == libc::ENOSYS);
                    assert!(refused, "{name} answered errno {errno}, not EPERM: {out:?}");
                }
                assert_clean(&rt);
            }

            /// A script unit runs through the worker bound into the
            /// container and calls tools via the gateway under the budget;
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
                    let exec = Exec::builder().catalog(toolexec_builtins::catalog()).build();
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

            /// The last gateway frame a unit writes before it exits (the
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

            /// A Python unit on a root made of the host's `/usr` (read-only)
            /// calls tools through the gateway; the host enforces the budget.
            #[tokio::test]
            async fn gateway_tool_calls_and_budget() {
                let test = "gateway_tool_calls_and_budget";
                if !Path::new("/usr/bin/python3").exists() {
                    return skip(test, "/usr/bin/python3 is missing");
                }
                let config = usr_config(FLAVOR, test);
                let Some(rt) = available(test, OciRuntime::new(config)) else { return };
                let exec = Exec::builder().catalog(toolexec_builtins::catalog()).build();
                let mut l = limits();
                l.max_tool_calls = 2;
                l.memory_bytes = Some(256 << 20);
                let host = ToolHost::new(exec, &l, CancellationToken::new());
                let out = run_with(&rt, Unit::command(["python3", "-c", PY_CLIENT]), l, host, CancellationToken::new()).await;
                assert_eq!(out.tool_calls.len(), 3, "{out:?}");
                assert!(out.tool_calls[0].ok && out.tool_calls[1].ok, "{out:?}");
                assert_eq!(
                    out.tool_calls[0].result,
                    Some(toolexec_runtime::ValueSummary::of(&json!({"result": 3.0})))
                );
                assert!(!out.tool_calls[2].ok);
                assert_eq!(out.tool_calls[2].error.as_ref().unwrap().code.as_str(), "limit_exceeded");
                assert_eq!(limit_of(&out), Some(LimitKind::ToolCalls), "{out:?}");
                assert_clean(&rt);
            }
        }
    };
}

/// A gateway client in plain Python: length-prefixed JSON over the
/// descriptor or socket the runtime announces.
const PY_CLIENT: &str = r#"
import json, os, socket, struct, sys
if 'TOOLEXEC_GATEWAY_FD' in os.environ:
    s = socket.socket(fileno=int(os.environ['TOOLEXEC_GATEWAY_FD']))
else:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ['TOOLEXEC_GATEWAY_SOCKET'])
def recv(n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: sys.exit(3)
        b += c
    return b
for i in range(1, 4):
    body = json.dumps({"id": i, "method": "call", "tool": "math:add", "args": {"a": 1, "b": 2}}).encode()
    s.sendall(struct.pack('>I', len(body)) + body)
    (n,) = struct.unpack('>I', recv(4))
    print(recv(n).decode(), flush=True)
"#;

/// A unit that says hello, prints `freeze`, and two seconds later sends its
/// `result` and exits.
const PY_LAST_FRAME: &str = r#"
import json, os, socket, struct, sys, time
if 'TOOLEXEC_GATEWAY_FD' in os.environ:
    s = socket.socket(fileno=int(os.environ['TOOLEXEC_GATEWAY_FD']))
else:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ['TOOLEXEC_GATEWAY_SOCKET'])
def send(message):
    body = json.dumps(message).encode()
    s.sendall(struct.pack('>I', len(body)) + body)
send({"id": 1, "method": "hello", "protocol": "toolexec-gateway", "version": 1})
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
