//! What crosses NATS: runs, their journal entries and events, worker
//! adverts. JSON, so a run can be read with the `nats` CLI.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::{Error, ErrorBody, Tool, ToolAnnotations, ToolDocs, ToolOutput};

/// Header naming the subject a run's events go to (core NATS, best effort:
/// the journal is the durable copy of the result).
pub(crate) const REPLY_HEADER: &str = "Toolexec-Reply";

/// One run, as queued on the work stream. Its `key` is also the stream
/// message id (a publish retried within the duplicate window is dropped)
/// and the journal key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRequest {
    /// Idempotency key: one run per key.
    pub(crate) key: String,
    /// The tool id.
    pub(crate) tool: String,
    /// Validated arguments.
    pub(crate) args: Value,
    /// The caller's deadline for the run, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    /// A code run's script (then `tool` is `code` and `args` null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) code: Option<crate::code::CodeWire>,
    /// A sandboxed unit (then `tool` is `unit` and `args` null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unit: Option<Box<toolexec_runtime::RunRequest>>,
}

/// A run's state in the journal (bucket `toolexec_<cluster>_journal`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum Journal {
    /// A worker started the run (attempt `attempt`, from 1).
    Running {
        worker: String,
        /// The worker process (a restarted worker is another instance).
        instance: String,
        /// The stream sequence of the message being run.
        seq: u64,
        attempt: u32,
        tool: String,
        started_ms: u64,
    },
    /// The run ended, with this outcome, on this worker.
    Done { worker: String, outcome: Outcome },
}

/// How a run ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum Outcome {
    Ok {
        output: ToolOutput,
    },
    Err {
        error: ErrorBody,
    },
    /// How a code run's script ended.
    Code {
        outcome: Box<toolexec_code::CodeOutcome>,
    },
    /// How a sandboxed unit ended (a serialized
    /// [`RunOutcome`](toolexec_runtime::RunOutcome)).
    Unit {
        outcome: Value,
    },
}

impl Outcome {
    pub(crate) fn into_result(self) -> Result<ToolOutput, Error> {
        match self {
            Outcome::Ok { output } => Ok(output),
            Outcome::Err { error } => Err(Error::from(error)),
            Outcome::Code { .. } | Outcome::Unit { .. } => Err(Error::backend_unavailable(
                "fleet",
                "a tool call was answered with a code run's or a unit's outcome",
            )),
        }
    }
}

/// What a worker sends to a run's reply subject.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event {
    Progress {
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Chunk {
        data: Value,
    },
    Done {
        outcome: Outcome,
    },
}

/// A worker's advert (bucket `toolexec_<cluster>_workers`), renewed every
/// heartbeat; one not renewed expires with the bucket's age limit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Advert {
    pub(crate) id: String,
    /// The process (journal entries name the instance holding a run).
    #[serde(default)]
    pub(crate) instance: String,
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// Namespaces whose runs it pulls.
    pub(crate) namespaces: Vec<String>,
    /// Runs at a time.
    pub(crate) capacity: usize,
    /// Runs now.
    pub(crate) in_flight: usize,
    /// Runs finished since start.
    pub(crate) done: u64,
    /// Taking no new runs (finishing in-flight ones before exiting).
    pub(crate) draining: bool,
    /// The profile of the code runs it takes (`standard`, `hardened`).
    #[serde(default)]
    pub(crate) code: Option<String>,
    /// The profiles of the sandboxed units it takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) units: Vec<String>,
    /// The sandbox runtimes available on its machine, each with the
    /// strongest profile it serves there (`bubblewrap:hardened`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) runtimes: Vec<String>,
    /// The tools it runs, for the gateway's catalog.
    pub(crate) tools: Vec<ToolDef>,
}

/// A tool definition on the wire (a [`Tool`] without its compiled schemas).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolDef {
    pub(crate) id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    pub(crate) description: String,
    pub(crate) input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) annotations: Option<ToolAnnotations>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) docs: ToolDocs,
}

impl ToolDef {
    pub(crate) fn of(tool: &Tool) -> Self {
        ToolDef {
            id: tool.id.to_string(),
            title: tool.title.clone(),
            description: tool.description.clone(),
            input_schema: tool.input_schema.clone(),
            output_schema: tool.output_schema.clone(),
            annotations: tool.annotations.clone(),
            tags: tool.tags.clone(),
            docs: tool.docs.clone(),
        }
    }

    /// The definition, checked as any registration is.
    pub(crate) fn build(self) -> Result<Tool, Error> {
        let mut b = Tool::builder(&self.id)
            .description(self.description)
            .input_schema(self.input_schema)
            .tags(self.tags)
            .docs(self.docs);
        if let Some(t) = self.title {
            b = b.title(t);
        }
        if let Some(s) = self.output_schema {
            b = b.output_schema(s);
        }
        if let Some(a) = self.annotations {
            b = b.annotations(a);
        }
        b.build()
    }
}

/// Whether a tool may run again after its worker was lost: only when it
/// says it is idempotent or read-only (MCP's hints; both default to no).
pub(crate) fn rerunnable(tool: &Tool) -> bool {
    tool.annotations
        .as_ref()
        .is_some_and(|a| a.idempotent_hint == Some(true) || a.read_only_hint == Some(true))
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
