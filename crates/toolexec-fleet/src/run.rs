//! One run on a worker: claim it in the journal, run it on the worker's
//! catalog while telling JetStream it is alive, record the outcome, answer
//! the caller, acknowledge.

use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use toolexec::{ErrorBody, RunOptions, RunResult, StreamEvent, StreamRequest};

use crate::journal::{self, Claim};
use crate::wire::{Event, Outcome, REPLY_HEADER, RunRequest, rerunnable};
use crate::worker::Worker;

/// Handles one delivered run. Never fails: what cannot be recorded is
/// left unacknowledged, so JetStream delivers it again.
pub(crate) async fn handle(worker: &Worker, message: Message) {
    let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
    let reply = message
        .headers
        .as_ref()
        .and_then(|h| h.get(REPLY_HEADER))
        .map(|v| v.as_str().to_owned());
    let run: RunRequest = match serde_json::from_slice(&message.payload) {
        Ok(r) => r,
        Err(e) => {
            // Nobody can be answered without a key; never deliver it again.
            tracing::warn!(worker = %worker.id, "dropping an unreadable run: {e}");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    let reply = Reply {
        worker,
        subject: reply,
    };
    if let Some(wire) = run.code.clone() {
        // A code run resumes on redelivery: its journal replays.
        let claim = journal::claim(&worker.cluster, &worker.id, &run, true, delivered).await;
        let Some((revision, _)) = settle(worker, &run, claim, &reply, &message).await else {
            return;
        };
        let executed = crate::code::execute(
            &worker.exec,
            &worker.cluster.journal,
            &run.key,
            &worker.id,
            wire,
            alive(&message, worker.cluster.settings.heartbeat),
        )
        .await;
        let outcome = match executed {
            Ok(outcome) => Outcome::Code {
                outcome: Box::new(outcome),
            },
            Err(error) => Outcome::Err { error },
        };
        record(worker, &run, revision, outcome, &reply, &message).await;
        return;
    }
    let tool = match worker.exec.catalog().get(&run.tool) {
        Ok(t) => t,
        Err(e) => {
            // Not a tool of this catalog: another worker of the namespace
            // may have it; after the last delivery the caller learns it.
            if delivered < worker.cluster.settings.max_deliver {
                let _ = message
                    .ack_with(AckKind::Nak(Some(Duration::from_millis(100))))
                    .await;
            } else {
                let outcome = Outcome::Err { error: e.to_body() };
                finish_unclaimed(worker, &run, outcome, &reply, &message).await;
            }
            return;
        }
    };
    let claim = journal::claim(
        &worker.cluster,
        &worker.id,
        &run,
        rerunnable(tool.tool()),
        delivered,
    )
    .await;
    let Some((revision, attempt)) = settle(worker, &run, claim, &reply, &message).await else {
        return;
    };
    tracing::debug!(worker = %worker.id, key = %run.key, tool = %run.tool, attempt, "run");
    let outcome = execute(worker, &run, &reply, &message).await;
    record(worker, &run, revision, outcome, &reply, &message).await;
}

/// What a claim leaves to do: `Some((revision, attempt))` to run it; else
/// it was answered or left for another delivery here.
async fn settle(
    worker: &Worker,
    run: &RunRequest,
    claim: Result<Claim, toolexec::Error>,
    reply: &Reply<'_>,
    message: &Message,
) -> Option<(u64, u32)> {
    match claim {
        Ok(Claim::Run { revision, attempt }) => Some((revision, attempt)),
        Ok(Claim::Finished(outcome)) => {
            reply.send(&Event::Done { outcome }).await;
            let _ = message.ack().await;
            None
        }
        Ok(Claim::Elsewhere) => {
            let _ = message.ack().await;
            None
        }
        Err(e) => {
            tracing::warn!(worker = %worker.id, key = %run.key, "{e}");
            let _ = message
                .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                .await;
            None
        }
    }
}

/// Records the outcome of the run held at `revision`, answers, acks.
async fn record(
    worker: &Worker,
    run: &RunRequest,
    revision: u64,
    outcome: Outcome,
    reply: &Reply<'_>,
    message: &Message,
) {
    match journal::finish(
        &worker.cluster.journal,
        &run.key,
        revision,
        &worker.id,
        &outcome,
    )
    .await
    {
        Ok(None) => {
            reply.send(&Event::Done { outcome }).await;
            let _ = message.ack().await;
        }
        Ok(Some(recorded)) => {
            // Another worker took the run over and recorded first: every
            // caller gets that outcome.
            reply.send(&Event::Done { outcome: recorded }).await;
            let _ = message.ack().await;
        }
        Err(e) => {
            // The outcome could not be recorded: the caller still gets it,
            // and the message is left to be delivered again, where the
            // journal (still `running`) decides.
            tracing::error!(worker = %worker.id, key = %run.key, "{e}");
            reply.send(&Event::Done { outcome }).await;
        }
    }
}

/// Runs the tool, relaying its events to the caller and telling JetStream
/// every heartbeat that the run is alive.
async fn execute(
    worker: &Worker,
    run: &RunRequest,
    reply: &Reply<'_>,
    message: &Message,
) -> Outcome {
    let cancel = CancellationToken::new();
    worker
        .state
        .cancels
        .lock()
        .insert(run.key.clone(), cancel.clone());
    let options = RunOptions {
        timeout: run.timeout_ms.map(Duration::from_millis),
        cancel: Some(cancel),
    };
    let mut events = worker.exec.run_stream(
        StreamRequest::Tool {
            id: run.tool.clone(),
            args: run.args.clone(),
        },
        options,
    );
    // First renewal one heartbeat from now (an interval's immediate first
    // tick still waits for the timer wheel's next millisecond).
    let every = worker.cluster.settings.heartbeat;
    let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let outcome = loop {
        let event = tokio::select! {
            event = events.next_event() => event,
            _ = heartbeat.tick() => {
                let _ = message.ack_with(AckKind::Progress).await;
                continue;
            }
        };
        match event {
            Some(StreamEvent::Progress {
                progress,
                total,
                message,
                ..
            }) => {
                reply
                    .send(&Event::Progress {
                        progress,
                        total,
                        message,
                    })
                    .await;
            }
            Some(StreamEvent::Chunk { data, .. }) => reply.send(&Event::Chunk { data }).await,
            Some(StreamEvent::Done { result }) => match *result {
                RunResult::Tool(output) => break Outcome::Ok { output },
                RunResult::Chain(_) => {
                    break Outcome::Err {
                        error: internal("a tool run produced a chain result"),
                    };
                }
            },
            Some(StreamEvent::Error { error }) => break Outcome::Err { error },
            None => {
                break Outcome::Err {
                    error: internal("the run ended without a result"),
                };
            }
        }
    };
    worker.state.cancels.lock().remove(&run.key);
    outcome
}

/// Records and sends the outcome of a run that was never claimed (its
/// tool is not in this catalog).
async fn finish_unclaimed(
    worker: &Worker,
    run: &RunRequest,
    outcome: Outcome,
    reply: &Reply<'_>,
    message: &Message,
) {
    let done = crate::wire::Journal::Done {
        worker: worker.id.clone(),
        outcome: outcome.clone(),
    };
    let bytes = Bytes::from(serde_json::to_vec(&done).expect("journal entries serialize"));
    // Only where nothing is recorded: never over another worker's result.
    let _ = worker.cluster.journal.create(run.key.as_str(), bytes).await;
    reply.send(&Event::Done { outcome }).await;
    let _ = message.ack().await;
}

/// Renews `message` every `every` for as long as it is polled: run beside
/// a run that does not renew its message itself.
async fn alive(message: &Message, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        let _ = message.ack_with(AckKind::Progress).await;
    }
}

fn internal(message: &str) -> ErrorBody {
    toolexec::Error::backend_unavailable("fleet", message).to_body()
}

/// The caller's reply subject, if it gave one.
struct Reply<'a> {
    worker: &'a Worker,
    subject: Option<String>,
}

impl Reply<'_> {
    async fn send(&self, event: &Event) {
        let Some(subject) = &self.subject else {
            return;
        };
        let Ok(payload) = serde_json::to_vec(event) else {
            return;
        };
        // Best effort: the journal holds the result for a caller that
        // missed it.
        let _ = self
            .worker
            .cluster
            .client
            .publish(subject.clone(), Bytes::from(payload))
            .await;
    }
}
