//! [`CallLog`]: the call-log layer, and the [`SharedLog`] it writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use toolexec::{
    BoxFuture, CancellationToken, DetailLevel, Error, ErrorBody, ErrorCode, ToolAccess,
};

use crate::{ToolCallLog, ToolCallRecord};

/// A run's call log, shared by the layers that write it and the host that
/// reads it. Cheap to clone; clones share the log.
#[derive(Clone, Default)]
pub(crate) struct SharedLog(Arc<Mutex<ToolCallLog>>);

impl SharedLog {
    /// Finishes `record` with `result` after `elapsed` and appends it.
    pub(crate) fn finish(
        &self,
        mut record: ToolCallRecord,
        result: &Result<Value, Error>,
        elapsed: Duration,
    ) {
        match result {
            Ok(value) => record.finish_with(Ok(value), elapsed),
            Err(error) => record.finish_with(Err(&error.to_body()), elapsed),
        }
        self.0.lock().push(record);
    }

    /// The records so far.
    pub(crate) fn records(&self) -> Vec<ToolCallRecord> {
        self.0.lock().records().to_vec()
    }

    /// The bytes the log holds (its records, serialized).
    pub(crate) fn retained_bytes(&self) -> usize {
        self.0.lock().retained_bytes()
    }

    /// Takes the records (leaves the log empty).
    pub(crate) fn take(&self) -> Vec<ToolCallRecord> {
        std::mem::take(&mut *self.0.lock()).into_records()
    }
}

/// Records every call into a [`SharedLog`]: a bounded [`ToolCallRecord`]
/// (sizes, digests and previews, never the arguments or the result), also
/// for a call whose future is dropped before it completes (as failed with
/// `cancelled`: it may have had effects). `search` and `describe` pass
/// through unlogged.
pub(crate) struct CallLog<S> {
    inner: S,
    log: SharedLog,
}

impl<S> CallLog<S> {
    /// `inner`, its calls recorded in `log`.
    pub(crate) fn new(inner: S, log: SharedLog) -> Self {
        CallLog { inner, log }
    }
}

impl<S: ToolAccess> ToolAccess for CallLog<S> {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let mut pending = PendingCall {
            log: self.log.clone(),
            record: Some(ToolCallRecord::started(tool_id, &args)),
            started: Instant::now(),
        };
        let call = self.inner.call(tool_id, args, cancel);
        Box::pin(async move {
            let result = call.await;
            pending.finish(&result);
            result
        })
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        self.inner.search(query, limit)
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        self.inner.describe(tool_id, level)
    }
}

/// A call in progress: logged when it completes, or, if its future is
/// dropped first (deadline, kill, channel shutdown), as failed with
/// `cancelled`.
struct PendingCall {
    log: SharedLog,
    record: Option<ToolCallRecord>,
    started: Instant,
}

impl PendingCall {
    fn finish(&mut self, result: &Result<Value, Error>) {
        if let Some(record) = self.record.take() {
            self.log.finish(record, result, self.started.elapsed());
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if self.record.is_none() {
            return;
        }
        self.finish(&Err(Error::from(ErrorBody {
            code: ErrorCode::Cancelled,
            message: "cancelled: the run ended before the call completed; it may have had effects"
                .into(),
            details: None,
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use serde_json::json;
    use toolexec::Exec;

    #[tokio::test]
    async fn records_calls_not_lookups() {
        let log = SharedLog::default();
        let tools = CallLog::new(Exec::new(toolexec_testkit::catalog()), log.clone());
        tools
            .call(
                "math:add",
                json!({"a": 1, "b": 2}),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        let err = tools
            .call("math:nope", json!({}), CancellationToken::new())
            .await
            .unwrap_err();
        tools.search("add", 5).await.unwrap();
        tools
            .describe("math:add", DetailLevel::Summary)
            .await
            .unwrap();
        let records = log.records();
        assert_eq!(records.len(), 2);
        assert!(records[0].ok && records[0].tool_id == "math:add");
        assert_eq!(records[1].error.as_ref().unwrap().code, err.code());
        let bytes: usize = records.iter().map(ToolCallRecord::retained_bytes).sum();
        assert_eq!(bytes, log.retained_bytes());
        assert_eq!(log.take().len(), 2);
        assert!(log.records().is_empty());
    }

    /// A call dropped before it completes is still in the log, as
    /// `cancelled`.
    #[tokio::test]
    async fn a_dropped_call_is_logged_cancelled() {
        struct Never;
        impl ToolAccess for Never {
            fn call(
                &self,
                _: &str,
                _: Value,
                _: CancellationToken,
            ) -> BoxFuture<'static, Result<Value, Error>> {
                Box::pin(std::future::pending())
            }
            fn search(&self, _: &str, _: usize) -> BoxFuture<'static, Result<Value, Error>> {
                Box::pin(std::future::pending())
            }
            fn describe(
                &self,
                _: &str,
                _: DetailLevel,
            ) -> BoxFuture<'static, Result<Value, Error>> {
                Box::pin(std::future::pending())
            }
        }
        let log = SharedLog::default();
        let tools = CallLog::new(Never, log.clone());
        let mut call = tools.call("slow:op", json!({"n": 1}), CancellationToken::new());
        assert!((&mut call).now_or_never().is_none());
        assert!(log.records().is_empty());
        drop(call);
        let records = log.records();
        assert_eq!(records.len(), 1);
        let error = records[0].error.as_ref().unwrap();
        assert_eq!(error.code, ErrorCode::Cancelled);
        assert!(
            error.message.starts_with("cancelled: the run ended"),
            "{}",
            error.message
        );
    }
}
