//! `Exec`: the facade that wires catalog, docs, search, backends and limits.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::catalog::{Catalog, NamespaceInfo, SearchResult};
use crate::chain::{ChainResult, ChainStep, run_chain};
use crate::context::EventTx;
use crate::docs::{DetailLevel, ToolDescription, describe};
use crate::error::Error;
use crate::gate::Gate;
use crate::limits::Limits;
use crate::output::ToolOutput;
use crate::policy::{Policy, Target};
use crate::quota::Quotas;
use crate::run::{Pipeline, RunOptions};
use crate::search::SearchMode;
use crate::stream::{EventStream, RunResult, STREAM_BUFFER, StreamEvent};
use crate::telemetry::{CallObserver, CallScope, CallTracer};

/// Runs tools from a catalog. Cheap to clone; share one per process.
///
/// ```
/// # use schemars::JsonSchema; use serde::Deserialize; use serde_json::json;
/// #[derive(Deserialize, JsonSchema)]
/// struct AddArgs { a: f64, b: f64 }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let exec = toolexec::Exec::builder().build();
/// exec.catalog().tool("math:add", "Adds two numbers", |a: AddArgs| async move {
///     Ok::<_, toolexec::ToolError>(a.a + a.b)
/// }).unwrap();
/// let out = exec.run_tool("math:add", json!({"a": 1, "b": 2})).await.unwrap();
/// assert_eq!(out.value, json!(3.0));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Exec {
    pipeline: Arc<Pipeline>,
}

/// Configures an [`Exec`].
#[derive(Debug, Default)]
#[must_use]
pub struct ExecBuilder {
    catalog: Option<Arc<Catalog>>,
    limits: Limits,
    skip_input_validation: bool,
    skip_output_validation: bool,
    observer: Option<Arc<dyn CallObserver>>,
    call_tracer: Option<&'static dyn CallTracer>,
    gate: Gate,
}

impl ExecBuilder {
    /// Uses an existing catalog (default: a new empty one).
    pub fn catalog(mut self, catalog: Arc<Catalog>) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Turns input validation on (default) or off.
    pub fn validate_input(mut self, on: bool) -> Self {
        self.skip_input_validation = !on;
        self
    }

    /// Turns output validation on (default) or off.
    pub fn validate_output(mut self, on: bool) -> Self {
        self.skip_output_validation = !on;
        self
    }

    /// Tells `observer` of every call (metrics, audit). Without one, a
    /// call pays nothing for observation.
    pub fn observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Records every call's span with `tracer` (the process's telemetry,
    /// which lives as long as the process). Without one, a call gets a
    /// `tracing` span, which costs nothing when no subscriber wants it.
    pub fn call_tracer(mut self, tracer: &'static dyn CallTracer) -> Self {
        self.call_tracer = Some(tracer);
        self
    }

    /// Decides every call, search hit and description by `policy` for the
    /// caller current when it is made
    /// ([`with_caller`](crate::telemetry::with_caller); anonymous when
    /// none is set). See [`crate::policy`].
    pub fn policy(mut self, policy: Policy) -> Self {
        self.gate.policy = Some(Arc::new(policy));
        self
    }

    /// Bounds every call's rate and concurrency by `quotas`, per caller
    /// and per tool. See [`crate::quota`].
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.gate.quotas = Some(Arc::new(quotas));
        self
    }

    /// Builds the executor.
    pub fn build(self) -> Exec {
        Exec {
            pipeline: Arc::new(Pipeline {
                catalog: self.catalog.unwrap_or_default(),
                limits: self.limits,
                validate_input: !self.skip_input_validation,
                validate_output: !self.skip_output_validation,
                observer: self.observer,
                call_tracer: self.call_tracer,
                gate: self.gate,
            }),
        }
    }
}

/// What to stream with [`Exec::run_stream`].
#[derive(Debug, Clone)]
pub enum StreamRequest {
    /// One tool call.
    Tool {
        /// Tool id.
        id: String,
        /// Arguments.
        args: Value,
    },
    /// A chain.
    Chain(Vec<ChainStep>),
}

/// A search result for callers: id, summary and score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolMatch {
    /// Full id.
    pub id: String,
    /// Human title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// One line.
    pub summary: String,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Relevance; higher is better.
    pub score: f32,
}

impl From<&SearchResult> for ToolMatch {
    fn from(r: &SearchResult) -> Self {
        let t = r.tool.tool();
        ToolMatch {
            id: t.id.to_string(),
            title: t.title.clone(),
            summary: t.summary().to_owned(),
            tags: t.tags.clone(),
            score: r.score,
        }
    }
}

impl Exec {
    /// Starts configuring an executor.
    pub fn builder() -> ExecBuilder {
        ExecBuilder::default()
    }

    /// An executor over `catalog` with default limits.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Exec::builder().catalog(catalog).build()
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.pipeline.catalog
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.pipeline.limits
    }

    /// Runs one tool with the default deadline.
    pub async fn run_tool(&self, id: &str, args: Value) -> Result<ToolOutput, Error> {
        self.pipeline
            .run(id, args, &RunOptions::default(), None)
            .await
    }

    /// Runs one tool with explicit options.
    pub async fn run_tool_with(
        &self,
        id: &str,
        args: Value,
        opts: &RunOptions,
    ) -> Result<ToolOutput, Error> {
        self.pipeline.run(id, args, opts, None).await
    }

    /// Runs a chain. `Err` only when the chain itself is invalid; step
    /// failures are in the result.
    pub async fn run_chain(&self, steps: &[ChainStep]) -> Result<ChainResult, Error> {
        run_chain(&self.pipeline, steps, &RunOptions::default(), None).await
    }

    /// Runs a chain with options (the deadline applies to each step).
    pub async fn run_chain_with(
        &self,
        steps: &[ChainStep],
        opts: &RunOptions,
    ) -> Result<ChainResult, Error> {
        run_chain(&self.pipeline, steps, opts, None).await
    }

    /// Runs a tool or chain in a background task and streams its events.
    /// Dropping the stream cancels the run. Needs a Tokio runtime.
    pub fn run_stream(&self, request: StreamRequest, opts: RunOptions) -> EventStream {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (opts, guard) = cancelled_on_drop(opts);
        let pipeline = self.pipeline.clone();
        // The run keeps the caller's span and identity on its own task.
        let scope = CallScope::capture();
        let run = async move {
            let last = match run_events(&pipeline, request, &opts, &tx).await {
                Ok(result) => StreamEvent::Done {
                    result: Box::new(result),
                },
                Err(e) => StreamEvent::Error { error: e.to_body() },
            };
            let _ = tx.send(last).await;
        };
        tokio::spawn(scope.bind(run));
        EventStream {
            rx,
            _cancel_on_drop: guard,
        }
    }

    /// Runs a tool or chain on the caller's task, sending its progress and
    /// chunks to `events` as they come, and returns what it produced (no
    /// `done` or `error` event is sent). What [`run_stream`](Self::run_stream)
    /// runs on a task of its own: a caller that relays the events while it
    /// awaits this saves that task and a hand-off per run. Dropping the
    /// future cancels the run (its cancellation token too).
    ///
    /// ```
    /// # use serde_json::json;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use toolexec::{RunOptions, RunResult, STREAM_BUFFER, StreamRequest};
    /// let exec = toolexec::Exec::builder().build();
    /// let (tx, mut events) = tokio::sync::mpsc::channel(STREAM_BUFFER);
    /// let request = StreamRequest::Tool { id: "nope:missing".into(), args: json!({}) };
    /// let outcome = exec.run_events(request, &RunOptions::default(), tx).await;
    /// assert_eq!(outcome.unwrap_err().code(), toolexec::ErrorCode::ToolNotFound);
    /// assert!(events.recv().await.is_none());
    /// # }
    /// ```
    pub async fn run_events(
        &self,
        request: StreamRequest,
        opts: &RunOptions,
        events: mpsc::Sender<StreamEvent>,
    ) -> Result<RunResult, Error> {
        let (opts, _cancel_on_drop) = cancelled_on_drop(opts.clone());
        run_events(&self.pipeline, request, &opts, &events).await
    }

    /// Ranked search in the catalog's default mode; at most `limit`
    /// results, only tools the current caller may run.
    pub fn search_tools(&self, query: &str, limit: usize) -> Vec<ToolMatch> {
        let catalog = self.catalog();
        let hits = match self.pipeline.gate.policy {
            None => catalog.search(query, limit, None),
            Some(_) => {
                let all = catalog.search(query, catalog.len(), None);
                self.visible(all, limit)
            }
        };
        hits.iter().map(ToolMatch::from).collect()
    }

    /// Ranked search in `mode` within `namespace` ([`Catalog::search_with`]):
    /// at most `limit` results, only tools the current caller may run.
    pub fn search_with(
        &self,
        query: &str,
        limit: usize,
        namespace: Option<&str>,
        mode: Option<SearchMode>,
    ) -> Result<Vec<SearchResult>, Error> {
        let catalog = self.catalog();
        let depth = match self.pipeline.gate.policy {
            None => limit,
            Some(_) => catalog.len().max(limit),
        };
        let hits = match mode {
            Some(mode) => catalog.search_with(query, depth, namespace, mode)?,
            None => catalog.search(query, depth, namespace),
        };
        Ok(match self.pipeline.gate.policy {
            None => hits,
            Some(_) => self.visible(hits, limit),
        })
    }

    /// The first `limit` of `hits` the current caller may run.
    fn visible(&self, hits: Vec<SearchResult>, limit: usize) -> Vec<SearchResult> {
        hits.into_iter()
            .filter(|h| self.may_use(&Target::Tool(h.tool.tool())))
            .take(limit)
            .collect()
    }

    /// A tool's documentation at `level`: `not_allowed` when the policy
    /// denies the current caller the tool.
    pub fn describe_tool(&self, id: &str, level: DetailLevel) -> Result<ToolDescription, Error> {
        let entry = self.catalog().get(id)?;
        self.authorize(&Target::Tool(entry.tool()))?;
        Ok(describe(entry.tool(), level))
    }

    /// Namespaces with their tool counts (only tools the current caller
    /// may run, and only namespaces with at least one).
    pub fn list_namespaces(&self) -> Vec<NamespaceInfo> {
        if self.pipeline.gate.policy.is_none() {
            return self.catalog().namespaces();
        }
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for entry in self.catalog().all() {
            let tool = entry.tool();
            if self.may_use(&Target::Tool(tool)) {
                *counts.entry(tool.id.namespace().to_owned()).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .map(|(name, tools)| NamespaceInfo { name, tools })
            .collect()
    }

    /// The policy, when the executor has one.
    pub fn policy(&self) -> Option<&Policy> {
        self.pipeline.gate.policy.as_deref()
    }

    /// `not_allowed` (and logged) unless the policy lets the current caller
    /// use `target`; `Ok` without a policy. Calls check this themselves;
    /// entry points ask it for prompts and resources.
    pub fn authorize(&self, target: &Target<'_>) -> Result<(), Error> {
        self.pipeline.gate.check(target)
    }

    /// True when the current caller may use `target` (for filtering lists;
    /// not logged).
    pub fn may_use(&self, target: &Target<'_>) -> bool {
        self.pipeline.gate.allows(target)
    }

    /// A cancellation token for [`RunOptions::cancel`].
    pub fn cancellation_token() -> CancellationToken {
        CancellationToken::new()
    }
}

/// `opts` with a cancellation token (the caller's, or a new one) and the
/// guard that cancels it when dropped.
fn cancelled_on_drop(opts: RunOptions) -> (RunOptions, DropGuard) {
    let cancel = opts.cancel.clone().unwrap_or_default();
    let guard = cancel.clone().drop_guard();
    let opts = RunOptions {
        cancel: Some(cancel),
        ..opts
    };
    (opts, guard)
}

/// A streamed run's work, wherever it runs: events to `tx`, the result
/// returned.
async fn run_events(
    pipeline: &Pipeline,
    request: StreamRequest,
    opts: &RunOptions,
    tx: &mpsc::Sender<StreamEvent>,
) -> Result<RunResult, Error> {
    match request {
        StreamRequest::Tool { id, args } => {
            let events = EventTx {
                tx: tx.clone(),
                step: None,
            };
            pipeline
                .run(&id, args, opts, Some(events))
                .await
                .map(RunResult::Tool)
        }
        StreamRequest::Chain(steps) => run_chain(pipeline, &steps, opts, Some(tx))
            .await
            .map(RunResult::Chain),
    }
}
