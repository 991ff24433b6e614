//! Scale-out for toolexec on NATS JetStream.
//!
//! A cluster is a NATS account with JetStream, and a name that scopes
//! everything toolexec keeps there:
//!
//! - **Runs** are queued on the work-queue stream `TOOLEXEC_<cluster>_RUNS`,
//!   subject `toolexec.<cluster>.run.<namespace>`, with the run's
//!   idempotency key as the message id (a publish retried within two
//!   minutes is dropped by the server). The stream's size bound is the
//!   backpressure: a run beyond `max_queue` is refused with
//!   `backend_unavailable`.
//! - **Workers** ([`Worker`], `toolexec worker`) share one durable pull
//!   consumer per namespace, take at most `capacity` runs at a time, renew
//!   each run every heartbeat (JetStream redelivers a run whose worker
//!   missed three), and advertise themselves and their tools in the bucket
//!   `toolexec_<cluster>_workers`.
//! - **The journal** (bucket `toolexec_<cluster>_journal`) holds each run's
//!   state and result by key, every change a compare-and-set. A redelivered
//!   run whose result is recorded gets that result again; one whose worker
//!   was lost mid-run runs again only when its tool is marked idempotent or
//!   read-only, else it ends `interrupted` with the journal of what
//!   happened. A retry with the same idempotency key
//!   ([`with_idempotency_key`]) returns the recorded result.
//! - **Callers** ([`FleetClient`]) import the tools the live workers
//!   advertise, queue each call, and wait for its events on a reply subject
//!   (core NATS), reading the journal when the reply does not come.
//! - **Code runs** ([`FleetClient::execute_code`]) are durable: each tool
//!   call of the script is journaled, and a worker that takes over replays
//!   them. **Sandboxed units** ([`FleetRuntime`], `[cluster] profiles`) run
//!   on workers that enforce their profile. Both reach the caller's own
//!   tools through a callback subject the caller answers on.

mod adverts;
mod callback;
mod client;
mod cluster;
mod code;
mod journal;
mod run;
mod runtime;
mod settings;
mod status;
mod wire;
mod worker;

pub use client::{FleetClient, FleetCode, with_idempotency_key};
pub use cluster::Cluster;
pub use runtime::FleetRuntime;
pub use settings::{ClusterSettings, Security};
pub use status::{ClusterStatus, NamespaceStatus, WorkerStatus, status};
pub use worker::{Worker, WorkerOptions, WorkerReport};
