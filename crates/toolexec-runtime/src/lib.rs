//! # toolexec-runtime
//!
//! Runtime isolation for toolexec: code and commands that agents send run
//! where they cannot hurt the host, under limits given as data, and reach
//! tools only through the host.
//!
//! Place in the workspace: between the core and the sandboxes: command tools
//! and code mode ask it for runs, every runtime crate implements its contract
//! (steps 3–4 and 6 of ARCHITECTURE.md's call flow).
//!
//! - [`Runtime`]: the contract every sandbox implements: run a [`Unit`]
//!   (command, script, WASM) under a [`Profile`] and [`RuntimeLimits`], and
//!   return a [`RunOutcome`] with the value, the output, the tool-call log
//!   and how each limit was enforced.
//! - [`Runtimes`]: the registry, with the configurable [`ProfileMap`].
//! - [`protocol`]: the versioned sandbox↔host channel protocol, with the
//!   host's [`ToolHost`] enforcing the tool budget and allowlist.
//!
//! The runtimes themselves live in their own crates: the shared plumbing
//! of process sandboxes and the opt-in host runtime in `toolexec-sandbox`,
//! bubblewrap in `toolexec-bwrap`, runc/runsc in `toolexec-oci`, Docker in
//! `toolexec-docker`, wasmtime in `toolexec-wasm`, remote workers in
//! `toolexec-remote`.
//!
//! A profile no registered runtime serves fails closed, with a typed error:
//!
//! ```
//! use toolexec_runtime::{Profile, ProfileMap, RunRequest, RunStatus, Runtimes, Unit};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let runtimes = Runtimes::new(ProfileMap::default());
//! let request = RunRequest::new(Unit::command(["echo", "hello"]), Profile::Hardened);
//! let outcome = runtimes.run(request, None, Default::default()).await;
//! let RunStatus::Error { error } = &outcome.status else { panic!("{outcome:?}") };
//! assert_eq!(error.code.as_str(), "backend_unavailable");
//! # }
//! ```

mod access;
mod call_log;
mod ceilings;
mod command_tool;
mod descriptor;
mod host;
mod limits;
mod outcome;
mod profile;
pub mod protocol;
mod registry;
mod runtime;
mod unit;

pub use call_log::{ToolCallLog, ToolCallRecord, ValueSummary, unseen};
pub use ceilings::LimitCeilings;
pub use command_tool::{CommandTool, CommandToolDef, OutputMapping, StdinMapping};
pub use descriptor::{RuntimeDescriptor, UnavailableRuntime};
pub use host::ToolHost;
pub use limits::{LimitKind, NetworkPolicy, RuntimeLimits};
pub use outcome::{Enforcement, RunOutcome, RunStatus};
pub use profile::{Profile, ProfileMap, UnknownProfile};
pub use registry::Runtimes;
pub use runtime::{
    Mechanism, OutputChunk, OutputSink, OutputStream, RunContext, Runtime, RuntimeInfo,
};
pub use unit::{
    CommandUnit, MAX_COMMAND_STDIN_BYTES, RunRequest, ScriptUnit, Unit, UnitKind, WasmCode,
    WasmUnit,
};
