//! [`Allow`]: the allowlist layer.

use serde_json::Value;
use toolexec::{AllowList, BoxFuture, CancellationToken, DetailLevel, Error, ToolAccess};

/// Lets through only the tools `list` permits: calls and describes of
/// others fail with `not_allowed`; search hits of others are dropped (the
/// inner search is asked for twice as many, so filtering still leaves
/// enough).
pub(crate) struct Allow<S> {
    inner: S,
    list: AllowList,
}

impl<S> Allow<S> {
    /// `inner` behind `list`.
    pub(crate) fn new(inner: S, list: AllowList) -> Self {
        Allow { inner, list }
    }
}

fn not_allowed(tool_id: &str) -> Error {
    Error::NotAllowed {
        tool: tool_id.to_owned(),
        reason: "not in this run's allowed_tools".into(),
    }
}

impl<S: ToolAccess> ToolAccess for Allow<S> {
    fn call(
        &self,
        tool_id: &str,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        if !self.list.permits(tool_id) {
            return Box::pin(std::future::ready(Err(not_allowed(tool_id))));
        }
        self.inner.call(tool_id, args, cancel)
    }

    fn search(&self, query: &str, limit: usize) -> BoxFuture<'static, Result<Value, Error>> {
        let hits = self.inner.search(query, limit.saturating_mul(2));
        let list = self.list.clone();
        Box::pin(async move {
            let Value::Array(hits) = hits.await? else {
                return Ok(Value::Array(Vec::new()));
            };
            Ok(Value::Array(
                hits.into_iter()
                    .filter(|m| m["id"].as_str().is_some_and(|id| list.permits(id)))
                    .take(limit)
                    .collect(),
            ))
        })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        if !self.list.permits(tool_id) {
            return Box::pin(std::future::ready(Err(not_allowed(tool_id))));
        }
        self.inner.describe(tool_id, level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolexec::{ErrorCode, Exec};

    fn allow(patterns: &[&str]) -> Allow<Exec> {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        Allow::new(
            Exec::new(toolexec_testkit::catalog()),
            AllowList::new(&patterns),
        )
    }

    #[tokio::test]
    async fn refuses_other_tools_and_filters_search() {
        let tools = allow(&["math:*"]);
        let ok = tools
            .call(
                "math:add",
                json!({"a": 1, "b": 2}),
                CancellationToken::new(),
            )
            .await;
        assert_eq!(ok.unwrap()["result"], 3.0);
        let denied = tools
            .call(
                "text:case",
                json!({"text": "a", "to": "upper"}),
                CancellationToken::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(denied.code(), ErrorCode::NotAllowed);
        assert_eq!(denied.to_body().details.unwrap()["tool"], "text:case");
        let doc = tools.describe("text:case", DetailLevel::Summary).await;
        assert_eq!(doc.unwrap_err().code(), ErrorCode::NotAllowed);
        assert!(
            tools
                .describe("math:add", DetailLevel::Summary)
                .await
                .is_ok()
        );
        let hits = tools.search("convert text case add", 3).await.unwrap();
        let ids: Vec<&str> = hits
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap())
            .collect();
        assert!(!ids.is_empty() && ids.len() <= 3, "{ids:?}");
        assert!(ids.iter().all(|id| id.starts_with("math:")), "{ids:?}");
    }

    #[tokio::test]
    async fn an_open_list_lets_everything_through() {
        let tools = allow(&[]);
        let out = tools
            .call(
                "text:case",
                json!({"text": "a", "to": "upper"}),
                CancellationToken::new(),
            )
            .await;
        assert!(out.is_ok(), "{out:?}");
        let hits = tools.search("text", 2).await.unwrap();
        assert_eq!(hits.as_array().unwrap().len(), 2);
    }
}
