//! The bounded worker pool and [`CodeEngine`].

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use toolexec::Exec;

use crate::quickjs::{self, Abort, AbortFlag, JobSpec, Msg, SharedProgress};
use crate::{CodeLimit, CodeOutcome, CodeRequest, CodeStatus};
use toolexec::ToolAccess;

/// How long past its deadline the caller waits for a worker to stop before
/// abandoning it. QuickJS checks for interrupts every 10,000 bytecode
/// operations, but never inside one native builtin: a single
/// `'a'.repeat(2 ** 25).includes('a'.repeat(2 ** 24) + 'b')` runs for hours
/// without a check. The caller then gets its timeout on time, while the
/// stuck worker keeps its pool slot until it really returns (a thread
/// cannot be stopped safely from outside), so stuck work never occupies
/// more than the pool's threads.
pub(crate) const GRACE: Duration = Duration::from_millis(500);

/// How long a worker must still be running after its caller stopped
/// waiting for it (past the deadline and [`GRACE`], or after the caller
/// dropped the execution) before it counts as stuck. A worker that is only
/// slow to reach its next interrupt check (a loaded machine) stops well
/// within this; while every slot is held by stuck work, new executions are
/// refused at once instead of waiting out their timeouts.
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(5);

/// Pool size of the shared engine behind [`crate::ExecCodeExt`].
pub const DEFAULT_MAX_CONCURRENT: usize = 64;

/// Callers that may wait for a busy pool, per worker: past
/// `max_concurrent * MAX_QUEUED_PER_WORKER` waiting executions, a new one
/// ends at once with [`CodeLimit::Workers`].
pub const MAX_QUEUED_PER_WORKER: usize = 16;

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
/// timeout), up to [`MAX_QUEUED_PER_WORKER`] per worker. Worker threads are
/// created on demand, up to `max_concurrent`, and reused. Tool calls made
/// by scripts run on the Tokio runtime of the task that called
/// [`CodeEngine::execute`].
///
/// A script that spins the CPU only occupies its own worker until its
/// deadline, when QuickJS's interrupt handler stops it; the Tokio runtime
/// and the other workers are unaffected. Dropping the future returned by
/// [`CodeEngine::execute`] stops the execution promptly too.
///
/// **Never more than `max_concurrent` threads run scripts**, whatever the
/// scripts do. A script stuck inside one long native operation (QuickJS
/// does not check for interrupts inside a builtin such as a naive
/// `String.prototype.includes` over megabytes) is answered with its
/// timeout (500 ms after its deadline) but keeps its worker, and its slot,
/// until the operation returns: stuck work is never replaced by fresh
/// threads. While every slot is held by such work (still running 5 s after
/// its caller was answered), or when the wait queue is full, a new
/// execution ends at once with [`CodeLimit::Workers`]; otherwise it waits
/// for a slot within its timeout. [`CodeEngine::stats`] shows the pool.
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
/// assert_eq!(engine.stats().busy, 0);
/// assert!(engine.stats().threads <= 8);
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

/// A snapshot of an engine's worker pool ([`CodeEngine::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// The pool size: most executions, and most worker threads, at once.
    pub max: usize,
    /// Live worker threads (idle or busy); never more than `max`.
    pub threads: usize,
    /// Pool slots in use: executions running, including stuck ones.
    pub busy: usize,
    /// Executions whose callers stopped waiting (timeout or drop) at least
    /// 5 s ago while the worker still runs, holding its slot.
    pub stuck: usize,
    /// Executions waiting for a slot.
    pub queued: usize,
}

impl CodeEngine {
    /// An engine over `exec` running at most `max_concurrent` (at least 1)
    /// executions at a time.
    pub fn new(exec: Exec, max_concurrent: usize) -> Self {
        Self::with_pool(exec, Pool::new(max_concurrent))
    }

    /// An engine whose scripts reach tools through `tools` (e.g. a sandbox
    /// tool channel) instead of an [`Exec`].
    pub fn with_tools(tools: Arc<dyn ToolAccess>, max_concurrent: usize) -> Self {
        CodeEngine {
            exec: None,
            tools,
            pool: Pool::new(max_concurrent),
        }
    }

    /// An engine over `tools` sharing this engine's worker pool: one pool
    /// bounds the threads of many engines (one per run, each with tools of
    /// its own, such as a journal).
    pub fn sharing_pool(&self, tools: Arc<dyn ToolAccess>) -> Self {
        Self::with_tools_in(tools, self.pool.clone())
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

    /// The state of the worker pool (shared by clones of this engine).
    pub fn stats(&self) -> PoolStats {
        self.pool.stats()
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
        let permit = match self.pool.acquire(deadline, req.limits.timeout).await {
            Ok(p) => p,
            Err(status) => return CodeOutcome::status_only(status, started.elapsed()),
        };
        let abort = Arc::new(AbortFlag::default());
        let progress = SharedProgress::default();
        let watch = Arc::new(Watch::default());
        let (tx, rx) = mpsc::channel();
        let (reply, mut result) = oneshot::channel();
        let mut guard = StopOnDrop {
            abort: abort.clone(),
            tx: tx.clone(),
            watch: watch.clone(),
            pool: Arc::downgrade(&self.pool.inner),
            armed: true,
        };
        let limits = req.limits.clone();
        let job = Job {
            spec: JobSpec {
                code: req.code,
                limits: req.limits,
                // The script's tool calls, made on its worker thread, stay
                // in this task's trace and are made for its caller.
                tools: toolexec::telemetry::scoped_access(self.tools.clone()),
                handle,
                started,
                deadline,
                abort: abort.clone(),
                tx: tx.clone(),
                rx,
                progress: progress.clone(),
            },
            reply,
            permit,
            watch: watch.clone(),
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
                        // Answer without the worker: report what it did so
                        // far. It keeps its slot until it returns.
                        Pool::mark_stuck_later(&self.pool.inner, watch);
                        tracing::warn!(
                            "code-mode worker still busy {} ms after its deadline; answering \
                             without it (it keeps its pool slot until it returns)",
                            GRACE.as_millis()
                        );
                        let (tool_calls, stdout, stderr) = progress.lock().snapshot();
                        CodeOutcome {
                            status: CodeStatus::LimitExceeded {
                                limit: CodeLimit::Timeout,
                                message: format!(
                                    "{} (stopped inside a long native operation)",
                                    quickjs::timeout_message(&limits)
                                ),
                            },
                            value: None,
                            stdout,
                            stderr,
                            tool_calls,
                            duration_ms: quickjs::ms(started.elapsed()),
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
/// The worker keeps its pool slot until it has really stopped; if it is
/// still running [`STUCK_AFTER`] later, it counts as stuck.
struct StopOnDrop {
    abort: Arc<AbortFlag>,
    tx: Sender<Msg>,
    watch: Arc<Watch>,
    pool: Weak<PoolInner>,
    armed: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.abort.raise(Abort::Cancelled);
        let _ = self.tx.send(Msg::Wake);
        if let Some(pool) = self.pool.upgrade() {
            Pool::mark_stuck_later(&pool, self.watch.clone());
        }
    }
}

/// Whether the caller answered without waiting for a job ("stuck"), agreed
/// once between the caller and the worker so the pool's count of stuck
/// jobs stays exact.
#[derive(Default)]
struct Watch(AtomicU8);

const RUNNING: u8 = 0;
const STUCK: u8 = 1;
const FINISHED: u8 = 2;

struct Job {
    spec: JobSpec,
    reply: oneshot::Sender<CodeOutcome>,
    /// The job's pool slot: held by the worker until it is back in the
    /// idle list, whatever the caller does meanwhile.
    permit: OwnedSemaphorePermit,
    watch: Arc<Watch>,
    home: Weak<PoolInner>,
    /// The worker's own handle, returned to the idle list when done.
    worker: Option<Worker>,
}

struct Worker {
    tx: Sender<Job>,
}

struct PoolInner {
    max: usize,
    max_queued: usize,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Worker>>,
    /// Live worker threads.
    threads: Arc<AtomicUsize>,
    /// Jobs answered without their worker (see [`Watch`]).
    stuck: AtomicUsize,
    /// Callers waiting for a permit.
    queued: AtomicUsize,
}

impl PoolInner {
    /// The caller answered without waiting for the job's worker.
    fn mark_stuck(&self, watch: &Watch) {
        self.stuck.fetch_add(1, Ordering::AcqRel);
        if watch
            .0
            .compare_exchange(RUNNING, STUCK, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // The worker finished meanwhile.
            self.stuck.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The job's worker returned.
    fn finished(&self, watch: &Watch) {
        if watch.0.swap(FINISHED, Ordering::AcqRel) == STUCK {
            self.stuck.fetch_sub(1, Ordering::AcqRel);
        }
    }
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
            .field("stats", &self.stats())
            .field("idle", &self.inner.idle.lock().len())
            .finish()
    }
}

/// Leaves the wait queue when dropped.
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts a live worker thread until it exits (or fails to start). Not a
/// handle on the pool: the pool must not be kept alive by its own threads.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new(threads: &Arc<AtomicUsize>) -> Self {
        threads.fetch_add(1, Ordering::AcqRel);
        Live(threads.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pool {
    /// Counts the job as stuck if its worker is still running
    /// [`STUCK_AFTER`] from now. Without a Tokio runtime (it is shutting
    /// down) the job is not counted, but it still holds its slot.
    fn mark_stuck_later(pool: &Arc<PoolInner>, watch: Arc<Watch>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = Arc::downgrade(pool);
        handle.spawn(async move {
            tokio::time::sleep(STUCK_AFTER).await;
            if let Some(pool) = pool.upgrade() {
                pool.mark_stuck(&watch);
            }
        });
    }

    pub(crate) fn new(max: usize) -> Self {
        let max = max.max(1);
        Pool {
            inner: Arc::new(PoolInner {
                max,
                max_queued: max.saturating_mul(MAX_QUEUED_PER_WORKER),
                permits: Arc::new(Semaphore::new(max)),
                idle: Mutex::new(Vec::with_capacity(max)),
                threads: Arc::default(),
                stuck: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
            }),
        }
    }

    fn stats(&self) -> PoolStats {
        let inner = &self.inner;
        PoolStats {
            max: inner.max,
            threads: inner.threads.load(Ordering::Acquire),
            busy: inner.max - inner.permits.available_permits().min(inner.max),
            stuck: inner.stuck.load(Ordering::Acquire),
            queued: inner.queued.load(Ordering::Acquire),
        }
    }

    /// A pool slot before `deadline`, or the status to end the execution
    /// with: at once when every slot is held by stuck work or the queue is
    /// full, at the deadline when no slot became free.
    async fn acquire(
        &self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<OwnedSemaphorePermit, CodeStatus> {
        let inner = &self.inner;
        if let Ok(permit) = inner.permits.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let saturated = |message: String| CodeStatus::LimitExceeded {
            limit: CodeLimit::Workers,
            message,
        };
        let stuck = inner.stuck.load(Ordering::Acquire);
        if stuck >= inner.max {
            return Err(saturated(format!(
                "all {} code-mode workers are held by scripts stuck in long native operations \
                 past their deadlines; try again later",
                inner.max
            )));
        }
        let waiting = inner.queued.fetch_add(1, Ordering::AcqRel);
        let _queued = Queued(&inner.queued);
        if waiting >= inner.max_queued {
            return Err(saturated(format!(
                "all {} code-mode workers are busy and {waiting} executions are already \
                 waiting for one (the most allowed)",
                inner.max
            )));
        }
        match tokio::time::timeout_at(deadline.into(), inner.permits.clone().acquire_owned()).await
        {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(CodeStatus::LimitExceeded {
                limit: CodeLimit::Timeout,
                message: format!(
                    "no worker became free within the {} ms timeout ({} executions were \
                     running, {} of them stuck in long native operations past their deadlines)",
                    timeout.as_millis(),
                    inner.max,
                    inner.stuck.load(Ordering::Acquire)
                ),
            }),
        }
    }

    /// Hands the job to an idle worker or a new one. The job holds a
    /// permit until its worker is idle again, so at most `max` threads
    /// ever exist.
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
        let live = Live::new(&self.inner.threads);
        std::thread::Builder::new()
            .name(WORKER_NAME.into())
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let _live = live;
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

/// The name of every worker thread (as in `/proc/self/task/*/comm`).
pub(crate) const WORKER_NAME: &str = "toolexec-code";

fn run_job(job: Job) {
    let Job {
        spec,
        reply,
        permit,
        watch,
        home,
        worker,
    } = job;
    let started = spec.started;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| quickjs::run(spec)))
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
    // thread. If the pool is gone, dropping the handle closes the channel
    // and the thread exits.
    if let Some(pool) = home.upgrade() {
        pool.finished(&watch);
        if let Some(worker) = worker {
            pool.idle.lock().push(worker);
        }
    }
    drop(permit);
    let _ = reply.send(outcome);
}
