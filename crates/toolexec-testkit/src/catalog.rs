//! A small fixture catalog with the built-in catalog's shapes.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolexec::{Catalog, LocalTool, ToolAnnotations, ToolError};

/// Two operands.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Binary {
    /// The left operand.
    a: f64,
    /// The right operand.
    b: f64,
}

/// The result of an arithmetic tool.
#[derive(Serialize, JsonSchema)]
struct NumberResult {
    /// The result.
    result: f64,
}

/// A target case.
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Case {
    Upper,
    Lower,
    Snake,
    Kebab,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CaseArgs {
    /// The text to convert.
    text: String,
    /// The target case: "upper", "lower", "snake" or "kebab".
    to: Case,
}

/// Converted text.
#[derive(Serialize, JsonSchema)]
struct TextResult {
    /// The converted text.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WordCountArgs {
    /// The text to count.
    text: String,
}

/// Counts.
#[derive(Serialize, JsonSchema)]
struct WordCount {
    /// Words: runs of non-whitespace characters.
    words: usize,
    /// Characters (Unicode scalar values, not bytes).
    characters: usize,
    /// Lines; a final line break does not start a new line.
    lines: usize,
}

fn finite(result: f64, what: &str) -> Result<NumberResult, ToolError> {
    if result.is_finite() {
        Ok(NumberResult { result })
    } else {
        Err(ToolError::new(format!("{what} is not finite")))
    }
}

fn convert(text: &str, to: Case) -> String {
    let words = || {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
    };
    match to {
        Case::Upper => text.to_uppercase(),
        Case::Lower => text.to_lowercase(),
        Case::Snake => words().collect::<Vec<_>>().join("_"),
        Case::Kebab => words().collect::<Vec<_>>().join("-"),
    }
}

fn binary(id: &str, description: &str, op: fn(f64, f64) -> f64) -> LocalTool {
    LocalTool::new(id, move |args: Binary| async move {
        finite(op(args.a, args.b), "the result")
    })
    .description(description)
    .tags(["math", "arithmetic", "calculator"])
    .annotations(ToolAnnotations::pure())
}

/// A new catalog of four fixture tools with the ids, argument and result
/// shapes of their built-in namesakes (strict arguments, unknown fields
/// refused):
///
/// | tool | arguments | result |
/// |---|---|---|
/// | `math:add` | `{a, b}` numbers | `{"result": a + b}` |
/// | `math:multiply` | `{a, b}` numbers | `{"result": a * b}` |
/// | `text:case` | `{text, to}`, `to` one of `upper`, `lower`, `snake`, `kebab` | `{"text": ...}` |
/// | `text:word_count` | `{text}` | `{"words", "characters", "lines"}` |
///
/// # Panics
///
/// Never in practice: the definitions are checked by this crate's tests.
pub fn catalog() -> Arc<Catalog> {
    let tools = [
        binary(
            "math:add",
            "Adds two numbers and returns a + b. Arguments: a and b, any JSON numbers.",
            |a, b| a + b,
        ),
        binary(
            "math:multiply",
            "Multiplies two numbers and returns a * b. Arguments: a and b, any JSON numbers.",
            |a, b| a * b,
        ),
        LocalTool::new("text:case", |a: CaseArgs| async move {
            Ok::<_, ToolError>(TextResult {
                text: convert(&a.text, a.to),
            })
        })
        .description("Converts text to upper, lower, snake or kebab case.")
        .tags(["text", "case", "string", "format"])
        .annotations(ToolAnnotations::pure()),
        LocalTool::new("text:word_count", |a: WordCountArgs| async move {
            Ok::<_, ToolError>(WordCount {
                words: a.text.split_whitespace().count(),
                characters: a.text.chars().count(),
                lines: a.text.lines().count(),
            })
        })
        .description("Counts the words, characters and lines of a text.")
        .tags(["text", "count", "words", "length"])
        .annotations(ToolAnnotations::pure()),
    ];
    let catalog = Catalog::new();
    let built = tools
        .into_iter()
        .map(LocalTool::build)
        .collect::<Result<Vec<_>, _>>()
        .expect("the fixture tools are valid");
    catalog
        .register_many(built, false)
        .expect("the fixture tools register");
    Arc::new(catalog)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    #[tokio::test]
    async fn fixtures_answer_like_the_builtins() {
        let catalog = super::catalog();
        assert_eq!(catalog.len(), 4);
        let exec = toolexec::Exec::new(catalog);
        let run = async |id: &str, args: Value| exec.run_tool(id, args).await.unwrap().value;
        let add = run("math:add", json!({"a": 2, "b": 3})).await;
        assert_eq!(add, json!({"result": 5.0}));
        let product = run("math:multiply", json!({"a": 6, "b": 7})).await;
        assert_eq!(product, json!({"result": 42.0}));
        let snake = run("text:case", json!({"text": "a b-C", "to": "snake"})).await;
        assert_eq!(snake, json!({"text": "a_b_c"}));
        let counts = run("text:word_count", json!({"text": "one two\nthree"})).await;
        assert_eq!(counts, json!({"words": 3, "characters": 13, "lines": 2}));
        let err = exec
            .run_tool("math:add", json!({"a": 1, "b": 2, "c": 3}))
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "validation_input");
    }
}
