//! `tools/list`: the meta-tools, then the catalog tools published directly
//! under their MCP names (those the caller may run), in pages of
//! [`TOOLS_PAGE`].

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    JsonObject, ListToolsResult, MetaObject, Tool as McpTool, ToolAnnotations as McpAnnotations,
};
use serde_json::{Value, json};
use toolexec::policy::Target;
use toolexec::{ListRequest, RegisteredTool};

use super::names::published_name;
use super::options::GatewayOptions;
use super::server::Gateway;
use super::{meta, result};

/// Largest page of `tools/list` (meta-tools come on the first page).
pub const TOOLS_PAGE: usize = 1000;

/// Most tools remembered as already logged as not published.
const MAX_LOGGED: usize = 10_000;

/// `_meta` key carrying a directly published tool's toolexec id.
pub const META_ID_KEY: &str = "toolexec/id";

impl Gateway {
    /// The MCP tools `tools/list` shows for this page.
    pub(super) fn list_page(&self, cursor: Option<String>) -> Result<ListToolsResult, McpError> {
        let expose = self.shared.options.expose;
        let mut tools = Vec::new();
        if cursor.is_none() && expose.meta() {
            tools.extend(meta_tools(&self.shared.options));
        }
        let mut next_cursor = None;
        if expose.direct() {
            let page = self
                .exec()
                .catalog()
                .list(&ListRequest {
                    namespace: None,
                    cursor,
                    limit: Some(TOOLS_PAGE),
                })
                .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
            let catalog = self.exec().catalog();
            tools.extend(
                page.tools
                    .iter()
                    // An unversioned entry shadowed by versions resolves to
                    // the newest version: it cannot be called, so skip it.
                    .filter(|t| {
                        t.tool().id.version().is_some()
                            || catalog
                                .get(&t.tool().id.to_string())
                                .is_ok_and(|e| Arc::ptr_eq(&e, t))
                    })
                    // Only what the caller may run (the gateway's policy).
                    .filter(|t| self.exec().may_use(&Target::Tool(t.tool())))
                    .filter_map(|t| {
                        let id = t.tool().id.to_string();
                        match self.published(&id) {
                            Some(name) => Some(direct_tool(t, name, id)),
                            None => {
                                self.log_unpublished(&id);
                                None
                            }
                        }
                    }),
            );
            next_cursor = page.next_cursor;
        } else if cursor.is_some() {
            return Err(McpError::invalid_params(
                "cursor: not a cursor returned by a previous page",
                None,
            ));
        }
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next_cursor;
        Ok(result)
    }
}

impl Gateway {
    /// Logs, once per tool, why it is not in `tools/list`: no MCP name
    /// (debug), or its name taken by a meta-tool or another tool
    /// (warning).
    fn log_unpublished(&self, id: &str) {
        {
            let mut logged = self.shared.unpublished.lock();
            // Bounded: an upstream that keeps renaming tools cannot grow it.
            if logged.len() >= MAX_LOGGED || !logged.insert(id.to_owned()) {
                return;
            }
        }
        match published_name(id, &self.shared.options.unprefixed) {
            None => tracing::debug!(%id, "tool id has no MCP name; not published directly"),
            Some(name) => tracing::warn!(
                %id,
                %name,
                "not published directly: another tool or a meta-tool has the name (run_tool reaches it by id)"
            ),
        }
    }
}

/// The meta-tools as MCP tools.
fn meta_tools(options: &GatewayOptions) -> Vec<McpTool> {
    meta::all(options)
        .into_iter()
        .map(|m| {
            let annotations = McpAnnotations::from_raw(
                Some(m.title.to_owned()),
                Some(m.read_only),
                Some(false),
                Some(m.read_only),
                Some(!m.read_only),
            );
            McpTool::new(m.name, m.description, Arc::new(object(m.input_schema)))
                .with_title(m.title)
                .with_raw_output_schema(Arc::new(object(m.output_schema)))
                .with_annotations(annotations)
        })
        .collect()
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// A catalog tool as a directly published MCP tool named `name`.
fn direct_tool(entry: &RegisteredTool, name: String, id: String) -> McpTool {
    let t = entry.tool();
    let description = if t.description.trim().is_empty() {
        t.summary().to_owned()
    } else {
        t.description.clone()
    };
    let mut tool = McpTool::new_with_raw(
        name,
        Some(description.into()),
        Arc::new(result::mcp_input_schema(&t.input_schema)),
    );
    if let Some(title) = t
        .title
        .clone()
        .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone()))
    {
        tool = tool.with_title(title);
    }
    if let Some(schema) = result::mcp_output_schema(t.output_schema.as_ref()) {
        tool = tool.with_raw_output_schema(Arc::new(schema));
    }
    if let Some(a) = &t.annotations {
        tool = tool.with_annotations(McpAnnotations::from_raw(
            a.title.clone(),
            a.read_only_hint,
            a.destructive_hint,
            a.idempotent_hint,
            a.open_world_hint,
        ));
    }
    let mut meta = MetaObject::new();
    meta.0.insert(META_ID_KEY.into(), json!(id));
    tool.with_meta(meta)
}
