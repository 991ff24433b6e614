//! The unsafe host runtime: commands as plain host processes.

use std::ffi::OsString;

use toolexec::{Availability, BoxFuture, ErrorBody, ErrorCode};

use crate::process::{ProcessSpec, Rlimit, RlimitResource, run_process};
use crate::{
    Enforcement, LimitKind, Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime, Unit,
    UnitKind,
};

/// The explicit opt-in [`HostRuntime`] needs: proof the caller knows units
/// run on the host with its user's rights, only rlimits and a deadline
/// around them.
#[derive(Debug, Clone, Copy)]
pub struct UnsandboxedOptIn(());

impl UnsandboxedOptIn {
    /// Opts in to running units outside any sandbox.
    pub fn i_understand_units_run_unsandboxed() -> Self {
        UnsandboxedOptIn(())
    }
}

/// Runs commands directly on the host, in their own process group, with
/// rlimits (CPU, address space, file size), a deadline, an output cap and
/// the tool gateway. **Not a sandbox**: it can read and write what the
/// host user can and use the network. Fit for the `dev` profile only, and
/// in no profile's list unless configured.
#[derive(Debug, Clone)]
pub struct HostRuntime {
    _opt_in: UnsandboxedOptIn,
}

impl HostRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "host";

    /// A host runtime; see the type's warning.
    pub fn new(opt_in: UnsandboxedOptIn) -> Self {
        HostRuntime { _opt_in: opt_in }
    }
}

/// The rlimits every process runtime sets for `limits`: no core dumps,
/// `RLIMIT_CPU` (soft at the limit rounded up to whole seconds, hard one
/// second later), `RLIMIT_FSIZE` at the disk limit, and `RLIMIT_AS` at the
/// memory limit when `address_space` (runtimes with a memory cgroup leave
/// it out: it counts reservations, not use).
pub(crate) fn rlimits_for(limits: &crate::RuntimeLimits, address_space: bool) -> Vec<Rlimit> {
    let rl = |resource, soft, hard| Rlimit {
        resource,
        soft,
        hard,
    };
    let mut out = vec![rl(RlimitResource::Core, 0, 0)];
    if let Some(secs) = cpu_secs(limits) {
        out.push(rl(RlimitResource::Cpu, secs, secs + 1));
    }
    if let Some(disk) = limits.disk_bytes {
        out.push(rl(RlimitResource::FileSize, disk, disk));
    }
    if let (Some(mem), true) = (limits.memory_bytes, address_space) {
        out.push(rl(RlimitResource::AddressSpace, mem, mem));
    }
    out
}

/// The CPU limit as `RLIMIT_CPU` seconds: rounded up, at least 1.
pub(crate) fn cpu_secs(limits: &crate::RuntimeLimits) -> Option<u64> {
    limits.cpu_time.map(crate::process::rlimit_cpu_seconds)
}

impl Runtime for HostRuntime {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn isolation(&self) -> &str {
        "none: host processes with rlimits and a deadline (unsafe, explicit opt-in)"
    }

    fn max_profile(&self) -> Profile {
        Profile::Dev
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        &[UnitKind::Command]
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(async move {
            let Unit::Command(command) = &request.unit else {
                return unsupported(self.name(), &request.unit);
            };
            if let Err((field, why)) = command.check() {
                return invalid(self.name(), field, &why);
            }
            let Some((program, args)) = command.argv.split_first() else {
                return invalid(self.name(), "unit.argv", "must name a program");
            };
            let limits = &request.limits;
            let rlimits = rlimits_for(limits, true);
            let mut enforcement = Vec::new();
            if let Some(secs) = cpu_secs(limits) {
                enforcement.push(Enforcement::by(
                    LimitKind::CpuTime,
                    format!("RLIMIT_CPU {secs} s"),
                ));
            }
            if limits.memory_bytes.is_some() {
                enforcement.push(Enforcement::by(LimitKind::Memory, "RLIMIT_AS"));
            }
            let mut env: Vec<(OsString, OsString)> =
                vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())];
            env.extend(command.env.iter().map(|(k, v)| (k.into(), v.into())));
            let spec = ProcessSpec {
                program: program.into(),
                args: args.iter().map(OsString::from).collect(),
                env,
                cwd: command.cwd.as_ref().map(Into::into),
                stdin: command.stdin.clone().map(String::into_bytes),
                rlimits,
                gateway: true,
                ..ProcessSpec::default()
            };
            let run = match run_process(spec, limits, &ctx).await {
                Ok(run) => run,
                Err(e) => return invalid(self.name(), "unit.argv", &e.to_string()),
            };
            let mut outcome = run.into_outcome(self.name(), &ctx, limits, false);
            enforcement.extend([
                Enforcement::by(LimitKind::WallTime, "host timer, process-group SIGKILL"),
                Enforcement::by(LimitKind::Output, "host pipe capture"),
                Enforcement::by(LimitKind::ToolCalls, "host gateway budget"),
                Enforcement::not_enforced(LimitKind::Processes, "no sandbox (host runtime)"),
                // Nothing here can filter by host or turn the network off.
                Enforcement::not_enforced(LimitKind::Network, "no sandbox (host runtime)"),
                Enforcement::not_enforced(
                    LimitKind::Disk,
                    "RLIMIT_FSIZE bounds each file, not the total",
                ),
            ]);
            outcome.enforcement = enforcement;
            outcome
        })
    }
}

pub(crate) fn unsupported(runtime: &str, unit: &Unit) -> RunOutcome {
    invalid(
        runtime,
        "unit.kind",
        &format!(
            "runtime {runtime} does not run {} units",
            unit.kind().as_str()
        ),
    )
}

pub(crate) fn invalid(runtime: &str, field: &str, message: &str) -> RunOutcome {
    RunOutcome::new(
        runtime,
        RunStatus::Error {
            error: ErrorBody {
                code: ErrorCode::InvalidRequest,
                message: format!("invalid_request: {field}: {message}"),
                details: Some(serde_json::json!({"field": field})),
            },
        },
    )
}
