//! Known failures: the one place a runtime may fail a case, each with its
//! reason. A listed case that passes fails the suite (remove the entry
//! with the fix).

use crate::Subject;

/// A case a runtime is known to fail.
#[derive(Debug, Clone, Copy)]
pub struct KnownFailure {
    /// [`toolexec_runtime::Runtime::name`].
    pub runtime: &'static str,
    /// [`crate::Case::name`].
    pub case: &'static str,
    /// Why, and where it is tracked.
    pub reason: &'static str,
    /// Where it fails (e.g. only without per-run cgroups).
    pub when: fn(&Subject) -> bool,
}

/// Every known failure.
pub const KNOWN_FAILURES: &[KnownFailure] = &[KnownFailure {
    runtime: "bubblewrap",
    case: "cpu_spin_hits_the_cpu_limit",
    reason: "bubblewrap without per-run cgroups (unprivileged): RLIMIT_CPU's SIGXCPU stops \
                 the unit but the outcome says failed (killed by signal 24), not cpu_time",
    when: |s| !s.cgroup_limits,
}];

/// The known failure of `case` on `subject`, if listed.
pub fn known_failure(subject: &Subject, case: &str) -> Option<&'static KnownFailure> {
    KNOWN_FAILURES
        .iter()
        .find(|k| k.runtime == subject.name && k.case == case && (k.when)(subject))
}
