//! [`Budget`]: the call and lookup budgets of a run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::Value;
use toolexec::{BoxFuture, CancellationToken, DetailLevel, Error, LimitKind, ToolAccess};

use super::SharedLog;
use crate::ToolCallRecord;

/// A run's budgets and its stop signal, shared by the [`Budget`] layer and
/// whoever ends the run.
pub(crate) struct BudgetState {
    max_calls: usize,
    used: AtomicUsize,
    max_lookups: usize,
    lookups: AtomicUsize,
    exceeded: tokio::sync::Notify,
    /// Set with `exceeded`: a runtime that saw the unit exit in the same
    /// poll as the notification still learns the budget was overrun.
    overrun: AtomicBool,
}

impl BudgetState {
    /// Budgets of `max_calls` calls and 10 × that many lookups (at least 10).
    pub(crate) fn new(max_calls: usize) -> Self {
        BudgetState {
            max_calls,
            used: AtomicUsize::new(0),
            max_lookups: max_calls.saturating_mul(10).max(10),
            lookups: AtomicUsize::new(0),
            exceeded: tokio::sync::Notify::new(),
            overrun: AtomicBool::new(false),
        }
    }

    /// The call budget.
    pub(crate) fn max_calls(&self) -> usize {
        self.max_calls
    }

    /// The calls counted so far, refused ones too.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The lookup (`search`/`describe`) budget.
    pub(crate) fn max_lookups(&self) -> usize {
        self.max_lookups
    }

    /// Whether the call budget is spent.
    pub(crate) fn exhausted(&self) -> bool {
        self.used() >= self.max_calls
    }

    /// Whether a call or lookup past a budget was asked for.
    pub(crate) fn overrun(&self) -> bool {
        self.overrun.load(Ordering::SeqCst)
    }

    /// Resolves once a call or lookup past a budget is asked for.
    pub(crate) async fn exceeded(&self) {
        self.exceeded.notified().await
    }

    fn signal_exceeded(&self) {
        self.overrun.store(true, Ordering::SeqCst);
        self.exceeded.notify_waiters();
        self.exceeded.notify_one();
    }
}

/// Counts every call and every `search`/`describe` against the run's
/// budgets, refused ones too. Past the call budget a call fails with
/// `limit_exceeded` (`details.limit = "tool_calls"`) without reaching the
/// inner tools; it is recorded in `log` (truncated past the first one, so
/// a flood cannot grow the log by more than a small record per call) and
/// only then is the stop signal raised, so whoever ends the run on it
/// finds the call recorded. Lookups past their budget fail the same way
/// and raise it too.
pub(crate) struct Budget<S> {
    inner: S,
    state: Arc<BudgetState>,
    log: SharedLog,
}

impl<S> Budget<S> {
    /// `inner` under `state`'s budgets; refused calls are recorded in `log`.
    pub(crate) fn new(inner: S, state: Arc<BudgetState>, log: SharedLog) -> Self {
        Budget { inner, state, log }
    }

    /// Counts a lookup: `Err` past the lookup budget (and the run ends).
    fn lookup(&self) -> Result<(), Error> {
        let n = self.state.lookups.fetch_add(1, Ordering::Relaxed);
        if n >= self.state.max_lookups {
            self.state.signal_exceeded();
            return Err(lookup_error(self.state.max_lookups));
        }
        Ok(())
    }
}

impl<S: ToolAccess> ToolAccess for Budget<S> {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let n = self.state.used.fetch_add(1, Ordering::Relaxed);
        if n < self.state.max_calls {
            return self.inner.call(tool_id, args, cancel);
        }
        let started = Instant::now();
        let mut record = ToolCallRecord::started(tool_id, &args);
        if n > self.state.max_calls {
            record.truncate();
        }
        let refused = Err(budget_error(self.state.max_calls));
        self.log.finish(record, &refused, started.elapsed());
        self.state.signal_exceeded();
        Box::pin(std::future::ready(refused))
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        if let Err(e) = self.lookup() {
            return Box::pin(std::future::ready(Err(e)));
        }
        self.inner.search(query, limit)
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        if let Err(e) = self.lookup() {
            return Box::pin(std::future::ready(Err(e)));
        }
        self.inner.describe(tool_id, level)
    }
}

/// The error of a call past the budget: `limit_exceeded` with
/// `details.limit = "tool_calls"`.
fn budget_error(max: usize) -> Error {
    Error::limit_exceeded(
        LimitKind::ToolCalls,
        format!("budget of {max} calls is spent"),
    )
}

/// The error of a `search`/`describe` past the lookup budget:
/// `limit_exceeded` with `details.limit = "tool_calls"`.
fn lookup_error(max: usize) -> Error {
    Error::limit_exceeded(
        LimitKind::ToolCalls,
        format!("budget of {max} search/describe requests is spent"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolexec::ErrorCode;
    use toolexec::Exec;

    fn budget(max_calls: usize) -> (Budget<Exec>, Arc<BudgetState>, SharedLog) {
        let state = Arc::new(BudgetState::new(max_calls));
        let log = SharedLog::default();
        let exec = Exec::new(toolexec_testkit::catalog());
        (Budget::new(exec, state.clone(), log.clone()), state, log)
    }

    /// Calls within the budget reach the tools and are not logged here;
    /// past it they are refused, logged (truncated after the first) and
    /// the stop signal is up.
    #[tokio::test]
    async fn refuses_and_logs_calls_past_the_budget() {
        let (tools, state, log) = budget(2);
        let add = || json!({"a": 1, "b": 2});
        for _ in 0..2 {
            tools
                .call("math:add", add(), CancellationToken::new())
                .await
                .unwrap();
        }
        assert!(state.exhausted() && !state.overrun());
        assert!(log.records().is_empty());
        let waiter = {
            let state = state.clone();
            tokio::spawn(async move { state.exceeded().await })
        };
        tokio::task::yield_now().await;
        for _ in 0..3 {
            let e = tools
                .call("math:add", add(), CancellationToken::new())
                .await
                .unwrap_err();
            assert_eq!(e.code(), ErrorCode::LimitExceeded);
            let body = e.to_body();
            assert_eq!(body.details.unwrap(), json!({"limit": "tool_calls"}));
            assert_eq!(
                body.message,
                "limit_exceeded: tool_calls budget of 2 calls is spent"
            );
        }
        waiter.await.unwrap();
        assert!(state.overrun());
        assert_eq!(state.used(), 5);
        let records = log.records();
        assert_eq!(records.len(), 3);
        assert!(!records[0].truncated && records[0].args.preview.is_some());
        assert!(
            records[1..]
                .iter()
                .all(|r| r.truncated && r.args.preview.is_none())
        );
    }

    /// Search and describe share a budget of 10 × the call budget; past
    /// it they fail and raise the stop signal; calls are untouched.
    #[tokio::test]
    async fn lookups_have_their_own_budget() {
        let (tools, state, log) = budget(1);
        assert_eq!(state.max_lookups(), 10);
        for i in 0..10 {
            if i % 2 == 0 {
                tools.search("add", 3).await.unwrap();
            } else {
                // Refused ones count too.
                let e = tools.describe("nope:nothing", DetailLevel::Summary).await;
                assert_eq!(e.unwrap_err().code(), ErrorCode::ToolNotFound);
            }
        }
        assert!(!state.overrun());
        let over = tools.search("add", 3).await.unwrap_err();
        assert_eq!(
            over.to_string(),
            "limit_exceeded: tool_calls budget of 10 search/describe requests is spent"
        );
        assert!(state.overrun());
        assert!(
            tools
                .describe("math:add", DetailLevel::Summary)
                .await
                .is_err()
        );
        assert!(!state.exhausted());
        tools
            .call(
                "math:add",
                json!({"a": 1, "b": 1}),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(log.records().is_empty());
    }
}
