//! Conversions between MCP (rmcp) and toolexec types: tool definitions, call
//! results and content blocks.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};
use toolexec::{Content, Error, Tool, ToolAnnotations, ToolOutput};

/// Builds the toolexec definition of one MCP tool, given as raw JSON (so a
/// malformed tool fails alone, not the whole listing).
///
/// `id` is the already-mapped `server:name`.
pub(crate) fn tool_from_mcp(id: &str, raw: &Map<String, Value>) -> Result<Tool, Error> {
    let invalid = |field: &str, message: &str| Error::InvalidDefinition {
        tool: id.to_owned(),
        field: field.to_owned(),
        message: message.to_owned(),
    };
    let text = |key: &str| raw.get(key).and_then(Value::as_str).map(str::to_owned);
    let annotations = match raw.get("annotations") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<ToolAnnotations>(v.clone())
                .map_err(|_| invalid("annotations", "not an MCP ToolAnnotations object"))?,
        ),
    };
    let mut builder = Tool::builder(id).description(text("description").unwrap_or_default());
    if let Some(title) = text("title").or_else(|| annotations.as_ref()?.title.clone()) {
        builder = builder.title(title);
    }
    match raw.get("inputSchema") {
        Some(schema @ Value::Object(_)) => builder = builder.input_schema(schema.clone()),
        _ => return Err(invalid("input_schema", "missing or not a JSON object")),
    }
    match raw.get("outputSchema") {
        None | Some(Value::Null) => {}
        Some(schema) => builder = builder.output_schema(schema.clone()),
    }
    if let Some(a) = annotations {
        builder = builder.annotations(a);
    }
    builder.build()
}

/// Maps rmcp content blocks to toolexec content blocks (the shapes are the
/// same MCP JSON; extra fields such as annotations are dropped, except on
/// resource links, which keep everything).
pub(crate) fn content_from_mcp(blocks: &[ContentBlock]) -> Vec<Content> {
    blocks
        .iter()
        .filter_map(|block| {
            let json = serde_json::to_value(block).ok()?;
            match serde_json::from_value::<Content>(json) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "dropping an MCP content block toolexec cannot represent");
                    None
                }
            }
        })
        .collect()
}

/// The text blocks of a result, joined with newlines.
fn joined_text(content: &[Content]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            Content::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Maps a `tools/call` result: `isError` becomes `execution_failed` (message:
/// the text content, data: the structured content); otherwise the structured
/// content is the value and every block is kept as content.
pub(crate) fn output_from_mcp(tool: &str, result: CallToolResult) -> Result<ToolOutput, Error> {
    let content = content_from_mcp(&result.content);
    if result.is_error == Some(true) {
        let mut message = joined_text(&content);
        if message.is_empty() {
            message = "the tool reported an error without a message".to_owned();
        }
        return Err(Error::ExecutionFailed {
            tool: tool.to_owned(),
            message,
            data: result.structured_content.filter(|v| !v.is_null()),
            panicked: false,
        });
    }
    let mut out = ToolOutput {
        value: result.structured_content.unwrap_or(Value::Null),
        content,
    };
    out.normalize();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn keeps_every_mcp_field() {
        let tool = tool_from_mcp(
            "srv:get-sum",
            &obj(json!({
                "name": "get-sum",
                "title": "Sum",
                "description": "Adds",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
                "outputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": true, "openWorldHint": false},
            })),
        )
        .unwrap();
        assert_eq!(tool.id.to_string(), "srv:get-sum");
        assert_eq!(tool.title.as_deref(), Some("Sum"));
        assert_eq!(tool.description, "Adds");
        assert_eq!(tool.input_schema["properties"]["a"]["type"], "number");
        assert_eq!(tool.output_schema, Some(json!({"type": "object"})));
        let a = tool.annotations.unwrap();
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(a.open_world_hint, Some(false));
    }

    #[test]
    fn rejects_tools_without_object_schemas() {
        let err = tool_from_mcp("s:t", &obj(json!({"name": "t"}))).unwrap_err();
        assert_eq!(err.code().as_str(), "invalid_definition");
        let err = tool_from_mcp(
            "s:t",
            &obj(json!({"name": "t", "inputSchema": {"type": "string"}})),
        )
        .unwrap_err();
        assert_eq!(err.code().as_str(), "invalid_definition");
    }

    #[test]
    fn is_error_becomes_execution_failed() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "bad"}, {"type": "text", "text": "input"}],
            "structuredContent": {"why": 1},
            "isError": true
        }))
        .unwrap();
        match output_from_mcp("s:t", result).unwrap_err() {
            Error::ExecutionFailed {
                tool,
                message,
                data,
                panicked,
            } => {
                assert_eq!(tool, "s:t");
                assert_eq!(message, "bad\ninput");
                assert_eq!(data, Some(json!({"why": 1})));
                assert!(!panicked);
            }
            e => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn structured_content_is_the_value_and_blocks_are_kept() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "{\"t\": 1}"},
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
                {"type": "audio", "data": "AA==", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "x:/1", "text": "hi"}},
                {"type": "resource_link", "uri": "x:/2", "name": "two", "mimeType": "text/plain"}
            ],
            "structuredContent": {"t": 2}
        }))
        .unwrap();
        let out = output_from_mcp("s:t", result).unwrap();
        assert_eq!(out.value, json!({"t": 2}));
        assert_eq!(out.content.len(), 5);
        assert!(
            matches!(&out.content[1], Content::Image { mime_type, .. } if mime_type == "image/png")
        );
        assert!(matches!(&out.content[2], Content::Audio { .. }));
        assert!(
            matches!(&out.content[3], Content::Resource { resource } if resource["uri"] == "x:/1")
        );
        assert!(
            matches!(&out.content[4], Content::ResourceLink { uri, name, extra } if uri == "x:/2" && name == "two" && extra["mimeType"] == "text/plain")
        );
        // Without structured content, JSON text becomes the value.
        let result: CallToolResult =
            serde_json::from_value(json!({"content": [{"type": "text", "text": "{\"t\": 1}"}]}))
                .unwrap();
        assert_eq!(
            output_from_mcp("s:t", result).unwrap().value,
            json!({"t": 1})
        );
    }
}
