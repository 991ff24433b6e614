//! OTLP export of finished spans, batched and bounded.
//!
//! Finished spans go into a bounded queue: a push takes an
//! uncontended lock and wakes nobody until a whole batch is waiting. An
//! exporter thread with its own single-threaded Tokio runtime (which the
//! gRPC transport needs) takes the queue every interval, or at once when a
//! batch is full, and sends it in batches, each export bounded by a
//! timeout. A collector that is down, slow or hanging therefore never
//! blocks or slows a call: the queue fills and further spans are dropped
//! and counted ([`ExportStats`]), as are spans in a batch the collector
//! refused or did not answer in time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use toolexec_http::TlsOptions;
use toolexec_http::tls::Tls;

use crate::TelemetryError;
use crate::propagate::CallEnd;

/// The OTLP transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (`POST {endpoint}/v1/traces`).
    #[default]
    HttpProtobuf,
    /// OTLP/gRPC.
    Grpc,
}

/// Where and how to export spans.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// The collector: `http://host:4318` for HTTP (the `/v1/traces` path
    /// is added), `http://host:4317` for gRPC.
    pub endpoint: String,
    /// Transport.
    pub protocol: OtlpProtocol,
    /// Extra request headers (or gRPC metadata), such as an API key.
    pub headers: BTreeMap<String, String>,
    /// Fraction of new traces sampled (0 to 1); a parent's decision is
    /// followed (a remote parent's only when `trust_remote_sampling`).
    pub sampling_ratio: f64,
    /// Follow the sampled flag of an incoming `traceparent` (a client's,
    /// or a caller process's). When false, a continued trace is sampled
    /// by `sampling_ratio` like a new one (its trace id kept), so a client
    /// cannot make every one of its requests exported.
    pub trust_remote_sampling: bool,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Spans waiting for export before new ones are dropped.
    pub queue: usize,
    /// Spans per export request.
    pub batch: usize,
    /// How often a partial batch is sent.
    pub interval: Duration,
    /// Bound on one export request.
    pub timeout: Duration,
    /// TLS for an `https://` endpoint: CA file (else the system's roots)
    /// and client certificate; the HTTP providers' options.
    pub tls: TlsOptions,
}

impl OtlpOptions {
    /// Defaults for `endpoint`: HTTP/protobuf, every trace sampled (remote
    /// decisions followed), queue
    /// 4,096, batches of 512 every second, 5 s per export.
    pub fn new(endpoint: impl Into<String>) -> Self {
        OtlpOptions {
            endpoint: endpoint.into(),
            protocol: OtlpProtocol::HttpProtobuf,
            headers: BTreeMap::new(),
            sampling_ratio: 1.0,
            trust_remote_sampling: true,
            service_name: "toolexec".into(),
            queue: 4096,
            batch: 512,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            tls: TlsOptions::default(),
        }
    }

    /// Checks the options (what [`crate::Telemetry::install`] checks).
    pub fn check(&self) -> Result<(), TelemetryError> {
        let invalid = |field, message: &str| {
            Err(TelemetryError::Invalid {
                field,
                message: message.to_owned(),
            })
        };
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return invalid("telemetry.sampling_ratio", "must be between 0 and 1");
        }
        if !(self.endpoint.starts_with("http://") || self.endpoint.starts_with("https://")) {
            return invalid(
                "telemetry.otlp_endpoint",
                "must be an http:// or https:// URL",
            );
        }
        if !self.tls.is_empty() {
            if !self.endpoint.starts_with("https://") {
                return invalid(
                    "telemetry.ca_file",
                    "ca_file, client_cert and client_key need an https:// otlp_endpoint",
                );
            }
            if let Err(e) = self.tls.check() {
                let (field, message) = e.into_field_message("");
                let field = match field.trim_start_matches("tls.") {
                    "client_cert" => "telemetry.client_cert",
                    "client_key" => "telemetry.client_key",
                    _ => "telemetry.ca_file",
                };
                return invalid(field, &message);
            }
        }
        if self.queue == 0 || self.batch == 0 || self.timeout.is_zero() || self.interval.is_zero() {
            return invalid(
                "telemetry",
                "queue, batch, interval and timeout must be positive",
            );
        }
        Ok(())
    }

    pub(crate) fn resource(&self) -> Resource {
        Resource::builder()
            .with_service_name(self.service_name.clone())
            .build()
    }
}

/// What the exporter has done, for metrics.
#[derive(Debug, Default)]
pub struct ExportStats {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans lost: the queue was full, or their batch failed or timed out.
    pub dropped: AtomicU64,
    /// Export requests that failed or timed out.
    pub failed_exports: AtomicU64,
}

/// The instrumentation scope of toolexec's spans.
pub(crate) const SCOPE: &str = "toolexec";

/// A finished span waiting for export.
#[derive(Debug)]
pub(crate) enum Finished {
    /// A span of the SDK (the `tracing` layer's), boxed to keep the queue's
    /// slots the size of a call's.
    Sdk(Box<SpanData>),
    /// A call's own span, made into [`SpanData`] on the exporter thread.
    Call(CallEnd),
}

/// The bounded queue between finished spans and the exporter thread.
#[derive(Debug)]
pub(crate) struct SpanQueue {
    spans: Mutex<Vec<Finished>>,
    capacity: usize,
    batch: usize,
    /// Told when a whole batch is waiting.
    ready: Notify,
    stats: Arc<ExportStats>,
}

impl SpanQueue {
    fn new(options: &OtlpOptions, stats: Arc<ExportStats>) -> Self {
        SpanQueue {
            spans: Mutex::new(Vec::with_capacity(options.batch.min(options.queue))),
            capacity: options.queue,
            batch: options.batch,
            ready: Notify::new(),
            stats,
        }
    }

    /// Queues a sampled span for export; drops and counts it when the
    /// queue is full. Never blocks, and wakes the exporter only when this
    /// span completes a batch (a wake-up per span would cost a system call
    /// per call).
    pub(crate) fn push(&self, span: Finished) {
        let mut spans = self.spans.lock();
        if spans.len() >= self.capacity {
            drop(spans);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        spans.push(span);
        let full = spans.len() == self.batch;
        drop(spans);
        if full {
            self.ready.notify_one();
        }
    }

    /// Moves everything queued into `into` (emptied first), leaving the
    /// queue `into`'s buffer: the two buffers keep their capacity, so
    /// pushing never reallocates once they have grown.
    pub(crate) fn take(&self, into: &mut Vec<Finished>) {
        into.clear();
        std::mem::swap(&mut *self.spans.lock(), into);
    }
}

enum Control {
    Flush(std::sync::mpsc::SyncSender<()>),
    Shutdown(std::sync::mpsc::SyncSender<()>),
}

/// The span processor: a bounded queue in front of an exporter thread.
#[derive(Debug)]
pub(crate) struct BoundedProcessor {
    queue: Arc<SpanQueue>,
    control: mpsc::UnboundedSender<Control>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Control::Flush(_) => "Flush",
            Control::Shutdown(_) => "Shutdown",
        })
    }
}

impl BoundedProcessor {
    /// Builds the exporter on its own thread and runtime; fails when the
    /// exporter cannot be built (a malformed endpoint).
    pub(crate) fn start(options: &OtlpOptions) -> Result<(Self, Arc<ExportStats>), TelemetryError> {
        options.check()?;
        let (control, control_rx) = mpsc::unbounded_channel();
        let stats = Arc::new(ExportStats::default());
        let queue = Arc::new(SpanQueue::new(options, stats.clone()));
        let thread_queue = queue.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let thread_options = options.clone();
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name("toolexec-otlp".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(TelemetryError::Exporter(e.to_string())));
                        return;
                    }
                };
                // The gRPC channel binds to the runtime it is built in.
                let exporter = runtime.block_on(async { build_exporter(&thread_options) });
                let exporter = match exporter {
                    Ok(mut e) => {
                        // Spans carry no resource: the exporter adds it.
                        e.set_resource(&thread_options.resource());
                        let _ = ready_tx.send(Ok(()));
                        e
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let worker = ExportWorker {
                    exporter,
                    scope: InstrumentationScope::builder(SCOPE).build(),
                    options: thread_options,
                    stats: thread_stats,
                };
                runtime.block_on(worker.run(&thread_queue, control_rx));
            })
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        ready_rx
            .recv()
            .map_err(|_| TelemetryError::Exporter("the exporter thread stopped".into()))??;
        Ok((BoundedProcessor { queue, control }, stats))
    }

    /// The queue, for spans made without the SDK (calls' own spans).
    pub(crate) fn queue(&self) -> Arc<SpanQueue> {
        self.queue.clone()
    }

    fn control(
        &self,
        make: fn(std::sync::mpsc::SyncSender<()>) -> Control,
        wait: Duration,
    ) -> OTelSdkResult {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.control
            .send(make(tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        rx.recv_timeout(wait)
            .map_err(|_| OTelSdkError::Timeout(wait))
    }
}

/// The TLS of an `https://` endpoint.
fn tls(options: &OtlpOptions) -> Result<Tls, TelemetryError> {
    options
        .tls
        .client_config("OTLP collector")
        .map_err(|e| TelemetryError::Exporter(e.to_string()))
}

fn build_exporter(
    options: &OtlpOptions,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let https = options.endpoint.starts_with("https://");
    let built = match options.protocol {
        OtlpProtocol::HttpProtobuf => {
            let endpoint = format!("{}/v1/traces", options.endpoint.trim_end_matches('/'));
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(endpoint)
                .with_timeout(options.timeout)
                .with_headers(options.headers.clone().into_iter().collect());
            if https {
                let client = reqwest::Client::builder()
                    .tls_backend_preconfigured(tls(options)?.config)
                    .timeout(options.timeout)
                    .build()
                    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
                builder.with_http_client(client).build()
            } else {
                // The exporter's own reqwest client needs a process-wide
                // rustls provider even without TLS; install the
                // workspace's (pure Rust) one unless the process has one.
                let _ = rustls_graviola::default_provider().install_default();
                builder.build()
            }
        }
        OtlpProtocol::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &options.headers {
                let key =
                    tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .map_err(|e| TelemetryError::Invalid {
                            field: "telemetry.headers",
                            message: format!("{k:?}: {e}"),
                        })?;
                let value = v.parse().map_err(|e| TelemetryError::Invalid {
                    field: "telemetry.headers",
                    message: format!("{k:?}: {e}"),
                })?;
                metadata.insert(key, value);
            }
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(options.endpoint.clone())
                .with_timeout(options.timeout)
                .with_metadata(metadata);
            if https {
                builder.with_channel(tls_channel(options)?).build()
            } else {
                builder.build()
            }
        }
    };
    built.map_err(|e| TelemetryError::Exporter(e.to_string()))
}

/// A gRPC channel to an `https://` collector, over rustls with the
/// workspace's provider (tonic's own TLS would need a process-wide one).
fn tls_channel(options: &OtlpOptions) -> Result<tonic::transport::Channel, TelemetryError> {
    let connector = tls(options)?.h2_connector(options.timeout, true);
    let endpoint = tonic::transport::Endpoint::from_shared(options.endpoint.clone())
        .map_err(|e| TelemetryError::Invalid {
            field: "telemetry.otlp_endpoint",
            message: e.to_string(),
        })?
        .connect_timeout(options.timeout)
        .timeout(options.timeout);
    Ok(endpoint.connect_with_connector_lazy(connector))
}

struct ExportWorker {
    exporter: opentelemetry_otlp::SpanExporter,
    scope: InstrumentationScope,
    options: OtlpOptions,
    stats: Arc<ExportStats>,
}

impl ExportWorker {
    async fn run(mut self, queue: &SpanQueue, mut control: mpsc::UnboundedReceiver<Control>) {
        let mut tick = tokio::time::interval(self.options.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut taken = Vec::with_capacity(self.options.batch.min(self.options.queue));
        loop {
            tokio::select! {
                () = queue.ready.notified() => self.export_all(queue, &mut taken).await,
                _ = tick.tick() => self.export_all(queue, &mut taken).await,
                msg = control.recv() => {
                    self.export_all(queue, &mut taken).await;
                    match msg {
                        Some(Control::Flush(ack)) => { let _ = ack.send(()); }
                        Some(Control::Shutdown(ack)) => {
                            let _ = self.exporter.shutdown();
                            let _ = ack.send(());
                            return;
                        }
                        None => return,
                    }
                }
            }
        }
    }

    /// Sends everything queued, a batch per request.
    async fn export_all(&mut self, queue: &SpanQueue, taken: &mut Vec<Finished>) {
        queue.take(taken);
        let scope = self.scope.clone();
        let mut spans = taken.drain(..).map(|finished| match finished {
            Finished::Sdk(span) => *span,
            Finished::Call(call) => call.into_span_data(&scope),
        });
        loop {
            let batch: Vec<SpanData> = spans.by_ref().take(self.options.batch).collect();
            if batch.is_empty() {
                return;
            }
            self.export(batch).await;
        }
    }

    async fn export(&mut self, spans: Vec<SpanData>) {
        let n = spans.len() as u64;
        // The exporter's own timeout bounds the request; this bounds
        // everything else (connecting, a hung TLS handshake).
        let outcome = tokio::time::timeout(self.options.timeout, self.exporter.export(spans)).await;
        match outcome {
            Ok(Ok(())) => {
                self.stats.exported.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Err(e)) => self.failed(n, &e.to_string()),
            Err(_) => self.failed(n, "timed out"),
        }
    }

    fn failed(&self, spans: u64, why: &str) {
        self.stats.dropped.fetch_add(spans, Ordering::Relaxed);
        let failures = self.stats.failed_exports.fetch_add(1, Ordering::Relaxed);
        // The first failure and every hundredth after, not every batch.
        if failures.is_multiple_of(100) {
            tracing::warn!(
                target: "toolexec_telemetry",
                endpoint = %self.options.endpoint,
                spans,
                error = why,
                "OTLP export failed; spans dropped (counted in toolexec_telemetry_spans_dropped_total)"
            );
        }
    }
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if span.span_context.is_sampled() {
            self.queue.push(Finished::Sdk(Box::new(span)));
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.control(Control::Flush, self.wait())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.control(Control::Shutdown, timeout)
    }
}

impl BoundedProcessor {
    fn wait(&self) -> Duration {
        Duration::from_secs(10)
    }
}
