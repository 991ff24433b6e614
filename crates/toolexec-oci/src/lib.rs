//! # toolexec-oci
//!
//! OCI runtimes for toolexec: units run as containers under `runc`
//! (profile `standard`) or gVisor `runsc` on the ptrace platform (profile
//! `hardened`). Each run gets its own bundle: a read-only root filesystem
//! (a directory, or a tarball unpacked once into a cache), a `/tmp` tmpfs
//! sized by the disk limit, no network, no capabilities, a seccomp
//! deny-list, rlimits and a per-run cgroup v1 (memory, pids, CPU time)
//! owned by toolexec. Container, cgroups and bundle are removed however
//! the run ends.
//!
//! Place in the workspace: one runtime of the contract (`toolexec-runtime`),
//! built on the shared plumbing (`toolexec-sandbox`); step 5 of
//! ARCHITECTURE.md's call flow.
//!
//! ```no_run
//! use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, RootfsSource};
//! use toolexec_runtime::{Profile, ProfileMap, RunRequest, Runtimes, Unit};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let rootfs = RootfsSource::Tarball("/srv/busybox.tar".into());
//! let mut runtimes = Runtimes::new(ProfileMap::default());
//! runtimes.register(OciRuntime::new(OciConfig::new(OciFlavor::Runsc, rootfs)));
//! let request = RunRequest::new(Unit::command(["echo", "hi"]), Profile::Hardened);
//! let outcome = runtimes.run(request, None, Default::default()).await;
//! println!("{}", outcome.stdout);
//! # }
//! ```
#![warn(missing_docs)]

mod bundle;
mod cgroup;
mod channel;
mod config;
mod error;
mod rootfs;
mod runtime;
mod spec;

pub use config::{OciConfig, OciFlavor, ReadOnlyBind, RootfsSource};
pub use error::OciError;
pub use runtime::{OciRuntime, RUNSC_PIDS_OVERHEAD};
