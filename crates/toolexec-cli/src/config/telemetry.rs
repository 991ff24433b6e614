//! `[telemetry]` (OTLP traces, metrics, arguments on spans) and `[audit]`
//! (the audit log).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toolexec_telemetry::{AuditOptions, MetricsOptions, OtlpOptions, OtlpProtocol};

use super::error::Fault;
use super::values::{SecretSource, relative_to};

/// `[telemetry]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct TelemetryTable {
    otlp_endpoint: Option<String>,
    protocol: Option<OtlpProtocol>,
    #[serde(default)]
    headers: BTreeMap<String, SecretSource>,
    sampling_ratio: Option<f64>,
    trust_remote_sampling: Option<bool>,
    ca_file: Option<std::path::PathBuf>,
    client_cert: Option<std::path::PathBuf>,
    client_key: Option<std::path::PathBuf>,
    service_name: Option<String>,
    export_timeout_ms: Option<u64>,
    queue: Option<usize>,
    metrics: Option<bool>,
    max_tool_labels: Option<usize>,
    record_arguments: Option<bool>,
    max_argument_bytes: Option<usize>,
}

/// `[audit]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditTable {
    path: Option<std::path::PathBuf>,
    max_bytes: Option<u64>,
    keep: Option<usize>,
    record_arguments: Option<bool>,
    max_argument_bytes: Option<usize>,
    digest_key: Option<SecretSource>,
}

/// `[telemetry]` and `[audit]`, resolved.
#[derive(Debug, Clone)]
pub(crate) struct TelemetryConfig {
    /// Span export.
    pub otlp: Option<OtlpOptions>,
    /// Metrics bounds; `None` when `metrics = false`.
    pub metrics: Option<MetricsOptions>,
    /// Cap on arguments recorded on spans, when recorded.
    pub span_arguments: Option<usize>,
    /// The audit log.
    pub audit: Option<AuditOptions>,
}

impl Default for TelemetryConfig {
    /// Metrics on (they cost a few atomics per call), nothing else.
    fn default() -> Self {
        TelemetryConfig {
            otlp: None,
            metrics: Some(MetricsOptions::default()),
            span_arguments: None,
            audit: None,
        }
    }
}

impl TelemetryTable {
    pub(super) fn resolve(self, audit: AuditTable, base: &Path) -> Result<TelemetryConfig, Fault> {
        let otlp = match self.otlp_endpoint {
            None => {
                if self.protocol.is_some()
                    || !self.headers.is_empty()
                    || self.sampling_ratio.is_some()
                    || self.trust_remote_sampling.is_some()
                    || self.ca_file.is_some()
                    || self.client_cert.is_some()
                    || self.client_key.is_some()
                {
                    return Err(Fault::new(
                        "telemetry.otlp_endpoint",
                        "protocol, headers, sampling_ratio, trust_remote_sampling and TLS files need otlp_endpoint",
                    ));
                }
                None
            }
            Some(endpoint) => {
                let mut o = OtlpOptions::new(endpoint);
                o.protocol = self.protocol.unwrap_or_default();
                for (name, value) in &self.headers {
                    let secret = value.resolve(&format!("telemetry.headers.{name}"), base)?;
                    o.headers.insert(name.clone(), secret.expose().to_owned());
                }
                if let Some(r) = self.sampling_ratio {
                    o.sampling_ratio = r;
                }
                if let Some(trust) = self.trust_remote_sampling {
                    o.trust_remote_sampling = trust;
                }
                o.tls = toolexec_http::TlsOptions {
                    ca_file: self.ca_file.map(|p| relative_to(base, &p)),
                    client_cert: self.client_cert.map(|p| relative_to(base, &p)),
                    client_key: self.client_key.map(|p| relative_to(base, &p)),
                };
                if let Some(s) = self.service_name {
                    o.service_name = s;
                }
                if let Some(ms) = self.export_timeout_ms {
                    o.timeout = Duration::from_millis(ms);
                }
                if let Some(q) = self.queue {
                    o.queue = q;
                }
                o.check().map_err(|e| match e {
                    toolexec_telemetry::TelemetryError::Invalid { field, message } => {
                        Fault::new(field, message)
                    }
                    e => Fault::new("telemetry", e.to_string()),
                })?;
                Some(o)
            }
        };
        let metrics = match self.metrics {
            Some(false) => None,
            _ => {
                let mut m = MetricsOptions::default();
                if let Some(n) = self.max_tool_labels {
                    m.max_tools = n;
                }
                Some(m)
            }
        };
        let cap = self.max_argument_bytes.unwrap_or(4096);
        let span_arguments = self.record_arguments.unwrap_or(false).then_some(cap);
        let audit = match audit.path {
            None => None,
            Some(path) => {
                let mut a = AuditOptions::new(relative_to(base, &path));
                if let Some(b) = audit.max_bytes {
                    if b == 0 {
                        return Err(Fault::new("audit.max_bytes", "must be positive"));
                    }
                    a.max_bytes = b;
                }
                if let Some(k) = audit.keep {
                    a.keep = k;
                }
                a.record_arguments = audit.record_arguments.unwrap_or(false);
                if let Some(n) = audit.max_argument_bytes {
                    a.max_argument_bytes = n;
                }
                if let Some(key) = &audit.digest_key {
                    a.digest_key = Some(key.resolve("audit.digest_key", base)?);
                }
                Some(a)
            }
        };
        Ok(TelemetryConfig {
            otlp,
            metrics,
            span_arguments,
            audit,
        })
    }
}
