//! The server side of one upgraded run connection: runs the unit, forwards
//! its tool calls to the caller, streams the output and the outcome, and
//! stops the unit when the caller goes away.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use toolexec::{
    BoxFuture, CancellationToken, DetailLevel, Error, ErrorBody, ErrorCode, ToolAccess,
};
use toolexec_runtime::{
    OutputChunk, OutputSink, OutputStream, RunContext, RunRequest, Runtime, ToolCallRecord,
    ToolHost, unseen,
};

use crate::server::ServerState;
use crate::wire::{self, ClientFrame, LiveText, ServerFrame, ToolRequest};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, ErrorBody>>>>>;

/// Forwards the unit's allowed tool requests to the caller over the
/// connection: the tools of the server's [`ToolHost`], which has already
/// checked the budget and allowlist before a call gets here. The caller's
/// answers keep their codes (`Error::from` the body). The run's
/// cancellation reaches forwarded calls through the connection: a caller
/// that goes away fails them with `cancelled`.
struct ForwardingCaller {
    frames: mpsc::UnboundedSender<ServerFrame>,
    pending: Pending,
    next_id: AtomicU64,
    /// A record of every call forwarded (its tool and the digest of its
    /// arguments, never the arguments: the log is bounded), to tell them
    /// apart from the calls the server refused itself.
    forwarded: Mutex<Vec<ToolCallRecord>>,
}

fn gone() -> ErrorBody {
    ErrorBody {
        code: ErrorCode::Cancelled,
        message: "cancelled: the remote caller disconnected".into(),
        details: None,
    }
}

impl ForwardingCaller {
    fn ask(&self, request: ToolRequest) -> BoxFuture<'static, Result<Value, Error>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        let sent = self.frames.send(ServerFrame::ToolCall { id, request });
        let pending = self.pending.clone();
        Box::pin(async move {
            if sent.is_err() {
                pending.lock().remove(&id);
                return Err(Error::from(gone()));
            }
            rx.await
                .unwrap_or_else(|_| Err(gone()))
                .map_err(Error::from)
        })
    }
}

impl ToolAccess for ForwardingCaller {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        self.forwarded
            .lock()
            .push(ToolCallRecord::started(tool_id, &args));
        self.ask(ToolRequest::Call {
            tool: tool_id.to_owned(),
            args,
        })
    }

    /// The caller's hits; a failed search finds nothing.
    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        let answer = self.ask(ToolRequest::Search {
            query: query.to_owned(),
            limit,
        });
        Box::pin(async move { Ok(answer.await.unwrap_or_else(|_| Value::Array(Vec::new()))) })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        self.ask(ToolRequest::Describe {
            tool: tool_id.to_owned(),
            detail: level,
        })
    }
}

/// Serves one run over `io` (the upgraded connection).
pub(crate) async fn serve<IO>(
    state: Arc<ServerState>,
    runtime: Arc<dyn Runtime>,
    request: RunRequest,
    io: IO,
) where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let counters = &state.counters;
    counters.runs_started.fetch_add(1, Ordering::Relaxed);
    counters.runs_active.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut stream) = StreamExt::split::<bytes::Bytes>(Framed::new(io, wire::codec()));
    let (frames, mut outbox) = mpsc::unbounded_channel::<ServerFrame>();
    let cancel = CancellationToken::new();

    // The writer runs on its own so that a caller that stops reading never
    // stalls the unit's deadline or cancellation.
    let writer_cancel = cancel.clone();
    let writer = tokio::spawn(async move {
        while let Some(frame) = outbox.recv().await {
            let bytes = match serde_json::to_vec(&frame) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::error!(error = %e, "remote run: cannot encode a frame");
                    continue;
                }
            };
            if sink.send(bytes.into()).await.is_err() {
                writer_cancel.cancel();
                return;
            }
        }
        let _ = sink.close().await;
    });

    let pending: Pending = Arc::default();
    let caller = Arc::new(ForwardingCaller {
        frames: frames.clone(),
        pending: pending.clone(),
        next_id: AtomicU64::new(1),
        forwarded: Mutex::new(Vec::new()),
    });
    let host = ToolHost::with_tools(caller.clone(), &request.limits, cancel.clone());
    let _ = frames.send(ServerFrame::Started {
        runtime: runtime.name().to_owned(),
    });
    tracing::info!(
        runtime = runtime.name(),
        kind = request.unit.kind().as_str(),
        "remote run started"
    );
    let (live_sink, mut live) = OutputSink::channel();
    let mut live_out = LiveText::default();
    let mut live_err = LiveText::default();
    let run = runtime.run(
        request,
        RunContext::new(host, cancel.clone()).with_output(live_sink),
    );
    tokio::pin!(run);

    let mut disconnected = false;
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break Some(outcome),
            Some(chunk) = live.recv() => {
                forward_live(&frames, &chunk, &mut live_out, &mut live_err);
            }
            frame = stream.next(), if !disconnected => {
                let answer = match frame {
                    Some(Ok(bytes)) => serde_json::from_slice::<ClientFrame>(&bytes).ok(),
                    _ => None,
                };
                match answer {
                    Some(ClientFrame::ToolResult { id, result, error }) => {
                        if let Some(tx) = pending.lock().remove(&id) {
                            let _ = tx.send(match error {
                                Some(error) => Err(error),
                                None => Ok(result.unwrap_or(Value::Null)),
                            });
                        }
                    }
                    None => {
                        // EOF, a broken connection or a frame that is not
                        // a valid answer: the caller is gone.
                        disconnected = true;
                        cancel.cancel();
                        pending.lock().clear();
                    }
                }
            }
            _ = cancel.cancelled(), if !disconnected => {
                // The writer failed: same as a disconnect.
                disconnected = true;
                pending.lock().clear();
            }
        }
        if disconnected {
            // Give the runtime its grace to stop the unit on cancellation;
            // dropping `run` afterwards kills whatever is left.
            let grace = state.config.cleanup_grace;
            let finished = tokio::time::timeout(grace, &mut run).await.ok();
            if finished.is_none() {
                tracing::warn!("remote run: unit did not stop within the grace; dropping it");
            }
            break None;
        }
    };
    counters.runs_active.fetch_sub(1, Ordering::Relaxed);
    let Some(mut outcome) = outcome else {
        counters.runs_abandoned.fetch_add(1, Ordering::Relaxed);
        tracing::info!("remote run abandoned: the caller disconnected; unit stopped");
        writer.abort();
        return;
    };
    tracing::info!(status = outcome.status.as_str(), "remote run finished");
    let forwarded = std::mem::take(&mut *caller.forwarded.lock());
    // Only the calls the server refused: the caller logged the rest.
    outcome.tool_calls = unseen(std::mem::take(&mut outcome.tool_calls), &forwarded);
    // Chunks still queued when the unit ended, then whatever the runtime
    // did not stream live (all of it for runtimes that cannot).
    while let Ok(chunk) = live.try_recv() {
        forward_live(&frames, &chunk, &mut live_out, &mut live_err);
    }
    for (live, text) in [(&mut live_out, false), (&mut live_err, true)] {
        let data = live.finish();
        if !data.is_empty() {
            let _ = frames.send(output_frame(data, text));
        }
    }
    let stdout = std::mem::take(&mut outcome.stdout);
    let stderr = std::mem::take(&mut outcome.stderr);
    for data in wire::chunks(live_out.rest_of(&stdout)) {
        let _ = frames.send(ServerFrame::Stdout { data: data.into() });
    }
    for data in wire::chunks(live_err.rest_of(&stderr)) {
        let _ = frames.send(ServerFrame::Stderr { data: data.into() });
    }
    let outcome = serde_json::to_value(&outcome).unwrap_or(Value::Null);
    let _ = frames.send(ServerFrame::Outcome { outcome });
    drop(frames);
    drop(caller);
    // The caller closes once it has the outcome; don't wait forever for a
    // caller that never reads.
    let _ = tokio::time::timeout(state.config.cleanup_grace, writer).await;
}

/// Sends one live chunk as text frames (complete characters only).
fn forward_live(
    frames: &mpsc::UnboundedSender<ServerFrame>,
    chunk: &OutputChunk,
    out: &mut LiveText,
    err: &mut LiveText,
) {
    let is_err = chunk.stream == OutputStream::Stderr;
    let live = if is_err { err } else { out };
    let text = live.push(&chunk.bytes);
    for data in wire::chunks(&text) {
        let _ = frames.send(output_frame(data.into(), is_err));
    }
}

fn output_frame(data: String, is_err: bool) -> ServerFrame {
    if is_err {
        ServerFrame::Stderr { data }
    } else {
        ServerFrame::Stdout { data }
    }
}
