//! The run journal: who runs a run, and how it ended. Every change is a
//! compare-and-set on the entry's revision, so two workers holding the
//! same run (a redelivery while the first still ran) never both record it.

use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, UpdateErrorKind};
use bytes::Bytes;
use serde_json::json;
use toolexec::{ErrorBody, ErrorCode};

use crate::cluster::{Cluster, unavailable};
use crate::wire::{Journal, Outcome, RunRequest, now_ms};

/// What a worker may do with a run it was handed.
#[derive(Debug)]
pub(crate) enum Claim {
    /// Run it: the journal says this worker holds attempt `attempt`, at
    /// `revision`.
    Run { revision: u64, attempt: u32 },
    /// It already ended (a retry or a redelivery): send this outcome again.
    Finished(Outcome),
    /// Another worker runs this key, from another message (the same key
    /// published again after the duplicate window): this copy is acked,
    /// the holder records the result.
    Elsewhere,
    /// A stale copy of a message another delivery holds (or this worker
    /// still runs): left alone, neither acked nor refused, since an ack
    /// would settle the message for its holder.
    Ignore,
}

/// One delivery of a run message to this worker.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delivery<'a> {
    /// The worker's id, for people.
    pub(crate) worker: &'a str,
    /// This process's instance of the worker (a restarted worker with the
    /// same id is another instance).
    pub(crate) instance: &'a str,
    /// The message's stream sequence: the same for every delivery of it.
    pub(crate) seq: u64,
    /// JetStream's count of deliveries of the message (1 the first time).
    pub(crate) delivered: i64,
    /// The consumer's delivery limit (the last delivery settles the run).
    pub(crate) max_deliver: i64,
}

/// Claims `run` for this delivery. `rerunnable`: whether a run whose
/// worker was lost may run again (an idempotent tool; a code run, which
/// replays its journal), else it ends `interrupted`. `holds` says whether
/// this process is running the key now.
pub(crate) async fn claim(
    cluster: &Cluster,
    at: Delivery<'_>,
    run: &RunRequest,
    rerunnable: bool,
    holds: impl Fn(&str) -> bool,
) -> Result<Claim, toolexec::Error> {
    let store = &cluster.journal;
    if at.delivered <= 1 {
        // The common case, in one round trip: nothing recorded yet.
        match store.create(run.key.as_str(), running(at, 1, run)).await {
            Ok(revision) => {
                return Ok(Claim::Run {
                    revision,
                    attempt: 1,
                });
            }
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(unavailable(format!("journal write: {e}"))),
        }
    }
    for _ in 0..5 {
        let entry = store
            .entry(run.key.as_str())
            .await
            .map_err(|e| unavailable(format!("journal read: {e}")))?;
        let entry = entry.filter(|e| e.operation == Operation::Put);
        let Some(entry) = entry else {
            match store.create(run.key.as_str(), running(at, 1, run)).await {
                Ok(revision) => {
                    return Ok(Claim::Run {
                        revision,
                        attempt: 1,
                    });
                }
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => continue,
                Err(e) => return Err(unavailable(format!("journal write: {e}"))),
            }
        };
        let journal: Journal = match serde_json::from_slice(&entry.value) {
            Ok(j) => j,
            Err(e) => {
                return Err(unavailable(format!(
                    "journal entry {} is unreadable: {e}",
                    run.key
                )));
            }
        };
        let next = match journal {
            Journal::Done { outcome, .. } => return Ok(Claim::Finished(outcome)),
            Journal::Running {
                instance,
                seq,
                attempt,
                ..
            } if instance == at.instance && seq == at.seq => {
                if holds(&run.key) {
                    return Ok(Claim::Ignore);
                }
                if at.delivered <= 1 {
                    // Our own create landed though its answer was lost.
                    return Ok(Claim::Run {
                        revision: entry.revision,
                        attempt,
                    });
                }
                lost(at, run, rerunnable, &entry.value)?
            }
            Journal::Running { seq, .. } if seq == at.seq && at.delivered <= 1 => {
                return Ok(Claim::Ignore);
            }
            // Another message with this key (published again after the
            // duplicate window): its own deliveries settle the run.
            Journal::Running { seq, .. } if seq != at.seq => return Ok(Claim::Elsewhere),
            Journal::Running { .. } => lost(at, run, rerunnable, &entry.value)?,
        };
        match store
            .update(run.key.as_str(), encode(&next), entry.revision)
            .await
        {
            Ok(revision) => {
                return Ok(match next {
                    Journal::Running { attempt, .. } => Claim::Run { revision, attempt },
                    Journal::Done { outcome, .. } => Claim::Finished(outcome),
                });
            }
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => continue,
            Err(e) => return Err(unavailable(format!("journal write: {e}"))),
        }
    }
    Err(unavailable(format!(
        "journal entry {} kept changing while it was claimed",
        run.key
    )))
}

/// The next entry of a run whose previous holder was lost: another
/// attempt by this worker, or `interrupted`.
fn lost(
    at: Delivery<'_>,
    run: &RunRequest,
    rerunnable: bool,
    recorded: &[u8],
) -> Result<Journal, toolexec::Error> {
    let Ok(Journal::Running {
        worker: lost,
        attempt,
        started_ms,
        ..
    }) = serde_json::from_slice::<Journal>(recorded)
    else {
        return Err(unavailable("journal entry changed shape"));
    };
    let out_of_deliveries = at.delivered >= at.max_deliver;
    if rerunnable && !out_of_deliveries {
        return Ok(Journal::Running {
            worker: at.worker.to_owned(),
            instance: at.instance.to_owned(),
            seq: at.seq,
            attempt: attempt + 1,
            tool: run.tool.clone(),
            started_ms: now_ms(),
        });
    }
    let why = if out_of_deliveries {
        format!(
            "it was delivered {} times, the cluster's max_deliver",
            at.delivered
        )
    } else {
        "the tool is not marked idempotent or read-only, so it was not run again".to_owned()
    };
    Ok(Journal::Done {
        worker: at.worker.to_owned(),
        outcome: Outcome::Err {
            error: interrupted(&run.tool, &lost, attempt, started_ms, &why),
        },
    })
}

/// How recording an outcome went.
#[derive(Debug)]
pub(crate) enum Finish {
    /// Recorded: this outcome is the run's.
    Recorded,
    /// Another worker took the run over and recorded first: every caller
    /// gets that outcome.
    Superseded(Outcome),
    /// Another worker holds the run now (it took it over): it records and
    /// settles it; this worker must not acknowledge the message.
    HeldElsewhere,
    /// The entry is gone (expired): nothing to compare with; the run ran
    /// here, so the message is settled.
    Gone,
}

/// Records how the run held at `revision` ended.
pub(crate) async fn finish(
    store: &kv::Store,
    key: &str,
    revision: u64,
    worker: &str,
    outcome: &Outcome,
) -> Result<Finish, toolexec::Error> {
    let done = encode(&Journal::Done {
        worker: worker.to_owned(),
        outcome: outcome.clone(),
    });
    let mut delay = Duration::from_millis(50);
    let mut last = String::new();
    for _ in 0..8 {
        match store.update(key, done.clone(), revision).await {
            Ok(_) => return Ok(Finish::Recorded),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                return Ok(match read(store, key).await? {
                    Some(Journal::Done { outcome, .. }) => Finish::Superseded(outcome),
                    Some(Journal::Running { .. }) => Finish::HeldElsewhere,
                    None => Finish::Gone,
                });
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
    Err(unavailable(format!("journal write: {last}")))
}

/// The journal entry of `key`, if any.
pub(crate) async fn read(store: &kv::Store, key: &str) -> Result<Option<Journal>, toolexec::Error> {
    Ok(read_entry(store, key).await?.map(|(journal, _)| journal))
}

/// Settles a run whose holder is gone for good (no advert for longer than
/// every delivery could take): a run whose last delivery's worker died is
/// never delivered again, so its caller ends it `interrupted`, by
/// compare-and-set on the entry it read (a holder that comes back, or a
/// redelivery claimed meanwhile, wins instead). The outcome then recorded.
pub(crate) async fn abandon_lost(
    store: &kv::Store,
    key: &str,
    revision: u64,
    held: &Journal,
) -> Result<Option<Outcome>, toolexec::Error> {
    let Journal::Running {
        worker,
        attempt,
        tool,
        started_ms,
        ..
    } = held
    else {
        return Ok(None);
    };
    let outcome = Outcome::Err {
        error: interrupted(
            tool,
            worker,
            *attempt,
            *started_ms,
            "the worker is gone and no delivery of the run remains",
        ),
    };
    let done = encode(&Journal::Done {
        worker: worker.clone(),
        outcome: outcome.clone(),
    });
    match store.update(key, done, revision).await {
        Ok(_) => Ok(Some(outcome)),
        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
            Ok(match read(store, key).await? {
                Some(Journal::Done { outcome, .. }) => Some(outcome),
                _ => None,
            })
        }
        Err(e) => Err(unavailable(format!("journal write: {e}"))),
    }
}

/// The journal entry of `key` with its revision, if any.
pub(crate) async fn read_entry(
    store: &kv::Store,
    key: &str,
) -> Result<Option<(Journal, u64)>, toolexec::Error> {
    let entry = store
        .entry(key)
        .await
        .map_err(|e| unavailable(format!("journal read: {e}")))?;
    Ok(entry
        .filter(|e| e.operation == Operation::Put)
        .and_then(|e| Some((serde_json::from_slice(&e.value).ok()?, e.revision))))
}

/// The `interrupted` error of a run whose worker was lost.
fn interrupted(tool: &str, worker: &str, attempt: u32, started_ms: u64, why: &str) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::Interrupted,
        message: format!(
            "interrupted: tool {tool}: worker {worker} was lost during attempt {attempt}, \
             so the call may or may not have taken effect; {why}"
        ),
        details: Some(json!({
            "journal": [{
                "worker": worker,
                "attempt": attempt,
                "started_ms": started_ms,
                "tool": tool,
                "state": "lost",
            }],
        })),
    }
}

fn running(at: Delivery<'_>, attempt: u32, run: &RunRequest) -> Bytes {
    encode(&Journal::Running {
        worker: at.worker.to_owned(),
        instance: at.instance.to_owned(),
        seq: at.seq,
        attempt,
        tool: run.tool.clone(),
        started_ms: now_ms(),
    })
}

fn encode(journal: &Journal) -> Bytes {
    Bytes::from(serde_json::to_vec(journal).expect("journal entries serialize"))
}
