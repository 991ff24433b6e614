//! A server of a revision before 2026-07-28 asks its client during a call
//! (`sampling/createMessage`, `elicitation/create`, `roots/list` during
//! `tools/call`, `prompts/get` or `resources/read`), and the call was made
//! by a client that answers input itself (2026-07-28), which takes no
//! requests from its server. toolexec holds the upstream call across the
//! client's rounds:
//!
//! 1. The call runs for a caller whose link queues the server's requests
//!    ([`HeldLink`]) instead of sending them: on the round's own task until
//!    the server asks (a call that never asks costs no task), then on a
//!    task of its own.
//! 2. When the server asks, the round ends with `input_required`: the
//!    requests queued so far, and a fresh random token as the state (the
//!    gateway seals it to the caller, the server and the tool).
//! 3. The client sends the call again with its answers and the state: the
//!    token (taken once: a replay finds nothing) resumes the held call,
//!    whose server gets the answers, and the round waits for the call's
//!    result or its next requests.
//!
//! The server's progress and log messages go to the round that waits for
//! the call, if any (log messages at the level the first round named: the
//! server was told it with the request). A held call keeps its concurrency
//! slot and its one `call_timeout`; one principal holds at most half the
//! server's slots at once (its next calls' requests are refused); a client
//! that cancels a round abandons the call (the server is told), and so does
//! the gateway for a task that stops waiting for its answers
//! (`Shared::abandon_held`); a result that comes while no round waits
//! is kept for another `call_timeout`, and a task waiting for the
//! answers is told (`Shared::held_wait`), so that it takes it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{ClientRequest, InputRequest, InputRequests, InputRequiredResult, ServerResult};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};
use toolexec::telemetry::{Caller, current_caller, with_caller};
use toolexec::{
    BoxFuture, ClientError, ClientInput, ClientLink, ClientRequests, Error, StreamEvent,
    ToolContext,
};
use tracing::Instrument;

use super::call::RequestError;
use super::links::Relayed;
use super::shared::Shared;

/// How a held call's token starts: a state that does is never sent to a
/// server (it resolves here, or is refused).
const TOKEN_PREFIX: &str = "toolexec-held:";
/// Progress events queued for the round a held request reports to (more
/// are dropped, as a slow listener's progress is).
const EVENTS: usize = 16;
/// Most requests one round passes to the client (as for a 2026-07-28
/// server's `input_required`).
const MAX_INPUTS: usize = 8;

/// What one round of a held call ends with.
#[allow(clippy::large_enum_variant)] // one a round, moved once or twice
pub(crate) enum Turn {
    /// The call ended.
    Done(Result<ServerResult, RequestError>),
    /// The server asks: its requests, and the token to resume with.
    Asks(InputRequiredResult),
}

/// How the first round of a held call went.
#[allow(clippy::large_enum_variant)] // one a call, returned once
enum Held {
    /// The call ended without asking.
    Ended(Turn),
    /// The server asked: the round's outcome comes from the held call.
    Asked(oneshot::Receiver<Turn>),
    /// The round was cancelled, and the call with it.
    Cancelled,
}

/// A client's next round: its answers, and where the round's outcome goes.
struct Resume {
    answers: Map<String, Value>,
    turn: oneshot::Sender<Turn>,
    /// The round's context: the server's progress goes to it.
    ctx: ToolContext,
    /// The round's client: the server's log messages go to it.
    link: Option<ClientLink>,
}

/// The client of the round that waits for a held call, if any.
type Listener = Arc<Mutex<Option<ClientLink>>>;

/// Who may resume a held call: the caller, the request (a tool id, or a
/// method and a prompt or URI) and the arguments of its first round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    principal: String,
    label: String,
    args: [u8; 32],
}

impl Owner {
    /// The current caller's request `label` with `args`.
    pub(crate) fn of(label: &str, args: &Map<String, Value>) -> Self {
        let principal = current_caller()
            .map(|c| c.principal_key())
            .unwrap_or_default();
        let digest = Sha256::digest(serde_json::to_vec(args).unwrap_or_default());
        Owner {
            principal,
            label: label.to_owned(),
            args: digest.into(),
        }
    }
}

/// A held call waiting for its client's next round.
struct Waiting {
    owner: Owner,
    resume: oneshot::Sender<Resume>,
    /// When the call's one `call_timeout` ends it.
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    deadline: tokio::time::Instant,
    /// Turns true when the call ends while it waits (the server gave up
    /// asking): the client's next round takes its result.
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    ended: watch::Receiver<bool>,
}

/// The calls of one server held for their clients.
#[derive(Default)]
pub(crate) struct HeldCalls {
    state: Mutex<HeldState>,
}

#[derive(Default)]
struct HeldState {
    /// Calls waiting for their client's next round, by token.
    waiting: HashMap<String, Waiting>,
    /// How many calls each principal has held (waiting, running between
    /// rounds, or keeping a result).
    holders: HashMap<String, usize>,
}

impl std::fmt::Debug for HeldCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("HeldCalls")
            .field("waiting", &state.waiting.len())
            .field("holders", &state.holders.len())
            .finish()
    }
}

impl HeldCalls {
    /// The call waiting under `token`, taken, when `owner` made it.
    fn take(&self, token: &str, owner: &Owner) -> Option<Waiting> {
        let mut state = self.state.lock();
        if state.waiting.get(token).is_some_and(|w| &w.owner == owner) {
            state.waiting.remove(token)
        } else {
            None
        }
    }

    /// Drops the call waiting under `token`: its client will not come
    /// back (a task that waited for its answers was cancelled or ran out of
    /// time). The call ends there, and the server is told. The token is a
    /// secret the gateway sealed to its caller, so whoever holds it may.
    #[cfg(feature = "gateway")]
    fn abandon(&self, token: &str) -> bool {
        self.state.lock().waiting.remove(token).is_some()
    }

    /// Counts one more held call of `principal`, unless it holds `cap`.
    fn admit(&self, principal: &str, cap: usize) -> bool {
        let mut state = self.state.lock();
        let held = state.holders.entry(principal.to_owned()).or_default();
        if *held >= cap {
            return false;
        }
        *held += 1;
        true
    }
}

/// One held call's place in [`HeldCalls`]: its count, and its token while
/// it waits; both given back however the call's task ends.
struct Holding {
    shared: Arc<Shared>,
    principal: String,
    token: Option<String>,
}

impl Holding {
    fn wait(&mut self, token: String, waiting: Waiting) {
        self.shared
            .held
            .state
            .lock()
            .waiting
            .insert(token.clone(), waiting);
        self.token = Some(token);
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut state = self.shared.held.state.lock();
        if let Some(token) = self.token.take() {
            state.waiting.remove(&token);
        }
        if let Some(held) = state.holders.get_mut(&self.principal) {
            *held -= 1;
            if *held == 0 {
                state.holders.remove(&self.principal);
            }
        }
    }
}

/// A held request, and what it sends its current round.
struct HeldRequest {
    call: BoxFuture<'static, Result<ServerResult, RequestError>>,
    /// The server's requests to the client.
    asks: mpsc::Receiver<Ask>,
    /// Its progress.
    events: mpsc::Receiver<StreamEvent>,
    /// Where its log messages go.
    listener: Listener,
    /// When its one `call_timeout` ends it.
    deadline: tokio::time::Instant,
    /// Set when it ends while it waits for the client ([`Waiting::ended`]).
    ended: watch::Sender<bool>,
}

impl HeldRequest {
    /// Passes the progress queued so far to `to` (or drops it).
    fn report_queued(&mut self, to: Option<&ToolContext>) {
        while let Ok(event) = self.events.try_recv() {
            report(to, event);
        }
    }
}

/// Passes a held request's progress to the round that waits for it. Only
/// progress: what an upstream MCP server reports, and what never waits
/// (a slow listener's progress is dropped), so the request's task never
/// blocks on a round.
fn report(to: Option<&ToolContext>, event: StreamEvent) {
    if let (
        Some(ctx),
        StreamEvent::Progress {
            progress,
            total,
            message,
            ..
        },
    ) = (to, event)
    {
        ctx.progress(progress, total, message.as_deref());
    }
}

/// One request of the server, waiting for the client's answer.
struct Ask {
    method: String,
    params: Value,
    answer: oneshot::Sender<Result<Value, ClientError>>,
}

/// The client link of a held call: the server's requests queue for the
/// round in progress; its log messages go to that round's client.
#[derive(Debug)]
struct HeldLink {
    asks: mpsc::Sender<Ask>,
    listener: Listener,
    /// The level the first round's client wants (the server is told it
    /// with the request).
    level: Option<String>,
}

impl std::fmt::Debug for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ask").field("method", &self.method).finish()
    }
}

impl ClientRequests for HeldLink {
    /// What an `input_required` result can carry; the client decides when
    /// it sees them (as for a 2026-07-28 server's).
    fn supports(&self, method: &str, _: &Value) -> bool {
        matches!(
            method,
            "sampling/createMessage" | "elicitation/create" | "roots/list"
        )
    }

    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<'static, Result<Value, ClientError>> {
        let (answer, answered) = oneshot::channel();
        let queued = self.asks.try_send(Ask {
            method: method.to_owned(),
            params,
            answer,
        });
        Box::pin(async move {
            if queued.is_err() {
                return Err(ClientError::Failed(format!(
                    "the server asked the client for more than {MAX_INPUTS} things at once"
                )));
            }
            answered.await.unwrap_or_else(|_| {
                Err(ClientError::Failed(
                    "the call ended before the client answered".to_owned(),
                ))
            })
        })
    }

    /// To the client of the round that waits for the call (which sends
    /// what it wants); dropped while none waits.
    fn notify(&self, method: &str, params: Value) {
        let listener = self.listener.lock().clone();
        match listener {
            Some(link) => link.notify(method, params),
            None => tracing::debug!(method, "not relayed: no round waits for the held call"),
        }
    }

    fn log_level(&self) -> Option<&str> {
        self.level.as_deref()
    }
}

impl Shared {
    /// Abandons the held call whose token is `state` (anything else: no
    /// call of this server is held under it); whether one was.
    #[cfg(feature = "gateway")]
    pub(crate) fn abandon_held(&self, state: &str) -> bool {
        state.starts_with(TOKEN_PREFIX) && self.held.abandon(state)
    }

    /// The call held under `state`, as one who waits for its client's
    /// answers sees it: how long they may still come (until its one
    /// `call_timeout` ends it), and a future that resolves if the call ends
    /// first (its server gave up asking: a next round, answered or not,
    /// takes its result). `None` when no call of this server waits under it.
    #[cfg(feature = "gateway")]
    pub(crate) fn held_wait(
        &self,
        state: &str,
    ) -> Option<(std::time::Duration, BoxFuture<'static, ()>)> {
        if !state.starts_with(TOKEN_PREFIX) {
            return None;
        }
        let held = self.held.state.lock();
        let waiting = held.waiting.get(state)?;
        let within = waiting
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let mut ended = waiting.ended.clone();
        let ends = Box::pin(async move {
            // The sender goes only with the call's task: once it has
            // ended, the value says so; otherwise the call was resumed or
            // abandoned, and it never ends here.
            if ended.wait_for(|ended| *ended).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        Some((within, ends))
    }

    /// Whether a request of a caller that answers input itself, sent again
    /// with `state` (or first, without), goes through a held call: this
    /// server relays requests, and either the state is a held call's token
    /// (found or not: it is never sent to the server) or the server may ask
    /// during its requests (it speaks a revision before 2026-07-28, or is
    /// not connected right now: a 2026-07-28 server's `input_required`
    /// comes back through a held call unchanged).
    pub(crate) fn holds(&self, state: Option<&str>) -> bool {
        if !self.relay.any() {
            return false;
        }
        if let Some(state) = state {
            return state.starts_with(TOKEN_PREFIX);
        }
        match self.connected_peer() {
            Ok((peer, _)) => peer
                .peer_info()
                .is_none_or(|info| info.protocol_version.has_initialize()),
            Err(_) => true,
        }
    }

    /// One round of the held request `owner.label`: the call starts (no
    /// state) or resumes with the client's answers (the state is the token
    /// of its last round), and the round ends with its result or the
    /// server's next requests. Cancelling `ctx` abandons the call.
    pub(crate) async fn held_round(
        self: &Arc<Self>,
        request: ClientRequest,
        input: &ClientInput,
        owner: Owner,
        ctx: &ToolContext,
    ) -> Result<Turn, Error> {
        let tool = owner.label.clone();
        let turn = match &input.state {
            None => match self.hold(request, owner, ctx).await {
                Held::Ended(turn) => return Ok(turn),
                Held::Asked(turn) => turn,
                Held::Cancelled => return Err(Error::Cancelled { tool }),
            },
            Some(token) => {
                let answers = input.responses.clone().unwrap_or_default();
                let link = current_caller().and_then(|c| c.link.clone());
                self.resume(token, answers, &owner, ctx, link)?
            }
        };
        tokio::select! {
            turn = turn => turn.map_err(|_| Error::ExecutionFailed {
                tool,
                message: "the held call ended without a result".to_owned(),
                data: None,
                panicked: false,
            }),
            () = ctx.cancelled() => Err(Error::Cancelled { tool }),
        }
    }

    /// Runs `request` for the current caller with a [`HeldLink`], here
    /// (with this round's progress) until it ends or the server asks; then
    /// on a task of its own, which hands this round the server's requests.
    async fn hold(
        self: &Arc<Self>,
        request: ClientRequest,
        owner: Owner,
        ctx: &ToolContext,
    ) -> Held {
        let (asks_tx, asks) = mpsc::channel(MAX_INPUTS);
        let (events_tx, events) = mpsc::channel(EVENTS);
        let mut caller: Caller = current_caller().as_deref().cloned().unwrap_or_default();
        let level = caller
            .link
            .as_ref()
            .and_then(|l| l.0.log_level())
            .map(str::to_owned);
        let listener: Listener = Arc::new(Mutex::new(caller.link.take()));
        caller.link = Some(ClientLink(Arc::new(HeldLink {
            asks: asks_tx,
            listener: listener.clone(),
            level,
        })));
        let shared = self.clone();
        let label = owner.label.clone();
        // Not this round's cancellation: the call may outlive the round.
        // Dropping it (the client abandoned it) tells the server. Its
        // progress goes to the round that waits for it.
        let reporting = ToolContext::reporting_to(events_tx);
        let call = Box::pin(with_caller(Arc::new(caller), async move {
            shared
                .request_for(&label, request, &reporting, Relayed::ToHeld)
                .await
        }));
        let mut held = HeldRequest {
            call,
            asks,
            events,
            listener,
            // The call's timeout starts as it is first polled, just after.
            deadline: tokio::time::Instant::now() + self.call_timeout,
            ended: watch::Sender::new(false),
        };
        let cap = (self.max_concurrency / 2).max(1);
        let first = loop {
            let ask = tokio::select! {
                result = &mut held.call => {
                    held.report_queued(Some(ctx));
                    return Held::Ended(Turn::Done(result));
                }
                Some(ask) = held.asks.recv() => ask,
                Some(event) = held.events.recv() => {
                    report(Some(ctx), event);
                    continue;
                }
                () = ctx.cancelled() => return Held::Cancelled,
            };
            if self.held.admit(&owner.principal, cap) {
                break ask;
            }
            let _ = ask.answer.send(Err(ClientError::Failed(format!(
                "this caller already has {cap} requests to {} waiting for its answers",
                self.name
            ))));
        };
        let holding = Holding {
            shared: self.clone(),
            principal: owner.principal.clone(),
            token: None,
        };
        let (turn_tx, turn) = oneshot::channel();
        let drive = self.clone().drive(held, turn_tx, owner, first, holding);
        tokio::spawn(drive.instrument(tracing::Span::current()));
        Held::Asked(turn)
    }

    /// Hands `answers` to the call held under `token` for `owner`; the
    /// round's outcome. Else `invalid_request` naming `requestState`.
    fn resume(
        &self,
        token: &str,
        answers: Map<String, Value>,
        owner: &Owner,
        ctx: &ToolContext,
        link: Option<ClientLink>,
    ) -> Result<oneshot::Receiver<Turn>, Error> {
        let gone = || {
            Error::invalid_request(
                "requestState",
                format!(
                    "no request {} waits for these answers (it ended, was answered already, \
                     or was made with other arguments): send it again without the state",
                    owner.label
                ),
            )
        };
        let waiting = self.held.take(token, owner).ok_or_else(gone)?;
        let (turn_tx, turn) = oneshot::channel();
        waiting
            .resume
            .send(Resume {
                answers,
                turn: turn_tx,
                ctx: ctx.clone(),
                link,
            })
            .map_err(|_| gone())?;
        Ok(turn)
    }

    /// Drives one held call: each round until the call ends or the server
    /// asks, then holds it until the client's next round. `first` is the
    /// server's first request, `holding` the call's count.
    async fn drive(
        self: Arc<Self>,
        mut held: HeldRequest,
        mut turn: oneshot::Sender<Turn>,
        owner: Owner,
        first: Ask,
        mut holding: Holding,
    ) {
        let mut asked = Some(first);
        // The round waiting for the call, once a client's round resumed it.
        let mut listening: Option<ToolContext> = None;
        loop {
            let first = match asked.take() {
                Some(ask) => ask,
                None => loop {
                    tokio::select! {
                        result = &mut held.call => {
                            held.report_queued(listening.as_ref());
                            let _ = turn.send(Turn::Done(result));
                            return;
                        }
                        Some(ask) = held.asks.recv() => break ask,
                        Some(event) = held.events.recv() => report(listening.as_ref(), event),
                        // The round was abandoned: so is the call.
                        () = turn.closed() => return,
                    }
                },
            };
            let mut pending = vec![first];
            while let Ok(ask) = held.asks.try_recv() {
                pending.push(ask);
            }
            let Some((requests, pending)) = input_requests(pending) else {
                continue;
            };
            let Some(token) = new_token() else {
                for ask in pending.into_values() {
                    let _ = ask.answer.send(Err(ClientError::Failed(
                        "no randomness for the state of an input round".to_owned(),
                    )));
                }
                continue;
            };
            let (resume_tx, mut resume) = oneshot::channel();
            holding.wait(
                token.clone(),
                Waiting {
                    owner: owner.clone(),
                    resume: resume_tx,
                    deadline: held.deadline,
                    ended: held.ended.subscribe(),
                },
            );
            let asked = InputRequiredResult::new(Some(requests), Some(token));
            held.report_queued(listening.take().as_ref());
            *held.listener.lock() = None;
            if turn.send(Turn::Asks(asked)).is_err() {
                return;
            }
            let next = loop {
                tokio::select! {
                    next = &mut resume => break next,
                    result = &mut held.call => {
                        // Ended while it waited for the client (the server
                        // gave up on it, or went away): the client's next
                        // round, if it comes within another call timeout,
                        // gets the result. A task waiting for the answers
                        // is told, and makes that round now.
                        held.ended.send_replace(true);
                        let next = tokio::time::timeout(self.call_timeout, resume).await;
                        if let Ok(Ok(next)) = next {
                            let _ = next.turn.send(Turn::Done(result));
                        }
                        return;
                    }
                    // No round waits: the server's progress meanwhile is
                    // not for the next one.
                    Some(_) = held.events.recv() => {}
                }
            };
            // Taken by the client's round (or gone with the server).
            holding.token = None;
            let Ok(next) = next else {
                return;
            };
            // Before the answers: what the server logs on reading them is
            // for this round.
            *held.listener.lock() = next.link;
            for (key, ask) in pending {
                let answer = next.answers.get(&key).cloned().ok_or_else(|| {
                    ClientError::Failed(format!("the client sent no answer for input {key:?}"))
                });
                let _ = ask.answer.send(answer);
            }
            turn = next.turn;
            listening = Some(next.ctx);
        }
    }
}

/// The requests of one round by key, and their asks; `None` when none of
/// them is one a client can be given (each such ask is answered with why).
#[allow(clippy::type_complexity)]
fn input_requests(pending: Vec<Ask>) -> Option<(InputRequests, HashMap<String, Ask>)> {
    let mut requests = InputRequests::new();
    let mut asks = HashMap::new();
    for (i, ask) in pending.into_iter().enumerate() {
        let wire = json!({"method": ask.method, "params": ask.params});
        match serde_json::from_value::<InputRequest>(wire) {
            Ok(request) => {
                let key = format!("input-{}", i + 1);
                requests.insert(key.clone(), request);
                asks.insert(key, ask);
            }
            Err(e) => {
                let _ = ask.answer.send(Err(ClientError::Failed(format!(
                    "{} cannot be passed to a client as an input request: {e}",
                    ask.method
                ))));
            }
        }
    }
    (!requests.is_empty()).then_some((requests, asks))
}

/// [`TOKEN_PREFIX`] and 128 random bits, hex.
fn new_token() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{TOKEN_PREFIX}{hex}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round passes on what a client can be given; a request that is not
    /// one (here an elicitation without its message) is answered at once
    /// with why, and a round of nothing else passes nothing.
    #[tokio::test]
    async fn only_requests_a_client_can_take_are_passed_on() {
        let ask = |method: &str, params: Value| {
            let (answer, answered) = oneshot::channel();
            let ask = Ask {
                method: method.to_owned(),
                params,
                answer,
            };
            (ask, answered)
        };
        let (good, _good_answer) = ask(
            "elicitation/create",
            json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}),
        );
        let (bad, bad_answer) = ask("elicitation/create", json!({"requestedSchema": {}}));
        let (requests, asks) = input_requests(vec![good, bad]).unwrap();
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["input-1"]);
        assert_eq!(asks.keys().collect::<Vec<_>>(), ["input-1"]);
        match bad_answer.await.unwrap() {
            Err(ClientError::Failed(why)) => {
                assert!(why.contains("cannot be passed to a client"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        let (bad, _) = ask("roots/list", json!("not an object"));
        assert!(input_requests(vec![bad]).is_none());
    }

    /// The link of a held call queues at most 8 requests; the next is
    /// refused at once, and a request whose call ended is answered so.
    #[tokio::test]
    async fn a_held_link_queues_at_most_eight_requests() {
        let (asks_tx, mut asks) = mpsc::channel(MAX_INPUTS);
        let link = HeldLink {
            asks: asks_tx,
            listener: Listener::default(),
            level: None,
        };
        let waiting: Vec<_> = (0..MAX_INPUTS)
            .map(|_| link.request("roots/list", json!({})))
            .collect();
        match link.request("roots/list", json!({})).await {
            Err(ClientError::Failed(why)) => assert!(why.contains("more than 8"), "{why}"),
            other => panic!("{other:?}"),
        }
        let first = asks.recv().await.unwrap();
        first.answer.send(Ok(json!({"roots": []}))).unwrap();
        drop(asks);
        let mut answers = futures::future::join_all(waiting).await.into_iter();
        assert_eq!(answers.next().unwrap().unwrap(), json!({"roots": []}));
        for answer in answers {
            assert!(matches!(answer, Err(ClientError::Failed(why)) if why.contains("call ended")));
        }
    }
}
