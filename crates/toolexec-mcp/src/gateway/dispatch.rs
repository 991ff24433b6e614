//! `tools/call`: routes a call to a meta-tool or a directly published
//! catalog tool, and answers the meta-tools that are not runs (search,
//! namespaces, docs) and `execute_code`.

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use toolexec::ToolMatch;
#[cfg(feature = "code")]
use toolexec::{DetailLevel, ErrorBody, ErrorCode};
#[cfg(feature = "code")]
use toolexec_code::{CodeLimits, CodeRequest};

#[cfg(feature = "code")]
use super::code;
use super::meta::{self, META_TOOLS};
use super::result;
use super::server::Gateway;

impl Gateway {
    /// Answers one `tools/call`: a protocol error for an unknown tool or
    /// meta-tool arguments that do not fit its schema, else a result
    /// (`isError` for tool and pipeline failures), or a tool's requests for
    /// client input to a client that answers them itself.
    pub(super) async fn call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let expose = self.shared.options.expose;
        let name = request.name.as_ref();
        let args = request.arguments;
        if expose.meta() && META_TOOLS.contains(&name) {
            return self.call_meta(name, args, context).await;
        }
        if expose.direct()
            && let Some(id) = self.resolve_name(name)?
        {
            let args = args.map(Value::Object).unwrap_or(Value::Null);
            return Ok(self.run_tool(id, args, context).await);
        }
        Err(McpError::invalid_params(
            format!("unknown tool: {name:?}"),
            Some(json!({"tool": name})),
        ))
    }

    /// Answers a call to the meta-tool `name`.
    async fn call_meta(
        &self,
        name: &str,
        args: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let bad = |m: String| McpError::invalid_params(m, None);
        let result: Result<CallToolResult, McpError> = match name {
            meta::SEARCH_TOOLS => {
                let a: meta::SearchArgs = meta::parse(name, args).map_err(bad)?;
                let limit = a.limit.unwrap_or(meta::DEFAULT_SEARCH_LIMIT);
                if !(1..=meta::MAX_SEARCH_LIMIT).contains(&limit) {
                    return Err(bad(format!(
                        "invalid arguments for {name}: limit must be between 1 and {}",
                        meta::MAX_SEARCH_LIMIT
                    )));
                }
                let found =
                    self.exec()
                        .search_with(&a.query, limit, a.namespace.as_deref(), a.mode);
                Ok(match found {
                    Ok(found) => {
                        let results: Vec<ToolMatch> = found.iter().map(ToolMatch::from).collect();
                        result::success(json!({ "results": results }), &[])
                    }
                    Err(e) => result::error(&e.to_body()),
                })
            }
            meta::LIST_NAMESPACES => {
                let _: meta::NoArgs = meta::parse(name, args).map_err(bad)?;
                let namespaces = self.exec().list_namespaces();
                Ok(result::success(json!({ "namespaces": namespaces }), &[]))
            }
            meta::DESCRIBE_TOOL => {
                let a: meta::DescribeArgs = meta::parse(name, args).map_err(bad)?;
                Ok(match self.exec().describe_tool(&a.tool_id, a.detail) {
                    Ok(d) => {
                        let v = serde_json::to_value(d).unwrap_or_default();
                        #[cfg(feature = "code")]
                        let v = self.with_typescript(&a, v);
                        result::success(v, &[])
                    }
                    Err(e) => result::error(&e.to_body()),
                })
            }
            meta::RUN_TOOL => {
                let a: meta::RunArgs = meta::parse(name, args).map_err(bad)?;
                return Ok(self
                    .run_tool(a.tool_id, a.args.unwrap_or(Value::Null), context)
                    .await);
            }
            meta::RUN_CHAIN => {
                let a: meta::ChainArgs = meta::parse(name, args).map_err(bad)?;
                Ok(self.run_chain(a.steps, context).await)
            }
            #[cfg(feature = "code")]
            meta::EXECUTE_CODE => {
                let a: code::CodeArgs = meta::parse(name, args).map_err(bad)?;
                let limits = self.shared.options.code.limits(&a).map_err(bad)?;
                Ok(self.execute_code(a.code, limits, context).await)
            }
            _ => Err(McpError::invalid_params(
                format!("unknown tool: {name:?}"),
                None,
            )),
        };
        result.map(CallToolResponse::from)
    }

    /// Adds the tool's TypeScript declaration (`typescript`) to a
    /// `describe_tool` result at detail `schema` or `full`.
    #[cfg(feature = "code")]
    fn with_typescript(&self, args: &meta::DescribeArgs, mut v: Value) -> Value {
        if args.detail != DetailLevel::Summary
            && let (Ok(entry), Value::Object(m)) =
                (self.exec().catalog().get(&args.tool_id), &mut v)
        {
            let ts = toolexec_code::typescript_declaration(entry.tool());
            m.insert("typescript".into(), Value::String(ts));
        }
        v
    }

    /// Runs a script through the gateway's
    /// [`CodeExecutor`](toolexec_code::CodeExecutor) (its own
    /// [`CodeRunner`](toolexec_code::CodeRunner), or a fleet). The client's cancellation
    /// stops the script at once and cancels its tool calls in flight; the
    /// answer is then `cancelled`.
    #[cfg(feature = "code")]
    async fn execute_code(
        &self,
        code: String,
        limits: CodeLimits,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let request = CodeRequest { code, limits };
        let outcome = self.shared.code.execute(request, &context.ct).await;
        if context.ct.is_cancelled() {
            return result::error(&ErrorBody {
                code: ErrorCode::Cancelled,
                message: "cancelled: the client cancelled the request; the script was stopped"
                    .into(),
                details: None,
            });
        }
        match outcome {
            Ok(outcome) => code::outcome_result(&outcome),
            Err(body) => result::error(&body),
        }
    }
}
