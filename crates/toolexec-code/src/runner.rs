//! [`CodeRunner`]: the one entry to code mode for a front end (the MCP
//! gateway's `execute_code`, the CLI's `toolexec code`). It takes the
//! profile, decides where scripts run ([`Placement`]), and returns one
//! [`CodeOutcome`] shape wherever they ran.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use toolexec::{CancellationToken, ErrorBody, Exec, ToolAccess};
use toolexec_runtime::{Profile, RunRequest, Runtimes, Unit};
use tracing::Instrument;

use crate::unit::{outcome_from_run, runtime_limits_from_code};
use crate::{CodeEngine, CodeLimit, CodeOutcome, CodeRequest, CodeStatus};

/// How long a sandboxed run may take to wind down once its caller has
/// cancelled it (tool calls in flight see the cancellation, the sandbox is
/// killed and reaped) before the runner answers anyway.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Where a [`CodeRunner`] runs scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In this process's QuickJS engine, on the runner's worker pool: the
    /// engine enforces every limit, but it is not a kernel sandbox.
    InProcess,
    /// As a script unit in the runtime its registry selects for the profile
    /// (for `hardened`, a separate worker process under kernel isolation).
    /// Never in process: with no fitting runtime, nothing runs.
    Runtime(Profile),
}

impl Placement {
    /// Code mode's rule for a profile: `dev` and `standard` in process,
    /// `hardened` in a sandbox runtime.
    ///
    /// ```
    /// use toolexec_code::Placement;
    /// use toolexec_runtime::Profile;
    /// assert_eq!(Placement::for_profile(Profile::Standard), Placement::InProcess);
    /// assert_eq!(
    ///     Placement::for_profile(Profile::Hardened),
    ///     Placement::Runtime(Profile::Hardened)
    /// );
    /// ```
    pub fn for_profile(profile: Profile) -> Self {
        match profile {
            Profile::Hardened => Placement::Runtime(Profile::Hardened),
            _ => Placement::InProcess,
        }
    }
}

/// Something that runs code-mode scripts: a [`CodeRunner`] on this
/// machine, or a fleet of workers elsewhere. The MCP gateway's
/// `execute_code` takes one.
pub trait CodeExecutor: Send + Sync + std::fmt::Debug {
    /// Runs `request`, as [`CodeRunner::run`] does: `cancel` stops it.
    fn execute<'a>(
        &'a self,
        request: CodeRequest,
        cancel: &'a CancellationToken,
    ) -> toolexec::BoxFuture<'a, Result<CodeOutcome, ErrorBody>>;
}

impl CodeExecutor for CodeRunner {
    fn execute<'a>(
        &'a self,
        request: CodeRequest,
        cancel: &'a CancellationToken,
    ) -> toolexec::BoxFuture<'a, Result<CodeOutcome, ErrorBody>> {
        Box::pin(self.run(request, cancel))
    }
}

/// Runs code-mode scripts where the profile says, at most `max_concurrent`
/// at a time, with tools from one [`Exec`]. Cheap to share: build one per
/// front end.
///
/// ```
/// use toolexec::CancellationToken;
/// use toolexec_code::{CodeRequest, CodeRunner, CodeStatus};
/// use toolexec_runtime::Profile;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let exec = toolexec::Exec::new(toolexec_builtins::catalog());
/// let runner = CodeRunner::new(exec, Profile::Standard, None, 4);
/// let outcome = runner
///     .run(CodeRequest::new("return (await tools.math.add({a: 1, b: 2})).result"), &CancellationToken::new())
///     .await
///     .expect("in process, a script always runs");
/// assert_eq!(outcome.status, CodeStatus::Ok);
/// assert_eq!(outcome.value, Some(serde_json::json!(3)));
/// # }
/// ```
#[derive(Debug)]
pub struct CodeRunner {
    exec: Exec,
    place: Place,
}

#[derive(Debug)]
enum Place {
    InProcess(CodeEngine),
    Runtime {
        profile: Profile,
        runtimes: Arc<Runtimes>,
        /// Bounds sandboxed runs at once, as the engine's pool does in process.
        slots: Semaphore,
    },
}

impl CodeRunner {
    /// A runner for `profile` ([`Placement::for_profile`]): sandboxed runs
    /// use `runtimes` (`None`: an empty registry, so a `hardened` script
    /// never runs and the caller gets `backend_unavailable`).
    pub fn new(
        exec: Exec,
        profile: Profile,
        runtimes: Option<Arc<Runtimes>>,
        max_concurrent: usize,
    ) -> Self {
        let runtimes = runtimes.unwrap_or_default();
        CodeRunner::with_placement(
            exec,
            Placement::for_profile(profile),
            runtimes,
            max_concurrent,
        )
    }

    /// A runner for an explicit `placement` (`runtimes` serves
    /// [`Placement::Runtime`] only).
    pub fn with_placement(
        exec: Exec,
        placement: Placement,
        runtimes: Arc<Runtimes>,
        max_concurrent: usize,
    ) -> Self {
        let place = match placement {
            Placement::InProcess => Place::InProcess(CodeEngine::new(exec.clone(), max_concurrent)),
            Placement::Runtime(profile) => Place::Runtime {
                profile,
                runtimes,
                slots: Semaphore::new(max_concurrent.max(1)),
            },
        };
        CodeRunner { exec, place }
    }

    /// Where this runner's scripts run.
    pub fn placement(&self) -> Placement {
        match &self.place {
            Place::InProcess(_) => Placement::InProcess,
            Place::Runtime { profile, .. } => Placement::Runtime(*profile),
        }
    }

    /// Runs one script. `Err` only when nothing ran (no runtime fits the
    /// profile, invalid limits); every run gives an outcome, whatever its
    /// status. When `cancel` fires, the script is stopped and its tool
    /// calls in flight are cancelled; the outcome is then
    /// `limit_exceeded: timeout` (a sandbox gets up to [`CANCEL_GRACE`] to
    /// wind down). Dropping the future stops the script too.
    pub async fn run(
        &self,
        request: CodeRequest,
        cancel: &CancellationToken,
    ) -> Result<CodeOutcome, ErrorBody> {
        let span = tracing::info_span!(
            target: "toolexec::code",
            "execute_code",
            toolexec.outcome = tracing::field::Empty,
            toolexec.code.tool_calls = tracing::field::Empty,
        );
        let result = self
            .run_script(request, cancel, None)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(o) => {
                span.record("toolexec.code.tool_calls", o.tool_calls.len());
                match o.status.failure_text(None) {
                    None => "ok".to_owned(),
                    Some(text) => text.split(':').next().unwrap_or("error").to_owned(),
                }
            }
            Err(body) => body.code.as_str().to_owned(),
        };
        span.record("toolexec.outcome", outcome.as_str());
        result
    }

    /// Runs `request` as [`CodeRunner::run`] does, its tool calls going to
    /// `tools` (a journal of the calls, say) instead of the runner's
    /// [`Exec`], wherever the script runs.
    pub async fn run_with_tools(
        &self,
        request: CodeRequest,
        cancel: &CancellationToken,
        tools: Arc<dyn ToolAccess>,
    ) -> Result<CodeOutcome, ErrorBody> {
        self.run_script(request, cancel, Some(tools)).await
    }

    async fn run_script(
        &self,
        request: CodeRequest,
        cancel: &CancellationToken,
        tools: Option<Arc<dyn ToolAccess>>,
    ) -> Result<CodeOutcome, ErrorBody> {
        let started = Instant::now();
        match &self.place {
            Place::InProcess(engine) => {
                let engine = match tools {
                    Some(tools) => engine.sharing_pool(tools),
                    None => engine.clone(),
                };
                // Dropping the execution stops the script (the engine's drop guard).
                tokio::select! {
                    outcome = engine.execute(request) => Ok(outcome),
                    _ = cancel.cancelled() => Ok(cancelled(started)),
                }
            }
            Place::Runtime {
                profile,
                runtimes,
                slots,
            } => {
                // Cancelled with the caller's token, and when this future is
                // dropped (the guard): the runtime then stops its unit.
                let stop = cancel.child_token();
                let _guard = stop.clone().drop_guard();
                let run = async {
                    let _slot = slots.acquire().await;
                    let CodeRequest { code, limits } = request;
                    let unit = RunRequest::new(Unit::javascript(code), *profile)
                        .with_limits(runtime_limits_from_code(&limits));
                    let run = match tools {
                        Some(tools) => {
                            let tools = toolexec::telemetry::scoped_access(tools);
                            runtimes
                                .run_with_tools(unit, Some(tools), stop.clone())
                                .await
                        }
                        None => runtimes.run(unit, Some(&self.exec), stop.clone()).await,
                    };
                    outcome_from_run(run, &limits)
                };
                tokio::pin!(run);
                tokio::select! {
                    outcome = &mut run => outcome,
                    _ = stop.cancelled() => {
                        tokio::time::timeout(CANCEL_GRACE, run)
                            .await
                            .unwrap_or_else(|_| Ok(cancelled(started)))
                    }
                }
            }
        }
    }
}

/// The outcome of an execution its caller cancelled.
fn cancelled(started: Instant) -> CodeOutcome {
    CodeOutcome::status_only(
        CodeStatus::LimitExceeded {
            limit: CodeLimit::Timeout,
            message: "the execution was cancelled by its caller".into(),
        },
        started.elapsed(),
    )
}
