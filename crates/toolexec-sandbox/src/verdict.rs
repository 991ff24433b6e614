//! Limit verdicts: the one place that turns a stop of toolexec's own
//! (deadline, output, tool budget) or what a run's cgroup counted (OOM
//! kills, memory-limit hits, refused forks, CPU time) into a
//! `limit_exceeded` status, for every process and container runtime.

use std::time::Duration;

use toolexec_runtime::{LimitKind, RunStatus, RuntimeLimits};

/// What a run's cgroup (or the container engine) counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupEvents {
    /// Processes the OOM killer ended.
    pub oom_kills: u64,
    /// Times the memory (or memory+swap) limit was hit; on v1 the only
    /// trace of an OOM kill of a task outside the counting cgroup.
    pub memory_failcnt: u64,
    /// Forks refused by `pids.max`.
    pub pids_refused: u64,
    /// CPU time of all the run's processes, when accounted.
    pub cpu: Option<Duration>,
}

impl CgroupEvents {
    /// The limit the unit's death is explained by, if any: memory when the
    /// OOM killer ended a process (or the memory limit was hit and the
    /// unit died of `SIGKILL`), else processes when a fork was refused.
    /// Only for a unit that failed on its own: toolexec's own stops
    /// (deadline, output, cancellation) are decided before.
    pub fn failure_verdict(
        &self,
        limits: &RuntimeLimits,
        signal: Option<i32>,
    ) -> Option<RunStatus> {
        let killed = signal == Some(libc::SIGKILL);
        if self.oom_kills > 0 || (killed && self.memory_failcnt > 0) {
            Some(memory_exceeded(limits, self.oom_kills.max(1)))
        } else if self.pids_refused > 0 && limits.max_processes.is_some() {
            Some(processes_exceeded(limits, self.pids_refused))
        } else {
            None
        }
    }

    /// The limit a run still running has hit, if any: an OOM kill, a
    /// refused fork, or CPU time past the limit. Runtimes that watch their
    /// cgroup stop the run on it.
    pub fn live_verdict(&self, limits: &RuntimeLimits) -> Option<RunStatus> {
        if self.oom_kills > 0 {
            return Some(memory_exceeded(limits, self.oom_kills));
        }
        if self.pids_refused > 0 && limits.max_processes.is_some() {
            return Some(processes_exceeded(limits, self.pids_refused));
        }
        match (self.cpu, limits.cpu_time) {
            (Some(used), Some(max)) if used > max => {
                Some(cpu_exceeded(limits, Some(used), "cgroup cpuacct"))
            }
            _ => None,
        }
    }
}

/// Samples a running unit's cgroup every `period` and resolves with the
/// first limit it shows hit ([`CgroupEvents::live_verdict`]); never
/// resolves otherwise. Every runtime that watches a cgroup races this
/// against its run and stops the run when it resolves.
pub async fn watch(
    mut sample: impl FnMut() -> CgroupEvents,
    limits: &RuntimeLimits,
    period: Duration,
) -> RunStatus {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(status) = sample().live_verdict(limits) {
            return status;
        }
    }
}

/// [`watch`] for a run that may have no cgroup (`sample` is `None`): the
/// first limit hit is recorded in `tripped` and the run stopped through
/// `stop`. Never ends: race it against the run.
pub async fn stop_on_limit(
    sample: Option<impl FnMut() -> CgroupEvents>,
    limits: &RuntimeLimits,
    period: Duration,
    stop: &toolexec::CancellationToken,
    tripped: &parking_lot::Mutex<Option<RunStatus>>,
) {
    if let Some(sample) = sample {
        let status = watch(sample, limits, period).await;
        *tripped.lock() = Some(status);
        stop.cancel();
    }
    std::future::pending().await
}

/// `limit_exceeded: memory`: the OOM killer ended `kills` processes.
pub fn memory_exceeded(limits: &RuntimeLimits, kills: u64) -> RunStatus {
    RunStatus::LimitExceeded {
        limit: LimitKind::Memory,
        message: format!(
            "the unit used more than {} bytes of memory (the cgroup OOM killer ended {kills} process(es))",
            limits.memory_bytes.unwrap_or_default()
        ),
    }
}

/// `limit_exceeded: processes`: `refused` forks hit the pid limit.
pub fn processes_exceeded(limits: &RuntimeLimits, refused: u64) -> RunStatus {
    RunStatus::LimitExceeded {
        limit: LimitKind::Processes,
        message: format!(
            "the unit tried to run more than {} processes ({refused} fork(s) refused by pids.max) and was stopped",
            limits.max_processes.unwrap_or_default()
        ),
    }
}

/// `limit_exceeded: cpu_time`, measured as `used` (when known) by `how`.
pub fn cpu_exceeded(limits: &RuntimeLimits, used: Option<Duration>, how: &str) -> RunStatus {
    let max = limits.cpu_time.map(|d| d.as_secs_f64()).unwrap_or_default();
    RunStatus::LimitExceeded {
        limit: LimitKind::CpuTime,
        message: match used {
            Some(used) => format!(
                "the unit's processes used {:.2} s of CPU time, over the {max} s limit ({how})",
                used.as_secs_f64()
            ),
            None => format!("the unit used more than {max} s of CPU time ({how})"),
        },
    }
}

/// `limit_exceeded: wall_time`: the deadline passed and the unit was killed.
pub fn wall_time_exceeded(limits: &RuntimeLimits) -> RunStatus {
    RunStatus::LimitExceeded {
        limit: LimitKind::WallTime,
        message: format!(
            "the unit ran past its {} ms deadline and was killed",
            limits.wall_time.as_millis()
        ),
    }
}

/// `limit_exceeded: output`: the unit wrote more than the output limit.
pub fn output_exceeded(limits: &RuntimeLimits) -> RunStatus {
    RunStatus::LimitExceeded {
        limit: LimitKind::Output,
        message: format!(
            "the unit wrote more than {} bytes of output and was killed",
            limits.max_output_bytes
        ),
    }
}

/// `limit_exceeded: tool_calls`: the unit asked for a call past its budget.
pub fn tool_calls_exceeded(limits: &RuntimeLimits) -> RunStatus {
    RunStatus::LimitExceeded {
        limit: LimitKind::ToolCalls,
        message: format!(
            "the unit asked for more than {} tool calls and was stopped",
            limits.max_tool_calls
        ),
    }
}

/// How a unit that toolexec did not stop ended, from its exit code and the
/// signal that killed it (if any): exit 0 is success, anything else the
/// unit's own failure.
pub fn exit_status(code: Option<i32>, signal: Option<i32>) -> RunStatus {
    match (code, signal) {
        (Some(0), _) => RunStatus::Ok,
        (_, Some(sig)) => RunStatus::Failed {
            message: format!("the unit was killed by signal {sig}"),
        },
        (Some(code), None) => RunStatus::Failed {
            message: format!("the unit exited with code {code}"),
        },
        (None, None) => RunStatus::Failed {
            message: "the unit's exit status is unknown".into(),
        },
    }
}

/// The number after `name` in a `key value` per line file (`memory.events`,
/// `pids.events`, `cpu.stat`, `memory.oom_control`); 0 when absent.
pub fn keyed(text: &str, name: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_counters() {
        let limits = RuntimeLimits {
            memory_bytes: Some(1 << 20),
            max_processes: Some(8),
            ..RuntimeLimits::default()
        };
        let verdict = |events: CgroupEvents, signal| {
            events
                .failure_verdict(&limits, signal)
                .and_then(|s| s.limit())
        };
        let none = CgroupEvents::default();
        assert_eq!(verdict(none, Some(libc::SIGKILL)), None);
        let oom = CgroupEvents {
            oom_kills: 1,
            ..none
        };
        assert_eq!(verdict(oom, None), Some(LimitKind::Memory));
        let failcnt = CgroupEvents {
            memory_failcnt: 3,
            ..none
        };
        assert_eq!(
            verdict(failcnt, Some(libc::SIGKILL)),
            Some(LimitKind::Memory)
        );
        assert_eq!(
            verdict(failcnt, None),
            None,
            "a hit without a kill is no verdict"
        );
        let pids = CgroupEvents {
            pids_refused: 2,
            ..none
        };
        assert_eq!(verdict(pids, None), Some(LimitKind::Processes));
        let unlimited = RuntimeLimits {
            max_processes: None,
            ..RuntimeLimits::default()
        };
        assert_eq!(pids.failure_verdict(&unlimited, None), None);
    }

    #[test]
    fn keyed_files_tolerate_garbage() {
        assert_eq!(keyed("low 0\nmax 7\noom_kill 2\n", "max"), 7);
        assert_eq!(keyed("oom_kill 2\n", "oom_kill"), 2);
        assert_eq!(keyed("garbage\nmax x\n", "max"), 0);
        assert_eq!(keyed("", "max"), 0);
    }
}
