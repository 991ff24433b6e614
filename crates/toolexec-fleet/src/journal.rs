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
    /// Another worker is running it (the same key published again after
    /// the duplicate window): that worker records the result.
    Elsewhere,
}

/// Claims `run` for `worker`. `delivered` counts JetStream's deliveries of
/// this message (1 the first time). `rerunnable`: whether a run whose
/// worker was lost may run again (an idempotent tool; a code run, which
/// replays its journal), else it ends `interrupted`.
pub(crate) async fn claim(
    cluster: &Cluster,
    worker: &str,
    run: &RunRequest,
    rerunnable: bool,
    delivered: i64,
) -> Result<Claim, toolexec::Error> {
    let store = &cluster.journal;
    if delivered <= 1 {
        // The common case, in one round trip: nothing recorded yet.
        match store
            .create(run.key.as_str(), running(worker, 1, run))
            .await
        {
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
            match store
                .create(run.key.as_str(), running(worker, 1, run))
                .await
            {
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
            Journal::Running { .. } if delivered <= 1 => return Ok(Claim::Elsewhere),
            Journal::Running {
                worker: lost,
                attempt,
                started_ms,
                ..
            } => {
                let out_of_deliveries = delivered >= cluster.settings.max_deliver;
                if rerunnable && !out_of_deliveries {
                    Journal::Running {
                        worker: worker.to_owned(),
                        attempt: attempt + 1,
                        tool: run.tool.clone(),
                        started_ms: now_ms(),
                    }
                } else {
                    let why = if out_of_deliveries {
                        format!("it was delivered {delivered} times, the cluster's max_deliver")
                    } else {
                        "the tool is not marked idempotent or read-only, so it was not run again"
                            .to_owned()
                    };
                    Journal::Done {
                        worker: worker.to_owned(),
                        outcome: Outcome::Err {
                            error: interrupted(&run.tool, &lost, attempt, started_ms, &why),
                        },
                    }
                }
            }
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

/// Records how the run held at `revision` ended. `Ok(None)` when it was
/// recorded; `Ok(Some(outcome))` when another worker took the run over and
/// recorded its own outcome (the one every caller gets).
pub(crate) async fn finish(
    store: &kv::Store,
    key: &str,
    revision: u64,
    worker: &str,
    outcome: &Outcome,
) -> Result<Option<Outcome>, toolexec::Error> {
    let done = encode(&Journal::Done {
        worker: worker.to_owned(),
        outcome: outcome.clone(),
    });
    let mut delay = Duration::from_millis(50);
    let mut last = String::new();
    for _ in 0..8 {
        match store.update(key, done.clone(), revision).await {
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                return Ok(match read(store, key).await? {
                    Some(Journal::Done { outcome, .. }) => Some(outcome),
                    _ => None,
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
    let entry = store
        .entry(key)
        .await
        .map_err(|e| unavailable(format!("journal read: {e}")))?;
    Ok(entry
        .filter(|e| e.operation == Operation::Put)
        .and_then(|e| serde_json::from_slice(&e.value).ok()))
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

fn running(worker: &str, attempt: u32, run: &RunRequest) -> Bytes {
    encode(&Journal::Running {
        worker: worker.to_owned(),
        attempt,
        tool: run.tool.clone(),
        started_ms: now_ms(),
    })
}

fn encode(journal: &Journal) -> Bytes {
    Bytes::from(serde_json::to_vec(journal).expect("journal entries serialize"))
}
