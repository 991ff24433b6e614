//! # toolexec-sandbox
//!
//! The plumbing every process sandbox shares, so a fix lands once: the
//! runtimes built on it (bubblewrap in `toolexec-bwrap`, runc and runsc in
//! `toolexec-oci`, Docker in `toolexec-docker`) add only what is theirs.
//!
//! Place in the workspace: below every process sandbox runtime, above the
//! contract (step 5 of ARCHITECTURE.md's call flow).
//!
//! - [`process`]: the child-process driver: spawn under rlimits, in its
//!   cgroups and as its [`SandboxUser`], feed stdin, serve the sandbox↔host
//!   channel, stop on deadline, output, budget or cancellation.
//! - [`Capture`]: stdout and stderr under one byte budget, forwarded live.
//! - [`rlimits`]: the rlimits derived from
//!   [`RuntimeLimits`](toolexec_runtime::RuntimeLimits).
//! - [`cgroup`]: per-run cgroups (v1, v2, hybrid) and [`verdict`]: the
//!   limit a run hit, from what its cgroup counted.
//! - [`seccomp`]: the one deny-list and its BPF rendering.
//! - [`channel_socket`]: private directories and the peer policy of the
//!   channel sockets of container runtimes.
//! - [`find_binary`]: launcher lookup.
//! - [`HostRuntime`]: the driver alone, unsandboxed, behind an explicit
//!   opt-in.
//!
//! ```
//! use toolexec_runtime::{Profile, ProfileMap, RunRequest, Runtimes, Unit};
//! use toolexec_sandbox::{HostRuntime, UnsandboxedOptIn};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let mut map = ProfileMap::default();
//! map.dev.insert(0, HostRuntime::NAME.into());
//! let mut runtimes = Runtimes::new(map);
//! runtimes.register(HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed()));
//! let request = RunRequest::new(Unit::command(["echo", "hello"]), Profile::Dev);
//! let outcome = runtimes.run(request, None, Default::default()).await;
//! assert!(outcome.is_ok(), "{outcome:?}");
//! assert_eq!(outcome.stdout, "hello\n");
//! # }
//! ```

mod binary;
pub mod cgroup;
pub mod channel_socket;
mod host;
mod output;
pub mod process;
pub mod rlimits;
pub mod seccomp;
mod user;
pub mod verdict;

pub use binary::find_binary;
pub use host::{HostRuntime, UnsandboxedOptIn};
pub use output::Capture;
pub use user::SandboxUser;
