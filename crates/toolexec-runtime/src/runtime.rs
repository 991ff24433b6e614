//! The runtime contract.

use std::sync::Arc;

use serde::Serialize;
use toolexec::{Availability, BoxFuture, CancellationToken};

use crate::{Profile, RunOutcome, RunRequest, ToolHost, UnitKind};

/// What one run gets besides its request: the tool host (budget, allowlist,
/// log), the caller's cancellation and, optionally, a sink for output as
/// it is produced.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// Tools reachable from the unit, through the channel.
    pub host: ToolHost,
    /// Cancels the run; the runtime stops the unit and cleans up.
    pub cancel: CancellationToken,
    /// Receives stdout and stderr while the unit runs, for runtimes that
    /// can stream (the process runtimes); the outcome still carries all of
    /// it. `None`: output arrives only with the outcome.
    pub output: Option<OutputSink>,
}

impl RunContext {
    /// A context with no output sink.
    pub fn new(host: ToolHost, cancel: CancellationToken) -> Self {
        RunContext {
            host,
            cancel,
            output: None,
        }
    }

    /// Streams output to `sink` while the unit runs.
    pub fn with_output(mut self, sink: OutputSink) -> Self {
        self.output = Some(sink);
        self
    }
}

/// Which stream an [`OutputChunk`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Bytes a unit wrote, in the order written (within a stream). The chunks
/// of a run add up to exactly what its outcome's `stdout`/`stderr` hold:
/// bytes past the output limit are neither kept nor sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// The stream.
    pub stream: OutputStream,
    /// The bytes (not necessarily whole UTF-8 characters).
    pub bytes: Vec<u8>,
}

/// The sending side of live output; a dropped receiver is ignored (the
/// run goes on).
#[derive(Debug, Clone)]
pub struct OutputSink(tokio::sync::mpsc::UnboundedSender<OutputChunk>);

impl OutputSink {
    /// A sink and the receiver its chunks arrive on. The channel holds at
    /// most what the run's output limit allows.
    pub fn channel() -> (Self, tokio::sync::mpsc::UnboundedReceiver<OutputChunk>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (OutputSink(tx), rx)
    }

    /// Sends a chunk (nothing for an empty one).
    pub fn send(&self, stream: OutputStream, bytes: &[u8]) {
        if !bytes.is_empty() {
            let _ = self.0.send(OutputChunk {
                stream,
                bytes: bytes.to_vec(),
            });
        }
    }
}

/// Executes units of work in isolation.
///
/// Like a tower `Service`, deliberately small: the [`crate::Runtimes`]
/// registry does selection by profile, limit validation and tool-host setup
/// around it. Implementations must
///
/// - enforce every limit they can, and report each limit's mechanism (or
///   `not enforced: why`) in [`RunOutcome::enforcement`];
/// - stop the unit and release everything (processes, cgroups, containers,
///   temporary files) when the run ends for any reason, including
///   cancellation and the caller dropping the future;
/// - never panic on hostile units: every failure is a [`crate::RunStatus`].
pub trait Runtime: Send + Sync + 'static {
    /// Stable name (`bubblewrap`, `wasm`, `host`, ...), as used in
    /// [`crate::ProfileMap`].
    fn name(&self) -> &str;

    /// One line on how units are isolated.
    fn isolation(&self) -> &str;

    /// The strongest profile this runtime is fit for. The registry never
    /// uses it for a stronger one, whatever the configuration says.
    fn max_profile(&self) -> Profile;

    /// The unit kinds this runtime runs.
    fn unit_kinds(&self) -> &[UnitKind];

    /// Whether it can run on this machine now; if not, what is missing, in
    /// one line.
    fn availability(&self) -> Availability;

    /// Runs one unit. The request's limits are already validated.
    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome>;

    /// Each isolation mechanism as it stands on this machine: what
    /// enforces it, or why it is missing. A runtime whose
    /// [`Runtime::max_profile`] depends on them lists them here, so
    /// `toolexec runtimes` shows what is really enforced.
    fn mechanisms(&self) -> Vec<Mechanism> {
        Vec::new()
    }
}

/// One isolation mechanism of a runtime, as measured on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mechanism {
    /// Short name (`user`, `seccomp`, `landlock`, `cgroups`, ...).
    pub name: String,
    /// Whether it is in force.
    pub enforced: bool,
    /// What enforces it, or why it is missing.
    pub detail: String,
}

impl Mechanism {
    /// A mechanism in force, and how.
    pub fn enforced(name: impl Into<String>, how: impl Into<String>) -> Self {
        Mechanism {
            name: name.into(),
            enforced: true,
            detail: how.into(),
        }
    }

    /// A missing mechanism, and why.
    pub fn missing(name: impl Into<String>, why: impl Into<String>) -> Self {
        Mechanism {
            name: name.into(),
            enforced: false,
            detail: why.into(),
        }
    }
}

/// A runtime as `toolexec runtimes` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeInfo {
    /// [`Runtime::name`].
    pub name: String,
    /// [`Runtime::isolation`].
    pub isolation: String,
    /// [`Runtime::max_profile`].
    pub max_profile: Profile,
    /// [`Runtime::unit_kinds`].
    pub unit_kinds: Vec<UnitKind>,
    /// Whether it is available.
    pub available: bool,
    /// Why not, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The profiles it serves in the current mapping.
    pub profiles: Vec<Profile>,
    /// [`Runtime::mechanisms`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mechanisms: Vec<Mechanism>,
}

impl RuntimeInfo {
    pub(crate) fn of(runtime: &Arc<dyn Runtime>, profiles: Vec<Profile>) -> Self {
        let (available, reason) = match runtime.availability() {
            Availability::Available => (true, None),
            Availability::Unavailable { reason } => (false, Some(reason)),
        };
        RuntimeInfo {
            name: runtime.name().to_owned(),
            isolation: runtime.isolation().to_owned(),
            max_profile: runtime.max_profile(),
            unit_kinds: runtime.unit_kinds().to_vec(),
            available,
            reason,
            profiles,
            mechanisms: runtime.mechanisms(),
        }
    }
}
