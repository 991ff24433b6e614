//! Bombs and runaways: each ends on its limit, and the runtime goes on.

use std::time::Duration;

use toolexec_runtime::{LimitKind, RunStatus};

use crate::Case;
use crate::case::Drive;
use crate::check::{self, ensure};
use crate::subject::sh;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "fork_bomb_hits_the_process_limit",
            |_, _, _| sh("f() { f | f & }; f; sleep 10"),
            |s, _, o| {
                if s.cgroup_limits {
                    return check::limit(&o.outcome, LimitKind::Processes);
                }
                // Without a per-run cgroup the bound (RLIMIT_NPROC inside
                // the sandbox) refuses the forks but counts nothing the
                // runtime could give a verdict from: the run must still end
                // on its own, and the outcome must say what held it.
                let held = o
                    .outcome
                    .enforced_by(LimitKind::Processes)
                    .is_some_and(|e| e.is_enforced());
                ensure(held, &o.outcome, "the processes limit is not enforced")?;
                ensure(
                    o.outcome.status.limit() != Some(LimitKind::WallTime),
                    &o.outcome,
                    "the bomb ran until the deadline",
                )
            },
        )
        // Only where the runtime says something bounds the processes: an
        // unbounded fork bomb would take the host's whole pid space, every
        // other process's forks included.
        .applies(|s| {
            if s.processes_bounded {
                Ok(())
            } else {
                Err("the runtime reports no mechanism bounding processes here".into())
            }
        })
        .limits(|_, l| {
            l.max_processes = Some(16);
            l.wall_time = Duration::from_secs(15);
        }),
        Case::new(
            "memory_bomb_hits_the_memory_limit",
            |_, _, _| sh("x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}"),
            |s, _, o| {
                check::never(&o.outcome, "survived")?;
                if s.cgroup_limits {
                    check::limit(&o.outcome, LimitKind::Memory)
                } else {
                    ensure(
                        !o.outcome.is_ok(),
                        &o.outcome,
                        "a 200 MB string fit in 64 MiB",
                    )
                }
            },
        )
        .limits(|_, l| {
            l.memory_bytes = Some(64 << 20);
            l.cpu_time = None;
            l.wall_time = Duration::from_secs(60);
        }),
        Case::new(
            "cpu_spin_hits_the_cpu_limit",
            |_, _, _| sh("while :; do :; done"),
            |_, _, o| check::limit(&o.outcome, LimitKind::CpuTime),
        )
        .limits(|_, l| l.cpu_time = Some(Duration::from_secs(1))),
        Case::new(
            "giant_output_is_cut_at_the_limit",
            |_, _, _| sh("yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
            |_, _, o| {
                check::limit(&o.outcome, LimitKind::Output)?;
                let kept = o.outcome.stdout.len() + o.outcome.stderr.len();
                ensure(
                    kept <= 64 << 10,
                    &o.outcome,
                    format!("{kept} bytes kept past a 64 KiB limit"),
                )?;
                ensure(
                    o.outcome.stdout.starts_with("aaaa"),
                    &o.outcome,
                    "the kept output is not the unit's",
                )
            },
        )
        .limits(|_, l| l.max_output_bytes = 64 << 10),
        Case::new(
            "sleep_past_the_deadline_times_out",
            |_, _, _| sh("sleep 60"),
            |_, _, o| {
                check::limit(&o.outcome, LimitKind::WallTime)?;
                ensure(
                    o.outcome.duration_ms < 30_000.0,
                    &o.outcome,
                    format!(
                        "the run lasted {} ms past a 1.5 s deadline",
                        o.outcome.duration_ms
                    ),
                )
            },
        )
        .limits(|_, l| l.wall_time = Duration::from_millis(1500)),
        Case::new(
            "cancellation_stops_the_unit",
            |_, _, _| sh("sleep 60"),
            |_, _, o| {
                ensure(
                    o.outcome.status == RunStatus::Cancelled,
                    &o.outcome,
                    "expected status cancelled",
                )
            },
        )
        .drive(Drive::CancelAfter(Duration::from_millis(1500))),
    ]
}
