//! The bounded worker pool and [`CodeEngine`].

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use toolexec::Exec;

use crate::access::ToolAccess;
use crate::sandbox::{self, Abort, AbortFlag, JobSpec, Msg, SharedProgress};
use crate::{CodeLimit, CodeOutcome, CodeRequest, CodeStatus};

/// How long past its deadline the caller waits for a worker to stop before
/// abandoning it. QuickJS checks for interrupts every 10,000 bytecode
/// operations; a script made of expensive native operations that do not
/// allocate (searching a 50 MB string in a loop, say) can take longer than
/// that between checks. The caller then gets its timeout on time, the
/// worker's pool slot is handed to a fresh thread, and the stuck thread
/// exits at its next interrupt check.
pub(crate) const GRACE: Duration = Duration::from_millis(500);

/// The pool slot of one execution: released by whoever is first, the
/// worker when it finishes or the caller when it gives up on the worker.
type PermitSlot = Arc<Mutex<Option<OwnedSemaphorePermit>>>;

/// Pool size of the shared engine behind [`crate::ExecCodeExt`].
pub const DEFAULT_MAX_CONCURRENT: usize = 64;

/// Native stack of each worker thread. Only touched pages cost memory; the
/// interpreter may use up to [`crate::CodeLimits::max_stack_bytes`]
/// (clamped to 8 MiB) of it.
pub(crate) const WORKER_STACK: usize = 16 << 20;

/// Runs scripts on a bounded pool of worker threads.
///
/// Each execution gets a worker thread of its own for its whole run and a
/// fresh QuickJS runtime on it (so nothing one script does to its globals,
/// prototypes or heap can reach another). At most `max_concurrent`
/// executions run at once; others wait (the wait counts toward their
/// timeout). Worker threads are created on demand, up to `max_concurrent`,
/// and reused. Tool calls made by scripts run on the Tokio runtime of the
/// task that called [`CodeEngine::execute`].
///
/// A script that spins the CPU only occupies its own worker until its
/// deadline, when QuickJS's interrupt handler stops it; the Tokio runtime
/// and the other workers are unaffected. Dropping the future returned by
/// [`CodeEngine::execute`] stops the execution promptly too.
///
/// Cheap to clone (clones share the pool).
///
/// ```
/// use toolexec_code::{CodeEngine, CodeRequest, CodeStatus};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let exec = toolexec::Exec::new(toolexec_builtins::catalog());
/// let engine = CodeEngine::new(exec, 8);
/// let out = engine
///     .execute(CodeRequest::new("return (await tools.math.sqrt({value: 16})).result"))
///     .await;
/// assert_eq!(out.status, CodeStatus::Ok);
/// assert_eq!(out.value, Some(serde_json::json!(4)));
/// # }
/// ```
#[derive(Clone)]
pub struct CodeEngine {
    exec: Option<Exec>,
    tools: Arc<dyn ToolAccess>,
    pool: Pool,
}

impl std::fmt::Debug for CodeEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeEngine")
            .field("exec", &self.exec)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl CodeEngine {
    /// An engine over `exec` running at most `max_concurrent` (at least 1)
    /// executions at a time.
    pub fn new(exec: Exec, max_concurrent: usize) -> Self {
        Self::with_pool(exec, Pool::new(max_concurrent))
    }

    /// An engine whose scripts reach tools through `tools` (e.g. a sandbox
    /// gateway) instead of an [`Exec`].
    pub fn with_tools(tools: Arc<dyn ToolAccess>, max_concurrent: usize) -> Self {
        CodeEngine {
            exec: None,
            tools,
            pool: Pool::new(max_concurrent),
        }
    }

    /// An engine over `tools` sharing `pool` (one engine per run, one pool
    /// per runtime).
    pub(crate) fn with_tools_in(tools: Arc<dyn ToolAccess>, pool: Pool) -> Self {
        CodeEngine {
            exec: None,
            tools,
            pool,
        }
    }

    pub(crate) fn with_pool(exec: Exec, pool: Pool) -> Self {
        CodeEngine {
            tools: Arc::new(exec.clone()),
            exec: Some(exec),
            pool,
        }
    }

    /// The executor tool calls go through, when the engine was built on one.
    pub fn exec(&self) -> Option<&Exec> {
        self.exec.as_ref()
    }

    /// Most executions that run at once.
    pub fn max_concurrent(&self) -> usize {
        self.pool.inner.max
    }

    /// Executes one script. Never fails: every problem is a
    /// [`CodeStatus`]. Needs a Tokio runtime with the time driver.
    pub async fn execute(&self, req: CodeRequest) -> CodeOutcome {
        let started = Instant::now();
        let deadline = started + req.limits.timeout;
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return CodeOutcome::status_only(
                CodeStatus::Exception {
                    message: "internal error: code execution needs a Tokio runtime".into(),
                    stack: None,
                },
                started.elapsed(),
            );
        };
        let permits = self.pool.inner.permits.clone();
        let permit = match tokio::time::timeout_at(deadline.into(), permits.acquire_owned()).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) | Err(_) => {
                return CodeOutcome::status_only(
                    CodeStatus::LimitExceeded {
                        limit: CodeLimit::Timeout,
                        message: format!(
                            "no worker became free within the {} ms timeout ({} executions were running)",
                            req.limits.timeout.as_millis(),
                            self.pool.inner.max
                        ),
                    },
                    started.elapsed(),
                );
            }
        };
        let abort = Arc::new(AbortFlag::default());
        let progress = SharedProgress::default();
        let permit: PermitSlot = Arc::new(Mutex::new(Some(permit)));
        let (tx, rx) = mpsc::channel();
        let (reply, mut result) = oneshot::channel();
        let mut guard = StopOnDrop {
            abort: abort.clone(),
            tx: tx.clone(),
            permit: permit.clone(),
            armed: true,
        };
        let limits = req.limits.clone();
        let job = Job {
            spec: JobSpec {
                code: req.code,
                limits: req.limits,
                tools: self.tools.clone(),
                handle,
                started,
                deadline,
                abort: abort.clone(),
                tx: tx.clone(),
                rx,
                progress: progress.clone(),
            },
            reply,
            permit: permit.clone(),
            home: Arc::downgrade(&self.pool.inner),
            worker: None,
        };
        let failed = |message: String| {
            CodeOutcome::status_only(
                CodeStatus::Exception {
                    message: format!("internal error: {message}"),
                    stack: None,
                },
                started.elapsed(),
            )
        };
        if let Err(message) = self.pool.dispatch(job) {
            guard.armed = false;
            return failed(message);
        }
        let worker_gone = || failed("the code worker failed".into());
        // The worker stops itself at the deadline; the timer here makes sure
        // it is told even while it is deep in native code, and bounds how
        // long the caller waits for it.
        let outcome = match tokio::time::timeout_at(deadline.into(), &mut result).await {
            Ok(r) => r.unwrap_or_else(|_| worker_gone()),
            Err(_) => {
                abort.raise(Abort::Timeout);
                let _ = tx.send(Msg::Wake);
                match tokio::time::timeout(GRACE, &mut result).await {
                    Ok(r) => r.unwrap_or_else(|_| worker_gone()),
                    Err(_) => {
                        // Abandon the worker: report what it did so far and
                        // give its slot to a new thread.
                        drop(permit.lock().take());
                        tracing::warn!(
                            "code-mode worker still busy {} ms after its deadline; abandoning it",
                            GRACE.as_millis()
                        );
                        let (tool_calls, stdout, stderr) = progress.lock().snapshot();
                        CodeOutcome {
                            status: CodeStatus::LimitExceeded {
                                limit: CodeLimit::Timeout,
                                message: format!(
                                    "{} (stopped inside a long native operation)",
                                    sandbox::timeout_message(&limits)
                                ),
                            },
                            value: None,
                            stdout,
                            stderr,
                            tool_calls,
                            duration_ms: sandbox::ms(started.elapsed()),
                        }
                    }
                }
            }
        };
        guard.armed = false;
        outcome
    }
}

/// Stops the execution if the caller drops `execute` before it finishes.
struct StopOnDrop {
    abort: Arc<AbortFlag>,
    tx: Sender<Msg>,
    permit: PermitSlot,
    armed: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.abort.raise(Abort::Cancelled);
            let _ = self.tx.send(Msg::Wake);
            // The stopping worker no longer counts against the pool.
            drop(self.permit.lock().take());
        }
    }
}

struct Job {
    spec: JobSpec,
    reply: oneshot::Sender<CodeOutcome>,
    /// Released after the worker is back in the idle list.
    permit: PermitSlot,
    home: Weak<PoolInner>,
    /// The worker's own handle, returned to the idle list when done.
    worker: Option<Worker>,
}

struct Worker {
    tx: Sender<Job>,
}

struct PoolInner {
    max: usize,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Worker>>,
}

/// A bounded set of worker threads. Threads exit when the pool is dropped
/// and they are idle.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("max", &self.inner.max)
            .field("idle", &self.inner.idle.lock().len())
            .finish()
    }
}

impl Pool {
    pub(crate) fn new(max: usize) -> Self {
        let max = max.max(1);
        Pool {
            inner: Arc::new(PoolInner {
                max,
                permits: Arc::new(Semaphore::new(max)),
                idle: Mutex::new(Vec::with_capacity(max)),
            }),
        }
    }

    /// Hands the job to an idle worker or a new one. The caller holds a
    /// permit, so at most `max` threads ever exist.
    fn dispatch(&self, mut job: Job) -> Result<(), String> {
        loop {
            let idle = self.inner.idle.lock().pop();
            let Some(worker) = idle else { break };
            let tx = worker.tx.clone();
            job.worker = Some(worker);
            match tx.send(job) {
                Ok(()) => return Ok(()),
                // The thread is gone (it cannot be, short of a bug); try another.
                Err(mpsc::SendError(j)) => job = j,
            }
        }
        let (tx, rx) = mpsc::channel::<Job>();
        job.worker = Some(Worker { tx });
        std::thread::Builder::new()
            .name("toolexec-code".into())
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let mut next = Some(job);
                while let Some(job) = next.take() {
                    run_job(job);
                    next = rx.recv().ok();
                }
            })
            .map(|_| ())
            .map_err(|e| format!("cannot start a code worker thread: {e}"))
    }
}

fn run_job(job: Job) {
    let Job {
        spec,
        reply,
        permit,
        home,
        worker,
    } = job;
    let started = spec.started;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sandbox::run(spec)))
        .unwrap_or_else(|p| {
            let detail = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(panic = %detail, "code worker panicked");
            CodeOutcome::status_only(
                CodeStatus::Exception {
                    message: format!("internal error: the code worker panicked: {detail}"),
                    stack: None,
                },
                started.elapsed(),
            )
        });
    // Back to the idle list (then release the permit) before replying, so
    // the caller's next execution finds this worker instead of starting a
    // thread. If the pool is gone (or already has `max` idle workers, after
    // an abandoned worker was replaced), dropping the handle closes the
    // channel and the thread exits.
    if let (Some(pool), Some(worker)) = (home.upgrade(), worker) {
        let mut idle = pool.idle.lock();
        if idle.len() < pool.max {
            idle.push(worker);
        }
    }
    drop(permit.lock().take());
    let _ = reply.send(outcome);
}
