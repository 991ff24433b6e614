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

use std::collections::HashMap;
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

/// Calls back being run at once for one code run, past which more are
/// refused.
const MAX_IN_FLIGHT: usize = 64;

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
}

impl Callback {
    /// Asks on `subject` for the run `key`, whose script ends within
    /// `timeout`.
    pub(crate) fn new(
        client: async_nats::Client,
        subject: String,
        key: &str,
        timeout: Duration,
    ) -> Self {
        Callback {
            client,
            subject,
            key: key.to_owned(),
            deadline: Instant::now() + timeout + GRACE,
        }
    }

    /// Asks, until answered, the deadline passes or `cancel` fires. A
    /// request lost to a reconnect is asked again: the caller answers a
    /// call key once, so that never runs a call twice.
    pub(crate) async fn ask(&self, ask: &Ask, cancel: &CancellationToken) -> Result<Value, Error> {
        let payload = Bytes::from(serde_json::to_vec(ask).expect("requests serialize"));
        let mut pause = Duration::from_millis(50);
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.unavailable("it did not answer before the script's deadline"));
            }
            let request = async_nats::Request::new()
                .payload(payload.clone())
                .timeout(Some(left));
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
                RequestErrorKind::NoResponders => {
                    return Err(self.unavailable("it is gone (nothing listens for its calls)"));
                }
                RequestErrorKind::TimedOut => {
                    return Err(self.unavailable("it did not answer before the script's deadline"));
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
                RequestErrorKind::Other => {
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
    /// Running; these inboxes wait for its answer.
    Running(Vec<String>),
    /// Answered, with this.
    Answered(Bytes),
}

/// What finished: a call's key (or none, for a lookup), the inbox it was
/// asked on, and its answer.
type Finished = (Option<String>, String, Bytes);

/// The caller's end: serves one code run's calls back on its catalog,
/// while the run is awaited.
pub(crate) struct Callbacks {
    pub(crate) subject: String,
    requests: async_nats::Subscriber,
    client: async_nats::Client,
    host: ToolHost,
    /// The run's key: call keys are `<key>.c<digest>.<n>`.
    key: String,
    calls: HashMap<String, Slot>,
    running: FuturesUnordered<BoxFuture<'static, Finished>>,
    /// Call keys kept at most: past the budget, calls are refused unkept.
    max_calls: usize,
    /// Largest answer NATS carries.
    max_answer: usize,
    /// The host's cancellation is this run's own (not a caller's), to
    /// fire when the run is over.
    owns_host: bool,
}

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
                }
                else => std::future::pending::<()>().await,
            }
        }
    }

    /// Starts (or joins) what `message` asks.
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
                self.send(vec![inbox], Answer::of(Err(refusal)).encode());
                return;
            }
        };
        if let Ask::Call { call, tool, args } = &ask {
            if !crate::code::is_call_key(&self.key, call, tool, args) {
                let refusal = Error::invalid_request(
                    "callback",
                    format!("{call:?} is not a call key of code run {}", self.key),
                );
                self.send(vec![inbox], Answer::of(Err(refusal)).encode());
                return;
            }
            match self.calls.get_mut(call) {
                Some(Slot::Answered(answer)) => {
                    let answer = answer.clone();
                    self.send(vec![inbox], answer);
                    return;
                }
                Some(Slot::Running(waiting)) => {
                    waiting.push(inbox);
                    return;
                }
                None => {}
            }
        }
        let unkept = matches!(ask, Ask::Call { .. }) && self.calls.len() >= self.max_calls;
        if unkept || self.running.len() >= MAX_IN_FLIGHT {
            let refusal = Error::limit_exceeded(
                LimitKind::ToolCalls,
                format!(
                    "code run {} asked for more calls back than its budget allows, or more \
                     than {MAX_IN_FLIGHT} at once",
                    self.key
                ),
            );
            self.send(vec![inbox], Answer::of(Err(refusal)).encode());
            return;
        }
        let host = self.host.clone();
        let call = match &ask {
            Ask::Call { call, .. } => {
                self.calls.insert(call.clone(), Slot::Running(Vec::new()));
                Some(call.clone())
            }
            _ => None,
        };
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
    /// answer for a later ask of the same call.
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
        if let Some(call) = call
            && let Some(Slot::Running(waiting)) =
                self.calls.insert(call, Slot::Answered(answer.clone()))
        {
            to.extend(waiting);
        }
        self.send(to, answer);
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
