//! One case of the corpus: a unit, its limits, how it is driven, and the
//! expectation.

use std::time::Duration;

use toolexec_runtime::{RunOutcome, RuntimeLimits, Unit};

use crate::{Host, HostProcess, Subject};

/// Builds the unit.
pub(crate) type UnitFn = fn(&Subject, &Host, &Case) -> Unit;
/// Adjusts the corpus's base limits.
pub(crate) type LimitsFn = fn(&Subject, &mut RuntimeLimits);
/// `Err(why)` when the case does not apply to the subject.
pub(crate) type AppliesFn = fn(&Subject) -> Result<(), String>;
/// The expectation: `Err` says what went wrong.
pub(crate) type ExpectFn = fn(&Subject, &Host, &Observed) -> Result<(), String>;

/// How the runner drives a run besides starting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drive {
    /// Runs to its end.
    Plain,
    /// Cancels the run's token after this long.
    CancelAfter(Duration),
    /// Attaches an output sink and records whether `marker` reached it
    /// before the run ended; cancels the run once it did.
    LiveOutput {
        /// Text the unit writes first.
        marker: &'static str,
    },
    /// Watches host processes carrying [`Host::marker`] on their command
    /// line until one named `sleep` is seen (at most 30 s), then cancels.
    WatchHost,
}

/// What the runner saw of one run.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The outcome.
    pub outcome: RunOutcome,
    /// [`Drive::LiveOutput`]: whether the marker arrived while the unit
    /// ran.
    pub live_before_end: bool,
    /// [`Drive::WatchHost`]: the host processes seen.
    pub host_processes: Vec<HostProcess>,
    /// The marker the unit was given ([`Host::marker`]).
    pub marker: String,
}

/// A case: stable name, unit, limits, driving and expectation.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Stable name (the table's row).
    pub name: &'static str,
    /// Position in the corpus (for markers).
    pub index: usize,
    /// The unit.
    pub unit: UnitFn,
    /// Limits over the corpus's base ([`Case::base_limits`]).
    pub limits: LimitsFn,
    /// Whether the built-in tools are reachable through the channel.
    pub tools: bool,
    /// How the run is driven.
    pub drive: Drive,
    /// Whether the case applies.
    pub applies: AppliesFn,
    /// The expectation.
    pub expect: ExpectFn,
}

impl Case {
    /// A plain case with the base limits, no tools, always applicable.
    pub fn new(name: &'static str, unit: UnitFn, expect: ExpectFn) -> Case {
        Case {
            name,
            index: 0,
            unit,
            limits: |_, _| {},
            tools: false,
            drive: Drive::Plain,
            applies: |_| Ok(()),
            expect,
        }
    }

    /// With limits adjusted by `f`.
    pub fn limits(mut self, f: LimitsFn) -> Case {
        self.limits = f;
        self
    }

    /// With the built-in tools behind the channel.
    pub fn tools(mut self) -> Case {
        self.tools = true;
        self
    }

    /// Driven by `drive`.
    pub fn drive(mut self, drive: Drive) -> Case {
        self.drive = drive;
        self
    }

    /// Only where `f` says so.
    pub fn applies(mut self, f: AppliesFn) -> Case {
        self.applies = f;
        self
    }

    /// The limits every case starts from: generous enough for Python and
    /// the script worker, small enough to end hostile units quickly.
    pub fn base_limits() -> RuntimeLimits {
        RuntimeLimits {
            wall_time: Duration::from_secs(20),
            cpu_time: Some(Duration::from_secs(10)),
            memory_bytes: Some(256 << 20),
            max_processes: Some(64),
            max_output_bytes: 1 << 20,
            disk_bytes: Some(4 << 20),
            max_tool_calls: 10,
            ..RuntimeLimits::default()
        }
    }

    /// This case's limits for `subject`.
    pub fn limits_for(&self, subject: &Subject) -> RuntimeLimits {
        let mut limits = Case::base_limits();
        (self.limits)(subject, &mut limits);
        limits
    }
}
