//! One run on a worker: check it, claim it in the journal, run it on the
//! worker's catalog while telling JetStream it is alive, record the
//! outcome, answer the caller, acknowledge.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use toolexec::{Error, ErrorBody, LimitKind, RunOptions, RunResult, StreamEvent, StreamRequest};
use toolexec_runtime::{NetworkPolicy, UnitKind};

use crate::journal::{self, Claim, Delivery, Finish};
use crate::wire::{Event, Journal, Outcome, REPLY_HEADER, RunRequest, rerunnable};
use crate::worker::Worker;

/// Longest run key: callers send 32 hex digits.
const MAX_KEY: usize = 64;

/// Handles one delivered run. Never fails: a run that cannot be recorded
/// now is delivered again (while deliveries remain), and the last delivery
/// always settles it, so no run stays in the queue for good.
pub(crate) async fn handle(worker: &Worker, message: Message) {
    let (delivered, seq) = message
        .info()
        .map(|i| (i.delivered, i.stream_sequence))
        .unwrap_or((1, 0));
    let last = delivered >= worker.max_deliver;
    // Replies go to caller inboxes only: never to a subject of the cluster
    // (a cancellation, the JetStream API) named by whoever published.
    let inbox_in = |header: &str| {
        message
            .headers
            .as_ref()
            .and_then(|h| h.get(header))
            .map(|v| v.as_str().to_owned())
            .filter(|s| crate::callback::is_inbox(s))
    };
    let reply = inbox_in(REPLY_HEADER);
    let mut callback = inbox_in(crate::callback::CALLBACK_HEADER);
    let reply = Reply {
        worker,
        subject: reply,
    };
    let run = match serde_json::from_slice::<RunRequest>(&message.payload) {
        Ok(r) if valid_key(&r.key) => r,
        Ok(_) | Err(_) => {
            // Nobody can be answered without a usable key: never again.
            tracing::warn!(worker = %worker.id, "dropping an unreadable run");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    if let Err(refusal) = admissible(worker, &run, &message) {
        // Sent where this worker never runs it: refused, never run.
        reply
            .send(&Event::Done {
                outcome: Outcome::Err {
                    error: refusal.to_body(),
                },
            })
            .await;
        let _ = message.ack_with(AckKind::Term).await;
        return;
    }
    let rerun = match (&run.code, &run.unit) {
        // A code run resumes on redelivery: its journal replays.
        (Some(_), _) => true,
        // A unit may have had effects: never run blindly again.
        (None, Some(_)) => false,
        (None, None) => match worker.exec.catalog().get(&run.tool) {
            Ok(t) => rerunnable(t.tool()),
            Err(e) => {
                // Not in this catalog: another worker of the namespace may
                // have it; the last delivery tells the caller.
                if last {
                    let outcome = Outcome::Err { error: e.to_body() };
                    finish_unclaimed(worker, &run, outcome, &reply, &message).await;
                } else {
                    retry_later(worker, &message).await;
                }
                return;
            }
        },
    };
    let at = Delivery {
        worker: &worker.id,
        instance: &worker.instance,
        seq,
        delivered,
        max_deliver: worker.max_deliver,
    };
    let holds = |key: &str| worker.state.cancels.lock().contains_key(key);
    let claim = journal::claim(&worker.cluster, at, &run, rerun, holds).await;
    let (revision, attempt) = match claim {
        Ok(Claim::Run { revision, attempt }) => (revision, attempt),
        Ok(Claim::Finished(outcome)) => {
            reply.send(&Event::Done { outcome }).await;
            let _ = message.ack().await;
            return;
        }
        Ok(Claim::Elsewhere) => {
            let _ = message.ack().await;
            return;
        }
        Ok(Claim::Ignore) => return,
        Err(e) => {
            tracing::warn!(worker = %worker.id, key = %run.key, "{e}");
            if last {
                // The journal is unreachable and no delivery remains: the
                // caller is told, the message settled.
                reply
                    .send(&Event::Done {
                        outcome: Outcome::Err { error: e.to_body() },
                    })
                    .await;
                let _ = message.ack_with(AckKind::Term).await;
            } else {
                retry_later(worker, &message).await;
            }
            return;
        }
    };
    tracing::debug!(worker = %worker.id, key = %run.key, tool = %run.tool, attempt, "run");
    let cancel = CancellationToken::new();
    let _holding = Holding::new(worker, &run.key, cancel.clone());
    let mut calls = Vec::new();
    let outcome = match (run.code.clone(), &worker.runner) {
        (Some(wire), Some(runner)) => {
            let place = crate::code::Place {
                runner,
                exec: &worker.exec,
                store: &worker.cluster.journal,
                worker: &worker.id,
                namespaces: &worker.namespaces,
                max_entry: max_entry(worker),
                callback: callback.take().map(|subject| {
                    crate::callback::Callback::new(
                        worker.cluster.client.clone(),
                        subject,
                        &run.key,
                        wire.timeout(),
                        worker.cluster.settings.ack_wait(),
                    )
                }),
            };
            let holder = crate::code::Holder {
                instance: worker.instance.clone(),
                seq,
                attempt,
            };
            let alive = alive(&message, worker.cluster.settings.heartbeat);
            let (executed, touched) =
                crate::code::execute(place, &run.key, holder, wire, &cancel, alive).await;
            calls = touched;
            match executed {
                Ok(outcome) => Outcome::Code {
                    outcome: Box::new(outcome),
                },
                Err(error) => Outcome::Err { error },
            }
        }
        (Some(_), None) => Outcome::Err {
            error: internal("this worker does not run code"),
        },
        (None, _) => match run.unit.clone() {
            Some(unit) => execute_unit(worker, &run.key, *unit, callback, &message, cancel).await,
            None => execute(worker, &run, &reply, &message, cancel).await,
        },
    };
    let outcome = fit(worker, &run, outcome);
    if record(worker, &run, revision, outcome, &reply, &message, last).await && !calls.is_empty() {
        crate::code::forget_calls(&worker.cluster.journal, &calls).await;
    }
}

/// What one journal entry may hold: the server's payload limit, less room
/// for the envelope.
fn max_entry(worker: &Worker) -> usize {
    worker
        .cluster
        .client
        .server_info()
        .max_payload
        .saturating_sub(1024)
}

/// Runs only where they were sent: a tool of this worker's namespaces on
/// its namespace's subject, a script on the code subject of a code worker.
fn admissible(worker: &Worker, run: &RunRequest, message: &Message) -> Result<(), Error> {
    let names = &worker.cluster.names;
    let subject = message.subject.as_str();
    let refuse = |reason: String| Error::NotAllowed {
        tool: run.tool.clone(),
        reason,
    };
    if run.code.is_some() && run.unit.is_some() {
        return Err(refuse("a run is a code run or a unit, not both".into()));
    }
    if let Some(unit) = &run.unit {
        let profile = unit.profile;
        if run.tool != crate::client::UNIT_LABEL
            || !worker.units.contains(&profile)
            || subject != names.unit_runs(profile)
        {
            return Err(refuse(format!(
                "worker {} does not run {} units sent on {subject}",
                worker.id,
                profile.as_str()
            )));
        }
        if !matches!(unit.unit.kind(), UnitKind::Command | UnitKind::Script) {
            return Err(refuse(format!(
                "worker {} runs command and script units, not {}",
                worker.id,
                unit.unit.kind().as_str()
            )));
        }
        // Whoever may publish units gets no more than the worker allows.
        worker.unit_ceilings.check(&unit.limits)?;
        if unit.limits.network != NetworkPolicy::Off {
            return Err(Error::invalid_request(
                "limits.network",
                "units sent to the fleet run without network",
            ));
        }
        return Ok(());
    }
    if run.code.is_some() {
        if run.tool != crate::client::CODE_LABEL {
            return Err(refuse(format!("a code run is labelled {:?}", run.tool)));
        }
        return match worker.code {
            Some(profile) if subject == names.code_runs(profile) => Ok(()),
            _ => Err(refuse(format!(
                "worker {} does not run code sent on {subject}",
                worker.id
            ))),
        };
    }
    let namespace = toolexec::ToolIdRef::parse(&run.tool)
        .map_err(|e| refuse(e.to_string()))?
        .namespace;
    let served = worker.namespaces.iter().any(|n| n == namespace);
    if !served || subject != names.runs(namespace) {
        return Err(refuse(format!(
            "worker {} serves namespaces {:?}, and this run came on {subject}",
            worker.id, worker.namespaces
        )));
    }
    Ok(())
}

/// A run key as callers make them: KV-key and subject-token safe.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Back to the queue, for another worker or a later try: no sooner than a
/// heartbeat, so a short outage does not use up the deliveries.
async fn retry_later(worker: &Worker, message: &Message) {
    let delay = worker.cluster.settings.heartbeat;
    let _ = message.ack_with(AckKind::Nak(Some(delay))).await;
}

/// The outcome as it can be recorded: one too large for a NATS message
/// becomes `limit_exceeded` (recorded, so it is never run again for want
/// of room).
fn fit(worker: &Worker, run: &RunRequest, outcome: Outcome) -> Outcome {
    let max = worker.cluster.client.server_info().max_payload;
    // Room for the journal entry's envelope.
    let size = serde_json::to_vec(&outcome).map_or(usize::MAX, |v| v.len()) + 1024;
    if size <= max {
        return outcome;
    }
    Outcome::Err {
        error: Error::limit_exceeded(
            LimitKind::OutputBytes,
            format!(
                "the result of {} ({size} bytes) is over the NATS server's max_payload \
                 ({max} bytes), so it cannot be recorded",
                run.tool
            ),
        )
        .to_body(),
    }
}

/// Records the outcome of the run held at `revision`, answers, acks.
/// True when the outcome is the run's, recorded.
async fn record(
    worker: &Worker,
    run: &RunRequest,
    revision: u64,
    outcome: Outcome,
    reply: &Reply<'_>,
    message: &Message,
    last: bool,
) -> bool {
    let finish = journal::finish(
        &worker.cluster.journal,
        &run.key,
        revision,
        &worker.id,
        &outcome,
    );
    // Renewed while recording (which retries for a few seconds when the
    // journal is slow), so the run is not delivered again meanwhile.
    let finished = tokio::select! {
        finished = finish => finished,
        () = alive(message, worker.cluster.settings.heartbeat) => unreachable!("renewing never ends"),
    };
    match finished {
        Ok(Finish::Recorded) => {
            reply.send(&Event::Done { outcome }).await;
            let _ = message.ack().await;
            return true;
        }
        Ok(Finish::Superseded(recorded)) => {
            reply.send(&Event::Done { outcome: recorded }).await;
            let _ = message.ack().await;
        }
        Ok(Finish::HeldElsewhere) => {
            // Taken over while this worker seemed lost: the holder
            // records, answers and settles the message.
            tracing::warn!(worker = %worker.id, key = %run.key, "the run was taken over");
        }
        Ok(Finish::Gone) => {
            tracing::warn!(worker = %worker.id, key = %run.key, "the run's journal entry expired");
            reply.send(&Event::Done { outcome }).await;
            let _ = message.ack().await;
        }
        Err(e) => {
            // The outcome could not be recorded: the caller still gets it,
            // and the message is delivered again, where the journal (still
            // `running`) decides; the last delivery settles it.
            tracing::error!(worker = %worker.id, key = %run.key, "{e}");
            reply.send(&Event::Done { outcome }).await;
            if last {
                let _ = message.ack_with(AckKind::Term).await;
            }
        }
    }
    false
}

/// Runs a caller's sandboxed unit on this worker's runtimes, its tool
/// calls going back to the caller (none without a callback subject),
/// telling JetStream every heartbeat that the run is alive.
async fn execute_unit(
    worker: &Worker,
    key: &str,
    unit: toolexec_runtime::RunRequest,
    callback: Option<String>,
    message: &Message,
    cancel: CancellationToken,
) -> Outcome {
    let tools = callback.map(|subject| {
        let callback = crate::callback::Callback::new(
            worker.cluster.client.clone(),
            subject,
            key,
            unit.limits.wall_time,
            worker.cluster.settings.ack_wait(),
        );
        Arc::new(crate::callback::UnitTools::new(callback)) as Arc<dyn toolexec::ToolAccess>
    });
    let mut ran = tokio::select! {
        ran = worker.runtimes.run_with_tools(unit, tools, cancel) => ran,
        () = alive(message, worker.cluster.settings.heartbeat) => unreachable!("renewing never ends"),
    };
    fit_output(&mut ran, max_entry(worker).saturating_sub(64 << 10));
    match serde_json::to_value(&ran) {
        Ok(outcome) => Outcome::Unit { outcome },
        Err(e) => Outcome::Err {
            error: internal(&format!("the unit's outcome does not serialize: {e}")),
        },
    }
}

/// Cuts a unit's stderr, then (if that is not enough) its stdout, each at
/// a character boundary and keeping its beginning, so the serialized
/// outcome fits in `room` bytes; the cut is reported in the outcome's
/// enforcement.
fn fit_output(outcome: &mut toolexec_runtime::RunOutcome, room: usize) {
    let fits =
        |o: &toolexec_runtime::RunOutcome| serde_json::to_vec(o).is_ok_and(|v| v.len() <= room);
    if fits(outcome) {
        return;
    }
    // Said first: the note is part of what must fit.
    outcome.enforcement.push(toolexec_runtime::Enforcement::by(
        LimitKind::Output,
        format!("cut to fit {room} bytes, the NATS server's max_payload, on the way back"),
    ));
    let floor = |t: &str, mut n: usize| {
        while !t.is_char_boundary(n) {
            n -= 1;
        }
        n
    };
    for stdout in [false, true] {
        let original = if stdout {
            std::mem::take(&mut outcome.stdout)
        } else {
            std::mem::take(&mut outcome.stderr)
        };
        // The longest prefix that fits (the serialized size grows with it).
        let (mut lo, mut hi) = (0, original.len());
        while lo < hi {
            let mid = floor(&original, (lo + hi).div_ceil(2));
            if mid <= lo {
                break;
            }
            let slot = if stdout {
                &mut outcome.stdout
            } else {
                &mut outcome.stderr
            };
            *slot = original[..mid].to_owned();
            if fits(outcome) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let keep = floor(&original, lo);
        let slot = if stdout {
            &mut outcome.stdout
        } else {
            &mut outcome.stderr
        };
        *slot = original[..keep].to_owned();
        if fits(outcome) {
            break;
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
    cancel: CancellationToken,
) -> Outcome {
    let options = RunOptions {
        timeout: run.timeout_ms.map(Duration::from_millis),
        cancel: Some(cancel),
        ..RunOptions::default()
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
    loop {
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
                RunResult::Tool(output) => return Outcome::Ok { output },
                RunResult::Chain(_) => {
                    return Outcome::Err {
                        error: internal("a tool run produced a chain result"),
                    };
                }
            },
            Some(StreamEvent::Error { error }) => return Outcome::Err { error },
            None => {
                return Outcome::Err {
                    error: internal("the run ended without a result"),
                };
            }
        }
    }
}

/// A run this process holds: cancellable by its caller, and known to the
/// claim (a stale copy of its message is left alone). Released on drop,
/// whatever way the run ends.
struct Holding<'a> {
    worker: &'a Worker,
    key: String,
}

impl<'a> Holding<'a> {
    fn new(worker: &'a Worker, key: &str, cancel: CancellationToken) -> Self {
        worker.state.cancels.lock().insert(key.to_owned(), cancel);
        Holding {
            worker,
            key: key.to_owned(),
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.worker.state.cancels.lock().remove(&self.key);
    }
}

/// Records and sends the outcome of a run that was never claimed (its
/// tool is not in this catalog), unless something is recorded already:
/// then the message goes back to the queue for whoever holds it.
async fn finish_unclaimed(
    worker: &Worker,
    run: &RunRequest,
    outcome: Outcome,
    reply: &Reply<'_>,
    message: &Message,
) {
    let done = Journal::Done {
        worker: worker.id.clone(),
        outcome: outcome.clone(),
    };
    let bytes = Bytes::from(serde_json::to_vec(&done).expect("journal entries serialize"));
    if worker
        .cluster
        .journal
        .create(run.key.as_str(), bytes)
        .await
        .is_ok()
    {
        reply.send(&Event::Done { outcome }).await;
        let _ = message.ack().await;
        return;
    }
    // Something is recorded: a result to send again, or a holder (of this
    // message, which settles it; of another with the same key).
    match journal::read(&worker.cluster.journal, &run.key).await {
        Ok(Some(Journal::Done { outcome, .. })) => {
            reply.send(&Event::Done { outcome }).await;
            let _ = message.ack().await;
        }
        Ok(Some(Journal::Running { seq, .. }))
            if message.info().is_ok_and(|i| i.stream_sequence == seq) => {}
        _ => {
            let _ = message.ack_with(AckKind::Term).await;
        }
    }
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
    Error::backend_unavailable("fleet", message).to_body()
}

/// The caller's reply subject, if it gave a usable one.
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

#[cfg(test)]
mod tests {
    use super::*;
    use toolexec_runtime::{RunOutcome, RunStatus};

    #[test]
    fn unit_output_is_cut_to_fit_and_says_so() {
        let mut outcome = RunOutcome::new("bubblewrap", RunStatus::Ok);
        // Escaped in JSON: six bytes each.
        outcome.stdout = "\u{1b}".repeat(200);
        outcome.stderr = "x".repeat(50);
        let room = 700;
        fit_output(&mut outcome, room);
        assert!(serde_json::to_vec(&outcome).unwrap().len() <= room);
        assert!(outcome.stderr.is_empty(), "stderr goes first");
        assert!(!outcome.stdout.is_empty());
        assert!(outcome.enforcement[0].mechanism.contains("max_payload"));
        let mut small = RunOutcome::new("bubblewrap", RunStatus::Ok);
        small.stdout = "ok".into();
        fit_output(&mut small, 251);
        assert_eq!(small.stdout, "ok");
        assert!(small.enforcement.is_empty());
    }
}
