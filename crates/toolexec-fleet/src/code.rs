//! Durable code runs: a code-mode script executed on a worker, each of its
//! tool calls journaled (`<run key>.c<n>`: started, then its result). When
//! the worker is lost, the run is delivered to another worker, which runs
//! the script again from the start: calls already journaled get their
//! recorded results without running again (deterministic replay), and the
//! script goes on live from where the journal ends. Replay is impossible,
//! and the run ends `interrupted`, when the script asks for a different
//! call than the journal holds (it is not deterministic), or when a call
//! was in flight at the crash and its tool is not idempotent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation};
use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolexec::{
    BoxFuture, CancellationToken, DetailLevel, Error, ErrorBody, ErrorCode, Exec, ToolAccess,
};
use toolexec_code::{CodeEngine, CodeLimits, CodeOutcome, CodeRequest};

use crate::cluster::unavailable;
use crate::wire::rerunnable;

/// A script and its limits on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CodeWire {
    code: String,
    timeout_ms: u64,
    memory_bytes: usize,
    max_tool_calls: usize,
    max_output_bytes: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    allowed_tools: Vec<String>,
    max_stack_bytes: usize,
}

impl CodeWire {
    pub(crate) fn of(request: &CodeRequest) -> Self {
        let l = &request.limits;
        CodeWire {
            code: request.code.clone(),
            timeout_ms: l.timeout.as_millis().try_into().unwrap_or(u64::MAX),
            memory_bytes: l.memory_bytes,
            max_tool_calls: l.max_tool_calls,
            max_output_bytes: l.max_output_bytes,
            allowed_tools: l.allowed_tools.clone(),
            max_stack_bytes: l.max_stack_bytes,
        }
    }

    fn request(self) -> CodeRequest {
        CodeRequest {
            code: self.code,
            limits: CodeLimits {
                timeout: Duration::from_millis(self.timeout_ms),
                memory_bytes: self.memory_bytes,
                max_tool_calls: self.max_tool_calls,
                max_output_bytes: self.max_output_bytes,
                allowed_tools: self.allowed_tools,
                max_stack_bytes: self.max_stack_bytes,
            },
        }
    }
}

/// One tool call of a code run, in the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum CallEntry {
    /// Sent to the tool; its result not yet recorded.
    Started { tool: String, digest: String },
    /// Its result.
    Done {
        tool: String,
        digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorBody>,
    },
}

/// Runs `wire` on `exec`'s tools, journaling (and replaying) its calls
/// under `key`. Returns the script's outcome, or the `interrupted` error
/// when replay was impossible.
pub(crate) async fn execute(
    exec: &Exec,
    store: &kv::Store,
    key: &str,
    worker: &str,
    namespaces: &[String],
    wire: CodeWire,
    alive: impl Future<Output = ()>,
) -> Result<CodeOutcome, ErrorBody> {
    let journal = Arc::new(Inner {
        exec: exec.clone(),
        store: store.clone(),
        key: key.to_owned(),
        worker: worker.to_owned(),
        namespaces: namespaces.to_vec(),
        next: AtomicUsize::new(0),
        broken: Mutex::new(None),
    });
    let engine = CodeEngine::with_tools(Arc::new(Journaled(journal.clone())), 1);
    let outcome = tokio::select! {
        outcome = engine.execute(wire.request()) => outcome,
        () = alive => unreachable!("renewing a run never ends"),
    };
    match journal.broken.lock().take() {
        Some(error) => Err(error),
        None => Ok(outcome),
    }
}

/// The tools of a code run, through its journal.
struct Journaled(Arc<Inner>);

struct Inner {
    exec: Exec,
    store: kv::Store,
    key: String,
    worker: String,
    /// The namespaces the worker serves: the only tools a script reaches.
    namespaces: Vec<String>,
    /// The index of the script's next call.
    next: AtomicUsize,
    /// Set when replay proved impossible: every later call fails, and the
    /// run ends `interrupted` whatever the script does.
    broken: Mutex<Option<ErrorBody>>,
}

impl Inner {
    fn call_key(&self, index: usize) -> String {
        format!("{}.c{index}", self.key)
    }

    /// Ends the run as `interrupted` with `why`; the script's call fails.
    fn break_replay(&self, index: usize, tool: &str, why: String) -> Error {
        let body = ErrorBody {
            code: ErrorCode::Interrupted,
            message: format!(
                "interrupted: code run {}: call {index} ({tool}): {why}",
                self.key
            ),
            details: Some(json!({
                "journal": [{"call": index, "tool": tool, "worker": self.worker, "state": "replay_impossible"}],
            })),
        };
        let mut broken = self.broken.lock();
        let first = broken.get_or_insert(body);
        Error::from(first.clone())
    }

    /// Call `index` of the script (numbered as the script makes them, so
    /// a replay of the same script numbers them alike).
    async fn call_journaled(
        self: Arc<Self>,
        index: usize,
        tool: String,
        args: Value,
        cancel: CancellationToken,
    ) -> Result<Value, Error> {
        if let Some(broken) = self.broken.lock().clone() {
            return Err(Error::from(broken));
        }
        let served = toolexec::ToolIdRef::parse(&tool)
            .is_ok_and(|id| self.namespaces.iter().any(|n| n == id.namespace));
        if !served {
            return Err(Error::NotAllowed {
                tool,
                reason: format!(
                    "code runs on worker {} reach the namespaces it serves: {:?}",
                    self.worker, self.namespaces
                ),
            });
        }
        let digest = digest(&tool, &args);
        let call_key = self.call_key(index);
        let recorded = self
            .store
            .entry(call_key.as_str())
            .await
            .map_err(|e| unavailable(format!("journal read: {e}")))?
            .filter(|e| e.operation == Operation::Put);
        let revision = match recorded {
            None => {
                let started = encode(&CallEntry::Started {
                    tool: tool.clone(),
                    digest: digest.clone(),
                });
                match self.store.create(call_key.as_str(), started).await {
                    Ok(revision) => revision,
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
                        return Err(self.break_replay(
                            index,
                            &tool,
                            "another attempt of this run journaled the call meanwhile".into(),
                        ));
                    }
                    Err(e) => return Err(unavailable(format!("journal write: {e}"))),
                }
            }
            Some(entry) => {
                let recorded: CallEntry = serde_json::from_slice(&entry.value)
                    .map_err(|e| unavailable(format!("journal entry {call_key}: {e}")))?;
                match recorded {
                    CallEntry::Done {
                        tool: t,
                        digest: d,
                        value,
                        error,
                    } if t == tool && d == digest => {
                        // Replayed: the recorded result, nothing runs.
                        return match error {
                            Some(e) => Err(Error::from(e)),
                            None => Ok(value.unwrap_or(Value::Null)),
                        };
                    }
                    CallEntry::Started { tool: t, digest: d } if t == tool && d == digest => {
                        let again = self
                            .exec
                            .catalog()
                            .get(&tool)
                            .is_ok_and(|r| rerunnable(r.tool()));
                        if !again {
                            return Err(self.break_replay(
                                index,
                                &tool,
                                "it was in flight when the previous worker was lost and the \
                                 tool is not marked idempotent or read-only, so it was not \
                                 run again; it may or may not have taken effect"
                                    .into(),
                            ));
                        }
                        entry.revision
                    }
                    _ => {
                        return Err(self.break_replay(
                            index,
                            &tool,
                            "the script asked for a different call than the journal holds \
                             (it is not deterministic), so it cannot be replayed"
                                .into(),
                        ));
                    }
                }
            }
        };
        let result = ToolAccess::call(&self.exec, &tool, args, cancel).await;
        let done = CallEntry::Done {
            tool: tool.clone(),
            digest,
            value: result.as_ref().ok().cloned(),
            error: result.as_ref().err().map(Error::to_body),
        };
        // Recorded before the script sees it: a crash after this replays it.
        if let Err(e) = self
            .store
            .update(call_key.as_str(), encode(&done), revision)
            .await
        {
            return Err(self.break_replay(
                index,
                &tool,
                format!("its result could not be journaled: {e}"),
            ));
        }
        result
    }
}

impl ToolAccess for Journaled {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        // Numbered now, in the order the script makes its calls, not in
        // the order their futures happen to be polled.
        let index = self.0.next.fetch_add(1, Ordering::SeqCst);
        Box::pin(
            self.0
                .clone()
                .call_journaled(index, tool_id.to_owned(), args, cancel),
        )
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        ToolAccess::search(&self.0.exec, query, limit)
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        ToolAccess::describe(&self.0.exec, tool_id, level)
    }
}

fn digest(tool: &str, args: &Value) -> String {
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(args).unwrap_or_default());
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn encode(entry: &CallEntry) -> Bytes {
    Bytes::from(serde_json::to_vec(entry).expect("journal entries serialize"))
}
