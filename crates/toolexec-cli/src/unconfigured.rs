//! A runtime the configuration does not set up enough to run (no root
//! filesystem, no image, no URL, an unreadable key): listed by `toolexec
//! runtimes` as unavailable with the reason, never selected.

use toolexec::{Availability, BoxFuture, ErrorBody, ErrorCode};
use toolexec_runtime::{Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime, UnitKind};

/// A named runtime that is unavailable for a configuration reason.
#[derive(Debug, Clone)]
pub struct Unconfigured {
    /// The runtime's registered name (`runc`, `docker`, ...).
    pub name: &'static str,
    /// What the runtime would isolate with, once configured.
    pub isolation: &'static str,
    /// The strongest profile it would serve.
    pub max_profile: Profile,
    /// The unit kinds it would run.
    pub unit_kinds: Vec<UnitKind>,
    /// One line: what is missing and where to set it.
    pub reason: String,
}

impl Runtime for Unconfigured {
    fn name(&self) -> &str {
        self.name
    }

    fn isolation(&self) -> &str {
        self.isolation
    }

    fn max_profile(&self) -> Profile {
        self.max_profile
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
        let error = ErrorBody {
            code: ErrorCode::BackendUnavailable,
            message: format!(
                "backend_unavailable: runtime {}: {}",
                self.name, self.reason
            ),
            details: None,
        };
        Box::pin(std::future::ready(RunOutcome::new(
            self.name,
            RunStatus::Error { error },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolexec_runtime::{ProfileMap, Runtimes, Unit};

    #[tokio::test]
    async fn never_selected_and_runs_nothing() {
        let map = ProfileMap {
            standard: vec!["runc".into()],
            ..ProfileMap::default()
        };
        let mut runtimes = Runtimes::new(map);
        runtimes.register(Unconfigured {
            name: "runc",
            isolation: "x",
            max_profile: Profile::Standard,
            unit_kinds: vec![UnitKind::Command],
            reason: "no rootfs configured".into(),
        });
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
