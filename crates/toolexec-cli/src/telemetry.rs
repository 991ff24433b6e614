//! Logs, traces, metrics and the audit log for one `toolexec` process,
//! from `[telemetry]`, `[audit]`, `--log-format` and `$TOOLEXEC_LOG`.

use toolexec::Error;
use toolexec_telemetry::{LogFormat, Telemetry, TelemetryOptions};

use crate::args::LogFormatArg;
use crate::config::Config;

/// The environment variable holding the log filter (default `warn`).
pub(crate) const LOG_ENV: &str = "TOOLEXEC_LOG";

/// Installs the process's telemetry. `serving`: metrics are kept only for
/// `serve`, which can publish them.
pub(crate) fn install(
    config: &Config,
    format: LogFormatArg,
    serving: bool,
) -> Result<Telemetry, Error> {
    let t = &config.telemetry;
    let options = TelemetryOptions {
        log_format: match format {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        },
        log_filter: std::env::var(LOG_ENV).unwrap_or_default(),
        otlp: t.otlp.clone(),
        metrics: if serving { t.metrics } else { None },
        audit: t.audit.clone(),
        span_arguments: t.span_arguments,
    };
    Telemetry::install(options).map_err(Error::from)
}
