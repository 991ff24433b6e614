//! # toolexec-runtime
//!
//! Runtime isolation for toolexec: code and commands that agents send run
//! where they cannot hurt the host, under limits given as data, and reach
//! tools only through the host.
//!
//! - [`Runtime`]: the contract every sandbox implements: run a [`Unit`]
//!   (command, script, WASM) under a [`Profile`] and [`RuntimeLimits`], and
//!   return a [`RunOutcome`] with the value, the output, the tool-call log
//!   and how each limit was enforced.
//! - [`Runtimes`]: the registry, with the configurable [`ProfileMap`].
//! - [`protocol`]: the versioned sandbox↔host gateway protocol, with the
//!   host's [`ToolHost`] enforcing the tool budget and allowlist.
//! - [`process`]: the child-process driver shared by process runtimes.
//! - [`HostRuntime`]: unsandboxed host processes, behind an explicit opt-in.
//! - [`bwrap::BubblewrapRuntime`]: the bubblewrap namespaces sandbox.
//!
//! ```
//! use toolexec_runtime::{HostRuntime, Profile, ProfileMap, RunRequest, Runtimes, Unit, UnsandboxedOptIn};
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

pub mod bwrap;
mod call_log;
mod command_tool;
pub mod gateway_socket;
mod host;
mod host_runtime;
mod limits;
mod outcome;
pub mod process;
mod profile;
pub mod protocol;
mod registry;
mod runtime;
pub mod seccomp_policy;
mod unit;

pub use call_log::{ToolCallLog, ToolCallRecord, ValueSummary};
pub use command_tool::{CommandTool, CommandToolDef, OutputMapping, StdinMapping};
pub use host::{ToolCaller, ToolHost};
pub use host_runtime::{HostRuntime, UnsandboxedOptIn};
pub use limits::{LimitKind, NetworkPolicy, RuntimeLimits};
pub use outcome::{Enforcement, RunOutcome, RunStatus};
pub use process::SandboxUser;
pub use profile::{Profile, ProfileMap, UnknownProfile};
pub use registry::Runtimes;
pub use runtime::{
    Mechanism, OutputChunk, OutputSink, OutputStream, RunContext, Runtime, RuntimeInfo,
};
pub use unit::{
    CommandUnit, MAX_COMMAND_STDIN_BYTES, RunRequest, ScriptUnit, Unit, UnitKind, WasmCode,
    WasmUnit,
};
