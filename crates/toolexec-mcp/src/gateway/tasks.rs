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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult, DetailedTask,
    ErrorCode, GetTaskResult, JsonObject, Task, TaskPayload,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::telemetry::CallScope;

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
        }
    }
}

/// The state of one task.
#[derive(Debug)]
enum State {
    Working,
    Completed(JsonObject),
    Failed(JsonObject),
    Cancelled,
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

/// A task being run: the handle its background end reports to.
pub(super) struct Running {
    entry: Arc<Entry>,
    pub(super) id: String,
}

impl TaskStore {
    pub(super) fn new(options: TaskOptions) -> Self {
        TaskStore {
            options,
            tasks: Mutex::default(),
        }
    }

    /// A new working task of `owner`, cancelled through `cancel`; `None`
    /// when the principal or the gateway holds as many as allowed.
    pub(super) fn create(&self, owner: String, cancel: CancellationToken) -> Option<Running> {
        let mut tasks = self.tasks.lock();
        let ttl = self.options.ttl;
        tasks.retain(|_, e| e.kept(ttl));
        let owned = tasks.values().filter(|e| e.owner == owner).count();
        if owned >= self.options.max_per_principal || tasks.len() >= self.options.max_tasks {
            return None;
        }
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = SystemTime::now();
        let entry = Arc::new(Entry {
            owner,
            created: now,
            started: Instant::now(),
            state: Mutex::new((State::Working, now)),
            cancel,
        });
        tasks.insert(id.clone(), entry.clone());
        Some(Running { entry, id })
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
    /// Records how the call ended (a cancelled task stays cancelled).
    pub(super) fn finish(self, outcome: Result<CallToolResult, McpError>) {
        let mut state = self.entry.state.lock();
        if !matches!(state.0, State::Working) {
            return;
        }
        let next = match outcome {
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

/// The refusal of `tasks/update`: the gateway never waits for input.
pub(super) fn no_input(id: &str) -> McpError {
    McpError::new(
        ErrorCode::INVALID_PARAMS,
        format!(
            "task {:?} asks for no input: the gateway never answers a call with input_required",
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
        let mut detached = context.clone();
        detached.ct = cancel.clone();
        let gateway = self.clone();
        let run = CallScope::capture().bind(async move { gateway.call(request, &detached).await });
        let mut run = tokio::spawn(run);
        tokio::select! {
            joined = &mut run => return finished(joined).map(Into::into),
            _ = context.ct.cancelled() => {
                cancel.cancel();
                return finished(run.await).map(Into::into);
            }
            _ = tokio::time::sleep(self.shared.tasks.options.after) => {}
        }
        let owner = owner();
        let Some(running) = self.shared.tasks.create(owner, cancel.clone()) else {
            // As many tasks as allowed: answered as usual.
            tokio::select! {
                joined = &mut run => return finished(joined).map(Into::into),
                _ = context.ct.cancelled() => {
                    cancel.cancel();
                    return finished(run.await).map(Into::into);
                }
            }
        };
        let created = self.shared.tasks.created(&running);
        abandoned.disarm();
        tokio::spawn(async move { running.finish(finished(run.await)) });
        Ok(CallToolResponse::Task(created))
    }

    /// `tasks/get` for the calling principal.
    pub(super) fn task_state(&self, id: &str) -> Result<GetTaskResult, McpError> {
        self.shared.tasks.get(id, &owner()).map(GetTaskResult::new)
    }

    /// `tasks/cancel` for the calling principal.
    pub(super) fn cancel_task_of_caller(&self, id: &str) -> Result<(), McpError> {
        self.shared.tasks.cancel(id, &owner())
    }

    /// `tasks/update`: only for a task of the calling principal, and refused.
    pub(super) fn update_task_of_caller(&self, id: &str) -> Result<(), McpError> {
        self.shared.tasks.get(id, &owner())?;
        Err(no_input(id))
    }
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

/// A call's outcome from its task; a panic is an internal error.
fn finished(
    joined: Result<Result<CallToolResult, McpError>, tokio::task::JoinError>,
) -> Result<CallToolResult, McpError> {
    joined.unwrap_or_else(|e| {
        Err(McpError::internal_error(
            format!("the call ended abnormally: {e}"),
            None,
        ))
    })
}
