//! `toolexec worker`: pulls the runs of its namespaces from the cluster's
//! work stream and runs them on its own catalog, at most `capacity` at a
//! time, journaling each so a redelivery never runs a call twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use toolexec::{Error, Exec};
use toolexec_runtime::{LimitCeilings, Profile, Runtimes, UnitKind};

use crate::cluster::{Cluster, unavailable};
use crate::run;
use crate::settings::check_token;
use crate::wire::{Advert, ToolDef};

/// Most runs one pull asks for.
const MAX_BATCH: usize = 256;

/// What a worker serves.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its id in adverts and journals (default: host name and pid).
    pub id: Option<String>,
    /// Namespaces whose runs it pulls; each must have tools in its catalog.
    pub namespaces: Vec<String>,
    /// Runs at a time.
    pub capacity: usize,
    /// Also run code-mode scripts (durable code runs) of this profile, on
    /// this worker's catalog: `standard` in process, `hardened` in a
    /// sandbox runtime of [`WorkerOptions::runtimes`] (checked at start).
    pub code: Option<Profile>,
    /// Also run callers' sandboxed command units of these profiles, on
    /// [`WorkerOptions::runtimes`] (each checked at start).
    pub units: Vec<Profile>,
    /// The most a unit's limits may ask for (a unit above them, or with
    /// network, is refused and never run).
    pub unit_ceilings: LimitCeilings,
    /// The sandbox runtimes of hardened code runs and of units.
    pub runtimes: Option<Arc<Runtimes>>,
}

/// A worker, connected and with its consumers in place.
pub struct Worker {
    pub(crate) cluster: Cluster,
    pub(crate) exec: Exec,
    pub(crate) id: String,
    /// This process's instance (a restarted worker with the same id is
    /// another instance): journal entries name the instance holding a run.
    pub(crate) instance: String,
    pub(crate) namespaces: Vec<String>,
    consumers: Vec<(String, PullConsumer)>,
    capacity: usize,
    /// The profile of the code runs it takes.
    pub(crate) code: Option<Profile>,
    /// Runs code runs' scripts, bounding how many run at once (`code`).
    pub(crate) runner: Option<toolexec_code::CodeRunner>,
    /// The profiles of the units it takes.
    pub(crate) units: Vec<Profile>,
    /// Where units run.
    pub(crate) runtimes: Arc<Runtimes>,
    /// The most a unit may ask for.
    pub(crate) unit_ceilings: LimitCeilings,
    /// The consumers' delivery limit: the last delivery settles a run.
    pub(crate) max_deliver: i64,
    pub(crate) state: Arc<State>,
}

/// Counters and the cancellation of each run in flight.
#[derive(Debug, Default)]
pub(crate) struct State {
    in_flight: AtomicUsize,
    done: AtomicU64,
    draining: AtomicBool,
    pub(crate) cancels: Mutex<HashMap<String, CancellationToken>>,
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerReport {
    /// Runs it finished (including ones it found already finished).
    pub runs: u64,
}

impl Worker {
    /// Checks `options` against `exec`'s catalog and creates (or checks) the
    /// consumer of each namespace.
    pub async fn start(
        cluster: Cluster,
        exec: Exec,
        options: WorkerOptions,
    ) -> Result<Worker, Error> {
        if options.namespaces.is_empty() && options.code.is_none() && options.units.is_empty() {
            return Err(Error::invalid_request(
                "worker.namespaces",
                "name at least one namespace to serve (or run code, or units)",
            ));
        }
        if options.capacity == 0 || options.capacity > 10_000 {
            return Err(Error::invalid_request(
                "worker.capacity",
                "must be between 1 and 10000",
            ));
        }
        let tools = exec.catalog().all();
        for ns in &options.namespaces {
            check_token("worker.namespaces", ns)?;
            if !tools.iter().any(|t| t.tool().namespace() == ns) {
                return Err(Error::invalid_request(
                    "worker.namespaces",
                    format!("this worker's catalog has no tool in namespace {ns:?}"),
                ));
            }
        }
        let id = match options.id {
            Some(id) => {
                check_token("worker.id", &id)?;
                id
            }
            None => format!("{}-{}", host_name(), std::process::id()),
        };
        let names = &cluster.names;
        let stream = cluster
            .js
            .get_stream(names.stream())
            .await
            .map_err(|e| unavailable(format!("stream {}: {e}", names.stream())))?;
        let mut consumers = Vec::new();
        let mut consumer_max_deliver = cluster.settings.max_deliver;
        let mut queues: Vec<(String, String, String)> = options
            .namespaces
            .iter()
            .map(|ns| (ns.clone(), names.consumer(ns), names.runs(ns)))
            .collect();
        if let Some(profile) = options.code {
            if profile == Profile::Hardened {
                // Never labelled hardened without a runtime that is.
                let runtimes = options.runtimes.clone().unwrap_or_default();
                runtimes.select(profile, UnitKind::Script).map_err(|e| {
                    Error::invalid_request(
                        "worker.code_profile",
                        format!("this machine cannot run hardened scripts: {}", reason(&e)),
                    )
                })?;
            }
            queues.push((
                format!("code ({})", profile.as_str()),
                names.code_consumer(profile),
                names.code_runs(profile),
            ));
        }
        let runtimes = options.runtimes.clone().unwrap_or_default();
        for &profile in &options.units {
            // Never takes a unit of a profile no runtime here enforces.
            for kind in [UnitKind::Command, UnitKind::Script] {
                runtimes.select(profile, kind).map_err(|e| {
                    Error::invalid_request(
                        "worker.unit_profiles",
                        format!(
                            "this machine cannot run {} {} units: {}",
                            profile.as_str(),
                            kind.as_str(),
                            reason(&e)
                        ),
                    )
                })?;
            }
            queues.push((
                format!("units ({})", profile.as_str()),
                names.unit_consumer(profile),
                names.unit_runs(profile),
            ));
        }
        for (ns, durable, subject) in queues {
            let config = pull::Config {
                durable_name: Some(durable.clone()),
                description: Some(format!("toolexec: runs of {ns}")),
                filter_subject: subject,
                ack_policy: AckPolicy::Explicit,
                ack_wait: cluster.settings.ack_wait(),
                max_deliver: cluster.settings.max_deliver,
                max_ack_pending: -1,
                ..Default::default()
            };
            let (ack_wait, max_deliver) = (config.ack_wait, config.max_deliver);
            let consumer: PullConsumer = stream
                .get_or_create_consumer(&durable, config)
                .await
                .map_err(|e| unavailable(format!("consumer {durable}: {e}")))?;
            let have = &consumer.cached_info().config;
            // The consumer's limit is the one JetStream applies.
            if have.max_deliver > 0 {
                consumer_max_deliver = consumer_max_deliver.min(have.max_deliver);
            }
            if have.ack_wait != ack_wait || have.max_deliver != max_deliver {
                tracing::warn!(
                    consumer = %durable,
                    "the consumer's ack wait ({:?}) or max_deliver ({}) differ from this \
                     worker's heartbeat-derived {ack_wait:?} and {max_deliver}: the cluster's \
                     members disagree on heartbeat or max_deliver, and the consumer's are in force",
                    have.ack_wait,
                    have.max_deliver
                );
            }
            consumers.push((ns, consumer));
        }
        let instance = format!("{id}.{}", crate::client::random_key());
        let runner = options.code.map(|profile| {
            toolexec_code::CodeRunner::new(
                exec.clone(),
                profile,
                options.runtimes.clone(),
                options.capacity,
            )
        });
        let worker = Worker {
            cluster,
            exec,
            id,
            instance,
            namespaces: options.namespaces,
            consumers,
            capacity: options.capacity,
            code: options.code,
            runner,
            units: options.units,
            runtimes,
            unit_ceilings: options.unit_ceilings,
            max_deliver: consumer_max_deliver,
            state: Arc::default(),
        };
        // Advertised from the start: a caller attaching once this returns
        // finds the worker's tools.
        worker.renew_advert().await?;
        Ok(worker)
    }

    /// Puts the worker's advert (its tools, load and state).
    async fn renew_advert(&self) -> Result<(), Error> {
        let advert = serde_json::to_vec(&self.advert())
            .map_err(|e| unavailable(format!("worker advert: {e}")))?;
        self.cluster
            .workers
            .put(self.id.as_str(), Bytes::from(advert))
            .await
            .map_err(|e| unavailable(format!("worker advert: {e}")))?;
        Ok(())
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Serves runs until `shutdown`, then drains: takes nothing new,
    /// finishes the runs in flight, withdraws its advert.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, Error> {
        let worker = Arc::new(self);
        let slots = Arc::new(Semaphore::new(worker.capacity));
        let stop = CancellationToken::new();
        let adverts = tokio::spawn(advertise(worker.clone(), stop.clone()));
        let cancels = tokio::spawn(listen_for_cancels(worker.clone(), stop.clone()));
        let mut pulls = Vec::new();
        for (ns, consumer) in &worker.consumers {
            pulls.push(tokio::spawn(pull_loop(
                worker.clone(),
                ns.clone(),
                consumer.clone(),
                slots.clone(),
                shutdown.clone(),
            )));
        }
        shutdown.cancelled().await;
        worker.state.draining.store(true, Ordering::SeqCst);
        tracing::info!(worker = %worker.id, "draining: finishing the runs in flight");
        for pull in pulls {
            let _ = pull.await;
        }
        // Every slot back: no run is in flight.
        let _all = slots
            .acquire_many(worker.capacity as u32)
            .await
            .map_err(|_| unavailable("worker slots closed"))?;
        stop.cancel();
        let _ = adverts.await;
        let _ = cancels.await;
        let _ = worker.cluster.workers.purge(worker.id.as_str()).await;
        let _ = worker.cluster.client.flush().await;
        Ok(WorkerReport {
            runs: worker.state.done.load(Ordering::SeqCst),
        })
    }

    fn advert(&self) -> Advert {
        let tools = self
            .exec
            .catalog()
            .all()
            .iter()
            .filter(|t| self.namespaces.iter().any(|ns| ns == t.tool().namespace()))
            .map(|t| ToolDef::of(t.tool()))
            .collect();
        Advert {
            id: self.id.clone(),
            instance: self.instance.clone(),
            host: host_name(),
            pid: std::process::id(),
            namespaces: self.namespaces.clone(),
            capacity: self.capacity,
            in_flight: self.state.in_flight.load(Ordering::SeqCst),
            done: self.state.done.load(Ordering::SeqCst),
            draining: self.state.draining.load(Ordering::SeqCst),
            code: self.code.map(|p| p.as_str().to_owned()),
            units: self.units.iter().map(|p| p.as_str().to_owned()).collect(),
            runtimes: self
                .runtimes
                .list()
                .into_iter()
                .filter(|r| r.available)
                .filter_map(|r| Some(format!("{}:{}", r.name, r.profiles.iter().max()?.as_str())))
                .collect(),
            tools,
        }
    }
}

/// Pulls runs of one namespace while slots are free, until `shutdown`.
async fn pull_loop(
    worker: Arc<Worker>,
    ns: String,
    consumer: PullConsumer,
    slots: Arc<Semaphore>,
    shutdown: CancellationToken,
) {
    // A pull request waits this long for runs before it is renewed; drain
    // waits for the one outstanding at most this long.
    let expires = worker
        .cluster
        .settings
        .heartbeat
        .max(Duration::from_secs(1));
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        // Slots reserved before asking: at least one, and the pull asks
        // for as many runs as it holds slots, so no run waits here
        // unrenewed (the namespaces' loops share the slots).
        let first = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let mut permits = vec![first];
        // A fair share of the slots per pull, so an idle queue's waiting
        // pull does not hold the slots a busy one needs.
        let share = (worker.capacity / worker.consumers.len().max(1)).clamp(1, MAX_BATCH);
        while permits.len() < share {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let batch = consumer
            .batch()
            .max_messages(permits.len())
            .expires(expires)
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => {
                failures = 0;
                b
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(worker = %worker.id, namespace = %ns, "pulling runs failed: {e}");
                drop(permits);
                tokio::time::sleep(Duration::from_millis(200 * u64::from(failures.min(10)))).await;
                continue;
            }
        };
        // The server ends a pull request when it expires; one lost to a
        // server restart never ends, so the worker stops waiting on it
        // itself (async-nats waits five more seconds).
        let deadline = tokio::time::Instant::now() + expires + Duration::from_millis(250);
        loop {
            let next = tokio::select! {
                next = tokio::time::timeout_at(deadline, batch.next()) => next,
                // Draining: the batch is dropped; a run the server sends
                // to it meanwhile is delivered again after the ack wait.
                () = shutdown.cancelled() => break,
            };
            let message = match next {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => {
                    tracing::debug!(worker = %worker.id, namespace = %ns, "pull: {e}");
                    continue;
                }
                Ok(None) | Err(_) => break,
            };
            let Some(permit) = permits.pop() else {
                // More than asked for: back to the queue at once.
                let _ = message.ack_with(AckKind::Nak(None)).await;
                continue;
            };
            let worker = worker.clone();
            worker.state.in_flight.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                run::handle(&worker, message).await;
                worker.state.in_flight.fetch_sub(1, Ordering::SeqCst);
                worker.state.done.fetch_add(1, Ordering::SeqCst);
                drop(permit);
            });
        }
    }
}

/// Renews the worker's advert every heartbeat until `stop`.
async fn advertise(worker: Arc<Worker>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(worker.cluster.settings.heartbeat);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        if let Err(e) = worker.renew_advert().await {
            tracing::warn!(worker = %worker.id, "{e}");
        }
    }
}

/// Cancels runs in flight whose callers gave up.
async fn listen_for_cancels(worker: Arc<Worker>, stop: CancellationToken) {
    let subject = worker.cluster.names.all_cancels();
    let mut subscription = match worker.cluster.client.subscribe(subject).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(worker = %worker.id, "cancellations will not reach this worker: {e}");
            return;
        }
    };
    loop {
        let message = tokio::select! {
            m = subscription.next() => match m {
                Some(m) => m,
                None => return,
            },
            () = stop.cancelled() => return,
        };
        let key = message.subject.rsplit('.').next().unwrap_or_default();
        if let Some(cancel) = worker.state.cancels.lock().get(key) {
            cancel.cancel();
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// An error's message without its code, to give as another error's
/// reason (a code is never wrapped inside another).
fn reason(e: &toolexec::ErrorBody) -> &str {
    e.message
        .strip_prefix(e.code.as_str())
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(&e.message)
}
