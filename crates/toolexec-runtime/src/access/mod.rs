//! The layers a run's [`ToolHost`](crate::ToolHost) puts around the tools a
//! unit reaches ([`toolexec::ToolAccess`]), outermost first:
//!
//! - [`Budget`]: counts every call and every `search`/`describe` against the
//!   run's budgets, refused ones too; past them, refuses with
//!   `limit_exceeded` and signals that the run must end;
//! - [`CallLog`]: records every call that gets past the budget (a bounded
//!   [`ToolCallRecord`](crate::ToolCallRecord) each), also one dropped
//!   mid-flight;
//! - [`Allow`]: the run's allowlist: `not_allowed` for calls and describes
//!   of other tools, search hits filtered to the allowed ones.
//!
//! Each wraps an inner [`ToolAccess`](toolexec::ToolAccess) and is one
//! itself, as a tower `Layer` wraps a `Service`.

mod allow;
mod budget;
mod log;

pub(crate) use allow::Allow;
pub(crate) use budget::{Budget, BudgetState};
pub(crate) use log::{CallLog, SharedLog};
