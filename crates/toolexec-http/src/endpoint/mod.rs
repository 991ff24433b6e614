//! One HTTP operation as a tool: [`Operation`] turns validated arguments
//! into a request ([`RequestParts`]) and the response into a tool output.
//! OpenAPI operations and plain tools both end up here.

mod encode;
mod parts;
mod response;

use std::sync::Arc;

use http::Method;
use serde_json::Value;
use tokio::time::Instant;
use toolexec::backend::{BoxFuture, Call};
use toolexec::{Backend, Error, ToolOutput};

use crate::auth::Requirement;
use crate::client::Api;

pub(crate) use self::encode::{Location, Style};
pub(crate) use self::parts::RequestParts;
pub(crate) use self::response::is_json;

/// The backend of one HTTP tool: the API it belongs to and how its
/// arguments make a request. Built by [`openapi::import`](crate::openapi::import)
/// and [`PlainTool`](crate::PlainTool).
pub struct Operation {
    pub(crate) api: Arc<Api>,
    /// The tool's id, for errors.
    pub(crate) tool: String,
    pub(crate) method: Method,
    /// The path after the API's base URL.
    pub(crate) path: Vec<PathPart>,
    pub(crate) params: Vec<Param>,
    pub(crate) body: Option<BodySpec>,
    /// The `Accept` header: the media types the operation answers with.
    pub(crate) accept: Option<String>,
    /// Whether a failed attempt may be sent again.
    pub(crate) idempotent: bool,
    /// Security requirement alternatives (empty: none).
    pub(crate) security: Vec<Requirement>,
}

impl std::fmt::Debug for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operation")
            .field("tool", &self.tool)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

/// A piece of the path template.
#[derive(Debug, Clone)]
pub(crate) enum PathPart {
    /// Sent as written (already valid in a URL path).
    Literal(String),
    /// The parameter at this index of [`Operation::params`].
    Param(usize),
}

/// Where a parameter's value comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// The argument (property) of this name, serialized by style.
    Arg(String),
    /// The argument of this name, sent as JSON text (a parameter with
    /// `content: application/json`).
    JsonArg(String),
    /// A plain tool's template: text with `{argument}` holes.
    Template(Template),
}

/// A parameter of the request.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    /// The name on the wire.
    pub(crate) name: String,
    pub(crate) location: Location,
    pub(crate) source: Source,
    pub(crate) style: Style,
    pub(crate) explode: bool,
    /// Reserved characters go unencoded in the query (`allowReserved`).
    pub(crate) allow_reserved: bool,
}

/// The request body.
#[derive(Debug, Clone)]
pub(crate) struct BodySpec {
    /// The media type sent.
    pub(crate) media: Media,
    pub(crate) source: BodySource,
}

/// How a body is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Media {
    /// JSON (`application/json` or a `+json` type, named here).
    Json(String),
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `multipart/form-data`; the fields named here are sent as files
    /// (their text as the content, the field name as the file name).
    Multipart { files: Vec<String> },
    /// Text or bytes sent as given (a string argument).
    Raw(String),
}

/// Where the body comes from.
#[derive(Debug, Clone)]
pub(crate) enum BodySource {
    /// The argument of this name.
    Arg(String),
    /// A plain tool's JSON template: strings `"{argument}"` are replaced by
    /// the argument's value, other `{argument}` holes by its text.
    Template(Value),
}

/// Text with `{argument}` holes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub(crate) pieces: Vec<Piece>,
}

/// A piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Hole(String),
}

impl Template {
    /// Parses `text`; `{{` and `}}` are literal braces. An unclosed or
    /// empty hole is an error message.
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(format!("unclosed {{ in {text:?}")),
                        }
                    }
                    let name = name.trim().to_owned();
                    if name.is_empty() {
                        return Err(format!("empty {{}} in {text:?}"));
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Hole(name));
                }
                '}' => return Err(format!("unmatched }} in {text:?}")),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// The argument names used.
    pub(crate) fn holes(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Hole(name) => Some(name.as_str()),
            Piece::Text(_) => None,
        })
    }

    /// The text with every hole filled from `args`, each value transformed
    /// by `encode`; `None` when an argument is missing.
    pub(crate) fn render(&self, args: &Value, encode: impl Fn(&str) -> String) -> Option<String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Hole(name) => out.push_str(&encode(&encode::text_of(args.get(name)?))),
            }
        }
        Some(out)
    }
}

impl Backend for Operation {
    fn kind(&self) -> &str {
        "http"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        Box::pin(async move {
            let timeout = self.api.options.timeout;
            let deadline = Instant::now() + timeout;
            let work = async {
                let _slot = self.api.slot().await?;
                let response = self
                    .api
                    .send(
                        &self.tool,
                        self.idempotent,
                        deadline,
                        &self.security,
                        || self.request(&call.args),
                    )
                    .await?;
                response::read(&self.api, &self.tool, response).await
            };
            match tokio::time::timeout_at(deadline, work).await {
                Ok(result) => result,
                Err(_) => Err(Error::Timeout {
                    tool: self.tool.clone(),
                    after: timeout,
                }),
            }
        })
    }
}

impl Operation {
    /// The request for `args` (validated against the input schema, so a
    /// missing path argument is a schema the importer got wrong: it is
    /// reported as `invalid_request` naming it).
    pub(crate) fn request(&self, args: &Value) -> Result<RequestParts, Error> {
        let mut url = self.api.base_url().clone();
        // The base path has no trailing `/`, except the root's own.
        let mut path = url.path().trim_end_matches('/').to_owned();
        for part in &self.path {
            match part {
                PathPart::Literal(text) => path.push_str(text),
                PathPart::Param(i) => {
                    let param = &self.params[*i];
                    let field = || format!("args.{}", param_property(param));
                    let text = encode::path_value(param, args)?.ok_or_else(|| {
                        Error::invalid_request(field(), "missing: it fills the URL path")
                    })?;
                    if text.is_empty() {
                        return Err(Error::invalid_request(
                            field(),
                            "empty: it fills a URL path segment",
                        ));
                    }
                    path.push_str(&text);
                }
            }
        }
        url.set_path(&path);
        // `.` and `..` segments (encoded or not) are resolved by URL
        // parsing: an argument must not move the request to another path.
        if url.path() != path {
            return Err(Error::invalid_request(
                "args",
                format!(
                    "the path arguments would change the request's path ({path} became {})",
                    url.path()
                ),
            ));
        }
        let mut parts = RequestParts::new(self.method.clone(), url);
        if let Some(accept) = &self.accept {
            parts.plain_header(http::header::ACCEPT.as_str(), accept)?;
        }
        for param in &self.params {
            match param.location {
                Location::Path => {}
                Location::Query => encode::query(param, args, &mut parts),
                Location::Header => {
                    if let Some(value) = encode::header_value(param, args) {
                        let field = format!("args.{}", param_property(param));
                        parts.header_at(&field, &param.name, &value)?;
                    }
                }
                Location::Cookie => encode::cookie(param, args, &mut parts),
            }
        }
        if let Some(body) = &self.body {
            parts.body(body, args)?;
        }
        Ok(parts)
    }
}

/// The argument a parameter reads, for error fields.
fn param_property(param: &Param) -> &str {
    match &param.source {
        Source::Arg(p) | Source::JsonArg(p) => p,
        Source::Template(t) => t.holes().next().unwrap_or(&param.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_holes_and_escaped_braces() {
        let t = Template::parse("/v1/{city}/days-{ n }{{x}}").unwrap();
        assert_eq!(
            t.pieces,
            [
                Piece::Text("/v1/".into()),
                Piece::Hole("city".into()),
                Piece::Text("/days-".into()),
                Piece::Hole("n".into()),
                Piece::Text("{x}".into()),
            ]
        );
        let args = serde_json::json!({"city": "a b", "n": 3});
        assert_eq!(
            t.render(&args, |s| s.replace(' ', "%20")).unwrap(),
            "/v1/a%20b/days-3{x}"
        );
        assert_eq!(
            t.render(&serde_json::json!({"city": "x"}), str::to_owned),
            None
        );
        for bad in ["{", "a{}", "}", "{a"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }
}
