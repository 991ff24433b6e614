//! The host side of sandboxed tool calls: [`ToolHost`], the run's tools
//! behind its budget, call log and allowlist ([`crate::access`]).

use std::sync::Arc;

use serde_json::Value;
use toolexec::{
    AllowList, BoxFuture, CancellationToken, DetailLevel, Error, Exec, ToolAccess, until_cancelled,
};

use crate::access::{Allow, Budget, BudgetState, CallLog, SharedLog};
use crate::{RuntimeLimits, ToolCallRecord};

/// What sandboxed code reaches tools through. Every call is checked here,
/// on the host, against the run's budget and allowlist (the sandbox's own
/// accounting is never trusted), runs through the run's tools (for
/// [`Exec`], the normal toolexec pipeline: validation, deadlines) and is
/// logged.
///
/// It is the composition of three layers over the tools, each a
/// [`ToolAccess`] around the next: the budget, the call log and the
/// allowlist. A [`ToolHost`] is itself a [`ToolAccess`] (what the
/// in-process code engine calls).
///
/// Cheap to clone; clones share the budget and the log.
#[derive(Clone)]
pub struct ToolHost {
    inner: Arc<HostInner>,
}

type Layers = Budget<CallLog<Allow<Arc<dyn ToolAccess>>>>;

struct HostInner {
    tools: Layers,
    has_tools: bool,
    budget: Arc<BudgetState>,
    log: SharedLog,
    cancel: CancellationToken,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("has_tools", &self.inner.has_tools)
            .field("max_calls", &self.inner.budget.max_calls())
            .field("used", &self.inner.budget.used())
            .finish()
    }
}

impl ToolHost {
    /// A host serving `exec`'s catalog under `limits`' tool budget and
    /// allowlist. Calls are cancelled with `cancel`.
    pub fn new(exec: Exec, limits: &RuntimeLimits, cancel: CancellationToken) -> Self {
        Self::with_tools(Arc::new(exec), limits, cancel)
    }

    /// A host sending allowed calls to `tools` (e.g. a remote runtime
    /// server forwarding them to its caller), under `limits`' budget and
    /// allowlist. Each call gets a child of `cancel`.
    pub fn with_tools(
        tools: Arc<dyn ToolAccess>,
        limits: &RuntimeLimits,
        cancel: CancellationToken,
    ) -> Self {
        Self::build(tools, true, limits, cancel)
    }

    /// A host with no tools: every call fails with `tool_not_found`.
    pub fn without_tools(limits: &RuntimeLimits) -> Self {
        Self::build(Arc::new(NoTools), false, limits, CancellationToken::new())
    }

    fn build(
        tools: Arc<dyn ToolAccess>,
        has_tools: bool,
        limits: &RuntimeLimits,
        cancel: CancellationToken,
    ) -> Self {
        let budget = Arc::new(BudgetState::new(limits.max_tool_calls));
        let log = SharedLog::default();
        let allowed = Allow::new(tools, AllowList::new(&limits.allowed_tools));
        let tools = Budget::new(
            CallLog::new(allowed, log.clone()),
            budget.clone(),
            log.clone(),
        );
        ToolHost {
            inner: Arc::new(HostInner {
                tools,
                has_tools,
                budget,
                log,
                cancel,
            }),
        }
    }

    /// The run's cancellation.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Calls a tool on behalf of the sandbox. Every call counts against
    /// the budget, refused ones too: past it the call fails with
    /// `limit_exceeded` (and the run ends); a call within it but outside
    /// the allowlist fails with `not_allowed`. Every call is logged, also
    /// one whose future is dropped before it completes (as failed with
    /// `cancelled`): it may have had effects.
    ///
    /// The log keeps a bounded [`ToolCallRecord`] per call (sizes, digests
    /// and previews, never the arguments or the result), within the log's
    /// byte budget ([`ToolCallLog`](crate::ToolCallLog)); calls past the
    /// one that spends the budget are logged truncated.
    pub async fn call(&self, tool_id: &str, args: Value) -> Result<Value, Error> {
        let cancel = self.inner.cancel.child_token();
        self.inner.tools.call(tool_id, args, cancel).await
    }

    /// How many `search` and `describe` requests a run may make:
    /// 10 × `max_tool_calls`, at least 10.
    pub fn max_lookups(&self) -> usize {
        self.inner.budget.max_lookups()
    }

    /// Ranks the allowed tools for `query`: `[{id, summary, score}]`;
    /// nothing past the lookup budget (see [`ToolHost::try_search`]).
    pub async fn search(&self, query: &str, limit: usize) -> Value {
        self.try_search(query, limit)
            .await
            .unwrap_or_else(|_| Value::Array(Vec::new()))
    }

    /// [`ToolHost::search`], failing with `limit_exceeded` past the lookup
    /// budget (which also ends the run). `limit` is held to 1–50; the hits
    /// have the channel protocol's shape, `{id, summary, score}`.
    pub async fn try_search(&self, query: &str, limit: usize) -> Result<Value, Error> {
        let hits = self.inner.tools.search(query, limit.clamp(1, 50)).await?;
        let Value::Array(hits) = hits else {
            return Ok(Value::Array(Vec::new()));
        };
        Ok(hits
            .into_iter()
            .map(|m| serde_json::json!({"id": m["id"], "summary": m["summary"], "score": m["score"]}))
            .collect())
    }

    /// The documentation of an allowed tool. Counts against the lookup
    /// budget, refused requests too.
    pub async fn describe(&self, tool_id: &str, level: DetailLevel) -> Result<Value, Error> {
        self.inner.tools.describe(tool_id, level).await
    }

    /// The call budget.
    pub fn max_tool_calls(&self) -> usize {
        self.inner.budget.max_calls()
    }

    /// Whether the budget is spent.
    pub fn budget_exhausted(&self) -> bool {
        self.inner.budget.exhausted()
    }

    /// Resolves once the unit has asked for a call (or a lookup) past the
    /// budget; runtimes end the run then, with `limit_exceeded`
    /// (`tool_calls`). A refused call is in the log by then.
    pub async fn budget_exceeded(&self) {
        self.inner.budget.exceeded().await
    }

    /// Whether the unit asked for a call (or lookup) past the budget: what
    /// [`ToolHost::budget_exceeded`] waits for, readable after the fact.
    pub fn budget_overrun(&self) -> bool {
        self.inner.budget.overrun()
    }

    /// The calls made so far.
    pub fn tool_calls(&self) -> Vec<ToolCallRecord> {
        self.inner.log.records()
    }

    /// The bytes the log holds so far (its records, serialized).
    pub fn tool_log_bytes(&self) -> usize {
        self.inner.log.retained_bytes()
    }

    /// Takes the log (leaves it empty).
    pub fn take_tool_calls(&self) -> Vec<ToolCallRecord> {
        self.inner.log.take()
    }
}

/// The host's tools for code that takes a [`ToolAccess`] (the in-process
/// code engine): [`ToolHost::call`], dropped with `cancelled` when `cancel`
/// fires (and logged so), [`ToolHost::try_search`] and
/// [`ToolHost::describe`].
impl ToolAccess for ToolHost {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let host = self.clone();
        let id = tool_id.to_owned();
        Box::pin(async move { until_cancelled(&id, host.call(&id, args), &cancel).await })
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        let host = self.clone();
        let query = query.to_owned();
        Box::pin(async move { host.try_search(&query, limit).await })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let host = self.clone();
        let id = tool_id.to_owned();
        Box::pin(async move { host.describe(&id, level).await })
    }
}

/// The tools of a host without any: nothing is found.
struct NoTools;

impl ToolAccess for NoTools {
    fn call(
        &self,
        tool_id: &str,
        _: Value,
        _: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        Box::pin(std::future::ready(Err(not_found(tool_id))))
    }

    fn search(&self, _: &str, _: usize) -> BoxFuture<'static, Result<Value, Error>> {
        Box::pin(std::future::ready(Ok(Value::Array(Vec::new()))))
    }

    fn describe(&self, tool_id: &str, _: DetailLevel) -> BoxFuture<'static, Result<Value, Error>> {
        Box::pin(std::future::ready(Err(not_found(tool_id))))
    }
}

fn not_found(tool_id: &str) -> Error {
    Error::ToolNotFound {
        id: tool_id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolexec::ErrorCode;

    /// A tool that never answers.
    struct Stuck;

    impl ToolAccess for Stuck {
        fn call(
            &self,
            _: &str,
            _: Value,
            _: CancellationToken,
        ) -> BoxFuture<'static, Result<Value, Error>> {
            Box::pin(std::future::pending())
        }
        fn search(&self, _: &str, _: usize) -> BoxFuture<'static, Result<Value, Error>> {
            Box::pin(std::future::ready(Ok(json!([
                {"id": "a:one", "summary": "One", "score": 2.0, "tags": ["x"]},
                {"id": "b:two", "summary": "Two", "score": 1.0},
            ]))))
        }
        fn describe(&self, id: &str, _: DetailLevel) -> BoxFuture<'static, Result<Value, Error>> {
            Box::pin(std::future::ready(Ok(json!({"id": id}))))
        }
    }

    fn limits(allowed: &[&str]) -> RuntimeLimits {
        RuntimeLimits {
            allowed_tools: allowed.iter().map(|p| p.to_string()).collect(),
            max_tool_calls: 2,
            ..RuntimeLimits::default()
        }
    }

    /// Through its [`ToolAccess`] face, a call whose token fires is
    /// answered `cancelled` and logged so; it still spent the budget.
    #[tokio::test]
    async fn a_cancelled_call_is_answered_and_logged_cancelled() {
        let host = ToolHost::with_tools(Arc::new(Stuck), &limits(&[]), CancellationToken::new());
        let cancel = CancellationToken::new();
        let call = ToolAccess::call(&host, "a:one", json!({}), cancel.clone());
        let task = tokio::spawn(call);
        tokio::task::yield_now().await;
        cancel.cancel();
        let err = task.await.unwrap().unwrap_err();
        assert_eq!(err.code(), ErrorCode::Cancelled);
        let log = host.take_tool_calls();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].error.as_ref().unwrap().code, ErrorCode::Cancelled);
        assert!(host.tool_calls().is_empty());
        assert!(!host.budget_exhausted());
    }

    /// Search answers the channel protocol's shape, allowed tools only;
    /// describe refuses the others; a host without tools finds nothing.
    #[tokio::test]
    async fn lookups_are_filtered_and_shaped() {
        let host =
            ToolHost::with_tools(Arc::new(Stuck), &limits(&["a:*"]), CancellationToken::new());
        let hits = host.try_search("anything", 10).await.unwrap();
        assert_eq!(
            hits,
            json!([{"id": "a:one", "summary": "One", "score": 2.0}])
        );
        let err = host
            .describe("b:two", DetailLevel::Summary)
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::NotAllowed);
        assert_eq!(
            host.describe("a:one", DetailLevel::Summary).await.unwrap()["id"],
            "a:one"
        );

        let empty = ToolHost::without_tools(&limits(&[]));
        assert_eq!(empty.search("anything", 10).await, json!([]));
        let err = empty.call("a:one", json!({})).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::ToolNotFound);
        assert_eq!(empty.tool_calls().len(), 1);
    }
}
