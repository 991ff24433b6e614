//! The runtime registry: selection by profile, and the run entry point.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use toolexec::{Availability, CancellationToken, ErrorBody, ErrorCode, Exec, ToolAccess};
use tracing::Instrument;

use crate::{
    Profile, ProfileMap, RunContext, RunOutcome, RunRequest, RunStatus, Runtime, RuntimeInfo,
    ToolHost, UnitKind,
};

/// The runtimes of an application and the profile mapping.
///
/// ```
/// use toolexec_runtime::{Profile, ProfileMap, Runtimes, UnitKind};
/// let runtimes = Runtimes::new(ProfileMap::default());
/// // Nothing registered: the error names the profile and the unit kind.
/// let err = runtimes.select(Profile::Hardened, UnitKind::Command).err().unwrap();
/// assert!(err.message.contains("hardened"));
/// ```
#[derive(Clone, Default)]
pub struct Runtimes {
    runtimes: Vec<Arc<dyn Runtime>>,
    map: ProfileMap,
}

impl std::fmt::Debug for Runtimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.runtimes.iter().map(|r| r.name()).collect();
        f.debug_struct("Runtimes")
            .field("runtimes", &names)
            .field("map", &self.map)
            .finish()
    }
}

impl Runtimes {
    /// An empty registry with this mapping.
    pub fn new(map: ProfileMap) -> Self {
        Runtimes {
            runtimes: Vec::new(),
            map,
        }
    }

    /// Adds a runtime (replacing one of the same name).
    pub fn register(&mut self, runtime: impl Runtime) -> &mut Self {
        self.register_arc(Arc::new(runtime))
    }

    /// Adds a shared runtime (replacing one of the same name).
    pub fn register_arc(&mut self, runtime: Arc<dyn Runtime>) -> &mut Self {
        self.runtimes.retain(|r| r.name() != runtime.name());
        self.runtimes.push(runtime);
        self
    }

    /// The mapping.
    pub fn profile_map(&self) -> &ProfileMap {
        &self.map
    }

    /// Replaces the mapping.
    pub fn set_profile_map(&mut self, map: ProfileMap) {
        self.map = map;
    }

    /// The runtime called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Runtime>> {
        self.runtimes.iter().find(|r| r.name() == name)
    }

    /// Every registered runtime with its availability, in registration order.
    pub fn list(&self) -> Vec<RuntimeInfo> {
        self.runtimes
            .iter()
            .map(|r| {
                let profiles = Profile::ALL
                    .into_iter()
                    .filter(|p| {
                        *p <= r.max_profile()
                            && self.map.candidates(*p).iter().any(|n| n == r.name())
                    })
                    .collect();
                RuntimeInfo::of(r, profiles)
            })
            .collect()
    }

    /// The first available runtime mapped to `profile` that runs `kind`
    /// units and is fit for the profile. The error (`backend_unavailable`)
    /// says, for each candidate, why it was passed over.
    pub fn select(&self, profile: Profile, kind: UnitKind) -> Result<Arc<dyn Runtime>, ErrorBody> {
        let mut why = Vec::new();
        for name in self.map.candidates(profile) {
            let Some(runtime) = self.get(name) else {
                why.push(format!("{name}: not registered"));
                continue;
            };
            if runtime.max_profile() < profile {
                why.push(format!(
                    "{name}: only fit for profile {} or weaker",
                    runtime.max_profile()
                ));
                continue;
            }
            if !runtime.unit_kinds().contains(&kind) {
                why.push(format!("{name}: does not run {} units", kind.as_str()));
                continue;
            }
            match runtime.availability() {
                Availability::Available => return Ok(runtime.clone()),
                Availability::Unavailable { reason } => why.push(format!("{name}: {reason}")),
            }
        }
        if why.is_empty() {
            why.push("no runtime is mapped to it".into());
        }
        Err(ErrorBody {
            code: ErrorCode::BackendUnavailable,
            message: format!(
                "backend_unavailable: no runtime can run a {} unit under profile {profile}: {}",
                kind.as_str(),
                why.join("; ")
            ),
            details: Some(json!({"profile": profile, "unit_kind": kind, "candidates": why})),
        })
    }

    /// Runs `request` on the runtime selected for its profile, with tools
    /// from `exec` (none when `None`), until done or `cancel`.
    pub async fn run(
        &self,
        request: RunRequest,
        exec: Option<&Exec>,
        cancel: CancellationToken,
    ) -> RunOutcome {
        let span = tracing::info_span!(
            target: "toolexec::sandbox",
            "sandbox_run",
            toolexec.sandbox.profile = request.profile.as_str(),
            toolexec.sandbox.unit = request.unit.kind().as_str(),
            toolexec.sandbox.runtime = tracing::field::Empty,
            toolexec.sandbox.ended_by = tracing::field::Empty,
        );
        // Calls from the unit stay in this task's trace and caller.
        let tools = exec.map(|exec| {
            toolexec::telemetry::scoped_access(Arc::new(exec.clone()) as Arc<dyn ToolAccess>)
        });
        self.run_with_tools(request, tools, cancel)
            .instrument(span.clone())
            .await
            .recorded(&span)
    }

    /// Runs `request` as [`Runtimes::run`] does, the unit's tool calls going
    /// to `tools` (a journal, a remote caller) instead of an [`Exec`].
    pub async fn run_with_tools(
        &self,
        request: RunRequest,
        tools: Option<Arc<dyn ToolAccess>>,
        cancel: CancellationToken,
    ) -> RunOutcome {
        self.run_unit(request, tools, cancel).await
    }
}

impl RunOutcome {
    /// Records how the run ended on its span.
    fn recorded(self, span: &tracing::Span) -> RunOutcome {
        let outcome = self;
        span.record("toolexec.sandbox.runtime", outcome.runtime.as_str());
        let ended_by = match outcome.status.limit() {
            Some(limit) => limit.as_str(),
            None => outcome.status.as_str(),
        };
        span.record("toolexec.sandbox.ended_by", ended_by);
        outcome
    }
}

impl Runtimes {
    async fn run_unit(
        &self,
        request: RunRequest,
        tools: Option<Arc<dyn ToolAccess>>,
        cancel: CancellationToken,
    ) -> RunOutcome {
        let started = Instant::now();
        let fail = |runtime: &str, error: ErrorBody| {
            let mut outcome = RunOutcome::new(runtime, RunStatus::Error { error });
            outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
            outcome
        };
        if let Err(error) = request.limits.validate() {
            return fail("none", error.to_body());
        }
        let runtime = match self.select(request.profile, request.unit.kind()) {
            Ok(runtime) => runtime,
            Err(error) => return fail("none", error),
        };
        let host = match tools {
            Some(tools) => ToolHost::with_tools(tools, &request.limits, cancel.clone()),
            None => ToolHost::without_tools(&request.limits),
        };
        runtime.run(request, RunContext::new(host, cancel)).await
    }
}
