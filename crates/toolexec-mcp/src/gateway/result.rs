//! Turning toolexec outcomes into MCP `tools/call` results, and tool output
//! schemas into MCP output schemas.
//!
//! MCP requires `structuredContent` (and `outputSchema`) to be JSON objects.
//! A tool whose declared output schema has `"type": "object"` is passed
//! through unchanged; any other declared schema is published wrapped as
//! `{"type": "object", "properties": {"result": <schema>}, "required":
//! ["result"]}` and its values are sent as `{"result": value}`. A tool with no
//! output schema publishes none, and its value is sent as-is when it is an
//! object, else wrapped the same way.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};
use toolexec::{ChainResult, Content, ErrorBody, ToolOutput};

/// The key non-object results are wrapped under.
pub const RESULT_KEY: &str = "result";

/// How a tool's values map to `structuredContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Declared object schema: values go through unchanged.
    Object,
    /// Declared non-object schema: values are always wrapped.
    Wrapped,
    /// No schema: objects go through, anything else is wrapped.
    Undeclared,
}

impl Shape {
    /// The shape of a tool with this declared output schema.
    pub(super) fn of(output_schema: Option<&Value>) -> Shape {
        match output_schema {
            None | Some(Value::Bool(true)) => Shape::Undeclared,
            Some(s) if s.get("type").and_then(Value::as_str) == Some("object") => Shape::Object,
            Some(_) => Shape::Wrapped,
        }
    }

    /// The structured content for `value`.
    pub(super) fn structured(self, value: Value) -> Value {
        match (self, value) {
            (Shape::Object, v) => v,
            (Shape::Undeclared, Value::Object(m)) => Value::Object(m),
            (_, v) => json!({ RESULT_KEY: v }),
        }
    }
}

/// The MCP output schema for a tool's declared schema (`None` when it
/// declares none).
pub(super) fn mcp_output_schema(output_schema: Option<&Value>) -> Option<Map<String, Value>> {
    let schema = output_schema?;
    match Shape::of(Some(schema)) {
        Shape::Undeclared => None,
        Shape::Object => schema.as_object().cloned(),
        Shape::Wrapped => {
            let mut inner = schema.clone();
            let mut outer = Map::new();
            outer.insert("type".into(), json!("object"));
            if let Value::Object(m) = &mut inner {
                // `$ref`s resolve against the document root: keep the
                // definitions at the root of the wrapper.
                for key in ["$schema", "$defs", "definitions", "$id"] {
                    if let Some(v) = m.remove(key) {
                        outer.insert(key.into(), v);
                    }
                }
            }
            outer.insert("properties".into(), json!({ RESULT_KEY: inner }));
            outer.insert("required".into(), json!([RESULT_KEY]));
            Some(outer)
        }
    }
}

/// An input schema as MCP wants it: an object schema with `"type": "object"`.
pub(super) fn mcp_input_schema(input_schema: &Value) -> Map<String, Value> {
    let mut m = input_schema.as_object().cloned().unwrap_or_default();
    m.entry("type").or_insert_with(|| json!("object"));
    m
}

/// A successful result: `structured` (an object) plus its JSON text, or the
/// tool's own content blocks when it returned some.
pub(super) fn success(structured: Value, content: &[Content]) -> CallToolResult {
    let mut blocks: Vec<ContentBlock> = content.iter().map(content_block).collect();
    if blocks.is_empty() {
        blocks.push(ContentBlock::text(structured.to_string()));
    }
    let mut r = CallToolResult::success(blocks);
    r.structured_content = Some(structured);
    r
}

/// A successful tool run.
pub(super) fn tool_output(shape: Shape, out: ToolOutput) -> CallToolResult {
    let ToolOutput { value, content } = out;
    success(shape.structured(value), &content)
}

/// A failed tool or pipeline: `isError: true`, text starting with the code,
/// structured `{"error": {code, message, details}}`.
pub(super) fn error(body: &ErrorBody) -> CallToolResult {
    error_with(body, None)
}

fn error_with(body: &ErrorBody, chain: Option<Value>) -> CallToolResult {
    let mut text = body.message.clone();
    if let Some(d) = &body.details {
        text.push_str("\ndetails: ");
        text.push_str(&d.to_string());
    }
    let mut structured = json!({ "error": body });
    if let (Some(c), Value::Object(m)) = (chain, &mut structured) {
        m.insert("chain".into(), c);
    }
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

/// A finished chain: success when every step succeeded, else an error
/// result naming the first failure and carrying the whole chain.
pub(super) fn chain(result: &ChainResult) -> CallToolResult {
    let value = serde_json::to_value(result).unwrap_or(Value::Null);
    if result.ok {
        return success(value, &[]);
    }
    let body = match result.first_error() {
        Some(e) => {
            let step = result
                .steps
                .iter()
                .position(|s| s.error.is_some())
                .unwrap_or(0);
            ErrorBody {
                code: e.code,
                message: format!(
                    "{}: step {step} ({}) failed: {}",
                    e.code, result.steps[step].tool_id, e.message
                ),
                details: e.details.clone(),
            }
        }
        None => ErrorBody {
            code: toolexec::ErrorCode::ExecutionFailed,
            message: "execution_failed: the chain did not complete".into(),
            details: None,
        },
    };
    let mut r = error_with(&body, Some(value.clone()));
    r.content.push(ContentBlock::text(value.to_string()));
    r
}

/// A toolexec content block as an MCP one (same JSON shape); anything MCP
/// cannot parse becomes its JSON text.
pub(super) fn content_block(c: &Content) -> ContentBlock {
    let v = serde_json::to_value(c).unwrap_or(Value::Null);
    serde_json::from_value(v.clone()).unwrap_or_else(|_| ContentBlock::text(v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_wrap_non_objects() {
        assert_eq!(Shape::of(None).structured(json!(5)), json!({"result": 5}));
        assert_eq!(Shape::of(None).structured(json!({"a": 1})), json!({"a": 1}));
        let num = json!({"type": "number"});
        assert_eq!(Shape::of(Some(&num)), Shape::Wrapped);
        assert_eq!(
            Shape::Wrapped.structured(json!({"a": 1})),
            json!({"result": {"a": 1}})
        );
        let obj = json!({"type": "object"});
        assert_eq!(Shape::of(Some(&obj)), Shape::Object);
    }

    #[test]
    fn wrapped_schema_keeps_definitions_at_the_root() {
        let s = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": "#/$defs/X",
            "$defs": {"X": {"type": "string"}}
        });
        let out = Value::Object(mcp_output_schema(Some(&s)).unwrap());
        assert_eq!(out["type"], "object");
        assert_eq!(out["properties"]["result"]["$ref"], "#/$defs/X");
        assert_eq!(out["$defs"]["X"]["type"], "string");
        assert_eq!(out["required"], json!(["result"]));
    }

    #[test]
    fn input_schema_gets_object_type() {
        let m = mcp_input_schema(&json!({"properties": {}}));
        assert_eq!(m["type"], "object");
    }
}
