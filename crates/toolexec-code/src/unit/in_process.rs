//! [`InProcessRuntime`]: script units in the QuickJS engine of this process.
//!
//! The engine has no file system, network, environment or module loader,
//! and enforces wall time, memory, output and the tool budget itself; it is
//! not a kernel sandbox, so the runtime is fit for [`Profile::Standard`] at
//! most. Tool calls go through the run's [`ToolHost`](toolexec_runtime::ToolHost), which enforces the
//! allowlist and the budget and keeps the call log, exactly as for the
//! sandboxed worker ([`crate::worker`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolexec::{Availability, Error, ErrorBody};
use toolexec_runtime::{
    Enforcement, LimitKind, NetworkPolicy, OutputStream, Profile, RunContext, RunOutcome,
    RunRequest, RunStatus, Runtime, RuntimeDescriptor, RuntimeLimits, Unit, UnitKind,
};

use super::worker::MAX_INPUT_BYTES;
use super::{engine_limits, report};
use crate::engine::{CodeEngine, Pool};
use crate::{CodeLimit, CodeLimits, CodeOutcome, CodeRequest, CodeStatus};

/// Runs [`Unit::Script`] units (`javascript`) in the in-process QuickJS
/// engine, on a bounded pool of worker threads.
///
/// - limits: [`crate::code_limits_from_runtime`] maps the run's limits onto
///   the engine's (wall time minus the 1.5 s sandbox startup margin, memory
///   minus the 192 MiB worker-process overhead), so a
///   script sent with [`crate::runtime_limits_from_code`] gets exactly its
///   own limits; a host timer bounds the whole run by `wall_time`;
/// - tools: the run's [`ToolHost`](toolexec_runtime::ToolHost) (allowlist, budget, log); the engine
///   stops the script, uncatchably, at the same budget;
/// - result: [`RunOutcome::value`] is the [`CodeOutcome`] JSON without its
///   tool calls (those are [`RunOutcome::tool_calls`], the host's log), the
///   same shape the sandboxed worker sends, so
///   [`crate::outcome_from_run`] reads either.
///
/// ```
/// use toolexec_code::InProcessRuntime;
/// use toolexec_runtime::{Profile, ProfileMap, RunRequest, Runtimes, Unit};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut runtimes = Runtimes::new(ProfileMap::default());
/// runtimes.register(InProcessRuntime::new(4));
/// let exec = toolexec::Exec::new(toolexec_builtins::catalog());
/// let request = RunRequest::new(
///     Unit::javascript("console.log('hi'); return (await tools.math.add({a: 1, b: 2})).result"),
///     Profile::Dev,
/// );
/// let outcome = runtimes.run(request, Some(&exec), Default::default()).await;
/// assert!(outcome.is_ok(), "{outcome:?}");
/// assert_eq!(outcome.runtime, "in_process");
/// assert_eq!(outcome.value.unwrap()["value"], 3);
/// assert_eq!(outcome.stdout, "hi\n");
/// assert_eq!(outcome.tool_calls.len(), 1);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct InProcessRuntime {
    pool: Pool,
}

impl Default for InProcessRuntime {
    /// A pool of [`crate::DEFAULT_MAX_CONCURRENT`] workers.
    fn default() -> Self {
        InProcessRuntime::new(crate::DEFAULT_MAX_CONCURRENT)
    }
}

impl InProcessRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "in_process";

    /// What the in-process script runtime is: the one source of its name, isolation,
    /// profile and unit kinds.
    pub const DESCRIPTOR: RuntimeDescriptor = RuntimeDescriptor {
        name: Self::NAME,
        isolation: "QuickJS in process: no file system, network, env or modules; limits enforced by the engine",
        max_profile: Profile::Standard,
        unit_kinds: &[UnitKind::Script],
    };

    /// A runtime running at most `max_concurrent` (at least 1) scripts at a
    /// time; more wait for a worker (the wait counts toward their timeout).
    pub fn new(max_concurrent: usize) -> Self {
        InProcessRuntime {
            pool: Pool::new(max_concurrent),
        }
    }

    async fn run_unit(&self, request: RunRequest, ctx: RunContext) -> RunOutcome {
        let started = Instant::now();
        let code_limits = engine_limits(&request.limits);
        let mut outcome = self.run_inner(&request, &ctx, &code_limits, started).await;
        if let Some(sink) = &ctx.output {
            sink.send(OutputStream::Stdout, outcome.stdout.as_bytes());
            sink.send(OutputStream::Stderr, outcome.stderr.as_bytes());
        }
        outcome.tool_calls = ctx.host.take_tool_calls();
        outcome.enforcement = enforcement(&request.limits, &code_limits);
        outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        outcome
    }

    async fn run_inner(
        &self,
        request: &RunRequest,
        ctx: &RunContext,
        code_limits: &CodeLimits,
        started: Instant,
    ) -> RunOutcome {
        let error = |error| RunOutcome::new(Self::NAME, RunStatus::Error { error });
        let source = match check(request) {
            Ok(source) => source,
            Err(e) => return error(e),
        };
        let limits = &request.limits;
        // The run's host: allowlist, budget and log; it raises the budget
        // stop awaited below.
        let tools = Arc::new(ctx.host.clone());
        let engine = CodeEngine::with_tools_in(tools, self.pool.clone());
        let execution = engine.execute(CodeRequest::new(source).with_limits(code_limits.clone()));
        let deadline = tokio::time::Instant::from_std(started + limits.wall_time);
        // Dropping `execution` stops the script (the engine's drop guard).
        let ended = |status| RunOutcome::new(Self::NAME, status);
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => ended(RunStatus::Cancelled),
            // The host signals once the refused call is in its log.
            _ = ctx.host.budget_exceeded() => ended(RunStatus::LimitExceeded {
                limit: LimitKind::ToolCalls,
                message: "the host refused a tool call past the run's budget".into(),
            }),
            _ = tokio::time::sleep_until(deadline) => ended(RunStatus::LimitExceeded {
                limit: LimitKind::WallTime,
                message: format!(
                    "wall-time limit of {} ms exceeded (host timer)",
                    limits.wall_time.as_millis()
                ),
            }),
            code = execution => run_outcome(code),
        }
    }
}

impl Runtime for InProcessRuntime {
    fn name(&self) -> &str {
        Self::DESCRIPTOR.name
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
        Availability::Available
    }

    fn run<'a>(
        &'a self,
        request: RunRequest,
        ctx: RunContext,
    ) -> toolexec::BoxFuture<'a, RunOutcome> {
        Box::pin(self.run_unit(request, ctx))
    }
}

/// The script source, once the request is one this runtime runs.
fn check(request: &RunRequest) -> Result<String, ErrorBody> {
    let Unit::Script(script) = &request.unit else {
        return Err(invalid(
            "unit.kind",
            format!(
                "runtime {} does not run {} units",
                InProcessRuntime::NAME,
                request.unit.kind().as_str()
            ),
        ));
    };
    if script.language != "javascript" {
        return Err(invalid(
            "unit.language",
            format!(
                "language {:?} is not supported (only javascript)",
                script.language
            ),
        ));
    }
    if script.source.len() as u64 > MAX_INPUT_BYTES {
        return Err(invalid(
            "unit.source",
            format!(
                "{} bytes is over the limit of {MAX_INPUT_BYTES} bytes",
                script.source.len()
            ),
        ));
    }
    let limits = &request.limits;
    if let Err(message) = limits.validate() {
        return Err(invalid("limits", message));
    }
    if let NetworkPolicy::Allow { hosts } = &limits.network {
        return Err(invalid(
            "limits.network",
            format!(
                "the in-process engine has no network, so a host allowlist ({}) cannot be \
                 granted; use network off or another runtime",
                hosts.join(", ")
            ),
        ));
    }
    Ok(script.source.clone())
}

fn invalid(field: &str, message: impl std::fmt::Display) -> ErrorBody {
    Error::invalid_request(field, message.to_string()).to_body()
}

/// The run outcome of a finished execution: the [`CodeOutcome`] JSON as the
/// value (the worker's shape), the console output, and the status.
fn run_outcome(mut code: CodeOutcome) -> RunOutcome {
    let status = match &code.status {
        CodeStatus::Ok => RunStatus::Ok,
        // A saturated pool: the runtime cannot take the run now.
        CodeStatus::LimitExceeded {
            limit: CodeLimit::Workers,
            message,
        } => RunStatus::Error {
            error: Error::backend_unavailable("code mode", message.clone()).to_body(),
        },
        CodeStatus::LimitExceeded { limit, message } => match limit.limit_kind() {
            Some(limit) => RunStatus::LimitExceeded {
                limit,
                message: message.clone(),
            },
            // A stack overflow is the script's own failure, like a trap.
            None => RunStatus::Failed {
                message: format!("limit_exceeded: {limit}: {message}"),
            },
        },
        CodeStatus::Exception { message, .. } => RunStatus::Failed {
            message: format!("exception: {message}"),
        },
        other => RunStatus::Failed {
            message: other
                .failure_text(None)
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        },
    };
    let mut outcome = RunOutcome::new(InProcessRuntime::NAME, status);
    // The worker's shape without the engine's call log: the run's log is
    // the host's ([`RunOutcome::tool_calls`]), and the reader ignores it.
    outcome.value = Some(report(&mut code));
    outcome.stdout = code.stdout;
    outcome.stderr = code.stderr;
    outcome
}

/// How each limit is enforced for a run with `limits` (engine: `code`).
fn enforcement(limits: &RuntimeLimits, code: &CodeLimits) -> Vec<Enforcement> {
    let ms = |d: Duration| d.as_millis();
    let no_capability = |limit, what: &str| {
        Enforcement::by(
            limit,
            format!("no such capability in the engine (no {what} API)"),
        )
    };
    vec![
        Enforcement::by(
            LimitKind::WallTime,
            format!(
                "QuickJS interrupt handler at the script deadline ({} ms) and host timer ({} ms)",
                ms(code.timeout),
                ms(limits.wall_time)
            ),
        ),
        match limits.cpu_time {
            None => Enforcement::not_enforced(LimitKind::CpuTime, "no cpu_time limit was set"),
            Some(cpu) if cpu >= code.timeout => Enforcement::by(
                LimitKind::CpuTime,
                format!(
                    "implied by the {} ms script deadline (the script runs on one engine thread)",
                    ms(code.timeout)
                ),
            ),
            Some(cpu) => Enforcement::not_enforced(
                LimitKind::CpuTime,
                format!(
                    "the engine has no CPU clock; only the {} ms script deadline applies, not {} ms of CPU",
                    ms(code.timeout),
                    ms(cpu)
                ),
            ),
        },
        Enforcement::by(
            LimitKind::Memory,
            format!(
                "QuickJS allocator limit: {} bytes of JavaScript heap",
                code.memory_bytes
            ),
        ),
        no_capability(LimitKind::Processes, "process or thread"),
        Enforcement::by(
            LimitKind::Output,
            format!(
                "engine cap on console output plus the result's JSON ({} bytes)",
                code.max_output_bytes
            ),
        ),
        no_capability(LimitKind::Disk, "file system"),
        no_capability(LimitKind::Network, "socket"),
        Enforcement::by(
            LimitKind::ToolCalls,
            format!(
                "host ToolHost budget and allowlist; the engine stops the script at {} calls",
                code.max_tool_calls
            ),
        ),
    ]
}
