//! Chains: sequential steps, each optionally fed the previous step's result.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use crate::context::EventTx;
use crate::error::{Error, ErrorBody, LimitKind, ValidationFailure};
use crate::output::ToolOutput;
use crate::run::{Pipeline, RunOptions};
use crate::schema::Violation;
use crate::stream::StreamEvent;

/// One step, in the JSON shape used everywhere (library, CLI, gateway):
/// `{"tool_id": "...", "args": {...}, "use_previous": false, "stop_on_error": true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainStep {
    /// The tool to call.
    pub tool_id: String,
    /// Arguments (an object), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Feed the previous step's structured result in: as `previous` inside
    /// `args`, or as the whole arguments when the step has none.
    #[serde(default)]
    pub use_previous: bool,
    /// Stop the chain when this step fails (default true).
    #[serde(default = "default_true")]
    pub stop_on_error: bool,
}

fn default_true() -> bool {
    true
}

impl ChainStep {
    /// A step calling `tool_id` with `args`.
    pub fn new(tool_id: impl Into<String>, args: Value) -> Self {
        ChainStep {
            tool_id: tool_id.into(),
            args: Some(args),
            use_previous: false,
            stop_on_error: true,
        }
    }

    /// A step fed the previous result.
    pub fn with_previous(tool_id: impl Into<String>, args: Option<Value>) -> Self {
        ChainStep {
            tool_id: tool_id.into(),
            args,
            use_previous: true,
            stop_on_error: true,
        }
    }

    /// Sets `stop_on_error`.
    #[must_use]
    pub fn stop_on_error(mut self, stop: bool) -> Self {
        self.stop_on_error = stop;
        self
    }
}

/// Parses a chain from JSON: an array of steps, or `{"steps": [...]}`.
/// Errors name the failing step and field.
///
/// ```
/// let steps = toolexec::parse_chain(&serde_json::json!([
///     {"tool_id": "math:add", "args": {"a": 1, "b": 2}},
///     {"tool_id": "math:multiply", "args": {"b": 10}, "use_previous": true}
/// ])).unwrap();
/// assert_eq!(steps.len(), 2);
/// let err = toolexec::parse_chain(&serde_json::json!([{"args": {}}])).unwrap_err();
/// assert!(err.to_string().contains("steps[0]"));
/// ```
pub fn parse_chain(value: &Value) -> Result<Vec<ChainStep>, Error> {
    let items = match value {
        Value::Array(items) => items,
        Value::Object(o) => match o.get("steps") {
            Some(Value::Array(items)) => items,
            _ => {
                return Err(Error::invalid_request(
                    "steps",
                    "expected an array of steps or {\"steps\": [...]}",
                ));
            }
        },
        _ => {
            return Err(Error::invalid_request(
                "steps",
                "expected an array of steps or {\"steps\": [...]}",
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            ChainStep::deserialize(item)
                .map_err(|e| Error::invalid_request(format!("steps[{i}]"), e.to_string()))
        })
        .collect()
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepResult {
    /// The step's tool.
    pub tool_id: String,
    /// The result, when the step succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<ToolOutput>,
    /// The error, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// True when the step never ran because an earlier one stopped the chain.
    pub skipped: bool,
    /// Wall time of the step, in milliseconds.
    pub duration_ms: f64,
}

/// The outcome of a chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainResult {
    /// True when every step ran and succeeded.
    pub ok: bool,
    /// The last step's structured result, when it succeeded.
    pub output: Option<Value>,
    /// Per-step outcomes, in order.
    pub steps: Vec<StepResult>,
    /// Wall time of the whole chain, in milliseconds.
    pub duration_ms: f64,
}

impl ChainResult {
    /// The first failing step's error, if any.
    pub fn first_error(&self) -> Option<&ErrorBody> {
        self.steps.iter().find_map(|s| s.error.as_ref())
    }
}

/// Runs a chain in a `chain` span, each step an `execute_tool` span in it.
pub(crate) async fn run_chain(
    pipeline: &Pipeline,
    steps: &[ChainStep],
    opts: &RunOptions,
    events: Option<&tokio::sync::mpsc::Sender<StreamEvent>>,
) -> Result<ChainResult, Error> {
    let span = tracing::info_span!(
        target: "toolexec::call",
        "chain",
        toolexec.chain.steps = steps.len()
    );
    run_steps(pipeline, steps, opts, events)
        .instrument(span)
        .await
}

async fn run_steps(
    pipeline: &Pipeline,
    steps: &[ChainStep],
    opts: &RunOptions,
    events: Option<&tokio::sync::mpsc::Sender<StreamEvent>>,
) -> Result<ChainResult, Error> {
    if steps.is_empty() {
        return Err(Error::invalid_request(
            "steps",
            "a chain needs at least one step",
        ));
    }
    if steps.len() > pipeline.limits.max_chain_steps {
        return Err(Error::LimitExceeded {
            limit: LimitKind::ChainSteps,
            message: format!(
                "{} steps, at most {} allowed",
                steps.len(),
                pipeline.limits.max_chain_steps
            ),
        });
    }
    let started = Instant::now();
    let mut results = Vec::with_capacity(steps.len());
    let mut previous: Option<Value> = None;
    let mut stopped = false;
    for (i, step) in steps.iter().enumerate() {
        if stopped {
            results.push(StepResult {
                tool_id: step.tool_id.clone(),
                output: None,
                error: None,
                skipped: true,
                duration_ms: 0.0,
            });
            continue;
        }
        let t = Instant::now();
        let outcome = match step_args(step, i, previous.take()) {
            Ok(args) => {
                let tx = events.map(|tx| EventTx {
                    tx: tx.clone(),
                    step: Some(i),
                });
                if opts.idempotency_key.is_none() && opts.client_input.is_none() {
                    pipeline.run(&step.tool_id, args, opts, tx).await
                } else {
                    // Each step a run of its own under the chain's key; the
                    // client's input answers the call, not its steps.
                    let step_opts = RunOptions {
                        idempotency_key: opts.idempotency_key.as_ref().map(|k| format!("{k}.{i}")),
                        client_input: None,
                        ..opts.clone()
                    };
                    pipeline.run(&step.tool_id, args, &step_opts, tx).await
                }
            }
            Err(e) => Err(e),
        };
        let duration_ms = t.elapsed().as_secs_f64() * 1e3;
        if let Some(tx) = events {
            let _ = tx.try_send(StreamEvent::Progress {
                step: Some(i),
                progress: (i + 1) as f64,
                total: Some(steps.len() as f64),
                message: Some(format!(
                    "step {i} ({}) {}",
                    step.tool_id,
                    if outcome.is_ok() { "done" } else { "failed" }
                )),
            });
        }
        match outcome {
            Ok(out) => {
                previous = Some(out.value.clone());
                results.push(StepResult {
                    tool_id: step.tool_id.clone(),
                    output: Some(out),
                    error: None,
                    skipped: false,
                    duration_ms,
                });
            }
            Err(e) => {
                stopped = step.stop_on_error;
                results.push(StepResult {
                    tool_id: step.tool_id.clone(),
                    output: None,
                    error: Some(e.to_body()),
                    skipped: false,
                    duration_ms,
                });
            }
        }
    }
    let ok = results.iter().all(|r| r.error.is_none() && !r.skipped);
    let output = results
        .last()
        .and_then(|r| r.output.as_ref())
        .map(|o| o.value.clone());
    Ok(ChainResult {
        ok,
        output,
        steps: results,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

fn step_args(step: &ChainStep, index: usize, previous: Option<Value>) -> Result<Value, Error> {
    if !step.use_previous {
        return Ok(step.args.clone().unwrap_or(Value::Null));
    }
    let bad = |message: String| {
        Error::ValidationInput(Box::new(ValidationFailure {
            tool: step.tool_id.clone(),
            violations: vec![Violation {
                instance_path: String::new(),
                schema_path: String::new(),
                keyword: "use_previous".into(),
                message,
            }],
            truncated: false,
        }))
    };
    let Some(previous) = previous else {
        return Err(bad(if index == 0 {
            "the first step has no previous result".into()
        } else {
            format!("step {} produced no result to use", index - 1)
        }));
    };
    match &step.args {
        None => Ok(previous),
        Some(Value::Object(map)) => {
            let mut map = map.clone();
            map.insert("previous".into(), previous);
            Ok(Value::Object(map))
        }
        Some(_) => Err(bad("args must be an object to receive `previous`".into())),
    }
}
