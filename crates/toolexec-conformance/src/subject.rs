//! What a runtime is and claims, as far as the expectations care.

use toolexec_runtime::{Mechanism, Profile, Runtime, Unit, UnitKind};

use crate::probe::PROBE_PY;

/// The root filesystem units see, which decides how the probe runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// The host's `/usr` (read-only): `python3` runs the probe
    /// (`fixtures/probe.py`).
    HostUsr,
    /// A busybox image without Python: the static probe
    /// (`fixtures/probe.rs`) is in the image at this path.
    Busybox {
        /// The probe's path inside the image.
        probe: String,
    },
}

/// Whose kernel answers the unit's system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// The host kernel (namespaces, seccomp): the unit's processes are
    /// host processes.
    Host,
    /// A user-space kernel (gVisor): the unit's processes live inside the
    /// sandbox process; system calls it lacks answer `ENOSYS`.
    UserSpace,
}

/// A runtime under test, as the expectations see it.
#[derive(Debug, Clone)]
pub struct Subject {
    /// [`Runtime::name`].
    pub name: String,
    /// The root units see.
    pub root: Root,
    /// Whose kernel runs the unit.
    pub kernel: Kernel,
    /// [`Runtime::max_profile`]: the profile every case runs under.
    pub profile: Profile,
    /// Whether it runs script units ([`Runtime::unit_kinds`]).
    pub script_units: bool,
    /// Whether limit verdicts (memory, processes) come from a per-run
    /// cgroup: the `cgroups` mechanism when the runtime reports one, else
    /// assumed (container runtimes do not start a unit without its
    /// cgroup).
    pub cgroup_limits: bool,
    /// Whether something bounds a unit's processes: the runtime's
    /// `processes` mechanism where it lists one, else its per-run cgroup.
    pub processes_bounded: bool,
    /// [`Runtime::mechanisms`].
    pub mechanisms: Vec<Mechanism>,
}

impl Subject {
    /// The subject for `runtime`, from what it reports.
    pub fn of(runtime: &dyn Runtime, root: Root, kernel: Kernel) -> Self {
        let mechanisms = runtime.mechanisms();
        let cgroup_limits = mechanisms
            .iter()
            .find(|m| m.name == "cgroups")
            .is_none_or(|m| m.enforced);
        Subject {
            name: runtime.name().to_owned(),
            root,
            kernel,
            profile: runtime.max_profile(),
            script_units: runtime.unit_kinds().contains(&UnitKind::Script),
            cgroup_limits,
            processes_bounded: mechanisms
                .iter()
                .find(|m| m.name == "processes")
                .map_or(cgroup_limits, |m| m.enforced),
            mechanisms,
        }
    }

    /// A unit running the probe with `args` (see `fixtures/probe.rs`).
    pub fn probe<S: AsRef<str>>(&self, args: &[S]) -> Unit {
        let mut argv: Vec<String> = match &self.root {
            Root::HostUsr => vec!["python3".into(), "-c".into(), PROBE_PY.into()],
            Root::Busybox { probe } => vec![probe.clone()],
        };
        argv.extend(args.iter().map(|a| a.as_ref().to_owned()));
        Unit::command(argv)
    }
}

/// A `sh -c` unit.
pub(crate) fn sh(script: impl Into<String>) -> Unit {
    Unit::command(["sh".to_owned(), "-c".to_owned(), script.into()])
}
