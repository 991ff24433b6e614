//! # toolexec-telemetry
//!
//! Traces, metrics and an audit trail for toolexec, built on `tracing`:
//!
//! - **Traces**: each call's `execute_tool` span (recorded by the call
//!   tracer, [`Telemetry::call_tracer`], at a fraction of a `tracing`
//!   span's cost), the pipeline's `chain` spans, the gateway's MCP request
//!   spans, code executions, sandbox runs, upstream requests and searches,
//!   exported over OTLP (HTTP/protobuf or gRPC) by a bounded exporter that
//!   never blocks a call and counts what it drops ([`export`]). W3C
//!   `traceparent` crosses process boundaries through
//!   [`toolexec::telemetry`]'s hooks, installed by [`propagate`].
//! - **Metrics** in Prometheus text ([`Metrics`]): calls by tool,
//!   namespace, outcome and backend with latency histograms (the tool label
//!   capped), plus searches, code executions and sandbox runs read off
//!   their spans.
//! - **Audit log** ([`AuditLog`]): one JSON line per call, appended by a
//!   writer thread, rotated by size; a full disk is counted, never fatal.
//!
//! Place in the workspace: wired in by the `toolexec` command (and any
//! embedding) around an [`Exec`](toolexec::Exec); the core only sees its
//! small [`CallObserver`],
//! [`CallTracer`](toolexec::telemetry::CallTracer) and propagation hooks.
//!
//! ```
//! use std::sync::Arc;
//! use toolexec_telemetry::{Metrics, MetricsOptions};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let metrics = Arc::new(Metrics::new(MetricsOptions::default()));
//! let exec = toolexec::Exec::builder().observer(metrics.clone()).build();
//! exec.catalog()
//!     .tool("demo:echo", "Echoes", |v: serde_json::Value| async move {
//!         Ok::<_, toolexec::ToolError>(v)
//!     })
//!     .unwrap();
//! exec.run_tool("demo:echo", serde_json::json!({})).await.unwrap();
//! assert!(metrics.render().contains(r#"toolexec_tool_calls_total{tool="demo:echo""#));
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod audit;
pub mod export;
mod listener;
pub mod metrics;
pub mod propagate;
pub mod redact;
mod sampling;
mod span_metrics;
mod subscriber;

pub use audit::{AuditLog, AuditOptions, AuditStats};
pub use export::{ExportStats, OtlpOptions, OtlpProtocol};
pub use listener::{CONTENT_TYPE, metrics_router, serve_metrics};
pub use metrics::{Metrics, MetricsOptions};
pub use subscriber::{LogFormat, Telemetry, TelemetryOptions};

use std::sync::Arc;

use toolexec::telemetry::{CallObserver, CallRecord};

/// Errors setting telemetry up. Calls never see these: once running,
/// telemetry failures are counted, not raised.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting is wrong.
    #[error("invalid telemetry setting {field}: {message}")]
    Invalid {
        /// The setting, as the config names it.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The audit log cannot be opened.
    #[error("audit log {path}: {source}")]
    Audit {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The OTLP exporter cannot be built.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// A global subscriber or propagation is already installed.
    #[error("telemetry is already installed in this process")]
    AlreadyInstalled,
}

impl From<TelemetryError> for toolexec::Error {
    fn from(e: TelemetryError) -> Self {
        match &e {
            TelemetryError::Invalid { field, .. } => {
                toolexec::Error::invalid_request(*field, e.to_string())
            }
            _ => toolexec::Error::backend_unavailable("telemetry", e.to_string()),
        }
    }
}

/// Several observers as one, told in order.
#[derive(Debug, Default, Clone)]
pub struct Observers(Vec<Arc<dyn CallObserver>>);

impl Observers {
    /// Adds an observer.
    pub fn push(&mut self, observer: Arc<dyn CallObserver>) {
        self.0.push(observer);
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One observer telling all of these: the only one itself, without a
    /// second indirection per call; `None` when there is none.
    pub fn combined(&self) -> Option<Arc<dyn CallObserver>> {
        match self.0.as_slice() {
            [] => None,
            [only] => Some(only.clone()),
            _ => Some(Arc::new(self.clone())),
        }
    }
}

impl CallObserver for Observers {
    fn wants_arguments(&self) -> bool {
        self.0.iter().any(|o| o.wants_arguments())
    }

    fn call_finished(&self, call: &CallRecord<'_>) {
        for o in &self.0 {
            o.call_finished(call);
        }
    }
}
