//! The pre-warmed pool: sandboxes started ahead, each waiting in
//! `toolexec-sandbox-init wait` for its unit. Entries are single-use and
//! replenished in the background on the pool's own small tokio runtime,
//! which keeps the children's pipes alive whatever runtime drives them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use toolexec_sandbox::cgroup::RunCgroup;
use toolexec_sandbox::process::Spawned;

/// One waiting sandbox.
#[derive(Debug)]
pub(crate) struct Warm {
    /// The started `bwrap`.
    pub spawned: Spawned,
    /// Where the unit's spec goes (closing it releases the init).
    pub spec: std::io::PipeWriter,
    /// The entry's cgroup, limits written at release.
    pub cgroup: Option<RunCgroup>,
    /// Why the entry has no cgroup, when cgroups were expected.
    pub cgroup_problem: Option<String>,
    /// The entry's own host identity (when toolexec is root).
    pub lease: Option<super::users::Lease>,
}

type Make = Arc<dyn Fn() -> Result<Warm, String> + Send + Sync>;

/// A fixed-size pool for one sandbox shape (the `/tmp` size).
pub(crate) struct Pool {
    entries: Arc<Mutex<VecDeque<Warm>>>,
    refill: Arc<Notify>,
    tmp_bytes: Option<u64>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("ready", &self.entries.lock().len())
            .field("tmp_bytes", &self.tmp_bytes)
            .finish()
    }
}

impl Pool {
    /// Starts filling a pool of `size` entries made by `make`.
    pub(crate) fn start(size: usize, tmp_bytes: Option<u64>, make: Make) -> std::io::Result<Pool> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("toolexec-bwrap-pool")
            .enable_all()
            .build()?;
        let entries: Arc<Mutex<VecDeque<Warm>>> = Arc::default();
        let refill = Arc::new(Notify::new());
        let (e, r) = (entries.clone(), refill.clone());
        runtime.spawn(async move {
            loop {
                while e.lock().len() < size {
                    match make() {
                        Ok(warm) => e.lock().push_back(warm),
                        Err(why) => {
                            tracing::warn!("bubblewrap pool: cannot start a sandbox: {why}");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
                r.notified().await;
            }
        });
        Ok(Pool {
            entries,
            refill,
            tmp_bytes,
            runtime: Some(runtime),
        })
    }

    /// A live entry for a unit whose `/tmp` size is `tmp_bytes`, if one is
    /// ready; triggers a refill.
    pub(crate) fn take(&self, tmp_bytes: Option<u64>) -> Option<Warm> {
        if tmp_bytes != self.tmp_bytes {
            return None;
        }
        let warm = loop {
            let mut warm = self.entries.lock().pop_front()?;
            if !warm.spawned.has_exited() {
                break warm;
            }
        };
        self.refill.notify_one();
        Some(warm)
    }

    /// Entries ready now.
    pub(crate) fn ready(&self) -> usize {
        self.entries.lock().len()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.entries.lock().clear();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
