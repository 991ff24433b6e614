//! Runs cases against a runtime and judges them.

use std::time::{Duration, Instant};

use toolexec::{CancellationToken, Exec};
use toolexec_runtime::{OutputSink, RunContext, RunOutcome, RunRequest, Runtime, ToolHost, Unit};

use crate::case::{Case, Drive, Observed};
use crate::check;
use crate::{Host, HostProcess, Kernel, Subject, known_failure};

/// How long [`Drive::WatchHost`] looks for the unit's processes.
const WATCH_FOR: Duration = Duration::from_secs(30);
/// The watch's poll interval.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// The judgement on one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The expectation held, and the runtime served a normal unit after.
    Pass,
    /// What went wrong.
    Fail(String),
    /// The case does not apply to this runtime, and why.
    NotApplicable(String),
    /// A listed known failure failed as expected (the reason, then what
    /// went wrong).
    KnownFailure(&'static str, String),
    /// A listed known failure passed: remove its entry.
    FixedKnownFailure(&'static str),
}

impl Verdict {
    /// Whether it fails the suite.
    pub fn is_failure(&self) -> bool {
        matches!(self, Verdict::Fail(_) | Verdict::FixedKnownFailure(_))
    }
}

/// One case's verdict and wall time.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// [`Case::name`].
    pub case: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// Wall time of the case, the serving check included.
    pub elapsed: Duration,
}

/// Runs every case of `corpus` in order against `runtime`.
pub async fn run_corpus(
    runtime: &dyn Runtime,
    subject: &Subject,
    host: &Host,
    corpus: &[Case],
) -> Vec<CaseResult> {
    let mut results = Vec::with_capacity(corpus.len());
    for case in corpus {
        results.push(run_case(runtime, subject, host, case).await);
    }
    results
}

/// Runs one case, then a normal unit (the runtime must still serve), and
/// judges both.
pub async fn run_case(
    runtime: &dyn Runtime,
    subject: &Subject,
    host: &Host,
    case: &Case,
) -> CaseResult {
    let started = Instant::now();
    if let Err(why) = (case.applies)(subject) {
        return CaseResult {
            case: case.name,
            verdict: Verdict::NotApplicable(why),
            elapsed: started.elapsed(),
        };
    }
    let observed = observe(runtime, subject, host, case).await;
    let mut result = (case.expect)(subject, host, &observed);
    if let Err(serving) = still_serving(runtime, subject).await {
        let serving = format!("then the runtime no longer served a normal unit: {serving}");
        result = Err(match result {
            Ok(()) => serving,
            Err(e) => format!("{e}; {serving}"),
        });
    }
    let verdict = match (result, known_failure(subject, case.name)) {
        (Ok(()), None) => Verdict::Pass,
        (Err(e), None) => Verdict::Fail(e),
        (Ok(()), Some(k)) => Verdict::FixedKnownFailure(k.reason),
        (Err(e), Some(k)) => Verdict::KnownFailure(k.reason, e),
    };
    CaseResult {
        case: case.name,
        verdict,
        elapsed: started.elapsed(),
    }
}

async fn observe(runtime: &dyn Runtime, subject: &Subject, host: &Host, case: &Case) -> Observed {
    let limits = case.limits_for(subject);
    let cancel = CancellationToken::new();
    let tools = if case.tools {
        ToolHost::new(
            Exec::new(toolexec_testkit::catalog()),
            &limits,
            cancel.clone(),
        )
    } else {
        ToolHost::without_tools(&limits)
    };
    let marker = host.marker(case.index);
    let request =
        RunRequest::new((case.unit)(subject, host, case), subject.profile).with_limits(limits);
    let mut ctx = RunContext::new(tools, cancel.clone());
    let mut observed = Observed {
        outcome: RunOutcome::new(subject.name.clone(), toolexec_runtime::RunStatus::Cancelled),
        live_before_end: false,
        host_processes: Vec::new(),
        marker: marker.clone(),
    };
    let (sink, mut chunks) = OutputSink::channel();
    if matches!(case.drive, Drive::LiveOutput { .. }) {
        ctx = ctx.with_output(sink);
    } else {
        drop(sink);
    }
    let run = runtime.run(request, ctx);
    tokio::pin!(run);
    observed.outcome = match case.drive {
        Drive::Plain => run.await,
        Drive::CancelAfter(after) => {
            tokio::select! {
                out = &mut run => out,
                () = tokio::time::sleep(after) => {
                    cancel.cancel();
                    run.await
                }
            }
        }
        Drive::LiveOutput { marker } => {
            let mut seen = Vec::new();
            loop {
                tokio::select! {
                    out = &mut run => break out,
                    Some(chunk) = chunks.recv() => {
                        seen.extend_from_slice(&chunk.bytes);
                        if !observed.live_before_end
                            && String::from_utf8_lossy(&seen).contains(marker)
                        {
                            observed.live_before_end = true;
                            cancel.cancel();
                        }
                    }
                }
            }
        }
        Drive::WatchHost => {
            let started = Instant::now();
            loop {
                tokio::select! {
                    out = &mut run => break out,
                    () = tokio::time::sleep(WATCH_EVERY) => {
                        for p in Host::processes_with(&marker) {
                            if !observed.host_processes.iter().any(|q| q.pid == p.pid) {
                                observed.host_processes.push(p);
                            }
                        }
                        let running = observed.host_processes.iter().any(|p| p.comm.starts_with("sleep"));
                        // A user-space kernel runs the unit inside its
                        // sandbox process: nothing carries the marker.
                        let enough = match subject.kernel {
                            Kernel::Host => started.elapsed() > WATCH_FOR,
                            Kernel::UserSpace => started.elapsed() > Duration::from_secs(3),
                        };
                        if running || enough {
                            cancel.cancel();
                        }
                    }
                }
            }
        }
    };
    observed
}

/// A normal unit runs and says so.
async fn still_serving(runtime: &dyn Runtime, subject: &Subject) -> Result<(), String> {
    let limits = Case::base_limits();
    let request = RunRequest::new(Unit::command(["echo", "still", "serving"]), subject.profile)
        .with_limits(limits.clone());
    let ctx = RunContext::new(ToolHost::without_tools(&limits), CancellationToken::new());
    let out = runtime.run(request, ctx).await;
    check::ok(&out)?;
    check::stdout_is(&out, "still serving\n")
}

/// The processes of a unit as the host saw them (for messages).
pub(crate) fn describe(processes: &[HostProcess]) -> String {
    processes
        .iter()
        .map(|p| format!("{} {} uids {:?}", p.pid, p.comm, p.uids))
        .collect::<Vec<_>>()
        .join(", ")
}
