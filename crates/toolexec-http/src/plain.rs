//! One HTTP endpoint declared as a tool, for APIs without an OpenAPI
//! document: a URL, query, headers and a JSON body with `{argument}` holes,
//! and the schema of the arguments.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use serde_json::Value;
use toolexec::{Error, Tool, ToolAnnotations};

use crate::client::{Api, ClientOptions, idempotent_method};
use crate::endpoint::{
    BodySource, BodySpec, Location, Media, Operation, Param, PathPart, Source, Style, Template,
};

/// An HTTP endpoint as a tool.
///
/// ```
/// use serde_json::json;
/// use toolexec_http::{ClientOptions, PlainTool};
///
/// let tool = PlainTool {
///     query: [("units".to_owned(), "{units}".to_owned())].into(),
///     ..PlainTool::new(
///         "weather:forecast",
///         "GET",
///         "http://127.0.0.1:8000/v1/forecast/{city}",
///         json!({
///             "type": "object",
///             "properties": {"city": {"type": "string"}, "units": {"enum": ["metric", "imperial"]}},
///             "required": ["city"]
///         }),
///     )
/// };
/// let (definition, _backend) = tool.build(ClientOptions::default()).unwrap();
/// assert_eq!(definition.id.to_string(), "weather:forecast");
///
/// // A hole with no property is refused, naming where it is.
/// let bad = PlainTool::new("w:f", "GET", "http://h/{nope}", json!({"type": "object"}));
/// assert_eq!(bad.build(ClientOptions::default()).unwrap_err().field(), Some("url"));
/// ```
#[derive(Debug, Clone)]
pub struct PlainTool {
    /// The tool's id (`namespace:name`).
    pub id: String,
    /// What it does, for a model.
    pub description: String,
    /// The HTTP method.
    pub method: String,
    /// `http(s)://host[:port]/path`, with `{argument}` holes in the path
    /// (percent-encoded as one segment each; required arguments).
    pub url: String,
    /// Query parameters: values with holes; one whose arguments are all
    /// absent is left out.
    pub query: BTreeMap<String, String>,
    /// Headers with holes (secret headers go in [`ClientOptions::headers`]).
    pub headers: BTreeMap<String, String>,
    /// A JSON body template: a string `"{name}"` becomes the argument's
    /// value, other holes its text; members left `null` are dropped.
    pub body: Option<Value>,
    /// The body's media type (default `application/json`; also
    /// `application/x-www-form-urlencoded`, `multipart/form-data`, or any
    /// text type, sent as the template's text).
    pub body_type: Option<String>,
    /// The arguments' JSON Schema (an object schema).
    pub input_schema: Value,
    /// The output's JSON Schema, when the answer is JSON of a known shape.
    pub output_schema: Option<Value>,
    /// Whether a failed attempt may be sent again (default: by method).
    pub idempotent: Option<bool>,
    /// Search tags.
    pub tags: Vec<String>,
}

impl PlainTool {
    /// A tool with no query, headers or body.
    pub fn new(id: &str, method: &str, url: &str, input_schema: Value) -> Self {
        PlainTool {
            id: id.to_owned(),
            description: String::new(),
            method: method.to_owned(),
            url: url.to_owned(),
            query: BTreeMap::new(),
            headers: BTreeMap::new(),
            body: None,
            body_type: None,
            input_schema,
            output_schema: None,
            idempotent: None,
            tags: Vec::new(),
        }
    }

    /// The tool's definition and backend (an API of its own, with
    /// `options`). Every hole must name a property of the input schema:
    /// `invalid_request` at `url`, `query.<name>`, `headers.<name>` or
    /// `body` otherwise.
    pub fn build(self, options: ClientOptions) -> Result<(Tool, Arc<Operation>), Error> {
        let method =
            Method::from_bytes(self.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
                Error::invalid_request("method", format!("{:?} is not an HTTP method", self.method))
            })?;
        let (base, path) = split_url(&self.url)?;
        let namespace = self.id.split(':').next().unwrap_or_default().to_owned();
        let api = Api::new(&namespace, &base, options)?;
        let properties = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = self
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let check = |field: &str, t: &Template, must_be_required: bool| -> Result<(), Error> {
            for hole in t.holes() {
                if !properties.contains_key(hole) {
                    return Err(Error::invalid_request(
                        field,
                        format!("{{{hole}}} is not a property of input_schema"),
                    ));
                }
                if must_be_required && !required.contains(&hole) {
                    return Err(Error::invalid_request(
                        field,
                        format!("{{{hole}}} fills the URL path, so input_schema must require it"),
                    ));
                }
            }
            Ok(())
        };

        let mut params = Vec::new();
        let mut parts = Vec::new();
        let path_template = Template::parse(&path).map_err(|e| Error::invalid_request("url", e))?;
        check("url", &path_template, true)?;
        for piece in path_template.pieces {
            match piece {
                crate::endpoint::Piece::Text(text) => parts.push(PathPart::Literal(text)),
                crate::endpoint::Piece::Hole(name) => {
                    parts.push(PathPart::Param(params.len()));
                    params.push(param(&name, Location::Path, Source::Arg(name.clone())));
                }
            }
        }
        for (location, field, map) in [
            (Location::Query, "query", &self.query),
            (Location::Header, "headers", &self.headers),
        ] {
            for (name, text) in map {
                let field = format!("{field}.{name}");
                let t = Template::parse(text).map_err(|e| Error::invalid_request(&field, e))?;
                check(&field, &t, false)?;
                if location == Location::Header {
                    crate::client::header(&field, name, "x")?;
                }
                params.push(param(name, location, Source::Template(t)));
            }
        }
        let body = match &self.body {
            None => None,
            Some(template) => {
                check_body(template, &properties)?;
                let media = match self
                    .body_type
                    .as_deref()
                    .map(str::to_ascii_lowercase)
                    .as_deref()
                {
                    None => Media::Json("application/json".to_owned()),
                    Some(m) if crate::endpoint::is_json(m) => Media::Json(m.to_owned()),
                    Some("application/x-www-form-urlencoded") => Media::Form,
                    Some("multipart/form-data") => Media::Multipart { files: Vec::new() },
                    Some(m) => Media::Raw(m.to_owned()),
                };
                Some(BodySpec {
                    media,
                    source: BodySource::Template(template.clone()),
                })
            }
        };
        let idempotent = self
            .idempotent
            .unwrap_or_else(|| idempotent_method(&method));
        let read_only = matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
        let mut builder = Tool::builder(&self.id)
            .description(self.description.clone())
            .input_schema(self.input_schema.clone())
            .annotations(ToolAnnotations {
                read_only_hint: Some(read_only),
                destructive_hint: (!read_only).then_some(method == Method::DELETE),
                idempotent_hint: Some(idempotent),
                open_world_hint: Some(true),
                ..ToolAnnotations::default()
            })
            .tags(self.tags.clone());
        if let Some(output) = &self.output_schema {
            builder = builder.output_schema(output.clone());
        }
        let tool = builder.build()?;
        let operation = Operation {
            api,
            tool: self.id.clone(),
            method,
            path: parts,
            params,
            body,
            accept: None,
            idempotent,
            security: Vec::new(),
        };
        Ok((tool, Arc::new(operation)))
    }
}

fn param(name: &str, location: Location, source: Source) -> Param {
    Param {
        name: name.to_owned(),
        location,
        source,
        style: Style::default_for(location),
        explode: false,
        allow_reserved: false,
    }
}

/// `http://host:port` and the path (with its holes) of a URL template.
fn split_url(url: &str) -> Result<(String, String), Error> {
    let bad = |m: String| Error::invalid_request("url", m);
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            bad(format!(
                "{url:?}: only http:// and https:// URLs are supported"
            ))
        })?;
    if url.contains('?') || url.contains('#') {
        return Err(bad(format!("{url:?}: put query parameters in `query`")));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.contains('{') {
        return Err(bad(format!("{url:?}: holes are allowed in the path only")));
    }
    let scheme_len = url.len() - rest.len();
    Ok((
        format!("{}{authority}", &url[..scheme_len]),
        path.to_owned(),
    ))
}

/// Every hole of a body template names a property.
fn check_body(template: &Value, properties: &serde_json::Map<String, Value>) -> Result<(), Error> {
    match template {
        Value::String(s) => {
            let t = Template::parse(s).map_err(|e| Error::invalid_request("body", e))?;
            for hole in t.holes() {
                if !properties.contains_key(hole) {
                    return Err(Error::invalid_request(
                        "body",
                        format!("{{{hole}}} is not a property of input_schema"),
                    ));
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(|v| check_body(v, properties)),
        Value::Object(map) => map.values().try_for_each(|v| check_body(v, properties)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_base_and_path() {
        assert_eq!(
            split_url("https://api.example.com:8443/v1/{city}/x").unwrap(),
            (
                "https://api.example.com:8443".to_owned(),
                "/v1/{city}/x".to_owned()
            )
        );
        assert_eq!(
            split_url("http://h").unwrap(),
            ("http://h".to_owned(), String::new())
        );
        for bad in ["ftp://h/x", "http://h/x?y=1", "http://{h}/x"] {
            assert_eq!(split_url(bad).unwrap_err().field(), Some("url"), "{bad}");
        }
    }
}
