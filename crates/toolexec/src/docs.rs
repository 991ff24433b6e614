//! Per-tool documentation rendered at three detail levels.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{Tool, ToolAnnotations};

/// Documentation attached to a tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolDocs {
    /// One line; defaults to the description's first sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Usage notes, caveats, limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Worked examples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<ToolExample>,
}

impl ToolDocs {
    /// Docs with a summary.
    pub fn new(summary: impl Into<String>) -> Self {
        ToolDocs {
            summary: Some(summary.into()),
            ..Default::default()
        }
    }

    /// Adds a note.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Adds an example.
    #[must_use]
    pub fn example(mut self, example: ToolExample) -> Self {
        self.examples.push(example);
        self
    }
}

/// One example call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolExample {
    /// What the example shows.
    pub title: String,
    /// The arguments.
    pub args: Value,
    /// The expected structured result, if shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl ToolExample {
    /// An example with arguments.
    pub fn new(title: impl Into<String>, args: Value) -> Self {
        ToolExample {
            title: title.into(),
            args,
            result: None,
        }
    }

    /// Adds the expected result.
    #[must_use]
    pub fn result(mut self, result: Value) -> Self {
        self.result = Some(result);
        self
    }
}

/// How much [`describe`] includes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DetailLevel {
    /// Id, title, summary, tags.
    Summary,
    /// Plus full description and input/output schemas.
    #[default]
    Schema,
    /// Plus annotations, notes and examples.
    Full,
}

impl std::str::FromStr for DetailLevel {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, crate::Error> {
        match s {
            "summary" => Ok(DetailLevel::Summary),
            "schema" => Ok(DetailLevel::Schema),
            "full" => Ok(DetailLevel::Full),
            _ => Err(crate::Error::invalid_request(
                "detail",
                format!("expected summary, schema or full, got {s:?}"),
            )),
        }
    }
}

/// A tool's documentation at one detail level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDescription {
    /// Full id.
    pub id: String,
    /// Human title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// One line.
    pub summary: String,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Full description (schema and full levels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Input schema (schema and full levels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// Output schema (schema and full levels, when declared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Annotations (full level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Notes (full level).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Examples (full level).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<ToolExample>,
}

/// Describes `tool` at `level`.
pub fn describe(tool: &Tool, level: DetailLevel) -> ToolDescription {
    let schema = level != DetailLevel::Summary;
    let full = level == DetailLevel::Full;
    ToolDescription {
        id: tool.id.to_string(),
        title: tool.title.clone(),
        summary: tool.summary().to_owned(),
        tags: tool.tags.clone(),
        description: schema.then(|| tool.description.clone()),
        input_schema: schema.then(|| tool.input_schema.clone()),
        output_schema: if schema {
            tool.output_schema.clone()
        } else {
            None
        },
        annotations: if full { tool.annotations.clone() } else { None },
        notes: if full {
            tool.docs.notes.clone()
        } else {
            Vec::new()
        },
        examples: if full {
            tool.docs.examples.clone()
        } else {
            Vec::new()
        },
    }
}

impl ToolDescription {
    /// Renders as Markdown for people.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# {}", self.id);
        if let Some(t) = &self.title {
            let _ = writeln!(s, "{t}");
        }
        let _ = writeln!(s, "\n{}", self.summary);
        if !self.tags.is_empty() {
            let _ = writeln!(s, "\nTags: {}", self.tags.join(", "));
        }
        if let Some(d) = &self.description
            && d.trim() != self.summary.trim()
        {
            let _ = writeln!(s, "\n{d}");
        }
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
        if let Some(i) = &self.input_schema {
            let _ = writeln!(s, "\n## Input schema\n```json\n{}\n```", pretty(i));
        }
        if let Some(o) = &self.output_schema {
            let _ = writeln!(s, "\n## Output schema\n```json\n{}\n```", pretty(o));
        }
        if let Some(a) = &self.annotations {
            let _ = writeln!(
                s,
                "\n## Annotations\n{}",
                serde_json::to_string(a).unwrap_or_default()
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\n## Notes");
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        if !self.examples.is_empty() {
            let _ = writeln!(s, "\n## Examples");
            for e in &self.examples {
                let _ = writeln!(s, "- {}: `{}`", e.title, e.args);
                if let Some(r) = &e.result {
                    let _ = writeln!(s, "  → `{r}`");
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool() -> Tool {
        Tool::builder("math:add")
            .title("Add")
            .description("Adds two numbers. Works on floats.")
            .output_schema(json!({"type": "number"}))
            .docs(
                ToolDocs::new("Adds a and b")
                    .note("Floats follow IEEE 754")
                    .example(ToolExample::new("small", json!({"a": 1, "b": 2})).result(json!(3))),
            )
            .build()
            .unwrap()
    }

    #[test]
    fn levels_include_progressively_more() {
        let t = tool();
        let s = describe(&t, DetailLevel::Summary);
        assert_eq!(s.summary, "Adds a and b");
        assert!(s.input_schema.is_none() && s.examples.is_empty());
        let sc = describe(&t, DetailLevel::Schema);
        assert!(sc.input_schema.is_some() && sc.output_schema.is_some());
        assert!(sc.examples.is_empty());
        let f = describe(&t, DetailLevel::Full);
        assert_eq!(f.examples.len(), 1);
        assert_eq!(f.notes, ["Floats follow IEEE 754"]);
        let md = f.to_markdown();
        assert!(md.contains("## Examples") && md.contains("\"a\":1"), "{md}");
    }

    #[test]
    fn detail_level_parses() {
        assert_eq!("full".parse::<DetailLevel>().unwrap(), DetailLevel::Full);
        assert!("everything".parse::<DetailLevel>().is_err());
    }
}
