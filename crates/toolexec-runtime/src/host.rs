//! The host side of sandboxed tool calls: budget, allowlist and log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::Value;
use toolexec::{
    AllowList, BoxFuture, CancellationToken, DetailLevel, Error, ErrorBody, ErrorCode, Exec,
    RunOptions,
};

use crate::{RuntimeLimits, ToolCallLog, ToolCallRecord};

/// What sandboxed code reaches tools through. Every call is checked here,
/// on the host, against the run's budget and allowlist (the sandbox's own
/// accounting is never trusted), runs through the normal toolexec pipeline
/// (validation, deadlines) and is logged.
///
/// Cheap to clone; clones share the budget and the log.
#[derive(Clone)]
pub struct ToolHost {
    inner: Arc<HostInner>,
}

/// Where a [`ToolHost`] sends allowed calls when it has no local catalog:
/// e.g. a remote runtime server forwarding to its caller. The host still
/// enforces its own budget and allowlist before forwarding.
pub trait ToolCaller: Send + Sync + 'static {
    /// Runs a tool.
    fn call(&self, tool_id: String, args: Value) -> BoxFuture<'static, Result<Value, ErrorBody>>;
    /// Ranks tools (`[{id, summary, score}]`).
    fn search(&self, query: String, limit: usize) -> BoxFuture<'static, Value>;
    /// Documents a tool.
    fn describe(
        &self,
        tool_id: String,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, ErrorBody>>;
}

enum Tools {
    None,
    Local(Exec),
    Caller(Arc<dyn ToolCaller>),
}

struct HostInner {
    tools: Tools,
    allow: AllowList,
    max_calls: usize,
    used: AtomicUsize,
    max_lookups: usize,
    lookups: AtomicUsize,
    log: Mutex<ToolCallLog>,
    cancel: CancellationToken,
    exceeded: tokio::sync::Notify,
    /// Set with `exceeded`: a runtime that saw the unit exit in the same
    /// poll as the notification still learns the budget was overrun.
    overrun: AtomicBool,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("has_tools", &!matches!(self.inner.tools, Tools::None))
            .field("max_calls", &self.inner.max_calls)
            .field("used", &self.inner.used.load(Ordering::Relaxed))
            .finish()
    }
}

impl ToolHost {
    /// A host serving `exec`'s catalog under `limits`' tool budget and
    /// allowlist. Calls are cancelled with `cancel`.
    pub fn new(exec: Exec, limits: &RuntimeLimits, cancel: CancellationToken) -> Self {
        Self::build(Tools::Local(exec), limits, cancel)
    }

    /// A host forwarding allowed calls to `caller`, under `limits`' budget
    /// and allowlist.
    pub fn with_caller(
        caller: Arc<dyn ToolCaller>,
        limits: &RuntimeLimits,
        cancel: CancellationToken,
    ) -> Self {
        Self::build(Tools::Caller(caller), limits, cancel)
    }

    /// A host with no tools: every call fails with `tool_not_found`.
    pub fn without_tools(limits: &RuntimeLimits) -> Self {
        Self::build(Tools::None, limits, CancellationToken::new())
    }

    fn build(tools: Tools, limits: &RuntimeLimits, cancel: CancellationToken) -> Self {
        ToolHost {
            inner: Arc::new(HostInner {
                tools,
                allow: AllowList::new(&limits.allowed_tools),
                max_calls: limits.max_tool_calls,
                used: AtomicUsize::new(0),
                max_lookups: lookup_budget(limits.max_tool_calls),
                lookups: AtomicUsize::new(0),
                log: Mutex::new(ToolCallLog::default()),
                cancel,
                exceeded: tokio::sync::Notify::new(),
                overrun: AtomicBool::new(false),
            }),
        }
    }

    /// The local catalog behind this host, if it has one.
    pub fn exec(&self) -> Option<&Exec> {
        match &self.inner.tools {
            Tools::Local(exec) => Some(exec),
            _ => None,
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
    /// byte budget ([`ToolCallLog`]).
    pub async fn call(&self, tool_id: &str, args: Value) -> Result<Value, ErrorBody> {
        let n = self.inner.used.fetch_add(1, Ordering::Relaxed);
        let mut record = ToolCallRecord::started(tool_id, &args);
        // Calls past the one that spends the budget are logged truncated: a
        // flood past it cannot grow the log by more than a small record per
        // call until the run is stopped.
        if n > self.inner.max_calls {
            record.truncate();
        }
        let mut pending = PendingCall {
            host: &self.inner,
            record: Some(record),
            started: Instant::now(),
        };
        let result = self.call_unlogged(tool_id, args, n).await;
        pending.finish(&result);
        if n >= self.inner.max_calls {
            // Signalled only once the refusal is in the log, so whoever
            // ends the run on it finds the call recorded.
            self.inner.signal_exceeded();
        }
        result
    }

    async fn call_unlogged(
        &self,
        tool_id: &str,
        args: Value,
        n: usize,
    ) -> Result<Value, ErrorBody> {
        if n >= self.inner.max_calls {
            return Err(budget_error(self.inner.max_calls));
        }
        if !self.inner.allow.permits(tool_id) {
            return Err(not_allowed(tool_id));
        }
        match &self.inner.tools {
            Tools::None => Err(Error::ToolNotFound {
                id: tool_id.to_owned(),
            }
            .to_body()),
            Tools::Caller(caller) => caller.call(tool_id.to_owned(), args).await,
            Tools::Local(exec) => {
                let opts = RunOptions {
                    cancel: Some(self.inner.cancel.child_token()),
                    ..RunOptions::default()
                };
                exec.run_tool_with(tool_id, args, &opts)
                    .await
                    .map(|out| out.value)
                    .map_err(|e| e.to_body())
            }
        }
    }

    /// Counts a `search` or `describe` against the lookup budget
    /// ([`ToolHost::max_lookups`]); past it, fails with `limit_exceeded`
    /// and ends the run like the call budget does.
    fn lookup(&self) -> Result<(), ErrorBody> {
        let n = self.inner.lookups.fetch_add(1, Ordering::Relaxed);
        if n >= self.inner.max_lookups {
            self.inner.signal_exceeded();
            return Err(lookup_error(self.inner.max_lookups));
        }
        Ok(())
    }

    /// How many `search` and `describe` requests a run may make:
    /// 10 × `max_tool_calls`, at least 10.
    pub fn max_lookups(&self) -> usize {
        self.inner.max_lookups
    }

    /// Ranks the allowed tools for `query`: `[{id, summary, score}]`;
    /// nothing past the lookup budget (see [`ToolHost::try_search`]).
    pub async fn search(&self, query: &str, limit: usize) -> Value {
        self.try_search(query, limit)
            .await
            .unwrap_or_else(|_| Value::Array(Vec::new()))
    }

    /// [`ToolHost::search`], failing with `limit_exceeded` past the lookup
    /// budget (which also ends the run).
    pub async fn try_search(&self, query: &str, limit: usize) -> Result<Value, ErrorBody> {
        self.lookup()?;
        let limit = limit.clamp(1, 50);
        let hits: Vec<Value> = match &self.inner.tools {
            Tools::None => Vec::new(),
            Tools::Local(exec) => exec
                .search_tools(query, limit * 2)
                .into_iter()
                .map(|m| serde_json::json!({"id": m.id, "summary": m.summary, "score": m.score}))
                .collect(),
            Tools::Caller(caller) => match caller.search(query.to_owned(), limit * 2).await {
                Value::Array(hits) => hits,
                _ => Vec::new(),
            },
        };
        Ok(Value::Array(
            hits.into_iter()
                .filter(|m| {
                    m["id"]
                        .as_str()
                        .is_some_and(|id| self.inner.allow.permits(id))
                })
                .take(limit)
                .collect(),
        ))
    }

    /// The documentation of an allowed tool. Counts against the lookup
    /// budget, refused requests too.
    pub async fn describe(&self, tool_id: &str, level: DetailLevel) -> Result<Value, ErrorBody> {
        self.lookup()?;
        if !self.inner.allow.permits(tool_id) {
            return Err(not_allowed(tool_id));
        }
        match &self.inner.tools {
            Tools::None => Err(Error::ToolNotFound {
                id: tool_id.to_owned(),
            }
            .to_body()),
            Tools::Local(exec) => {
                let doc = exec
                    .describe_tool(tool_id, level)
                    .map_err(|e| e.to_body())?;
                Ok(serde_json::to_value(doc).unwrap_or(Value::Null))
            }
            Tools::Caller(caller) => caller.describe(tool_id.to_owned(), level).await,
        }
    }

    /// Whether the budget is spent.
    pub fn budget_exhausted(&self) -> bool {
        self.inner.used.load(Ordering::Relaxed) >= self.inner.max_calls
    }

    /// Resolves once the unit has asked for a call (or a lookup) past the
    /// budget; runtimes
    /// end the run then, with `limit_exceeded` (`tool_calls`).
    pub async fn budget_exceeded(&self) {
        self.inner.exceeded.notified().await
    }

    /// Whether the unit asked for a call (or lookup) past the budget: what
    /// [`ToolHost::budget_exceeded`] waits for, readable after the fact.
    pub fn budget_overrun(&self) -> bool {
        self.inner.overrun.load(Ordering::SeqCst)
    }

    /// The calls made so far.
    pub fn tool_calls(&self) -> Vec<ToolCallRecord> {
        self.inner.log.lock().records().to_vec()
    }

    /// The bytes the log holds so far (its records, serialized).
    pub fn tool_log_bytes(&self) -> usize {
        self.inner.log.lock().retained_bytes()
    }

    /// Takes the log (leaves it empty).
    pub fn take_tool_calls(&self) -> Vec<ToolCallRecord> {
        std::mem::take(&mut *self.inner.log.lock()).into_records()
    }
}

impl HostInner {
    fn signal_exceeded(&self) {
        self.overrun.store(true, Ordering::SeqCst);
        self.exceeded.notify_waiters();
        self.exceeded.notify_one();
    }
}

/// A call in progress: logged when it completes, or, if its future is
/// dropped first (deadline, kill, gateway shutdown), as failed with
/// `cancelled`.
struct PendingCall<'a> {
    host: &'a HostInner,
    record: Option<ToolCallRecord>,
    started: Instant,
}

impl PendingCall<'_> {
    fn finish(&mut self, result: &Result<Value, ErrorBody>) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        record.finish(result, self.started.elapsed());
        self.host.log.lock().push(record);
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if self.record.is_none() {
            return;
        }
        self.finish(&Err(ErrorBody {
            code: ErrorCode::Cancelled,
            message: "cancelled: the run ended before the call completed; it may have had effects"
                .into(),
            details: None,
        }));
    }
}

/// The lookup budget for a call budget of `max_calls`.
fn lookup_budget(max_calls: usize) -> usize {
    max_calls.saturating_mul(10).max(10)
}

fn not_allowed(tool_id: &str) -> ErrorBody {
    Error::NotAllowed {
        tool: tool_id.to_owned(),
        reason: "not in this run's allowed_tools".into(),
    }
    .to_body()
}

/// The error of a call past the budget: `limit_exceeded` with
/// `details.limit = "tool_calls"`.
pub(crate) fn budget_error(max: usize) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::LimitExceeded,
        message: format!("limit_exceeded: the tool-call budget of {max} calls is spent"),
        details: Some(serde_json::json!({"limit": "tool_calls", "max": max})),
    }
}

/// The error of a `search`/`describe` past the lookup budget:
/// `limit_exceeded` with `details.limit = "tool_calls"`.
fn lookup_error(max: usize) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::LimitExceeded,
        message: format!("limit_exceeded: the budget of {max} search/describe requests is spent"),
        details: Some(serde_json::json!({"limit": "tool_calls", "lookups": max})),
    }
}
