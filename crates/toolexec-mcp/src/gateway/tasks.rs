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
//! - The gateway never asks for input through a task (`input_required`):
//!   `tasks/update` is refused.
//! - With a [`TaskJournal`] (a fleet's, `[cluster]`), a task whose call
//!   the journal can resume (a tool that runs on the fleet) is also kept
//!   there: another gateway of the deployment, or this one restarted,
//!   answers `tasks/get` for it. A task it finds still working is resumed:
//!   its call is made again under the task's key, which returns the first
//!   run's outcome (or waits for it) instead of running again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult, DetailedTask,
    ErrorCode, GetTaskResult, JsonObject, Task, TaskPayload,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::BoxFuture;
use toolexec::telemetry::CallScope;

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

/// The state of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", content = "value", rename_all = "snake_case")]
enum State {
    Working,
    Completed(JsonObject),
    Failed(JsonObject),
    Cancelled,
}

/// A task as a [`TaskJournal`] keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    owner: String,
    created_ms: u64,
    updated_ms: u64,
    /// The call, to resume it.
    request: CallToolRequestParams,
    #[serde(flatten)]
    state: State,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[derive(Debug)]
struct Entry {
    owner: String,
    created: SystemTime,
    started: Instant,
    state: Mutex<(State, SystemTime)>,
    cancel: CancellationToken,
}

impl Entry {
    /// Still kept: within `ttl` of its creation, or still running.
    fn kept(&self, ttl: Duration) -> bool {
        self.started.elapsed() <= ttl || matches!(self.state.lock().0, State::Working)
    }
}

/// The tasks of one gateway, shared by every connection.
#[derive(Debug)]
pub(super) struct TaskStore {
    options: TaskOptions,
    tasks: Mutex<HashMap<String, Arc<Entry>>>,
}

/// A task taken from the journal.
pub(super) enum Adopted {
    /// Held here now (ended, or adopted by another request meanwhile).
    Held,
    /// Still working: its handle, and its call to resume or cancel.
    Working(Box<(Running, CallToolRequestParams)>),
}

/// A task being run: the handle its background end reports to.
pub(super) struct Running {
    entry: Arc<Entry>,
    pub(super) id: String,
    /// Kept in the journal too, with this call.
    journaled: Option<(Arc<dyn TaskJournal>, CallToolRequestParams)>,
}

impl TaskStore {
    pub(super) fn new(options: TaskOptions) -> Self {
        TaskStore {
            options,
            tasks: Mutex::default(),
        }
    }

    /// The journal, if tasks are kept beyond this process.
    pub(super) fn journal(&self) -> Option<&Arc<dyn TaskJournal>> {
        self.options.journal.as_ref()
    }

    /// A new working task `id` of `owner`, cancelled through `cancel`;
    /// `None` when the principal or the gateway holds as many as allowed.
    pub(super) fn create(
        &self,
        id: String,
        owner: String,
        cancel: CancellationToken,
    ) -> Option<Running> {
        let now = SystemTime::now();
        self.insert(id, owner, now, (State::Working, now), cancel)
    }

    fn insert(
        &self,
        id: String,
        owner: String,
        created: SystemTime,
        state: (State, SystemTime),
        cancel: CancellationToken,
    ) -> Option<Running> {
        let mut tasks = self.tasks.lock();
        let ttl = self.options.ttl;
        tasks.retain(|_, e| e.kept(ttl));
        let owned = tasks.values().filter(|e| e.owner == owner).count();
        if owned >= self.options.max_per_principal
            || tasks.len() >= self.options.max_tasks
            || tasks.contains_key(&id)
        {
            return None;
        }
        let age = created.elapsed().unwrap_or_default();
        let entry = Arc::new(Entry {
            owner,
            created,
            started: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
            state: Mutex::new(state),
            cancel,
        });
        tasks.insert(id.clone(), entry.clone());
        Some(Running {
            entry,
            id,
            journaled: None,
        })
    }

    /// Task `id` of `principal` from the journal, taken into this gateway:
    /// as it ended, or, still working, with a [`Running`] handle and its
    /// call. `Ok(None)` when the journal keeps no such task for it; an
    /// error (to try again) when the journal cannot be read or this
    /// gateway holds as many tasks as allowed.
    pub(super) async fn adopt(
        &self,
        id: &str,
        principal: &str,
        cancel: CancellationToken,
    ) -> Result<Option<Adopted>, McpError> {
        let Some(journal) = self.journal().cloned() else {
            return Ok(None);
        };
        let Some(owner) = journal.owner(principal) else {
            return Ok(None);
        };
        let retry = |why: String| {
            McpError::internal_error(
                format!("task {:?}: {why}; try again", toolexec::telemetry::clip(id)),
                None,
            )
        };
        let bytes = match journal.load(id).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(e) => return Err(retry(format!("the task journal cannot be read: {e}"))),
        };
        let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
            return Ok(None);
        };
        let now = millis(SystemTime::now());
        // A record from the future is not one this deployment wrote.
        if record.owner != owner
            || record.created_ms > now + 60_000
            || record.updated_ms > now + 60_000
        {
            return Ok(None);
        }
        let created = from_millis(record.created_ms);
        let working = matches!(record.state, State::Working);
        if created.elapsed().unwrap_or_default() > self.options.ttl && !working {
            return Ok(None);
        }
        let state = (record.state, from_millis(record.updated_ms));
        let Some(mut running) =
            self.insert(id.to_owned(), principal.to_owned(), created, state, cancel)
        else {
            // Adopted meanwhile by another request, or no room.
            return match self.get(id, principal) {
                Ok(_) => Ok(Some(Adopted::Held)),
                Err(_) => Err(retry("this gateway holds as many tasks as it may".into())),
            };
        };
        if !working {
            return Ok(Some(Adopted::Held));
        }
        running.journaled = Some((journal, record.request.clone()));
        Ok(Some(Adopted::Working(Box::new((running, record.request)))))
    }

    /// Forgets task `id` here (its record stays in the journal).
    pub(super) fn forget(&self, id: &str) {
        self.tasks.lock().remove(id);
    }

    /// Keeps `running` in the journal too, as working on `request`, when
    /// its owner's tasks are kept.
    pub(super) async fn journal_task(&self, running: &mut Running, request: CallToolRequestParams) {
        let Some(journal) = self.journal().cloned() else {
            return;
        };
        if journal.owner(&running.entry.owner).is_none() {
            return;
        }
        running.journaled = Some((journal, request));
        running.save().await;
    }

    /// The task `id` of `owner`, as `tasks/get` answers it.
    pub(super) fn get(&self, id: &str, owner: &str) -> Result<DetailedTask, McpError> {
        let entry = self.find(id, owner)?;
        Ok(self.detailed(id, &entry))
    }

    /// Cancels the task `id` of `owner` (nothing if it already ended).
    pub(super) fn cancel(&self, id: &str, owner: &str) -> Result<(), McpError> {
        let entry = self.find(id, owner)?;
        let mut state = entry.state.lock();
        if matches!(state.0, State::Working) {
            *state = (State::Cancelled, SystemTime::now());
            entry.cancel.cancel();
        }
        Ok(())
    }

    fn find(&self, id: &str, owner: &str) -> Result<Arc<Entry>, McpError> {
        let ttl = self.options.ttl;
        let tasks = self.tasks.lock();
        match tasks.get(id) {
            Some(e) if e.owner == owner && e.kept(ttl) => Ok(e.clone()),
            _ => Err(McpError::invalid_params(
                format!("unknown task: {:?}", toolexec::telemetry::clip(id)),
                Some(json!({"taskId": toolexec::telemetry::clip(id)})),
            )),
        }
    }

    fn detailed(&self, id: &str, entry: &Entry) -> DetailedTask {
        let state = entry.state.lock();
        let payload = match &state.0 {
            State::Working => TaskPayload::Working,
            State::Completed(result) => TaskPayload::Completed {
                result: result.clone(),
            },
            State::Failed(error) => TaskPayload::Failed {
                error: error.clone(),
            },
            State::Cancelled => TaskPayload::Cancelled,
        };
        let task = Task::new(
            id,
            payload.status(),
            rfc3339(entry.created),
            rfc3339(state.1),
        )
        .with_ttl_ms(self.options.ttl.as_millis() as u64)
        .with_poll_interval_ms(self.options.poll_interval.as_millis() as u64);
        DetailedTask::new(task, payload)
    }

    /// The answer to the `tools/call` that became task `running`.
    pub(super) fn created(&self, running: &Running) -> CreateTaskResult {
        let task = self.detailed(&running.id, &running.entry).task;
        CreateTaskResult::new(task)
    }
}

impl Running {
    /// Records how the call ended (a cancelled task stays cancelled), in
    /// the journal too when it keeps the task.
    pub(super) async fn finish(self, outcome: Result<CallToolResult, McpError>) {
        self.settle(outcome);
        self.save().await;
    }

    /// Marks the task cancelled, here and in the journal.
    async fn cancelled(self) {
        {
            let mut state = self.entry.state.lock();
            if matches!(state.0, State::Working) {
                *state = (State::Cancelled, SystemTime::now());
            }
        }
        self.entry.cancel.cancel();
        self.save().await;
    }

    /// Puts the task as it stands into the journal, if it keeps it.
    async fn save(&self) {
        let Some((journal, request)) = &self.journaled else {
            return;
        };
        let Some(owner) = journal.owner(&self.entry.owner) else {
            return;
        };
        let (state, updated) = self.entry.state.lock().clone();
        let record = Record {
            owner,
            created_ms: millis(self.entry.created),
            updated_ms: millis(updated),
            request: request.clone(),
            state,
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        if let Err(e) = journal.save(&self.id, bytes).await {
            tracing::warn!(task = %self.id, "task journal: {e}");
        }
    }

    fn settle(&self, outcome: Result<CallToolResult, McpError>) {
        let mut state = self.entry.state.lock();
        if !matches!(state.0, State::Working) {
            return;
        }
        let next = match outcome {
            // The run was cancelled (here, or from another gateway through
            // the run itself): so is the task.
            Ok(result) if error_code(&result) == Some(toolexec::ErrorCode::Cancelled.as_str()) => {
                State::Cancelled
            }
            Ok(result) => match serde_json::to_value(result) {
                Ok(Value::Object(map)) => State::Completed(map),
                _ => State::Failed(error_object(&McpError::internal_error(
                    "the result could not be encoded",
                    None,
                ))),
            },
            Err(e) if self.entry.cancel.is_cancelled() => {
                let _ = e;
                State::Cancelled
            }
            Err(e) => State::Failed(error_object(&e)),
        };
        *state = (next, SystemTime::now());
    }
}

/// A JSON-RPC error as a task's `error`.
fn error_object(e: &McpError) -> JsonObject {
    let mut map = JsonObject::new();
    map.insert("code".into(), Value::from(e.code.0));
    map.insert("message".into(), Value::from(e.message.to_string()));
    if let Some(data) = &e.data {
        map.insert("data".into(), data.clone());
    }
    map
}

/// The refusal of `tasks/update`: a task of the gateway never waits for
/// input (its call cannot be answered with `input_required`).
pub(super) fn no_input(id: &str) -> McpError {
    McpError::new(
        ErrorCode::INVALID_PARAMS,
        format!(
            "task {:?} asks for no input: the gateway's tasks never wait for client input",
            toolexec::telemetry::clip(id)
        ),
        None,
    )
}

fn rfc3339(t: SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
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
            let mut request = request;
            request.input_responses = None;
            request.request_state = None;
            self.shared.tasks.journal_task(&mut running, request).await;
        }
        let created = self.shared.tasks.created(&running);
        abandoned.disarm();
        tokio::spawn(async move { running.finish(for_task(finished(run.await))).await });
        Ok(CallToolResponse::Task(created))
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

    /// `tasks/update`: only for a task of the calling principal, and refused.
    pub(super) async fn update_task_of_caller(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.find_task(id, &owner(), context, false).await?;
        Err(no_input(id))
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

/// The stable code of an error result (`isError` with the error body).
fn error_code(result: &CallToolResult) -> Option<&str> {
    result
        .structured_content
        .as_ref()?
        .get("error")?
        .get("code")?
        .as_str()
}

/// What a task ends with when its call did: a task never waits for
/// input, so a server's `input_required` that comes after the call became a
/// task (before, the client gets it as the call's answer) ends it with
/// that error.
fn for_task(answer: Result<CallToolResponse, McpError>) -> CallAnswer {
    match answer? {
        CallToolResponse::Complete(result) => Ok(result),
        CallToolResponse::InputRequired(asks) => Ok(super::result::error(&toolexec::ErrorBody {
            code: toolexec::ErrorCode::InputRequired,
            message: "input_required: the tool asked for client input after its call became a \
                      task, and a task does not wait for input; call it again without a task"
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
