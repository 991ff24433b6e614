//! What the gateway relays from its upstream servers besides tools:
//! resources, resource templates and subscriptions ([`resources`]),
//! prompts and completion ([`prompts`]), so that a client sees the servers
//! behind the gateway as they are.
//!
//! Lists are merged in configuration order, one upstream page per gateway
//! page; the gateway's cursor names the upstream and carries its cursor.
//! Prompts are published as `server__name`, as tools are, or under their
//! own names for servers configured unprefixed. Resource URIs stay
//! as the server wrote them; a URI an earlier server already lists is
//! published by the later one as `toolexec://<server>/<percent-encoded
//! URI>`, which reads back from that server (the collision is logged once).

mod input_state;
mod prompts;
mod resources;

pub(crate) use input_state::Round;
pub(crate) use resources::ListenerSubscriptions;
mod uri;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use rmcp::ErrorData as McpError;
use rmcp::model::{ClientRequest, InputRequiredResult, ServerCapabilities, ServerResult};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use toolexec::{Exec, policy};

use crate::upstream::{RelayError, Upstream, UpstreamNotice};

/// Most pages read from one upstream when the gateway looks for a URI's
/// owner (a server whose listing never ends is not read forever).
const MAX_LOOKUP_PAGES: usize = 100;

/// Most URIs whose owner is remembered, and most URI templates kept per
/// upstream: what servers list cannot grow the gateway's memory without
/// bound. Past them, reads fall back to templates and the only server.
const MAX_KNOWN_URIS: usize = 100_000;
const MAX_TEMPLATES: usize = 10_000;

/// Most resources one client session is subscribed to at once.
const MAX_SUBSCRIPTIONS_PER_SESSION: usize = 1_000;

/// An unknown URI makes the gateway read the upstreams' lists again at
/// most this often, so clients asking for made-up URIs cannot make it
/// list every server on every read.
const RELEARN_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// What becomes of an upstream's `input_required` answer to `prompts/get`
/// or `resources/read`, by the revision of the client that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inputs {
    /// A 2026-07-28 client answers it itself and sends the request again,
    /// whose answers and state then reach the same server unchanged: it is
    /// passed back as it is.
    Returned,
    /// An earlier client cannot: the gateway asks it for each input (as it
    /// relays a 2025 server's requests) and sends the request again.
    Asked,
}

impl Inputs {
    /// For the client of the request `context` answers.
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Self {
        if super::downstream::answers_inputs_itself(context) {
            Inputs::Returned
        } else {
            Inputs::Asked
        }
    }
}

/// The upstreams a gateway relays, and what it learned about them.
pub(crate) struct Passthrough {
    upstreams: Vec<Arc<Upstream>>,
    /// The gateway's executor, whose policy decides what each caller may
    /// list, read and get.
    exec: Exec,
    /// Per upstream: whether its prompts keep their own names
    /// ([`GatewayOptions::unprefixed`](super::GatewayOptions::unprefixed)).
    unprefixed: Vec<bool>,
    /// Prompt names of each unprefixed upstream, as last listed.
    prompt_names: Mutex<HashMap<usize, HashSet<String>>>,
    /// When the unprefixed upstreams' prompts were last read to find an
    /// unknown prompt's owner.
    prompts_learned: Mutex<Option<std::time::Instant>>,
    /// URI → the upstream that owns it: the first in configuration order
    /// that listed it.
    owners: Mutex<HashMap<String, usize>>,
    /// URI templates of each upstream, as last listed.
    templates: Mutex<HashMap<usize, Vec<String>>>,
    /// Collisions already logged: (URI, upstream).
    logged: Mutex<HashSet<(String, usize)>>,
    /// Downstream subscriptions: (upstream, URI on the upstream) → the
    /// sessions subscribed, each with the URI it used.
    subscribers: Mutex<HashMap<(usize, String), Vec<Subscriber>>>,
    /// When the lists were last read to find an unknown URI's owner.
    learned: Mutex<Option<std::time::Instant>>,
    /// Set once the notice relays run.
    started: AtomicBool,
    /// The upstreams' list changes, for 2026-07-28 listeners
    /// (`subscriptions/listen`), fed by the notice relays.
    list_changes: tokio::sync::broadcast::Sender<UpstreamNotice>,
    /// Stops the notice relays when the gateway goes.
    stop: CancellationToken,
    /// Seals the state of the input rounds handed to 2026-07-28 clients.
    pub(crate) input_states: input_state::InputStates,
}

/// One downstream session or listener subscribed to a resource.
#[derive(Clone)]
struct Subscriber {
    /// The session (`resources/subscribe`) or listener
    /// (`subscriptions/listen`) id.
    session: u64,
    to: Deliver,
    /// The URI the client subscribed with (rewritten on a collision).
    uri: String,
}

/// Where a subscriber's `resources/updated` goes.
#[derive(Clone)]
pub(crate) enum Deliver {
    /// An initialized session (`resources/subscribe`): a notification to
    /// its client.
    Session(Peer<RoleServer>),
    /// A 2026-07-28 listener (`subscriptions/listen` with
    /// `resourceSubscriptions`): the URI, to its stream.
    Listener(tokio::sync::mpsc::Sender<String>),
}

impl Deliver {
    /// Whether nobody receives there any more.
    fn is_closed(&self) -> bool {
        match self {
            Deliver::Session(peer) => peer.is_transport_closed(),
            Deliver::Listener(tx) => tx.is_closed(),
        }
    }

    /// Sends `resources/updated` for `uri`; a listener that is behind
    /// misses it (as a slow client misses notifications).
    fn send(self, uri: String) {
        match self {
            Deliver::Session(peer) => {
                tokio::spawn(async move {
                    let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                    if let Err(e) = peer.notify_resource_updated(param).await {
                        tracing::debug!(error = %e, "could not send resources/updated");
                    }
                });
            }
            Deliver::Listener(tx) => {
                if tx.try_send(uri).is_err() {
                    tracing::debug!("a resources/updated for a slow listener was dropped");
                }
            }
        }
    }
}

impl Passthrough {
    pub(crate) fn new(upstreams: Vec<Arc<Upstream>>, unprefixed: &[String], exec: Exec) -> Self {
        Passthrough {
            exec,
            unprefixed: upstreams
                .iter()
                .map(|u| unprefixed.iter().any(|n| n == u.name()))
                .collect(),
            upstreams,
            prompt_names: Mutex::default(),
            prompts_learned: Mutex::new(None),
            owners: Mutex::default(),
            templates: Mutex::default(),
            logged: Mutex::default(),
            subscribers: Mutex::default(),
            learned: Mutex::new(None),
            started: AtomicBool::new(false),
            list_changes: tokio::sync::broadcast::channel(16).0,
            stop: CancellationToken::new(),
            input_states: input_state::InputStates::new(),
        }
    }

    /// The upstreams' resource and prompt list changes, for a
    /// `subscriptions/listen` of a 2026-07-28 client (start the relays
    /// with [`Self::start_notices`]).
    pub(crate) fn list_changes(&self) -> tokio::sync::broadcast::Receiver<UpstreamNotice> {
        self.list_changes.subscribe()
    }

    /// Ends the call server `server` holds under `state` (opened from a
    /// `requestState`), if it holds one.
    pub(crate) fn abandon_held(&self, server: &str, state: &str) -> bool {
        self.index_of(server)
            .is_some_and(|i| self.upstreams[i].abandon_held(state))
    }

    /// The call server `server` holds under `state` for its client's
    /// answers: how long they may still come, and a future that resolves
    /// if the call ends first; `None` when it holds none under it.
    pub(crate) fn held_wait(
        &self,
        server: &str,
        state: &str,
    ) -> Option<(std::time::Duration, toolexec::BoxFuture<'static, ()>)> {
        self.upstreams[self.index_of(server)?].held_wait(state)
    }

    /// True when there is no upstream to relay.
    pub(crate) fn is_empty(&self) -> bool {
        self.upstreams.is_empty()
    }

    /// Whether to advertise a capability: some upstream has it, or is not
    /// connected yet (and may have it once it is).
    pub(crate) fn offers(&self, has: impl Fn(&ServerCapabilities) -> bool) -> bool {
        self.upstreams
            .iter()
            .any(|u| u.server_capabilities().is_none_or(|c| has(&c)))
    }

    /// True the first time `(key, index)` is seen, so it is logged once;
    /// past [`MAX_KNOWN_URIS`] keys, never (what upstreams list cannot
    /// grow this without bound).
    fn log_once(&self, key: String, index: usize) -> bool {
        let mut logged = self.logged.lock();
        logged.len() < MAX_KNOWN_URIS && logged.insert((key, index))
    }

    /// Index of the upstream named `name`.
    fn index_of(&self, name: &str) -> Option<usize> {
        self.upstreams.iter().position(|u| u.name() == name)
    }

    /// The first upstream from `start` on that is connected and has a
    /// capability.
    fn next_with(&self, start: usize, has: fn(&ServerCapabilities) -> bool) -> Option<usize> {
        (start..self.upstreams.len()).find(|&i| self.has(i, has))
    }

    /// Whether upstream `index` is connected and has a capability.
    fn has(&self, index: usize, has: fn(&ServerCapabilities) -> bool) -> bool {
        self.upstreams[index]
            .server_capabilities()
            .is_some_and(|c| has(&c))
    }

    /// One page of a list merged over the upstreams with a capability, in
    /// configuration order: the page `fetch` reads from the upstream the
    /// cursor names (`fetch(index, its cursor)` gives the items and the
    /// upstream's next cursor). An upstream that fails is skipped (logged);
    /// an empty last page moves on to the next upstream.
    async fn merged<T, F, Fut>(
        &self,
        method: &str,
        cursor: Option<String>,
        has: fn(&ServerCapabilities) -> bool,
        mut fetch: F,
    ) -> Result<(Vec<T>, Option<String>), McpError>
    where
        F: FnMut(usize, Option<String>) -> Fut,
        Fut: Future<Output = Result<(Vec<T>, Option<String>), McpError>>,
    {
        let (mut index, mut inner) = decode_cursor(cursor.as_deref())?;
        loop {
            let Some(i) = self.next_with(index, has) else {
                return Ok((Vec::new(), None));
            };
            if i != index {
                inner = None;
            }
            let (items, upstream_next) = match fetch(i, inner.take()).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(server = self.upstreams[i].name(), error = %e.message, "{method} failed; skipping the server");
                    index = i + 1;
                    continue;
                }
            };
            let next = match &upstream_next {
                Some(c) => Some(encode_cursor(i, Some(c))),
                None => self.next_with(i + 1, has).map(|j| encode_cursor(j, None)),
            };
            if items.is_empty() && upstream_next.is_none() && next.is_some() {
                index = i + 1;
                continue;
            }
            return Ok((items, next));
        }
    }

    /// Sends `request` to upstream `index` and reads its result as `T`.
    async fn relay<T: Answer>(
        &self,
        index: usize,
        request: ClientRequest,
        cancel: CancellationToken,
    ) -> Result<T, McpError> {
        let upstream = &self.upstreams[index];
        let method = request.method().to_owned();
        let result = upstream
            .relay(request, cancel)
            .await
            .map_err(|e| mcp_error(e, upstream.name()))?;
        read_answer(result, &method, upstream.name())
    }

    /// [`Passthrough::relay`] for `prompts/get` and `resources/read` of
    /// `target` (the prompt's name on its server, the URI), which a server
    /// may answer with `input_required`: that answer is returned (its state
    /// sealed to the round) or answered as `inputs` says.
    async fn relay_inputs<T: Answer>(
        &self,
        index: usize,
        target: &str,
        request: ClientRequest,
        cancel: CancellationToken,
        inputs: Inputs,
    ) -> Result<Result<T, InputRequiredResult>, McpError> {
        let upstream = &self.upstreams[index];
        let method = request.method().to_owned();
        let result = match inputs {
            Inputs::Returned => upstream.relay_returning(request, cancel).await,
            Inputs::Asked => upstream.relay_answering(request, cancel).await,
        }
        .map_err(|e| mcp_error(e, upstream.name()))?;
        match result {
            ServerResult::InputRequiredResult(r) if inputs == Inputs::Returned => {
                let r = upstream.returned_inputs(r).map_err(|why| {
                    McpError::internal_error(
                        format!("server {}: {why}", upstream.name()),
                        Some(json!({"code": "execution_failed", "server": upstream.name()})),
                    )
                })?;
                let round = Round {
                    method: &method,
                    server: upstream.name(),
                    target,
                };
                self.input_states.seal(round, r).map(Err)
            }
            // Still asking: this server's client requests are not relayed.
            ServerResult::InputRequiredResult(_) => Err(McpError::internal_error(
                format!(
                    "server {} asked for client input in its answer to {method}, and the \
                     gateway relays no client requests to it (its `relay` setting)",
                    upstream.name()
                ),
                Some(json!({"code": "execution_failed", "server": upstream.name()})),
            )),
            other => read_answer(other, &method, upstream.name()).map(Ok),
        }
    }

    /// The server's own state in a 2026-07-28 client's `requestState`, when
    /// it is the one the gateway sealed for this round and caller
    /// ([`InputStates::open`](input_state::InputStates::open)); a client of an earlier revision
    /// sends none (what it sends is dropped).
    fn opened_state(
        &self,
        round: Round<'_>,
        inputs: Inputs,
        state: Option<String>,
    ) -> Result<Option<String>, McpError> {
        match (inputs, state) {
            (Inputs::Returned, Some(sealed)) => self.input_states.open(round, &sealed),
            _ => Ok(None),
        }
    }

    /// Relays each upstream's resource and prompt notifications to the
    /// downstream clients: `resources/updated` to the sessions subscribed,
    /// list changes to every client in `peers`. Started once.
    pub(crate) fn start_notices(self: &Arc<Self>, peers: &Arc<Mutex<Vec<Peer<RoleServer>>>>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        for (index, upstream) in self.upstreams.iter().enumerate() {
            let mut rx = upstream.notices();
            let weak = Arc::downgrade(self);
            let stop = self.stop.clone();
            let peers = peers.clone();
            tokio::spawn(async move {
                loop {
                    let notice = tokio::select! {
                        _ = stop.cancelled() => break,
                        n = rx.recv() => match n {
                            Ok(n) => n,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                        },
                    };
                    let Some(this) = weak.upgrade() else { break };
                    this.deliver(index, notice, &peers);
                }
            });
        }
    }

    fn deliver(&self, index: usize, notice: UpstreamNotice, peers: &Mutex<Vec<Peer<RoleServer>>>) {
        match notice {
            UpstreamNotice::ResourceUpdated { uri } => {
                let subscribers = {
                    let mut subs = self.subscribers.lock();
                    let Some(list) = subs.get_mut(&(index, uri)) else {
                        return;
                    };
                    list.retain(|s| !s.to.is_closed());
                    list.clone()
                };
                for s in subscribers {
                    s.to.send(s.uri);
                }
            }
            UpstreamNotice::ResourcesChanged | UpstreamNotice::PromptsChanged => {
                if notice == UpstreamNotice::ResourcesChanged {
                    // New URIs may have appeared: the next unknown one may
                    // read the lists again at once.
                    *self.learned.lock() = None;
                }
                let peers: Vec<_> = {
                    let mut peers = peers.lock();
                    peers.retain(|p| !p.is_transport_closed());
                    peers.clone()
                };
                let resources = notice == UpstreamNotice::ResourcesChanged;
                // No listener is no error.
                let _ = self.list_changes.send(notice);
                for peer in peers {
                    tokio::spawn(async move {
                        let sent = if resources {
                            peer.notify_resource_list_changed().await
                        } else {
                            peer.notify_prompt_list_changed().await
                        };
                        if let Err(e) = sent {
                            tracing::debug!(error = %e, "could not send list_changed");
                        }
                    });
                }
            }
        }
    }
}

/// True, at most once per [`RELEARN_AFTER`] for one `learned` time, when
/// lists may be read again to find an unknown name.
fn due(learned: &Mutex<Option<std::time::Instant>>) -> bool {
    let mut learned = learned.lock();
    if learned.is_some_and(|at| at.elapsed() < RELEARN_AFTER) {
        return false;
    }
    *learned = Some(std::time::Instant::now());
    true
}

impl Default for Passthrough {
    /// Nothing to relay (so nothing for a policy to decide).
    fn default() -> Self {
        Passthrough::new(Vec::new(), &[], Exec::builder().build())
    }
}

impl Drop for Passthrough {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The gateway's cursor of a merged list: the upstream's index and its own
/// cursor (empty: its first page).
fn encode_cursor(index: usize, cursor: Option<&str>) -> String {
    format!("{index}:{}", cursor.unwrap_or(""))
}

fn decode_cursor(cursor: Option<&str>) -> Result<(usize, Option<String>), McpError> {
    let Some(cursor) = cursor else {
        return Ok((0, None));
    };
    let bad = || McpError::invalid_params(format!("invalid cursor {cursor:?}"), None);
    let (index, inner) = cursor.split_once(':').ok_or_else(bad)?;
    let index = index.parse().map_err(|_| bad())?;
    Ok((index, (!inner.is_empty()).then(|| inner.to_owned())))
}

/// What to do after a page of an upstream's list ([`read_pages`]).
pub(super) enum Next {
    /// Read the page at this cursor.
    Page(String),
    /// The list ended: it was read whole.
    End,
    /// Stop before the end.
    Stop,
}

impl Next {
    /// The page at `cursor`, or the end when there is none.
    pub(super) fn after(cursor: Option<String>) -> Self {
        cursor.map_or(Next::End, Next::Page)
    }
}

/// Reads a list page by page, at most [`MAX_LOOKUP_PAGES`] pages (a
/// server whose listing never ends is not read forever): `fetch` gets each
/// page's cursor, `take` each page with its number and says what next.
/// True when the list was read to its end; a failed page stops the read.
pub(super) async fn read_pages<P, Fut>(
    mut fetch: impl FnMut(Option<String>) -> Fut,
    mut take: impl FnMut(usize, P) -> Next,
) -> bool
where
    Fut: std::future::Future<Output = Result<P, McpError>>,
{
    let mut cursor = None;
    for number in 0..MAX_LOOKUP_PAGES {
        let Ok(page) = fetch(cursor.take()).await else {
            return false;
        };
        match take(number, page) {
            Next::Page(c) => cursor = Some(c),
            Next::End => return true,
            Next::Stop => return false,
        }
    }
    false
}

/// JSON-RPC error code of a request the gateway's policy refuses: a
/// server-defined code (JSON-RPC leaves -32000 to -32099 to servers); the
/// data carries toolexec's code (`not_allowed`), the target and the rule.
pub const RPC_NOT_ALLOWED: i32 = -32003;

impl Passthrough {
    /// True when the current caller may see `target` (lists).
    fn may(&self, target: &policy::Target<'_>) -> bool {
        self.exec.may_use(target)
    }

    /// A [`RPC_NOT_ALLOWED`] error unless the current caller may use
    /// `target` (logged).
    fn authorize(&self, target: &policy::Target<'_>) -> Result<(), McpError> {
        self.exec.authorize(target).map_err(|e| {
            let body = e.to_body();
            let mut data = json!({"code": body.code.as_str()});
            if let (Some(serde_json::Value::Object(details)), Some(map)) =
                (body.details, data.as_object_mut())
            {
                map.extend(details);
            }
            McpError::new(
                rmcp::model::ErrorCode(RPC_NOT_ALLOWED),
                body.message,
                Some(data),
            )
        })
    }
}

/// An upstream's failure as the client sees it: the server's own JSON-RPC
/// error unchanged; toolexec's (unavailable, timed out, cancelled) as an
/// internal error whose data carries toolexec's code.
fn mcp_error(e: RelayError, server: &str) -> McpError {
    match e {
        RelayError::Server(data) => data,
        RelayError::Local(e) => McpError::internal_error(
            e.to_string(),
            Some(json!({"code": e.code().as_str(), "server": server})),
        ),
    }
}

/// A result type of a relayed request.
trait Answer: DeserializeOwned {
    /// The result, when rmcp decoded it as this type; else the result back.
    fn from_result(result: ServerResult) -> Result<Self, Box<ServerResult>>;
}

macro_rules! answer {
    ($($t:ident),* $(,)?) => {$(
        impl Answer for rmcp::model::$t {
            fn from_result(result: ServerResult) -> Result<Self, Box<ServerResult>> {
                match result {
                    ServerResult::$t(r) => Ok(r),
                    other => Err(Box::new(other)),
                }
            }
        }
    )*};
}

answer!(
    ListResourcesResult,
    ListResourceTemplatesResult,
    ReadResourceResult,
    ListPromptsResult,
    GetPromptResult,
    CompleteResult,
);

/// Answers whose content does not matter (`resources/subscribe`).
impl Answer for serde_json::Value {
    fn from_result(result: ServerResult) -> Result<Self, Box<ServerResult>> {
        Err(Box::new(result))
    }
}

/// `result` as `T`, the type its method answers with.
fn read_answer<T: Answer>(result: ServerResult, method: &str, server: &str) -> Result<T, McpError> {
    T::from_result(result).or_else(|other| decode(*other, method, server))
}

/// Reads a result as the type its method answers with, when rmcp decoded
/// it as another variant of the same shape (rmcp decodes results without
/// knowing the request).
fn decode<T: DeserializeOwned>(
    result: ServerResult,
    method: &str,
    server: &str,
) -> Result<T, McpError> {
    serde_json::to_value(result)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            McpError::internal_error(
                format!("server {server} answered {method} with an invalid result: {e}"),
                Some(json!({"code": "backend_unavailable", "server": server})),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_bad_ones_are_invalid_params() {
        assert_eq!(decode_cursor(None).unwrap(), (0, None));
        let c = encode_cursor(2, Some("abc:def"));
        assert_eq!(
            decode_cursor(Some(&c)).unwrap(),
            (2, Some("abc:def".into()))
        );
        let c = encode_cursor(1, None);
        assert_eq!(decode_cursor(Some(&c)).unwrap(), (1, None));
        for bad in ["", "x:1", "nocolon", "-1:"] {
            let e = decode_cursor(Some(bad)).unwrap_err();
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{bad}");
        }
    }
}
