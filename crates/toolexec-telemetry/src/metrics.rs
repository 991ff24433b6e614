//! Prometheus metrics: every call through the pipeline (a
//! [`CallObserver`]), the spans that have no observer of their own
//! (searches, code executions, sandbox runs; see `span_metrics`), and gauges
//! read at scrape time ([`Metrics::gauge_fn`]).
//!
//! Label cardinality is bounded: the first [`MetricsOptions::max_tools`]
//! tools and [`MetricsOptions::max_namespaces`] namespaces seen get their
//! own label value; later ones are folded into `other`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use toolexec::telemetry::{CallObserver, CallRecord};

/// The label value tools and namespaces past the caps are folded into.
pub const OTHER: &str = "other";

/// Latency buckets (seconds): 50 µs to about 52 s, ×4 per bucket.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(50e-6, 4.0, 11)
}

/// Bounds on label values.
#[derive(Debug, Clone, Copy)]
pub struct MetricsOptions {
    /// Distinct `tool` label values; later tools count as `other`.
    pub max_tools: usize,
    /// Distinct `namespace` label values; later namespaces count as `other`.
    pub max_namespaces: usize,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            max_tools: 200,
            max_namespaces: 50,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    namespace: String,
    backend: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    tool: String,
    namespace: String,
    backend: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModeLabels {
    pub(crate) mode: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    pub(crate) outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SandboxLabels {
    pub(crate) runtime: String,
    pub(crate) profile: String,
    pub(crate) ended_by: String,
}

/// A map keyed by tool id: foldhash, as ids are the catalog's.
type ToolMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct SeriesIndex {
    by_tool: ToolMap<Arc<ToolSeries>>,
    /// Tools with a label of their own.
    labelled: usize,
    /// The `other` series by (namespace label, backend).
    others: HashMap<(String, String), Arc<ToolSeries>>,
}

/// The series of one (tool, backend): looked up by id without allocating.
#[derive(Debug)]
struct ToolSeries {
    ok: Counter,
    latency: Histogram,
    labels: LatencyLabels,
}

/// The process's metrics. Cheap to share; [`Metrics::render`] answers a
/// scrape.
#[derive(Debug)]
pub struct Metrics {
    options: MetricsOptions,
    registry: RwLock<Registry>,
    calls: Family<CallLabels, Counter>,
    latency: Family<LatencyLabels, Histogram>,
    /// Series by tool id: the first `max_tools` their own, later ones
    /// sharing their namespace's and backend's `other` series. Keys are
    /// catalog ids (an id that did not resolve arrives as `unknown`), so
    /// the map is bounded by the catalog.
    tools: RwLock<SeriesIndex>,
    namespaces: Mutex<Vec<String>>,
    pub(crate) searches: Family<ModeLabels, Histogram>,
    pub(crate) code_runs: Family<OutcomeLabels, Histogram>,
    pub(crate) sandbox_runs: Family<SandboxLabels, Counter>,
    pub(crate) sandbox_latency: Family<SandboxLabels, Histogram>,
    pub(crate) upstream_requests: Family<OutcomeLabels, Histogram>,
}

fn histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

impl Metrics {
    /// Empty metrics with their series registered.
    pub fn new(options: MetricsOptions) -> Self {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        let searches =
            Family::<ModeLabels, Histogram>::new_with_constructor(histogram as fn() -> Histogram);
        let code_runs = Family::<OutcomeLabels, Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        let sandbox_runs = Family::<SandboxLabels, Counter>::default();
        let sandbox_latency = Family::<SandboxLabels, Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        let upstream_requests = Family::<OutcomeLabels, Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        registry.register(
            "toolexec_tool_calls",
            "Tool calls through the pipeline, by tool, namespace, backend and outcome (ok or the error code)",
            calls.clone(),
        );
        registry.register(
            "toolexec_tool_call_duration_seconds",
            "Tool call latency through the pipeline (validation, execution, output checks)",
            latency.clone(),
        );
        registry.register(
            "toolexec_search_duration_seconds",
            "Tool search latency by mode",
            searches.clone(),
        );
        registry.register(
            "toolexec_code_execution_duration_seconds",
            "Code-mode executions by outcome (ok or the error code), with their duration",
            code_runs.clone(),
        );
        registry.register(
            "toolexec_sandbox_runs",
            "Sandboxed unit runs by runtime, profile and what ended them (the limit hit, or the status: ok, failed, cancelled, error)",
            sandbox_runs.clone(),
        );
        registry.register(
            "toolexec_sandbox_run_duration_seconds",
            "Sandboxed unit run latency by runtime, profile and what ended them",
            sandbox_latency.clone(),
        );
        registry.register(
            "toolexec_upstream_request_duration_seconds",
            "Requests to upstream MCP servers and HTTP providers by outcome",
            upstream_requests.clone(),
        );
        Metrics {
            options,
            registry: RwLock::new(registry),
            calls,
            latency,
            tools: RwLock::default(),
            namespaces: Mutex::default(),
            searches,
            code_runs,
            sandbox_runs,
            sandbox_latency,
            upstream_requests,
        }
    }

    /// Registers a gauge read at each scrape (in-flight calls, queue depth,
    /// upstream health). `name` is the full metric name.
    pub fn gauge_fn(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.registry.write().register_collector(Box::new(GaugeFn {
            name,
            help,
            read: Box::new(read),
        }));
    }

    /// Registers a gauge with one label, read at each scrape as `(label
    /// value, value)` pairs (upstream servers and whether they are up).
    pub fn labelled_gauge_fn(
        &self,
        name: &'static str,
        help: &'static str,
        label: &'static str,
        read: impl Fn() -> Vec<(String, i64)> + Send + Sync + 'static,
    ) {
        self.registry
            .write()
            .register_collector(Box::new(LabelledGaugeFn {
                name,
                help,
                label,
                read: Box::new(read),
            }));
    }

    /// Registers a counter read at each scrape (exporter drops, audit write
    /// errors). `name` is without the `_total` suffix.
    pub fn counter_fn(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.registry
            .write()
            .register_collector(Box::new(CounterFn {
                name,
                help,
                read: Box::new(read),
            }));
    }

    /// The metrics in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry.read());
        out
    }

    /// The series for `tool` (or `other` past the cap), made on first use.
    fn new_tool_series(&self, call: &CallRecord<'_>) -> Arc<ToolSeries> {
        let mut index = self.tools.write();
        if let Some(s) = index.by_tool.get(call.tool) {
            return s.clone();
        }
        let namespace = self.namespace_label(call.namespace);
        let series = if index.labelled < self.options.max_tools {
            index.labelled += 1;
            self.new_series(
                toolexec::telemetry::clip(call.tool),
                namespace,
                call.backend,
            )
        } else {
            let key = (namespace, call.backend.to_owned());
            match index.others.get(&key) {
                Some(s) => s.clone(),
                None => {
                    let s = self.new_series(OTHER, key.0.clone(), call.backend);
                    index.others.insert(key, s.clone());
                    s
                }
            }
        };
        index.by_tool.insert(call.tool.to_owned(), series.clone());
        series
    }

    fn new_series(&self, tool: &str, namespace: String, backend: &str) -> Arc<ToolSeries> {
        let labels = LatencyLabels {
            tool: tool.to_owned(),
            namespace,
            backend: backend.to_owned(),
        };
        Arc::new(ToolSeries {
            ok: self.calls.get_or_create_owned(&CallLabels {
                tool: labels.tool.clone(),
                namespace: labels.namespace.clone(),
                backend: labels.backend.clone(),
                outcome: "ok".into(),
            }),
            latency: self.latency.get_or_create_owned(&labels),
            labels,
        })
    }

    fn namespace_label(&self, namespace: &str) -> String {
        let mut known = self.namespaces.lock();
        if known.iter().any(|n| n == namespace) {
            return namespace.to_owned();
        }
        if known.len() < self.options.max_namespaces {
            known.push(namespace.to_owned());
            return namespace.to_owned();
        }
        OTHER.to_owned()
    }
}

impl CallObserver for Metrics {
    fn call_finished(&self, call: &CallRecord<'_>) {
        let found = {
            let tools = self.tools.read();
            match tools.by_tool.get(call.tool) {
                // The common case, under the read lock without touching
                // the Arc: two atomics.
                Some(series) if call.error.is_none() => return self.count(series, call),
                // A failure takes the family's lock and allocates labels:
                // not while holding this one.
                Some(series) => Some(series.clone()),
                None => None,
            }
        };
        let series = found.unwrap_or_else(|| self.new_tool_series(call));
        self.count(&series, call);
    }
}

impl Metrics {
    fn count(&self, series: &ToolSeries, call: &CallRecord<'_>) {
        series.latency.observe(call.duration.as_secs_f64());
        match call.error {
            None => {
                series.ok.inc();
            }
            Some(e) => {
                self.calls
                    .get_or_create(&CallLabels {
                        tool: series.labels.tool.clone(),
                        namespace: series.labels.namespace.clone(),
                        backend: series.labels.backend.clone(),
                        outcome: e.code().as_str().to_owned(),
                    })
                    .inc();
            }
        }
    }
}

/// Seconds, for histograms fed from spans.
pub(crate) fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

struct GaugeFn {
    name: &'static str,
    help: &'static str,
    read: Box<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for GaugeFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GaugeFn").field("name", &self.name).finish()
    }
}

impl Collector for GaugeFn {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = ConstGauge::new((self.read)());
        let metric = encoder.encode_descriptor(self.name, self.help, None, gauge.metric_type())?;
        gauge.encode(metric)
    }
}

struct CounterFn {
    name: &'static str,
    help: &'static str,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl std::fmt::Debug for CounterFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterFn")
            .field("name", &self.name)
            .finish()
    }
}

impl Collector for CounterFn {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counter = prometheus_client::metrics::counter::ConstCounter::new((self.read)());
        let metric =
            encoder.encode_descriptor(self.name, self.help, None, counter.metric_type())?;
        counter.encode(metric)
    }
}

struct LabelledGaugeFn {
    name: &'static str,
    help: &'static str,
    label: &'static str,
    read: Box<dyn Fn() -> Vec<(String, i64)> + Send + Sync>,
}

impl std::fmt::Debug for LabelledGaugeFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelledGaugeFn")
            .field("name", &self.name)
            .finish()
    }
}

impl Collector for LabelledGaugeFn {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let values = (self.read)();
        let kind = ConstGauge::new(0i64).metric_type();
        let mut metric = encoder.encode_descriptor(self.name, self.help, None, kind)?;
        for (value, v) in values {
            let labels = [(self.label, value)];
            ConstGauge::new(v).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn call<'a>(tool: &'a str, namespace: &'a str) -> CallRecord<'a> {
        CallRecord {
            tool,
            namespace,
            backend: "local",
            arguments: None,
            error: None,
            validation: Duration::ZERO,
            duration: Duration::from_micros(5),
            caller: None,
            trace_id: None,
        }
    }

    /// Past `max_tools` tools and `max_namespaces` namespaces, calls count
    /// under `other`; the tools seen first keep their own series.
    #[test]
    fn labels_are_capped() {
        let m = Metrics::new(MetricsOptions {
            max_tools: 2,
            max_namespaces: 1,
        });
        for (tool, ns) in [
            ("a:one", "a"),
            ("a:two", "a"),
            ("a:three", "a"),
            ("b:four", "b"),
            ("a:one", "a"),
        ] {
            m.call_finished(&call(tool, ns));
        }
        let text = m.render();
        let has = |s: &str| text.contains(s);
        assert!(
            has(
                r#"toolexec_tool_calls_total{tool="a:one",namespace="a",backend="local",outcome="ok"} 2"#
            ),
            "{text}"
        );
        assert!(
            has(
                r#"toolexec_tool_calls_total{tool="a:two",namespace="a",backend="local",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(
            has(
                r#"toolexec_tool_calls_total{tool="other",namespace="a",backend="local",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(
            has(
                r#"toolexec_tool_calls_total{tool="other",namespace="other",backend="local",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(
            !has("a:three") && !has("b:four") && !has(r#"namespace="b""#),
            "{text}"
        );
    }
}
