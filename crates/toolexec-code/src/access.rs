//! How a script reaches tools: [`ToolAccess`], implemented by [`Exec`]
//! (in process) and by the sandbox worker's gateway client.

use std::future::Future;

use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;
use toolexec::{BoxFuture, DetailLevel, ErrorBody, Exec, RunOptions};

/// The tool side of a code execution: run, search and describe tools.
///
/// The engine applies its own allowlist and call budget before calling
/// [`ToolAccess::call`]; implementations may enforce more (the sandbox
/// gateway's host does, and its answer wins). `search` and `describe` are
/// resolved inline when their future is ready at once (the [`Exec`] case);
/// otherwise the worker thread waits for them, bounded by the deadline.
///
/// ```
/// use std::sync::Arc;
/// use toolexec_code::{CodeEngine, CodeRequest, ToolAccess};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let exec = toolexec::Exec::new(toolexec_builtins::catalog());
/// let tools: Arc<dyn ToolAccess> = Arc::new(exec);
/// let engine = CodeEngine::with_tools(tools, 1);
/// let out = engine.execute(CodeRequest::new("return 2")).await;
/// assert_eq!(out.value, Some(serde_json::json!(2)));
/// # }
/// ```
pub trait ToolAccess: Send + Sync + 'static {
    /// Runs `tool_id` with `args`; the result value or the pipeline's error.
    /// `cancel` fires when the execution ends.
    fn call(
        &self,
        tool_id: &str,
        args: Json,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Json, ErrorBody>>;

    /// Ranks tools for `query`: a JSON array of `{id, summary, score, ...}`,
    /// best first, at most `limit`.
    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Json>;

    /// Documents `tool_id` at `level`.
    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Json, ErrorBody>>;
}

/// Awaits a tool call unless `cancel` fires first, then the call is
/// dropped and the result is `cancelled` for `tool_id`: the shared body of
/// the host and gateway [`ToolAccess::call`] implementations.
pub(crate) async fn until_cancelled(
    tool_id: &str,
    call: impl Future<Output = Result<Json, ErrorBody>>,
    cancel: &CancellationToken,
) -> Result<Json, ErrorBody> {
    tokio::select! {
        r = call => r,
        _ = cancel.cancelled() => Err(toolexec::Error::Cancelled {
            tool: tool_id.to_owned(),
        }
        .to_body()),
    }
}

impl ToolAccess for Exec {
    fn call(
        &self,
        tool_id: &str,
        args: Json,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Json, ErrorBody>> {
        let exec = self.clone();
        let id = tool_id.to_owned();
        Box::pin(async move {
            let opts = RunOptions {
                timeout: None,
                cancel: Some(cancel),
            };
            exec.run_tool_with(&id, args, &opts)
                .await
                .map(|out| out.value)
                .map_err(|e| e.to_body())
        })
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Json> {
        let hits = serde_json::to_value(self.search_tools(query, limit)).unwrap_or(Json::Null);
        Box::pin(std::future::ready(hits))
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Json, ErrorBody>> {
        let doc = self
            .describe_tool(tool_id, level)
            .map_err(|e| e.to_body())
            .map(|d| serde_json::to_value(d).unwrap_or(Json::Null));
        Box::pin(std::future::ready(doc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolexec::ErrorCode;

    #[tokio::test]
    async fn until_cancelled_returns_the_call_or_cancelled() {
        let cancel = CancellationToken::new();
        let done = until_cancelled("t:x", async { Ok(Json::from(1)) }, &cancel).await;
        assert_eq!(done, Ok(Json::from(1)));
        cancel.cancel();
        let stuck = until_cancelled("t:x", std::future::pending(), &cancel).await;
        let e = stuck.unwrap_err();
        assert_eq!(e.code, ErrorCode::Cancelled);
        assert!(e.message.contains("t:x"), "{}", e.message);
    }
}
