//! Containers are always removed: on every ending, when the run's future is
//! dropped midway, and (see [`crate::sweep`]) after the owning process died.
//!
//! The create request and every removal handed over by a dropped run go
//! through one process-wide cleanup worker: a thread with its own tokio
//! runtime and its own daemon clients. It does not depend on the caller's
//! runtime, so a create in flight when the caller's runtime shuts down
//! still completes there, and the removal that follows it sees its result.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, ContainerCreateResponse};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptionsBuilder};
use bollard::{ClientVersion, Docker};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};

/// How long a removal keeps retrying once the create's outcome is known
/// (a create whose answer was lost may still land in this time).
const REMOVE_RETRY_FOR: Duration = Duration::from_secs(10);
/// The longest a removal waits for the create it follows.
const CREATE_WAIT: Duration = Duration::from_secs(120);
/// Client timeout of the worker's own requests.
const CLIENT_TIMEOUT_SECS: u64 = 60;

/// Where the daemon is and which API version to speak.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) socket: PathBuf,
    pub(crate) version: ClientVersion,
}

impl Target {
    /// A client of this target, for the runtime it is used on.
    pub(crate) fn client(&self) -> Result<Docker, bollard::errors::Error> {
        Docker::connect_with_unix(
            &self.socket.to_string_lossy(),
            CLIENT_TIMEOUT_SECS,
            &self.version,
        )
    }
}

/// What became of a create request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Created {
    /// Not answered yet.
    Pending,
    /// The daemon created the container.
    Yes,
    /// The daemon answered with an error: nothing was created.
    No,
    /// The answer was lost (transport error): it may land later.
    Unknown,
}

/// The process-wide cleanup worker.
struct Worker {
    jobs: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
    pending: AtomicUsize,
}

fn worker() -> &'static Worker {
    static WORKER: OnceLock<Worker> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (jobs, mut rx) = mpsc::unbounded_channel::<BoxFuture<'static, ()>>();
        let spawned = std::thread::Builder::new()
            .name("toolexec-docker-cleanup".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("docker cleanup worker: no runtime: {e}");
                        return;
                    }
                };
                rt.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job);
                    }
                });
            });
        if let Err(e) = spawned {
            tracing::error!("docker cleanup worker: cannot start its thread: {e}");
        }
        Worker {
            jobs,
            pending: AtomicUsize::new(0),
        }
    })
}

/// Runs `job` on the cleanup worker; counted by [`pending`] until done.
/// `false` if the worker is not running.
fn submit(job: impl Future<Output = ()> + Send + 'static) -> bool {
    let worker = worker();
    worker.pending.fetch_add(1, Ordering::SeqCst);
    let counted = Box::pin(async move {
        job.await;
        worker.pending.fetch_sub(1, Ordering::SeqCst);
    });
    if worker.jobs.send(counted).is_err() {
        worker.pending.fetch_sub(1, Ordering::SeqCst);
        return false;
    }
    true
}

/// Jobs (creates, removals, sweeps) the cleanup worker has not finished.
pub(crate) fn pending() -> usize {
    worker().pending.load(Ordering::SeqCst)
}

/// Waits until the cleanup worker has finished every job handed to it so
/// far, or `timeout`; `true` when it is idle.
pub(crate) async fn settle(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pending() == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Hands a job to the worker that does not need to be awaited (sweeps).
pub(crate) fn spawn(job: impl Future<Output = ()> + Send + 'static) {
    if !submit(job) {
        tracing::warn!("docker cleanup worker is not running: job dropped");
    }
}

/// One container's name, reserved before its create request: removed by
/// name when dropped unless [`Lease::remove`] finished first.
pub(crate) struct Lease {
    target: Target,
    name: String,
    created: Option<watch::Receiver<Created>>,
    armed: bool,
    dir: Option<PathBuf>,
}

impl Lease {
    pub(crate) fn new(target: Target, name: String) -> Self {
        Lease {
            target,
            name,
            created: None,
            armed: true,
            dir: None,
        }
    }

    /// A host directory bind-mounted into the container: removed again
    /// after a handed-over removal (a start in flight when the run was
    /// dropped makes the daemon recreate a missing bind source).
    pub(crate) fn bind_source(&mut self, dir: PathBuf) {
        self.dir = Some(dir);
    }

    /// Creates the container on the cleanup worker: dropping this future
    /// does not abandon the request, and the lease's removal waits for it.
    pub(crate) async fn create(
        &mut self,
        options: CreateContainerOptions,
        body: ContainerCreateBody,
    ) -> Result<ContainerCreateResponse, bollard::errors::Error> {
        let (state_tx, state_rx) = watch::channel(Created::Pending);
        let (reply_tx, reply_rx) = oneshot::channel();
        let target = self.target.clone();
        let job = async move {
            let result = match target.client() {
                Ok(docker) => docker.create_container(Some(options), body).await,
                Err(e) => Err(e),
            };
            state_tx.send_replace(match &result {
                Ok(_) => Created::Yes,
                Err(bollard::errors::Error::DockerResponseServerError { .. }) => Created::No,
                Err(_) => Created::Unknown,
            });
            let _ = reply_tx.send(result);
        };
        if !submit(job) {
            return Err(io_error("the docker cleanup worker is not running"));
        }
        self.created = Some(state_rx);
        reply_rx
            .await
            .unwrap_or_else(|_| Err(io_error("the docker cleanup worker stopped")))
    }

    /// Removes the container now (forced: killed if still running) with
    /// the caller's client. On failure (or if this future is dropped) the
    /// lease's drop hands the removal to the worker.
    pub(crate) async fn remove(mut self, docker: &Docker) -> Result<(), bollard::errors::Error> {
        let result = match remove_raw(docker, &self.name).await {
            Err(e) if is_not_found(&e) => Ok(()),
            other => other,
        };
        if result.is_ok() {
            self.armed = false;
        }
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(created) = self.created.take() else {
            return; // no create request was ever sent
        };
        if !self.armed || *created.borrow() == Created::No {
            return;
        }
        let target = self.target.clone();
        let name = self.name.clone();
        let dir = self.dir.take();
        let job = async move {
            remove_until_gone(target, name, created).await;
            if let Some(dir) = dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        };
        if !submit(job) {
            tracing::error!(
                "docker: cannot hand over the removal of container {}",
                self.name
            );
        }
    }
}

/// Removes container `name` once its create request has an outcome:
/// nothing when the daemon refused it, else by name with retries until it
/// is gone (a 404 while the create's answer was lost is retried for
/// [`REMOVE_RETRY_FOR`], in case the create lands late).
async fn remove_until_gone(target: Target, name: String, mut created: watch::Receiver<Created>) {
    let state =
        match tokio::time::timeout(CREATE_WAIT, created.wait_for(|s| *s != Created::Pending)).await
        {
            Ok(Ok(state)) => *state,
            // The create job vanished or hangs: its outcome is unknown.
            _ => Created::Unknown,
        };
    if state == Created::No {
        return;
    }
    let docker = match target.client() {
        Ok(docker) => docker,
        Err(e) => {
            tracing::error!("docker: removing container {name}: {e}");
            return;
        }
    };
    let deadline = Instant::now() + REMOVE_RETRY_FOR;
    let mut delay = Duration::from_millis(50);
    loop {
        match remove_raw(&docker, &name).await {
            Ok(()) => return,
            Err(e) if is_not_found(&e) && state == Created::Yes => return,
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!("docker: removing container {name}: {e}"),
        }
        if Instant::now() >= deadline {
            if state != Created::Unknown {
                tracing::error!("docker: gave up removing container {name}");
            }
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// A forced removal with the container's anonymous volumes.
pub(crate) async fn remove_raw(docker: &Docker, name: &str) -> Result<(), bollard::errors::Error> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    docker.remove_container(name, Some(options)).await
}

/// A 404 from the daemon.
pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

fn io_error(message: &str) -> bollard::errors::Error {
    bollard::errors::Error::IOError {
        err: std::io::Error::other(message.to_owned()),
    }
}
