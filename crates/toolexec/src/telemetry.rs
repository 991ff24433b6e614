//! Observability hooks: a [`CallObserver`] told of every finished call
//! (metrics, audit), a [`CallTracer`] that records each call's span, the
//! [`Caller`] a call is made for, and W3C trace context ([`TraceContext`])
//! propagated through a [`Propagation`] the process installs once. With
//! nothing installed each hook costs a branch.
//!
//! Each call gets a span (`execute_tool`, with OpenTelemetry GenAI
//! attribute names): a [`CallSpan`] when the executor has a [`CallTracer`]
//! (a `tracing` span costs microseconds per call through a full
//! subscriber), otherwise a `tracing` span (target [`CALL_SPAN_TARGET`]),
//! which a subscriber that does not want it pays nothing for. Chain steps
//! get `tracing` spans.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::access::ToolAccess;
use crate::backend::BoxFuture;
use crate::docs::DetailLevel;
use crate::error::Error;

/// One finished call, as an observer sees it.
#[derive(Debug)]
pub struct CallRecord<'a> {
    /// The id as called (`ns:name`, a tool of the catalog); `unknown` for
    /// an id that did not resolve.
    pub tool: &'a str,
    /// The namespace; empty when the id did not parse.
    pub namespace: &'a str,
    /// The backend's kind (`local`, `mcp`, `http`, …); `none` when the tool
    /// was not found.
    pub backend: &'a str,
    /// The validated arguments, when the observer
    /// [wants them](CallObserver::wants_arguments).
    pub arguments: Option<&'a Value>,
    /// The failure; `None` on success.
    pub error: Option<&'a Error>,
    /// Time spent checking and validating the input.
    pub validation: Duration,
    /// Time from the start of the call to its end.
    pub duration: Duration,
    /// Who the call was made for, when the caller set one ([`with_caller`]).
    pub caller: Option<&'a Caller>,
    /// The W3C trace id of the call's span, when a [`CallTracer`] made it
    /// (otherwise the call's `tracing` span is current while observers are
    /// told, and [`current_trace`] gives it).
    pub trace_id: Option<u128>,
}

/// Told of every call that leaves the pipeline, successful or not. Called
/// on the caller's task right after the call ends: keep it short and never
/// block (hand slow work such as file writes to another thread).
pub trait CallObserver: Send + Sync + fmt::Debug {
    /// True when [`CallRecord::arguments`] should be filled (costs a clone
    /// of the arguments per call).
    fn wants_arguments(&self) -> bool {
        false
    }

    /// One finished call.
    fn call_finished(&self, call: &CallRecord<'_>);
}

/// The target of the `execute_tool` span the pipeline opens for a call
/// when its executor has no [`CallTracer`]; a subscriber that records call
/// spans through a tracer leaves it out, so an executor without one pays
/// nothing.
pub const CALL_SPAN_TARGET: &str = "toolexec::call::tool";

/// Longest client-supplied text (a client's name, a URI) put in a span or
/// a [`Caller`]: longer text is cut, so a client cannot make telemetry
/// queues hold megabytes per record.
pub const MAX_CLIENT_TEXT: usize = 256;

/// `text` cut to [`MAX_CLIENT_TEXT`] bytes at a character boundary.
pub fn clip(text: &str) -> &str {
    if text.len() <= MAX_CLIENT_TEXT {
        return text;
    }
    let mut end = MAX_CLIENT_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Who a call is made for: the authenticated principal, the session and
/// the client program, as far as the entry point knows them. `client` is
/// what the client called itself: informative, never proof. `kind`,
/// `scopes` and `claims` are what a [`Policy`](crate::policy::Policy)
/// decides on; only the entry point that verified them sets them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// The principal: a token's name or a subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// How `principal` was established.
    #[serde(skip_serializing_if = "PrincipalKind::is_anonymous")]
    pub kind: PrincipalKind,
    /// The MCP session (or connection) id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The client program's name, as it introduced itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Scopes the caller's credential grants (an access token's `scope`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The verified claims of the caller's access token. Never serialized
    /// (they may hold personal data); policies read them.
    #[serde(skip)]
    pub claims: serde_json::Map<String, Value>,
    /// The verified access token itself, for backends that act as the
    /// caller (an upstream server configured for token exchange). Never
    /// serialized, redacted in `Debug`.
    #[serde(skip)]
    pub credential: Option<AccessToken>,
    /// Requests back to the calling client during the call (sampling,
    /// elicitation, roots, log messages), when the entry point can reach
    /// it. Never serialized.
    #[serde(skip)]
    pub link: Option<crate::client::ClientLink>,
}

/// A caller's access token: a [`Secret`](crate::Secret) that compares in
/// constant time.
#[derive(Debug, Clone)]
pub struct AccessToken(crate::Secret);

impl AccessToken {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        AccessToken(crate::Secret::new(token))
    }

    /// The token, for the one place that sends it on.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }
}

impl PartialEq for AccessToken {
    fn eq(&self, other: &Self) -> bool {
        self.0.constant_time_eq(other.0.expose())
    }
}

impl Eq for AccessToken {}

impl Caller {
    /// One key per principal, for state kept per caller (quotas, sessions):
    /// `kind:principal` (`token:ci`, `subject:alice`, `local:stdio`), or
    /// `anonymous` for every caller that is not authenticated.
    pub fn principal_key(&self) -> String {
        match (&self.principal, self.kind) {
            (Some(p), kind) if kind != PrincipalKind::Anonymous => format!("{}:{p}", kind.as_str()),
            _ => PrincipalKind::Anonymous.as_str().to_owned(),
        }
    }
}

/// How a [`Caller`]'s principal was established.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    /// Not authenticated, or not known to the entry point.
    #[default]
    Anonymous,
    /// The local user who started the process (stdio).
    Local,
    /// A static bearer token; the principal is the token's name.
    Token,
    /// A verified access token; the principal is its subject (`sub`).
    Subject,
}

impl PrincipalKind {
    /// True for [`PrincipalKind::Anonymous`].
    pub fn is_anonymous(&self) -> bool {
        *self == PrincipalKind::Anonymous
    }

    /// The lowercase name (`anonymous`, `local`, `token`, `subject`).
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Anonymous => "anonymous",
            PrincipalKind::Local => "local",
            PrincipalKind::Token => "token",
            PrincipalKind::Subject => "subject",
        }
    }
}

tokio::task_local! {
    static CALLER: Arc<Caller>;
}

/// Runs `fut` with `caller` as the [`current_caller`] of every call made in
/// it (on this task; tasks it spawns do not inherit it).
pub async fn with_caller<F: Future>(caller: Arc<Caller>, fut: F) -> F::Output {
    CALLER.scope(caller, fut).await
}

/// The caller set by the innermost [`with_caller`] around this task.
pub fn current_caller() -> Option<Arc<Caller>> {
    CALLER.try_with(Arc::clone).ok()
}

/// The current span and [`Caller`], captured to carry to work that runs
/// elsewhere: a spawned task, or a script on a worker thread whose tool
/// calls must stay in the caller's trace and be made for the caller.
#[derive(Debug, Clone)]
pub struct CallScope {
    span: tracing::Span,
    call: Option<Traced>,
    caller: Option<Arc<Caller>>,
}

impl CallScope {
    /// The scope of the current task.
    pub fn capture() -> Self {
        CallScope {
            span: tracing::Span::current(),
            call: current_call().filter(|(call, tracer)| tracer.is_current(call)),
            caller: current_caller(),
        }
    }

    /// `fut` run in this scope (its spans entered on every poll, its caller
    /// current).
    pub fn bind<'a, F>(&self, fut: F) -> BoxFuture<'a, F::Output>
    where
        F: Future + Send + 'a,
    {
        // The call was entered inside the span (it is carried only while
        // it is the current span): so it is again.
        let span = self.span.clone();
        match (self.call, self.caller.clone()) {
            (None, None) => Box::pin(fut.instrument(span)),
            (None, Some(caller)) => Box::pin(with_caller(caller, fut.instrument(span))),
            (Some((call, tracer)), None) => Box::pin(in_call(call, tracer, fut).instrument(span)),
            (Some((call, tracer)), Some(caller)) => Box::pin(with_caller(
                caller,
                in_call(call, tracer, fut).instrument(span),
            )),
        }
    }
}

/// `tools` with every call, search and lookup made in the scope current
/// now ([`CallScope::capture`]), wherever the returned futures are polled.
pub fn scoped_access(tools: Arc<dyn ToolAccess>) -> Arc<dyn ToolAccess> {
    Arc::new(Scoped {
        tools,
        scope: CallScope::capture(),
    })
}

struct Scoped {
    tools: Arc<dyn ToolAccess>,
    scope: CallScope,
}

impl ToolAccess for Scoped {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let (tools, id) = (self.tools.clone(), tool_id.to_owned());
        self.scope
            .bind(async move { tools.call(&id, args, cancel).await })
    }

    // The inner call is made inside the scope, when the future is polled:
    // an implementation that does its work at once (as `Exec` may) must
    // see the scope's caller, not the (callerless) thread this runs on.
    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        let (tools, query) = (self.tools.clone(), query.to_owned());
        self.scope
            .bind(async move { tools.search(&query, limit).await })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let (tools, id) = (self.tools.clone(), tool_id.to_owned());
        self.scope
            .bind(async move { tools.describe(&id, level).await })
    }
}

/// W3C trace context (`traceparent`, `tracestate`) in its header form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `version-traceid-spanid-flags`.
    pub traceparent: String,
    /// Vendor state, passed on as received.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// Reads the context from headers or `_meta` keys through `get` (keys
    /// asked for: `traceparent`, `tracestate`). `None` when `traceparent`
    /// is missing or malformed.
    pub fn extract<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        let traceparent = get("traceparent")?.trim();
        parse_traceparent(traceparent)?;
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: get("tracestate").map(|s| s.trim().to_owned()),
        })
    }

    /// The 32 hex digits of the trace id.
    pub fn trace_id(&self) -> &str {
        parse_traceparent(&self.traceparent).map_or("", |(trace, _)| trace)
    }
}

/// `(trace id, span id)` of a well-formed version-00 `traceparent` with
/// non-zero ids.
fn parse_traceparent(s: &str) -> Option<(&str, &str)> {
    let mut parts = s.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    let nonzero = |p: &str| p.bytes().any(|b| b != b'0');
    (hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && nonzero(trace)
        && hex(span, 16)
        && nonzero(span)
        && hex(flags, 2)
        && (version != "00" || parts.next().is_none()))
    .then_some((trace, span))
}

/// Connects spans to a trace system: what the process's telemetry installs
/// with [`install_propagation`], so trace context crosses process
/// boundaries.
pub trait Propagation: Send + Sync {
    /// The current span's context, to send with an outgoing request.
    fn current(&self) -> Option<TraceContext>;
    /// Makes `span` a child of the remote `parent` (an incoming request's).
    fn set_parent(&self, span: &tracing::Span, parent: &TraceContext);
}

/// Records the pipeline's call spans directly, at a fraction of a `tracing`
/// span's cost: start, entry and exit around every poll of the call's
/// future, end. Given to an executor with
/// [`ExecBuilder::call_tracer`](crate::ExecBuilder::call_tracer).
pub trait CallTracer: Send + Sync + fmt::Debug {
    /// Starts the span of a call that started at `start`, a child of the
    /// current span.
    fn start_call(&self, start: Instant) -> CallSpan;

    /// Makes `call` the current span (the parent of spans opened, and the
    /// context [`Propagation::current`] returns) until the matching
    /// [`exit_call`](Self::exit_call). Nested like `tracing`'s enter and
    /// exit.
    fn enter_call(&self, call: &CallSpan);

    /// Undoes the innermost [`enter_call`](Self::enter_call).
    fn exit_call(&self, call: &CallSpan);

    /// True when the entered `call` is the current span: no span was
    /// entered inside it since. [`CallScope::capture`] carries the call only
    /// then; otherwise the span entered inside it is the scope (and a child
    /// of the call). True by default.
    fn is_current(&self, call: &CallSpan) -> bool {
        let _ = call;
        true
    }

    /// True when [`end_call`](Self::end_call) wants
    /// [`CallRecord::arguments`] (recorded on the span, opt-in).
    fn wants_arguments(&self) -> bool {
        false
    }

    /// Ends the span of `call`, described by `record` (the record the
    /// observer gets).
    fn end_call(&self, call: &CallSpan, record: &CallRecord<'_>);
}

/// The span of one call, recorded by a [`CallTracer`] rather than as a
/// `tracing` span: its W3C ids and start, made by
/// [`start_call`](CallTracer::start_call) and carried by the pipeline to
/// [`end_call`](CallTracer::end_call). Plain data, so a call's span costs
/// no allocation in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSpan {
    /// The trace's id.
    pub trace_id: u128,
    /// This span's id.
    pub span_id: u64,
    /// The parent span's id; 0 for the root of a trace.
    pub parent_span_id: u64,
    /// True when the parent span is in another process.
    pub parent_remote: bool,
    /// True when the trace is sampled (the span is exported).
    pub sampled: bool,
    /// When the call started.
    pub start: SystemTime,
}

/// A call span and what records it.
type Traced = (CallSpan, &'static dyn CallTracer);

thread_local! {
    /// The call span entered on this thread, for [`CallScope::capture`].
    static CURRENT_CALL: Cell<Option<Traced>> = const { Cell::new(None) };
}

fn current_call() -> Option<Traced> {
    CURRENT_CALL.get()
}

/// `fut` with `call` entered around every poll.
pub(crate) fn in_call<F: Future>(
    call: CallSpan,
    tracer: &'static dyn CallTracer,
    fut: F,
) -> InCall<F> {
    InCall { call, tracer, fut }
}

/// Leaves an entered call span, even when the inner future panics.
struct Exit<'a> {
    tracer: &'a dyn CallTracer,
    call: &'a CallSpan,
    outer: Option<Traced>,
}

impl Drop for Exit<'_> {
    fn drop(&mut self) {
        CURRENT_CALL.set(self.outer);
        self.tracer.exit_call(self.call);
    }
}

pin_project_lite::pin_project! {
    /// A future run inside a [`CallSpan`]: see [`in_call`].
    pub(crate) struct InCall<F> {
        call: CallSpan,
        tracer: &'static dyn CallTracer,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for InCall<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let tracer = *this.tracer;
        tracer.enter_call(this.call);
        let _exit = Exit {
            tracer,
            call: this.call,
            outer: CURRENT_CALL.replace(Some((*this.call, tracer))),
        };
        this.fut.poll(cx)
    }
}

static PROPAGATION: OnceLock<Box<dyn Propagation>> = OnceLock::new();

/// Installs the process's propagation; `false` when one already was.
pub fn install_propagation(propagation: Box<dyn Propagation>) -> bool {
    PROPAGATION.set(propagation).is_ok()
}

/// The current span's trace context, for an outgoing request's headers or
/// `_meta`; `None` without installed propagation or outside a trace.
pub fn current_trace() -> Option<TraceContext> {
    PROPAGATION.get()?.current()
}

/// Makes `span` a child of the incoming `parent` (no-op without installed
/// propagation).
pub fn set_parent(span: &tracing::Span, parent: &TraceContext) {
    if let Some(p) = PROPAGATION.get() {
        p.set_parent(span, parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_checked() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::extract(|k| (k == "traceparent").then_some(ok)).unwrap();
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.tracestate, None);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert!(TraceContext::extract(|_| Some(bad)).is_none(), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_caller_is_scoped_to_the_task() {
        assert_eq!(current_caller(), None);
        let caller = Arc::new(Caller {
            principal: Some("ci".into()),
            ..Caller::default()
        });
        let seen = with_caller(caller.clone(), async { current_caller() }).await;
        assert_eq!(seen, Some(caller));
    }
}
