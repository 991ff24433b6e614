//! W3C trace context between spans and the wire, and each call's own span:
//! the [`Propagation`] that [`Telemetry`](crate::Telemetry) installs, so
//! the gateway can continue an incoming trace and backends can pass it on,
//! and the call tracer ([`Telemetry::call_tracer`](crate::Telemetry::call_tracer)),
//! whose `execute_tool` spans cost a fraction of a `tracing` span.
//!
//! A call's span is made here directly: ids from the SDK's random id
//! generator, the sampling decision (a child follows its parent; a new
//! trace is sampled by the ratio), a start time, and at the end one small
//! record pushed onto the export queue, which the exporter thread turns
//! into [`SpanData`]. While the call is entered, its context becomes the
//! current OpenTelemetry context only when something needs it
//! (`materialize`): a span opened under it (through a `CallContext` layer
//! placed before the `tracing-opentelemetry` layer, which takes the
//! current context as a new span's parent) or an outgoing request. Spans
//! entered inside the call stack on top of it as usual.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, ContextGuard, InstrumentationScope, KeyValue, StringValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample, SpanData, SpanEvents,
    SpanLinks,
};
use parking_lot::RwLock;
use toolexec::ErrorCode;
use toolexec::telemetry::{CallRecord, CallSpan, CallTracer, Propagation, TraceContext};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::export::{Finished, SpanQueue};
use crate::redact;
use crate::sampling::KeyedRatio;

/// W3C trace context over OpenTelemetry contexts, including those of the
/// calls the call tracer records.
#[derive(Debug, Default)]
pub struct W3cPropagation {
    propagator: TraceContextPropagator,
}

/// The [`CallTracer`] of calls' own spans: makes them and queues them for
/// export.
#[derive(Debug)]
pub(crate) struct CallSpans {
    pub(crate) queue: Arc<SpanQueue>,
    /// Decides for a call that starts a trace (the parent-based part of
    /// the process's sampler is applied here: a child follows its parent).
    pub(crate) root_sampler: Sampler,
    /// Decides for a call whose parent is in another process when that
    /// process's decision is not trusted; `None` to follow it.
    pub(crate) remote_sampler: Option<KeyedRatio>,
    pub(crate) names: Interned,
    /// Record each call's arguments, capped at this many bytes.
    pub(crate) arguments: Option<usize>,
}

/// How long a thread's pairing of the monotonic clock with the wall clock
/// is used before it is read again.
const ANCHOR_AGE: Duration = Duration::from_secs(1);

thread_local! {
    /// A monotonic instant and the wall-clock time read with it.
    static ANCHOR: Cell<Option<(Instant, SystemTime)>> = const { Cell::new(None) };
}

/// The wall-clock time of `at`, a recent instant, without reading the wall
/// clock for every call: from this thread's anchor, read again once a
/// second, so a change of the system clock shows within a second and the
/// monotonic clock's drift in between is at most its NTP slew.
fn wall_clock(at: Instant) -> SystemTime {
    let (instant, wall) = match ANCHOR.get() {
        Some((instant, wall)) if at >= instant && at - instant < ANCHOR_AGE => (instant, wall),
        _ => {
            let anchor = (Instant::now(), SystemTime::now());
            ANCHOR.set(Some(anchor));
            anchor
        }
    };
    // `at` may precede a fresh anchor by the time of one read.
    match at.checked_duration_since(instant) {
        Some(after) => wall + after,
        None => wall - instant.duration_since(at),
    }
}

/// A call span entered on this thread.
struct Entered {
    call: CallSpan,
    /// The current span when the call was entered: while it still is,
    /// nothing was entered inside the call and the call is the current
    /// span.
    under: SpanId,
    /// Set once the call's context was made current, for a child.
    guard: Option<ContextGuard>,
}

thread_local! {
    /// The call spans entered on this thread, innermost last.
    static ENTERED: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
}

fn current_span_id() -> SpanId {
    Context::map_current(|cx| cx.span().span_context().span_id())
}

/// The innermost entered call, when it is the current span (the current
/// OpenTelemetry span, `current`, is the one it was entered under) and its
/// context is not the current context yet.
fn pending_call_under(current: SpanId) -> Option<CallSpan> {
    // `try_with`: a thread's locals may be gone while its other
    // destructors still open spans.
    ENTERED
        .try_with(|e| {
            let e = e.borrow();
            let top = e.last()?;
            (top.guard.is_none() && current == top.under).then_some(top.call)
        })
        .ok()
        .flatten()
}

/// Makes the innermost entered call's context the current OpenTelemetry
/// context if it is the current span: what a child span or an outgoing
/// request needs. Until then a call costs no context of its own.
pub(crate) fn materialize() {
    let _ = ENTERED.try_with(|e| {
        let mut e = e.borrow_mut();
        let Some(top) = e.last_mut() else { return };
        if top.guard.is_none() && current_span_id() == top.under {
            let cx = Context::map_current(|parent| call_context(&top.call, parent));
            top.guard = Some(cx.attach());
        }
    });
}

/// A call's span context under the current context (whose trace state it
/// keeps).
fn call_context(call: &CallSpan, parent: &Context) -> Context {
    let flags = if call.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    parent.with_remote_span_context(SpanContext::new(
        TraceId::from(call.trace_id),
        SpanId::from(call.span_id),
        flags,
        false,
        parent.span().span_context().trace_state().clone(),
    ))
}

impl Propagation for W3cPropagation {
    fn current(&self) -> Option<TraceContext> {
        // With context activation the entered `tracing` span's context is
        // the current OpenTelemetry context; an entered call's is made so.
        materialize();
        let cx = Context::current();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut headers = HashMap::new();
        self.propagator.inject_context(&cx, &mut headers);
        Some(TraceContext {
            traceparent: headers.remove("traceparent")?,
            tracestate: headers.remove("tracestate").filter(|s| !s.is_empty()),
        })
    }

    fn set_parent(&self, span: &tracing::Span, parent: &TraceContext) {
        let mut headers = HashMap::new();
        headers.insert("traceparent".to_owned(), parent.traceparent.clone());
        if let Some(state) = &parent.tracestate {
            headers.insert("tracestate".to_owned(), state.clone());
        }
        let cx = self.propagator.extract(&headers);
        // Fails only for a span already started, which callers do not pass.
        let _ = span.set_parent(cx);
    }
}

impl CallTracer for CallSpans {
    fn start_call(&self, start: Instant) -> CallSpan {
        let ids = RandomIdGenerator::default();
        let span_id = u64::from_be_bytes(ids.new_span_id().to_bytes());
        let start = wall_clock(start);
        let parent = Context::map_current(|cx| cx.span().span_context().clone());
        // A call inside a call, with no span between them: its parent is
        // the outer call.
        if let Some(outer) = pending_call_under(parent.span_id()) {
            return CallSpan {
                trace_id: outer.trace_id,
                span_id,
                parent_span_id: outer.span_id,
                parent_remote: false,
                sampled: outer.sampled,
                start,
            };
        }
        let root = |trace_id| {
            let sampling = self.root_sampler.should_sample(
                None,
                trace_id,
                "execute_tool",
                &SpanKind::Internal,
                &[],
                &[],
            );
            sampling.decision == SamplingDecision::RecordAndSample
        };
        if parent.is_valid() {
            // Parent-based sampling: a child follows its parent (a remote
            // one only when trusted).
            let sampled = match &self.remote_sampler {
                Some(remote) if parent.is_remote() => remote.sampled(parent.trace_id()),
                _ => parent.is_sampled(),
            };
            return CallSpan {
                trace_id: u128::from_be_bytes(parent.trace_id().to_bytes()),
                span_id,
                parent_span_id: u64::from_be_bytes(parent.span_id().to_bytes()),
                parent_remote: parent.is_remote(),
                sampled,
                start,
            };
        }
        let trace_id = ids.new_trace_id();
        CallSpan {
            trace_id: u128::from_be_bytes(trace_id.to_bytes()),
            span_id,
            parent_span_id: 0,
            parent_remote: false,
            sampled: root(trace_id),
            start,
        }
    }

    fn enter_call(&self, call: &CallSpan) {
        // The call's context is made current only when a child needs it
        // ([`materialize`]): most calls open no span.
        let entered = Entered {
            call: *call,
            under: current_span_id(),
            guard: None,
        };
        let _ = ENTERED.try_with(|e| e.borrow_mut().push(entered));
    }

    fn exit_call(&self, call: &CallSpan) {
        // Dropped outside the borrow: dropping a guard touches only
        // OpenTelemetry's own context stack.
        let entered = ENTERED.try_with(|e| e.borrow_mut().pop()).ok().flatten();
        debug_assert!(
            entered
                .as_ref()
                .is_none_or(|e| e.call.span_id == call.span_id),
            "exit_call out of order"
        );
        drop(entered);
    }

    fn is_current(&self, call: &CallSpan) -> bool {
        let current = current_span_id();
        ENTERED
            .try_with(|e| {
                e.borrow().last().is_some_and(|top| {
                    top.call.span_id == call.span_id
                        && match top.guard {
                            None => current == top.under,
                            Some(_) => current == SpanId::from(call.span_id),
                        }
                })
            })
            .unwrap_or(false)
    }

    fn wants_arguments(&self) -> bool {
        self.arguments.is_some()
    }

    fn end_call(&self, call: &CallSpan, record: &CallRecord<'_>) {
        if !call.sampled {
            return;
        }
        self.queue.push(Finished::Call(CallEnd {
            call: *call,
            duration: record.duration,
            validation: record.validation,
            names: self.names.get(record),
            outcome: record.error.map(|e| e.code()),
            arguments: self
                .arguments
                .zip(record.arguments)
                .map(|(cap, args)| redact::redacted_text(args, cap)),
        }));
    }
}

/// A finished call's span as the call leaves it: the little it takes to
/// make its [`SpanData`], which the exporter thread does.
#[derive(Debug)]
pub(crate) struct CallEnd {
    call: CallSpan,
    duration: Duration,
    validation: Duration,
    names: ToolNames,
    /// The error's code; `None` on success.
    outcome: Option<ErrorCode>,
    arguments: Option<String>,
}

/// A tool's names as its spans carry them.
#[derive(Debug)]
enum ToolNames {
    /// Kept for the process's life: shared by every span of the tool
    /// without a reference count, which the exporter thread would
    /// otherwise contend on with every call.
    Kept(&'static KeptNames),
    /// Made for one span (past [`Interned::MAX`] tools).
    Owned(Box<(String, String, String)>),
}

#[derive(Debug)]
struct KeptNames {
    tool: &'static str,
    namespace: &'static str,
    backend: &'static str,
}

impl ToolNames {
    fn tool(&self) -> &str {
        match self {
            ToolNames::Kept(k) => k.tool,
            ToolNames::Owned(o) => &o.0,
        }
    }

    /// Tool, namespace and backend as attribute values.
    fn values(self) -> [StringValue; 3] {
        match self {
            ToolNames::Kept(k) => [k.tool.into(), k.namespace.into(), k.backend.into()],
            ToolNames::Owned(o) => {
                let (tool, namespace, backend) = *o;
                [tool.into(), namespace.into(), backend.into()]
            }
        }
    }
}

/// [`ToolNames`] by tool id and backend, so ending a call's span
/// allocates nothing for a tool seen before. Keys are catalog ids (an id
/// that did not resolve arrives as `unknown`); the first [`Interned::MAX`]
/// (id, backend) pairs are kept for the life of the process (ids are at
/// most a few hundred bytes: about 2 MB at most), later ones are made per
/// span.
#[derive(Debug, Default)]
pub(crate) struct Interned {
    names: RwLock<InternedMap>,
}

#[derive(Debug, Default)]
struct InternedMap {
    /// The backends a tool id was seen with (nearly always one).
    by_tool: HashMap<&'static str, Vec<&'static KeptNames>, foldhash::fast::RandomState>,
    kept: usize,
}

impl InternedMap {
    fn get(&self, tool: &str, backend: &str) -> Option<&'static KeptNames> {
        let kept = self.by_tool.get(tool)?;
        kept.iter().copied().find(|k| k.backend == backend)
    }
}

thread_local! {
    /// The names [`Interned::get`] gave this thread last (kept names live
    /// as long as the process, whatever `Interned` they came from).
    static LAST_NAMES: Cell<Option<&'static KeptNames>> = const { Cell::new(None) };
}

impl Interned {
    const MAX: usize = 4096;

    fn get(&self, record: &CallRecord<'_>) -> ToolNames {
        // The tool this thread ended a span of last, compared by content:
        // most threads call few tools, and this skips the shared lock.
        let same = |k: &KeptNames| k.tool == record.tool && k.backend == record.backend;
        if let Some(k) = LAST_NAMES.get().filter(|k| same(k)) {
            return ToolNames::Kept(k);
        }
        if let Some(k) = self.names.read().get(record.tool, record.backend) {
            LAST_NAMES.set(Some(k));
            return ToolNames::Kept(k);
        }
        let mut map = self.names.write();
        if let Some(k) = map.get(record.tool, record.backend) {
            return ToolNames::Kept(k);
        }
        if map.kept >= Self::MAX {
            return ToolNames::Owned(Box::new((
                record.tool.to_owned(),
                record.namespace.to_owned(),
                record.backend.to_owned(),
            )));
        }
        let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
        let k: &'static KeptNames = Box::leak(Box::new(KeptNames {
            tool: leak(record.tool),
            namespace: leak(record.namespace),
            backend: leak(record.backend),
        }));
        map.by_tool.entry(k.tool).or_default().push(k);
        map.kept += 1;
        LAST_NAMES.set(Some(k));
        ToolNames::Kept(k)
    }
}

impl CallEnd {
    /// The span, with the name and attributes the pipeline's `tracing`
    /// span has (OpenTelemetry GenAI names).
    pub(crate) fn into_span_data(self, scope: &InstrumentationScope) -> SpanData {
        let name = format!("execute_tool {}", self.names.tool());
        let [tool, namespace, backend] = self.names.values();
        let mut attributes = Vec::with_capacity(7);
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        attributes.push(KeyValue::new("gen_ai.tool.name", tool));
        attributes.push(KeyValue::new("toolexec.namespace", namespace));
        attributes.push(KeyValue::new("toolexec.backend", backend));
        if !self.validation.is_zero() {
            attributes.push(KeyValue::new(
                "toolexec.validation_us",
                self.validation.as_micros() as i64,
            ));
        }
        if let Some(args) = self.arguments {
            attributes.push(KeyValue::new("gen_ai.tool.call.arguments", args));
        }
        let status = match self.outcome {
            Some(code) if code.is_failure() => {
                attributes.push(KeyValue::new("error.type", code.as_str()));
                Status::error("")
            }
            // Not a failure (the call asks its client for input).
            Some(code) => {
                attributes.push(KeyValue::new("toolexec.outcome", code.as_str()));
                Status::Unset
            }
            None => Status::Unset,
        };
        let call = &self.call;
        let flags = if call.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(call.trace_id),
                SpanId::from(call.span_id),
                flags,
                false,
                TraceState::NONE,
            ),
            parent_span_id: SpanId::from(call.parent_span_id),
            parent_span_is_remote: call.parent_remote,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(name),
            start_time: call.start,
            end_time: call.start + self.duration,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope.clone(),
        }
    }
}

/// Makes an entered call's context current before a span is created under
/// it: placed in the subscriber just before the OpenTelemetry layer, whose
/// new spans take the current context as their parent.
pub(crate) struct CallContext;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CallContext {
    fn on_new_span(
        &self,
        _attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        materialize();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use serde_json::{Value, json};
    use toolexec::telemetry::TraceContext;
    use toolexec::{Exec, ToolError};
    use tracing_subscriber::filter::filter_fn;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{Layer, Registry};

    use super::*;
    use crate::export::BoundedProcessor;

    const ROOT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    fn hex_span(id: SpanId) -> String {
        format!("{id}")
    }

    /// Calls' own spans nest with `tracing` spans every way a call meets
    /// them: a span opened in a call is its child; a call in a call (no
    /// span between) is the outer call's child; a span made before the
    /// call and entered in it stays the current span; outgoing context
    /// names the innermost of them; an unsampled trace exports nothing.
    /// One test: the propagation is process-wide.
    #[test]
    fn call_spans_nest_with_tracing_spans() {
        let mut options = crate::OtlpOptions::new("http://127.0.0.1:9");
        // The exporter never drains the queue in this test: it reads it.
        options.interval = Duration::from_secs(3600);
        options.batch = 1 << 16;
        let (processor, _stats) = BoundedProcessor::start(&options).unwrap();
        let queue = processor.queue();
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(1.0)));
        assert!(toolexec::telemetry::install_propagation(Box::new(
            W3cPropagation::default()
        )));
        let tracer: &'static CallSpans = Box::leak(Box::new(CallSpans {
            queue: queue.clone(),
            root_sampler: Sampler::TraceIdRatioBased(1.0),
            remote_sampler: None,
            names: Interned::default(),
            arguments: Some(64),
        }));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .build();
        let ours = |m: &tracing::Metadata<'_>| m.target().starts_with("toolexec::");
        let subscriber = Registry::default()
            .with(CallContext.with_filter(filter_fn(ours)))
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("test"))
                    .with_filter(filter_fn(ours)),
            );
        // The context each place would send out, by place.
        type Seen = Vec<(&'static str, Option<TraceContext>)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let note = {
            let seen = seen.clone();
            move |what: &'static str| {
                let trace = toolexec::telemetry::current_trace();
                seen.lock().unwrap().push((what, trace));
            }
        };
        tracing::subscriber::with_default(subscriber, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let exec = Exec::builder().call_tracer(tracer).build();
            let catalog = exec.catalog();
            catalog
                .tool("t:leaf", "Leaf", |_: Value| async move {
                    Ok::<_, ToolError>(json!({}))
                })
                .unwrap();
            let n = note.clone();
            catalog
                .tool("t:spans", "Opens a span", move |_: Value| {
                    let n = n.clone();
                    async move {
                        // The span first: its parent must not depend on
                        // the context having been asked for before.
                        let child = tracing::info_span!(target: "toolexec::test", "child");
                        child.in_scope(|| n("in child"));
                        n("in call");
                        Ok::<_, ToolError>(json!({}))
                    }
                })
                .unwrap();
            let n = note.clone();
            catalog
                .tool(
                    "t:scoped",
                    "Runs work elsewhere in its scope",
                    move |_: Value| {
                        let scope = toolexec::telemetry::CallScope::capture();
                        let n = n.clone();
                        async move {
                            std::thread::spawn(move || {
                                let runtime = tokio::runtime::Builder::new_current_thread()
                                    .build()
                                    .unwrap();
                                runtime.block_on(scope.bind(async move { n("in scope") }));
                            })
                            .join()
                            .unwrap();
                            Ok::<_, ToolError>(json!({}))
                        }
                    },
                )
                .unwrap();
            let n = note.clone();
            catalog
                .tool(
                    "t:span_scope",
                    "Runs work elsewhere in a span's scope",
                    move |_: Value| {
                        let n = n.clone();
                        async move {
                            // Captured inside a span opened in the call:
                            // the work belongs to that span.
                            let span = tracing::info_span!(target: "toolexec::test", "inner");
                            let scope = span.in_scope(toolexec::telemetry::CallScope::capture);
                            std::thread::spawn(move || {
                                let runtime = tokio::runtime::Builder::new_current_thread()
                                    .build()
                                    .unwrap();
                                runtime.block_on(scope.bind(async move { n("in span scope") }));
                            })
                            .join()
                            .unwrap();
                            Ok::<_, ToolError>(json!({}))
                        }
                    },
                )
                .unwrap();
            // A backend whose call asks its client for input: not a failure.
            struct Asks;
            impl toolexec::Backend for Asks {
                fn kind(&self) -> &str {
                    "asks"
                }
                fn call<'a>(
                    &'a self,
                    call: toolexec::Call<'a>,
                ) -> toolexec::BoxFuture<'a, Result<toolexec::ToolOutput, toolexec::Error>>
                {
                    let tool = call.tool.id.to_string();
                    Box::pin(async move {
                        Err(toolexec::Error::InputRequired {
                            tool,
                            input: json!({"inputRequests": {}}),
                        })
                    })
                }
            }
            catalog
                .register(
                    toolexec::Tool::builder("t:asks")
                        .description("Asks its client")
                        .build()
                        .unwrap(),
                    Arc::new(Asks),
                )
                .unwrap();
            catalog
                .tool("t:hang", "Never answers", |_: Value| async move {
                    std::future::pending::<()>().await;
                    Ok::<_, ToolError>(json!({}))
                })
                .unwrap();
            let inner = exec.clone();
            catalog
                .tool("t:outer", "Calls t:leaf", move |_: Value| {
                    let inner = inner.clone();
                    async move {
                        inner
                            .run_tool("t:leaf", json!({}))
                            .await
                            .map_err(|e| ToolError::new(e.to_string()))?;
                        Ok::<_, ToolError>(json!({}))
                    }
                })
                .unwrap();
            // Taken (and closed) by the tool that enters it.
            let early = Arc::new(Mutex::new(Some(tracing::info_span!(
                target: "toolexec::test",
                "early"
            ))));
            let n = note.clone();
            catalog
                .tool(
                    "t:enters",
                    "Enters a span made before it",
                    move |_: Value| {
                        let (n, e) = (n.clone(), early.lock().unwrap().take());
                        async move {
                            e.unwrap().in_scope(|| n("in early"));
                            Ok::<_, ToolError>(json!({}))
                        }
                    },
                )
                .unwrap();

            let root = tracing::info_span!(target: "toolexec::test", "root");
            W3cPropagation::default().set_parent(
                &root,
                &TraceContext {
                    traceparent: format!("00-{ROOT_TRACE}-00f067aa0ba902b7-01"),
                    tracestate: None,
                },
            );
            runtime.block_on(async {
                let _in_root = root.enter();
                for tool in ["t:spans", "t:outer", "t:scoped", "t:span_scope"] {
                    exec.run_tool(tool, json!({})).await.unwrap();
                }
                // Dropped by its caller before it ends.
                let hang = exec.run_tool("t:hang", json!({}));
                let gone = tokio::time::timeout(Duration::from_millis(20), hang).await;
                assert!(gone.is_err());
                let args = json!({"api_token": "s3cret", "text": "x".repeat(100)});
                exec.run_tool("t:enters", args).await.unwrap();
                let asked = exec.run_tool("t:asks", json!({})).await.unwrap_err();
                assert_eq!(asked.code(), toolexec::ErrorCode::InputRequired);
            });
            // A remote parent that is not sampled: nothing of it is kept.
            let unsampled = tracing::info_span!(target: "toolexec::test", "unsampled");
            W3cPropagation::default().set_parent(
                &unsampled,
                &TraceContext {
                    traceparent: "00-11111111111111111111111111111111-00f067aa0ba902b7-00".into(),
                    tracestate: None,
                },
            );
            runtime.block_on(async {
                let _in = unsampled.enter();
                exec.run_tool("t:spans", json!({})).await.unwrap();
            });
            drop((root, unsampled));
        });
        let scope = InstrumentationScope::builder("test").build();
        let mut finished = Vec::new();
        queue.take(&mut finished);
        let spans: Vec<SpanData> = finished
            .into_iter()
            .map(|f| match f {
                Finished::Sdk(span) => *span,
                Finished::Call(call) => call.into_span_data(&scope),
            })
            .collect();
        let find = |name: &str| {
            let matching: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
            assert_eq!(matching.len(), 1, "{name}: {spans:#?}");
            matching[0]
        };
        let root = find("root");
        let spans_call = find("execute_tool t:spans");
        let child = find("child");
        let outer = find("execute_tool t:outer");
        let leaf = find("execute_tool t:leaf");
        let enters = find("execute_tool t:enters");
        let scoped = find("execute_tool t:scoped");
        let span_scope = find("execute_tool t:span_scope");
        let inner = find("inner");
        let hang = find("execute_tool t:hang");
        let early = find("early");
        let id = |s: &SpanData| s.span_context.span_id();
        for s in [root, spans_call, child, outer, leaf, enters] {
            assert_eq!(s.span_context.trace_id().to_string(), ROOT_TRACE, "{s:#?}");
            assert!(s.span_context.is_sampled());
        }
        assert_eq!(spans_call.parent_span_id, id(root));
        assert!(!spans_call.parent_span_is_remote);
        assert_eq!(child.parent_span_id, id(spans_call));
        assert_eq!(outer.parent_span_id, id(root));
        assert_eq!(leaf.parent_span_id, id(outer));
        assert_eq!(enters.parent_span_id, id(root));
        // Made outside any span: a root of its own trace.
        assert_eq!(early.parent_span_id, SpanId::INVALID);
        assert!(spans_call.start_time <= spans_call.end_time);
        let attribute = |s: &SpanData, key: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(
            attribute(leaf, "gen_ai.tool.name").as_deref(),
            Some("t:leaf")
        );
        assert_eq!(
            attribute(leaf, "toolexec.backend").as_deref(),
            Some("local")
        );
        assert_eq!(attribute(leaf, "toolexec.namespace").as_deref(), Some("t"));
        // Arguments (opt-in here): redacted, and capped at 64 bytes.
        let args = attribute(enters, "gen_ai.tool.call.arguments").unwrap();
        assert!(
            args.ends_with('…') && args.len() == 64 + '…'.len_utf8(),
            "{args}"
        );
        assert!(!args.contains("s3cret"), "{args}");
        assert!(args.contains(crate::redact::REDACTED), "{args}");

        // What went out of each place names the innermost span there.
        let seen = seen.lock().unwrap();
        let sent = |what: &str, index: usize| {
            let found: Vec<_> = seen.iter().filter(|(w, _)| *w == what).collect();
            found[index].1.clone().map(|t| t.traceparent)
        };
        let parent = |trace: &str, s: &SpanData, flags: &str| {
            Some(format!("00-{trace}-{}-{flags}", hex_span(id(s))))
        };
        assert_eq!(sent("in call", 0), parent(ROOT_TRACE, spans_call, "01"));
        assert_eq!(sent("in child", 0), parent(ROOT_TRACE, child, "01"));
        // Work bound to the call's scope on another thread is in the call;
        // bound to a span's scope inside the call, in that span.
        assert_eq!(sent("in scope", 0), parent(ROOT_TRACE, scoped, "01"));
        assert_eq!(inner.parent_span_id, id(span_scope));
        assert_eq!(sent("in span scope", 0), parent(ROOT_TRACE, inner, "01"));
        // A call dropped mid-flight still ends its span, as cancelled.
        assert_eq!(hang.parent_span_id, id(root));
        assert_eq!(attribute(hang, "error.type").as_deref(), Some("cancelled"));
        assert!(matches!(hang.status, Status::Error { .. }), "{hang:#?}");
        // A call that asks its client for input did not fail: no error
        // status, the outcome named.
        let asks = find("execute_tool t:asks");
        assert_eq!(asks.status, Status::Unset, "{asks:#?}");
        assert_eq!(attribute(asks, "error.type"), None);
        assert_eq!(
            attribute(asks, "toolexec.outcome").as_deref(),
            Some("input_required")
        );
        assert_eq!(
            sent("in early", 0),
            parent(&early.span_context.trace_id().to_string(), early, "01")
        );
        // The unsampled trace: context still passed on, flagged unsampled,
        // and none of its spans queued.
        let unsampled = sent("in call", 1).unwrap();
        assert!(
            unsampled.starts_with("00-11111111111111111111111111111111-"),
            "{unsampled}"
        );
        assert!(unsampled.ends_with("-00"), "{unsampled}");
        assert!(
            spans.iter().all(
                |s| s.span_context.trace_id().to_string() != "11111111111111111111111111111111"
            ),
            "{spans:#?}"
        );
        assert_eq!(spans.len(), 12, "{spans:#?}");
    }
}
