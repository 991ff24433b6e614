//! Long calls as tasks (the MCP Tasks extension, SEP-2663,
//! `io.modelcontextprotocol/tasks`).
//!
//! For a client that declared the extension, a `tools/call` still running
//! after [`TaskOptions::after`] is answered with a task
//! (`resultType: "task"`) and goes on in the background, detached from the
//! request and the connection: the client (or another connection of the
//! same principal, after a reconnect) polls `tasks/get` for its state and
//! result, and may `tasks/cancel` it. A call that finishes sooner is
//! answered as usual.
//!
//! - A task belongs to the principal that started it
//!   ([`Caller::principal_key`](toolexec::telemetry::Caller::principal_key)):
//!   another principal's `tasks/get` or `tasks/cancel` is answered as for
//!   an unknown task. Ids are 128 random bits.
//! - A finished task is kept for [`TaskOptions::ttl`] from its creation, a
//!   running one until it ends (then as long); at most
//!   [`TaskOptions::max_per_principal`] and [`TaskOptions::max_tasks`] are
//!   held, past which a long call is answered as usual instead.
//! - A tool's error result is a `completed` task (with `isError: true`), a
//!   JSON-RPC error a `failed` one, a cancelled task `cancelled`.
//! - A call that asks its client for input after it became a task (a
//!   2026-07-28 client's call whose server answers `input_required`, or
//!   whose 2025 server asks during it) makes the task `input_required`:
//!   `tasks/get` shows the requests still unanswered, `tasks/update`
//!   answers some or all of them (a key that names none is refused), and
//!   once each has its answer the call is made again with them and the
//!   server's state, as a client's next round would be, and the task is
//!   working again. A task still waiting when a tenth of its time to live
//!   is left (a minute at most), or when the call its server holds for the
//!   answers reaches its deadline, ends with `timeout`; a cancelled one
//!   stops waiting. Either way a call held for the answers ends then. A
//!   held call that ends first (its server gave up asking) ends the wait:
//!   the next round, without answers, takes its result.
//! - With a [`TaskJournal`] (a fleet's, `[cluster]`), a task whose call
//!   the journal can resume (a tool that runs on the fleet) is also kept
//!   there: another gateway of the deployment, or this one restarted,
//!   answers `tasks/get` for it. A task it finds still working is resumed:
//!   its call is made again under the task's key, which returns the first
//!   run's outcome (or waits for it) instead of running again.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, GetTaskResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::BoxFuture;
use toolexec::telemetry::CallScope;

mod store;

pub(super) use store::TaskStore;
use store::{Adopted, error_code, millis};

/// A call's answer, as a task ends with it.
pub type CallAnswer = Result<CallToolResult, McpError>;

/// The idempotency key of the run a journaled task's call makes (its task
/// id), carried in the call's request extensions to its
/// [`RunOptions`](toolexec::RunOptions).
#[derive(Debug, Clone)]
pub(super) struct TaskKey(pub(super) String);

/// Where tasks are kept beyond one gateway process, and how their calls
/// resume there (implemented over a fleet's key-value store and its
/// idempotency keys).
pub trait TaskJournal: Send + Sync + std::fmt::Debug {
    /// Whether calls of `tool` can be resumed: made again under the same
    /// key, they return the first call's outcome instead of running again.
    fn resumable(&self, tool: &toolexec::RegisteredTool) -> bool;

    /// Keeps task `id`'s record (replacing the one kept).
    fn save<'a>(&'a self, id: &'a str, record: Vec<u8>) -> BoxFuture<'a, Result<(), String>>;

    /// Task `id`'s record, if one is kept.
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, String>>;

    /// Stops the run that the call of `tool` with `args` under task `id`'s
    /// key makes (or keeps it from starting), for a task cancelled from a
    /// gateway that does not hold it.
    fn cancel<'a>(&'a self, tool: &'a str, args: &'a Value, id: &'a str) -> BoxFuture<'a, ()>;

    /// The owner a task of `principal` (a principal key) is kept under, or
    /// `None` when its tasks are not kept (a principal that is not the
    /// same one across the deployment, such as `anonymous`).
    fn owner(&self, principal: &str) -> Option<String>;
}

/// How the gateway turns long calls into tasks.
#[derive(Debug, Clone)]
pub struct TaskOptions {
    /// Offer tasks to clients that declare the extension.
    pub enabled: bool,
    /// How long a call runs before it is answered with a task.
    pub after: Duration,
    /// How long a task is kept, from its creation (and at least until it
    /// ends).
    pub ttl: Duration,
    /// Suggested interval between two `tasks/get`.
    pub poll_interval: Duration,
    /// Tasks held at once for one principal.
    pub max_per_principal: usize,
    /// Tasks held at once.
    pub max_tasks: usize,
    /// Where tasks of resumable calls are also kept (none: this process
    /// only).
    pub journal: Option<Arc<dyn TaskJournal>>,
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            enabled: true,
            after: Duration::from_secs(1),
            ttl: Duration::from_secs(3600),
            poll_interval: Duration::from_millis(500),
            max_per_principal: 64,
            max_tasks: 4096,
            journal: None,
        }
    }
}

impl super::server::Gateway {
    /// Whether this `tools/call` may become a task: tasks are on and the
    /// client declared the extension.
    pub(super) fn offers_task(&self, context: &RequestContext<RoleServer>) -> bool {
        self.shared.tasks.options.enabled
            && context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks())
    }

    /// Runs the call detached from the request; answers with its result if
    /// it ends within [`TaskOptions::after`], else with a task that the
    /// call's end completes.
    pub(super) async fn call_or_task(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let cancel = CancellationToken::new();
        // Until the call becomes a task, abandoning the request cancels it.
        let abandoned = cancel.clone().drop_guard();
        let id = new_task_id();
        let resumable = self.resumable(&request);
        let mut run =
            tokio::spawn(self.detached_call(&id, request.clone(), resumable, context, &cancel));
        tokio::select! {
            joined = &mut run => return finished(joined),
            _ = context.ct.cancelled() => {
                cancel.cancel();
                return finished(run.await);
            }
            _ = tokio::time::sleep(self.shared.tasks.options.after) => {}
        }
        let owner = owner();
        let Some(mut running) = self.shared.tasks.create(id, owner, cancel.clone()) else {
            // As many tasks as allowed: answered as usual.
            tokio::select! {
                joined = &mut run => return finished(joined),
                _ = context.ct.cancelled() => {
                    cancel.cancel();
                    return finished(run.await);
                }
            }
        };
        if resumable {
            // Kept before the client learns of it: a gateway that dies
            // after answering leaves a task another one can resume. Not
            // with the client's answers to a server's input requests: they
            // answered this request, not a resumed one.
            let mut request = request.clone();
            request.input_responses = None;
            request.request_state = None;
            self.shared.tasks.journal_task(&mut running, request).await;
        }
        let created = self.shared.tasks.created(&running);
        abandoned.disarm();
        let rounds = self.task_rounds(running, request, run, context, cancel);
        // In the request's scope: each later round runs for its caller.
        tokio::spawn(CallScope::capture().bind(rounds));
        Ok(CallToolResponse::Task(created))
    }

    /// The rest of task `running`'s call: its first round `run`; while a
    /// round asks for input, the task waits for the client's answers and the
    /// call is made again with them and the server's state.
    fn task_rounds(
        &self,
        running: store::Running,
        request: CallToolRequestParams,
        run: tokio::task::JoinHandle<Result<CallToolResponse, McpError>>,
        context: &RequestContext<RoleServer>,
        cancel: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        let gateway = self.clone();
        let mut context = context.clone();
        async move {
            let mut answer = finished(run.await);
            loop {
                let asks = match answer {
                    Ok(CallToolResponse::InputRequired(asks))
                        if asks.input_requests.as_ref().is_some_and(|r| !r.is_empty()) =>
                    {
                        asks
                    }
                    other => return running.finish(for_task(other)).await,
                };
                let requests = asks.input_requests.unwrap_or_default();
                let ttl = gateway.shared.tasks.options.ttl;
                let sealed = asks.request_state.as_deref();
                let held = gateway.task_held_input(&request, sealed);
                let until = running.input_until(ttl, held.as_ref().map(|h| h.within));
                let started = tokio::time::Instant::now();
                let responses = match running.input(requests, until, held.map(|h| h.ended)).await {
                    store::Input::Answered(responses) => responses.into_iter().collect(),
                    // The round without answers takes the call's result.
                    store::Input::Withdrawn => Default::default(),
                    store::Input::Ended => {
                        gateway.abandon_task_input(&request, asks.request_state.as_deref());
                        return running.cancelled().await;
                    }
                    store::Input::Expired => {
                        gateway.abandon_task_input(&request, asks.request_state.as_deref());
                        let expired = waited_too_long(&request.name, started.elapsed());
                        return running.finish(Ok(expired)).await;
                    }
                };
                // As the client's next round would carry them.
                context.extensions.insert(toolexec::ClientInput {
                    responses: Some(responses),
                    state: asks.request_state,
                });
                let round =
                    gateway.detached_call(&running.id, request.clone(), false, &context, &cancel);
                answer = finished(tokio::spawn(round).await);
            }
        }
    }

    /// The catalog id of the tool a task's `request` runs: the published
    /// tool it names, or the one `run_tool` is given.
    fn task_tool_id(&self, request: &CallToolRequestParams) -> Option<String> {
        let name = request.name.as_ref();
        if self.shared.options.expose.meta() && name == super::meta::RUN_TOOL {
            let id = request.arguments.as_ref()?.get("tool_id")?.as_str()?;
            return Some(id.to_owned());
        }
        self.resolve_name(name).ok().flatten()
    }

    /// The input requests a task's `request` got under `sealed` will not
    /// be answered: a call its server holds for them ends now rather than
    /// at its deadline.
    fn abandon_task_input(&self, request: &CallToolRequestParams, sealed: Option<&str>) {
        if let (Some(sealed), Some(id)) = (sealed, self.task_tool_id(request)) {
            self.abandon_input(&id, sealed);
        }
    }

    /// The call an upstream holds for the answers to the input requests a
    /// task's `request` got under `sealed`, if any: it ends at its
    /// deadline, or before (its server gave up asking).
    fn task_held_input(
        &self,
        request: &CallToolRequestParams,
        sealed: Option<&str>,
    ) -> Option<super::run::HeldInput> {
        self.held_input(&self.task_tool_id(request)?, sealed?)
    }

    /// The call of task `id`, detached from the request (cancelled through
    /// `cancel`), under the task's key when it is resumable.
    fn detached_call(
        &self,
        id: &str,
        request: CallToolRequestParams,
        resumable: bool,
        context: &RequestContext<RoleServer>,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + Send + 'static {
        let mut detached = context.clone();
        detached.ct = cancel.clone();
        if resumable {
            detached.extensions.insert(TaskKey(id.to_owned()));
        }
        let gateway = self.clone();
        CallScope::capture().bind(async move { gateway.call(request, &detached).await })
    }

    /// Whether a task of this call can be kept in the journal and resumed
    /// elsewhere: a tool published directly whose calls the journal can
    /// resume.
    fn resumable(&self, request: &CallToolRequestParams) -> bool {
        let Some(journal) = self.shared.tasks.journal() else {
            return false;
        };
        let name = request.name.as_ref();
        if self.shared.options.expose.meta() && super::meta::META_TOOLS.contains(&name) {
            return false;
        }
        self.shared.options.expose.direct()
            && matches!(self.resolve_name(name), Ok(Some(id))
                if self.exec().catalog().get(&id).is_ok_and(|t| journal.resumable(&t)))
    }

    /// Task `id` of the calling principal, in this gateway or else from the
    /// journal: resumed when still working, or, for `cancel`, cancelled
    /// there (its run stopped) without resuming it.
    async fn find_task(
        &self,
        id: &str,
        owner: &str,
        context: &RequestContext<RoleServer>,
        cancel_it: bool,
    ) -> Result<(), McpError> {
        let known = self.shared.tasks.get(id, owner);
        if known.is_ok() || self.shared.tasks.journal().is_none() {
            return known.map(|_| ());
        }
        let cancel = CancellationToken::new();
        let (running, request) = match self.shared.tasks.adopt(id, owner, cancel.clone()).await? {
            None => return known.map(|_| ()),
            Some(Adopted::Held) => return Ok(()),
            Some(Adopted::Working(adopted)) => *adopted,
        };
        let tool = self
            .resolve_name(request.name.as_ref())
            .ok()
            .flatten()
            .filter(|_| self.resumable(&request));
        let Some(tool) = tool else {
            // Not a call this gateway resumes: the record is not its own.
            self.shared.tasks.forget(id);
            return known.map(|_| ());
        };
        if cancel_it {
            let args = request
                .arguments
                .clone()
                .map(Value::Object)
                .unwrap_or(Value::Null);
            if let Some(journal) = self.shared.tasks.journal() {
                journal.cancel(&tool, &args, id).await;
            }
            running.cancelled().await;
            return Ok(());
        }
        tracing::info!(task = %running.id, "resuming a task kept in the journal");
        let run = tokio::spawn(self.detached_call(id, request, true, context, &cancel));
        let gateway = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            let answer = for_task(finished(run.await));
            if unsettled(&answer) && !cancel.is_cancelled() {
                // This gateway could not wait for the run (no slot, no
                // worker seen yet, NATS away): the task stays working in
                // the journal, for a later poll to resume.
                gateway.shared.tasks.forget(&id);
                return;
            }
            running.finish(answer).await;
        });
        Ok(())
    }

    /// `tasks/get` for the calling principal.
    pub(super) async fn task_state(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let owner = owner();
        self.find_task(id, &owner, context, false).await?;
        self.shared.tasks.get(id, &owner).map(GetTaskResult::new)
    }

    /// `tasks/cancel` for the calling principal.
    pub(super) async fn cancel_task_of_caller(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = owner();
        self.find_task(id, &owner, context, true).await?;
        self.shared.tasks.cancel(id, &owner)
    }

    /// `tasks/update`: answers to the input requests of a task of the
    /// calling principal.
    pub(super) async fn update_task_of_caller(
        &self,
        id: &str,
        responses: rmcp::model::InputResponses,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = owner();
        self.find_task(id, &owner, context, false).await?;
        self.shared.tasks.answer(id, &owner, responses)
    }
}

/// 128 random bits, as 32 hex digits.
fn new_task_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: ids from the clock and a counter, still unique.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&millis(SystemTime::now()).to_be_bytes());
        bytes[8..].copy_from_slice(&n.to_be_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The calling principal's key: whom a task belongs to.
fn owner() -> String {
    toolexec::telemetry::current_caller()
        .map(|c| c.principal_key())
        .unwrap_or_else(|| {
            toolexec::telemetry::PrincipalKind::Anonymous
                .as_str()
                .to_owned()
        })
}

/// Whether a resumed call's answer says only that this gateway could not
/// wait for the run (`backend_unavailable`, or a JSON-RPC error), not how
/// the run ended.
fn unsettled(answer: &CallAnswer) -> bool {
    match answer {
        Err(_) => true,
        Ok(result) => error_code(result) == Some(toolexec::ErrorCode::BackendUnavailable.as_str()),
    }
}

/// What a task ends with when its call did. A server's `input_required`
/// with requests makes the task wait for input ([`Gateway::task_rounds`]);
/// one without any (only a state) cannot be answered, and ends the task
/// with that error.
fn for_task(answer: Result<CallToolResponse, McpError>) -> CallAnswer {
    match answer? {
        CallToolResponse::Complete(result) => Ok(result),
        CallToolResponse::InputRequired(asks) => Ok(super::result::error(&toolexec::ErrorBody {
            code: toolexec::ErrorCode::InputRequired,
            message: "input_required: the tool asked for client input after its call became a \
                      task, but named no request to answer; call it again without a task"
                .into(),
            details: serde_json::to_value(asks)
                .ok()
                .map(|input| json!({ "input": input })),
        })),
        other => Err(McpError::internal_error(
            format!("a task's call answered with {other:?}"),
            None,
        )),
    }
}

/// What a task whose call of `tool` waited `waited` for its client's input
/// and could wait no longer ends with.
fn waited_too_long(tool: &str, waited: Duration) -> CallToolResult {
    super::result::error(&toolexec::ErrorBody {
        code: toolexec::ErrorCode::Timeout,
        message: format!(
            "timeout: the task of {tool} waited {} s for its client's input (tasks/update), as \
             long as its time to live, or the call that asked, allowed",
            waited.as_secs()
        ),
        details: None,
    })
}

/// A call's outcome from its task; a panic is an internal error.
fn finished(
    joined: Result<Result<CallToolResponse, McpError>, tokio::task::JoinError>,
) -> Result<CallToolResponse, McpError> {
    joined.unwrap_or_else(|e| {
        Err(McpError::internal_error(
            format!("the call ended abnormally: {e}"),
            None,
        ))
    })
}
