//! Code mode as a runtime unit: a script sent as a
//! [`Unit::Script`](toolexec_runtime::Unit::Script) (`javascript`) to a
//! runtime of a [`Runtimes`](toolexec_runtime::Runtimes) registry, and both
//! ends of that contract, which must agree:
//!
//! - `limits`: code-mode limits as the run's limits, and back;
//! - `report`: the value a unit reports, and how the host reads a run back
//!   into a [`CodeOutcome`](crate::CodeOutcome) ([`outcome_from_run`]);
//! - [`InProcessRuntime`]: the runtime that runs units in this process's
//!   engine (fit for `standard` at most);
//! - [`worker`]: the process a sandbox runtime starts for a unit.
//!
//! [`crate::CodeRunner`] sends scripts this way for a sandboxed placement.

mod in_process;
mod limits;
mod report;
pub mod worker;

pub use in_process::InProcessRuntime;
pub(crate) use limits::engine_limits;
pub use limits::{code_limits_from_runtime, runtime_limits_from_code};
pub use report::outcome_from_run;
pub(crate) use report::report;
