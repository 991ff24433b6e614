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
    CommandUnit, LimitKind, NetworkPolicy, Profile, RunContext, RunOutcome, RunRequest, RunStatus,
    Runtime, RuntimeLimits, ToolHost, Unit,
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
            assert!(std::env::var_os("CI").is_none(), "{test}: {reason}");
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: bubblewrap: {reason}");
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
    let exec = Exec::new(toolexec_builtins::catalog());
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

/// A Python gateway client prelude: `send(obj)`, `recv()`, `raw(bytes)`.
const PY_GATEWAY: &str = r#"
import os, json, struct, socket, sys
s = socket.socket(fileno=int(os.environ["TOOLEXEC_GATEWAY_FD"]))
def raw(b): s.sendall(b)
def send(o):
    b = json.dumps(o).encode(); s.sendall(struct.pack('>I', len(b)) + b)
def readn(n):
    buf = b''
    while len(buf) < n:
        c = s.recv(n - len(buf))
        if not c: raise EOFError()
        buf += c
    return buf
def recv():
    n = struct.unpack('>I', readn(4))[0]; return json.loads(readn(n))
"#;

async fn still_serving(runtime: &BubblewrapRuntime) {
    let out = run(
        runtime,
        Unit::command(["echo", "still", "serving"]),
        limits(),
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.stdout, "still serving\n");
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
async fn host_secrets_are_invisible() {
    let Some(rt) = runtime("host_secrets_are_invisible", config(0)) else {
        return;
    };
    // SAFETY: see normal_units_run_with_a_clean_environment.
    unsafe { std::env::set_var("TOOLEXEC_TEST_SECRET", "hunter2-parent-secret") };
    let out = run(
        &rt,
        sh(
            "cat /etc/shadow; cat /etc/passwd; ls /etc; ls /root /home /work; \
            cat /proc/1/environ | tr '\\0' '\\n'; env",
        ),
        limits(),
    )
    .await;
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(!all.contains("hunter2"), "{all}");
    assert!(!all.contains("root:"), "{all}");
    assert!(all.contains("/etc/shadow: No such file"), "{all}");
    still_serving(&rt).await;
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
async fn disk_is_bounded_by_the_tmpfs_size() {
    let Some(rt) = runtime("disk_is_bounded_by_the_tmpfs_size", config(0)) else {
        return;
    };
    let limits = RuntimeLimits {
        disk_bytes: Some(1 << 20),
        ..limits()
    };
    let out = run(
        &rt,
        sh("dd if=/dev/zero of=/tmp/a bs=64k count=64 2>&1; ls -l /tmp/a"),
        limits,
    )
    .await;
    assert!(
        out.stdout.contains("1048576")
            || out.stdout.contains("No space")
            || out.stdout.contains("File too large"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("4194304"), "{out:?}");
}

#[tokio::test]
async fn network_is_off() {
    let Some(rt) = runtime("network_is_off", config(0)) else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let source = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)\n"
    );
    let out = run(&rt, python(&source), limits()).await;
    assert!(out.stdout.contains("blocked"), "{out:?}");
    assert!(listener.accept().is_err(), "the sandbox reached the host");
    // An allowlist bubblewrap cannot filter is refused, not opened.
    let allow = RuntimeLimits {
        network: NetworkPolicy::Allow {
            hosts: vec!["example.com".into()],
        },
        ..limits()
    };
    let out = run(&rt, Unit::command(["true"]), allow).await;
    match &out.status {
        RunStatus::Error { error } => {
            assert_eq!(error.code.as_str(), "backend_unavailable");
            assert!(error.message.contains("cannot filter the network"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn fork_bomb_hits_the_process_limit() {
    let Some(rt) = runtime("fork_bomb_hits_the_process_limit", config(0)) else {
        return;
    };
    let limits = RuntimeLimits {
        max_processes: Some(16),
        wall_time: Duration::from_secs(15),
        ..limits()
    };
    let out = run(&rt, sh("f() { f | f & }; f; sleep 10"), limits).await;
    if matches!(rt.cgroup_layout(), CgroupLayout::None) {
        let _ = writeln!(std::io::stderr(), "SKIPPED: fork bomb limit: no cgroups");
        assert!(std::env::var_os("CI").is_none());
        return;
    }
    assert_eq!(out.status.limit(), Some(LimitKind::Processes), "{out:?}");
    still_serving(&rt).await;
}

#[tokio::test]
async fn memory_bomb_hits_the_memory_limit() {
    let Some(rt) = runtime("memory_bomb_hits_the_memory_limit", config(0)) else {
        return;
    };
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
    still_serving(&rt).await;
}

#[tokio::test]
async fn cpu_spin_hits_the_cpu_limit() {
    let Some(rt) = runtime("cpu_spin_hits_the_cpu_limit", config(0)) else {
        return;
    };
    let limits = RuntimeLimits {
        cpu_time: Some(Duration::from_secs(1)),
        ..limits()
    };
    let out = run(&rt, python("while True:\n    pass\n"), limits).await;
    assert_eq!(out.status.limit(), Some(LimitKind::CpuTime), "{out:?}");
}

#[tokio::test]
async fn giant_output_and_sleep_are_cut() {
    let Some(rt) = runtime("giant_output_and_sleep_are_cut", config(0)) else {
        return;
    };
    let small = RuntimeLimits {
        max_output_bytes: 64 << 10,
        ..limits()
    };
    let out = run(&rt, Unit::command(["cat", "/dev/zero"]), small).await;
    assert_eq!(
        out.status.limit(),
        Some(LimitKind::Output),
        "{:?}",
        out.status
    );
    assert!(out.stdout.len() <= 64 << 10);
    let short = RuntimeLimits {
        wall_time: Duration::from_millis(500),
        ..limits()
    };
    let out = run(&rt, Unit::command(["sleep", "30"]), short).await;
    assert_eq!(out.status.limit(), Some(LimitKind::WallTime), "{out:?}");
    assert!(out.duration_ms < 10_000.0);
    still_serving(&rt).await;
}

#[tokio::test]
async fn proc_and_symlink_escapes_stay_inside() {
    let Some(rt) = runtime("proc_and_symlink_escapes_stay_inside", config(0)) else {
        return;
    };
    let host_pid = std::process::id();
    let script = format!(
        "ls /proc/1/root/ /proc/self/root/../..; cat /proc/1/root/etc/shadow; \
         ln -s / /tmp/r && cat /tmp/r/etc/shadow; ln -s /etc/shadow /tmp/s && cat /tmp/s; \
         test -e /proc/{host_pid} && echo HOSTPID; ls /proc | grep -c '^[0-9]'"
    );
    let out = run(&rt, sh(&script), limits()).await;
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(!all.contains("root:"), "{all}");
    assert!(!out.stdout.contains("HOSTPID"), "{all}");
    assert!(!out.stdout.contains("work"), "host root listed: {all}");
    // Only the sandbox's few processes are visible.
    let count: u32 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!(count < 8, "{all}");
}

#[tokio::test]
async fn signals_cannot_reach_the_host() {
    let Some(rt) = runtime("signals_cannot_reach_the_host", config(0)) else {
        return;
    };
    let host_pid = std::process::id();
    let out = run(
        &rt,
        sh(&format!(
            "kill -9 {host_pid}; kill -9 1; kill -9 -1; echo after"
        )),
        limits(),
    )
    .await;
    // The unit may have killed itself with -1; the host is alive.
    assert!(!matches!(out.status, RunStatus::Error { .. }), "{out:?}");
    still_serving(&rt).await;
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
async fn gateway_budget_and_forgery_end_the_run() {
    let Some(rt) = runtime("gateway_budget_and_forgery_end_the_run", config(0)) else {
        return;
    };
    let calls = format!(
        "{PY_GATEWAY}\nfor i in range(5):\n    send({{'id': i + 1, 'method': 'call', 'tool': 'math:add', 'args': {{'a': i, 'b': 1}}}})\n    print(recv())\n"
    );
    let budget = RuntimeLimits {
        max_tool_calls: 2,
        ..limits()
    };
    let out = run(&rt, python(&calls), budget).await;
    assert_eq!(out.status.limit(), Some(LimitKind::ToolCalls), "{out:?}");
    assert_eq!(out.tool_calls.iter().filter(|c| c.ok).count(), 2);

    let garbage = format!(
        "{PY_GATEWAY}\nraw(struct.pack('>I', 5) + b'{{nope')\nimport time; time.sleep(5)\n"
    );
    let out = run(&rt, python(&garbage), limits()).await;
    match &out.status {
        RunStatus::Error { error } => assert!(error.message.contains("malformed"), "{error:?}"),
        other => panic!("{other:?}"),
    }
    let oversized = format!(
        "{PY_GATEWAY}\nraw(struct.pack('>I', 1 << 30) + b'x' * 1024)\nimport time; time.sleep(5)\n"
    );
    let out = run(&rt, python(&oversized), limits()).await;
    match &out.status {
        RunStatus::Error { error } => assert!(error.message.contains("maximum"), "{error:?}"),
        other => panic!("{other:?}"),
    }
    let result = format!("{PY_GATEWAY}\nsend({{'method': 'result', 'value': {{'answer': 42}}}})\n");
    let out = run(&rt, python(&result), limits()).await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(out.value, Some(serde_json::json!({"answer": 42})));
    still_serving(&rt).await;
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

#[tokio::test]
async fn x32_system_calls_are_refused() {
    let Some(rt) = runtime("x32_system_calls_are_refused", config(0)) else {
        return;
    };
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("x32_system_calls_are_refused: not x86_64, nothing to check");
        return;
    }
    // x32 getpid (39) and unshare(CLONE_NEWUSER) (272): on a kernel with
    // x32 support they would run past every native rule.
    let source = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for name, nr, arg in [('getpid', 39, 0), ('unshare', 272, 0x10000000)]:
    r = libc.syscall(ctypes.c_long(0x40000000 | nr), ctypes.c_long(arg))
    print(name, r, os.strerror(ctypes.get_errno()))
print('native', libc.syscall(ctypes.c_long(39)) > 0)
"#;
    let out = run(&rt, python(source), limits()).await;
    assert!(out.is_ok(), "{out:?}");
    for name in ["getpid", "unshare"] {
        assert!(
            out.stdout
                .contains(&format!("{name} -1 Function not implemented")),
            "{}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("native True"), "{}", out.stdout);
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
        assert!(std::env::var_os("CI").is_none(), "bwrap missing");
        eprintln!("SKIPPED: a_bwrap_without_the_flags_used_is_unavailable: no bwrap");
        return;
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
