//! The QuickJS interpreter glue: everything that touches `rquickjs`. One
//! execution runs on the current (worker) thread in a fresh runtime; the
//! pool around it is [`crate::engine`].
//!
//! - [`run`]: build the runtime, install the globals, compile and call the
//!   script, drive its event loop to the outcome;
//! - `host`: the functions behind `tools` and `console`;
//! - `compile`, `convert`: source in, values and errors out;
//! - `state`: the host-side state of one execution (limits, call log,
//!   captured output);
//! - `abort`, `memory`: the stop flag and the counting allocator that
//!   raises it;
//! - `measure`: benchmark hooks.

mod abort;
mod compile;
mod convert;
mod host;
mod measure;
mod memory;
mod run;
mod state;

pub(crate) use abort::{Abort, AbortFlag};
pub use measure::idle_context_bytes;
pub(crate) use run::{JobSpec, run};
pub(crate) use state::{Msg, SharedProgress, ms, timeout_message};
