//! [`ToolAccess`]: the one seam through which code that is not a tool
//! (a script, a sandboxed unit, a remote run) calls, searches and
//! describes tools.
//!
//! [`Exec`] implements it over its catalog. Elsewhere in the workspace it
//! is implemented by the sandbox worker's tool-channel client and by the remote
//! runtime server's forwarder, and wrapped by layers (the run's budget,
//! allowlist and call log, in `toolexec-runtime`), each of which is itself
//! a [`ToolAccess`] around an inner one, as a tower `Layer` wraps a
//! `Service`.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::backend::BoxFuture;
use crate::docs::DetailLevel;
use crate::error::Error;
use crate::exec::Exec;
use crate::run::RunOptions;

/// Call, search and describe tools.
///
/// Errors keep their code across every boundary: an implementation that
/// receives an [`ErrorBody`](crate::ErrorBody) from a wire returns it as
/// `Error::from(body)`, never wrapped in another code.
///
/// ```
/// use std::sync::Arc;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use serde_json::json;
/// use toolexec::{CancellationToken, Exec, ToolAccess, ToolError};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct N { n: f64 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let exec = Exec::builder().build();
/// exec.catalog()
///     .tool("math:double", "Doubles a number", |a: N| async move { Ok::<_, ToolError>(a.n * 2.0) })
///     .unwrap();
/// let tools: Arc<dyn ToolAccess> = Arc::new(exec);
/// let out = tools.call("math:double", json!({"n": 2}), CancellationToken::new()).await;
/// assert_eq!(out.unwrap(), json!(4.0));
/// let err = tools.call("math:nope", json!({}), CancellationToken::new()).await;
/// assert_eq!(err.unwrap_err().code().as_str(), "tool_not_found");
/// # }
/// ```
pub trait ToolAccess: Send + Sync + 'static {
    /// Runs `tool_id` with `args`: the result value or the error. `cancel`
    /// fires when the caller gives up on the call.
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>>;

    /// Ranks tools for `query`: a JSON array of `{id, summary, score, ...}`,
    /// best first, at most `limit`.
    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>>;

    /// Documents `tool_id` at `level`.
    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>>;
}

impl<T: ToolAccess + ?Sized> ToolAccess for Arc<T> {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        (**self).call(tool_id, args, cancel)
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        (**self).search(query, limit)
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        (**self).describe(tool_id, level)
    }
}

/// Awaits `call` unless `cancel` fires first; then `call` is dropped and
/// the result is `cancelled` for `tool_id`. For [`ToolAccess::call`]
/// implementations whose transport does not watch the token itself.
pub async fn until_cancelled(
    tool_id: &str,
    call: impl Future<Output = Result<Value, Error>>,
    cancel: &CancellationToken,
) -> Result<Value, Error> {
    tokio::select! {
        r = call => r,
        _ = cancel.cancelled() => Err(Error::Cancelled {
            tool: tool_id.to_owned(),
        }),
    }
}

/// The catalog, through the run pipeline (validation, deadlines,
/// cancellation with `cancel`). `search` and `describe` are ready at once.
impl ToolAccess for Exec {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let exec = self.clone();
        let id = tool_id.to_owned();
        Box::pin(async move {
            let opts = RunOptions {
                cancel: Some(cancel),
                ..RunOptions::default()
            };
            exec.run_tool_with(&id, args, &opts)
                .await
                .map(|out| out.value)
        })
    }

    // Search and describe run when polled (as `call` does), so they decide
    // for the caller current then: the one a scope
    // ([`scoped_access`](crate::telemetry::scoped_access)) sets.
    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        let (exec, query) = (self.clone(), query.to_owned());
        Box::pin(async move {
            Ok(serde_json::to_value(exec.search_tools(&query, limit)).unwrap_or(Value::Null))
        })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let (exec, id) = (self.clone(), tool_id.to_owned());
        Box::pin(async move {
            exec.describe_tool(&id, level)
                .map(|d| serde_json::to_value(d).unwrap_or(Value::Null))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorCode, ToolError};
    use serde_json::json;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct N {
        n: f64,
    }

    fn exec() -> Exec {
        let exec = Exec::builder().build();
        exec.catalog()
            .tool("math:double", "Doubles a number", |a: N| async move {
                Ok::<_, ToolError>(a.n * 2.0)
            })
            .unwrap();
        exec
    }

    #[tokio::test]
    async fn until_cancelled_returns_the_call_or_cancelled() {
        let cancel = CancellationToken::new();
        let done = until_cancelled("t:x", async { Ok(Value::from(1)) }, &cancel).await;
        assert_eq!(done.unwrap(), Value::from(1));
        cancel.cancel();
        let stuck = until_cancelled("t:x", std::future::pending(), &cancel).await;
        let e = stuck.unwrap_err();
        assert_eq!(e.code(), ErrorCode::Cancelled);
        assert!(e.to_string().contains("t:x"), "{e}");
    }

    /// `Exec`'s answers keep the pipeline's typed errors; search and
    /// describe are ready without a runtime turn.
    #[tokio::test]
    async fn exec_serves_the_catalog() {
        let tools: Arc<dyn ToolAccess> = Arc::new(exec());
        let err = tools
            .call("math:double", json!({"n": "two"}), CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::ValidationInput);
        assert!(matches!(err, Error::ValidationInput(_)), "{err:?}");
        let hits = futures::FutureExt::now_or_never(tools.search("double", 5))
            .expect("ready at once")
            .unwrap();
        assert_eq!(hits[0]["id"], "math:double");
        let doc =
            futures::FutureExt::now_or_never(tools.describe("math:double", DetailLevel::Summary))
                .expect("ready at once")
                .unwrap();
        assert_eq!(doc["id"], "math:double");
        let missing = tools.describe("math:nope", DetailLevel::Summary).await;
        assert_eq!(missing.unwrap_err().code(), ErrorCode::ToolNotFound);
    }

    /// A call whose token fires is abandoned with `cancelled`.
    #[tokio::test]
    async fn exec_calls_stop_on_cancel() {
        let exec = Exec::builder().build();
        exec.catalog()
            .tool("t:wait", "Never finishes", |_: N| async move {
                std::future::pending::<Result<f64, ToolError>>().await
            })
            .unwrap();
        let cancel = CancellationToken::new();
        let call = ToolAccess::call(&exec, "t:wait", json!({"n": 1}), cancel.clone());
        cancel.cancel();
        assert_eq!(call.await.unwrap_err().code(), ErrorCode::Cancelled);
    }
}
