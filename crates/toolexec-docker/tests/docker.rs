//! The Docker runtime against a real dockerd (`scripts/start-dockerd.sh`,
//! called here when its socket is missing). Without docker the tests print
//! `SKIPPED: <test>: <why>`, or fail when `CI` is set.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptionsBuilder;
use serde_json::json;
use toolexec::{Availability, CancellationToken};
use toolexec_docker::{DockerConfig, DockerRuntime, RUN_LABEL};
use toolexec_runtime::{
    CommandUnit, LimitKind, NetworkPolicy, Profile, RunContext, RunOutcome, RunRequest, RunStatus,
    Runtime, RuntimeLimits, ToolHost, Unit,
};

const SOCKET: &str = "/run/toolexec-docker.sock";
const IMAGE: &str = "toolexec-test/busybox:1";
const GATEWAY_IMAGE: &str = "toolexec-test/busybox-gateway:1";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Starts the private daemon once per test binary; `Err(why)` if it cannot.
fn daemon() -> Result<(), String> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            let out = Command::new("bash")
                .arg(root().join("scripts/start-dockerd.sh"))
                .output()
                .map_err(|e| format!("cannot run scripts/start-dockerd.sh: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "scripts/start-dockerd.sh failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(())
        })
        .clone()
}

/// A runtime on the test daemon, or `None` after printing `SKIPPED`
/// (a failure under `CI`).
/// Removes what earlier, killed test processes left behind (once per
/// binary, before the first test uses the daemon).
async fn runtime(test: &str, labels: &[(&str, &str)], image: &str) -> Option<DockerRuntime> {
    let skip = |why: String| {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: docker is required under CI: {why}"
        );
        let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
        None
    };
    if let Err(why) = daemon() {
        return skip(why);
    }
    let mut config = DockerConfig::new(image).with_socket(SOCKET);
    config.labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let runtime = DockerRuntime::new(config).expect("valid config");
    match runtime.availability() {
        Availability::Available => {}
        Availability::Unavailable { reason } => return skip(reason),
    }
    runtime.sweep().await.expect("sweep");
    Some(runtime)
}

fn sh(script: &str) -> Unit {
    Unit::command(["sh", "-c", script])
}

fn limits(f: impl FnOnce(&mut RuntimeLimits)) -> RuntimeLimits {
    let mut limits = RuntimeLimits {
        wall_time: Duration::from_secs(20),
        ..RuntimeLimits::default()
    };
    f(&mut limits);
    limits
}

async fn run(rt: &DockerRuntime, unit: Unit, limits: RuntimeLimits) -> RunOutcome {
    let ctx = RunContext {
        host: ToolHost::without_tools(&limits),
        cancel: CancellationToken::new(),
        output: None,
    };
    rt.run(
        RunRequest::new(unit, Profile::Standard).with_limits(limits),
        ctx,
    )
    .await
}

async fn ok(rt: &DockerRuntime, script: &str) -> RunOutcome {
    let outcome = run(rt, sh(script), limits(|_| {})).await;
    assert!(outcome.is_ok(), "{script}: {outcome:#?}");
    outcome
}

/// Containers carrying `label=value` (running or not).
async fn containers(label: &str, value: &str) -> Vec<String> {
    let docker = bollard::Docker::connect_with_unix(SOCKET, 30, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let filters = HashMap::from([("label".to_owned(), vec![format!("{label}={value}")])]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// Waits up to 10 s for the containers of `test` to be gone.
async fn assert_none_left(test: &str) {
    let started = Instant::now();
    loop {
        let left = containers("toolexec.test", test).await;
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{test}: containers left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_exit_codes_stdin_and_separate_streams() {
    let test = "echo";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let out = run(&rt, Unit::command(["echo", "hello"]), limits(|_| {})).await;
    assert!(out.is_ok(), "{out:#?}");
    assert_eq!(out.stdout, "hello\n");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.runtime, "docker");

    let out = ok(&rt, "echo out; echo err >&2").await;
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );

    let out = run(&rt, sh("exit 3"), limits(|_| {})).await;
    assert_eq!(out.exit_code, Some(3));
    assert!(
        matches!(&out.status, RunStatus::Failed { message } if message.contains("code 3")),
        "{out:#?}"
    );

    let unit = Unit::Command(CommandUnit {
        argv: vec!["tr".into(), "a-z".into(), "A-Z".into()],
        stdin: Some("shout\n".into()),
        ..CommandUnit::default()
    });
    let out = run(&rt, unit, limits(|_| {})).await;
    assert!(out.is_ok(), "{out:#?}");
    assert_eq!(out.stdout, "SHOUT\n");

    let unit = Unit::Command(CommandUnit {
        argv: vec!["sh".into(), "-c".into(), "echo \"$GREETING\"; pwd".into()],
        env: [("GREETING".to_owned(), "hi there".to_owned())].into(),
        ..CommandUnit::default()
    });
    let out = run(&rt, unit, limits(|_| {})).await;
    assert_eq!(out.stdout, "hi there\n/tmp\n", "{out:#?}");

    // A program that is not there fails as the unit's own failure.
    let out = run(&rt, Unit::command(["/no/such/program"]), limits(|_| {})).await;
    assert!(matches!(out.status, RunStatus::Failed { .. }), "{out:#?}");

    // Every limit has a mechanism or a reason.
    for limit in [
        LimitKind::WallTime,
        LimitKind::CpuTime,
        LimitKind::Memory,
        LimitKind::Processes,
        LimitKind::Output,
        LimitKind::Disk,
        LimitKind::Network,
        LimitKind::ToolCalls,
    ] {
        let e = out
            .enforced_by(limit)
            .unwrap_or_else(|| panic!("no enforcement for {limit}"));
        assert!(e.is_enforced(), "{e:?}");
    }
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_typed_errors() {
    let test = "bad";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let cases = [
        (
            Unit::command(Vec::<String>::new()),
            limits(|_| {}),
            "unit.argv",
        ),
        (Unit::command(["a\0b"]), limits(|_| {}), "unit.argv"),
        (Unit::javascript("1"), limits(|_| {}), "unit.kind"),
        (
            Unit::command(["true"]),
            limits(|l| {
                l.network = NetworkPolicy::Allow {
                    hosts: vec!["example.com".into()],
                }
            }),
            "limits.network",
        ),
    ];
    for (unit, limits, field) in cases {
        let out = run(&rt, unit, limits).await;
        let RunStatus::Error { error } = &out.status else {
            panic!("{out:#?}")
        };
        assert_eq!(error.code.as_str(), "invalid_request");
        assert_eq!(error.details.as_ref().unwrap()["field"], field, "{error:?}");
    }
    // A missing image: the runtime is unusable for this run, clearly said.
    let Some(missing) = runtime(
        test,
        &[("toolexec.test", test)],
        "toolexec-test/no-such-image:0",
    )
    .await
    else {
        return;
    };
    let out = run(&missing, Unit::command(["true"]), limits(|_| {})).await;
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:#?}")
    };
    assert_eq!(error.code.as_str(), "backend_unavailable");
    assert!(error.message.contains("no-such-image"), "{error:?}");
    // A socket that is not there.
    let gone = DockerRuntime::new(DockerConfig::new(IMAGE).with_socket("/nonexistent/docker.sock"))
        .unwrap();
    assert!(
        matches!(gone.availability(), Availability::Unavailable { reason } if reason.contains("no docker socket"))
    );
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_secrets_are_not_visible() {
    let test = "secrets";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    // SAFETY: set once, before any container; the runtime never reads it.
    unsafe { std::env::set_var("TOOLEXEC_TEST_SECRET", "hunter2-docker") };
    let secret_file =
        std::env::temp_dir().join(format!("toolexec-docker-secret-{}", std::process::id()));
    std::fs::write(&secret_file, "host-only-secret").unwrap();
    let out = ok(
        &rt,
        &format!(
            "id -u; id -g; env; cat /etc/shadow 2>&1; cat {0} 2>&1; cat /proc/*/root{0} 2>&1; \
             ln -s / /tmp/up && cat /tmp/up{0} 2>&1; cat /proc/1/environ 2>&1 | tr '\\0' '\\n'; true",
            secret_file.display()
        ),
    )
    .await;
    let _ = std::fs::remove_file(&secret_file);
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("65534"), "{out:#?}");
    assert_eq!(lines.next(), Some("65534"));
    assert!(!out.stdout.contains("hunter2-docker"), "{}", out.stdout);
    assert!(!out.stdout.contains("host-only-secret"), "{}", out.stdout);
    let host_shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    if let Some(root_line) = host_shadow.lines().find(|l| l.starts_with("root:")) {
        assert!(!out.stdout.contains(root_line));
    }
    // Capabilities: none effective.
    let out = ok(&rt, "grep CapEff /proc/self/status").await;
    assert!(out.stdout.contains("0000000000000000"), "{}", out.stdout);
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stay_inside() {
    let test = "writes";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let out = ok(
        &rt,
        "touch /bin/evil 2>&1; echo x >> /etc/passwd 2>&1; mkdir /newdir 2>&1; \
         echo scratch > /tmp/f && cat /tmp/f",
    )
    .await;
    assert!(
        out.stdout.contains("Read-only file system"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.ends_with("scratch\n"), "{}", out.stdout);
    // The scratch space is bounded: the tmpfs size, and RLIMIT_FSIZE (the
    // rlimits every process runtime shares) per file.
    let out = run(
        &rt,
        sh("dd if=/dev/zero of=/tmp/big bs=1024 count=4096 2>&1; ls -l /tmp/big"),
        limits(|l| l.disk_bytes = Some(1 << 20)),
    )
    .await;
    assert!(
        out.stdout.contains("1048576")
            || out.stdout.contains("No space left")
            || out.stdout.contains("File too large"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("4194304"), "{out:#?}");
    // Nothing reached the host's /tmp or /bin.
    assert!(!Path::new("/bin/evil").exists());
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network() {
    let test = "network";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = run(
        &rt,
        sh(&format!(
            "cat /proc/net/dev; echo hi | nc -w 2 127.0.0.1 {port} && echo CONNECTED; \
             echo hi | nc -w 2 10.0.2.2 {port} && echo CONNECTED; true"
        )),
        limits(|_| {}),
    )
    .await;
    assert!(out.is_ok(), "{out:#?}");
    assert!(!out.stdout.contains("CONNECTED"), "{out:#?}");
    let interfaces: Vec<&str> = out
        .stdout
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, ["lo"], "{}", out.stdout);
    assert!(
        listener.accept().is_err(),
        "the container reached the host listener"
    );
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_hit_their_limits_and_the_runtime_survives() {
    let test = "bombs";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    // Fork bomb: the pids cgroup stops it.
    let out = run(
        &rt,
        sh("i=0; while [ $i -lt 200 ]; do sleep 3 & i=$((i+1)); done; wait; echo done"),
        limits(|l| l.max_processes = Some(16)),
    )
    .await;
    assert!(out.stderr.contains("fork"), "{out:#?}");
    let processes = out.enforced_by(LimitKind::Processes).unwrap();
    assert!(processes.mechanism.contains("PidsLimit"), "{processes:?}");
    if processes.mechanism.contains("kernel log") {
        // busybox sh exits at its first refused fork: only the kernel log
        // still knows after the container's cgroup is gone.
        assert_eq!(out.status.limit(), Some(LimitKind::Processes), "{out:#?}");
    } else {
        eprintln!("fork bomb: no kernel log access: {}", processes.mechanism);
        assert!(
            matches!(out.status.limit(), Some(LimitKind::Processes) | None),
            "{out:#?}"
        );
    }

    // A fork bomb that survives its refused forks is stopped, not left to
    // run to the deadline.
    let started = Instant::now();
    let out = run(
        &rt,
        sh("while :; do (sleep 30 &) 2>/dev/null; done"),
        limits(|l| {
            l.max_processes = Some(16);
            l.wall_time = Duration::from_secs(20);
        }),
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::Processes), "{out:#?}");
    assert!(started.elapsed() < Duration::from_secs(15), "{out:#?}");

    // Memory bomb: the memory cgroup kills it; the outcome says so.
    let out = run(
        &rt,
        sh("x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}"),
        limits(|l| l.memory_bytes = Some(32 << 20)),
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::Memory), "{out:#?}");

    // CPU spin: RLIMIT_CPU's SIGXCPU.
    let out = run(
        &rt,
        sh("while :; do :; done"),
        limits(|l| l.cpu_time = Some(Duration::from_secs(1))),
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::CpuTime), "{out:#?}");

    // Giant output: cut at the limit, container killed.
    let out = run(
        &rt,
        Unit::command(["yes"]),
        limits(|l| l.max_output_bytes = 64 << 10),
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::Output), "{out:#?}");
    assert!(out.stdout.len() + out.stderr.len() <= 64 << 10);
    assert!(out.stdout.starts_with("y\ny\n"));

    // Signals: the test process (host pid) is not reachable; kill -1
    // reaches only the container's own processes.
    let out = run(
        &rt,
        sh(&format!(
            "kill -9 {} 2>&1; echo after; kill -9 -1",
            std::process::id()
        )),
        limits(|_| {}),
    )
    .await;
    assert!(out.stdout.contains("No such process"), "{out:#?}");
    assert!(out.stdout.contains("after"), "{out:#?}");

    // After all that, the runtime still works.
    let out = ok(&rt, "echo still here").await;
    assert_eq!(out.stdout, "still here\n");
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_kills_and_removes() {
    let test = "deadline";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let started = Instant::now();
    let out = run(
        &rt,
        Unit::command(["sleep", "60"]),
        limits(|l| l.wall_time = Duration::from_secs(1)),
    )
    .await;
    assert_eq!(out.status.limit(), Some(LimitKind::WallTime), "{out:#?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_removes_the_container() {
    let test = "cancel";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let limits = limits(|_| {});
    let cancel = CancellationToken::new();
    let ctx = RunContext {
        host: ToolHost::without_tools(&limits),
        cancel: cancel.clone(),
        output: None,
    };
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        canceller.cancel();
    });
    let request =
        RunRequest::new(Unit::command(["sleep", "60"]), Profile::Standard).with_limits(limits);
    let out = rt.run(request, ctx).await;
    assert_eq!(out.status, RunStatus::Cancelled, "{out:#?}");
    assert_none_left(test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_removes_the_container() {
    let test = "drop";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let gateway_dir =
        std::env::temp_dir().join(format!("toolexec-docker-drop-{}", std::process::id()));
    std::fs::create_dir_all(&gateway_dir).unwrap();
    let mut config = rt.config().clone();
    config.gateway_dir = Some(gateway_dir.clone());
    let rt = DockerRuntime::new(config).unwrap();
    for after in [Duration::from_millis(1500), Duration::from_millis(5)] {
        let run = run(&rt, Unit::command(["sleep", "60"]), limits(|_| {}));
        assert!(
            tokio::time::timeout(after, run).await.is_err(),
            "should still be running"
        );
        // The removal was handed to the cleanup worker (whatever state the
        // create was in); once it is idle, nothing is left.
        assert!(DockerRuntime::settle(Duration::from_secs(60)).await);
        let left = containers("toolexec.test", test).await;
        assert!(left.is_empty(), "{after:?}: containers left: {left:?}");
    }
    // No gateway socket directory is left behind either.
    let leftovers: Vec<_> = std::fs::read_dir(&gateway_dir).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir(&gateway_dir);
}

/// Drops runs on a runtime of their own that is shut down right after: the
/// create is in flight when the caller's runtime is gone, and the
/// container is still removed.
#[test]
fn dropping_the_run_with_its_runtime_removes_the_container() {
    let test = "drop-rt";
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let Some(runtime) = rt.block_on(runtime(test, &[("toolexec.test", test)], IMAGE)) else {
        return;
    };
    let gateway_dir =
        std::env::temp_dir().join(format!("toolexec-docker-drop-rt-{}", std::process::id()));
    std::fs::create_dir_all(&gateway_dir).unwrap();
    let mut config = runtime.config().clone();
    config.gateway_dir = Some(gateway_dir.clone());
    let runtime = DockerRuntime::new(config).unwrap();
    for after in [1u64, 5, 20, 50, 200] {
        let caller = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let timed_out = caller.block_on(async {
            let run = run(&runtime, Unit::command(["sleep", "60"]), limits(|_| {}));
            tokio::time::timeout(Duration::from_millis(after), run)
                .await
                .is_err()
        });
        drop(caller);
        assert!(timed_out, "{after} ms: should still be running");
    }
    rt.block_on(async {
        assert!(DockerRuntime::settle(Duration::from_secs(60)).await);
        let left = containers("toolexec.test", test).await;
        assert!(left.is_empty(), "containers left: {left:?}");
    });
    // No gateway directory either (a start in flight recreates a missing
    // bind source: the worker removes it after the container).
    let leftovers: Vec<_> = std::fs::read_dir(&gateway_dir).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir(&gateway_dir);
}

/// A container whose owner process is dead is swept; one whose owner is
/// alive (this process) is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_removes_containers_of_dead_owners_only() {
    let test = "sweep";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let me = toolexec_docker::owner_id();
    let parts: Vec<&str> = me.split('.').collect();
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let dead = format!("{}.{}.{dead_pid}.{}", parts[0], parts[1], parts[3]);
    let docker = bollard::Docker::connect_with_unix(SOCKET, 30, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (owner, role) in [(dead.as_str(), "dead"), (me, "alive")] {
        let body = bollard::models::ContainerCreateBody {
            image: Some(IMAGE.into()),
            cmd: Some(vec!["true".into()]),
            labels: Some(HashMap::from([
                ("toolexec.test".to_owned(), test.to_owned()),
                ("toolexec.sweep".to_owned(), role.to_owned()),
                (
                    toolexec_docker::RUNTIME_LABEL.to_owned(),
                    "docker".to_owned(),
                ),
                (toolexec_docker::OWNER_LABEL.to_owned(), owner.to_owned()),
            ])),
            ..Default::default()
        };
        let created = docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .unwrap();
        ids.push(created.id);
    }
    // (Other tests' sweeps may have removed it first.)
    rt.sweep().await.unwrap();
    assert!(containers("toolexec.sweep", "dead").await.is_empty());
    assert_eq!(
        containers("toolexec.sweep", "alive").await,
        [ids[1].clone()]
    );
    let options = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
        .force(true)
        .build();
    docker
        .remove_container(&ids[1], Some(options))
        .await
        .unwrap();
    assert_none_left(test).await;
}

/// Builds the gateway image: the test image plus a static `unix-cat` (what
/// `nc -U` does; busybox's nc has no `-U`).
fn gateway_image() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir =
                std::env::temp_dir().join(format!("toolexec-docker-image-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unix_cat.rs");
            let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
            let status = Command::new(rustc)
                .args(["-O", "-C", "target-feature=+crt-static", "-o"])
                .arg(dir.join("unix-cat"))
                .arg(&src)
                .status()
                .map_err(|e| format!("rustc: {e}"))?;
            if !status.success() {
                return Err("rustc could not build the static unix-cat".into());
            }
            std::fs::write(
                dir.join("Dockerfile"),
                format!("FROM {IMAGE}\nCOPY unix-cat /bin/unix-cat\n"),
            )
            .map_err(|e| e.to_string())?;
            let out = Command::new("/usr/bin/docker")
                .env("DOCKER_HOST", format!("unix://{SOCKET}"))
                .env("DOCKER_BUILDKIT", "0")
                .args(["build", "-q", "-t", GATEWAY_IMAGE])
                .arg(&dir)
                .output()
                .map_err(|e| format!("docker build: {e}"))?;
            let _ = std::fs::remove_dir_all(&dir);
            if !out.status.success() {
                return Err(format!(
                    "docker build: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(())
        })
        .clone()
}

/// A shell function writing one length-prefixed gateway frame.
const FRAME_SH: &str = r#"frame() { n=${#1}; printf "\\$(printf %03o $((n>>24&255)))\\$(printf %03o $((n>>16&255)))\\$(printf %03o $((n>>8&255)))\\$(printf %03o $((n&255)))%s" "$1"; }"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_through_the_gateway_socket_with_budget() {
    let test = "gateway";
    if daemon().is_ok()
        && let Err(why) = gateway_image()
    {
        assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
        eprintln!("SKIPPED: {test}: {why}");
        return;
    }
    let Some(rt) = runtime(test, &[("toolexec.test", test)], GATEWAY_IMAGE).await else {
        return;
    };
    let exec = toolexec::Exec::builder()
        .catalog(toolexec_builtins::catalog())
        .build();
    let rt = &rt;
    let run_with = |max_calls: usize, script: String| {
        let limits = limits(|l| l.max_tool_calls = max_calls);
        let ctx = RunContext {
            host: ToolHost::new(exec.clone(), &limits, CancellationToken::new()),
            cancel: CancellationToken::new(),
            output: None,
        };
        let request = RunRequest::new(sh(&script), Profile::Standard).with_limits(limits);
        async move { rt.run(request, ctx).await }
    };
    let hello = r#"{"id":1,"method":"hello","protocol":"toolexec-gateway","version":1}"#;
    let call = r#"{"id":2,"method":"call","tool":"math:add","args":{"a":2,"b":3}}"#;
    let result = r#"{"method":"result","value":{"sum":5}}"#;
    let script = format!(
        "{FRAME_SH}\n{{ frame '{hello}'; frame '{call}'; frame '{result}'; }} | unix-cat \"$TOOLEXEC_GATEWAY_SOCKET\" | tr -d '\\000-\\037'"
    );
    let out = run_with(10, script).await;
    assert!(out.is_ok(), "{out:#?}");
    assert!(
        out.stdout.contains(r#""protocol":"toolexec-gateway""#),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(r#""result":{"result":5.0}"#),
        "{}",
        out.stdout
    );
    assert_eq!(out.tool_calls.len(), 1, "{out:#?}");
    assert!(out.tool_calls[0].ok);
    assert_eq!(out.tool_calls[0].tool_id, "math:add");
    assert_eq!(out.value, Some(json!({"sum": 5})));

    // Budget: one call allowed, the second ends the run.
    let script = format!(
        "{FRAME_SH}\nfor i in 1 2 3; do frame '{call}' | unix-cat \"$TOOLEXEC_GATEWAY_SOCKET\"; done; sleep 30"
    );
    let out = run_with(1, script).await;
    assert_eq!(out.status.limit(), Some(LimitKind::ToolCalls), "{out:#?}");
    assert!(out.tool_calls[0].ok);
    assert!(out.tool_calls.iter().skip(1).all(|c| !c.ok));

    // A hostile frame (claims 2 GiB) ends the run with invalid_request.
    let out = run_with(
        10,
        "printf '\\177\\377\\377\\377xx' | unix-cat \"$TOOLEXEC_GATEWAY_SOCKET\"; sleep 30".into(),
    )
    .await;
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:#?}")
    };
    assert_eq!(error.code.as_str(), "invalid_request", "{error:?}");
    assert_none_left(test).await;
    // The label the runtime sets itself is there while running (checked
    // via the public constant's use in filters).
    assert_eq!(RUN_LABEL, "toolexec.run");
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
mkdir /sys/fs/cgroup/toolexec-probe && echo ESCAPE cgroup-mkdir
head -c 16 /proc/kcore > /dev/null && echo ESCAPE kcore
cat /proc/keys 2>/dev/null | grep -q . && echo ESCAPE keys
grep -q ' /sys .*\bro\b' /proc/mounts || echo ESCAPE sys-not-read-only
echo "id: $(id -u):$(id -g)"
"#;

/// Issue 10: as root on the host, a unit cannot write host kernel settings
/// (`/proc/sys`), sysrq or `/sys`, nor read kernel memory, and it is not
/// uid 0. Docker's own defaults (masked and read-only paths, read-only
/// sysfs) do this; the test holds the runtime to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_kernel_is_out_of_reach() {
    let test = "host-kernel";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let core_before = std::fs::read("/proc/sys/kernel/core_pattern").unwrap();
    let out = ok(&rt, HOST_KERNEL_SCRIPT).await;
    assert!(!out.stdout.contains("ESCAPE"), "{}", out.stdout);
    assert!(out.stdout.contains("id: 65534:65534"), "{out:#?}");
    assert_eq!(
        std::fs::read("/proc/sys/kernel/core_pattern").unwrap(),
        core_before
    );
    assert_none_left(test).await;
}

/// The uids (real, effective, saved, filesystem) of every process in the
/// cgroup of host process `pid`, as the host sees them.
fn cgroup_uids(pid: i64) -> Vec<(u32, Vec<u32>)> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let Some(path) = cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        (ctrl.split(',').any(|c| c == "pids")).then(|| path.to_owned())
    }) else {
        return Vec::new();
    };
    let procs = std::fs::read_to_string(format!("/sys/fs/cgroup/pids{path}/cgroup.procs"))
        .unwrap_or_default();
    procs
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter_map(|p| {
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let uids = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .filter_map(|u| u.parse().ok())
                .collect();
            Some((p, uids))
        })
        .collect()
}

/// Issue 10: seen from the host, no process of the unit's container is
/// uid 0 (real, effective, saved or filesystem uid).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unit_is_not_host_root() {
    let test = "host-uid";
    let Some(rt) = runtime(test, &[("toolexec.test", test)], IMAGE).await else {
        return;
    };
    let cancel = CancellationToken::new();
    let limits = limits(|_| {});
    let ctx = RunContext {
        host: ToolHost::without_tools(&limits),
        cancel: cancel.clone(),
        output: None,
    };
    let request = RunRequest::new(
        Unit::command(["sh", "-c", "sleep 120 & wait"]),
        Profile::Standard,
    )
    .with_limits(limits);
    let unit = rt.run(request, ctx);
    let watch = async {
        let docker = bollard::Docker::connect_with_unix(SOCKET, 30, bollard::API_DEFAULT_VERSION)
            .unwrap()
            .negotiate_version()
            .await
            .unwrap();
        let mut seen = Vec::new();
        // Up to 60 s for init, the shell and sleep to be running.
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(id) = containers("toolexec.test", test).await.pop() else {
                continue;
            };
            let pid = docker
                .inspect_container(&id, None)
                .await
                .ok()
                .and_then(|i| i.state?.pid)
                .unwrap_or(0);
            if pid > 0 {
                seen = cgroup_uids(pid);
                if seen.len() >= 3 {
                    break;
                }
            }
        }
        cancel.cancel();
        seen
    };
    let (out, seen) = tokio::join!(unit, watch);
    assert_eq!(out.status, RunStatus::Cancelled, "{out:#?}");
    assert!(seen.len() >= 3, "the unit never ran: {seen:?}");
    for (pid, uids) in &seen {
        assert_eq!(uids.len(), 4, "{pid}: {uids:?}");
        assert!(
            uids.iter().all(|&u| u == 65534),
            "process {pid} of the unit has host uids {uids:?} (all: {seen:?})"
        );
    }
    assert_none_left(test).await;
}

/// Issue 10: a `user` that is, or may resolve to, root is refused when the
/// runtime is built, with the field.
#[test]
fn root_users_are_refused() {
    for user in [
        "root:root",
        "00:00",
        "0:65534",
        "65534:0",
        "nobody",
        "65534",
    ] {
        let err = DockerRuntime::new(DockerConfig {
            user: user.into(),
            ..DockerConfig::new(IMAGE)
        })
        .unwrap_err();
        assert_eq!(err.field, "user", "{user}: {err}");
        assert_eq!(err.code().as_str(), "invalid_request");
    }
}
