//! The tool model: MCP tool fields plus namespace, version, tags and docs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::docs::ToolDocs;
use crate::error::Error;
use crate::id::ToolId;

/// Longest tag after normalization.
pub const MAX_TAG_LEN: usize = 64;
/// Most tags a tool may carry.
pub const MAX_TAGS: usize = 32;

/// MCP tool annotations: hints about behaviour, never guarantees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Human title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling twice with the same arguments has no additional effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// Annotations of a pure function: read-only, idempotent, closed world.
    pub fn pure() -> Self {
        ToolAnnotations {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            idempotent_hint: Some(true),
            open_world_hint: Some(false),
            ..Default::default()
        }
    }
}

/// A tool definition. Serializes with MCP's field names (`inputSchema`, ...)
/// plus `id`, `namespace`, `version` and `tags`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// `namespace:name[:version]`.
    pub id: ToolId,
    /// Human title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, written for a model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of the structured result, if declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Normalized tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Longer documentation and examples.
    #[serde(skip)]
    pub docs: ToolDocs,
}

impl Tool {
    /// Starts a definition for `id` (`namespace:name[:version]`).
    ///
    /// ```
    /// use serde_json::json;
    /// let tool = toolexec::Tool::builder("text:upper")
    ///     .description("Uppercases text")
    ///     .input_schema(json!({"type": "object", "properties": {"text": {"type": "string"}}}))
    ///     .tags(["Text", " case "])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(tool.tags, ["case", "text"]);
    /// ```
    pub fn builder(id: &str) -> ToolBuilder {
        ToolBuilder {
            id: id.to_owned(),
            title: None,
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            tags: Vec::new(),
            docs: ToolDocs::default(),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.id.namespace()
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.id.name()
    }

    /// A one-line summary: the docs' summary, else the description's first sentence.
    pub fn summary(&self) -> &str {
        if let Some(s) = self.docs.summary.as_deref() {
            return s;
        }
        first_sentence(&self.description)
    }
}

fn first_sentence(s: &str) -> &str {
    let s = s.trim();
    let line = s.lines().next().unwrap_or("");
    match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    }
}

/// Builds and validates a [`Tool`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ToolBuilder {
    id: String,
    title: Option<String>,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    annotations: Option<ToolAnnotations>,
    tags: Vec<String>,
    docs: ToolDocs,
}

impl ToolBuilder {
    /// Human title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// What the tool does.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Input JSON Schema (default: any object).
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// Output JSON Schema.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// MCP annotations.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Tags; normalized at build.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// Documentation.
    pub fn docs(mut self, docs: ToolDocs) -> Self {
        self.docs = docs;
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Tool, Error> {
        let id = ToolId::parse(&self.id)?;
        let invalid = |field: &str, message: String| Error::InvalidDefinition {
            tool: id.to_string(),
            field: field.to_owned(),
            message,
        };
        if !self.input_schema.is_object() {
            return Err(invalid(
                "input_schema",
                format!(
                    "must be a JSON object schema, not {}",
                    crate::schema::json_kind(&self.input_schema)
                ),
            ));
        }
        if let Some(t) = self.input_schema.get("type")
            && t != "object"
        {
            return Err(invalid(
                "input_schema.type",
                format!(
                    "tool arguments are a JSON object, so the type must be \"object\", not {t}"
                ),
            ));
        }
        if let Some(out) = &self.output_schema
            && !out.is_object()
            && !out.is_boolean()
        {
            return Err(invalid(
                "output_schema",
                "must be a JSON object or boolean schema".into(),
            ));
        }
        let tags =
            normalize_tags(&self.tags).map_err(|(i, m)| invalid(&format!("tags[{i}]"), m))?;
        Ok(Tool {
            id,
            title: self.title,
            description: self.description,
            input_schema: self.input_schema,
            output_schema: self.output_schema,
            annotations: self.annotations,
            tags,
            docs: self.docs,
        })
    }
}

/// Normalizes tags: trimmed, lowercase, inner whitespace and `_` become `-`,
/// empty ones dropped, sorted and deduplicated.
///
/// ```
/// let tags = toolexec::normalize_tags(&["  Big Data ".into(), "big_data".into(), "".into()]).unwrap();
/// assert_eq!(tags, ["big-data"]);
/// ```
pub fn normalize_tags(tags: &[String]) -> Result<Vec<String>, (usize, String)> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for (i, raw) in tags.iter().enumerate() {
        let mut tag = String::with_capacity(raw.len());
        let mut dash = false;
        for c in raw.trim().chars() {
            if c.is_whitespace() || c == '_' || c == '-' {
                dash = true;
                continue;
            }
            if dash && !tag.is_empty() {
                tag.push('-');
            }
            dash = false;
            if c.is_control() {
                return Err((i, "contains a control character".into()));
            }
            tag.extend(c.to_lowercase());
        }
        if tag.is_empty() {
            continue;
        }
        if tag.len() > MAX_TAG_LEN {
            return Err((i, format!("longer than {MAX_TAG_LEN} bytes")));
        }
        out.push(tag);
    }
    out.sort();
    out.dedup();
    if out.len() > MAX_TAGS {
        return Err((MAX_TAGS, format!("more than {MAX_TAGS} tags")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_with_mcp_field_names() {
        let tool = Tool::builder("a:b:1")
            .description("d")
            .output_schema(json!({"type": "object"}))
            .build()
            .unwrap();
        let v = serde_json::to_value(&tool).unwrap();
        assert_eq!(v["id"], "a:b:1");
        assert!(v.get("inputSchema").is_some());
        assert!(v.get("outputSchema").is_some());
    }

    #[test]
    fn rejects_non_object_input_schema() {
        let err = Tool::builder("a:b")
            .input_schema(json!({"type": "string"}))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("input_schema.type"), "{err}");
        let err = Tool::builder("a:b")
            .input_schema(json!([]))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("input_schema"), "{err}");
    }

    #[test]
    fn tags_normalize_and_reject_bad_ones() {
        let tags = normalize_tags(&["A  B".into(), "a-b".into(), "Zed".into()]).unwrap();
        assert_eq!(tags, ["a-b", "zed"]);
        assert!(normalize_tags(&["x\u{7}".into()]).is_err());
        assert!(normalize_tags(&["x".repeat(65)]).is_err());
    }

    #[test]
    fn summary_falls_back_to_first_sentence() {
        let tool = Tool::builder("a:b")
            .description("Adds numbers. Then more.")
            .build()
            .unwrap();
        assert_eq!(tool.summary(), "Adds numbers.");
    }
}
