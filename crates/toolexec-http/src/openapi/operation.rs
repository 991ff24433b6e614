//! One OpenAPI operation as a tool: its parameters and body merged into one
//! input schema, its success response as the output schema, and the
//! [`Operation`] that sends it.

use std::collections::BTreeSet;
use std::sync::Arc;

use http::Method;
use serde_json::{Map, Value, json};
use toolexec::{Tool, ToolAnnotations};

use super::refs::Documents;
use super::schema::{Converted, Converter};
use crate::auth::Requirement;
use crate::client::{Api, idempotent_method};
use crate::endpoint::{
    BodySource, BodySpec, Location, Media, Operation, Param, PathPart, Source, Style,
};

/// Longest description kept (OpenAPI descriptions can be pages long).
const MAX_DESCRIPTION: usize = 4000;

/// The methods imported, in the order they are read. TRACE is not: a
/// server echoing the request would hand the credentials to the caller.
pub(crate) const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch"];

/// Header parameters never taken from arguments: hop-by-hop and framing
/// headers, and the ones OpenAPI says to ignore.
const NOT_ARGUMENTS: &[&str] = &[
    "accept",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "cookie",
    "host",
    "keep-alive",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Most `$defs` one tool's schema may carry.
const MAX_DEFS_PER_TOOL: usize = 2_000;
/// Most `$defs` copies one import may make over all its tools.
const MAX_DEFS_PER_IMPORT: usize = 1_000_000;

/// What the importer knows while building operations.
pub(crate) struct Context<'a> {
    pub(crate) docs: &'a mut Documents,
    pub(crate) converter: &'a mut Converter,
    pub(crate) api: &'a Arc<Api>,
    /// The document's top-level `security`.
    pub(crate) security: &'a [Requirement],
    /// operationIds configured as idempotent.
    pub(crate) idempotent: &'a BTreeSet<String>,
    pub(crate) output_schemas: bool,
    /// Headers the operator or the credentials set (lowercase): never
    /// arguments.
    pub(crate) reserved_headers: &'a BTreeSet<String>,
    /// `$defs` copies made so far, against [`MAX_DEFS_PER_IMPORT`].
    pub(crate) defs_copied: usize,
}

/// One operation as the document declares it.
pub(crate) struct Declared<'a> {
    /// The document its path item was found in.
    pub(crate) doc: usize,
    pub(crate) path: &'a str,
    pub(crate) method: &'a str,
    pub(crate) operation: &'a Value,
    /// The path item's own `parameters`.
    pub(crate) shared_params: &'a [Value],
}

/// A built tool: its definition and backend.
pub(crate) struct Built {
    pub(crate) tool: Tool,
    pub(crate) operation: Operation,
}

/// Builds the tool named `name` (a valid tool name) for `d`; an `Err`
/// is the reason it is skipped.
pub(crate) fn build(cx: &mut Context<'_>, name: &str, d: &Declared<'_>) -> Result<Built, String> {
    let op = d.operation;
    let tool_id = format!("{}:{name}", cx.api.name());
    let method = Method::from_bytes(d.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("unknown method {:?}", d.method))?;

    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut refs = BTreeSet::new();
    let mut params = Vec::new();
    for (doc, raw) in merged_params(cx, d)? {
        let p = parameter(cx, doc, &raw, &mut properties, &mut required, &mut refs)?;
        if let Some(p) = p {
            params.push(p);
        }
    }
    let path = path_parts(d.path, &params)?;

    let body = match op.get("requestBody") {
        Some(raw) => request_body(cx, d.doc, raw, &mut properties, &mut required, &mut refs)?,
        None => None,
    };
    let (accept, output) = responses(cx, d.doc, op.get("responses"))?;

    let mut input =
        json!({"type": "object", "properties": properties, "additionalProperties": false});
    if !required.is_empty() {
        input["required"] = json!(required);
    }
    let defs = carried_defs(cx, &refs)?;
    if !defs.is_empty() {
        input["$defs"] = Value::Object(defs);
    }
    let output = match output.filter(|_| cx.output_schemas) {
        Some(Converted { mut schema, refs }) => {
            let defs = carried_defs(cx, &refs)?;
            if !defs.is_empty()
                && let Some(obj) = schema.as_object_mut()
            {
                obj.insert("$defs".to_owned(), Value::Object(defs));
            }
            Some(schema)
        }
        None => None,
    };

    let operation_id = op.get("operationId").and_then(Value::as_str);
    // Only the operator marks a method idempotent that is not by
    // definition: a document saying so could make a POST run twice.
    let idempotent =
        idempotent_method(&method) || operation_id.is_some_and(|id| cx.idempotent.contains(id));
    let security = match op.get("security") {
        Some(s) => requirements(s)?,
        None => cx.security.to_vec(),
    };
    let summary = text(op, "summary");
    let description = description(&summary, &text(op, "description"), d);
    let mut tags: Vec<String> = op
        .get("tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if op.get("deprecated").and_then(Value::as_bool) == Some(true) {
        tags.push("deprecated".to_owned());
    }
    tags.truncate(toolexec::tool::MAX_TAGS);
    let read_only = matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    let annotations = ToolAnnotations {
        title: (!summary.is_empty()).then(|| summary.clone()),
        read_only_hint: Some(read_only),
        destructive_hint: (!read_only).then_some(method == Method::DELETE),
        idempotent_hint: Some(idempotent),
        open_world_hint: Some(true),
    };
    let mut builder = Tool::builder(&tool_id)
        .description(description)
        .input_schema(input)
        .annotations(annotations)
        .tags(tags);
    if !summary.is_empty() {
        builder = builder.title(summary);
    }
    if let Some(output) = output {
        builder = builder.output_schema(output);
    }
    let tool = builder.build().map_err(|e| e.to_string())?;
    Ok(Built {
        tool,
        operation: Operation {
            api: cx.api.clone(),
            tool: tool_id,
            method,
            path,
            params,
            body,
            accept,
            idempotent,
            security,
        },
    })
}

/// The `$defs` a schema referring to `refs` carries, within the budgets.
fn carried_defs(
    cx: &mut Context<'_>,
    refs: &BTreeSet<String>,
) -> Result<Map<String, Value>, String> {
    let defs = cx.converter.defs_for(refs)?;
    if defs.len() > MAX_DEFS_PER_TOOL {
        return Err(format!(
            "its schemas reach {} definitions, more than the {MAX_DEFS_PER_TOOL} a tool may carry",
            defs.len()
        ));
    }
    cx.defs_copied += defs.len();
    if cx.defs_copied > MAX_DEFS_PER_IMPORT {
        return Err(format!(
            "the document's tools carry more than {MAX_DEFS_PER_IMPORT} definitions in all"
        ));
    }
    Ok(defs)
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// `summary`, then `description`, then `METHOD /path`, cut to a size a
/// model reads.
fn description(summary: &str, description: &str, d: &Declared<'_>) -> String {
    let mut out = String::new();
    for part in [summary, description] {
        if !part.is_empty() && !out.contains(part) {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(part);
        }
    }
    if out.chars().count() > MAX_DESCRIPTION {
        out = out.chars().take(MAX_DESCRIPTION).collect();
        out.push('…');
    }
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&format!("{} {}", d.method.to_ascii_uppercase(), d.path));
    out
}

/// The path item's parameters overridden by the operation's (same name
/// and location), references followed.
fn merged_params(cx: &mut Context<'_>, d: &Declared<'_>) -> Result<Vec<(usize, Value)>, String> {
    let own = d
        .operation
        .get("parameters")
        .map(|p| p.as_array().cloned().ok_or("parameters is not a list"))
        .transpose()?
        .unwrap_or_default();
    let mut out: Vec<(usize, Value)> = Vec::new();
    for (i, raw) in d.shared_params.iter().chain(own.iter()).enumerate() {
        let (doc, p) = cx
            .docs
            .deref(d.doc, raw)
            .map_err(|e| format!("parameters[{i}]: {e}"))?;
        let key = |v: &Value| (v.get("name").cloned(), v.get("in").cloned());
        if let Some(existing) = out.iter_mut().find(|(_, o)| key(o) == key(&p)) {
            *existing = (doc, p);
        } else {
            out.push((doc, p));
        }
    }
    Ok(out)
}

/// One parameter: its property in the input schema and how it is sent.
/// `None` for the headers OpenAPI says to ignore.
fn parameter(
    cx: &mut Context<'_>,
    doc: usize,
    p: &Value,
    properties: &mut Map<String, Value>,
    required: &mut Vec<String>,
    refs: &mut BTreeSet<String>,
) -> Result<Option<Param>, String> {
    let name = p
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a parameter has no name")?;
    let location = match p.get("in").and_then(Value::as_str) {
        Some("path") => Location::Path,
        Some("query") => Location::Query,
        Some("header") => Location::Header,
        Some("cookie") => Location::Cookie,
        other => return Err(format!("parameter {name:?}: unknown location {other:?}")),
    };
    if location == Location::Header {
        let lower = name.to_ascii_lowercase();
        if NOT_ARGUMENTS.contains(&lower.as_str()) || cx.reserved_headers.contains(&lower) {
            return Ok(None);
        }
    }
    let style = match p.get("style").and_then(Value::as_str) {
        Some(s) => {
            Style::parse(s).ok_or_else(|| format!("parameter {name:?}: unknown style {s:?}"))?
        }
        None => Style::default_for(location),
    };
    if !style.allowed_at(location) {
        return Err(format!(
            "parameter {name:?}: style {style:?} is not allowed in {location:?}"
        ));
    }
    let explode = p
        .get("explode")
        .and_then(Value::as_bool)
        .unwrap_or(style == Style::Form);
    let (schema, json_content) =
        match (p.get("schema"), p.get("content").and_then(Value::as_object)) {
            (Some(schema), _) => (schema.clone(), false),
            (None, Some(content)) => {
                let (media, m) = content
                    .iter()
                    .next()
                    .ok_or_else(|| format!("parameter {name:?}: empty content"))?;
                if !crate::endpoint::is_json(media) {
                    return Err(format!(
                        "parameter {name:?}: content {media} is not supported (JSON is)"
                    ));
                }
                (m.get("schema").cloned().unwrap_or(json!({})), true)
            }
            (None, None) => (json!({}), false),
        };
    let property = unique_property(properties, name, location);
    let mut converted = cx
        .converter
        .convert(cx.docs, doc, &schema)
        .map_err(|e| format!("parameter {name:?}: {e}"))?;
    refs.append(&mut converted.refs);
    let mut prop = converted.schema;
    let description = text(p, "description");
    if !description.is_empty()
        && let Some(obj) = prop.as_object_mut()
    {
        obj.entry("description").or_insert(json!(description));
    }
    if p.get("deprecated").and_then(Value::as_bool) == Some(true)
        && let Some(obj) = prop.as_object_mut()
    {
        obj.insert("deprecated".to_owned(), json!(true));
    }
    properties.insert(property.clone(), prop);
    if location == Location::Path || p.get("required").and_then(Value::as_bool) == Some(true) {
        required.push(property.clone());
    }
    Ok(Some(Param {
        name: name.to_owned(),
        location,
        source: if json_content {
            Source::JsonArg(property)
        } else {
            Source::Arg(property)
        },
        style,
        explode,
        allow_reserved: p.get("allowReserved").and_then(Value::as_bool) == Some(true),
    }))
}

/// The property a parameter takes: its name, or `<location>.<name>` when
/// another location took the name first.
fn unique_property(properties: &Map<String, Value>, name: &str, location: Location) -> String {
    if !properties.contains_key(name) {
        return name.to_owned();
    }
    let prefix = match location {
        Location::Path => "path",
        Location::Query => "query",
        Location::Header => "header",
        Location::Cookie => "cookie",
    };
    format!("{prefix}.{name}")
}

/// The path template as literal pieces and path parameters; every
/// `{name}` must be a path parameter.
fn path_parts(template: &str, params: &[Param]) -> Result<Vec<PathPart>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        if start > 0 {
            parts.push(PathPart::Literal(rest[..start].to_owned()));
        }
        let end = rest[start..]
            .find('}')
            .ok_or_else(|| format!("path {template:?}: unclosed {{"))?;
        let name = &rest[start + 1..start + end];
        let i = params
            .iter()
            .position(|p| p.location == Location::Path && p.name == name)
            .ok_or_else(|| {
                format!("path {template:?}: {{{name}}} is not a declared path parameter")
            })?;
        parts.push(PathPart::Param(i));
        rest = &rest[start + end + 1..];
    }
    if !rest.is_empty() {
        parts.push(PathPart::Literal(rest.to_owned()));
    }
    // Literal pieces go into the URL as written: encode what a path cannot
    // carry (a space, say), keep `/` and anything already encoded.
    for part in &mut parts {
        if let PathPart::Literal(text) = part {
            *text = percent_encoding::utf8_percent_encode(text, PATH_LITERAL).to_string();
        }
    }
    Ok(parts)
}

const PATH_LITERAL: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// The body: its media type (JSON first, then forms, then text or bytes)
/// and its property (`body`, or `request_body` when a parameter is named
/// `body`).
fn request_body(
    cx: &mut Context<'_>,
    from: usize,
    raw: &Value,
    properties: &mut Map<String, Value>,
    required: &mut Vec<String>,
    refs: &mut BTreeSet<String>,
) -> Result<Option<BodySpec>, String> {
    let (doc, body) = cx
        .docs
        .deref(from, raw)
        .map_err(|e| format!("requestBody: {e}"))?;
    let Some(content) = body.get("content").and_then(Value::as_object) else {
        return Ok(None);
    };
    let pick = |want: &dyn Fn(&str) -> bool| content.iter().find(|(m, _)| want(&essence(m)));
    let chosen = pick(&|m| crate::endpoint::is_json(m))
        .map(|(m, v)| (Media::Json(essence(m)), v))
        .or_else(|| {
            pick(&|m| m == "application/x-www-form-urlencoded").map(|(_, v)| (Media::Form, v))
        })
        .or_else(|| {
            pick(&|m| m == "multipart/form-data")
                .map(|(_, v)| (Media::Multipart { files: Vec::new() }, v))
        })
        .or_else(|| {
            pick(&|m| {
                m.starts_with("text/") || m == "application/octet-stream" || m.ends_with("xml")
            })
            .map(|(m, v)| (Media::Raw(essence(m)), v))
        });
    let Some((media, m)) = chosen else {
        let types: Vec<&String> = content.keys().collect();
        return Err(format!("request body types {types:?} are not supported"));
    };
    let schema = match media {
        Media::Raw(_) => json!({"type": "string"}),
        _ => m.get("schema").cloned().unwrap_or(json!({})),
    };
    let media = match media {
        Media::Multipart { .. } => Media::Multipart {
            files: file_fields(cx.docs, doc, &schema),
        },
        other => other,
    };
    let mut converted = cx
        .converter
        .convert(cx.docs, doc, &schema)
        .map_err(|e| format!("requestBody: {e}"))?;
    refs.append(&mut converted.refs);
    let mut prop = converted.schema;
    let description = text(&body, "description");
    if !description.is_empty()
        && let Some(obj) = prop.as_object_mut()
    {
        obj.entry("description").or_insert(json!(description));
    }
    let property = if properties.contains_key("body") {
        "request_body"
    } else {
        "body"
    };
    if properties.contains_key(property) {
        return Err("parameters named body and request_body leave no name for the body".into());
    }
    properties.insert(property.to_owned(), prop);
    if body.get("required").and_then(Value::as_bool) == Some(true) {
        required.push(property.to_owned());
    }
    Ok(Some(BodySpec {
        media,
        source: BodySource::Arg(property.to_owned()),
    }))
}

/// The properties of a multipart body that are files: binary strings
/// (`format: binary` or `base64` in 3.0, `contentMediaType` in 3.1).
fn file_fields(docs: &mut Documents, doc: usize, schema: &Value) -> Vec<String> {
    let Ok((doc, resolved)) = docs.deref(doc, schema) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, prop) in resolved
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Ok((_, prop)) = docs.deref(doc, prop) else {
            continue;
        };
        let binary = matches!(
            prop.get("format").and_then(Value::as_str),
            Some("binary" | "base64")
        ) || prop.get("contentMediaType").is_some();
        if binary {
            out.push(name.clone());
        }
    }
    out
}

/// The `Accept` header (every 2xx media type) and the output schema: the
/// JSON schema of the 2xx responses (one of them, or `anyOf`).
fn responses(
    cx: &mut Context<'_>,
    from: usize,
    raw: Option<&Value>,
) -> Result<(Option<String>, Option<Converted>), String> {
    let Some(responses) = raw.and_then(Value::as_object) else {
        return Ok((None, None));
    };
    let mut media_types: Vec<String> = Vec::new();
    let mut schemas: Vec<(usize, Value)> = Vec::new();
    let mut any_success = false;
    // Any success that is not JSON of a declared schema: no output schema.
    let mut shapeless = false;
    for (status, raw) in responses {
        if !status.starts_with('2') {
            continue;
        }
        any_success = true;
        let (doc, response) = cx
            .docs
            .deref(from, raw)
            .map_err(|e| format!("responses.{status}: {e}"))?;
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            // No content (204): a null value.
            schemas.push((0, json!({"type": "null"})));
            continue;
        };
        for (media, m) in content {
            let media = essence(media);
            if !media_types.contains(&media) {
                media_types.push(media.clone());
            }
            match m.get("schema") {
                Some(s) if crate::endpoint::is_json(&media) => schemas.push((doc, s.clone())),
                _ => shapeless = true,
            }
        }
    }
    if !any_success {
        return Ok((None, None));
    }
    if shapeless {
        return Ok((accept(&media_types), None));
    }
    schemas.dedup();
    let mut converted = Vec::with_capacity(schemas.len());
    let mut refs = BTreeSet::new();
    for (doc, schema) in &schemas {
        let mut c = cx
            .converter
            .convert(cx.docs, *doc, schema)
            .map_err(|e| format!("responses: {e}"))?;
        refs.append(&mut c.refs);
        converted.push(c.schema);
    }
    let output = match converted.len() {
        0 => None,
        1 => converted.pop(),
        _ => Some(json!({"anyOf": converted})),
    };
    Ok((
        accept(&media_types),
        output.map(|schema| Converted { schema, refs }),
    ))
}

/// A media type without its parameters, lowercase.
fn essence(media: &str) -> String {
    media
        .split(';')
        .next()
        .unwrap_or(media)
        .trim()
        .to_ascii_lowercase()
}

fn accept(media_types: &[String]) -> Option<String> {
    (!media_types.is_empty()).then(|| media_types.join(", "))
}

/// A `security` list: alternatives of scheme names with scopes.
pub(crate) fn requirements(raw: &Value) -> Result<Vec<Requirement>, String> {
    let list = raw.as_array().ok_or("security is not a list")?;
    list.iter()
        .map(|alt| {
            let alt = alt
                .as_object()
                .ok_or("a security requirement is not an object")?;
            Ok(alt
                .iter()
                .map(|(name, scopes)| {
                    let scopes = scopes
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect();
                    (name.clone(), scopes)
                })
                .collect())
        })
        .collect()
}
