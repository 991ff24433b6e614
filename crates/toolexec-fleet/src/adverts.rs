//! Worker adverts on the caller's side: which workers are alive and what
//! they run, and the tools they advertise imported into the catalog, each
//! with the backend that sends its calls to the fleet.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use toolexec::{Availability, Backend, BoxFuture, Call, Catalog, Error, ToolOutput};
use toolexec_runtime::Profile;

use crate::client::{FleetClient, hex};
use parking_lot::Mutex;

use crate::cluster::{Cluster, unavailable};
use crate::wire::Advert;

/// Which workers a call needs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Serving<'a> {
    Namespace(&'a str),
    Code(Profile),
    Unit(Profile),
}

/// Every advert in the bucket: those there are fresh (the bucket expires
/// the rest). Unreadable ones are skipped, with a warning.
pub(crate) async fn read_all(cluster: &Cluster) -> Result<Vec<Advert>, Error> {
    let mut keys = cluster
        .workers
        .keys()
        .await
        .map_err(|e| unavailable(format!("worker adverts: {e}")))?;
    let mut adverts = Vec::new();
    while let Some(key) = keys.next().await {
        let Ok(key) = key else { continue };
        if let Ok(Some(value)) = cluster.workers.get(key.as_str()).await
            && let Some(advert) = parse(&value)
        {
            adverts.push(advert);
        }
    }
    Ok(adverts)
}

fn parse(value: &[u8]) -> Option<Advert> {
    serde_json::from_slice(value)
        .map_err(|e| tracing::warn!("unreadable worker advert: {e}"))
        .ok()
}

/// A worker as its adverts show it.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    seen: Instant,
    instance: String,
    namespaces: Vec<String>,
    draining: bool,
    code: Option<String>,
    /// The profiles of the units it runs.
    units: Vec<String>,
    /// Digest of the tools it offers.
    offer: String,
}

/// Most tools one advert may offer.
const MAX_ADVERTISED_TOOLS: usize = 10_000;

fn offer_digest(advert: &Advert) -> String {
    let mut h = Sha256::new();
    for t in &advert.tools {
        h.update(t.id.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize()[..8])
}

impl FleetClient {
    /// Imports the tools the live workers advertise in `namespaces` into
    /// `catalog`, and keeps importing as workers come. A tool the catalog
    /// already has (a local one) stays local, with a warning.
    pub async fn attach(
        cluster: Cluster,
        namespaces: Vec<String>,
        catalog: Arc<Catalog>,
    ) -> Result<Arc<FleetClient>, Error> {
        for ns in &namespaces {
            crate::settings::check_token("cluster.namespaces", ns)?;
        }
        let client = Arc::new(FleetClient {
            cluster,
            namespaces,
            live: Mutex::default(),
            catalog: Arc::downgrade(&catalog),
            last_read: tokio::sync::Mutex::default(),
        });
        client.read_adverts().await?;
        tokio::spawn(watch_adverts(Arc::downgrade(&client), catalog));
        Ok(client)
    }

    /// Reads every advert in the bucket (those there are fresh: the
    /// bucket expires the rest), as a start and when the watch has nothing
    /// fresh (it is re-established after a reconnect).
    pub(crate) async fn read_adverts(self: &Arc<Self>) -> Result<(), Error> {
        let Some(catalog) = self.catalog.upgrade() else {
            return Ok(());
        };
        for advert in read_all(&self.cluster).await? {
            self.observe(advert, &catalog);
        }
        Ok(())
    }

    /// Live workers serving `namespace`, reading the adverts again when
    /// none is known to be: at most once a heartbeat, one reader at a time
    /// (a flood of calls for a namespace without workers costs NATS one
    /// scan a heartbeat).
    pub(crate) async fn live_now(self: &Arc<Self>, of: Serving<'_>) -> usize {
        let count = |c: &Self| match of {
            Serving::Namespace(ns) => c.live_workers(ns),
            Serving::Code(profile) => c.live_code_workers(profile),
            Serving::Unit(profile) => c.live_unit_workers(profile),
        };
        if count(self) == 0 {
            let mut last = self.last_read.lock().await;
            let stale = last.is_none_or(|at| at.elapsed() >= self.cluster.settings.heartbeat);
            if count(self) == 0 && stale {
                let _ = self.read_adverts().await;
                *last = Some(Instant::now());
            }
        }
        count(self)
    }

    /// Live workers serving `namespace` now.
    pub fn live_workers(&self, namespace: &str) -> usize {
        self.live_taking(|l| l.namespaces.iter().any(|n| n == namespace))
    }

    /// Live workers, not draining, that `takes`.
    fn live_taking(&self, takes: impl Fn(&Live) -> bool) -> usize {
        let fresh = self.cluster.settings.ack_wait();
        self.live
            .lock()
            .values()
            .filter(|l| l.seen.elapsed() < fresh && !l.draining && takes(l))
            .count()
    }

    /// Registers what one advert offers and notes the worker alive.
    fn observe(self: &Arc<Self>, advert: Advert, catalog: &Arc<Catalog>) {
        // Tools are imported when a worker comes or its list changes.
        let offer = offer_digest(&advert);
        let known = {
            let mut live = self.live.lock();
            // Workers gone for long are forgotten (expired adverts send no
            // deletion).
            let forget = self.cluster.settings.ack_wait() * 10;
            live.retain(|_, l| l.seen.elapsed() < forget);
            live.insert(
                advert.id.clone(),
                Live {
                    seen: Instant::now(),
                    instance: advert.instance.clone(),
                    namespaces: advert.namespaces.clone(),
                    draining: advert.draining,
                    code: advert.code.clone(),
                    units: advert.units.clone(),
                    offer: offer.clone(),
                },
            )
        };
        if known.is_some_and(|k| k.offer == offer) {
            return;
        }
        if advert.tools.len() > MAX_ADVERTISED_TOOLS {
            tracing::warn!(
                worker = %advert.id,
                tools = advert.tools.len(),
                "advert refused: more than {MAX_ADVERTISED_TOOLS} tools"
            );
            return;
        }
        for def in advert.tools {
            let tool = match def.build() {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(worker = %advert.id, "advertised tool refused: {e}");
                    continue;
                }
            };
            if !self.namespaces.iter().any(|n| n == tool.namespace()) {
                continue;
            }
            // A local tool of this name (any version) stays in charge: an
            // advert never shadows it, not even with a newer version.
            let local = [
                tool.id.to_string(),
                format!("{}:{}", tool.namespace(), tool.name()),
            ]
            .iter()
            .filter_map(|id| catalog.get(id).ok())
            .any(|existing| existing.backend().kind() != "fleet");
            if local {
                tracing::warn!(tool = %tool.id, "a local tool has this name: its calls stay local");
                continue;
            }
            if catalog.get(&tool.id.to_string()).is_ok() {
                continue;
            }
            let backend = Arc::new(FleetBackend {
                client: self.clone(),
                namespace: tool.namespace().to_owned(),
            });
            if let Err(e) = catalog.register(tool, backend) {
                tracing::debug!("fleet tool not registered: {e}");
            }
        }
    }

    /// Whether the worker process `instance` advertised itself within the
    /// last three heartbeats.
    pub(crate) fn instance_alive(&self, instance: &str) -> bool {
        let fresh = self.cluster.settings.ack_wait();
        self.live
            .lock()
            .values()
            .any(|l| l.instance == instance && l.seen.elapsed() < fresh)
    }

    /// Live workers that run code of `profile`.
    pub fn live_code_workers(&self, profile: Profile) -> usize {
        self.live_taking(|l| l.code.as_deref() == Some(profile.as_str()))
    }

    /// Live workers that run sandboxed units of `profile`.
    pub fn live_unit_workers(&self, profile: Profile) -> usize {
        self.live_taking(|l| l.units.iter().any(|u| u == profile.as_str()))
    }
}

/// Follows the adverts until the client is dropped; a watch that ends (a
/// reconnect) is opened again.
async fn watch_adverts(client: std::sync::Weak<FleetClient>, catalog: Arc<Catalog>) {
    loop {
        let Some(strong) = client.upgrade() else {
            return;
        };
        let watch = strong.cluster.workers.watch_all().await;
        drop(strong);
        let mut watch = match watch {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("watching worker adverts: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Some(entry) = watch.next().await {
            let Some(strong) = client.upgrade() else {
                return;
            };
            match entry {
                Ok(entry) if entry.operation == async_nats::jetstream::kv::Operation::Put => {
                    if let Some(advert) = parse(&entry.value) {
                        strong.observe(advert, &catalog);
                    }
                }
                Ok(entry) => {
                    strong.live.lock().remove(&entry.key);
                }
                Err(e) => tracing::debug!("advert watch: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The backend of every fleet tool.
#[derive(Debug)]
struct FleetBackend {
    client: Arc<FleetClient>,
    namespace: String,
}

impl Backend for FleetBackend {
    fn kind(&self) -> &str {
        "fleet"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        Box::pin(async move { self.client.call(call.tool, call.args, &call.ctx).await })
    }

    fn availability(&self) -> Availability {
        if self.client.live_workers(&self.namespace) > 0 {
            Availability::Available
        } else {
            Availability::Unavailable {
                reason: format!(
                    "no live worker of cluster {} serves namespace {}",
                    self.client.cluster.settings.name, self.namespace
                ),
            }
        }
    }
}
