//! Hostile units against the bubblewrap runtime: each must be contained
//! with the right `RunStatus`, and the host must keep serving afterwards.
//!
//! Needs `bwrap` with working user namespaces; without it every test
//! prints `SKIPPED: <test>: <why>` (and fails when `CI` is set).

mod root;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use toolexec::{Availability, CancellationToken, Exec};
use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime, CgroupLayout};
use toolexec_runtime::{
    CommandUnit, LimitKind, Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime,
    RuntimeLimits, ToolHost, Unit,
};

const INIT: &str = env!("CARGO_BIN_EXE_toolexec-sandbox-init");

/// The init binary: `TOOLEXEC_TEST_SANDBOX_INIT` when set (the suite run
/// as an unprivileged user uses a copy it can reach), else Cargo's.
fn init_path() -> std::path::PathBuf {
    std::env::var_os("TOOLEXEC_TEST_SANDBOX_INIT").map_or_else(|| INIT.into(), Into::into)
}

fn config(pool_size: usize) -> BubblewrapConfig {
    BubblewrapConfig {
        init: Some(init_path()),
        pool_size,
        ..BubblewrapConfig::default()
    }
}

/// The runtime, or `None` after `SKIPPED` (a failure under `CI`).
fn runtime(test: &str, config: BubblewrapConfig) -> Option<BubblewrapRuntime> {
    let runtime = BubblewrapRuntime::new(config);
    match runtime.availability() {
        Availability::Available => {
            let _ = writeln!(
                std::io::stderr(),
                "{test}: runtime bubblewrap ({})",
                runtime.cgroup_layout().label()
            );
            Some(runtime)
        }
        Availability::Unavailable { reason } => {
            toolexec_testkit::skip(test, format!("bubblewrap: {reason}"));
            None
        }
    }
}

fn limits() -> RuntimeLimits {
    RuntimeLimits {
        wall_time: Duration::from_secs(20),
        ..RuntimeLimits::default()
    }
}

/// Runs `unit` under the strongest profile the runtime serves here
/// (hardened as root with every mechanism; standard otherwise).
async fn run(runtime: &BubblewrapRuntime, unit: Unit, limits: RuntimeLimits) -> RunOutcome {
    run_as(runtime, unit, limits, runtime.max_profile()).await
}

async fn run_as(
    runtime: &BubblewrapRuntime,
    unit: Unit,
    limits: RuntimeLimits,
    profile: Profile,
) -> RunOutcome {
    let cancel = CancellationToken::new();
    let exec = Exec::new(toolexec_testkit::catalog());
    let host = ToolHost::new(exec, &limits, cancel.clone());
    let request = RunRequest::new(unit, profile).with_limits(limits);
    runtime.run(request, RunContext::new(host, cancel)).await
}

/// Whether this test process is root (as CI runs it).
fn is_root() -> bool {
    // SAFETY: plain syscall.
    unsafe { libc::geteuid() == 0 }
}

fn sh(script: &str) -> Unit {
    Unit::command(["/bin/sh", "-c", script])
}

fn python(source: &str) -> Unit {
    Unit::command(["python3", "-c", source])
}

#[tokio::test]
async fn normal_units_run_with_a_clean_environment() {
    let Some(rt) = runtime("normal_units_run_with_a_clean_environment", config(0)) else {
        return;
    };
    // SAFETY: set once, before any unit runs; tests only read it.
    unsafe { std::env::set_var("TOOLEXEC_TEST_SECRET", "hunter2-parent-secret") };
    let mut env = BTreeMap::new();
    env.insert("GREETING".to_string(), "hello there".to_string());
    let unit = Unit::Command(CommandUnit {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "env; pwd; read x; echo got=$x".into(),
        ],
        stdin: Some("abc\n".into()),
        env,
        cwd: None,
    });
    let out = run(&rt, unit, limits()).await;
    assert!(out.is_ok(), "{out:?}");
    assert!(
        out.stdout.contains("GREETING=hello there"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("HOME=/tmp\n"));
    assert!(out.stdout.contains("/tmp\ngot=abc\n"));
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    assert!(!out.stdout.contains("CARGO"), "{}", out.stdout);
    let network = out.enforced_by(LimitKind::Network).unwrap();
    assert!(network.mechanism.contains("unshare-net"));
    let disk = out.enforced_by(LimitKind::Disk).unwrap();
    assert!(
        disk.mechanism
            .contains("Landlock: fully enforced (kernel ABI"),
        "{disk:?}"
    );
    let exit = run(&rt, sh("exit 7"), limits()).await;
    assert_eq!(exit.exit_code, Some(7));
    assert!(matches!(exit.status, RunStatus::Failed { .. }));
}

#[tokio::test]
async fn writes_outside_tmp_fail_and_the_host_is_untouched() {
    let Some(rt) = runtime(
        "writes_outside_tmp_fail_and_the_host_is_untouched",
        config(0),
    ) else {
        return;
    };
    let targets = [
        "/usr/bin/toolexec-pwned",
        "/etc/toolexec-pwned",
        "/toolexec-pwned",
    ];
    let script = format!(
        "for f in {}; do echo x > $f && echo WROTE $f; done; \
         echo x > /proc/self/comm && echo WROTE comm; \
         echo ok > /tmp/scratch && cat /tmp/scratch",
        targets.join(" ")
    );
    let out = run(&rt, sh(&script), limits()).await;
    assert!(!out.stdout.contains("WROTE"), "{out:?}");
    assert!(out.stdout.contains("ok"), "{out:?}");
    for t in targets {
        assert!(
            !std::path::Path::new(t).exists(),
            "{t} appeared on the host"
        );
    }
    // Without the init there is no Landlock, and so no hardened; /proc is
    // still read-only, a layer of its own.
    let plain = runtime("writes_outside_tmp (no init)", BubblewrapConfig::default()).unwrap();
    assert_eq!(plain.max_profile(), Profile::Standard);
    let out = run(
        &plain,
        sh("echo x > /proc/self/comm && echo WROTE comm"),
        limits(),
    )
    .await;
    assert!(!out.stdout.contains("WROTE comm"), "{out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    let disk = out.enforced_by(LimitKind::Disk).unwrap();
    assert!(
        disk.mechanism.contains("no init helper configured"),
        "{disk:?}"
    );
}

#[tokio::test]
async fn seccomp_denies_namespaces_and_ptrace() {
    let Some(rt) = runtime("seccomp_denies_namespaces_and_ptrace", config(0)) else {
        return;
    };
    let source = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = [
    ('unshare', lambda: libc.unshare(0x10000000)),
    ('ptrace', lambda: libc.ptrace(16, 1, 0, 0)),
    ('mount', lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
]
for name, call in calls:
    r = call()
    print(name, r, os.strerror(ctypes.get_errno()))
print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])
"#;
    let out = run(&rt, python(source), limits()).await;
    assert!(out.is_ok(), "{out:?}");
    for name in ["unshare", "ptrace", "mount"] {
        assert!(
            out.stdout
                .contains(&format!("{name} -1 Operation not permitted")),
            "{}",
            out.stdout
        );
    }
    assert!(out.stdout.ends_with("2\n"), "{}", out.stdout);
}

#[tokio::test]
async fn bad_units_are_typed_errors() {
    let Some(rt) = runtime("bad_units_are_typed_errors", config(0)) else {
        return;
    };
    let field = |out: RunOutcome| match out.status {
        RunStatus::Error { error } => (
            error.code.as_str().to_owned(),
            error.details.unwrap()["field"].clone(),
        ),
        other => panic!("{other:?}"),
    };
    let empty = run(&rt, Unit::command(Vec::<String>::new()), limits()).await;
    assert_eq!(field(empty), ("invalid_request".into(), "unit.argv".into()));
    let mut env = BTreeMap::new();
    env.insert("A=B".to_string(), "x".to_string());
    let bad_env = Unit::Command(CommandUnit {
        argv: vec!["true".into()],
        env,
        ..CommandUnit::default()
    });
    assert_eq!(field(run(&rt, bad_env, limits()).await).1, "unit.env");
    let bad_cwd = Unit::Command(CommandUnit {
        argv: vec!["true".into()],
        cwd: Some("relative".into()),
        ..CommandUnit::default()
    });
    assert_eq!(field(run(&rt, bad_cwd, limits()).await).1, "unit.cwd");
    let script = run(&rt, Unit::javascript("1"), limits()).await;
    assert_eq!(field(script).0, "backend_unavailable");
    let missing = run(&rt, Unit::command(["no-such-program-xyz"]), limits()).await;
    assert_eq!(missing.exit_code, Some(127), "{missing:?}");
}

#[tokio::test]
async fn pool_runs_units_single_use() {
    let Some(rt) = runtime("pool_runs_units_single_use", config(2)) else {
        return;
    };
    rt.warm_up();
    for _ in 0..100 {
        if rt.pool_ready() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rt.pool_ready(), 2);
    for i in 0..4 {
        let unit = Unit::Command(CommandUnit {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "read x; echo $x $$ $N; echo x > /proc/self/comm || echo LANDLOCKED".into(),
            ],
            stdin: Some("in\n".into()),
            env: BTreeMap::from([("N".to_string(), i.to_string())]),
            cwd: None,
        });
        let out = run(&rt, unit, limits()).await;
        assert!(out.is_ok(), "{out:?}");
        assert!(out.stdout.starts_with("in "), "{}", out.stdout);
        assert!(out.stdout.contains(&format!(" {i}\n")), "{}", out.stdout);
        assert!(out.stdout.contains("LANDLOCKED"), "{}", out.stdout);
        let cpu = out.enforced_by(LimitKind::CpuTime).unwrap();
        assert!(
            cpu.mechanism.contains("the sandbox init") || cpu.mechanism.contains("before bwrap")
        );
    }
    let limits = RuntimeLimits {
        memory_bytes: Some(64 << 20),
        ..limits()
    };
    let out = run(
        &rt,
        python("a = []\nwhile True:\n    a.append(bytearray(1 << 20))\n"),
        limits,
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::Memory), "{out:?}");
}

#[tokio::test]
async fn dev_is_read_only_and_dev_shm_is_sized() {
    let Some(rt) = runtime("dev_is_read_only_and_dev_shm_is_sized", config(0)) else {
        return;
    };
    let limits = RuntimeLimits {
        disk_bytes: Some(1 << 20),
        ..limits()
    };
    // Each file stays under RLIMIT_FSIZE (1 MiB): only the tmpfs size can
    // stop the second one.
    let script = "\
        dd if=/dev/zero of=/dev/shm/a bs=64k count=12 2>/dev/null; \
        dd if=/dev/zero of=/dev/shm/b bs=64k count=12 2>&1; \
        echo shm=$(cat /dev/shm/a /dev/shm/b | wc -c); \
        dd if=/dev/zero of=/dev/big bs=64k count=32 2>&1 && echo WROTE_DEV_BIG; \
        echo x > /dev/evil && echo WROTE_DEV; \
        mkdir /dev/dir && echo MADE_DEV_DIR; \
        echo ok > /dev/null && echo null-ok; \
        head -c 4 /dev/urandom | wc -c; \
        true";
    let out = run(&rt, sh(script), limits).await;
    assert!(out.is_ok(), "{out:?}");
    let shm: u64 = out
        .stdout
        .split("shm=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(shm <= 1 << 20, "{shm} bytes in /dev/shm: {out:?}");
    assert!(out.stdout.contains("No space left"), "{out:?}");
    assert!(!out.stdout.contains("WROTE_DEV"), "{out:?}");
    assert!(!out.stdout.contains("MADE_DEV_DIR"), "{out:?}");
    assert!(out.stdout.contains("null-ok\n4\n"), "{out:?}");
    let disk = out.enforced_by(LimitKind::Disk).unwrap();
    assert!(disk.mechanism.contains("/dev/shm"), "{disk:?}");
}

/// Writes an executable script through a child `sh`, so no descriptor open
/// for writing on it ever exists in this process: a fork by a parallel test
/// would inherit one and make exec fail with ETXTBSY.
fn write_executable(path: &std::path::Path, script: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "cannot write {}",
        path.display()
    );
}

#[tokio::test]
async fn a_bwrap_without_the_flags_used_is_unavailable() {
    let Some(real) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("bwrap"))
            .find(|p| p.is_file())
    }) else {
        toolexec_testkit::skip!("a_bwrap_without_the_flags_used_is_unavailable", "no bwrap");
    };
    // An old bwrap: no `--disable-userns`, otherwise the real one.
    let dir = std::env::temp_dir().join(format!("toolexec-oldbwrap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = dir.join("bwrap");
    write_executable(
        &old,
        &format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = --disable-userns ] && \
             {{ echo 'bwrap: Unknown option --disable-userns' >&2; exit 1; }}; done\nexec {} \"$@\"\n",
            real.display()
        ),
    );
    let rt = BubblewrapRuntime::new(BubblewrapConfig {
        bwrap: old,
        ..config(0)
    });
    match rt.availability() {
        Availability::Unavailable { reason } => {
            assert!(reason.contains("--disable-userns"), "{reason}")
        }
        Availability::Available => panic!("an old bwrap was reported available"),
    }
    let out = run(&rt, Unit::command(["true"]), limits()).await;
    assert!(
        matches!(&out.status, RunStatus::Error { error } if error.code.as_str() == "backend_unavailable"),
        "{out:?}"
    );
    // A missing init helper is caught by the probe too.
    let rt = BubblewrapRuntime::new(BubblewrapConfig {
        init: Some(dir.join("no-such-init")),
        ..config(0)
    });
    assert!(matches!(
        rt.availability(),
        Availability::Unavailable { .. }
    ));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_low_open_files_limit_still_runs() {
    let Some(rt) = runtime(
        "a_low_open_files_limit_still_runs",
        BubblewrapConfig {
            max_open_files: 32,
            ..config(0)
        },
    ) else {
        return;
    };
    let out = run(&rt, sh("ulimit -n"), limits()).await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "32\n");
}

#[tokio::test]
async fn exit_152_is_a_failure_not_a_cpu_verdict() {
    let Some(rt) = runtime("exit_152_is_a_failure_not_a_cpu_verdict", config(0)) else {
        return;
    };
    let limits = RuntimeLimits {
        cpu_time: Some(Duration::from_secs(5)),
        ..limits()
    };
    let out = run(&rt, sh("exit 152"), limits).await;
    assert!(matches!(out.status, RunStatus::Failed { .. }), "{out:?}");
    assert_eq!(out.exit_code, Some(152));
}

#[tokio::test]
async fn unusable_cgroups_fall_back_to_rlimits() {
    // A cgroup root whose controllers cannot take a `toolexec` parent (a
    // file is in the way), as for a user without rights on the hierarchy.
    let root = std::env::temp_dir().join(format!("toolexec-nocg-{}", std::process::id()));
    for (path, content) in [
        ("memory/memory.limit_in_bytes", "0"),
        ("memory/toolexec", "in the way"),
        ("pids/cgroup.procs", ""),
        ("pids/toolexec", "in the way"),
    ] {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let Some(rt) = runtime(
        "unusable_cgroups_fall_back_to_rlimits",
        BubblewrapConfig {
            cgroup_root: root.clone(),
            ..config(0)
        },
    ) else {
        return;
    };
    assert_eq!(*rt.cgroup_layout(), CgroupLayout::None);
    assert!(rt.cgroup_problem().unwrap().contains("toolexec"));
    let limits = RuntimeLimits {
        memory_bytes: Some(256 << 20),
        max_processes: Some(16),
        ..limits()
    };
    // Hardened promises cgroups: without them it is not offered, and a
    // hardened run is refused before anything of the unit runs.
    assert_eq!(rt.max_profile(), Profile::Standard);
    let refused = run_as(&rt, sh("echo ran"), limits.clone(), Profile::Hardened).await;
    assert!(
        matches!(&refused.status, RunStatus::Error { error }
            if error.code.as_str() == "backend_unavailable" && error.message.contains("cgroups")),
        "{refused:?}"
    );
    assert!(refused.stdout.is_empty(), "{refused:?}");
    let out = run(&rt, sh("echo fine; ulimit -v"), limits).await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, format!("fine\n{}\n", 256 << 10));
    let memory = out.enforced_by(LimitKind::Memory).unwrap();
    assert!(memory.mechanism.contains("RLIMIT_AS"), "{memory:?}");
    let processes = out
        .enforcement
        .iter()
        .find(|e| e.limit == LimitKind::Processes)
        .unwrap();
    assert!(
        format!("{processes:?}").contains("cannot create cgroups"),
        "{processes:?}"
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn init_runs_without_landlock_on_a_kernel_lacking_it() {
    use std::collections::BTreeMap as Map;
    use std::os::unix::process::CommandExt;
    // The kernel "lacks" Landlock for the init: its system calls fail with
    // ENOSYS, as on a kernel built without it.
    let mut rules = Map::new();
    for nr in [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ] {
        rules.insert(nr, Vec::new());
    }
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    let mut cmd = std::process::Command::new(init_path());
    cmd.args(["__sandbox-init", "exec", "--", "/bin/echo", "ran"]);
    // SAFETY: prctl and seccomp only, on a program built before the fork.
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&program).map_err(std::io::Error::other));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
}
