//! Durable code runs: a code-mode script executed on a worker, each of its
//! tool calls journaled (started, then its result) under a key made of the
//! call itself: the tool, its arguments, and how many same calls the script
//! made before. When the worker is lost, the run is delivered to another
//! worker, which runs the script again from the start: calls already
//! journaled get their recorded results without running again
//! (deterministic replay, whatever order concurrent calls finish in), and
//! the script goes on live from there. The run ends `interrupted` when a
//! call that is not idempotent was in flight at the crash (it may or may
//! not have taken effect), when the journal cannot be read or written, or
//! when another worker took the run over.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation};
use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolexec::{
    BoxFuture, CancellationToken, DetailLevel, Error, ErrorBody, ErrorCode, Exec, LimitKind,
    ToolAccess,
};
use toolexec_code::{CodeLimits, CodeOutcome, CodeRequest, CodeRunner};

use crate::callback::{Ask, Callback};
use crate::wire::{Journal, rerunnable};

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

    /// The script's deadline.
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
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

/// Where a call of a code run went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Via {
    /// The worker's own catalog.
    #[default]
    Worker,
    /// The caller's tools, through the callback subject.
    Caller,
}

/// One tool call of a code run, in the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum CallEntry {
    /// Sent to the tool (on the worker, or to the caller); its result not
    /// yet recorded.
    Started {
        tool: String,
        #[serde(default)]
        via: Via,
    },
    /// Its result.
    Done {
        tool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorBody>,
    },
}

/// Who runs this attempt of the run: checked in the run's own journal
/// entry before every live call, so an attempt another worker took over
/// makes no call after it lost the run.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub(crate) instance: String,
    pub(crate) seq: u64,
    pub(crate) attempt: u32,
}

/// Where a code run executes: the worker's runner (its profile's
/// placement, bounding the runs at once), tools, journal and namespaces.
pub(crate) struct Place<'a> {
    pub(crate) runner: &'a CodeRunner,
    pub(crate) exec: &'a Exec,
    pub(crate) store: &'a kv::Store,
    pub(crate) worker: &'a str,
    pub(crate) namespaces: &'a [String],
    /// Largest value one journal entry may hold (the server's payload
    /// limit, less room for the envelope).
    pub(crate) max_entry: usize,
    /// The caller's tools, for calls outside `namespaces`, when the caller
    /// offers them.
    pub(crate) callback: Option<Callback>,
}

/// Runs `wire` on the worker's tools, journaling (and replaying) its calls
/// under `key`. Returns the script's outcome, or the `interrupted` error
/// when replay was impossible (`cancel` stops it), and the call entries it
/// touched, to forget once the run's outcome is recorded.
pub(crate) async fn execute(
    place: Place<'_>,
    key: &str,
    holder: Holder,
    wire: CodeWire,
    cancel: &CancellationToken,
    alive: impl Future<Output = ()>,
) -> (Result<CodeOutcome, ErrorBody>, Vec<String>) {
    let journal = Arc::new(Inner {
        exec: place.exec.clone(),
        store: place.store.clone(),
        key: key.to_owned(),
        worker: place.worker.to_owned(),
        namespaces: place.namespaces.to_vec(),
        holder,
        max_entry: place.max_entry,
        callback: place.callback,
        seen: Mutex::default(),
        touched: Mutex::default(),
        broken: Mutex::new(None),
    });
    let tools = Arc::new(Journaled(journal.clone()));
    let ran = tokio::select! {
        ran = place.runner.run_with_tools(wire.request(), cancel, tools) => ran,
        () = alive => unreachable!("renewing a run never ends"),
    };
    let broken = journal.broken.lock().take();
    let touched = std::mem::take(&mut *journal.touched.lock());
    let result = match (ran, broken) {
        (_, Some(error)) => Err(error),
        (ran, None) if cancel.is_cancelled() => Err(ran.err().unwrap_or(ErrorBody {
            code: ErrorCode::Cancelled,
            message: "cancelled: the caller cancelled the code run".into(),
            details: None,
        })),
        (ran, None) => ran,
    };
    (result, touched)
}

/// Removes the journal entries of a finished run's tool calls (best
/// effort: the bucket's age limit removes what is left).
pub(crate) async fn forget_calls(store: &kv::Store, keys: &[String]) {
    for key in keys {
        let _ = store.purge(key.as_str()).await;
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
    holder: Holder,
    max_entry: usize,
    /// The caller's tools, for calls outside `namespaces`.
    callback: Option<Callback>,
    /// How many times the script made each call (by digest) so far.
    seen: Mutex<HashMap<String, usize>>,
    /// Call entries this attempt read or wrote, forgotten once the run's
    /// outcome is recorded.
    touched: Mutex<Vec<String>>,
    /// Set when replay proved impossible: every later call fails, and the
    /// run ends `interrupted` whatever the script does.
    broken: Mutex<Option<ErrorBody>>,
}

impl Inner {
    /// Ends the run as `interrupted` with `why`; the script's call fails,
    /// and so does every later one, caught or not.
    fn break_replay(&self, tool: &str, why: String) -> Error {
        let body = ErrorBody {
            code: ErrorCode::Interrupted,
            message: format!("interrupted: code run {}: call to {tool}: {why}", self.key),
            details: Some(json!({
                "journal": [{"tool": tool, "worker": self.worker, "attempt": self.holder.attempt,
                             "state": "replay_impossible"}],
            })),
        };
        let mut broken = self.broken.lock();
        let first = broken.get_or_insert(body);
        Error::from(first.clone())
    }

    /// Whether this attempt still holds the run (another worker may have
    /// taken it over while this one seemed lost).
    async fn still_holds(&self) -> Result<bool, String> {
        let entry = self
            .store
            .entry(self.key.as_str())
            .await
            .map_err(|e| format!("journal read: {e}"))?;
        let held = entry
            .filter(|e| e.operation == Operation::Put)
            .and_then(|e| serde_json::from_slice::<Journal>(&e.value).ok());
        Ok(matches!(
            held,
            Some(Journal::Running { instance, seq, attempt, .. })
                if instance == self.holder.instance
                    && seq == self.holder.seq
                    && attempt == self.holder.attempt
        ))
    }

    /// One call of the script, journaled under `call_key`.
    async fn call_journaled(
        self: Arc<Self>,
        call_key: String,
        tool: String,
        args: Value,
        cancel: CancellationToken,
    ) -> Result<Value, Error> {
        if let Some(broken) = self.broken.lock().clone() {
            return Err(Error::from(broken));
        }
        // The worker's own namespaces run here; the rest, when the caller
        // offers its tools, on the caller's catalog.
        let mut via = if self.serves(&tool) {
            Via::Worker
        } else if self.callback.is_some() {
            Via::Caller
        } else {
            return Err(self.refuse(&tool));
        };
        // Any journal failure ends the run: a script that caught it and
        // tried again would make the same call under another key, and a
        // later replay would run it twice.
        let recorded = match self.store.entry(call_key.as_str()).await {
            Ok(entry) => entry.filter(|e| e.operation == Operation::Put),
            Err(e) => return Err(self.break_replay(&tool, format!("journal read: {e}"))),
        };
        self.touched.lock().push(call_key.clone());
        let revision = match recorded {
            None => {
                self.check_holder(&tool).await?;
                let started = encode(&CallEntry::Started {
                    tool: tool.clone(),
                    via,
                });
                match self.store.create(call_key.as_str(), started).await {
                    Ok(revision) => revision,
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
                        return Err(self.break_replay(
                            &tool,
                            "another attempt of this run journaled the call meanwhile".into(),
                        ));
                    }
                    Err(e) => {
                        return Err(self.break_replay(&tool, format!("journal write: {e}")));
                    }
                }
            }
            Some(entry) => match serde_json::from_slice::<CallEntry>(&entry.value) {
                Ok(CallEntry::Done { value, error, .. }) => {
                    // Replayed: the recorded result, nothing runs.
                    return match error {
                        Some(e) => Err(Error::from(e)),
                        None => Ok(value.unwrap_or(Value::Null)),
                    };
                }
                Ok(CallEntry::Started { via: started, .. }) => {
                    // Asked of the caller again, it answers with the first
                    // call's result (it runs each call key once); a call the
                    // previous worker ran itself runs again only where it
                    // ran, and only when it may.
                    let again = match (started, via) {
                        // The caller decides, wherever the tool is now.
                        (Via::Caller, _) if self.callback.is_some() => {
                            via = Via::Caller;
                            true
                        }
                        (Via::Worker, Via::Worker) => self
                            .exec
                            .catalog()
                            .get(&tool)
                            .is_ok_and(|r| rerunnable(r.tool())),
                        _ => false,
                    };
                    if !again {
                        return Err(self.break_replay(
                            &tool,
                            "it was in flight when the previous worker was lost and the tool \
                             is not marked idempotent or read-only, so it was not run again; \
                             it may or may not have taken effect"
                                .into(),
                        ));
                    }
                    self.check_holder(&tool).await?;
                    entry.revision
                }
                Err(e) => {
                    return Err(self.break_replay(&tool, format!("journal entry unreadable: {e}")));
                }
            },
        };
        let result = match (&self.callback, via) {
            (Some(callback), Via::Caller) => {
                let ask = Ask::Call {
                    call: call_key.clone(),
                    tool: tool.clone(),
                    args,
                };
                callback.ask(&ask, &cancel).await
            }
            _ => ToolAccess::call(&self.exec, &tool, args, cancel).await,
        };
        let done = CallEntry::Done {
            tool: tool.clone(),
            value: result.as_ref().ok().cloned(),
            error: result.as_ref().err().map(Error::to_body),
        };
        let mut bytes = encode(&done);
        if bytes.len() > self.max_entry {
            // Too large to record: the script gets this error, and so does
            // a replay (the call is not run twice for want of room).
            let error = Error::limit_exceeded(
                LimitKind::OutputBytes,
                format!(
                    "the result of {tool} ({} bytes) is over what a journal entry holds \
                     ({} bytes)",
                    bytes.len(),
                    self.max_entry
                ),
            );
            bytes = encode(&CallEntry::Done {
                tool: tool.clone(),
                value: None,
                error: Some(error.to_body()),
            });
            if let Err(e) = self.store.update(call_key.as_str(), bytes, revision).await {
                return Err(self.break_replay(&tool, format!("journal write: {e}")));
            }
            return Err(error);
        }
        // Recorded before the script sees it: a crash after this replays it.
        if let Err(e) = self.store.update(call_key.as_str(), bytes, revision).await {
            // Another attempt joined the same call at the caller and
            // recorded its one answer first: that record is this result.
            if let Ok(Some(entry)) = self.store.entry(call_key.as_str()).await
                && let Ok(CallEntry::Done { value, error, .. }) =
                    serde_json::from_slice::<CallEntry>(&entry.value)
            {
                return match error {
                    Some(e) => Err(Error::from(e)),
                    None => Ok(value.unwrap_or(Value::Null)),
                };
            }
            return Err(self.break_replay(&tool, format!("its result could not be journaled: {e}")));
        }
        result
    }

    /// Refuses a live call once this attempt no longer holds the run.
    async fn check_holder(&self, tool: &str) -> Result<(), Error> {
        match self.still_holds().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.break_replay(
                tool,
                "another worker took the run over; this attempt makes no more calls".into(),
            )),
            Err(e) => Err(self.break_replay(tool, e)),
        }
    }

    fn serves(&self, tool: &str) -> bool {
        toolexec::ToolIdRef::parse(tool)
            .is_ok_and(|id| self.namespaces.iter().any(|n| n == id.namespace))
    }

    fn refuse(&self, tool: &str) -> Error {
        Error::NotAllowed {
            tool: tool.to_owned(),
            reason: format!(
                "code runs on worker {} reach the namespaces it serves: {:?}",
                self.worker, self.namespaces
            ),
        }
    }
}

impl ToolAccess for Journaled {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        // Keyed by the call itself and its occurrence, counted now (in the
        // order the script makes its calls): concurrent calls replay alike
        // whichever finishes first.
        let digest = digest(tool_id, &args);
        let occurrence = {
            let mut seen = self.0.seen.lock();
            let n = seen.entry(digest.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let call_key = format!("{}.c{digest}.{occurrence}", self.0.key);
        Box::pin(
            self.0
                .clone()
                .call_journaled(call_key, tool_id.to_owned(), args, cancel),
        )
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        // The served namespaces' tools, and the caller's when it offers
        // them, best first.
        let inner = self.0.clone();
        let search = ToolAccess::search(&self.0.exec, query, limit);
        let ask = Ask::Search {
            query: query.to_owned(),
            limit,
        };
        Box::pin(async move {
            let mut hits: Vec<Value> = search
                .await?
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["id"].as_str().is_some_and(|id| inner.serves(id)))
                .cloned()
                .collect();
            if let Some(callback) = &inner.callback {
                // The caller's hits when it answers; the worker's alone
                // when it does not.
                let theirs = callback
                    .ask(&ask, &CancellationToken::new())
                    .await
                    .unwrap_or_else(|e| {
                        tracing::debug!("search on the caller failed: {e}");
                        Value::Array(Vec::new())
                    });
                for hit in theirs.as_array().into_iter().flatten() {
                    if !hits.iter().any(|h| h["id"] == hit["id"]) {
                        hits.push(hit.clone());
                    }
                }
                let score = |m: &Value| m["score"].as_f64().unwrap_or(0.0);
                hits.sort_by(|a, b| score(b).total_cmp(&score(a)));
                hits.truncate(limit);
            }
            Ok(Value::Array(hits))
        })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        if self.0.serves(tool_id) {
            return ToolAccess::describe(&self.0.exec, tool_id, level);
        }
        let Some(callback) = self.0.callback.clone() else {
            let refused = self.0.refuse(tool_id);
            return Box::pin(async move { Err(refused) });
        };
        let ask = Ask::Describe {
            tool: tool_id.to_owned(),
            detail: level,
        };
        Box::pin(async move { callback.ask(&ask, &CancellationToken::new()).await })
    }
}

/// Whether `call` is the key a worker gives a call of `tool` with `args`
/// in code run `key`: `<key>.c<digest>.<occurrence>`.
pub(crate) fn is_call_key(key: &str, call: &str, tool: &str, args: &Value) -> bool {
    call.strip_prefix(key)
        .and_then(|rest| rest.strip_prefix(".c"))
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(d, n)| {
            // The occurrence as workers write it: no sign, no leading zero.
            d == digest(tool, args)
                && n.parse::<usize>()
                    .is_ok_and(|parsed| parsed > 0 && parsed.to_string() == n)
        })
}

/// The digest of one call (tool and arguments) in its call key.
pub(crate) fn digest(tool: &str, args: &Value) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_keys_are_bound_to_their_call() {
        let args = json!({"n": 1});
        let d = digest("a:b", &args);
        assert!(is_call_key("k", &format!("k.c{d}.1"), "a:b", &args));
        assert!(is_call_key("k", &format!("k.c{d}.12"), "a:b", &args));
        // Another call, run, or spelling of the occurrence: not its key.
        assert!(!is_call_key(
            "k",
            &format!("k.c{d}.1"),
            "a:b",
            &json!({"n": 2})
        ));
        assert!(!is_call_key("k2", &format!("k.c{d}.1"), "a:b", &args));
        for n in ["0", "01", "+1", "-1", "", "1.0"] {
            assert!(
                !is_call_key("k", &format!("k.c{d}.{n}"), "a:b", &args),
                "{n}"
            );
        }
    }

    #[test]
    fn a_started_call_records_where_it_went() {
        let old: CallEntry = serde_json::from_str(r#"{"state":"started","tool":"a:b"}"#).unwrap();
        assert!(matches!(
            old,
            CallEntry::Started {
                via: Via::Worker,
                ..
            }
        ));
        let back = serde_json::to_string(&CallEntry::Started {
            tool: "a:b".into(),
            via: Via::Caller,
        })
        .unwrap();
        assert_eq!(back, r#"{"state":"started","tool":"a:b","via":"caller"}"#);
    }
}
