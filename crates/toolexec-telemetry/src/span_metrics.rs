//! Metrics read off spans, for the work that has no observer of its own:
//! `search_tools` (by mode), `execute_code` (by outcome), `sandbox_run` (by
//! runtime, profile and what ended it) and `upstream_request`. The layer
//! sees only those spans (its filter says so), so calls pay nothing for it.

use std::sync::Arc;
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::metrics::{Metrics, ModeLabels, OutcomeLabels, SandboxLabels, seconds};

/// Span names this layer turns into metrics.
pub(crate) const MEASURED: [&str; 4] = [
    "search_tools",
    "execute_code",
    "sandbox_run",
    "upstream_request",
];

/// True for the spans [`SpanMetrics`] measures.
pub(crate) fn measured(meta: &Metadata<'_>) -> bool {
    meta.is_span() && MEASURED.contains(&meta.name())
}

pub(crate) struct SpanMetrics {
    pub(crate) metrics: Arc<Metrics>,
}

/// What a measured span recorded, kept in its extensions.
#[derive(Default)]
struct Fields {
    start: Option<Instant>,
    mode: Option<String>,
    outcome: Option<String>,
    runtime: Option<String>,
    profile: Option<String>,
    ended_by: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            "toolexec.search.mode" => &mut self.mode,
            "toolexec.outcome" | "error.type" => &mut self.outcome,
            "toolexec.sandbox.runtime" => &mut self.runtime,
            "toolexec.sandbox.profile" => &mut self.profile,
            "toolexec.sandbox.ended_by" => &mut self.ended_by,
            _ => return,
        };
        *slot = Some(value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

impl<S> Layer<S> for SpanMetrics
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields {
            start: Some(Instant::now()),
            ..Fields::default()
        };
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(f) = span.extensions_mut().remove::<Fields>() else {
            return;
        };
        let elapsed = seconds(f.start.map(|s| s.elapsed()).unwrap_or_default());
        let outcome = || OutcomeLabels {
            outcome: f.outcome.clone().unwrap_or_else(|| "ok".into()),
        };
        let m = &self.metrics;
        match span.name() {
            "search_tools" => m
                .searches
                .get_or_create(&ModeLabels {
                    mode: f.mode.clone().unwrap_or_else(|| "lexical".into()),
                })
                .observe(elapsed),
            "execute_code" => m.code_runs.get_or_create(&outcome()).observe(elapsed),
            "upstream_request" => m
                .upstream_requests
                .get_or_create(&outcome())
                .observe(elapsed),
            "sandbox_run" => {
                let labels = SandboxLabels {
                    runtime: f.runtime.clone().unwrap_or_default(),
                    profile: f.profile.clone().unwrap_or_default(),
                    // Recorded when the run returns: a span closed without
                    // it is a run whose future was dropped.
                    ended_by: f.ended_by.clone().unwrap_or_else(|| "cancelled".into()),
                };
                m.sandbox_runs.get_or_create(&labels).inc();
                m.sandbox_latency.get_or_create(&labels).observe(elapsed);
            }
            _ => {}
        }
    }
}
