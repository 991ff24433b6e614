//! Host-side state of one execution: the limits it runs under, the
//! tool-call log and captured output it has produced so far, and the
//! JavaScript values the host holds while it runs.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use rquickjs::{Function, Value};
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;
use toolexec::{Error, ErrorBody};
use toolexec_runtime::ToolCallLog;

use super::abort::{Abort, AbortFlag};
use crate::allow::AllowList;
use crate::{CodeLimit, CodeLimits, CodeStatus, ToolCallRecord};
use toolexec::ToolAccess;

/// Largest interpreter stack a request may ask for; worker threads have
/// [`crate::engine::WORKER_STACK`] bytes, leaving room for host frames.
pub(crate) const MAX_STACK: usize = 8 << 20;

/// Messages to the worker while it waits.
pub(crate) enum Msg {
    /// A spawned tool call finished.
    Done {
        index: usize,
        result: Result<Json, ErrorBody>,
        finished: Instant,
    },
    /// Something changed (the abort flag); re-check.
    Wake,
}

/// When a logged call started, and whether it has finished.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    pub(super) started: Instant,
    pub(super) done: bool,
}

/// What an execution has produced so far: the tool-call log and captured
/// output. Shared with the caller, which reports it if it has to abandon a
/// worker stuck past its deadline.
#[derive(Default)]
pub(crate) struct Progress {
    /// Bounded records (no arguments or results), within the log's budget.
    pub(super) log: ToolCallLog,
    /// One per record of `log`.
    pub(super) slots: Vec<Slot>,
    stdout: String,
    stderr: String,
    pub(super) bytes: usize,
    pub(super) full: bool,
}

impl Progress {
    /// The tool-call log (calls still running recorded as cancelled) and
    /// the output, leaving `self` as it is.
    pub(crate) fn snapshot(&self) -> (Vec<ToolCallRecord>, String, String) {
        let copy = Progress {
            log: self.log.clone(),
            slots: self.slots.clone(),
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            bytes: self.bytes,
            full: self.full,
        };
        copy.into_parts()
    }

    /// Like [`Self::snapshot`], consuming.
    pub(crate) fn into_parts(mut self) -> (Vec<ToolCallRecord>, String, String) {
        let now = Instant::now();
        for (index, slot) in self.slots.iter().enumerate() {
            if !slot.done {
                self.log.update(index, |r| {
                    let error = Error::Cancelled {
                        tool: r.tool_id.clone(),
                    }
                    .to_body();
                    r.finish(&Err(error), now.saturating_duration_since(slot.started));
                });
            }
        }
        (self.log.into_records(), self.stdout, self.stderr)
    }
}

pub(crate) type SharedProgress = Arc<parking_lot::Mutex<Progress>>;

/// Host-side state of one execution that holds no JavaScript values.
pub(super) struct Shared {
    pub(super) tools: Arc<dyn ToolAccess>,
    pub(super) handle: tokio::runtime::Handle,
    pub(super) limits: CodeLimits,
    pub(super) allow: AllowList,
    pub(super) deadline: Instant,
    pub(super) abort: Arc<AbortFlag>,
    pub(super) cancel: CancellationToken,
    pub(super) tx: Sender<Msg>,
    pub(super) progress: SharedProgress,
    pub(super) in_flight: Cell<usize>,
}

impl Shared {
    /// The status to stop with, if the execution must stop now.
    pub(super) fn stop_status(&self) -> Option<CodeStatus> {
        let l = &self.limits;
        let (limit, message) = match self.abort.get() {
            Abort::Memory => (
                CodeLimit::Memory,
                format!(
                    "the script exceeded its memory limit of {} bytes",
                    l.memory_bytes
                ),
            ),
            Abort::ToolCalls => (
                CodeLimit::ToolCalls,
                format!(
                    "the script tried to make more than {} tool calls",
                    l.max_tool_calls
                ),
            ),
            Abort::Output => (
                CodeLimit::Output,
                format!(
                    "console output and result exceeded {} bytes",
                    l.max_output_bytes
                ),
            ),
            Abort::Cancelled => (
                CodeLimit::Timeout,
                "the execution was cancelled by its caller".to_owned(),
            ),
            Abort::Timeout => (CodeLimit::Timeout, timeout_message(l)),
            Abort::None if Instant::now() >= self.deadline => {
                self.abort.raise(Abort::Timeout);
                (CodeLimit::Timeout, timeout_message(l))
            }
            Abort::None => return None,
        };
        Some(CodeStatus::LimitExceeded { limit, message })
    }

    pub(super) fn should_stop(&self) -> bool {
        self.abort.is_raised() || Instant::now() >= self.deadline
    }

    /// Appends one console line, enforcing the output limit. Returns false
    /// when the limit was hit (the line is cut, capture stops).
    pub(super) fn print(&self, stderr: bool, line: &str) -> bool {
        let mut out = self.progress.lock();
        if out.full {
            return false;
        }
        let room = self.limits.max_output_bytes.saturating_sub(out.bytes);
        let fits = line.len() < room; // the line plus its newline
        let take = if fits {
            line.len()
        } else {
            line.floor_char_boundary(room)
        };
        let buf = if stderr {
            &mut out.stderr
        } else {
            &mut out.stdout
        };
        buf.push_str(&line[..take]);
        if fits {
            buf.push('\n');
        }
        out.bytes += take + usize::from(fits);
        if !fits {
            out.full = true;
            self.abort.raise(Abort::Output);
        }
        fits
    }

    pub(super) fn record_done(
        &self,
        index: usize,
        result: &Result<Json, ErrorBody>,
        finished: Instant,
    ) {
        let mut progress = self.progress.lock();
        let slot = &mut progress.slots[index];
        slot.done = true;
        let elapsed = finished.saturating_duration_since(slot.started);
        progress.log.update(index, |r| r.finish(result, elapsed));
    }
}

/// JavaScript values the host holds during an execution. Cleared before the
/// context is dropped so no reference outlives it.
#[derive(Default)]
pub(super) struct JsState<'js> {
    /// Resolve and reject functions of tool calls in flight, by call index.
    pub(super) pending: HashMap<usize, (Function<'js>, Function<'js>)>,
    /// The error object each failed call rejected with, to recognise an
    /// uncaught tool error by identity.
    pub(super) errors: Vec<(usize, Value<'js>)>,
}

pub(crate) fn timeout_message(l: &CodeLimits) -> String {
    format!(
        "the script did not finish within {} ms",
        l.timeout.as_millis()
    )
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
