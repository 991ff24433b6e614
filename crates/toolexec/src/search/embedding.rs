//! [`EmbeddingIndex`]: the catalog's tool vectors, kept up to date off the
//! request path by a background thread that embeds what changed in batches.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::semantic::{Embedder, VectorIndex};
use crate::error::Error;

/// Passages embedded per batch.
const BATCH: usize = 64;

/// How far embedding has got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingStatus {
    /// The model's id.
    pub model: String,
    /// Tools with a vector.
    pub embedded: usize,
    /// Tools waiting for one (found lexically until then).
    pub pending: usize,
    /// Batches that failed (their tools stay lexical until changed).
    pub failures: u64,
}

struct Queue {
    /// Tool id → the passage to embed, latest first served in id order.
    pending: BTreeMap<Arc<str>, String>,
    /// Tool id → digest of the passage its vector must come from: a vector
    /// computed for an older passage (the tool was replaced or removed
    /// while its batch ran) is dropped.
    wanted: HashMap<Arc<str>, u64>,
    /// Passages being embedded now.
    in_flight: usize,
}

struct Shared {
    embedder: Arc<dyn Embedder>,
    vectors: RwLock<VectorIndex>,
    queue: Mutex<Queue>,
    wake: Condvar,
    idle: Condvar,
    closed: AtomicBool,
    failures: AtomicU64,
}

/// The vectors of a catalog's tools under one [`Embedder`].
pub(crate) struct EmbeddingIndex {
    shared: Arc<Shared>,
}

impl Drop for EmbeddingIndex {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        let _q = self.shared.queue.lock();
        self.shared.wake.notify_all();
    }
}

fn digest(passage: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0x746f_6f6c).hash_one(passage)
}

impl EmbeddingIndex {
    /// An empty index and its worker thread.
    pub(crate) fn start(embedder: Arc<dyn Embedder>) -> Result<EmbeddingIndex, Error> {
        let shared = Arc::new(Shared {
            embedder,
            vectors: RwLock::new(VectorIndex::new()),
            queue: Mutex::new(Queue {
                pending: BTreeMap::new(),
                wanted: HashMap::new(),
                in_flight: 0,
            }),
            wake: Condvar::new(),
            idle: Condvar::new(),
            closed: AtomicBool::new(false),
            failures: AtomicU64::new(0),
        });
        let worker = shared.clone();
        std::thread::Builder::new()
            .name("toolexec-embed".into())
            .spawn(move || work(&worker))
            .map_err(|e| {
                Error::backend_unavailable(
                    "embeddings",
                    format!("cannot start the embedding thread: {e}"),
                )
            })?;
        Ok(EmbeddingIndex { shared })
    }

    /// Queues `id` to be embedded from `passage` (replacing what was
    /// queued or embedded for it).
    pub(crate) fn want(&self, id: &str, passage: String) {
        let id: Arc<str> = Arc::from(id);
        let mut q = self.shared.queue.lock();
        let d = digest(&passage);
        if q.wanted.get(&id) == Some(&d) {
            return;
        }
        q.wanted.insert(id.clone(), d);
        q.pending.insert(id, passage);
        self.shared.wake.notify_one();
    }

    /// Drops `id`'s vector and anything queued for it.
    pub(crate) fn forget(&self, id: &str) {
        let mut q = self.shared.queue.lock();
        q.wanted.remove(id);
        q.pending.remove(id);
        self.shared.vectors.write().remove(id);
    }

    /// The embedder.
    pub(crate) fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.shared.embedder
    }

    /// The `limit` tools nearest each of `queries` among those `keep`
    /// accepts, a list each.
    pub(crate) fn nearest_each(
        &self,
        queries: &[Vec<f32>],
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<Vec<(Arc<str>, f32)>> {
        self.shared
            .vectors
            .read()
            .nearest_each(queries, limit, keep)
    }

    pub(crate) fn status(&self) -> EmbeddingStatus {
        let q = self.shared.queue.lock();
        EmbeddingStatus {
            model: self.shared.embedder.model_id().to_owned(),
            embedded: self.shared.vectors.read().len(),
            pending: q.pending.len() + q.in_flight,
            failures: self.shared.failures.load(Ordering::Relaxed),
        }
    }

    /// Waits until nothing is queued or being embedded, at most `timeout`;
    /// whether that happened.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut q = self.shared.queue.lock();
        while !q.pending.is_empty() || q.in_flight > 0 {
            if self.shared.idle.wait_until(&mut q, deadline).timed_out() {
                return q.pending.is_empty() && q.in_flight == 0;
            }
        }
        true
    }
}

/// The worker: takes batches off the queue until the index is dropped.
fn work(shared: &Shared) {
    let mut warned = false;
    loop {
        let batch: Vec<(Arc<str>, String)> = {
            let mut q = shared.queue.lock();
            q.in_flight = 0;
            shared.idle.notify_all();
            while q.pending.is_empty() && !shared.closed.load(Ordering::SeqCst) {
                shared.wake.wait(&mut q);
            }
            if shared.closed.load(Ordering::SeqCst) {
                return;
            }
            let mut batch = Vec::with_capacity(BATCH.min(q.pending.len()));
            while batch.len() < BATCH {
                match q.pending.pop_first() {
                    Some(entry) => batch.push(entry),
                    None => break,
                }
            }
            q.in_flight = batch.len();
            batch
        };
        let texts: Vec<&str> = batch.iter().map(|(_, p)| p.as_str()).collect();
        match shared.embedder.embed(&texts) {
            Ok(vectors) => {
                let q = shared.queue.lock();
                let mut index = shared.vectors.write();
                for ((id, passage), vector) in batch.iter().zip(&vectors) {
                    if q.wanted.get(id) == Some(&digest(passage)) {
                        index.upsert(id, vector);
                    }
                }
            }
            Err(e) => {
                shared.failures.fetch_add(1, Ordering::Relaxed);
                if !warned {
                    warned = true;
                    tracing::warn!(error = %e, tools = batch.len(), "embedding failed; these tools are found lexically only");
                }
            }
        }
    }
}
