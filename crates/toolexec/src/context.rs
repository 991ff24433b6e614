//! The handle a running tool gets: progress, streamed chunks, cancellation.

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client::ClientInput;
use crate::stream::StreamEvent;

/// Passed to every backend call. Cheap to clone; a context with no stream
/// and no cancellation token costs nothing to create.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    cancel: Option<CancellationToken>,
    events: Option<EventTx>,
    idempotency_key: Option<String>,
    client_input: Option<ClientInput>,
}

#[derive(Debug, Clone)]
pub(crate) struct EventTx {
    pub(crate) tx: mpsc::Sender<StreamEvent>,
    pub(crate) step: Option<usize>,
}

impl ToolContext {
    /// A context observing `cancel`.
    pub fn with_cancel(cancel: CancellationToken) -> Self {
        ToolContext {
            cancel: Some(cancel),
            events: None,
            idempotency_key: None,
            client_input: None,
        }
    }

    pub(crate) fn new(
        cancel: Option<CancellationToken>,
        events: Option<EventTx>,
        idempotency_key: Option<String>,
        client_input: Option<ClientInput>,
    ) -> Self {
        ToolContext {
            cancel,
            events,
            idempotency_key,
            client_input,
        }
    }

    /// The run's idempotency key
    /// ([`RunOptions::idempotency_key`](crate::RunOptions::idempotency_key)),
    /// for a backend that makes runs durable.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// What the caller answers of the tool's requests for client input,
    /// when it answers them itself
    /// ([`RunOptions::client_input`](crate::RunOptions::client_input)): a
    /// backend that needs input then returns
    /// [`Error::InputRequired`](crate::Error::InputRequired).
    pub fn client_input(&self) -> Option<&ClientInput> {
        self.client_input.as_ref()
    }

    /// True once the caller cancelled the call (or its deadline passed).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }

    /// Resolves when the call is cancelled; never, if it cannot be.
    pub async fn cancelled(&self) {
        match &self.cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// A context whose progress and chunks go to `tx`, with no
    /// cancellation: for work that outlives the call that started it and
    /// reports to whichever call waits for it at the moment (an upstream
    /// MCP call held across its client's rounds), which passes the events
    /// on.
    pub fn reporting_to(tx: mpsc::Sender<StreamEvent>) -> Self {
        ToolContext {
            events: Some(EventTx { tx, step: None }),
            ..ToolContext::default()
        }
    }

    /// The cancellation token, for backends that relay cancellation (MCP).
    pub fn cancellation_token(&self) -> Option<&CancellationToken> {
        self.cancel.as_ref()
    }

    /// True when someone is listening for progress and chunks.
    pub fn is_streaming(&self) -> bool {
        self.events.is_some()
    }

    /// Reports progress. Lossy by design: when the listener is slow, stale
    /// progress is dropped rather than slowing the tool.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(ev) = &self.events {
            let _ = ev.tx.try_send(StreamEvent::Progress {
                step: ev.step,
                progress,
                total,
                message: message.map(str::to_owned),
            });
        }
    }

    /// Streams a partial result. Waits while the listener's buffer is full,
    /// so chunks are never dropped.
    pub async fn chunk(&self, data: Value) {
        if let Some(ev) = &self.events {
            let _ = ev
                .tx
                .send(StreamEvent::Chunk {
                    step: ev.step,
                    data,
                })
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Work reporting to a channel: its progress and chunks go there, and
    /// nothing cancels it.
    #[tokio::test]
    async fn a_reporting_context_sends_its_events_to_its_channel() {
        let (tx, mut rx) = mpsc::channel(4);
        let work = ToolContext::reporting_to(tx);
        assert!(work.is_streaming() && !work.is_cancelled());
        assert!(work.cancellation_token().is_none());
        work.progress(1.0, Some(2.0), Some("half"));
        work.chunk(json!("part")).await;
        assert_eq!(
            rx.recv().await.unwrap(),
            StreamEvent::Progress {
                step: None,
                progress: 1.0,
                total: Some(2.0),
                message: Some("half".into()),
            }
        );
        assert_eq!(
            rx.recv().await.unwrap(),
            StreamEvent::Chunk {
                step: None,
                data: json!("part"),
            }
        );
    }
}
