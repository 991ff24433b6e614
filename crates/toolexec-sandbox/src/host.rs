//! The unsafe host runtime: commands as plain host processes.

use std::ffi::OsString;

use toolexec::{Availability, BoxFuture};
use toolexec_runtime::{
    Enforcement, LimitKind, Profile, RunContext, RunOutcome, RunRequest, Runtime,
    RuntimeDescriptor, Unit, UnitKind,
};

use crate::process::{ProcessSpec, run_process};
use crate::rlimits;

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
/// the tool channel. **Not a sandbox**: it can read and write what the
/// host user can and use the network. Fit for the `dev` profile only, and
/// in no profile's list unless configured.
#[derive(Debug, Clone)]
pub struct HostRuntime {
    _opt_in: UnsandboxedOptIn,
}

impl HostRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "host";

    /// What the host runtime is: the one source of its name, isolation,
    /// profile and unit kinds.
    pub const DESCRIPTOR: RuntimeDescriptor = RuntimeDescriptor {
        name: Self::NAME,
        isolation: "none: host processes with rlimits and a deadline (unsafe, explicit opt-in)",
        max_profile: Profile::Dev,
        unit_kinds: &[UnitKind::Command],
    };

    /// A host runtime; see the type's warning.
    pub fn new(opt_in: UnsandboxedOptIn) -> Self {
        HostRuntime { _opt_in: opt_in }
    }
}

impl Runtime for HostRuntime {
    fn name(&self) -> &str {
        Self::DESCRIPTOR.name
    }

    fn isolation(&self) -> &str {
        Self::DESCRIPTOR.isolation
    }

    fn max_profile(&self) -> Profile {
        Self::DESCRIPTOR.max_profile
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        Self::DESCRIPTOR.unit_kinds
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(async move {
            let Unit::Command(command) = &request.unit else {
                return RunOutcome::unsupported(self.name(), &request.unit);
            };
            if let Err(error) = command.check() {
                return RunOutcome::error(self.name(), &error);
            }
            let Some((program, args)) = command.argv.split_first() else {
                return RunOutcome::invalid(self.name(), "unit.argv", "must name a program");
            };
            let limits = &request.limits;
            let rlimits = rlimits::for_limits(limits, true);
            let mut enforcement = Vec::new();
            if let Some(secs) = rlimits::cpu_seconds(limits) {
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
                channel: true,
                ..ProcessSpec::default()
            };
            let run = match run_process(spec, limits, &ctx).await {
                Ok(run) => run,
                Err(e) => return RunOutcome::invalid(self.name(), "unit.argv", &e.to_string()),
            };
            let mut outcome = run.into_outcome(self.name(), &ctx, limits, false);
            enforcement.extend([
                Enforcement::by(LimitKind::WallTime, "host timer, process-group SIGKILL"),
                Enforcement::by(LimitKind::Output, "host pipe capture"),
                Enforcement::by(LimitKind::ToolCalls, "host channel budget"),
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
