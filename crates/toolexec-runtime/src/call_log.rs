//! The tool-call log, bounded in bytes.
//!
//! A [`ToolCallRecord`] never holds a call's arguments or result, only a
//! [`ValueSummary`] of each (size, SHA-256 and a short preview of the
//! compact JSON), and a cut-down error. A [`ToolCallLog`] charges every
//! record's serialized size to a byte budget ([`ToolCallLog::BUDGET_BYTES`]);
//! records that would go over it are [truncated](ToolCallRecord::truncate)
//! to their id, status, sizes and digests. So a script that sends 60 calls
//! of 4 MiB each keeps a few kilobytes of log, not 240 MiB.
//!
//! Every producer of the log (code mode's engine, [`crate::ToolHost`] for
//! sandboxed units, the remote runtime server) builds its records here.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolexec::ErrorBody;

/// A JSON value as the log keeps it: its size, its digest and the start of
/// its compact JSON; never the value itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueSummary {
    /// Size of the value's compact JSON (`serde_json::to_vec`), in bytes.
    pub bytes: u64,
    /// SHA-256 of the compact JSON, lowercase hex.
    pub sha256: String,
    /// The first bytes of the compact JSON (at most
    /// [`ValueSummary::PREVIEW_BYTES`], cut at a character boundary): the
    /// whole JSON when its length is `bytes`. Absent in a truncated record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

impl ValueSummary {
    /// Most bytes of compact JSON a preview keeps.
    pub const PREVIEW_BYTES: usize = 256;

    /// Summarizes `value`, streaming its JSON through the digest (no copy
    /// of the value is made).
    pub fn of(value: &Value) -> Self {
        let mut sink = SummarySink::default();
        // Writing into the sink cannot fail, and a `Value` always serializes.
        let _ = serde_json::to_writer(&mut sink, value);
        let preview = match std::str::from_utf8(&sink.head) {
            Ok(s) => s.to_owned(),
            // The cut fell inside a character: keep the complete ones.
            Err(e) => String::from_utf8_lossy(&sink.head[..e.valid_up_to()]).into_owned(),
        };
        ValueSummary {
            bytes: sink.bytes,
            sha256: hex(&sink.hasher.finalize()),
            preview: Some(preview),
        }
    }

    /// Whether the preview is the whole JSON.
    pub fn is_complete(&self) -> bool {
        self.preview
            .as_ref()
            .is_some_and(|p| p.len() as u64 == self.bytes)
    }
}

/// Counts, hashes and keeps the head of what serde_json writes.
#[derive(Default)]
struct SummarySink {
    bytes: u64,
    hasher: Sha256,
    head: Vec<u8>,
}

impl std::io::Write for SummarySink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        self.hasher.update(buf);
        let room = ValueSummary::PREVIEW_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&buf[..room.min(buf.len())]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// `s` cut to at most `max` bytes at a character boundary, with `…` (3
/// bytes, within `max`) when something was cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let end = s.floor_char_boundary(max.saturating_sub(3));
    format!("{}…", &s[..end])
}

/// One tool call a unit made, in the log: the tool id, a [`ValueSummary`]
/// of the arguments and of the result, the status and a bounded error.
/// At most a kilobyte or two, whatever the call carried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The tool id as the unit sent it (cut to
    /// [`ToolCallRecord::TOOL_ID_BYTES`]).
    pub tool_id: String,
    /// The arguments as the unit sent them, summarized.
    pub args: ValueSummary,
    /// Whether the call succeeded.
    pub ok: bool,
    /// The result value, summarized, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ValueSummary>,
    /// The error (`not_allowed` for a tool outside the allowlist,
    /// `limit_exceeded` past the budget), on failure: the code, the message
    /// cut to [`ToolCallRecord::ERROR_MESSAGE_BYTES`], and the details when
    /// their JSON has at most [`ToolCallRecord::ERROR_DETAILS_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Call duration in milliseconds.
    pub duration_ms: f64,
    /// True when the record was cut down because the log's byte budget was
    /// spent ([`ToolCallRecord::truncate`]): no previews, no error details.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl ToolCallRecord {
    /// Most bytes of a tool id kept.
    pub const TOOL_ID_BYTES: usize = 256;
    /// Most bytes of an error message kept.
    pub const ERROR_MESSAGE_BYTES: usize = 512;
    /// Largest error `details` (compact JSON bytes) kept.
    pub const ERROR_DETAILS_BYTES: usize = 512;
    /// Most bytes of an error message a truncated record keeps.
    pub const TRUNCATED_MESSAGE_BYTES: usize = 128;

    /// The record of a call to `tool_id` with `args` that has not finished
    /// yet (`ok: false`, no result, no error).
    pub fn started(tool_id: &str, args: &Value) -> Self {
        ToolCallRecord {
            tool_id: cut(tool_id, Self::TOOL_ID_BYTES),
            args: ValueSummary::of(args),
            ok: false,
            result: None,
            error: None,
            duration_ms: 0.0,
            truncated: false,
        }
    }

    /// Records how the call ended, after `elapsed`.
    pub fn finish(&mut self, result: &Result<Value, ErrorBody>, elapsed: Duration) {
        self.finish_with(result.as_ref(), elapsed);
    }

    /// [`ToolCallRecord::finish`] from borrowed parts.
    pub(crate) fn finish_with(&mut self, result: Result<&Value, &ErrorBody>, elapsed: Duration) {
        self.duration_ms = elapsed.as_secs_f64() * 1000.0;
        match result {
            Ok(value) => {
                self.ok = true;
                self.result = Some(ValueSummary::of(value));
                self.error = None;
            }
            Err(error) => self.fail(error),
        }
        if self.truncated {
            self.truncate();
        }
    }

    /// Records the call as failed with `error` (bounded).
    pub fn fail(&mut self, error: &ErrorBody) {
        self.ok = false;
        self.result = None;
        let details = error.details.as_ref().filter(|d| {
            let mut sink = SummarySink::default();
            let _ = serde_json::to_writer(&mut sink, d);
            sink.bytes <= Self::ERROR_DETAILS_BYTES as u64
        });
        let max = if self.truncated {
            Self::TRUNCATED_MESSAGE_BYTES
        } else {
            Self::ERROR_MESSAGE_BYTES
        };
        self.error = Some(ErrorBody {
            code: error.code,
            message: cut(&error.message, max),
            details: if self.truncated {
                None
            } else {
                details.cloned()
            },
        });
    }

    /// Cuts the record down to its id, status, sizes and digests: what is
    /// left once the log's budget is spent.
    pub fn truncate(&mut self) {
        self.truncated = true;
        self.args.preview = None;
        if let Some(r) = &mut self.result {
            r.preview = None;
        }
        if let Some(e) = &mut self.error {
            e.details = None;
            e.message = cut(&e.message, Self::TRUNCATED_MESSAGE_BYTES);
        }
    }

    /// The size of the record's JSON, in bytes: what it costs the log.
    pub fn retained_bytes(&self) -> usize {
        let mut sink = SummarySink::default();
        let _ = serde_json::to_writer(&mut sink, self);
        usize::try_from(sink.bytes).unwrap_or(usize::MAX)
    }
}

/// A run's tool-call log: records in call order, their serialized sizes
/// charged to a byte budget. A record that would take the log past the
/// budget is [truncated](ToolCallRecord::truncate) first; truncated records
/// still count, so the log holds at most the budget plus one small record
/// per call past it (and calls are bounded by the run's tool budget).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallLog {
    records: Vec<ToolCallRecord>,
    /// The serialized size of each record, as charged.
    sizes: Vec<usize>,
    retained: usize,
    budget: usize,
}

impl Default for ToolCallLog {
    fn default() -> Self {
        ToolCallLog::with_budget(Self::BUDGET_BYTES)
    }
}

impl ToolCallLog {
    /// The log budget of a run: 64 KiB of records (serialized) keep their
    /// previews and error details; later records are truncated.
    pub const BUDGET_BYTES: usize = 64 << 10;

    /// An empty log with a budget of `budget` bytes.
    pub fn with_budget(budget: usize) -> Self {
        ToolCallLog {
            records: Vec::new(),
            sizes: Vec::new(),
            retained: 0,
            budget,
        }
    }

    /// Appends `record` (truncated if it does not fit the budget); returns
    /// its index.
    pub fn push(&mut self, mut record: ToolCallRecord) -> usize {
        let mut size = record.retained_bytes();
        if !record.truncated && self.retained.saturating_add(size) > self.budget {
            record.truncate();
            size = record.retained_bytes();
        }
        self.retained = self.retained.saturating_add(size);
        self.records.push(record);
        self.sizes.push(size);
        self.records.len() - 1
    }

    /// Changes the record at `index` with `change` (e.g. to
    /// [finish](ToolCallRecord::finish) it), charging the difference in
    /// size; truncates it if the change does not fit the budget. Does
    /// nothing for an index out of range.
    pub fn update(&mut self, index: usize, change: impl FnOnce(&mut ToolCallRecord)) {
        let (Some(record), Some(size)) = (self.records.get_mut(index), self.sizes.get_mut(index))
        else {
            return;
        };
        change(record);
        let mut after = record.retained_bytes();
        let others = self.retained.saturating_sub(*size);
        if !record.truncated && others.saturating_add(after) > self.budget {
            record.truncate();
            after = record.retained_bytes();
        }
        *size = after;
        self.retained = others.saturating_add(after);
    }

    /// The records, in call order.
    pub fn records(&self) -> &[ToolCallRecord] {
        &self.records
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The bytes the records take, serialized.
    pub fn retained_bytes(&self) -> usize {
        self.retained
    }

    /// How many records were truncated.
    pub fn truncated(&self) -> usize {
        self.records.iter().filter(|r| r.truncated).count()
    }

    /// The records.
    pub fn into_records(self) -> Vec<ToolCallRecord> {
        self.records
    }
}

/// The records of `log` that match none of `seen` (same tool and argument
/// digest, each record of `seen` matching one): what one side of a run
/// logged that the other never saw (the calls a remote side refused
/// itself). A truncated record still matches.
pub fn unseen(log: Vec<ToolCallRecord>, seen: &[ToolCallRecord]) -> Vec<ToolCallRecord> {
    let mut left: Vec<(&str, &str)> = seen
        .iter()
        .map(|r| (r.tool_id.as_str(), r.args.sha256.as_str()))
        .collect();
    log.into_iter()
        .filter(|record| {
            let key = (record.tool_id.as_str(), record.args.sha256.as_str());
            match left.iter().position(|k| *k == key) {
                Some(i) => {
                    left.swap_remove(i);
                    false
                }
                None => true,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unseen_keeps_only_unmatched_calls() {
        let record =
            |tool: &str, n: i64| ToolCallRecord::started(tool, &serde_json::json!({"n": n}));
        // A truncated record (past the log's budget) still matches.
        let mut cut = record("a:b", 3);
        cut.truncate();
        let log = vec![record("a:b", 1), record("a:b", 1), record("x:y", 2), cut];
        let left = unseen(log, &[record("a:b", 1), record("a:b", 3)]);
        assert_eq!(left, vec![record("a:b", 1), record("x:y", 2)]);
    }
    use serde_json::json;
    use toolexec::ErrorCode;

    #[test]
    fn a_summary_keeps_the_size_digest_and_head_only() {
        let small = ValueSummary::of(&json!({"a": 1}));
        assert_eq!(small.bytes, 7);
        assert_eq!(small.preview.as_deref(), Some(r#"{"a":1}"#));
        assert!(small.is_complete());
        // echo -n '{"a":1}' | sha256sum
        assert_eq!(
            small.sha256,
            "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
        );
        let big = json!({"text": "é".repeat(1 << 20)});
        let s = ValueSummary::of(&big);
        assert_eq!(s.bytes, serde_json::to_vec(&big).unwrap().len() as u64);
        let preview = s.preview.unwrap();
        // 9 bytes of `{"text":"`, then whole 2-byte characters.
        assert_eq!(preview.len(), ValueSummary::PREVIEW_BYTES - 1);
        assert!(preview.starts_with(r#"{"text":"éé"#));
    }

    #[test]
    fn records_bound_ids_and_errors() {
        let mut r = ToolCallRecord::started(&"x".repeat(10_000), &json!(null));
        assert!(r.tool_id.len() <= ToolCallRecord::TOOL_ID_BYTES);
        assert!(r.tool_id.ends_with('…'));
        r.fail(&ErrorBody {
            code: ErrorCode::ValidationInput,
            message: "m".repeat(1 << 20),
            details: Some(json!({"value": "v".repeat(1 << 20)})),
        });
        let e = r.error.as_ref().unwrap();
        assert_eq!(e.code, ErrorCode::ValidationInput);
        assert!(e.message.len() <= ToolCallRecord::ERROR_MESSAGE_BYTES);
        assert!(e.details.is_none());
        assert!(r.retained_bytes() < 2048, "{}", r.retained_bytes());
        r.fail(&ErrorBody {
            code: ErrorCode::LimitExceeded,
            message: "limit_exceeded: budget".into(),
            details: Some(json!({"limit": "tool_calls", "max": 3})),
        });
        assert_eq!(
            r.error.unwrap().details,
            Some(json!({"limit": "tool_calls", "max": 3}))
        );
    }

    #[test]
    fn the_log_truncates_past_its_budget() {
        let mut log = ToolCallLog::with_budget(2000);
        let args = json!({"text": "a".repeat(10_000)});
        for _ in 0..20 {
            let i = log.push(ToolCallRecord::started("hash:sha256", &args));
            log.update(i, |r| {
                r.finish(&Ok(json!({"hex": "ab".repeat(32)})), Duration::ZERO)
            });
        }
        let sizes: usize = log.records().iter().map(|r| r.retained_bytes()).sum();
        assert_eq!(log.retained_bytes(), sizes);
        assert!(log.truncated() > 0 && log.truncated() < 20);
        let first = &log.records()[0];
        assert!(!first.truncated && first.args.preview.is_some());
        let last = &log.records()[19];
        assert!(last.truncated && last.args.preview.is_none());
        assert_eq!(
            last.args,
            ValueSummary {
                preview: None,
                ..first.args.clone()
            }
        );
        assert!(last.result.as_ref().unwrap().preview.is_none());
        // Past the budget only small records are added.
        assert!(sizes < 2000 + 20 * 300, "{sizes}");
    }

    #[test]
    fn records_round_trip() {
        let mut r = ToolCallRecord::started("math:add", &json!({"a": 1}));
        r.finish(&Ok(json!({"result": 2})), Duration::from_millis(3));
        let back: ToolCallRecord =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        r.truncate();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["truncated"], true);
        assert!(v["args"].get("preview").is_none());
        assert_eq!(serde_json::from_value::<ToolCallRecord>(v).unwrap(), r);
    }
}
