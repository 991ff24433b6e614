//! The progress relay: a streamed run's progress becomes
//! `notifications/progress` (strictly increasing; a chain's steps count one
//! each), its chunks `notifications/message` log messages (logger
//! [`CHUNK_LOGGER`]) when the client wants `info` ([`LogGate`]).

use rmcp::RoleServer;
// MCP logging is deprecated by SEP-2577 (2026-07-28) but current in the
// 2025-11-25 revision the gateway speaks; chunks are relayed as log messages.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use toolexec::{ErrorBody, RunOptions, RunResult, STREAM_BUFFER, StreamEvent, StreamRequest};

use super::server::Gateway;
use super::session::LogGate;

/// Logger name of relayed chunks.
pub const CHUNK_LOGGER: &str = "toolexec";

/// Relays a streamed run's events to the client.
pub(super) struct Relay<'a> {
    gateway: &'a Gateway,
    token: ProgressToken,
    context: &'a RequestContext<RoleServer>,
    /// The chain's tool ids, for chains.
    chain: Option<Vec<String>>,
    last: Option<f64>,
    /// Which log messages (chunks) the client wants.
    logs: LogGate,
}

impl<'a> Relay<'a> {
    /// A relay to the client of `context`; `chain` holds a chain's tool ids.
    pub(super) fn new(
        gateway: &'a Gateway,
        token: ProgressToken,
        context: &'a RequestContext<RoleServer>,
        chain: Option<Vec<String>>,
    ) -> Self {
        Relay {
            gateway,
            token,
            context,
            chain,
            last: None,
            logs: LogGate::of(context, &gateway.session),
        }
    }

    /// Runs `request` on this task, relaying its events as they come, and
    /// returns its result once the events sent before it are relayed.
    pub(super) async fn run(
        mut self,
        request: StreamRequest,
        opts: RunOptions,
    ) -> Result<RunResult, ErrorBody> {
        let (tx, mut events) = mpsc::channel(STREAM_BUFFER);
        let gateway = self.gateway;
        let run = gateway.exec().run_events(request, &opts, tx);
        tokio::pin!(run);
        let outcome = loop {
            tokio::select! {
                biased;
                outcome = &mut run => break outcome,
                Some(event) = events.recv() => self.relay(event).await,
            }
        };
        while let Ok(event) = events.try_recv() {
            self.relay(event).await;
        }
        outcome.map_err(|e| e.to_body())
    }

    /// Relays one progress or chunk event (a run's result is returned, not
    /// sent as an event).
    async fn relay(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Progress {
                step,
                progress,
                total,
                message,
            } => self.progress(step, progress, total, message).await,
            StreamEvent::Chunk { step, data } => self.chunk(step, data).await,
            StreamEvent::Done { .. } | StreamEvent::Error { .. } => {}
        }
    }

    /// Sends one progress notification, if the value moved forward.
    async fn progress(
        &mut self,
        step: Option<usize>,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) {
        let (value, total, message) = match (&self.chain, step) {
            (Some(ids), Some(i)) => {
                let n = ids.len() as f64;
                let tool = ids.get(i).map(String::as_str).unwrap_or("?");
                let step_done = total == Some(n)
                    && progress == (i + 1) as f64
                    && message
                        .as_deref()
                        .is_some_and(|m| m.starts_with(&format!("step {i} (")));
                if step_done {
                    (progress, Some(n), message)
                } else {
                    let fraction = match total {
                        Some(t) if t > 0.0 => (progress / t).clamp(0.0, 1.0),
                        _ if progress >= 0.0 => progress / (progress + 1.0),
                        _ => 0.0,
                    };
                    let message = message.map(|m| format!("step {i} ({tool}): {m}"));
                    (i as f64 + 0.99 * fraction, Some(n), message)
                }
            }
            _ => (progress, total, message),
        };
        if !value.is_finite() || self.last.is_some_and(|l| value <= l) {
            return;
        }
        self.last = Some(value);
        let mut param = ProgressNotificationParam::new(self.token.clone(), value);
        param.total = total;
        param.message = message;
        if let Err(e) = self.context.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "could not send progress");
        }
    }

    /// Sends one chunk as a log message.
    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
    async fn chunk(&self, step: Option<usize>, data: Value) {
        if !self.logs.wants(LoggingLevel::Info) {
            return;
        }
        let data = json!({
            "event": "chunk",
            "progressToken": self.token,
            "step": step,
            "data": data,
        });
        let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, data)
            .with_logger(CHUNK_LOGGER);
        if let Err(e) = self.context.peer.notify_logging_message(param).await {
            tracing::debug!(error = %e, "could not send chunk");
        }
    }
}
