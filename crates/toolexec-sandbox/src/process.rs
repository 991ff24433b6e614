//! Running a child process under limits: what every process-based runtime
//! (host, bubblewrap, OCI) shares. The runtime builds a [`ProcessSpec`]
//! (its launcher's argv, rlimits, cgroups, inherited descriptors);
//! [`run_process`] starts it with the channel socket at
//! [`CHANNEL_FD`], feeds stdin, captures output up to the
//! limit, serves the channel, and kills the whole process group on the
//! deadline, on cancellation, on too much output, on a protocol violation,
//! or when the future is dropped.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use toolexec_runtime::protocol::{
    CHANNEL_FD, CHANNEL_FD_ENV, ChannelConfig, ChannelServer, ProtocolError,
};
use toolexec_runtime::{OutputStream, RunContext, RunOutcome, RuntimeLimits};

use crate::output::Capture;
use crate::rlimits::Rlimit;
use crate::user::{SandboxUser, become_user};
use crate::verdict;

/// How to start the child.
#[derive(Debug, Default)]
pub struct ProcessSpec {
    /// The program (a launcher like `bwrap`, or the command itself).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The whole environment (nothing is inherited from the host).
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of the launcher.
    pub cwd: Option<PathBuf>,
    /// Bytes for stdin, then EOF; stdin is `/dev/null` when `None`.
    pub stdin: Option<Vec<u8>>,
    /// Set in the child before exec.
    pub rlimits: Vec<Rlimit>,
    /// Serve the channel protocol on descriptor 3 of the child.
    pub channel: bool,
    /// Further descriptors the child inherits, at the given numbers (> 3).
    pub inherit: Vec<(OwnedFd, RawFd)>,
    /// Open `cgroup.procs` (or `tasks`) files: the child writes `0` to
    /// each before exec, so it is inside its cgroups before running
    /// anything of the unit.
    pub join_cgroups: Vec<File>,
    /// The identity the child takes before exec (after joining its
    /// cgroups, which needs the parent's privileges); `None` keeps the
    /// parent's. The spawn fails if the child would still be uid 0.
    pub user: Option<SandboxUser>,
}

/// Why [`run_process`] stopped the child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The wall-time deadline passed.
    WallTime,
    /// stdout plus stderr passed the output limit.
    Output,
    /// The caller cancelled.
    Cancelled,
    /// The unit broke the channel protocol.
    Protocol(ProtocolError),
    /// The unit asked for a tool call past its budget.
    ToolCalls,
}

/// What happened to the child.
#[derive(Debug)]
pub struct ProcessRun {
    /// The exit status, once reaped.
    pub status: Option<ExitStatus>,
    /// Why toolexec stopped it, if it did.
    pub ended: Option<Ended>,
    /// Captured stdout, at most the output limit.
    pub stdout: Vec<u8>,
    /// Captured stderr, at most the output limit (with stdout).
    pub stderr: Vec<u8>,
    /// The value the unit sent with the channel's `result`.
    pub value: Option<Value>,
    /// Start to reaped.
    pub elapsed: Duration,
}

/// Errors starting the child.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {program}: {source}")]
pub struct SpawnError {
    /// The program.
    pub program: String,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Runs `spec` under `limits` (wall time, output) with `ctx`'s tool host
/// and cancellation. Other limits are the runtime's job (rlimits, cgroups,
/// namespaces) through the spec. [`spawn_process`] then [`Spawned::drive`].
pub async fn run_process(
    spec: ProcessSpec,
    limits: &RuntimeLimits,
    ctx: &RunContext,
) -> Result<ProcessRun, SpawnError> {
    Ok(spawn_process(spec)?.drive(limits, ctx).await)
}

/// A started child that is not driven yet: a pre-warmed sandbox waiting
/// for its unit, or the first half of [`run_process`]. Dropping it kills
/// the child's process group.
#[derive(Debug)]
pub struct Spawned {
    child: tokio::process::Child,
    host_end: Option<std::os::unix::net::UnixStream>,
    stdin: Option<Vec<u8>>,
    channel: bool,
    started: Instant,
    group: GroupKill,
}

/// Starts `spec`'s child with the channel socket at
/// [`CHANNEL_FD`]. Must be called inside a tokio runtime;
/// the child's pipes stay registered with that runtime.
pub fn spawn_process(mut spec: ProcessSpec) -> Result<Spawned, SpawnError> {
    let started = Instant::now();
    let spawn_error = |source| SpawnError {
        program: spec.program.display().to_string(),
        source,
    };
    let (host_end, child_end) = if spec.channel {
        let (a, b) = std::os::unix::net::UnixStream::pair().map_err(spawn_error)?;
        (Some(a), Some(OwnedFd::from(b)))
    } else {
        (None, None)
    };

    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if spec.channel {
        cmd.env(CHANNEL_FD_ENV, CHANNEL_FD.to_string());
    }
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let mut moves: Vec<(RawFd, RawFd)> = Vec::new();
    if let Some(fd) = &child_end {
        moves.push((fd.as_raw_fd(), CHANNEL_FD));
    }
    moves.extend(spec.inherit.iter().map(|(fd, to)| (fd.as_raw_fd(), *to)));
    let mut scratch: Vec<RawFd> = vec![-1; moves.len()];
    let cgroup_fds: Vec<RawFd> = spec.join_cgroups.iter().map(|f| f.as_raw_fd()).collect();
    let user = spec.user;
    let parent = std::process::id() as libc::pid_t;
    let rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)> = spec
        .rlimits
        .iter()
        .map(|r| {
            (
                r.resource.raw(),
                libc::rlimit {
                    rlim_cur: r.soft,
                    rlim_max: r.hard,
                },
            )
        })
        .collect();
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &cgroup_fds {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Two passes so a source never collides with another's target.
            // Before the rlimits: a low RLIMIT_NOFILE would refuse the
            // scratch descriptors (64 and up).
            for (i, (from, _)) in moves.iter().enumerate() {
                let tmp = libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 64);
                if tmp < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                scratch[i] = tmp;
            }
            for (i, (_, to)) in moves.iter().enumerate() {
                if libc::dup2(scratch[i], *to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (resource, limit) in &rlimits {
                if libc::setrlimit(*resource, limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(user) = user {
                become_user(user)?;
            }
            // After the identity change, which clears the parent-death signal.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A parent that died before the prctl would never send it: the
            // child must not run unsupervised.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(spawn_error)?;
    // The child has its copies; ours must go so the channel sees EOF when
    // the sandbox is gone.
    drop(child_end);
    spec.inherit.clear();
    spec.join_cgroups.clear();
    let group = GroupKill(child.id().map(|p| p as i32));
    Ok(Spawned {
        child,
        host_end,
        stdin: spec.stdin.take(),
        channel: spec.channel,
        started,
        group,
    })
}

impl Spawned {
    /// The child's pid (also its process group), while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Replaces the bytes written to stdin (only when the spec had stdin).
    pub fn set_stdin(&mut self, bytes: Vec<u8>) {
        if self.stdin.is_some() {
            self.stdin = Some(bytes);
        }
    }

    /// Whether the child has exited already (a broken pool entry).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Restarts the clock [`ProcessRun::elapsed`] counts from.
    pub fn restart_clock(&mut self) {
        self.started = Instant::now();
    }

    /// Feeds stdin, captures output up to the limit, serves the channel,
    /// and kills the process group on the deadline, on cancellation, on
    /// too much output, on a protocol violation, or when dropped.
    pub async fn drive(mut self, limits: &RuntimeLimits, ctx: &RunContext) -> ProcessRun {
        let started = self.started;
        let pgid = self.group.0;
        let mut child = self.child;
        if let (Some(bytes), Some(mut stdin)) = (self.stdin.take(), child.stdin.take()) {
            tokio::spawn(async move {
                // A unit that does not read its stdin is not an error.
                let _ = stdin.write_all(&bytes).await;
            });
        }
        let capture = Capture::new(limits.max_output_bytes, ctx.output.clone());
        // Drained on this task, next to the wait: no cross-thread wake-up
        // between the child's exit and its last output.
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let drains = futures::future::join(
            async {
                if let Some(s) = stdout {
                    capture.clone().drain(s, OutputStream::Stdout).await
                }
            },
            async {
                if let Some(s) = stderr {
                    capture.clone().drain(s, OutputStream::Stderr).await
                }
            },
        );
        tokio::pin!(drains);
        let mut drained = false;

        let server = ChannelServer::new(ctx.host.clone(), ChannelConfig::default());
        let host_end = self.host_end.take();
        let channel = async {
            match host_end {
                Some(end) => {
                    end.set_nonblocking(true)
                        .map_err(|e| ProtocolError::Io(e.to_string()))?;
                    let stream = tokio::net::UnixStream::from_std(end)
                        .map_err(|e| ProtocolError::Io(e.to_string()))?;
                    server.serve(stream).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::pin!(channel);
        let mut channel_done = !self.channel;
        let deadline = tokio::time::sleep(limits.wall_time);
        tokio::pin!(deadline);

        let mut ended = None;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status.ok(),
                _ = &mut deadline => { ended = Some(Ended::WallTime); break None; }
                _ = ctx.cancel.cancelled() => { ended = Some(Ended::Cancelled); break None; }
                _ = capture.overflowed() => { ended = Some(Ended::Output); break None; }
                _ = ctx.host.budget_exceeded() => { ended = Some(Ended::ToolCalls); break None; }
                _ = &mut drains, if !drained => drained = true,
                result = &mut channel, if !channel_done => {
                    channel_done = true;
                    if let Err(e) = result {
                        ended = Some(Ended::Protocol(e));
                        break None;
                    }
                }
            }
        };
        // The unit exits only after the host refused its call past the
        // budget, so its exit and the budget signal can be ready in the same
        // poll; `select!` picks either. The flag decides, not the race.
        if ended.is_none() && ctx.host.budget_overrun() {
            ended = Some(Ended::ToolCalls);
        }
        let status = match status {
            Some(status) => Some(status),
            None => {
                kill_group(pgid);
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        // Descendants that outlived the child (the host runtime has no pid
        // namespace) go with the group.
        kill_group(pgid);
        if !channel_done && ended.is_none() {
            // Let the channel take the last frames the unit wrote before exit.
            if let Ok(Err(e)) = tokio::time::timeout(Duration::from_millis(200), &mut channel).await
            {
                ended = Some(Ended::Protocol(e));
            }
        } else if !channel_done && !matches!(ended, Some(Ended::Protocol(_))) {
            // The unit is gone; tool calls still in flight get a moment to
            // finish (on cancellation their tools see the cancelled token)
            // before they are dropped and logged as cancelled.
            let _ = tokio::time::timeout(Duration::from_millis(200), &mut channel).await;
        }
        if !drained {
            // A descendant that escaped the group kill may hold the pipes.
            let _ = tokio::time::timeout(Duration::from_millis(500), &mut drains).await;
        }
        // A unit cut off at the output limit often dies of the closed pipe
        // (EPIPE, or SIGPIPE) in the same poll as the overflow signal, or
        // exits before the drains read the bytes past the limit: the
        // capture's flag decides, not the race.
        if ended.is_none() && capture.did_overflow() {
            ended = Some(Ended::Output);
        }
        let (stdout, stderr) = capture.take();
        ProcessRun {
            status,
            ended,
            stdout,
            stderr,
            value: server.value(),
            elapsed: started.elapsed(),
        }
    }
}

fn kill_group(pgid: Option<i32>) {
    if let Some(pgid) = pgid.filter(|p| *p > 1) {
        // SAFETY: plain syscall; the group is the child's own (process_group(0)).
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Kills the child's process group when the run is dropped midway.
#[derive(Debug)]
struct GroupKill(Option<i32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

impl ProcessRun {
    /// The signal that ended the unit: from the wait status, or, for
    /// launchers that turn a child's death by signal `n` into exit code
    /// `128 + n` (bubblewrap, runc), from the code when `launcher_codes`.
    pub fn signal(&self, launcher_codes: bool) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.status?;
        status.signal().or_else(|| {
            status
                .code()
                .filter(|c| launcher_codes && (129..=128 + 64).contains(c))
                .map(|c| c - 128)
        })
    }

    /// Whether the launcher reported its child's death by `SIGXCPU` with
    /// exit code `128 + SIGXCPU`. Any unit can exit with that code, so it
    /// is no CPU verdict by itself: a runtime needs evidence (its cgroup's
    /// CPU usage at the limit) before reporting the CPU limit.
    pub fn launcher_sigxcpu(&self) -> bool {
        self.status.and_then(|s| s.code()) == Some(128 + libc::SIGXCPU)
    }

    /// The outcome with the default classification: toolexec's own stops
    /// first, then the CPU limit when a CPU limit is set and the wait
    /// status itself says `SIGXCPU` (a launcher's exit code never counts:
    /// see [`ProcessRun::launcher_sigxcpu`]), exit 0 as success, anything
    /// else as the unit's failure. Runtimes refine it with what their
    /// mechanisms saw (cgroup OOM, pid and CPU events) before returning.
    pub fn into_outcome(
        self,
        runtime: &str,
        ctx: &RunContext,
        limits: &RuntimeLimits,
        launcher_codes: bool,
    ) -> RunOutcome {
        use toolexec_runtime::RunStatus;
        let signal = self.signal(launcher_codes);
        let real_sigxcpu = {
            use std::os::unix::process::ExitStatusExt;
            self.status.and_then(|s| s.signal()) == Some(libc::SIGXCPU)
        };
        let status = match &self.ended {
            Some(Ended::WallTime) => verdict::wall_time_exceeded(limits),
            Some(Ended::Output) => verdict::output_exceeded(limits),
            Some(Ended::Cancelled) => RunStatus::Cancelled,
            Some(Ended::ToolCalls) => verdict::tool_calls_exceeded(limits),
            Some(Ended::Protocol(e)) => RunStatus::Error { error: e.to_body() },
            None if real_sigxcpu && limits.cpu_time.is_some() => {
                verdict::cpu_exceeded(limits, None, "SIGXCPU")
            }
            None => verdict::exit_status(self.status.and_then(|s| s.code()), signal),
        };
        let mut outcome = RunOutcome::new(runtime, status);
        outcome.exit_code = self.status.and_then(|s| s.code());
        outcome.stdout = String::from_utf8_lossy(&self.stdout).into_owned();
        outcome.stderr = String::from_utf8_lossy(&self.stderr).into_owned();
        outcome.value = self.value;
        outcome.tool_calls = ctx.host.take_tool_calls();
        outcome.duration_ms = self.elapsed.as_secs_f64() * 1000.0;
        outcome
    }
}
