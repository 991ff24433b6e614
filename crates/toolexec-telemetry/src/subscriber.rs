//! [`Telemetry::install`]: the process's `tracing` subscriber (logs, the
//! OpenTelemetry layer, span metrics), propagation, metrics and the audit
//! log, from one set of options.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{ParentBasedSampler, Sampler, SdkTracerProvider};
use toolexec::telemetry::{CallObserver, CallRecord, CallTracer};
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::audit::{AuditLog, AuditOptions, AuditStats};
use crate::export::{BoundedProcessor, ExportStats, OtlpOptions, SCOPE};
use crate::metrics::{Metrics, MetricsOptions};
use crate::propagate::{CallContext, CallSpans, W3cPropagation};
use crate::sampling::KeyedRatio;
use crate::span_metrics::{SpanMetrics, measured};
use crate::{Observers, TelemetryError, redact};

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, with the current span's fields (the MCP
    /// request span carries `trace_id`).
    Json,
}

/// What to turn on. The default is logs only, as without this crate.
#[derive(Debug, Clone, Default)]
pub struct TelemetryOptions {
    /// Log line format.
    pub log_format: LogFormat,
    /// An `EnvFilter` directive for logs (`warn`, `toolexec=debug`, …);
    /// `warn` when empty.
    pub log_filter: String,
    /// Export spans over OTLP.
    pub otlp: Option<OtlpOptions>,
    /// Keep Prometheus metrics.
    pub metrics: Option<MetricsOptions>,
    /// Write an audit log.
    pub audit: Option<AuditOptions>,
    /// Record each call's arguments on its span (secrets redacted), capped
    /// at this many bytes. Off by default.
    pub span_arguments: Option<usize>,
}

/// Installed telemetry: what the rest of the process wires in.
#[derive(Debug)]
pub struct Telemetry {
    metrics: Option<Arc<Metrics>>,
    observers: Observers,
    call_tracer: Option<&'static CallSpans>,
    provider: Option<SdkTracerProvider>,
    export: Option<Arc<ExportStats>>,
    audit: Option<Arc<AuditStats>>,
    audit_log: Option<Arc<AuditLog>>,
}

/// Every span toolexec opens has a target under `toolexec::`; a call's
/// is made by the call tracer instead of its `tracing` span.
fn toolexec_span(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span()
        && meta.target().starts_with("toolexec::")
        && meta.target() != toolexec::telemetry::CALL_SPAN_TARGET
}

impl Telemetry {
    /// Installs the global subscriber and propagation and starts the
    /// exporter and audit writer. Call once per process; no Tokio runtime
    /// is needed (the exporter thread runs its own, for either protocol).
    /// A second call is [`TelemetryError::AlreadyInstalled`].
    pub fn install(options: TelemetryOptions) -> Result<Telemetry, TelemetryError> {
        let filter = if options.log_filter.is_empty() {
            "warn"
        } else {
            &options.log_filter
        };
        let env = EnvFilter::try_new(filter)
            .map_err(|e| TelemetryError::Invalid {
                field: "log filter",
                message: e.to_string(),
            })?
            // rmcp's OAuth client logs authorization codes at debug level:
            // never below info, whatever the filter asks.
            .add_directive("rmcp::transport::auth=info".parse().map_err(
                |e: tracing_subscriber::filter::ParseError| TelemetryError::Invalid {
                    field: "log filter",
                    message: e.to_string(),
                },
            )?);
        let logs = match options.log_format {
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(env)
                .boxed(),
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(std::io::stderr)
                .with_filter(env)
                .boxed(),
        };
        let metrics = options.metrics.map(|o| Arc::new(Metrics::new(o)));
        let span_metrics = metrics.as_ref().map(|m| {
            SpanMetrics { metrics: m.clone() }
                .with_filter(filter_fn(measured))
                .boxed()
        });
        let (provider, export, calls) = match &options.otlp {
            Some(otlp) => {
                let (processor, stats) = BoundedProcessor::start(otlp)?;
                let root = Sampler::TraceIdRatioBased(otlp.sampling_ratio);
                let mut sampler = ParentBasedSampler::new(root.clone());
                let remote =
                    (!otlp.trust_remote_sampling).then(|| KeyedRatio::new(otlp.sampling_ratio));
                if let Some(remote) = &remote {
                    sampler = sampler
                        .with_remote_parent_sampled(remote.clone())
                        .with_remote_parent_not_sampled(remote.clone());
                }
                let calls = CallSpans {
                    queue: processor.queue(),
                    root_sampler: root,
                    remote_sampler: remote,
                    names: Default::default(),
                    arguments: options.span_arguments,
                };
                let provider = SdkTracerProvider::builder()
                    .with_span_processor(processor)
                    .with_sampler(sampler)
                    .with_resource(otlp.resource())
                    .build();
                (Some(provider), Some(stats), Some(calls))
            }
            None => (None, None, None),
        };
        let otel = provider.as_ref().map(|p| {
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer(SCOPE))
                .with_location(false)
                .with_threads(false)
                .with_level(false)
                .with_tracked_inactivity(false)
                .with_target(false)
                .with_filter(filter_fn(toolexec_span))
                .boxed()
        });
        // Before the OpenTelemetry layer: its new spans take the current
        // context as their parent, which an entered call's must be then.
        let call_context = provider
            .as_ref()
            .map(|_| CallContext.with_filter(filter_fn(toolexec_span)).boxed());
        Registry::default()
            .with(logs)
            .with(span_metrics)
            .with(call_context)
            .with(otel)
            .try_init()
            .map_err(|_| TelemetryError::AlreadyInstalled)?;
        // Calls' own spans record their arguments themselves; without
        // export the observer records them on the `tracing` span. The
        // tracer lives as long as the process, as the subscriber does.
        let (call_tracer, span_arguments) = match calls {
            Some(calls) => {
                toolexec::telemetry::install_propagation(Box::new(W3cPropagation::default()));
                let tracer: &'static CallSpans = Box::leak(Box::new(calls));
                (Some(tracer), None)
            }
            None => (None, options.span_arguments),
        };
        let mut observers = Observers::default();
        if let Some(m) = &metrics {
            observers.push(m.clone());
        }
        if let Some(cap) = span_arguments {
            observers.push(Arc::new(SpanArguments { max_bytes: cap }));
        }
        let audit_log = match options.audit {
            Some(o) => {
                let log = Arc::new(AuditLog::open(o)?);
                observers.push(log.clone());
                Some(log)
            }
            None => None,
        };
        let audit = audit_log.as_ref().map(|l| l.stats().clone());
        let telemetry = Telemetry {
            metrics,
            observers,
            call_tracer,
            provider,
            export,
            audit,
            audit_log,
        };
        telemetry.register_own_counters();
        Ok(telemetry)
    }

    fn register_own_counters(&self) {
        let Some(m) = &self.metrics else { return };
        if let Some(s) = &self.export {
            let (a, b) = (s.clone(), s.clone());
            m.counter_fn(
                "toolexec_telemetry_spans_exported",
                "Spans the OTLP collector accepted",
                move || a.exported.load(Ordering::Relaxed),
            );
            m.counter_fn(
                "toolexec_telemetry_spans_dropped",
                "Spans dropped: the export queue was full, or the collector failed or timed out",
                move || b.dropped.load(Ordering::Relaxed),
            );
        }
        if let Some(s) = &self.audit {
            let (a, b) = (s.clone(), s.clone());
            m.counter_fn(
                "toolexec_audit_records_dropped",
                "Audit records lost: the queue was full or the write failed",
                move || a.dropped.load(Ordering::Relaxed),
            );
            m.counter_fn(
                "toolexec_audit_write_errors",
                "Failed audit log writes (a full disk among them)",
                move || b.write_errors.load(Ordering::Relaxed),
            );
        }
    }

    /// The metrics, when kept.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// The observer to give [`ExecBuilder::observer`]: metrics, argument
    /// recording and the audit log as configured; `None` when nothing
    /// observes calls.
    ///
    /// [`ExecBuilder::observer`]: toolexec::ExecBuilder::observer
    pub fn observer(&self) -> Option<Arc<dyn CallObserver>> {
        self.observers.combined()
    }

    /// `builder` with this telemetry's observer and call tracer: an
    /// executor built from it has its calls counted, audited and traced as
    /// configured. What `toolexec` does; an executor built without them is
    /// not observed.
    pub fn instrument(&self, mut builder: toolexec::ExecBuilder) -> toolexec::ExecBuilder {
        if let Some(observer) = self.observer() {
            builder = builder.observer(observer);
        }
        if let Some(tracer) = self.call_tracer() {
            builder = builder.call_tracer(tracer);
        }
        builder
    }

    /// The tracer to give [`ExecBuilder::call_tracer`] when spans are
    /// exported: each call's span, without a `tracing` span. An executor
    /// built without it records no call spans.
    ///
    /// [`ExecBuilder::call_tracer`]: toolexec::ExecBuilder::call_tracer
    pub fn call_tracer(&self) -> Option<&'static dyn CallTracer> {
        self.call_tracer.map(|t| t as &'static dyn CallTracer)
    }

    /// The exporter's counters, when exporting.
    pub fn export_stats(&self) -> Option<&Arc<ExportStats>> {
        self.export.as_ref()
    }

    /// The audit log's counters, when writing one.
    pub fn audit_stats(&self) -> Option<&Arc<AuditStats>> {
        self.audit.as_ref()
    }

    /// Writes the audit records and sends the spans still queued, within
    /// `timeout` in all, and stops the exporter.
    pub fn shutdown(self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        if let Some(audit) = &self.audit_log {
            audit.flush(timeout);
        }
        if let Some(p) = self.provider {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // Shutting down sends what is queued first.
            let _ = p.shutdown_with_timeout(left.max(Duration::from_millis(100)));
        }
    }
}

/// Records each call's arguments on its `execute_tool` span as
/// `gen_ai.tool.call.arguments` (opt-in, redacted, capped).
#[derive(Debug)]
struct SpanArguments {
    max_bytes: usize,
}

impl CallObserver for SpanArguments {
    fn wants_arguments(&self) -> bool {
        true
    }

    fn call_finished(&self, call: &CallRecord<'_>) {
        if let Some(args) = call.arguments {
            let span = tracing::Span::current();
            if !span.is_disabled() {
                span.record(
                    "gen_ai.tool.call.arguments",
                    redact::redacted_text(args, self.max_bytes),
                );
            }
        }
    }
}
