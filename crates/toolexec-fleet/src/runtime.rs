//! The fleet as a sandbox runtime: `[cluster] profiles` sends the caller's
//! sandboxed units of those profiles (command tools, and the scripts of
//! code runs of that profile) to workers that run them (`toolexec worker
//! --unit-profile P`), each on a runtime of its machine that it checked at
//! start enforces the profile. A unit's tool calls come back to the
//! caller's tool host.

use std::sync::{Arc, OnceLock};

use toolexec::{Availability, BoxFuture};
use toolexec_runtime::{Profile, RunContext, RunOutcome, RunRequest, Runtime, UnitKind};

use crate::client::FleetClient;

/// The runtime's name, in profile maps and outcomes (`fleet/<runtime>`).
pub(crate) const NAME: &str = "fleet";

/// Runs units on the fleet. Registered before the cluster is reached, and
/// unavailable (with the reason) until [`FleetRuntime::bind`] gives it the
/// connection. A unit of a profile no live worker runs is refused with
/// `backend_unavailable`, never run elsewhere.
///
/// ```
/// use toolexec::Availability;
/// use toolexec_fleet::FleetRuntime;
/// use toolexec_runtime::{Profile, Runtime};
/// let runtime = FleetRuntime::new("prod", &[Profile::Hardened]);
/// assert_eq!(runtime.max_profile(), Profile::Hardened);
/// assert!(matches!(runtime.availability(), Availability::Unavailable { .. }));
/// ```
#[derive(Debug)]
pub struct FleetRuntime {
    cluster: String,
    profiles: Vec<Profile>,
    isolation: String,
    client: OnceLock<Arc<FleetClient>>,
}

impl FleetRuntime {
    /// Its name in profile maps, and the prefix of its outcomes' runtime
    /// (`fleet/bubblewrap`).
    pub const NAME: &'static str = NAME;

    /// Units of `profiles` on the workers of cluster `cluster`.
    pub fn new(cluster: impl Into<String>, profiles: &[Profile]) -> Self {
        let cluster = cluster.into();
        FleetRuntime {
            isolation: format!(
                "on the workers of cluster {cluster}, each unit in a runtime of the worker's \
                 machine that the worker checked at start enforces the profile"
            ),
            cluster,
            profiles: profiles.to_vec(),
            client: OnceLock::new(),
        }
    }

    /// Gives it the cluster connection (once; later calls are ignored).
    pub fn bind(&self, client: Arc<FleetClient>) {
        let _ = self.client.set(client);
    }
}

impl Runtime for FleetRuntime {
    fn name(&self) -> &str {
        NAME
    }

    fn isolation(&self) -> &str {
        &self.isolation
    }

    fn max_profile(&self) -> Profile {
        self.profiles.iter().copied().max().unwrap_or(Profile::Dev)
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        &[UnitKind::Command, UnitKind::Script]
    }

    /// Available once connected: whether a live worker runs units of a
    /// unit's profile is decided per run (with a fresh look at the
    /// adverts), and a unit without one is refused with the reason.
    fn availability(&self) -> Availability {
        match self.client.get() {
            Some(_) => Availability::Available,
            None => Availability::Unavailable {
                reason: format!("not connected to cluster {}", self.cluster),
            },
        }
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(async move {
            match self.client.get() {
                Some(client) => client.run_unit(request, ctx).await,
                None => RunOutcome::error(
                    NAME,
                    &crate::cluster::unavailable(format!(
                        "not connected to cluster {}",
                        self.cluster
                    )),
                ),
            }
        })
    }
}
