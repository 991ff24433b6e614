//! Bounds on what clients can hold: HTTP connections, slow requests and
//! sessions ([`HttpLimits`]), and tool runs in flight ([`RunLimits`]).
//! Limits are data, checked when the server is built ([`HttpLimits::check`],
//! [`RunLimits::check`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolexec::{Error, ErrorBody, ErrorCode};

/// Default [`HttpLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default [`HttpLimits::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`HttpLimits::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`HttpLimits::max_sessions`].
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Default [`HttpLimits::session_idle_timeout`].
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default [`RunLimits::max_concurrent`].
pub const DEFAULT_MAX_CONCURRENT_RUNS: usize = 64;
/// Default [`RunLimits::max_queued`].
pub const DEFAULT_MAX_QUEUED_RUNS: usize = 256;

/// The backend name in the gateway's own `backend_unavailable` errors.
pub(crate) const BACKEND: &str = "mcp-gateway";

/// Bounds on the streamable HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpLimits {
    /// Connections served at once. A connection over the limit is answered
    /// `503 Service Unavailable` (with `Retry-After`) and closed.
    pub max_connections: usize,
    /// Time to receive a request's headers, counted from the moment the
    /// connection is open or the previous response was sent: it closes
    /// connections that send headers slowly and keep-alive connections left
    /// idle.
    pub header_timeout: Duration,
    /// Time to receive a request's whole body once its headers are in;
    /// a body still arriving then gets `408 Request Timeout`.
    pub body_timeout: Duration,
    /// MCP sessions open at once. An `initialize` over the limit gets `503`
    /// with a JSON-RPC error naming the limit.
    pub max_sessions: usize,
    /// A session that sees no message this long is closed (its client gets
    /// `404` and must initialize again). Must exceed the longest tool call
    /// that reports no progress: a silent call counts as idle.
    pub session_idle_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
        }
    }
}

impl HttpLimits {
    /// `invalid_request` naming the first count or duration that is zero.
    pub fn check(&self) -> Result<(), Error> {
        let zero = [
            ("max_connections", self.max_connections == 0),
            ("header_timeout", self.header_timeout.is_zero()),
            ("body_timeout", self.body_timeout.is_zero()),
            ("max_sessions", self.max_sessions == 0),
            ("session_idle_timeout", self.session_idle_timeout.is_zero()),
        ];
        match zero.iter().find(|(_, z)| *z) {
            Some((field, _)) => Err(Error::invalid_request(
                format!("limits.{field}"),
                "must be greater than 0",
            )),
            None => Ok(()),
        }
    }
}

/// Bounds on tool runs (`run_tool`, `run_chain` and directly published
/// tools), over every client and session of one gateway. `execute_code` has
/// its own pool ([`CodeModeOptions::max_concurrent`](super::CodeModeOptions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunLimits {
    /// Runs in flight at once.
    pub max_concurrent: usize,
    /// Runs waiting for a slot (in arrival order) while `max_concurrent`
    /// run; one more is refused at once with `backend_unavailable`
    /// (an `isError` result). 0: never wait.
    pub max_queued: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_concurrent: DEFAULT_MAX_CONCURRENT_RUNS,
            max_queued: DEFAULT_MAX_QUEUED_RUNS,
        }
    }
}

impl RunLimits {
    /// Limits with `max_concurrent` runs and `max_queued` waiting.
    pub fn new(max_concurrent: usize, max_queued: usize) -> Self {
        RunLimits {
            max_concurrent,
            max_queued,
        }
    }

    /// `invalid_request` when `max_concurrent` is 0.
    pub fn check(&self) -> Result<(), Error> {
        if self.max_concurrent == 0 {
            return Err(Error::invalid_request(
                "runs.max_concurrent",
                "must be greater than 0",
            ));
        }
        Ok(())
    }
}

/// Admission to tool runs: `admitted` counts runs running or waiting, `slots`
/// those running.
#[derive(Debug)]
pub(crate) struct RunSlots {
    limits: RunLimits,
    admitted: Arc<Semaphore>,
    slots: Arc<Semaphore>,
}

/// Held for the length of one run.
pub(crate) struct RunPermit {
    _admitted: OwnedSemaphorePermit,
    _slot: OwnedSemaphorePermit,
}

impl RunSlots {
    pub(crate) fn new(limits: RunLimits) -> Self {
        let running = limits.max_concurrent.max(1);
        RunSlots {
            limits,
            admitted: Arc::new(Semaphore::new(running.saturating_add(limits.max_queued))),
            slots: Arc::new(Semaphore::new(running)),
        }
    }

    /// A slot: at once if one is free, after waiting in line if the queue
    /// has room, else the `backend_unavailable` body to answer with.
    /// Dropping the future leaves the line.
    pub(crate) async fn acquire(&self) -> Result<RunPermit, ErrorBody> {
        let admitted = self
            .admitted
            .clone()
            .try_acquire_owned()
            .map_err(|_| self.at_capacity())?;
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.at_capacity())?;
        Ok(RunPermit {
            _admitted: admitted,
            _slot: slot,
        })
    }

    /// Runs in flight and runs waiting for a slot, now.
    pub(crate) fn load(&self) -> (usize, usize) {
        let running = self.limits.max_concurrent.max(1);
        let admitted_total = running.saturating_add(self.limits.max_queued);
        let in_flight = running - self.slots.available_permits().min(running);
        let admitted = admitted_total - self.admitted.available_permits().min(admitted_total);
        (in_flight, admitted.saturating_sub(in_flight))
    }

    fn at_capacity(&self) -> ErrorBody {
        let RunLimits {
            max_concurrent,
            max_queued,
        } = self.limits;
        ErrorBody {
            code: ErrorCode::BackendUnavailable,
            message: format!(
                "backend_unavailable: {BACKEND}: at capacity: {max_concurrent} tool runs in \
                 flight and {max_queued} waiting; retry later"
            ),
            details: Some(json!({
                "reason": "at_capacity",
                "max_concurrent_runs": max_concurrent,
                "max_queued_runs": max_queued,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_wait_in_a_bounded_line() {
        let slots = RunSlots::new(RunLimits::new(1, 1));
        let first = slots.acquire().await.unwrap();
        let mut waiting = Box::pin(slots.acquire());
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        let refused = slots.acquire().await.err().expect("the line is full");
        assert_eq!(refused.code, ErrorCode::BackendUnavailable);
        assert!(
            refused
                .message
                .starts_with("backend_unavailable: mcp-gateway: at capacity")
        );
        drop(first);
        let second = waiting.await.unwrap();
        // Leaving the line (dropping the future) frees its place.
        let mut third = Box::pin(slots.acquire());
        assert!(futures::poll!(third.as_mut()).is_pending());
        drop(third);
        let mut fourth = Box::pin(slots.acquire());
        assert!(futures::poll!(fourth.as_mut()).is_pending());
        drop(second);
        assert!(fourth.await.is_ok());
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(HttpLimits::default().check().is_ok());
        assert!(RunLimits::default().check().is_ok());
        let l = HttpLimits {
            max_sessions: 0,
            ..HttpLimits::default()
        };
        assert!(
            l.check()
                .unwrap_err()
                .to_string()
                .contains("limits.max_sessions")
        );
        assert!(RunLimits::new(0, 5).check().is_err());
        assert!(RunLimits::new(1, 0).check().is_ok());
    }
}
