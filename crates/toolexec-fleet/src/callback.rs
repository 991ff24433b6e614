//! Tool calls from a code run back to its caller's catalog.
//!
//! A caller that offers its tools names a callback subject (an `_INBOX.`
//! subject only it listens on) in the run's [`CALLBACK_HEADER`]. A script
//! on the worker then reaches the worker's own namespaces there, and every
//! other tool through the caller: the worker asks over core NATS
//! ([`Callback`], request and reply), the caller runs the call on its own
//! catalog behind the script's budget and allowlist ([`Callbacks`], a
//! [`ToolHost`]), with its own policy, identity and credentials. A worker
//! never holds a credential for a tool it does not run.
//!
//! Calls are journaled on the worker as its own are, under the same call
//! keys. The caller answers each call key once: a worker that took over a
//! run and asks again for a call in flight at the crash (or already
//! answered) gets the first call's result, so a call through the caller
//! runs once even when its tool is not idempotent. That holds while the
//! caller lives; a run whose caller is gone gets `backend_unavailable`
//! for its calls back.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::client::RequestErrorKind;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::{
    BoxFuture, CancellationToken, DetailLevel, Error, ErrorBody, Exec, LimitKind, ToolAccess,
};
use toolexec_runtime::{RuntimeLimits, ToolHost};

/// Header naming the subject a run's calls back go to.
pub(crate) const CALLBACK_HEADER: &str = "Toolexec-Callback";

/// How long after a script's deadline a call back may still answer.
const GRACE: Duration = Duration::from_secs(5);

/// What a worker asks its caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub(crate) enum Ask {
    /// Run a tool. `call` is the call's journal key: the caller runs each
    /// once.
    Call {
        call: String,
        tool: String,
        args: Value,
    },
    /// Rank the caller's tools.
    Search { query: String, limit: usize },
    /// Document one of the caller's tools.
    Describe { tool: String, detail: DetailLevel },
}

/// The caller's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

impl Answer {
    fn of(result: Result<Value, Error>) -> Self {
        match result {
            Ok(v) => Answer {
                result: Some(v),
                error: None,
            },
            Err(e) => Answer {
                result: None,
                error: Some(e.to_body()),
            },
        }
    }

    fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("answers serialize"))
    }
}

/// A subject a peer may be answered on: a caller's inbox, never a subject
/// of the cluster.
pub(crate) fn is_inbox(subject: &str) -> bool {
    subject.starts_with("_INBOX.") && !subject.contains(['*', '>', ' '])
}

/// The worker's end: asks the run's caller.
#[derive(Debug, Clone)]
pub(crate) struct Callback {
    client: async_nats::Client,
    subject: String,
    /// The run's key, for errors.
    key: String,
    /// No answer is waited for past this.
    deadline: Instant,
    /// How long a caller may be unreachable (reconnecting) before it is
    /// taken for gone.
    absent: Duration,
}

/// Longest wait for one answer before asking again (a request or answer
/// lost to a reconnect costs this much, not the whole deadline).
const ATTEMPT: Duration = Duration::from_secs(30);

impl Callback {
    /// Asks on `subject` for the run `key`, whose script ends within
    /// `timeout`; a caller unreachable for `absent` is gone.
    pub(crate) fn new(
        client: async_nats::Client,
        subject: String,
        key: &str,
        timeout: Duration,
        absent: Duration,
    ) -> Self {
        Callback {
            client,
            subject,
            key: key.to_owned(),
            deadline: Instant::now() + timeout + GRACE,
            absent,
        }
    }

    /// Asks, until answered, the deadline passes or `cancel` fires. An ask
    /// unanswered for [`ATTEMPT`], lost to a reconnect, or finding nobody
    /// listening for a moment (the caller reconnecting) is made again: the
    /// caller answers a call key once, so that never runs a call twice.
    pub(crate) async fn ask(&self, ask: &Ask, cancel: &CancellationToken) -> Result<Value, Error> {
        let payload = Bytes::from(serde_json::to_vec(ask).expect("requests serialize"));
        let mut pause = Duration::from_millis(50);
        let mut absent_since: Option<Instant> = None;
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.unavailable("it did not answer before the script's deadline"));
            }
            let request = async_nats::Request::new()
                .payload(payload.clone())
                .timeout(Some(left.min(ATTEMPT)));
            let sent = tokio::select! {
                sent = self.client.send_request(self.subject.clone(), request) => sent,
                () = cancel.cancelled() => {
                    return Err(Error::Cancelled { tool: tool_of(ask).to_owned() });
                }
            };
            let e = match sent {
                Ok(message) => return self.read(&message.payload),
                Err(e) => e,
            };
            match e.kind() {
                RequestErrorKind::TimedOut => {
                    absent_since = None;
                    continue;
                }
                RequestErrorKind::NoResponders
                    if absent_since.get_or_insert_with(Instant::now).elapsed() >= self.absent =>
                {
                    return Err(self.unavailable("it is gone (nothing listens for its calls)"));
                }
                RequestErrorKind::MaxPayloadExceeded => {
                    return Err(Error::limit_exceeded(
                        LimitKind::InputBytes,
                        format!(
                            "the call to {} is over what one NATS message carries",
                            tool_of(ask)
                        ),
                    ));
                }
                RequestErrorKind::InvalidSubject => {
                    return Err(self.unavailable("its callback subject is invalid"));
                }
                RequestErrorKind::NoResponders | RequestErrorKind::Other => {
                    if e.kind() == RequestErrorKind::Other {
                        absent_since = None;
                    }
                    tracing::debug!(key = %self.key, "asking the caller again: {e}");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = cancel.cancelled() => {
                            return Err(Error::Cancelled { tool: tool_of(ask).to_owned() });
                        }
                    }
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    fn read(&self, payload: &[u8]) -> Result<Value, Error> {
        match serde_json::from_slice::<Answer>(payload) {
            Ok(Answer { error: Some(e), .. }) => Err(Error::from(e)),
            Ok(Answer { result, .. }) => Ok(result.unwrap_or(Value::Null)),
            Err(e) => Err(self.unavailable(&format!("its answer is unreadable: {e}"))),
        }
    }

    fn unavailable(&self, why: &str) -> Error {
        Error::backend_unavailable(
            "fleet",
            format!("calling back the caller of code run {}: {why}", self.key),
        )
    }
}

/// A sandboxed unit's tools on the worker: every call goes to the caller
/// (a unit runs no tool of the worker's), keyed as a code run's calls are.
pub(crate) struct UnitTools {
    callback: Arc<Callback>,
    seen: Mutex<HashMap<String, usize>>,
}

impl UnitTools {
    pub(crate) fn new(callback: Callback) -> Self {
        UnitTools {
            callback: Arc::new(callback),
            seen: Mutex::default(),
        }
    }

    fn forward(
        &self,
        ask: Ask,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let callback = self.callback.clone();
        Box::pin(async move { callback.ask(&ask, &cancel).await })
    }
}

impl ToolAccess for UnitTools {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let digest = crate::code::digest(tool_id, &args);
        let occurrence = {
            let mut seen = self.seen.lock();
            let n = seen.entry(digest.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let ask = Ask::Call {
            call: format!("{}.c{digest}.{occurrence}", self.callback.key),
            tool: tool_id.to_owned(),
            args,
        };
        self.forward(ask, cancel)
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        let ask = Ask::Search {
            query: query.to_owned(),
            limit,
        };
        self.forward(ask, CancellationToken::new())
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let ask = Ask::Describe {
            tool: tool_id.to_owned(),
            detail: level,
        };
        self.forward(ask, CancellationToken::new())
    }
}

fn tool_of(ask: &Ask) -> &str {
    match ask {
        Ask::Call { tool, .. } | Ask::Describe { tool, .. } => tool,
        Ask::Search { .. } => "search",
    }
}

/// One call key's state at the caller.
enum Slot {
    /// Running; these inboxes (the latest few) wait for its answer.
    Running(VecDeque<String>),
    /// Answered with this, sent again `resent` times since.
    Answered { answer: Bytes, resent: usize },
    /// Answered, its answer no longer held (past the bytes held per run).
    Forgotten,
}

/// What finished: a call's key (or none, for a lookup), the inbox it was
/// asked on, and its answer.
type Finished = (Option<String>, String, Bytes);

/// An ask waiting for a slot, and its size.
type Queued = (Option<String>, String, Ask, usize);

/// The caller's end: serves one code run's (or unit's) calls back on its
/// catalog, while the run is awaited. Bounded everywhere: the call keys
/// it keeps (the budget), the calls at once (the rest queue), the inboxes
/// waiting on one call, the answers sent again, the bytes of answers held.
pub(crate) struct Callbacks {
    pub(crate) subject: String,
    requests: async_nats::Subscriber,
    client: async_nats::Client,
    host: ToolHost,
    /// The run's key: call keys are `<key>.c<digest>.<n>`.
    key: String,
    calls: HashMap<String, Slot>,
    running: FuturesUnordered<BoxFuture<'static, Finished>>,
    queued: VecDeque<Queued>,
    /// The bytes of the asks queued.
    queued_bytes: usize,
    /// Answered call keys, oldest first, and the bytes their answers hold.
    held: VecDeque<String>,
    held_bytes: usize,
    /// Call keys kept at most: past the budget, calls are refused unkept.
    max_calls: usize,
    /// Largest answer NATS carries.
    max_answer: usize,
    /// The host's cancellation is this run's own (not a caller's), to
    /// fire when the run is over.
    owns_host: bool,
}

/// Calls back run at once for one run; more wait their turn.
const MAX_IN_FLIGHT: usize = 64;

/// Asks waiting for a turn, past which more are refused.
const MAX_QUEUED: usize = 1024;

/// Bytes of asks waiting for a turn, past which more are refused.
const MAX_QUEUED_BYTES: usize = 8 << 20;

/// Inboxes waiting on one running call (attempts of the run, and their
/// retries): the oldest gives way.
const MAX_WAITING: usize = 8;

/// Times one call's answer is sent again (to later attempts).
const MAX_RESENT: usize = 8;

/// Bytes of answers held for one run, for later attempts asking again;
/// past this the oldest are forgotten (a later ask of one is answered
/// `interrupted`, never by running the call again).
const MAX_HELD_BYTES: usize = 8 << 20;

impl Callbacks {
    /// Listens for the calls back of run `key`, served on `exec` behind the
    /// script's call budget and allowlist.
    pub(crate) async fn listen(
        client: &async_nats::Client,
        exec: Exec,
        key: &str,
        max_tool_calls: usize,
        allowed_tools: &[String],
    ) -> Result<Self, Error> {
        let limits = RuntimeLimits {
            max_tool_calls,
            allowed_tools: allowed_tools.to_vec(),
            ..RuntimeLimits::default()
        };
        let host = ToolHost::new(exec, &limits, CancellationToken::new());
        let mut callbacks = Self::listen_on(client, host, key).await?;
        callbacks.owns_host = true;
        Ok(callbacks)
    }

    /// Listens for the calls back of run `key`, served by `host` (a unit's
    /// tool host: its budget, allowlist and log).
    pub(crate) async fn listen_on(
        client: &async_nats::Client,
        host: ToolHost,
        key: &str,
    ) -> Result<Self, Error> {
        let subject = client.new_inbox();
        let requests = client.subscribe(subject.clone()).await.map_err(|e| {
            Error::backend_unavailable("fleet", format!("callback subscription: {e}"))
        })?;
        let max_tool_calls = host.max_tool_calls();
        Ok(Callbacks {
            subject,
            requests,
            client: client.clone(),
            host,
            key: key.to_owned(),
            calls: HashMap::new(),
            running: FuturesUnordered::new(),
            queued: VecDeque::new(),
            queued_bytes: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            // Room for calls refused past the budget, and no more.
            max_calls: max_tool_calls.saturating_mul(2).saturating_add(16),
            max_answer: client.server_info().max_payload.saturating_sub(256),
            owns_host: false,
        })
    }

    /// Serves calls back for as long as it is polled (never returns).
    /// Cancel-safe: calls in flight live in `self`, not in this future.
    pub(crate) async fn serve(&mut self) {
        loop {
            tokio::select! {
                Some(message) = self.requests.next() => self.take(message),
                Some((call, inbox, answer)) = self.running.next(), if !self.running.is_empty() => {
                    self.answered(call, inbox, answer);
                    while self.running.len() < MAX_IN_FLIGHT
                        && let Some((call, inbox, ask, size)) = self.queued.pop_front()
                    {
                        self.queued_bytes -= size;
                        self.start(call, inbox, ask);
                    }
                }
                else => std::future::pending::<()>().await,
            }
        }
    }

    /// Starts, joins or queues what `message` asks.
    fn take(&mut self, message: async_nats::Message) {
        let Some(inbox) = message.reply.as_ref().map(|s| s.to_string()) else {
            return;
        };
        if !is_inbox(&inbox) {
            return;
        }
        let ask = match serde_json::from_slice::<Ask>(&message.payload) {
            Ok(ask) => ask,
            Err(e) => {
                let refusal = Error::invalid_request("callback", format!("unreadable: {e}"));
                self.refuse(inbox, refusal);
                return;
            }
        };
        let call = match &ask {
            Ask::Call { call, tool, args } => {
                if !crate::code::is_call_key(&self.key, call, tool, args) {
                    let refusal = Error::invalid_request(
                        "callback",
                        format!("{call:?} is not a call key of run {}", self.key),
                    );
                    self.refuse(inbox, refusal);
                    return;
                }
                if self.join(call, &inbox) {
                    return;
                }
                if self.calls.len() >= self.max_calls {
                    let refusal = Error::limit_exceeded(
                        LimitKind::ToolCalls,
                        format!(
                            "run {} asked for more calls back than its budget allows",
                            self.key
                        ),
                    );
                    self.refuse(inbox, refusal);
                    return;
                }
                self.calls
                    .insert(call.clone(), Slot::Running(VecDeque::new()));
                Some(call.clone())
            }
            Ask::Search { .. } | Ask::Describe { .. } => None,
        };
        let size = message.payload.len();
        if self.running.len() < MAX_IN_FLIGHT {
            self.start(call, inbox, ask);
        } else if self.queued.len() < MAX_QUEUED && self.queued_bytes + size <= MAX_QUEUED_BYTES {
            self.queued_bytes += size;
            self.queued.push_back((call, inbox, ask, size));
        } else {
            if let Some(call) = call {
                self.calls.remove(&call);
            }
            let refusal = Error::backend_unavailable(
                "fleet",
                format!(
                    "run {} has {MAX_QUEUED} calls back waiting already",
                    self.key
                ),
            );
            self.refuse(inbox, refusal);
        }
    }

    /// Answers an ask of a call key already known: joins the running call,
    /// or sends its answer again. False for a new call key.
    fn join(&mut self, call: &str, inbox: &str) -> bool {
        let again = match self.calls.get_mut(call) {
            None => return false,
            Some(Slot::Running(waiting)) => {
                if !waiting.iter().any(|w| w == inbox) {
                    if waiting.len() >= MAX_WAITING {
                        waiting.pop_front();
                    }
                    waiting.push_back(inbox.to_owned());
                }
                return true;
            }
            Some(Slot::Answered { answer, resent }) if *resent < MAX_RESENT => {
                *resent += 1;
                Ok(answer.clone())
            }
            Some(Slot::Answered { .. }) => Err(Error::limit_exceeded(
                LimitKind::ToolCalls,
                format!("call {call:?} was asked for more than {MAX_RESENT} times again"),
            )),
            Some(Slot::Forgotten) => Err(Error::from(ErrorBody {
                code: toolexec::ErrorCode::Interrupted,
                message: format!(
                    "interrupted: call {call:?} ran, and its answer is no longer held; it is \
                     not run again"
                ),
                details: None,
            })),
        };
        match again {
            Ok(answer) => self.send(vec![inbox.to_owned()], answer),
            Err(e) => self.refuse(inbox.to_owned(), e),
        }
        true
    }

    fn start(&mut self, call: Option<String>, inbox: String, ask: Ask) {
        let host = self.host.clone();
        self.running.push(Box::pin(async move {
            let result = match ask {
                Ask::Call { tool, args, .. } => host.call(&tool, args).await,
                Ask::Search { query, limit } => host.try_search(&query, limit).await,
                Ask::Describe { tool, detail } => host.describe(&tool, detail).await,
            };
            (call, inbox, Answer::of(result).encode())
        }));
    }

    /// Answers everyone waiting for what finished, and keeps a call's
    /// answer (within the bytes held) for a later ask of the same call.
    fn answered(&mut self, call: Option<String>, inbox: String, answer: Bytes) {
        let answer = if answer.len() > self.max_answer {
            let too_big = Error::limit_exceeded(
                LimitKind::OutputBytes,
                format!(
                    "the answer ({} bytes) is over what one NATS message carries ({} bytes)",
                    answer.len(),
                    self.max_answer
                ),
            );
            Answer::of(Err(too_big)).encode()
        } else {
            answer
        };
        let mut to = vec![inbox];
        if let Some(call) = call {
            let slot = Slot::Answered {
                answer: answer.clone(),
                resent: 0,
            };
            if let Some(Slot::Running(waiting)) = self.calls.insert(call.clone(), slot) {
                to.extend(waiting);
            }
            self.held_bytes += answer.len();
            self.held.push_back(call);
            while self.held_bytes > MAX_HELD_BYTES
                && let Some(oldest) = self.held.pop_front()
                && let Some(slot) = self.calls.get_mut(&oldest)
            {
                if let Slot::Answered { answer, .. } = std::mem::replace(slot, Slot::Forgotten) {
                    self.held_bytes -= answer.len();
                }
            }
        }
        self.send(to, answer);
    }

    fn refuse(&self, inbox: String, error: Error) {
        self.send(vec![inbox], Answer::of(Err(error)).encode());
    }

    fn send(&self, inboxes: Vec<String>, answer: Bytes) {
        let client = self.client.clone();
        // Off this future: an answer is never lost to `serve` being
        // dropped mid-publish.
        tokio::spawn(async move {
            for inbox in inboxes {
                let _ = client.publish(inbox, answer.clone()).await;
            }
        });
    }
}

impl Drop for Callbacks {
    fn drop(&mut self) {
        // The run is over (or abandoned): calls back still running stop
        // (dropped with `running`, and told so when the token is ours).
        if self.owns_host {
            self.host.cancel_token().cancel();
        }
    }
}
