//! TypeScript declarations for the `tools` global, derived from the tools'
//! JSON Schemas, so a model can see exactly what a script may call.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use serde_json::Value;
use toolexec::{Catalog, RegisteredTool, Tool};

/// Names the `tools` proxy keeps for itself.
const RESERVED_ON_TOOLS: [&str; 4] = ["run", "search", "describe", "then"];
/// Deepest schema nesting rendered; deeper parts become `unknown`.
const MAX_DEPTH: usize = 12;

/// Renders TypeScript declarations for the tools of `catalog` (or of one
/// `namespace`): per namespace an interface of functions with argument and
/// result types derived from the input and output schemas (objects, arrays,
/// tuples, enums, `const`, unions, intersections, required vs optional
/// properties, descriptions as JSDoc; anything else is `unknown`), a
/// `ToolMap` of every id to its argument and result types, and the `tools`
/// and `console` globals a script sees.
///
/// ```
/// let catalog = toolexec_builtins::catalog();
/// let ts = toolexec_code::typescript_declarations(&catalog, Some("math"));
/// assert!(ts.contains("interface MathTools {"));
/// assert!(ts.contains("add(args: {"));
/// assert!(ts.contains("declare const tools: {"));
/// assert!(!ts.contains("TextTools"));
/// ```
pub fn typescript_declarations(catalog: &Catalog, namespace: Option<&str>) -> String {
    // namespace → name → newest version (what `tools.ns.name` resolves to);
    // plus every explicit id for `ToolMap`.
    let mut by_ns: BTreeMap<String, BTreeMap<String, std::sync::Arc<RegisteredTool>>> =
        BTreeMap::new();
    let mut versioned = Vec::new();
    for entry in catalog.all() {
        let tool = entry.tool();
        if namespace.is_some_and(|ns| ns != tool.namespace()) {
            continue;
        }
        if tool.id.version().is_some() {
            versioned.push(entry.clone());
        }
        let key = format!("{}:{}", tool.namespace(), tool.name());
        let newest = catalog.get(&key).unwrap_or(entry.clone());
        by_ns
            .entry(tool.namespace().to_owned())
            .or_default()
            .insert(tool.name().to_owned(), newest);
    }

    let mut out = String::new();
    out.push_str(HEADER);
    let mut iface_names = HashSet::new();
    let mut members = Vec::new();
    let mut map_rows = Vec::new();
    for (ns, tools) in &by_ns {
        let iface = unique(&mut iface_names, format!("{}Tools", pascal(ns)));
        let _ = writeln!(
            out,
            "/** Tools in namespace `{ns}` (`tools.{ns}.<name>(args)`). */"
        );
        let _ = writeln!(out, "interface {iface} {{");
        for (name, entry) in tools {
            let tool = entry.tool();
            let id = format!("{}:{}", tool.namespace(), tool.name());
            write_member(&mut out, tool, name, &id, "");
            let key = format!("{ns}:{name}");
            let access = format!("{iface}[{}]", json_str(name));
            map_rows.push((key, access));
        }
        out.push_str("}\n\n");
        if RESERVED_ON_TOOLS.contains(&ns.as_str()) {
            members.push(format!(
                "  // Namespace `{ns}` is reserved on `tools`; call its tools with `tools.run(\"{ns}:<name>\", args)`."
            ));
        } else {
            members.push(format!("  readonly {}: {iface};", prop_name(ns)));
        }
    }
    for entry in &versioned {
        let tool = entry.tool();
        let mut g = Gen::new(&tool.input_schema);
        let args = g.ty(&tool.input_schema, 2, 0);
        let result = match &tool.output_schema {
            Some(s) => Gen::new(s).ty(s, 2, 0),
            None => "unknown".to_owned(),
        };
        map_rows.push((
            tool.id.to_string(),
            format!("{{ args: {args}; result: {result} }}"),
        ));
    }

    out.push_str("/** Every tool id (and versioned id) with its argument and result types. */\n");
    out.push_str("interface ToolMap {\n");
    for (key, access) in &map_rows {
        if access.starts_with('{') {
            let _ = writeln!(out, "  {}: {access};", json_str(key));
        } else {
            let _ = writeln!(
                out,
                "  {}: {{ args: Parameters<{access}>[0]; result: Awaited<ReturnType<{access}>> }};",
                json_str(key)
            );
        }
    }
    out.push_str("}\n\n");
    out.push_str(TOOLS_HEAD);
    for m in members {
        out.push_str(&m);
        out.push('\n');
    }
    out.push_str("};\n\n");
    out.push_str(CONSOLE);
    out
}

/// Renders the TypeScript declaration of one tool: its namespace's
/// interface holding just this tool's function, with the argument and result
/// types and the description as JSDoc, exactly as
/// [`typescript_declarations`] renders it among the rest of the namespace.
/// For a versioned tool the doc comment says how to call that version
/// (`tools.run("ns:name:version", args)`).
///
/// ```
/// let catalog = toolexec_builtins::catalog();
/// let add = catalog.get("math:add").unwrap();
/// let ts = toolexec_code::typescript_declaration(add.tool());
/// assert!(ts.starts_with("/** Tools in namespace `math`"));
/// assert!(ts.contains("interface MathTools {"));
/// assert!(ts.contains("  add(args: {"));
/// assert!(ts.contains("    a: number;"));
/// assert!(ts.contains("): Promise<{"));
/// assert!(!ts.contains("multiply"));
/// ```
pub fn typescript_declaration(tool: &Tool) -> String {
    let ns = tool.namespace();
    let name = tool.name();
    let mut out = String::new();
    let mut note = String::new();
    if let Some(version) = tool.id.version() {
        let _ = write!(
            note,
            " This is version `{version}`: call it with `tools.run(\"{}\", args)` (`tools.{ns}.{name}` calls the newest version).",
            tool.id
        );
    } else if RESERVED_ON_TOOLS.contains(&ns) {
        let _ = write!(
            note,
            " Namespace `{ns}` is reserved on `tools`: call it with `tools.run(\"{ns}:{name}\", args)`."
        );
    }
    let _ = writeln!(
        out,
        "/** Tools in namespace `{ns}` (`tools.{ns}.<name>(args)`). */"
    );
    let _ = writeln!(out, "interface {}Tools {{", pascal(ns));
    write_member(&mut out, tool, name, &tool.id.to_string(), &note);
    out.push_str("}\n");
    out
}

/// Writes one tool's JSDoc and function signature as a member of its
/// namespace interface (`id` is the id the doc comment names; `note` is
/// appended to the doc comment).
fn write_member(out: &mut String, tool: &Tool, name: &str, id: &str, note: &str) {
    let args = Gen::new(&tool.input_schema).ty(&tool.input_schema, 1, 0);
    let result = match &tool.output_schema {
        Some(s) => Gen::new(s).ty(s, 1, 0),
        None => "unknown".to_owned(),
    };
    let mut doc = tool.description.trim().to_owned();
    if !doc.is_empty() {
        doc.push_str("\n\n");
    }
    let _ = write!(doc, "Tool id: `{id}`.");
    if name == "then" {
        doc.push_str(" Reach it with `tools.run`: `then` is reserved on namespaces.");
    }
    doc.push_str(note);
    jsdoc(out, &doc, 1);
    let member = if name == "then" {
        "\"then\"".to_owned()
    } else {
        prop_name(name)
    };
    let opt = if has_required(&tool.input_schema) {
        ""
    } else {
        "?"
    };
    let _ = writeln!(out, "  {member}(args{opt}: {args}): Promise<{result}>;");
}

const HEADER: &str = r#"// TypeScript declarations of the globals a toolexec code-mode script sees.
// The script is the body of an async function: use `await` and `return`.

/** A search result of `tools.search`. */
interface ToolMatch {
  id: string;
  title?: string;
  summary: string;
  tags?: string[];
  /** Relevance; higher is better. */
  score: number;
}

/** A tool's documentation from `tools.describe`. */
interface ToolDescription {
  id: string;
  title?: string;
  summary: string;
  tags?: string[];
  description?: string;
  input_schema?: unknown;
  output_schema?: unknown;
  annotations?: { [key: string]: unknown };
  notes?: string[];
  examples?: { title: string; args: { [key: string]: unknown }; result?: unknown }[];
}

/** What a failed tool call rejects with. */
interface ToolError extends Error {
  name: "ToolError";
  /** Stable error code: "validation_input", "tool_not_found", "timeout", "execution_failed", ... */
  code: string;
  /** The tool id as called. */
  toolId: string;
  /** Position of the call in the execution's tool-call log. */
  callIndex?: number;
  /** Structured detail (schema violations, limits, the tool's own data), or null. */
  details: unknown;
}

"#;

const TOOLS_HEAD: &str = r#"/** The tools this script may call. Every call is validated against the tool's schemas. */
declare const tools: {
  /** Runs a tool by id (`"namespace:name"` or `"namespace:name:version"`). Rejects with a `ToolError`. */
  run<K extends keyof ToolMap>(id: K, args: ToolMap[K]["args"]): Promise<ToolMap[K]["result"]>;
  run(id: string, args?: { [key: string]: unknown }): Promise<unknown>;
  /** Ranked search over the tools this script may call. */
  search(query: string, limit?: number): Promise<ToolMatch[]>;
  /** A tool's documentation; `detail` defaults to "schema". */
  describe(id: string, detail?: "summary" | "schema" | "full"): Promise<ToolDescription>;
"#;

const CONSOLE: &str = r#"/** Captured output: log/info/debug to stdout, warn/error to stderr. Objects print as JSON. */
declare const console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  debug(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};
"#;

/// Whether an input schema requires any property (else `args` may be
/// omitted: the pipeline treats a missing argument object as `{}`).
fn has_required(schema: &Value) -> bool {
    schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
}

fn unique(seen: &mut HashSet<String>, name: String) -> String {
    if seen.insert(name.clone()) {
        return name;
    }
    (2..)
        .map(|i| format!("{name}{i}"))
        .find(|n| seen.insert(n.clone()))
        .expect("some suffix is free")
}

/// `my-ns.v2` → `MyNsV2`; a leading digit gets an underscore.
fn pascal(s: &str) -> String {
    let mut out = String::new();
    for part in s.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn prop_name(s: &str) -> String {
    if is_ident(s) {
        s.to_owned()
    } else {
        json_str(s)
    }
}

fn pad(indent: usize) -> String {
    "  ".repeat(indent)
}

/// Writes `text` as a JSDoc comment at `indent`.
fn jsdoc(out: &mut String, text: &str, indent: usize) {
    let text = text.trim().replace("*/", "*\\/");
    if text.is_empty() {
        return;
    }
    let p = pad(indent);
    if !text.contains('\n') {
        let _ = writeln!(out, "{p}/** {text} */");
        return;
    }
    let _ = writeln!(out, "{p}/**");
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            let _ = writeln!(out, "{p} *");
        } else {
            let _ = writeln!(out, "{p} * {line}");
        }
    }
    let _ = writeln!(out, "{p} */");
}

/// Schema → type renderer for one schema document (which holds the
/// `$defs`/`definitions` its `$ref`s point into).
struct Gen<'a> {
    root: &'a Value,
    expanding: Vec<String>,
}

impl<'a> Gen<'a> {
    fn new(root: &'a Value) -> Self {
        Gen {
            root,
            expanding: Vec::new(),
        }
    }

    /// The type of `schema`, laid out for a position at `indent`.
    fn ty(&mut self, schema: &Value, indent: usize, depth: usize) -> String {
        if depth > MAX_DEPTH {
            return "unknown".into();
        }
        let obj = match schema {
            Value::Bool(true) => return "unknown".into(),
            Value::Bool(false) => return "never".into(),
            Value::Object(o) => o,
            _ => return "unknown".into(),
        };
        if let Some(Value::String(r)) = obj.get("$ref") {
            return self.reference(r, indent, depth);
        }
        if let Some(c) = obj.get("const") {
            return literal(c).unwrap_or_else(|| "unknown".into());
        }
        if let Some(Value::Array(options)) = obj.get("enum") {
            let lits: Option<Vec<String>> = options.iter().map(literal).collect();
            return match lits {
                Some(l) if !l.is_empty() => union(l),
                _ => "unknown".into(),
            };
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = obj.get(key) {
                let parts = options
                    .iter()
                    .map(|o| self.ty(o, indent, depth + 1))
                    .collect();
                let base = self.typed(obj, indent, depth);
                let u = union(parts);
                return match base {
                    Some(b) if b != "unknown" => format!("{} & {}", paren(&b), paren(&u)),
                    _ => u,
                };
            }
        }
        if let Some(Value::Array(all)) = obj.get("allOf") {
            let mut parts: Vec<String> = all
                .iter()
                .map(|o| self.ty(o, indent, depth + 1))
                .filter(|t| t != "unknown")
                .collect();
            if let Some(b) = self.typed(obj, indent, depth)
                && b != "unknown"
            {
                parts.push(b);
            }
            return match parts.len() {
                0 => "unknown".into(),
                1 => parts.remove(0),
                _ => parts
                    .iter()
                    .map(|p| paren(p))
                    .collect::<Vec<_>>()
                    .join(" & "),
            };
        }
        let t = self
            .typed(obj, indent, depth)
            .unwrap_or_else(|| "unknown".into());
        if obj.get("nullable") == Some(&Value::Bool(true)) && t != "unknown" {
            return union(vec![t, "null".into()]);
        }
        t
    }

    /// The type from `type` (or implied by `properties`/`items`), if any.
    fn typed(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        indent: usize,
        depth: usize,
    ) -> Option<String> {
        let types: Vec<&str> = match obj.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if obj.contains_key("properties") || obj.contains_key("additionalProperties") => {
                vec!["object"]
            }
            _ if obj.contains_key("items") || obj.contains_key("prefixItems") => vec!["array"],
            _ => return None,
        };
        let parts = types
            .into_iter()
            .map(|t| match t {
                "string" => "string".to_owned(),
                "number" | "integer" => "number".to_owned(),
                "boolean" => "boolean".to_owned(),
                "null" => "null".to_owned(),
                "array" => self.array(obj, indent, depth),
                "object" => self.object(obj, indent, depth),
                _ => "unknown".to_owned(),
            })
            .collect();
        Some(union(parts))
    }

    fn reference(&mut self, r: &str, indent: usize, depth: usize) -> String {
        let Some(pointer) = r.strip_prefix('#') else {
            return "unknown".into();
        };
        if self.expanding.iter().any(|e| e == r) {
            return "unknown".into(); // recursive type
        }
        let Some(target) = self.root.pointer(pointer) else {
            return "unknown".into();
        };
        self.expanding.push(r.to_owned());
        let t = self.ty(target, indent, depth + 1);
        self.expanding.pop();
        t
    }

    fn array(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        indent: usize,
        depth: usize,
    ) -> String {
        if let Some(Value::Array(prefix)) = obj.get("prefixItems") {
            let mut parts: Vec<String> = prefix
                .iter()
                .map(|s| self.ty(s, indent, depth + 1))
                .collect();
            match obj.get("items") {
                Some(Value::Bool(false)) => {}
                Some(rest) => {
                    parts.push(format!("...{}[]", paren(&self.ty(rest, indent, depth + 1))))
                }
                None => parts.push("...unknown[]".into()),
            }
            return format!("[{}]", parts.join(", "));
        }
        match obj.get("items") {
            // Draft-7 style tuples.
            Some(Value::Array(items)) => {
                let parts: Vec<String> = items
                    .iter()
                    .map(|s| self.ty(s, indent, depth + 1))
                    .collect();
                format!("[{}]", parts.join(", "))
            }
            Some(item) => format!("{}[]", paren(&self.ty(item, indent, depth + 1))),
            None => "unknown[]".into(),
        }
    }

    fn object(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        indent: usize,
        depth: usize,
    ) -> String {
        let required: HashSet<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = obj.get("properties").and_then(Value::as_object);
        let additional = obj.get("additionalProperties");
        let has_props = props.is_some_and(|p| !p.is_empty());
        let index = match additional {
            Some(Value::Bool(false)) => None,
            None | Some(Value::Bool(true)) if has_props => None,
            None | Some(Value::Bool(true)) => Some("unknown".to_owned()),
            // TypeScript requires every property to fit the index signature.
            Some(_) if has_props => Some("unknown".to_owned()),
            Some(s) => Some(self.ty(s, indent + 1, depth + 1)),
        };
        if !has_props {
            return match index {
                Some(t) => format!("{{ [key: string]: {t} }}"),
                None => "Record<string, never>".into(),
            };
        }
        let mut out = String::from("{\n");
        let inner = pad(indent + 1);
        for (name, schema) in props.into_iter().flatten() {
            if let Some(d) = schema.get("description").and_then(Value::as_str) {
                jsdoc(&mut out, d, indent + 1);
            }
            let opt = if required.contains(name.as_str()) {
                ""
            } else {
                "?"
            };
            let t = self.ty(schema, indent + 1, depth + 1);
            let _ = writeln!(out, "{inner}{}{opt}: {t};", prop_name(name));
        }
        if let Some(t) = index {
            let _ = writeln!(out, "{inner}[key: string]: {t};");
        }
        out.push_str(&pad(indent));
        out.push('}');
        out
    }
}

/// A JSON scalar as a TypeScript literal type.
fn literal(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(json_str(s)),
        _ => None,
    }
}

fn union(parts: Vec<String>) -> String {
    let mut seen = HashSet::new();
    let parts: Vec<String> = parts
        .into_iter()
        .filter(|p| seen.insert(p.clone()))
        .collect();
    if parts.iter().any(|p| p == "unknown") {
        return "unknown".into();
    }
    match parts.len() {
        0 => "never".into(),
        1 => parts.into_iter().next().expect("one"),
        _ => parts.join(" | "),
    }
}

/// Parenthesizes unions and intersections where a tighter operator follows.
fn paren(t: &str) -> String {
    let (mut depth, mut in_str, mut esc, mut found) = (0i32, false, false, false);
    for c in t.chars() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' | '(' | '<' => depth += 1,
            '}' | ']' | ')' | '>' => depth -= 1,
            '|' | '&' if depth == 0 => found = true,
            _ => {}
        }
    }
    if found {
        format!("({t})")
    } else {
        t.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(schema: Value) -> String {
        Gen::new(&schema).ty(&schema, 0, 0)
    }

    #[test]
    fn scalars_enums_unions() {
        assert_eq!(t(json!({"type": "string"})), "string");
        assert_eq!(t(json!({"type": "integer"})), "number");
        assert_eq!(t(json!({"type": ["string", "null"]})), "string | null");
        assert_eq!(t(json!({"enum": ["a", "b", 1]})), "\"a\" | \"b\" | 1");
        assert_eq!(t(json!({"const": true})), "true");
        assert_eq!(
            t(json!({"anyOf": [{"type": "number"}, {"type": "string"}]})),
            "number | string"
        );
        assert_eq!(t(json!({})), "unknown");
        assert_eq!(t(json!(false)), "never");
        assert_eq!(
            t(json!({"type": "array", "items": {"type": ["number", "string"]}})),
            "(number | string)[]"
        );
        assert_eq!(
            t(
                json!({"type": "array", "prefixItems": [{"type": "number"}, {"type": "string"}], "items": false})
            ),
            "[number, string]"
        );
    }

    #[test]
    fn objects_refs_and_recursion() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Who"},
                "node": {"$ref": "#/$defs/Node"},
                "my-key": {"type": "boolean"}
            },
            "required": ["name"],
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}
        });
        let ts = t(schema);
        assert!(ts.contains("/** Who */"), "{ts}");
        assert!(ts.contains("name: string;"), "{ts}");
        assert!(ts.contains("node?: {"), "{ts}");
        assert!(ts.contains("next?: unknown;"), "{ts}");
        assert!(ts.contains("\"my-key\"?: boolean;"), "{ts}");
        assert_eq!(
            t(json!({"type": "object", "additionalProperties": {"type": "number"}})),
            "{ [key: string]: number }"
        );
        assert_eq!(
            t(json!({"type": "object", "additionalProperties": false})),
            "Record<string, never>"
        );
    }

    #[test]
    fn single_tool_declarations() {
        let tool = Tool::builder("run:go-fast:2")
            .description("Goes fast.")
            .input_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}}))
            .build()
            .unwrap();
        let ts = typescript_declaration(&tool);
        assert!(ts.contains("interface RunTools {"), "{ts}");
        assert!(ts.contains("Tool id: `run:go-fast:2`."), "{ts}");
        assert!(ts.contains("tools.run(\"run:go-fast:2\", args)"), "{ts}");
        assert!(
            ts.contains("  \"go-fast\"(args?: {\n    n?: number;\n  }): Promise<unknown>;"),
            "{ts}"
        );
        assert_eq!(ts.matches('{').count(), ts.matches('}').count(), "{ts}");
        let plain = Tool::builder("search:x").build().unwrap();
        let ts = typescript_declaration(&plain);
        assert!(ts.contains("reserved on `tools`"), "{ts}");
    }

    #[test]
    fn names() {
        assert_eq!(pascal("my-ns.v2"), "MyNsV2");
        assert_eq!(pascal("3d"), "_3d");
        assert_eq!(prop_name("na-me"), "\"na-me\"");
        assert_eq!(prop_name("ok_name"), "ok_name");
    }
}
