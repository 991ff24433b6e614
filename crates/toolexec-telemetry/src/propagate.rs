//! W3C trace context between `tracing` spans and the wire: the
//! [`Propagation`] that [`Telemetry`](crate::Telemetry) installs, so the
//! gateway can continue an incoming trace and backends can pass it on.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use toolexec::telemetry::{Propagation, TraceContext};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// W3C trace context over `tracing-opentelemetry` spans.
#[derive(Debug, Default)]
pub struct W3cPropagation {
    propagator: TraceContextPropagator,
}

impl Propagation for W3cPropagation {
    fn current(&self) -> Option<TraceContext> {
        let cx = tracing::Span::current().context();
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
