//! [`DockerRuntime`]: command units in locked-down containers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
};
use bollard::{ClientVersion, Docker};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use toolexec::{Availability, BoxFuture, CancellationToken, ErrorBody, ErrorCode};
use toolexec_runtime::protocol::{ChannelConfig, ChannelServer, ProtocolError};
use toolexec_runtime::{
    CommandUnit, Enforcement, LimitKind, NetworkPolicy, OutputStream, Profile, RunContext,
    RunOutcome, RunRequest, RunStatus, Runtime, RuntimeDescriptor, RuntimeLimits, Unit, UnitKind,
};
use toolexec_sandbox::Capture;
use toolexec_sandbox::channel_socket::PeerPolicy;
use toolexec_sandbox::verdict::{self, CgroupEvents};

use crate::DockerConfig;
use crate::cgroup::Observer;
use crate::channel::{self, ChannelSocket};
use crate::cleanup::{self, Lease, Target, is_not_found};
use crate::spec::container_body;

/// The oldest Engine API this runtime speaks (Docker 19.03).
pub const MIN_API_VERSION: (usize, usize) = (1, 40);

/// How often a running container's cgroup files are sampled.
const CGROUP_SAMPLE: Duration = Duration::from_millis(50);

/// Runs command units in Docker containers through the Engine API:
/// no network, read-only root, a size-limited `/tmp` tmpfs, cgroup memory
/// (no swap) and pids limits, all capabilities dropped,
/// `no-new-privileges`, a non-root user, rlimits (core, nofile, cpu), a
/// host deadline, and the tool channel on a bind-mounted Unix socket. The
/// container is removed whatever happens, including when the run's future
/// is dropped (by a cleanup worker of its own, see [`DockerRuntime::settle`])
/// or the process dies (see [`DockerRuntime::sweep`]).
///
/// ```no_run
/// use toolexec_docker::{DockerConfig, DockerRuntime};
/// use toolexec_runtime::{Profile, RunContext, RunRequest, Runtime, ToolHost, Unit};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let runtime = DockerRuntime::new(DockerConfig::new("toolexec-test/busybox:1")).unwrap();
/// let request = RunRequest::new(Unit::command(["echo", "hi"]), Profile::Standard);
/// let ctx = RunContext::new(ToolHost::without_tools(&request.limits), Default::default());
/// let outcome = runtime.run(request, ctx).await;
/// assert_eq!(outcome.stdout, "hi\n");
/// # }
/// ```
#[derive(Debug)]
pub struct DockerRuntime {
    config: DockerConfig,
    /// The API version negotiated with the daemon, once known.
    version: Mutex<Option<ClientVersion>>,
    /// Whether dead owners' containers were swept (once, on the first run).
    swept: AtomicBool,
}

impl DockerRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "docker";

    /// What the Docker runtime is, before it is built or reaches a daemon.
    pub const DESCRIPTOR: RuntimeDescriptor = RuntimeDescriptor {
        name: Self::NAME,
        isolation: "docker container: namespaces, no network, read-only root, cgroup memory/pids, \
                    all capabilities dropped, no-new-privileges, non-root user, the shared \
                    seccomp deny-list",
        max_profile: Profile::Standard,
        unit_kinds: &[UnitKind::Command],
    };

    /// A runtime with `config` (checked here; the daemon is contacted on
    /// the first run or availability check).
    pub fn new(config: DockerConfig) -> Result<Self, toolexec::Error> {
        config.validate()?;
        Ok(DockerRuntime {
            config,
            version: Mutex::new(None),
            swept: AtomicBool::new(false),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    /// A client for the daemon, with the API version negotiated once.
    pub async fn connect(&self, timeout: Duration) -> Result<Docker, String> {
        let socket = self.config.resolve_socket()?;
        let path = socket.to_string_lossy();
        let secs = timeout.as_secs().max(1);
        let known = *self.version.lock();
        if let Some(version) = known {
            return Docker::connect_with_unix(&path, secs, &version).map_err(|e| e.to_string());
        }
        let docker = Docker::connect_with_unix(&path, secs, bollard::API_DEFAULT_VERSION)
            .map_err(|e| format!("no docker socket: {e}"))?
            .negotiate_version()
            .await
            .map_err(|e| format!("docker daemon at {path} does not answer: {e}"))?;
        let version = docker.client_version();
        if (version.major_version, version.minor_version) < MIN_API_VERSION {
            return Err(format!(
                "docker API version {}.{} is older than {}.{}",
                version.major_version, version.minor_version, MIN_API_VERSION.0, MIN_API_VERSION.1
            ));
        }
        *self.version.lock() = Some(version);
        Ok(docker)
    }

    /// Removes the containers of this runtime (label `toolexec.runtime=docker`)
    /// whose owner process (label [`crate::OWNER_LABEL`]) is dead: left by
    /// a process killed mid-run, and the per-run channel directories of
    /// processes that no longer exist. Runs once by itself on the first
    /// run; returns how many containers were removed.
    pub async fn sweep(&self) -> Result<usize, String> {
        let docker = self.connect(Duration::from_secs(60)).await?;
        crate::sweep::sweep_channel_dirs(&self.channel_base());
        crate::sweep::sweep(&docker)
            .await
            .map_err(|e| format!("docker sweep: {e}"))
    }

    /// Where per-run channel directories are created.
    fn channel_base(&self) -> PathBuf {
        self.config
            .channel_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir)
    }

    /// Waits (up to `timeout`) until every removal handed to the cleanup
    /// worker by this process (runs dropped midway) has finished; `true`
    /// when none is left. For graceful shutdown and tests: a process that
    /// exits earlier leaves the containers to the next [`sweep`](Self::sweep).
    pub async fn settle(timeout: Duration) -> bool {
        cleanup::settle(timeout).await
    }

    async fn run_command(
        &self,
        command: &CommandUnit,
        limits: &RuntimeLimits,
        ctx: &RunContext,
    ) -> RunOutcome {
        let started = Instant::now();
        if let Err(e) = command.check() {
            return RunOutcome::error(DockerRuntime::NAME, &e);
        }
        if limits.network != NetworkPolicy::Off {
            return error(
                ErrorCode::InvalidRequest,
                "limits.network",
                "the docker runtime runs units without network; it cannot filter by host",
            );
        }
        let client_timeout = limits.wall_time.saturating_add(Duration::from_secs(60));
        let docker = match self.connect(client_timeout).await {
            Ok(docker) => docker,
            Err(why) => return error(ErrorCode::BackendUnavailable, "runtime", &why),
        };
        let Some(version) = *self.version.lock() else {
            return error(ErrorCode::BackendUnavailable, "runtime", "no API version");
        };
        let target = Target {
            socket: self.config.resolve_socket().unwrap_or_default(),
            version,
        };
        if !self.swept.swap(true, Ordering::SeqCst) {
            let target = target.clone();
            let base = self.channel_base();
            cleanup::spawn(async move {
                crate::sweep::sweep_channel_dirs(&base);
                if let Ok(docker) = target.client()
                    && let Err(e) = crate::sweep::sweep(&docker).await
                {
                    tracing::warn!("docker sweep: {e}");
                }
            });
        }
        let run_id = new_run_id();
        let name = format!("toolexec-{run_id}");
        let base = self.channel_base();
        let mut socket = match ChannelSocket::bind(&base, &run_id) {
            Ok(socket) => socket,
            Err(e) => {
                let why = format!(
                    "cannot create the channel socket in {}: {e}",
                    base.display()
                );
                return error(ErrorCode::BackendUnavailable, "runtime", &why);
            }
        };
        let socket_path = socket.path().to_string_lossy().into_owned();
        let (body, mut enforcement) =
            container_body(&self.config, command, limits, &run_id, Some(&socket_path));

        // The name is reserved before the create request: whatever
        // happens from here on, the lease removes the container by name.
        let mut lease = Lease::new(target, name.clone());
        lease.bind_source(socket.dir().to_owned());
        let create = CreateContainerOptionsBuilder::default().name(&name).build();
        let id = match lease.create(create, body).await {
            Ok(created) => created.id,
            Err(e) => {
                let why = if is_not_found(&e) {
                    format!("image {:?} is not present: {e}", self.config.image)
                } else {
                    format!("cannot create the container: {e}")
                };
                return error(ErrorCode::BackendUnavailable, "runtime", &why);
            }
        };
        // The daemon is on this host (Unix socket); its cgroup parent is
        // docker's default (the runtime never sets one).
        let observer = (limits.max_processes.is_some() || limits.memory_bytes.is_some())
            .then(|| Observer::new(true, &id, ""))
            .flatten();
        let kernel_log = observer.as_ref().map(Observer::has_kernel_log);
        let mut run = Run {
            docker: &docker,
            name: &name,
            limits,
            ctx,
            // Validated in `new`; (uid_t)-1 is no process's uid.
            peers: PeerPolicy::uid(self.config.channel_uid().unwrap_or(u32::MAX)),
        }
        .execute(command, socket.take_listener(), observer)
        .await;
        if let Err(e) = lease.remove(&docker).await {
            tracing::warn!(
                "docker: removing container {name} (retried by the cleanup worker): {e}"
            );
        }
        drop(socket);
        for e in &mut enforcement {
            if e.is_enforced() && matches!(e.limit, LimitKind::Processes | LimitKind::Memory) {
                e.mechanism.push_str(&detection(e.limit, kernel_log));
            }
        }
        enforcement.extend([
            Enforcement::by(LimitKind::WallTime, "host timer, docker kill SIGKILL"),
            Enforcement::by(
                LimitKind::Output,
                "host capture of the attach stream (log driver none), container killed past the limit",
            ),
            Enforcement::by(LimitKind::ToolCalls, "host channel budget"),
        ]);
        run.enforcement = enforcement;
        run.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        run
    }
}

/// One container's life from attach to exit.
struct Run<'a> {
    docker: &'a Docker,
    name: &'a str,
    limits: &'a RuntimeLimits,
    ctx: &'a RunContext,
    /// Who the channel socket serves: the unit's host uid.
    peers: PeerPolicy,
}

/// Why the host stopped the container.
enum Stop {
    WallTime,
    Output,
    Cancelled,
    ToolCalls,
    /// A limit the cgroup watch saw hit.
    Limit(RunStatus),
    Protocol(ProtocolError),
}

impl Run<'_> {
    async fn execute(
        &self,
        command: &CommandUnit,
        listener: Option<tokio::net::UnixListener>,
        mut observer: Option<Observer>,
    ) -> RunOutcome {
        let (docker, name) = (self.docker, self.name);
        let attach = AttachContainerOptionsBuilder::default()
            .stdin(command.stdin.is_some())
            .stdout(true)
            .stderr(true)
            .stream(true)
            .build();
        let attached = match docker.attach_container(name, Some(attach)).await {
            Ok(attached) => attached,
            Err(e) => {
                let why = format!("cannot attach to the container: {e}");
                return error(ErrorCode::BackendUnavailable, "runtime", &why);
            }
        };
        let capture = Capture::new(self.limits.max_output_bytes, self.ctx.output.clone());
        let drain = AbortOnDrop(tokio::spawn(drain(capture.clone(), attached.output)));
        let _stdin = command.stdin.clone().map(|bytes| {
            let mut input = attached.input;
            AbortOnDrop(tokio::spawn(async move {
                // A unit that does not read its stdin is not an error.
                let _ = input.write_all(bytes.as_bytes()).await;
                let _ = input.shutdown().await;
            }))
        });
        if let Err(e) = docker.start_container(name, None).await {
            // Mostly the unit's own fault: a program that is not there.
            let mut outcome = RunOutcome::new(
                DockerRuntime::NAME,
                RunStatus::Failed {
                    message: format!("the container did not start: {}", server_message(&e)),
                },
            );
            outcome.exit_code = Some(127);
            outcome.tool_calls = self.ctx.host.take_tool_calls();
            return outcome;
        }

        let server = ChannelServer::new(self.ctx.host.clone(), ChannelConfig::default());
        let stop_channel = CancellationToken::new();
        let channel = async {
            match listener {
                Some(listener) => {
                    channel::serve(listener, server.clone(), stop_channel.clone(), self.peers).await
                }
                None => None,
            }
        };
        tokio::pin!(channel);
        let mut channel_done = false;
        let mut wait = docker.wait_container(name, None);
        let deadline = tokio::time::sleep(self.limits.wall_time);
        tokio::pin!(deadline);
        // The cgroup watch (where the cgroup is local) stops the run on a
        // refused fork or an OOM kill; it borrows the observer until the
        // loop ends.
        let limits = self.limits;
        let mut watch = Box::pin(async {
            match observer.as_mut() {
                Some(observer) => verdict::watch(|| observer.sample(), limits, CGROUP_SAMPLE).await,
                None => std::future::pending().await,
            }
        });
        let mut stop = None;
        let mut wait_code = None;
        loop {
            tokio::select! {
                waited = wait.next() => {
                    wait_code = waited.and_then(|w| match w {
                        Ok(w) => Some(w.status_code),
                        Err(bollard::errors::Error::DockerContainerWaitError { code, .. }) => Some(code),
                        Err(_) => None,
                    });
                    break;
                }
                _ = &mut deadline => { stop = Some(Stop::WallTime); break; }
                _ = self.ctx.cancel.cancelled() => { stop = Some(Stop::Cancelled); break; }
                _ = capture.overflowed() => { stop = Some(Stop::Output); break; }
                _ = self.ctx.host.budget_exceeded() => { stop = Some(Stop::ToolCalls); break; }
                status = &mut watch => { stop = Some(Stop::Limit(status)); break; }
                failure = &mut channel, if !channel_done => {
                    channel_done = true;
                    if let Some(e) = failure {
                        stop = Some(Stop::Protocol(e));
                        break;
                    }
                }
            }
        }
        // As in the process driver: an exit in the same poll as the budget
        // signal must not hide the overrun.
        if stop.is_none() && self.ctx.host.budget_overrun() {
            stop = Some(Stop::ToolCalls);
        }
        drop(wait);
        drop(watch);
        if stop.is_some() {
            let kill = KillContainerOptionsBuilder::default()
                .signal("KILL")
                .build();
            let _ = docker.kill_container(name, Some(kill)).await;
            let mut wait = docker.wait_container(name, None);
            let _ = tokio::time::timeout(Duration::from_secs(10), wait.next()).await;
        }
        let state = docker
            .inspect_container(name, None)
            .await
            .ok()
            .and_then(|i| i.state);
        stop_channel.cancel();
        if !channel_done
            && let Ok(Some(e)) =
                tokio::time::timeout(Duration::from_millis(200), &mut channel).await
            && stop.is_none()
        {
            stop = Some(Stop::Protocol(e));
        }
        let _ = tokio::time::timeout(Duration::from_millis(500), drain.join()).await;
        if stop.is_none() && capture.did_overflow() {
            stop = Some(Stop::Output);
        }
        let exit_code = state
            .as_ref()
            .and_then(|s| s.exit_code)
            .or(wait_code)
            .and_then(|c| i32::try_from(c).ok());
        let mut seen = observer.map(Observer::finish).unwrap_or_default();
        if state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false) {
            seen.oom_kills = seen.oom_kills.max(1);
        }
        let status = classify(stop, exit_code, seen, self.limits);
        let mut outcome = RunOutcome::new(DockerRuntime::NAME, status);
        outcome.exit_code = exit_code;
        let (stdout, stderr) = capture.take();
        outcome.stdout = String::from_utf8_lossy(&stdout).into_owned();
        outcome.stderr = String::from_utf8_lossy(&stderr).into_owned();
        outcome.value = server.value();
        outcome.tool_calls = self.ctx.host.take_tool_calls();
        outcome
    }
}

/// Reads the attach stream into `capture` to its end, or until the budget
/// is spent; each chunk reaches the run's live output as it arrives.
async fn drain(capture: Capture, mut output: AttachOutput) {
    while let Some(Ok(chunk)) = output.next().await {
        let (stream, bytes) = match chunk {
            LogOutput::StdErr { message } => (OutputStream::Stderr, message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (OutputStream::Stdout, message)
            }
            LogOutput::StdIn { .. } => continue,
        };
        if !capture.push(stream, &bytes) {
            return;
        }
    }
}

/// The container's attach output stream.
type AttachOutput =
    std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// How the run ended: the host's own stops first, then what the daemon saw.
fn classify(
    stop: Option<Stop>,
    exit_code: Option<i32>,
    seen: CgroupEvents,
    limits: &RuntimeLimits,
) -> RunStatus {
    let signal = exit_code
        .filter(|c| (129..=192).contains(c))
        .map(|c| c - 128);
    if stop.is_none()
        && let Some(status) = seen.failure_verdict(limits, signal)
    {
        return status;
    }
    match stop {
        Some(Stop::WallTime) => verdict::wall_time_exceeded(limits),
        Some(Stop::Output) => verdict::output_exceeded(limits),
        Some(Stop::Cancelled) => RunStatus::Cancelled,
        Some(Stop::ToolCalls) => verdict::tool_calls_exceeded(limits),
        Some(Stop::Limit(status)) => status,
        Some(Stop::Protocol(e)) => RunStatus::Error { error: e.to_body() },
        // SIGXCPU comes from the RLIMIT_CPU set only for a cpu_time limit;
        // without one, a unit's own SIGXCPU death is its own failure.
        None if signal == Some(libc::SIGXCPU) && limits.cpu_time.is_some() => {
            verdict::cpu_exceeded(limits, None, "SIGXCPU")
        }
        None => verdict::exit_status(exit_code, signal),
    }
}

/// How hits of the processes and memory limits are told apart from the
/// unit's own failures (appended to the mechanism).
fn detection(limit: LimitKind, kernel_log: Option<bool>) -> String {
    let (file, record) = match limit {
        LimitKind::Processes => ("pids.events", "\"fork rejected by pids controller\""),
        _ => ("memory.oom_control/memory.failcnt", "oom-kill"),
    };
    let inspect = if limit == LimitKind::Memory {
        "State.OOMKilled, "
    } else {
        ""
    };
    match kernel_log {
        Some(true) => format!(
            "; hits detected by {inspect}cgroup v1 {file} sampled every {} ms and the kernel log ({record} records naming the container)",
            CGROUP_SAMPLE.as_millis()
        ),
        Some(false) => format!(
            "; hits detected by {inspect}cgroup v1 {file} sampled every {} ms only (no /dev/kmsg access: a unit that exits right after a hit shows as its own failure)",
            CGROUP_SAMPLE.as_millis()
        ),
        None if limit == LimitKind::Memory => {
            "; hits detected by State.OOMKilled only (no local cgroup v1)".into()
        }
        None => "; a refused fork is not reported by the Docker API and there is no local cgroup v1 pids hierarchy: it shows as the unit's own failure".into(),
    }
}

impl Runtime for DockerRuntime {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn isolation(&self) -> &str {
        Self::DESCRIPTOR.isolation
    }

    fn max_profile(&self) -> Profile {
        Self::DESCRIPTOR.max_profile
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        Self::DESCRIPTOR.unit_kinds
    }

    fn availability(&self) -> Availability {
        let socket: PathBuf = match self.config.resolve_socket() {
            Ok(socket) => socket,
            Err(reason) => return Availability::Unavailable { reason },
        };
        if !socket.exists() {
            return Availability::Unavailable {
                reason: format!("no docker socket at {}", socket.display()),
            };
        }
        // A thread of its own: callers may be inside a runtime or not.
        let result = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                rt.block_on(async {
                    match tokio::time::timeout(
                        Duration::from_secs(5),
                        self.connect(Duration::from_secs(5)),
                    )
                    .await
                    {
                        Ok(result) => result.map(|_| ()),
                        Err(_) => Err(format!(
                            "docker daemon at {} does not answer",
                            socket.display()
                        )),
                    }
                })
            })
            .join()
            .unwrap_or_else(|_| Err("availability check failed".into()))
        });
        match result {
            Ok(()) => Availability::Available,
            Err(reason) => Availability::Unavailable { reason },
        }
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(async move {
            match &request.unit {
                Unit::Command(command) => self.run_command(command, &request.limits, &ctx).await,
                other => error(
                    ErrorCode::InvalidRequest,
                    "unit.kind",
                    &format!(
                        "runtime docker does not run {} units",
                        other.kind().as_str()
                    ),
                ),
            }
        })
    }
}

/// A spawned task aborted when the run is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    async fn join(mut self) {
        let _ = (&mut self.0).await;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn error(code: ErrorCode, field: &str, message: &str) -> RunOutcome {
    RunOutcome::new(
        DockerRuntime::NAME,
        RunStatus::Error {
            error: ErrorBody {
                code,
                message: format!("{}: {field}: {message}", code.as_str()),
                details: Some(json!({"field": field})),
            },
        },
    )
}

fn server_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// A run id unique on this host: pid, time and a counter.
fn new_run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    format!(
        "{:x}-{:x}-{:x}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_commands_are_refused_with_the_field() {
        let bad = [
            (CommandUnit::default(), "unit.argv"),
            (
                CommandUnit {
                    argv: vec!["a\0b".into()],
                    ..Default::default()
                },
                "unit.argv",
            ),
            (
                CommandUnit {
                    argv: vec!["true".into()],
                    env: [("A=B".to_owned(), "x".to_owned())].into(),
                    ..Default::default()
                },
                "unit.env",
            ),
            (
                CommandUnit {
                    argv: vec!["true".into()],
                    cwd: Some("tmp".into()),
                    ..Default::default()
                },
                "unit.cwd",
            ),
        ];
        for (command, field) in bad {
            assert_eq!(
                command.check().unwrap_err().field(),
                Some(field),
                "{command:?}"
            );
        }
    }

    #[test]
    fn exit_codes_are_classified() {
        let limits = RuntimeLimits::default();
        let none = CgroupEvents::default();
        let oom = CgroupEvents {
            oom_kills: 1,
            ..none
        };
        let failcnt = CgroupEvents {
            memory_failcnt: 4,
            ..none
        };
        let refused = CgroupEvents {
            pids_refused: 1,
            ..none
        };
        assert_eq!(classify(None, Some(0), none, &limits), RunStatus::Ok);
        assert_eq!(
            classify(None, Some(137), oom, &limits).limit(),
            Some(LimitKind::Memory)
        );
        assert_eq!(
            classify(None, Some(137), failcnt, &limits).limit(),
            Some(LimitKind::Memory)
        );
        // Hitting the memory limit (reclaim) without a kill is not a failure.
        assert_eq!(classify(None, Some(0), failcnt, &limits), RunStatus::Ok);
        assert_eq!(
            classify(None, Some(2), refused, &limits).limit(),
            Some(LimitKind::Processes)
        );
        assert_eq!(
            classify(
                Some(Stop::Limit(verdict::processes_exceeded(&limits, 3))),
                Some(137),
                none,
                &limits
            )
            .limit(),
            Some(LimitKind::Processes)
        );
        // 152 = 128 + SIGXCPU: a limit hit only when cpu_time was set.
        let no_cpu_limit = RuntimeLimits {
            cpu_time: None,
            ..RuntimeLimits::default()
        };
        assert!(
            matches!(classify(None, Some(152), none, &no_cpu_limit), RunStatus::Failed { message } if message.contains("signal 24")),
        );
        assert!(limits.cpu_time.is_some());
        assert_eq!(
            classify(None, Some(152), none, &limits).limit(),
            Some(LimitKind::CpuTime)
        );
        assert_eq!(
            classify(Some(Stop::WallTime), Some(137), refused, &limits).limit(),
            Some(LimitKind::WallTime)
        );
        assert!(
            matches!(classify(None, Some(137), none, &limits), RunStatus::Failed { message } if message.contains("signal 9"))
        );
    }

    #[test]
    fn run_ids_differ() {
        assert_ne!(new_run_id(), new_run_id());
    }
}
