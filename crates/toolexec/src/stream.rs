//! Streaming runs: a tool or a chain as a stream of progress, chunk, done
//! and error events.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use crate::chain::ChainResult;
use crate::error::ErrorBody;
use crate::output::ToolOutput;

/// Capacity of a stream's event buffer.
pub const STREAM_BUFFER: usize = 256;

/// One event of a streamed run. Serializes as `{"type": "progress", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Progress of the tool (or of the chain, one event per finished step).
    Progress {
        /// The chain step, for chains.
        #[serde(skip_serializing_if = "Option::is_none")]
        step: Option<usize>,
        /// Progress so far.
        progress: f64,
        /// Total, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// Human message.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A partial result the tool streamed.
    Chunk {
        /// The chain step, for chains.
        #[serde(skip_serializing_if = "Option::is_none")]
        step: Option<usize>,
        /// The chunk.
        data: Value,
    },
    /// The run finished; always the last event of a successful run.
    Done {
        /// The result.
        result: Box<RunResult>,
    },
    /// The run failed; always the last event of a failed run.
    Error {
        /// The error.
        error: ErrorBody,
    },
}

/// What a streamed run produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RunResult {
    /// A tool's output.
    Tool(ToolOutput),
    /// A chain's result (which may contain failed steps).
    Chain(ChainResult),
}

/// A stream of [`StreamEvent`]s. Dropping it cancels the run.
pub struct EventStream {
    pub(crate) rx: mpsc::Receiver<StreamEvent>,
    pub(crate) _cancel_on_drop: DropGuard,
}

impl Stream for EventStream {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        self.rx.poll_recv(cx)
    }
}

impl EventStream {
    /// Receives the next event; `None` after the final `done` or `error`.
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.rx.recv().await
    }
}
