//! Normalized tool results: a structured JSON value plus MCP content blocks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An MCP content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Base64 image data.
    Image {
        /// Base64 data.
        data: String,
        /// MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Base64 audio data.
    Audio {
        /// Base64 data.
        data: String,
        /// MIME type.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// An embedded resource, kept as MCP sent it.
    Resource {
        /// The resource object.
        resource: Value,
    },
    /// A link to a resource, kept as MCP sent it (minus `type`).
    ResourceLink {
        /// URI of the resource.
        uri: String,
        /// Name of the resource.
        #[serde(default)]
        name: String,
        /// Everything else MCP sent.
        #[serde(flatten)]
        extra: serde_json::Map<String, Value>,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }
}

/// The normalized result of a successful call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The structured result (`null` when the tool returned only unstructured content).
    pub value: Value,
    /// Content blocks, as an MCP tool returns them. Local tools usually return none;
    /// [`ToolOutput::content_or_text`] renders the value as text for MCP clients.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Content>,
}

impl ToolOutput {
    /// A structured result with no content blocks.
    pub fn structured(value: Value) -> Self {
        ToolOutput {
            value,
            content: Vec::new(),
        }
    }

    /// A result made of content blocks only; [`normalize`](Self::normalize)
    /// derives the value.
    pub fn from_content(content: Vec<Content>) -> Self {
        ToolOutput {
            value: Value::Null,
            content,
        }
    }

    /// Fills in `value` when a tool returned only content: text that parses as
    /// JSON becomes that JSON; other text becomes a string. Non-text blocks are
    /// kept as content only.
    pub fn normalize(&mut self) {
        if !self.value.is_null() || self.content.is_empty() {
            return;
        }
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|c| match c {
                Content::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if texts.is_empty() {
            return;
        }
        if texts.len() == 1 {
            let t = texts[0];
            self.value = parse_json_text(t).unwrap_or_else(|| Value::String(t.to_owned()));
        } else {
            self.value = Value::String(texts.join("\n"));
        }
    }

    /// Content blocks for an MCP client: the tool's own blocks, or the value
    /// rendered as one JSON text block.
    pub fn content_or_text(&self) -> Vec<Content> {
        if !self.content.is_empty() {
            return self.content.clone();
        }
        let text = match &self.value {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        vec![Content::text(text)]
    }
}

fn parse_json_text(t: &str) -> Option<Value> {
    let trimmed = t.trim_start();
    // Only structured JSON counts; a bare word like `true` stays text.
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        serde_json::from_str(t).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_text_becomes_the_value() {
        let mut o = ToolOutput::from_content(vec![Content::text("{\"a\":1}")]);
        o.normalize();
        assert_eq!(o.value, json!({"a": 1}));
        let mut o = ToolOutput::from_content(vec![Content::text("hello")]);
        o.normalize();
        assert_eq!(o.value, json!("hello"));
    }

    #[test]
    fn content_serializes_like_mcp() {
        let c = Content::Image {
            data: "AA==".into(),
            mime_type: "image/png".into(),
        };
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"type": "image", "data": "AA==", "mimeType": "image/png"})
        );
        let link: Content = serde_json::from_value(
            json!({"type": "resource_link", "uri": "file:///x", "name": "x", "size": 3}),
        )
        .unwrap();
        assert!(matches!(link, Content::ResourceLink { ref extra, .. } if extra["size"] == 3));
    }

    #[test]
    fn value_renders_as_text_when_no_content() {
        let o = ToolOutput::structured(json!({"x": 1}));
        assert_eq!(o.content_or_text(), vec![Content::text("{\"x\":1}")]);
    }
}
