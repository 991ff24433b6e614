//! The runtime contract.

use std::sync::Arc;

use serde::Serialize;
use toolexec::{Availability, BoxFuture, CancellationToken};

use crate::{Profile, RunOutcome, RunRequest, ToolHost, UnitKind};

/// What one run gets besides its request: the tool host (budget, allowlist,
/// log) and the caller's cancellation.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// Tools reachable from the unit, through the gateway.
    pub host: ToolHost,
    /// Cancels the run; the runtime stops the unit and cleans up.
    pub cancel: CancellationToken,
}

/// Executes units of work in isolation.
///
/// Like a tower `Service`, deliberately small: the [`crate::Runtimes`]
/// registry does selection by profile, limit validation and tool-host setup
/// around it. Implementations must
///
/// - enforce every limit they can, and report each limit's mechanism (or
///   `not enforced: why`) in [`RunOutcome::enforcement`];
/// - stop the unit and release everything (processes, cgroups, containers,
///   temporary files) when the run ends for any reason, including
///   cancellation and the caller dropping the future;
/// - never panic on hostile units: every failure is a [`crate::RunStatus`].
pub trait Runtime: Send + Sync + 'static {
    /// Stable name (`bubblewrap`, `wasm`, `host`, ...), as used in
    /// [`crate::ProfileMap`].
    fn name(&self) -> &str;

    /// One line on how units are isolated.
    fn isolation(&self) -> &str;

    /// The strongest profile this runtime is fit for. The registry never
    /// uses it for a stronger one, whatever the configuration says.
    fn max_profile(&self) -> Profile;

    /// The unit kinds this runtime runs.
    fn unit_kinds(&self) -> &[UnitKind];

    /// Whether it can run on this machine now; if not, what is missing, in
    /// one line.
    fn availability(&self) -> Availability;

    /// Runs one unit. The request's limits are already validated.
    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome>;
}

/// A runtime as `toolexec runtimes` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeInfo {
    /// [`Runtime::name`].
    pub name: String,
    /// [`Runtime::isolation`].
    pub isolation: String,
    /// [`Runtime::max_profile`].
    pub max_profile: Profile,
    /// [`Runtime::unit_kinds`].
    pub unit_kinds: Vec<UnitKind>,
    /// Whether it is available.
    pub available: bool,
    /// Why not, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The profiles it serves in the current mapping.
    pub profiles: Vec<Profile>,
}

impl RuntimeInfo {
    pub(crate) fn of(runtime: &Arc<dyn Runtime>, profiles: Vec<Profile>) -> Self {
        let (available, reason) = match runtime.availability() {
            Availability::Available => (true, None),
            Availability::Unavailable { reason } => (false, Some(reason)),
        };
        RuntimeInfo {
            name: runtime.name().to_owned(),
            isolation: runtime.isolation().to_owned(),
            max_profile: runtime.max_profile(),
            unit_kinds: runtime.unit_kinds().to_vec(),
            available,
            reason,
            profiles,
        }
    }
}
