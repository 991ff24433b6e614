//! The run pipeline: parse id → resolve → admit (policy, quotas) → validate input → execute with a
//! deadline, cancellation and panic isolation → normalize → validate output.

use std::any::Any;
use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::field::Empty;

use crate::backend::Call;
use crate::catalog::{Catalog, RegisteredTool};
use crate::context::{EventTx, ToolContext};
use crate::error::{Error, ValidationFailure};
use crate::gate::Gate;
use crate::id::ToolIdRef;
use crate::limits::{Limits, Side, check_json};
use crate::output::ToolOutput;
use crate::quota::Admission;
use crate::schema::{CompiledSchema, Violation, json_kind};
use crate::telemetry::{self, CallObserver, CallRecord, CallSpan, CallTracer, current_caller};
use crate::tool::Tool;

/// Per-call options.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Deadline; the executor's default timeout when `None`.
    pub timeout: Option<Duration>,
    /// Cancels the call when triggered.
    pub cancel: Option<CancellationToken>,
    /// The run's idempotency key, for backends that make runs durable (a
    /// fleet): a run made again under the same key returns the first run's
    /// outcome instead of running again. Backends read it from
    /// [`ToolContext::idempotency_key`](crate::ToolContext::idempotency_key);
    /// a chain's step `i` gets `<key>.<i>`.
    pub idempotency_key: Option<String>,
    /// Set by a caller that answers a tool's requests for client input
    /// itself ([`ClientInput`](crate::ClientInput)); `None` for a caller
    /// that is asked during the call, or not at all. A chain's steps do not
    /// get it.
    pub client_input: Option<crate::ClientInput>,
}

impl RunOptions {
    /// Options with a deadline.
    pub fn timeout(timeout: Duration) -> Self {
        RunOptions {
            timeout: Some(timeout),
            ..RunOptions::default()
        }
    }
}

/// The tool an observer and a span are told of for an id that did not
/// resolve (the id itself is the caller's, of any size).
pub(crate) const UNKNOWN_TOOL: &str = "unknown";

/// One observed call: what its span and observer are told.
struct Observed<'a> {
    id: &'a str,
    namespace: &'a str,
    backend: &'a str,
    start: Instant,
    span: CallTrace,
    /// Set once the call was reported ([`Pipeline::report`]).
    reported: Cell<bool>,
}

impl Drop for Observed<'_> {
    /// A call whose future was dropped before it ended (cancelled by its
    /// caller, or unwound by a panic past the tool's own catch) still ends
    /// its own span, as `cancelled`, as a dropped `tracing` span closes:
    /// spans already exported under it keep their parent. Observers are
    /// not told, as before.
    fn drop(&mut self) {
        if let CallTrace::Own(span, tracer) = &self.span
            && !self.reported.get()
        {
            let cancelled = Error::Cancelled {
                tool: self.id.to_owned(),
            };
            tracer.end_call(
                span,
                &CallRecord {
                    tool: self.id,
                    namespace: self.namespace,
                    backend: self.backend,
                    arguments: None,
                    error: Some(&cancelled),
                    validation: Duration::ZERO,
                    duration: self.start.elapsed(),
                    caller: None,
                    trace_id: Some(span.trace_id),
                },
            );
        }
    }
}

/// A call's span: recorded by the installed call tracer, or a `tracing`
/// span (disabled when no subscriber wants it).
enum CallTrace {
    Own(CallSpan, &'static dyn CallTracer),
    Tracing(tracing::Span),
}

impl CallTrace {
    fn record(&self, field: &str, value: impl tracing::Value) {
        if let CallTrace::Tracing(span) = self {
            span.record(field, value);
        }
    }
}

/// The `execute_tool` span of one call. Fields follow OpenTelemetry's GenAI
/// conventions for tool execution, all known at creation but the
/// validation time and the outcome (each later `record` costs a layer
/// visit).
fn call_span(id: &str, namespace: &str, backend: &str) -> tracing::Span {
    tracing::info_span!(
        target: telemetry::CALL_SPAN_TARGET,
        "execute_tool",
        otel.name = %format_args!("execute_tool {id}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = id,
        toolexec.namespace = namespace,
        toolexec.backend = backend,
        toolexec.validation_us = Empty,
        gen_ai.tool.call.arguments = Empty,
        error.type = Empty,
        otel.status_code = Empty,
        toolexec.outcome = Empty,
    )
}

/// Everything the pipeline needs besides the call itself.
#[derive(Debug)]
pub(crate) struct Pipeline {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) limits: Limits,
    pub(crate) validate_input: bool,
    pub(crate) validate_output: bool,
    pub(crate) observer: Option<Arc<dyn CallObserver>>,
    /// Records call spans in place of `tracing` spans.
    pub(crate) call_tracer: Option<&'static dyn CallTracer>,
    /// Policy and quotas, checked before a call's input is looked at.
    pub(crate) gate: Gate,
}

impl Pipeline {
    pub(crate) async fn run(
        &self,
        id: &str,
        args: Value,
        opts: &RunOptions,
        events: Option<EventTx>,
    ) -> Result<ToolOutput, Error> {
        let tracer = self.call_tracer;
        if self.observer.is_none()
            && tracer.is_none()
            && !tracing::span_enabled!(target: telemetry::CALL_SPAN_TARGET, tracing::Level::INFO)
        {
            let entry = self.catalog.resolve(&ToolIdRef::parse(id)?)?;
            let _admission = self.gate.admit(entry.tool())?;
            let args = self.check_input(&entry, args)?;
            return self.run_checked(&entry, args, opts, events).await;
        }
        let start = Instant::now();
        let own = tracer.map(|t| (t.start_call(start), t));
        let trace = |id, namespace, backend| match &own {
            Some((span, tracer)) => CallTrace::Own(*span, *tracer),
            None => CallTrace::Tracing(call_span(id, namespace, backend)),
        };
        let entry = match ToolIdRef::parse(id).and_then(|r| self.catalog.resolve(&r)) {
            Ok(entry) => entry,
            Err(e) => {
                // An unresolved id is whatever the caller sent: it never
                // becomes a label or a span name of its own.
                let call = Observed {
                    id: UNKNOWN_TOOL,
                    namespace: "",
                    backend: "none",
                    start,
                    span: trace(UNKNOWN_TOOL, "", "none"),
                    reported: Cell::new(false),
                };
                self.finish(&call, None, Duration::ZERO, Some(&e));
                return Err(e);
            }
        };
        let (namespace, backend) = (entry.tool().id.namespace(), entry.backend().kind());
        let call = Observed {
            id,
            namespace,
            backend,
            start,
            span: trace(id, namespace, backend),
            reported: Cell::new(false),
        };
        // Admission and input checks open no span: the call's is entered
        // only around the execution (the `tracing` one around both, for
        // what they log).
        let checked = match &call.span {
            CallTrace::Tracing(span) if !span.is_disabled() => {
                span.in_scope(|| self.check_observed(&call, &entry, args))
            }
            _ => self.check_observed(&call, &entry, args),
        };
        let (_admission, args, validation, kept) = checked?;
        // The execution inside the call's span: the tracer's entered around
        // each poll, a wanted `tracing` span instrumenting it, or none.
        let result = match &call.span {
            CallTrace::Own(span, tracer) => {
                let run = self.run_checked(&entry, args, opts, events);
                telemetry::in_call(*span, *tracer, run).await
            }
            // A span no subscriber wants is not entered on every poll.
            CallTrace::Tracing(span) if span.is_disabled() => {
                self.run_checked(&entry, args, opts, events).await
            }
            CallTrace::Tracing(span) => {
                self.run_checked(&entry, args, opts, events)
                    .instrument(span.clone())
                    .await
            }
        };
        self.finish(&call, kept.as_ref(), validation, result.as_ref().err());
        result
    }

    /// Admission and input checks of an observed call: the admission, the
    /// checked arguments, the time they took, and a copy of the arguments
    /// when an observer or the call tracer wants one. A failure is
    /// reported ([`Self::report`]; the caller has entered the `tracing`
    /// span) before it is returned.
    fn check_observed(
        &self,
        call: &Observed<'_>,
        entry: &RegisteredTool,
        args: Value,
    ) -> Result<(Option<Admission>, Value, Duration, Option<Value>), Error> {
        let admission = match self.gate.admit(entry.tool()) {
            Ok(admission) => admission,
            Err(e) => {
                self.report(call, None, Duration::ZERO, Some(&e));
                return Err(e);
            }
        };
        let checked = self.check_input(entry, args);
        let validation = call.start.elapsed();
        call.span
            .record("toolexec.validation_us", validation.as_micros() as u64);
        let args = match checked {
            Ok(args) => args,
            Err(e) => {
                self.report(call, None, validation, Some(&e));
                return Err(e);
            }
        };
        // Arguments for the span only when it is exported.
        let wanted = self.observer.as_ref().is_some_and(|o| o.wants_arguments())
            || matches!(call.span, CallTrace::Own(s, t) if s.sampled && t.wants_arguments());
        let kept = wanted.then(|| args.clone());
        Ok((admission, args, validation, kept))
    }

    /// [`Self::report`] inside the call's `tracing` span, when one is
    /// wanted: observers may read it (`current_trace`, arguments recorded
    /// on it).
    fn finish(
        &self,
        call: &Observed<'_>,
        arguments: Option<&Value>,
        validation: Duration,
        error: Option<&Error>,
    ) {
        match &call.span {
            CallTrace::Tracing(span) if !span.is_disabled() => {
                span.in_scope(|| self.report(call, arguments, validation, error));
            }
            _ => self.report(call, arguments, validation, error),
        }
    }

    /// Records the outcome on the span, tells the observer and ends the
    /// call's own span.
    fn report(
        &self,
        call: &Observed<'_>,
        arguments: Option<&Value>,
        validation: Duration,
        error: Option<&Error>,
    ) {
        call.reported.set(true);
        match error.map(Error::code) {
            Some(code) if code.is_failure() => {
                call.span.record("error.type", code.as_str());
                call.span.record("otel.status_code", "ERROR");
            }
            Some(code) => {
                call.span.record("toolexec.outcome", code.as_str());
            }
            None => {}
        }
        let own = match &call.span {
            CallTrace::Own(span, tracer) => Some((span, *tracer)),
            CallTrace::Tracing(_) => None,
        };
        if self.observer.is_none() && own.is_none() {
            return;
        }
        // The call tracer does not read the caller.
        let caller = self.observer.as_ref().and_then(|_| current_caller());
        let record = CallRecord {
            tool: call.id,
            namespace: call.namespace,
            backend: call.backend,
            arguments,
            error,
            validation,
            duration: call.start.elapsed(),
            caller: caller.as_deref(),
            trace_id: own.map(|(span, _)| span.trace_id),
        };
        if let Some(observer) = &self.observer {
            observer.call_finished(&record);
        }
        if let Some((span, tracer)) = own {
            tracer.end_call(span, &record);
        }
    }

    /// Runs validated `args`: execute, normalize, check the output.
    async fn run_checked(
        &self,
        entry: &RegisteredTool,
        args: Value,
        opts: &RunOptions,
        events: Option<EventTx>,
    ) -> Result<ToolOutput, Error> {
        let tool = entry.tool();
        let timeout = opts.timeout.unwrap_or(self.limits.default_timeout);
        let ctx = ToolContext::new(
            opts.cancel.clone(),
            events,
            opts.idempotency_key.clone(),
            opts.client_input.clone(),
        );
        let mut out = execute(entry, args, ctx, timeout, opts.cancel.as_ref()).await?;
        out.normalize();
        check_json(
            &out.value,
            self.limits.max_output_bytes,
            self.limits.max_output_depth,
            Side::Output,
        )?;
        if self.validate_output
            && let Some(schema) = &entry.output
        {
            validate(schema, &out.value, tool, self.limits.max_violations)
                .map_err(Error::ValidationOutput)?;
        }
        Ok(out)
    }

    fn check_input(&self, entry: &RegisteredTool, args: Value) -> Result<Value, Error> {
        let tool = entry.tool();
        let args = match args {
            // MCP lets a client omit arguments; treat that as `{}`.
            Value::Null => Value::Object(serde_json::Map::new()),
            Value::Object(_) => args,
            other => {
                return Err(Error::ValidationInput(Box::new(ValidationFailure {
                    tool: tool.id.to_string(),
                    violations: vec![Violation {
                        instance_path: String::new(),
                        schema_path: String::new(),
                        keyword: "type".into(),
                        message: format!(
                            "arguments must be a JSON object, not {}",
                            json_kind(&other)
                        ),
                    }],
                    truncated: false,
                })));
            }
        };
        check_json(
            &args,
            self.limits.max_input_bytes,
            self.limits.max_input_depth,
            Side::Input,
        )?;
        if self.validate_input {
            validate(&entry.input, &args, tool, self.limits.max_violations)
                .map_err(Error::ValidationInput)?;
        }
        Ok(args)
    }
}

fn validate(
    schema: &CompiledSchema,
    value: &Value,
    tool: &Tool,
    cap: usize,
) -> Result<(), Box<ValidationFailure>> {
    // The fast yes/no check first; collect details only on failure.
    if schema.is_valid(value) {
        return Ok(());
    }
    let (violations, truncated) = schema.violations(value, cap.max(1));
    Err(Box::new(ValidationFailure {
        tool: tool.id.to_string(),
        violations,
        truncated,
    }))
}

enum Outcome<T> {
    Done(T),
    Panicked(Box<dyn Any + Send>),
    TimedOut,
    Cancelled,
}

/// Runs the backend call with panic isolation, a deadline and cancellation.
///
/// The first poll happens before any timer exists: a tool that completes
/// synchronously (most local tools) never touches the timer wheel or the
/// clock. The deadline timer is armed on the first `Pending`.
async fn execute(
    entry: &RegisteredTool,
    args: Value,
    ctx: ToolContext,
    timeout: Duration,
    cancel: Option<&CancellationToken>,
) -> Result<ToolOutput, Error> {
    let tool = entry.tool();
    if cancel.is_some_and(CancellationToken::is_cancelled) {
        return Err(Error::Cancelled {
            tool: tool.id.to_string(),
        });
    }
    let call = Call { tool, args, ctx };
    // Building the future runs handler code too (argument decoding, the
    // synchronous part of the closure): isolate panics there as well.
    let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| entry.backend().call(call))) {
        Ok(f) => f,
        Err(payload) => return Err(panicked(tool, payload)),
    };
    let mut fut = pin!(AssertUnwindSafe(fut).catch_unwind());
    let mut deadline: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut cancelled: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
    let mut no_timer = false;
    let outcome = poll_fn(|cx| {
        match fut.as_mut().poll(cx) {
            Poll::Ready(Ok(r)) => return Poll::Ready(Outcome::Done(r)),
            Poll::Ready(Err(p)) => return Poll::Ready(Outcome::Panicked(p)),
            Poll::Pending => {}
        }
        if deadline.is_none() && !no_timer {
            if tokio::runtime::Handle::try_current().is_ok() {
                deadline = Some(Box::pin(tokio::time::sleep(timeout)));
            } else {
                no_timer = true;
            }
        }
        if no_timer {
            return Poll::Ready(Outcome::Done(Err(Error::backend_unavailable(
                entry.backend().kind(),
                "asynchronous tools need a Tokio runtime (with the time driver) to enforce deadlines",
            ))));
        }
        if let Some(d) = deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Outcome::TimedOut);
        }
        if let Some(token) = cancel {
            let c = cancelled.get_or_insert_with(|| Box::pin(token.cancelled()));
            if c.as_mut().poll(cx).is_ready() {
                // The cancellation may have landed (from another thread)
                // after the tool's poll above: poll it once more, so a tool
                // that watches `ctx.cancelled()` runs its own handling
                // before it is dropped. The outcome is the cancellation
                // whatever that poll returns.
                let _ = fut.as_mut().poll(cx);
                return Poll::Ready(Outcome::Cancelled);
            }
        }
        Poll::Pending
    })
    .await;
    match outcome {
        Outcome::Done(r) => r,
        Outcome::Panicked(p) => Err(panicked(tool, p)),
        Outcome::TimedOut => Err(Error::Timeout {
            tool: tool.id.to_string(),
            after: timeout,
        }),
        Outcome::Cancelled => Err(Error::Cancelled {
            tool: tool.id.to_string(),
        }),
    }
}

fn panicked(tool: &Tool, payload: Box<dyn Any + Send>) -> Error {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    tracing::error!(tool = %tool.id, panic = %detail, "tool handler panicked");
    Error::ExecutionFailed {
        tool: tool.id.to_string(),
        message: format!("handler panicked: {detail}"),
        data: None,
        panicked: true,
    }
}
