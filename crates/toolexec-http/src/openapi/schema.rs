//! OpenAPI schemas as self-contained JSON Schema 2020-12: 3.0's dialect
//! converted (`nullable`, boolean `exclusiveMinimum`/`exclusiveMaximum`,
//! `example`, siblings of `$ref` ignored), annotations toolexec does not
//! use dropped (`xml`, `externalDocs`, `discriminator`, `x-*`), and every
//! `$ref` pointed at a `$defs` entry that the tool's schema carries.
//! A referenced schema is converted once per document and shared by every
//! operation; a recursive one stays a reference to itself.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use super::load::Version;
use super::refs::{Documents, Location};

/// Deepest nesting of one schema (references not counted).
const MAX_DEPTH: usize = 64;

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "additionalProperties",
    "items",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const MANY: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
const MAP: &[&str] = &["properties", "patternProperties", "dependentSchemas"];
/// Dropped: annotations for code generators and docs.
const DROPPED: &[&str] = &["xml", "externalDocs", "discriminator", "$schema", "$id"];

/// One converted referenced schema.
#[derive(Debug)]
struct Def {
    schema: Value,
    /// The `$defs` keys it refers to directly.
    refs: BTreeSet<String>,
}

/// Converts schemas of one document set, remembering referenced ones.
/// Referenced schemas are converted from a work list, not by recursion, so
/// a long chain of references cannot exhaust the stack.
#[derive(Debug)]
pub(crate) struct Converter {
    version: Version,
    defs: HashMap<String, Def>,
    keys: HashMap<Location, String>,
    used_keys: BTreeSet<String>,
    /// Referenced schemas given a key, not converted yet.
    pending: Vec<(Location, String)>,
    /// Referenced schemas that cannot be converted, and why.
    failed: HashMap<String, String>,
}

/// A converted schema and the `$defs` keys it refers to directly.
#[derive(Debug)]
pub(crate) struct Converted {
    pub(crate) schema: Value,
    pub(crate) refs: BTreeSet<String>,
}

impl Converter {
    pub(crate) fn new(version: Version) -> Self {
        Converter {
            version,
            defs: HashMap::new(),
            keys: HashMap::new(),
            used_keys: BTreeSet::new(),
            pending: Vec::new(),
            failed: HashMap::new(),
        }
    }

    /// Converts `schema`, met in document `doc`.
    pub(crate) fn convert(
        &mut self,
        docs: &mut Documents,
        doc: usize,
        schema: &Value,
    ) -> Result<Converted, String> {
        let mut refs = BTreeSet::new();
        let schema = self.node(docs, doc, schema, &mut refs, 0)?;
        self.drain(docs);
        Ok(Converted { schema, refs })
    }

    /// Converts the referenced schemas met so far (and those they refer
    /// to); a failure is remembered for every schema that reaches it.
    fn drain(&mut self, docs: &mut Documents) {
        while let Some((at, key)) = self.pending.pop() {
            let target = docs.get(&at).cloned().unwrap_or(Value::Null);
            let mut refs = BTreeSet::new();
            match self.node(docs, at.doc, &target, &mut refs, 0) {
                Ok(schema) => {
                    self.defs.insert(key, Def { schema, refs });
                }
                Err(e) => {
                    self.failed.insert(key, format!("#{}: {e}", at.pointer));
                }
            }
        }
    }

    /// The `$defs` a schema referring to `refs` needs: every definition
    /// reachable from them; an error when one of them could not be
    /// converted.
    pub(crate) fn defs_for<'a>(
        &self,
        refs: impl IntoIterator<Item = &'a String>,
    ) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        let mut stack: Vec<&String> = refs.into_iter().collect();
        let mut seen = BTreeSet::new();
        while let Some(key) = stack.pop() {
            if !seen.insert(key) {
                continue;
            }
            if let Some(why) = self.failed.get(key) {
                return Err(why.clone());
            }
            if let Some(def) = self.defs.get(key) {
                out.insert(key.clone(), def.schema.clone());
                stack.extend(def.refs.iter());
            }
        }
        Ok(out)
    }

    fn node(
        &mut self,
        docs: &mut Documents,
        doc: usize,
        schema: &Value,
        refs: &mut BTreeSet<String>,
        depth: usize,
    ) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("a schema nested deeper than {MAX_DEPTH} levels"));
        }
        let obj = match schema {
            Value::Object(obj) => obj,
            Value::Bool(_) => return Ok(schema.clone()),
            other => return Err(format!("a schema must be an object, not {other}")),
        };
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            let key = self.reference(docs, doc, reference)?;
            refs.insert(key.clone());
            let pointer = json!(format!("#/$defs/{}", escape_pointer(&key)));
            // 3.0 ignores a $ref's siblings; 3.1 applies them.
            if self.version == Version::V30 || obj.len() == 1 {
                return Ok(json!({"$ref": pointer}));
            }
            let mut rest = obj.clone();
            rest.remove("$ref");
            let mut converted = self.object(docs, doc, &rest, refs, depth)?;
            converted.insert("$ref".to_owned(), pointer);
            return Ok(Value::Object(converted));
        }
        self.object(docs, doc, obj, refs, depth).map(Value::Object)
    }

    fn object(
        &mut self,
        docs: &mut Documents,
        doc: usize,
        obj: &Map<String, Value>,
        refs: &mut BTreeSet<String>,
        depth: usize,
    ) -> Result<Map<String, Value>, String> {
        let mut out = Map::with_capacity(obj.len());
        for (key, value) in obj {
            if key.starts_with("x-") || DROPPED.contains(&key.as_str()) {
                continue;
            }
            let converted =
                if ONE.contains(&key.as_str()) && (value.is_object() || value.is_boolean()) {
                    self.node(docs, doc, value, refs, depth + 1)?
                } else if key == "items" && value.is_array() {
                    // Draft 4 tuple form: 2020-12 calls it prefixItems.
                    let items = self.list(docs, doc, value, refs, depth)?;
                    out.insert("prefixItems".to_owned(), items);
                    continue;
                } else if MANY.contains(&key.as_str()) && value.is_array() {
                    self.list(docs, doc, value, refs, depth)?
                } else if (MAP.contains(&key.as_str()) || key == "$defs") && value.is_object() {
                    let mut map = Map::new();
                    for (name, sub) in value.as_object().into_iter().flatten() {
                        map.insert(name.clone(), self.node(docs, doc, sub, refs, depth + 1)?);
                    }
                    Value::Object(map)
                } else {
                    value.clone()
                };
            out.insert(key.clone(), converted);
        }
        if self.version == Version::V30 {
            dialect_30(&mut out);
        } else if let Some(example) = out.remove("example") {
            out.entry("examples").or_insert_with(|| json!([example]));
        }
        Ok(out)
    }

    fn list(
        &mut self,
        docs: &mut Documents,
        doc: usize,
        value: &Value,
        refs: &mut BTreeSet<String>,
        depth: usize,
    ) -> Result<Value, String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .map(|sub| self.node(docs, doc, sub, refs, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    }

    /// The `$defs` key of the schema `reference` names; the first time,
    /// the schema is queued for conversion (a schema that refers to itself
    /// finds its key and stays a reference).
    fn reference(
        &mut self,
        docs: &mut Documents,
        doc: usize,
        reference: &str,
    ) -> Result<String, String> {
        let at = docs.target(doc, reference)?;
        if let Some(key) = self.keys.get(&at) {
            if let Some(why) = self.failed.get(key) {
                return Err(why.clone());
            }
            return Ok(key.clone());
        }
        let key = self.new_key(docs, &at);
        self.keys.insert(at.clone(), key.clone());
        self.pending.push((at, key.clone()));
        Ok(key)
    }

    /// `Pet` for `#/components/schemas/Pet` of the main document; a longer,
    /// unique name for anything else.
    fn new_key(&mut self, docs: &Documents, at: &Location) -> String {
        let stem = docs.stem(at.doc);
        let base = match at.pointer.strip_prefix("/components/schemas/") {
            Some(name) if !name.contains('/') => {
                let name = name.replace("~1", "/").replace("~0", "~");
                if stem.is_empty() {
                    name
                } else {
                    format!("{stem}.{name}")
                }
            }
            _ => {
                let flat = at.pointer.trim_start_matches('/').replace('/', ".");
                if stem.is_empty() {
                    flat
                } else {
                    format!("{stem}.{flat}")
                }
            }
        };
        let mut key = base.clone();
        let mut n = 2;
        while !self.used_keys.insert(key.clone()) {
            key = format!("{base}_{n}");
            n += 1;
        }
        key
    }
}

/// The 3.0 keywords in their 2020-12 form.
fn dialect_30(out: &mut Map<String, Value>) {
    for (bound, limit) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(exclusive)) = out.get(bound).cloned() {
            out.remove(bound);
            if exclusive && let Some(value) = out.remove(limit) {
                out.insert(bound.to_owned(), value);
            }
        }
    }
    if let Some(example) = out.remove("example") {
        out.entry("examples").or_insert_with(|| json!([example]));
    }
    if out.remove("nullable") == Some(Value::Bool(true)) {
        match out.get_mut("type") {
            Some(Value::String(t)) => {
                let t = t.clone();
                out.insert("type".to_owned(), json!([t, "null"]));
            }
            Some(Value::Array(types)) if !types.contains(&json!("null")) => {
                types.push(json!("null"));
            }
            _ => {}
        }
        if let Some(Value::Array(values)) = out.get_mut("enum")
            && !values.contains(&Value::Null)
        {
            values.push(Value::Null);
        }
        if !out.contains_key("type") && !out.contains_key("enum") {
            let inner = std::mem::take(out);
            out.insert(
                "anyOf".to_owned(),
                json!([Value::Object(inner), {"type": "null"}]),
            );
        }
    }
}

/// A `$defs` key as a JSON pointer token.
fn escape_pointer(key: &str) -> String {
    let token = key.replace('~', "~0").replace('/', "~1");
    percent_encoding::utf8_percent_encode(&token, FRAGMENT).to_string()
}

/// Characters a URI fragment cannot carry as they are.
const FRAGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'[')
    .add(b']')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::load::Origin;

    fn docs(value: Value) -> Documents {
        Documents::new(value, &Origin::File("/nonexistent/spec.json".into()))
    }

    #[test]
    fn openapi_30_dialect_becomes_2020_12() {
        let mut d = docs(json!({}));
        let mut c = Converter::new(Version::V30);
        let schema = json!({
            "type": "object",
            "x-internal": true,
            "xml": {"name": "x"},
            "properties": {
                "n": {"type": "integer", "nullable": true, "minimum": 0, "exclusiveMinimum": true, "example": 3},
                "e": {"type": "string", "enum": ["a"], "nullable": true},
                "x-not-an-extension": {"type": "string"},
                "c": {"allOf": [{"type": "string"}], "nullable": true}
            }
        });
        let out = c.convert(&mut d, 0, &schema).unwrap().schema;
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": ["integer", "null"], "exclusiveMinimum": 0, "examples": [3]},
                    "e": {"type": ["string", "null"], "enum": ["a", null]},
                    "x-not-an-extension": {"type": "string"},
                    "c": {"anyOf": [{"allOf": [{"type": "string"}]}, {"type": "null"}]}
                }
            })
        );
    }

    #[test]
    fn references_become_defs_and_recursion_stays_finite() {
        let mut d = docs(json!({
            "components": {"schemas": {
                "Node": {"type": "object", "properties": {
                    "next": {"$ref": "#/components/schemas/Node"},
                    "tag": {"$ref": "#/components/schemas/Tag"}
                }},
                "Tag": {"type": "string", "description": "ignored sibling test"},
                "Unused": {"type": "string"}
            }}
        }));
        let mut c = Converter::new(Version::V30);
        let out = c
            .convert(
                &mut d,
                0,
                &json!({"$ref": "#/components/schemas/Node", "description": "dropped in 3.0"}),
            )
            .unwrap();
        assert_eq!(out.schema, json!({"$ref": "#/$defs/Node"}));
        let defs = c.defs_for(&out.refs).unwrap();
        assert_eq!(defs.keys().collect::<Vec<_>>(), ["Node", "Tag"]);
        assert_eq!(
            defs["Node"]["properties"]["next"],
            json!({"$ref": "#/$defs/Node"})
        );
        // The result compiles and validates recursive data.
        let mut full = out.schema.as_object().unwrap().clone();
        full.insert("$defs".into(), Value::Object(defs));
        let compiled = toolexec::schema::CompiledSchema::compile(&Value::Object(full)).unwrap();
        assert!(compiled.is_valid(&json!({"next": {"next": {"tag": "x"}}})));
        assert!(!compiled.is_valid(&json!({"next": {"tag": 1}})));
    }

    #[test]
    fn a_long_chain_of_references_does_not_recurse() {
        let n = 20_000;
        let mut schemas = serde_json::Map::new();
        for i in 0..n {
            schemas.insert(
                format!("S{i}"),
                json!({"type": "object", "properties": {"next": {"$ref": format!("#/components/schemas/S{}", i + 1)}}}),
            );
        }
        schemas.insert(format!("S{n}"), json!({"type": "string"}));
        let mut d = docs(json!({"components": {"schemas": schemas}}));
        let mut c = Converter::new(Version::V31);
        let out = c
            .convert(&mut d, 0, &json!({"$ref": "#/components/schemas/S0"}))
            .unwrap();
        assert_eq!(c.defs_for(&out.refs).unwrap().len(), n + 1);
    }

    #[test]
    fn a_broken_schema_fails_everything_that_reaches_it() {
        let mut d = docs(json!({"components": {"schemas": {
            "A": {"properties": {"b": {"$ref": "#/components/schemas/B"}}},
            "B": {"properties": {"x": 5}}
        }}}));
        let mut c = Converter::new(Version::V31);
        let out = c
            .convert(&mut d, 0, &json!({"$ref": "#/components/schemas/A"}))
            .unwrap();
        let e = c.defs_for(&out.refs).unwrap_err();
        assert!(e.contains("must be an object"), "{e}");
        let e = c
            .convert(&mut d, 0, &json!({"$ref": "#/components/schemas/B"}))
            .unwrap_err();
        assert!(e.contains("must be an object"), "{e}");
    }

    #[test]
    fn dangling_and_remote_references_are_errors() {
        let mut d = docs(json!({}));
        let mut c = Converter::new(Version::V31);
        let e = c
            .convert(&mut d, 0, &json!({"$ref": "#/components/schemas/Nope"}))
            .unwrap_err();
        assert!(e.contains("points at nothing"), "{e}");
        let e = c
            .convert(&mut d, 0, &json!({"$ref": "https://example.com/s.json#/X"}))
            .unwrap_err();
        assert!(e.contains("remote references are not followed"), "{e}");
    }
}
