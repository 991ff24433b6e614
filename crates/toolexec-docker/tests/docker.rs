//! The Docker runtime against a real dockerd (`scripts/start-dockerd.sh`,
//! called here when its socket is missing). Without docker the tests print
//! `SKIPPED: <test>: <why>`, or fail when `CI` is set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptionsBuilder;
use toolexec::{Availability, CancellationToken};
use toolexec_docker::{DockerConfig, DockerRuntime};
use toolexec_runtime::{
    LimitKind, NetworkPolicy, Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime,
    RuntimeLimits, ToolHost, Unit,
};

const SOCKET: &str = "/run/toolexec-docker.sock";
const IMAGE: &str = "toolexec-test/busybox:1";
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
        toolexec_testkit::skip(test, format!("docker: {why}"));
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
    let channel_dir =
        std::env::temp_dir().join(format!("toolexec-docker-drop-{}", std::process::id()));
    std::fs::create_dir_all(&channel_dir).unwrap();
    let mut config = rt.config().clone();
    config.channel_dir = Some(channel_dir.clone());
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
    // No channel socket directory is left behind either.
    let leftovers: Vec<_> = std::fs::read_dir(&channel_dir).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir(&channel_dir);
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
    let channel_dir =
        std::env::temp_dir().join(format!("toolexec-docker-drop-rt-{}", std::process::id()));
    std::fs::create_dir_all(&channel_dir).unwrap();
    let mut config = runtime.config().clone();
    config.channel_dir = Some(channel_dir.clone());
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
    // No channel directory either (a start in flight recreates a missing
    // bind source: the worker removes it after the container).
    let leftovers: Vec<_> = std::fs::read_dir(&channel_dir).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir(&channel_dir);
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
        assert_eq!(err.field(), Some("docker.user"), "{user}: {err}");
        assert_eq!(err.code().as_str(), "invalid_request");
    }
}
