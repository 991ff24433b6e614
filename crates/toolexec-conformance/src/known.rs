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

fn always(_: &Subject) -> bool {
    true
}

/// Every known failure.
pub const KNOWN_FAILURES: &[KnownFailure] = &[
    KnownFailure {
        runtime: "docker",
        case: "live_output",
        reason: "docker: no live output (issue 10, fixed by the lead's capture extraction)",
        when: always,
    },
    KnownFailure {
        runtime: "docker",
        case: "seccomp_deny_list",
        reason: "docker: the daemon's default seccomp profile, not the shared deny-list \
                 (modify_ldt runs, io_uring_setup is allowed); issue 10, one sandbox layer",
        when: always,
    },
    KnownFailure {
        runtime: "runc",
        case: "fork_bomb_hits_the_process_limit",
        reason: "runc: forks refused by pids.max give no verdict when the unit still exits 0 \
                 (classified only for failed runs); issue 10, one sandbox layer",
        when: always,
    },
    KnownFailure {
        runtime: "runc",
        case: "writes_outside_tmp_fail_and_the_host_is_untouched",
        reason: "runc: /tmp is not writable by the unit when the script worker is bound \
                 at /tmp/.toolexec-worker (Permission denied)",
        when: always,
    },
    KnownFailure {
        runtime: "runc",
        case: "tmp_is_bounded_by_the_disk_limit",
        reason: "runc: /tmp is not writable by the unit when the script worker is bound \
                 at /tmp/.toolexec-worker (Permission denied)",
        when: always,
    },
    KnownFailure {
        runtime: "bubblewrap",
        case: "cpu_spin_hits_the_cpu_limit",
        reason: "bubblewrap without per-run cgroups (unprivileged): RLIMIT_CPU's SIGXCPU stops \
                 the unit but the outcome says failed (killed by signal 24), not cpu_time",
        when: |s| !s.cgroup_limits,
    },
];

/// The known failure of `case` on `subject`, if listed.
pub fn known_failure(subject: &Subject, case: &str) -> Option<&'static KnownFailure> {
    KNOWN_FAILURES
        .iter()
        .find(|k| k.runtime == subject.name && k.case == case && (k.when)(subject))
}
