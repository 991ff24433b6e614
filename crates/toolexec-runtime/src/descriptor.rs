//! What a runtime is, known without building it: one static description
//! per runtime that the runtime itself and every listing use (so the CLI
//! never copies a runtime's isolation text), and the placeholder a
//! registry holds for a runtime its configuration leaves unusable.

use toolexec::{Availability, BoxFuture, Error};

use crate::{Profile, RunContext, RunOutcome, RunRequest, Runtime, UnitKind};

/// A runtime's static facts: its registered name, what it isolates with,
/// the strongest profile it can serve and the unit kinds it can run once
/// configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeDescriptor {
    /// The registered name (`bubblewrap`, `runc`, `docker`, ...).
    pub name: &'static str,
    /// One line: what isolates a unit ([`Runtime::isolation`]).
    pub isolation: &'static str,
    /// The strongest profile it can serve; a runtime may serve less where
    /// it runs ([`Runtime::max_profile`] tells).
    pub max_profile: Profile,
    /// The unit kinds it can run.
    pub unit_kinds: &'static [UnitKind],
}

/// A runtime the configuration does not set up enough to run (no root
/// filesystem, no image, no URL, an unreadable key): listed as unavailable
/// with the reason, never selected, runs nothing.
///
/// ```
/// use toolexec_runtime::{Profile, RuntimeDescriptor, Runtime, UnavailableRuntime, UnitKind};
///
/// const RUNC: RuntimeDescriptor = RuntimeDescriptor {
///     name: "runc",
///     isolation: "OCI container",
///     max_profile: Profile::Standard,
///     unit_kinds: &[UnitKind::Command],
/// };
/// let runtime = UnavailableRuntime::new(RUNC, "no root filesystem: set rootfs");
/// assert_eq!(runtime.name(), "runc");
/// assert!(matches!(runtime.availability(), toolexec::Availability::Unavailable { .. }));
/// ```
#[derive(Debug, Clone)]
pub struct UnavailableRuntime {
    descriptor: RuntimeDescriptor,
    unit_kinds: Vec<UnitKind>,
    reason: String,
}

impl UnavailableRuntime {
    /// `descriptor`'s runtime, unavailable for `reason` (one line: what is
    /// missing and where to set it).
    pub fn new(descriptor: RuntimeDescriptor, reason: impl Into<String>) -> Self {
        UnavailableRuntime {
            descriptor,
            unit_kinds: descriptor.unit_kinds.to_vec(),
            reason: reason.into(),
        }
    }

    /// The profile and unit kinds the configuration gives it, where they
    /// are settings (a remote runtime's).
    pub fn configured(mut self, max_profile: Profile, unit_kinds: Vec<UnitKind>) -> Self {
        self.descriptor.max_profile = max_profile;
        self.unit_kinds = unit_kinds;
        self
    }
}

impl Runtime for UnavailableRuntime {
    fn name(&self) -> &str {
        self.descriptor.name
    }

    fn isolation(&self) -> &str {
        self.descriptor.isolation
    }

    fn max_profile(&self) -> Profile {
        self.descriptor.max_profile
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        &self.unit_kinds
    }

    fn availability(&self) -> Availability {
        Availability::Unavailable {
            reason: self.reason.clone(),
        }
    }

    fn run<'a>(&'a self, _request: RunRequest, _ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        let error = Error::backend_unavailable(
            format!("runtime {}", self.descriptor.name),
            self.reason.clone(),
        );
        Box::pin(std::future::ready(RunOutcome::error(
            self.descriptor.name,
            &error,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ProfileMap, Runtimes, Unit};

    #[tokio::test]
    async fn never_selected_and_runs_nothing() {
        let map = ProfileMap {
            standard: vec!["runc".into()],
            ..ProfileMap::default()
        };
        let mut runtimes = Runtimes::new(map);
        runtimes.register(UnavailableRuntime::new(
            RuntimeDescriptor {
                name: "runc",
                isolation: "x",
                max_profile: Profile::Standard,
                unit_kinds: &[UnitKind::Command],
            },
            "no rootfs configured",
        ));
        let Err(err) = runtimes.select(Profile::Standard, UnitKind::Command) else {
            panic!("an unconfigured runtime was selected");
        };
        assert!(
            err.message.contains("runc: no rootfs configured"),
            "{err:?}"
        );
        let request = RunRequest::new(Unit::command(["true"]), Profile::Standard);
        let outcome = runtimes.run(request, None, Default::default()).await;
        assert_eq!(outcome.status.as_str(), "error", "{outcome:?}");
    }
}
