//! Parameter extraction from JSON Schemas for indexing.

use serde_json::Value;

/// How many levels below the top-level properties are visited (nested objects / array items).
const MAX_DEPTH: usize = 3;
/// Upper bound on extracted parameters (hostile or generated schemas can be huge).
const MAX_PARAMS: usize = 256;
/// Upper bound on schema nodes visited, so `anyOf`/`$ref` fan-out cannot blow up.
const MAX_NODES: usize = 2_048;
/// Upper bound on the example values kept for one parameter (an `enum` of every country
/// code would otherwise drown its description).
const MAX_VALUES: usize = 12;
/// Longest example value kept, in bytes; longer ones are data, not words worth indexing.
const MAX_VALUE_LEN: usize = 64;
/// Schema keywords whose values say what a parameter takes.
const VALUE_KEYS: [&str; 5] = ["enum", "const", "examples", "example", "default"];

/// Extracts `(name, description)` pairs of parameters from a JSON Schema.
///
/// Walks `properties`, recursing into nested object properties and array `items` (up to
/// three levels, nested names are dotted: `address.city`), merges `allOf`/`anyOf`/`oneOf`
/// branches, and follows local `$ref`s (`#/$defs/..`, `#/definitions/..`, any `#/..` JSON
/// pointer) without looping. The description is the property's `description`, else its
/// `title`, else empty, followed by the values the schema gives for it (`enum`, `const`,
/// `examples`, `example`, `default`; strings and numbers, at most twelve) as
/// `(e.g. a, b)`: a request often names the value it wants ("in celsius", a tracking
/// number) rather than the parameter. Duplicate names are reported once. Any JSON value is
/// accepted; non-schemas yield an empty vector.
pub fn schema_params(schema: &Value) -> Vec<(String, String)> {
    let mut w = Walker {
        root: schema,
        out: Vec::new(),
        seen: std::collections::HashSet::new(),
        ref_stack: Vec::new(),
        nodes: 0,
    };
    w.walk(schema, "", 0);
    w.out
}

struct Walker<'a> {
    root: &'a Value,
    out: Vec<(String, String)>,
    seen: std::collections::HashSet<String>,
    ref_stack: Vec<&'a str>,
    nodes: usize,
}

impl<'a> Walker<'a> {
    /// Resolves a local `$ref` (JSON pointer into the root document).
    fn resolve(&self, r: &str) -> Option<&'a Value> {
        let ptr = r.strip_prefix('#')?;
        if ptr.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(ptr)
    }

    /// Description of a property schema, looking through one level of `$ref` and
    /// `allOf`/`anyOf`/`oneOf` wrappers.
    fn describe(&self, v: &'a Value) -> String {
        fn own(v: &Value) -> Option<&str> {
            let o = v.as_object()?;
            o.get("description")
                .and_then(Value::as_str)
                .or_else(|| o.get("title").and_then(Value::as_str))
        }
        if let Some(d) = own(v) {
            return d.to_string();
        }
        let Some(o) = v.as_object() else {
            return String::new();
        };
        if let Some(t) = o
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| self.resolve(r))
            && let Some(d) = own(t)
        {
            return d.to_string();
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for b in o.get(key).and_then(Value::as_array).into_iter().flatten() {
                if let Some(d) = own(b) {
                    return d.to_string();
                }
                if let Some(t) = b
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| self.resolve(r))
                    && let Some(d) = own(t)
                {
                    return d.to_string();
                }
            }
        }
        String::new()
    }

    /// The example values of a property schema: its own, its local `$ref`'s, its array
    /// items' and its `anyOf`/`oneOf` branches' (one level each), distinct, in order.
    fn values(&self, v: &'a Value) -> Vec<String> {
        let mut nodes = vec![v];
        if let Some(t) = v
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| self.resolve(r))
        {
            nodes.push(t);
        }
        if let Some(items @ Value::Object(_)) = v.get("items") {
            nodes.push(items);
        }
        for key in ["anyOf", "oneOf"] {
            nodes.extend(v.get(key).and_then(Value::as_array).into_iter().flatten());
        }
        let mut out: Vec<String> = Vec::new();
        for node in nodes {
            for key in VALUE_KEYS {
                let found = match node.get(key) {
                    Some(Value::Array(a)) if key != "const" && key != "default" => {
                        a.iter().collect()
                    }
                    Some(x) => vec![x],
                    None => Vec::new(),
                };
                for x in found {
                    let text = match x {
                        Value::String(s) => s.trim().to_string(),
                        Value::Number(n) => n.to_string(),
                        _ => continue,
                    };
                    if out.len() == MAX_VALUES {
                        return out;
                    }
                    if !text.is_empty() && text.len() <= MAX_VALUE_LEN && !out.contains(&text) {
                        out.push(text);
                    }
                }
            }
        }
        out
    }

    fn walk(&mut self, node: &'a Value, prefix: &str, depth: usize) {
        self.nodes += 1;
        if self.nodes > MAX_NODES || self.out.len() >= MAX_PARAMS {
            return;
        }
        let Some(obj) = node.as_object() else {
            return;
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str)
            && !self.ref_stack.contains(&r)
            && let Some(target) = self.resolve(r)
        {
            self.ref_stack.push(r);
            self.walk(target, prefix, depth);
            self.ref_stack.pop();
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                if self.out.len() >= MAX_PARAMS {
                    return;
                }
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if self.seen.insert(name.clone()) {
                    let mut desc = self.describe(v);
                    let values = self.values(v);
                    if !values.is_empty() {
                        if !desc.is_empty() {
                            desc.push(' ');
                        }
                        desc.push_str("(e.g. ");
                        desc.push_str(&values.join(", "));
                        desc.push(')');
                    }
                    self.out.push((name.clone(), desc));
                }
                if depth < MAX_DEPTH {
                    self.walk(v, &name, depth + 1);
                }
            }
        }
        match obj.get("items") {
            Some(items @ Value::Object(_)) if depth < MAX_DEPTH => {
                self.walk(items, prefix, depth + 1);
            }
            Some(Value::Array(items)) if depth < MAX_DEPTH => {
                for it in items {
                    self.walk(it, prefix, depth + 1);
                }
            }
            _ => {}
        }
        if let Some(Value::Array(items)) = obj.get("prefixItems")
            && depth < MAX_DEPTH
        {
            for it in items {
                self.walk(it, prefix, depth + 1);
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(branches) = obj.get(key).and_then(Value::as_array) {
                for b in branches {
                    self.walk(b, prefix, depth);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(v: &Value) -> Vec<String> {
        schema_params(v).into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn flat_properties() {
        let s = json!({"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "units": {"type": "string", "title": "Units"},
            "days": {"type": "integer"}
        }});
        let mut p = schema_params(&s);
        p.sort();
        assert_eq!(
            p,
            vec![
                ("city".to_string(), "City name".to_string()),
                ("days".to_string(), String::new()),
                ("units".to_string(), "Units".to_string()),
            ]
        );
    }

    #[test]
    fn nested_items_and_refs() {
        let s = json!({
            "type": "object",
            "properties": {
                "address": {"type": "object", "properties": {"city": {"description": "c"}}},
                "tags": {"type": "array", "items": {"type": "object",
                    "properties": {"label": {"type": "string"}}}},
                "owner": {"$ref": "#/$defs/Person"},
                "legacy": {"$ref": "#/definitions/Legacy"},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Person"}, {"type": "null"}]}
            },
            "$defs": {"Person": {"type": "object", "description": "A person",
                "properties": {"first_name": {"description": "Given name"}}}},
            "definitions": {"Legacy": {"properties": {"code": {}}}}
        });
        let p = schema_params(&s);
        let n: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        for want in [
            "address",
            "address.city",
            "tags",
            "tags.label",
            "owner",
            "owner.first_name",
            "legacy",
            "legacy.code",
            "maybe",
            "maybe.first_name",
        ] {
            assert!(n.contains(&want), "missing {want} in {n:?}");
        }
        let owner = p
            .iter()
            .find(|(n, _)| n == "owner")
            .map(|(_, d)| d.as_str());
        assert_eq!(owner, Some("A person"));
    }

    #[test]
    fn recursive_refs_terminate() {
        let s = json!({
            "$ref": "#/$defs/Node",
            "$defs": {"Node": {"type": "object", "properties": {
                "value": {"type": "integer"},
                "next": {"$ref": "#/$defs/Node"},
                "self": {"$ref": "#"}
            }}}
        });
        let n = names(&s);
        assert!(n.contains(&"value".to_string()));
        assert!(n.contains(&"next".to_string()));
        assert!(n.contains(&"self".to_string()));
        assert!(n.len() <= MAX_PARAMS);
    }

    #[test]
    fn any_json_value() {
        for v in [
            json!(null),
            json!(1),
            json!("x"),
            json!([1, 2]),
            json!({"properties": 5}),
            json!({"properties": {"a": 1, "b": [], "c": {"items": 3}}}),
            json!({"$ref": 7}),
            json!({"$ref": "http://elsewhere/x"}),
            json!({"$ref": "#/nope/~1weird"}),
            json!({"items": [{"properties": {"z": {}}}]}),
        ] {
            let _ = schema_params(&v);
        }
        assert_eq!(names(&json!({"properties": {"a": 1}})), ["a"]);
    }

    #[test]
    fn wide_fanout_is_bounded() {
        let mut props = serde_json::Map::new();
        for i in 0..1000 {
            props.insert(format!("p{i}"), json!({"$ref": "#"}));
        }
        let s = json!({"properties": props});
        assert!(schema_params(&s).len() <= MAX_PARAMS);
    }

    #[test]
    fn values_follow_the_description() {
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        let many: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
        let s = json!({
            "type": "object",
            "properties": {
                "units": {"type": "string", "description": "Unit system",
                    "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "id": {"type": "string", "default": "CA107308006SI"},
                "limit": {"type": "integer", "examples": [10, 50], "default": 10},
                "kind": {"$ref": "#/$defs/Kind"},
                "tags": {"type": "array", "items": {"enum": ["red", "blue"]}},
                "either": {"anyOf": [{"const": "on"}, {"const": "off"}]},
                "flag": {"type": "boolean", "default": true},
                "blob": {"type": "string", "default": long, "example": " "},
                "country": {"type": "string", "enum": many},
                "nested": {"type": "object", "default": {"a": 1}}
            },
            "$defs": {"Kind": {"title": "Kind", "enum": ["a", "b"]}}
        });
        let p: std::collections::HashMap<String, String> = schema_params(&s).into_iter().collect();
        assert_eq!(p["units"], "Unit system (e.g. celsius, fahrenheit)");
        assert_eq!(p["id"], "(e.g. CA107308006SI)");
        assert_eq!(p["limit"], "(e.g. 10, 50)");
        assert_eq!(p["kind"], "Kind (e.g. a, b)");
        assert_eq!(p["tags"], "(e.g. red, blue)");
        assert_eq!(p["either"], "(e.g. on, off)");
        assert_eq!(p["flag"], "", "booleans say nothing a request would name");
        assert_eq!(p["blob"], "", "long and blank values are left out");
        assert_eq!(
            p["country"],
            format!("(e.g. {})", many[..MAX_VALUES].join(", "))
        );
        assert_eq!(p["nested"], "");
    }
}
