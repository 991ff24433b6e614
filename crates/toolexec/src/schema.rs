//! JSON Schemas compiled once at registration and validated against per call.

use std::fmt;
use std::sync::Arc;

use jsonschema::{Retrieve, Uri, ValidationError};
use serde::Serialize;
use serde_json::Value;

/// One schema violation: where in the instance, which keyword, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// JSON Pointer into the validated value (`""` is the root).
    pub instance_path: String,
    /// JSON Pointer into the schema, ending in the failing keyword.
    pub schema_path: String,
    /// The failing keyword (`type`, `required`, `minimum`, ...).
    pub keyword: String,
    /// Human message.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.instance_path.is_empty() {
            "/"
        } else {
            &self.instance_path
        };
        write!(f, "at {at}: {} ({})", self.message, self.keyword)
    }
}

/// A schema compiled for fast validation. Cheap to clone. It keeps only the
/// compiled form: the source lives once, in the [`crate::Tool`].
#[derive(Clone)]
pub struct CompiledSchema {
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("draft", &self.validator.draft())
            .finish_non_exhaustive()
    }
}

/// Refuses every retrieval: schemas must be self-contained. Remote `$ref`s
/// would make registration depend on the network and let a schema author
/// make the host fetch arbitrary URLs.
struct RefuseRemote;

impl Retrieve for RefuseRemote {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("remote reference {uri} refused: schemas must be self-contained").into())
    }
}

impl CompiledSchema {
    /// Compiles `schema` with the rules of the draft it declares in
    /// `$schema` (draft 2020-12 when it declares none). Invalid schemas and
    /// remote `$ref`s are errors.
    ///
    /// ```
    /// use serde_json::json;
    /// let s = toolexec::CompiledSchema::compile(&json!({
    ///     "type": "object",
    ///     "properties": {"a": {"$ref": "#/$defs/n"}},
    ///     "$defs": {"n": {"type": "number"}}
    /// })).unwrap();
    /// assert!(s.is_valid(&json!({"a": 1})));
    /// let violations = s.violations(&json!({"a": "x"}), 10).0;
    /// assert_eq!(violations[0].instance_path, "/a");
    /// assert_eq!(violations[0].keyword, "type");
    /// ```
    pub fn compile(schema: &Value) -> Result<Self, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err(format!(
                "a schema must be a JSON object or boolean, not {}",
                json_kind(schema)
            ));
        }
        let validator = jsonschema::options()
            .with_retriever(RefuseRemote)
            .build(schema)
            .map_err(|e| schema_error_message(&e))?;
        Ok(CompiledSchema {
            validator: Arc::new(validator),
        })
    }

    /// Fast yes/no check.
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// Every violation, up to `cap`; the flag is true when more were found.
    pub fn violations(&self, instance: &Value, cap: usize) -> (Vec<Violation>, bool) {
        let mut out = Vec::new();
        let mut truncated = false;
        for err in self.validator.iter_errors(instance) {
            if out.len() >= cap {
                truncated = true;
                break;
            }
            out.push(violation_from(&err));
        }
        (out, truncated)
    }
}

fn violation_from(err: &ValidationError<'_>) -> Violation {
    Violation {
        instance_path: err.instance_path().to_string(),
        schema_path: err.schema_path().to_string(),
        keyword: err.kind().keyword().to_owned(),
        message: crate::error::truncate_for_message(&err.to_string(), 300),
    }
}

fn schema_error_message(err: &ValidationError<'_>) -> String {
    let path = err.instance_path().to_string();
    let msg = crate::error::truncate_for_message(&err.to_string(), 500);
    if path.is_empty() {
        msg
    } else {
        format!("at {path}: {msg}")
    }
}

/// `object`, `array`, ... for messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_every_violation_with_path_and_keyword() {
        let s = CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "string", "minLength": 3}},
            "required": ["a", "b", "c"]
        }))
        .unwrap();
        let (v, truncated) = s.violations(&json!({"a": "x", "b": "y"}), 10);
        assert!(!truncated);
        let mut keys: Vec<_> = v
            .iter()
            .map(|v| (v.instance_path.as_str(), v.keyword.as_str()))
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [("", "required"), ("/a", "type"), ("/b", "minLength")]
        );
        let (v, truncated) = s.violations(&json!({"a": "x", "b": "y"}), 2);
        assert_eq!(v.len(), 2);
        assert!(truncated);
    }

    #[test]
    fn each_draft_uses_its_own_rules() {
        // `exclusiveMinimum` is a number in draft-07 and 2020-12 but a boolean
        // in draft-04; the keyword `dependentRequired` exists only from 2019-09.
        let d7 = CompiledSchema::compile(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "dependentRequired": {"a": ["b"]}
        }))
        .unwrap();
        // Draft-07 ignores the 2019-09 keyword.
        assert!(d7.is_valid(&json!({"a": 1})));
        let d2020 = CompiledSchema::compile(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "dependentRequired": {"a": ["b"]}
        }))
        .unwrap();
        assert!(!d2020.is_valid(&json!({"a": 1})));
        // `items` as an array means tuple validation in draft-07 only.
        let d7_items = CompiledSchema::compile(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "items": [{"type": "string"}]
        }))
        .unwrap();
        assert!(!d7_items.is_valid(&json!([1])));
        let d2020_items = CompiledSchema::compile(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "items": [{"type": "string"}]
        }));
        assert!(
            d2020_items.is_err(),
            "array-form items is invalid in 2020-12"
        );
    }

    #[test]
    fn local_refs_work_and_remote_refs_are_refused() {
        let ok = CompiledSchema::compile(&json!({
            "definitions": {"pos": {"type": "integer", "minimum": 1}},
            "properties": {"n": {"$ref": "#/definitions/pos"}}
        }))
        .unwrap();
        assert!(!ok.is_valid(&json!({"n": 0})));
        let err = CompiledSchema::compile(&json!({
            "properties": {"n": {"$ref": "https://example.com/schema.json"}}
        }))
        .unwrap_err();
        assert!(err.contains("refused"), "{err}");
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        assert!(CompiledSchema::compile(&json!({"type": "nope"})).is_err());
        assert!(CompiledSchema::compile(&json!({"minLength": -1})).is_err());
        assert!(CompiledSchema::compile(&json!(42)).is_err());
        assert!(CompiledSchema::compile(&json!(true)).is_ok());
    }
}
