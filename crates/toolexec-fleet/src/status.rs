//! `toolexec cluster status`: the workers, and each namespace's queue.

use futures::StreamExt;
use serde::Serialize;
use toolexec::Error;

use crate::cluster::{Cluster, unavailable};

/// A cluster at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    /// The cluster's name.
    pub cluster: String,
    /// Runs queued and not yet acknowledged, all namespaces.
    pub queued: u64,
    /// The live workers (those whose advert is fresh).
    pub workers: Vec<WorkerStatus>,
    /// Each namespace with a consumer.
    pub namespaces: Vec<NamespaceStatus>,
}

/// One live worker.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    /// Its id.
    pub id: String,
    /// Its host and process.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Namespaces it serves.
    pub namespaces: Vec<String>,
    /// Runs at a time.
    pub capacity: usize,
    /// Runs now.
    pub in_flight: usize,
    /// Runs finished since it started.
    pub done: u64,
    /// Finishing its runs before it exits.
    pub draining: bool,
    /// The profile of the code runs it takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The profiles of the sandboxed units it takes.
    pub units: Vec<String>,
    /// Its machine's available sandbox runtimes, with the strongest
    /// profile each serves (`bubblewrap:hardened`).
    pub runtimes: Vec<String>,
}

/// One namespace's queue.
#[derive(Debug, Clone, Serialize)]
pub struct NamespaceStatus {
    /// The namespace.
    pub namespace: String,
    /// Runs waiting for a worker.
    pub pending: u64,
    /// Runs handed to a worker and not yet acknowledged.
    pub running: usize,
    /// Runs delivered more than once and not yet acknowledged (their
    /// worker was lost, or did not renew them).
    pub redelivered: usize,
    /// Workers' pull requests waiting for runs.
    pub waiting_pulls: usize,
}

/// Reads the cluster's state.
pub async fn status(cluster: &Cluster) -> Result<ClusterStatus, Error> {
    let names = &cluster.names;
    let mut stream = cluster
        .js
        .get_stream(names.stream())
        .await
        .map_err(|e| unavailable(format!("stream {}: {e}", names.stream())))?;
    let queued = stream
        .info()
        .await
        .map_err(|e| unavailable(format!("stream {}: {e}", names.stream())))?
        .state
        .messages;
    let mut namespaces = Vec::new();
    let mut consumers = stream.consumers();
    while let Some(info) = consumers.next().await {
        let info = info.map_err(|e| unavailable(format!("consumers: {e}")))?;
        // Code runs and units are listed as `<code:PROFILE>` and
        // `<unit:PROFILE>` (never a namespace's name).
        let namespace = if let Some(ns) = info.name.strip_prefix("ns_") {
            ns.to_owned()
        } else if let Some(profile) = info.name.strip_prefix("code_") {
            format!("<code:{profile}>")
        } else if let Some(profile) = info.name.strip_prefix("unit_") {
            format!("<unit:{profile}>")
        } else {
            continue;
        };
        namespaces.push(NamespaceStatus {
            namespace,
            pending: info.num_pending,
            running: info.num_ack_pending,
            redelivered: info.num_redelivered,
            waiting_pulls: info.num_waiting,
        });
    }
    namespaces.sort_by(|a, b| a.namespace.cmp(&b.namespace));
    let mut workers = Vec::new();
    for a in crate::adverts::read_all(cluster).await? {
        workers.push(WorkerStatus {
            id: a.id,
            host: a.host,
            pid: a.pid,
            namespaces: a.namespaces,
            capacity: a.capacity,
            in_flight: a.in_flight,
            done: a.done,
            draining: a.draining,
            code: a.code,
            units: a.units,
            runtimes: a.runtimes,
        });
    }
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(ClusterStatus {
        cluster: cluster.settings.name.clone(),
        queued,
        workers,
        namespaces,
    })
}
