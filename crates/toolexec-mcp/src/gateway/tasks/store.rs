//! Where a gateway keeps its tasks: their states ([`TaskStore`]), the
//! handle a task's call reports to ([`Running`]), and their records in a
//! [`TaskJournal`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CreateTaskResult, DetailedTask, ErrorCode,
    InputRequests, InputResponses, JsonObject, Task, TaskPayload,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use toolexec::BoxFuture;

use super::{TaskJournal, TaskOptions};

/// The state of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", content = "value", rename_all = "snake_case")]
enum State {
    Working,
    /// Waits for the client's answers to these requests (`tasks/update`);
    /// those answered already are left out.
    InputRequired(InputRequests),
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

pub(super) fn millis(t: SystemTime) -> u64 {
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
    /// While the task is `input_required`: the answers so far, and where
    /// they go once every request has one. Locked after `state`.
    input: Mutex<Option<Answering>>,
}

/// The answers gathered for an `input_required` task.
#[derive(Debug)]
struct Answering {
    answered: InputResponses,
    done: oneshot::Sender<InputResponses>,
}

impl State {
    /// Not ended: working, or waiting for input.
    fn running(&self) -> bool {
        matches!(self, State::Working | State::InputRequired(_))
    }
}

impl Entry {
    /// Still kept: within `ttl` of its creation, or still running.
    fn kept(&self, ttl: Duration) -> bool {
        self.started.elapsed() <= ttl || self.state.lock().0.running()
    }
}

/// How a task's wait for its client's input ended.
pub(super) enum Input {
    /// Every request has its answer.
    Answered(InputResponses),
    /// The task was cancelled.
    Ended,
    /// No answers within the task's time to live.
    Expired,
    /// The call that asked ended without the answers (its server gave up
    /// asking): its next round takes the result.
    Withdrawn,
}

/// The tasks of one gateway, shared by every connection.
#[derive(Debug)]
pub(in crate::gateway) struct TaskStore {
    pub(super) options: TaskOptions,
    tasks: Mutex<HashMap<String, Arc<Entry>>>,
}

/// A task taken from the journal.
pub(in crate::gateway) enum Adopted {
    /// Held here now (ended, or adopted by another request meanwhile).
    Held,
    /// Still working: its handle, and its call to resume or cancel.
    Working(Box<(Running, CallToolRequestParams)>),
}

/// A task being run: the handle its background end reports to.
pub(in crate::gateway) struct Running {
    entry: Arc<Entry>,
    pub(super) id: String,
    /// Kept in the journal too, with this call.
    journaled: Option<(Arc<dyn TaskJournal>, CallToolRequestParams)>,
}

impl TaskStore {
    pub(in crate::gateway) fn new(options: TaskOptions) -> Self {
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
            input: Mutex::new(None),
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
        if state.0.running() {
            *state = (State::Cancelled, SystemTime::now());
            entry.input.lock().take();
            entry.cancel.cancel();
        }
        Ok(())
    }

    /// `tasks/update`: `responses` to the requests the task `id` of `owner`
    /// waits for; once every request has one, its call goes on with them.
    /// A key that names no outstanding request is refused, naming it.
    pub(super) fn answer(
        &self,
        id: &str,
        owner: &str,
        responses: InputResponses,
    ) -> Result<(), McpError> {
        let entry = self.find(id, owner)?;
        let mut state = entry.state.lock();
        let State::InputRequired(outstanding) = &mut state.0 else {
            return Err(no_input(id));
        };
        if let Some(key) = responses.keys().find(|k| !outstanding.contains_key(*k)) {
            return Err(McpError::invalid_params(
                format!(
                    "task {:?} waits for no input request {:?}: answer those its \
                     `inputRequests` name",
                    toolexec::telemetry::clip(id),
                    toolexec::telemetry::clip(key)
                ),
                Some(json!({
                    "taskId": toolexec::telemetry::clip(id),
                    "inputResponses": toolexec::telemetry::clip(key),
                })),
            ));
        }
        let mut input = entry.input.lock();
        let Some(answering) = input.as_mut() else {
            return Err(no_input(id));
        };
        for (key, value) in responses {
            outstanding.remove(&key);
            answering.answered.insert(key, value);
        }
        let now = SystemTime::now();
        if outstanding.is_empty()
            && let Some(answering) = input.take()
        {
            *state = (State::Working, now);
            let _ = answering.done.send(answering.answered);
        } else {
            state.1 = now;
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
            State::InputRequired(requests) => TaskPayload::InputRequired {
                input_requests: requests.clone(),
            },
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

    /// Until when the task may wait for input: until a tenth of its time to
    /// live `ttl` is left ([`input_window`]), or `within` from now if that
    /// is sooner (the call that asked ends by then); `None`: no end.
    pub(super) fn input_until(&self, ttl: Duration, within: Option<Duration>) -> Option<Instant> {
        let window = self.entry.started.checked_add(input_window(ttl));
        let limit = within.and_then(|w| Instant::now().checked_add(w));
        match (window, limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Puts the task in `input_required` for `requests` until the client
    /// answered each (`tasks/update`), the task is cancelled, `until`
    /// ([`Self::input_until`]) or `withdrawn` resolves (the call that asked
    /// ended without them); the task is working again then. The journal
    /// keeps the task as working: another gateway could not take the
    /// answers.
    pub(super) async fn input(
        &self,
        requests: InputRequests,
        until: Option<Instant>,
        withdrawn: Option<BoxFuture<'static, ()>>,
    ) -> Input {
        let (done, answers) = oneshot::channel();
        {
            let mut state = self.entry.state.lock();
            if !matches!(state.0, State::Working) {
                return Input::Ended;
            }
            *state = (State::InputRequired(requests), SystemTime::now());
            *self.entry.input.lock() = Some(Answering {
                answered: InputResponses::new(),
                done,
            });
        }
        let mut answers = answers;
        let expired = async {
            match until {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let withdrawn = async {
            match withdrawn {
                Some(withdrawn) => withdrawn.await,
                None => std::future::pending().await,
            }
        };
        let stopped = tokio::select! {
            biased;
            answers = &mut answers => return answers.map_or(Input::Ended, Input::Answered),
            () = self.entry.cancel.cancelled() => return Input::Ended,
            () = withdrawn => Input::Withdrawn,
            () = expired => Input::Expired,
        };
        {
            let mut state = self.entry.state.lock();
            if matches!(state.0, State::InputRequired(_)) {
                *state = (State::Working, SystemTime::now());
                self.entry.input.lock().take();
                return stopped;
            }
        }
        // Answered (or cancelled) as the wait stopped.
        answers.await.map_or(Input::Ended, Input::Answered)
    }

    /// Marks the task cancelled, here and in the journal.
    pub(super) async fn cancelled(self) {
        {
            let mut state = self.entry.state.lock();
            if state.0.running() {
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

/// How long after its creation a task with time to live `ttl` may wait for
/// input: until a tenth of its ttl (a minute at most) is left, so that the
/// `timeout` it then ends with is still there to read.
fn input_window(ttl: Duration) -> Duration {
    ttl - (ttl / 10).min(Duration::from_secs(60))
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

/// The refusal of `tasks/update` for a task that waits for no input.
pub(super) fn no_input(id: &str) -> McpError {
    McpError::new(
        ErrorCode::INVALID_PARAMS,
        format!(
            "task {:?} waits for no input (it is not `input_required`)",
            toolexec::telemetry::clip(id)
        ),
        Some(json!({"taskId": toolexec::telemetry::clip(id)})),
    )
}

fn rfc3339(t: SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The stable code of an error result (`isError` with the error body).
pub(super) fn error_code(result: &CallToolResult) -> Option<&str> {
    result
        .structured_content
        .as_ref()?
        .get("error")?
        .get("code")?
        .as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(keys: &[&str]) -> InputRequests {
        let confirm = json!({
            "method": "elicitation/create",
            "params": {"message": "Agree?", "requestedSchema": {"type": "object", "properties": {}}},
        });
        keys.iter()
            .map(|k| {
                (
                    (*k).to_owned(),
                    serde_json::from_value(confirm.clone()).unwrap(),
                )
            })
            .collect()
    }

    fn yes(keys: &[&str]) -> InputResponses {
        keys.iter()
            .map(|k| ((*k).to_owned(), json!({"action": "accept"})))
            .collect()
    }

    fn status(store: &TaskStore, id: &str) -> TaskPayload {
        store.get(id, "alice").unwrap().payload
    }

    /// A task waits for every request's answer, given over several
    /// updates; a key it does not wait for, another principal, and a task
    /// that waits for nothing are refused; then it is working again.
    #[tokio::test]
    async fn a_task_takes_its_input_in_parts() {
        let store = Arc::new(TaskStore::new(TaskOptions::default()));
        let running = store
            .create("t1".into(), "alice".into(), CancellationToken::new())
            .unwrap();
        assert!(store.answer("t1", "alice", yes(&["a"])).is_err());
        let until = running.input_until(Duration::from_secs(60), None);
        let waiting = tokio::spawn(async move {
            let input = running.input(requests(&["a", "b"]), until, None).await;
            (running, input)
        });
        while !matches!(status(&store, "t1"), TaskPayload::InputRequired { .. }) {
            tokio::task::yield_now().await;
        }
        let refused = store.answer("t1", "alice", yes(&["c"])).unwrap_err();
        assert_eq!(refused.code, ErrorCode::INVALID_PARAMS);
        assert!(refused.message.contains("\"c\""), "{refused:?}");
        assert!(store.answer("t1", "bob", yes(&["a"])).is_err());
        store.answer("t1", "alice", yes(&["a"])).unwrap();
        match status(&store, "t1") {
            TaskPayload::InputRequired { input_requests } => {
                assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["b"]);
            }
            other => panic!("{other:?}"),
        }
        store.answer("t1", "alice", yes(&["b"])).unwrap();
        let (_running, input) = waiting.await.unwrap();
        match input {
            Input::Answered(answers) => assert_eq!(answers, yes(&["a", "b"])),
            _ => panic!("not answered"),
        }
        assert_eq!(status(&store, "t1"), TaskPayload::Working);
        assert!(store.answer("t1", "alice", yes(&["b"])).is_err());
    }

    /// A task cancelled while it waits stops waiting and stays cancelled;
    /// one whose time to live runs out is working again (its call then
    /// ends it).
    #[tokio::test]
    async fn a_task_stops_waiting_when_cancelled_or_expired() {
        let store = TaskStore::new(TaskOptions::default());
        let running = store
            .create("t2".into(), "alice".into(), CancellationToken::new())
            .unwrap();
        let until = running.input_until(Duration::from_secs(60), None);
        let (input, ()) = tokio::join!(running.input(requests(&["a"]), until, None), async {
            while !matches!(status(&store, "t2"), TaskPayload::InputRequired { .. }) {
                tokio::task::yield_now().await;
            }
            store.cancel("t2", "alice").unwrap();
        });
        assert!(matches!(input, Input::Ended));
        assert_eq!(status(&store, "t2"), TaskPayload::Cancelled);

        let running = store
            .create("t3".into(), "alice".into(), CancellationToken::new())
            .unwrap();
        let until = running.input_until(Duration::from_secs(60), Some(Duration::from_millis(50)));
        let input = running.input(requests(&["a"]), until, None).await;
        assert!(matches!(input, Input::Expired));
        assert_eq!(status(&store, "t3"), TaskPayload::Working);
        // It stops waiting before its ttl runs out, so that its outcome can
        // still be read: a tenth of the ttl early, a minute at most.
        assert_eq!(
            input_window(Duration::from_secs(100)),
            Duration::from_secs(90)
        );
        assert_eq!(
            input_window(Duration::from_secs(3600)),
            Duration::from_secs(3540)
        );
        assert!(store.answer("t3", "alice", yes(&["a"])).is_err());

        // The call that asked ended without the answers: the task stops
        // waiting at once, working again, and takes no more answers.
        let running = store
            .create("t4".into(), "alice".into(), CancellationToken::new())
            .unwrap();
        let until = running.input_until(Duration::from_secs(60), None);
        let (ended, withdrawn) = oneshot::channel::<()>();
        let withdrawn: BoxFuture<'static, ()> = Box::pin(async move {
            let _ = withdrawn.await;
        });
        let (input, ()) = tokio::join!(
            running.input(requests(&["a"]), until, Some(withdrawn)),
            async {
                while !matches!(status(&store, "t4"), TaskPayload::InputRequired { .. }) {
                    tokio::task::yield_now().await;
                }
                ended.send(()).unwrap();
            }
        );
        assert!(matches!(input, Input::Withdrawn));
        assert_eq!(status(&store, "t4"), TaskPayload::Working);
        assert!(store.answer("t4", "alice", yes(&["a"])).is_err());
    }
}
