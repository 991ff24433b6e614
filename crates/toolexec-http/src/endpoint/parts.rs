//! A request being put together: URL, query pairs (already encoded),
//! headers, cookies and body, made a reqwest request at the end (after the
//! credentials were added).

use http::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde_json::Value;
use toolexec::Error;
use url::Url;

use super::encode::{self, COOKIE_VALUE, QUERY};
use super::{BodySource, BodySpec, Media};

/// The body, encoded.
#[derive(Debug)]
enum Body {
    None,
    Bytes {
        content_type: String,
        bytes: Vec<u8>,
    },
    /// `multipart/form-data` fields: name, text (objects and arrays as
    /// JSON text), and whether it is a file. Kept as data, since a reqwest
    /// form cannot be cloned.
    Multipart(Vec<(String, String, bool)>),
}

/// A request before credentials are added and it is sent.
#[derive(Debug)]
pub(crate) struct RequestParts {
    method: Method,
    url: Url,
    /// `name=value` pieces, each already percent-encoded.
    query: Vec<String>,
    headers: HeaderMap,
    /// `name=value` pairs of the `Cookie` header, encoded.
    cookies: Vec<String>,
    body: Body,
}

impl RequestParts {
    pub(crate) fn new(method: Method, url: Url) -> Self {
        RequestParts {
            method,
            url,
            query: Vec::new(),
            headers: HeaderMap::new(),
            cookies: Vec::new(),
            body: Body::None,
        }
    }

    /// Adds a query piece already encoded (`name=value`, or any text a
    /// style makes).
    pub(crate) fn query_encoded(&mut self, piece: String) {
        self.query.push(piece);
    }

    /// Sets `name=value` (a credential), both percent-encoded, removing
    /// any piece an argument made with the same name: servers that read the
    /// first value would otherwise take the argument's.
    pub(crate) fn query_pair(&mut self, name: &str, value: &str) {
        let name = encode::escape(name, QUERY);
        let prefix = format!("{name}=");
        self.query.retain(|piece| !piece.starts_with(&prefix));
        self.query
            .push(format!("{name}={}", encode::escape(value, QUERY)));
    }

    /// Sets a credential cookie, replacing one an argument made.
    pub(crate) fn secret_cookie(&mut self, name: &str, value: &str) {
        let prefix = format!("{name}=");
        self.cookies.retain(|c| !c.starts_with(&prefix));
        self.cookie(name, value);
    }

    /// Adds a cookie, what its value cannot carry percent-encoded.
    pub(crate) fn cookie(&mut self, name: &str, value: &str) {
        self.cookies
            .push(format!("{name}={}", encode::escape(value, COOKIE_VALUE)));
    }

    /// A header from an argument: a bad value is `invalid_request` at
    /// `field`.
    pub(crate) fn header_at(&mut self, field: &str, name: &str, value: &str) -> Result<(), Error> {
        let (name, value) = crate::client::header(field, name, value)?;
        self.headers.append(name, value);
        Ok(())
    }

    /// A header of the tool's definition (`Accept`).
    pub(crate) fn plain_header(&mut self, name: &str, value: &str) -> Result<(), Error> {
        self.header_at("accept", name, value)
    }

    /// A credential header: replaces any value an argument gave, is marked
    /// sensitive, and a bad value is reported without quoting it.
    pub(crate) fn secret_header(&mut self, name: &str, value: &str) -> Result<(), Error> {
        let (name, value) = crate::client::header(&format!("auth.{name}"), name, value)?;
        self.headers.insert(name, value);
        Ok(())
    }

    /// The API's own headers (secrets the operator configured): they
    /// replace any value an argument gave.
    pub(crate) fn operator_headers(&mut self, headers: &[(HeaderName, HeaderValue)]) {
        for (name, value) in headers {
            self.headers.insert(name.clone(), value.clone());
        }
    }

    /// W3C trace context of the current span (`traceparent`, `tracestate`),
    /// replacing any an argument gave, so the provider continues the trace.
    pub(crate) fn trace_context(&mut self) {
        let Some(trace) = toolexec::telemetry::current_trace() else {
            return;
        };
        if let Ok(v) = HeaderValue::from_str(&trace.traceparent) {
            self.headers
                .insert(HeaderName::from_static("traceparent"), v);
        }
        if let Some(v) = trace
            .tracestate
            .and_then(|s| HeaderValue::from_str(&s).ok())
        {
            self.headers
                .insert(HeaderName::from_static("tracestate"), v);
        }
    }

    /// The `Authorization` header (replacing one set before).
    pub(crate) fn authorization(&mut self, value: &str) -> Result<(), Error> {
        let (_, value) = crate::client::header("auth", AUTHORIZATION.as_str(), value)?;
        self.headers.insert(AUTHORIZATION, value);
        Ok(())
    }

    /// Encodes the body from `args`.
    pub(crate) fn body(&mut self, spec: &BodySpec, args: &Value) -> Result<(), Error> {
        let value = match &spec.source {
            BodySource::Arg(name) => match args.get(name) {
                Some(v) => v.clone(),
                None => return Ok(()),
            },
            BodySource::Template(template) => fill(template, args),
        };
        self.body = match &spec.media {
            Media::Json(mime) => Body::Bytes {
                content_type: mime.clone(),
                bytes: serde_json::to_vec(&value).expect("a JSON value serializes"),
            },
            Media::Form => {
                let mut form = url::form_urlencoded::Serializer::new(String::new());
                for (name, text) in fields(&value) {
                    form.append_pair(&name, &text);
                }
                Body::Bytes {
                    content_type: "application/x-www-form-urlencoded".to_owned(),
                    bytes: form.finish().into_bytes(),
                }
            }
            Media::Multipart { files } => Body::Multipart(
                fields(&value)
                    .into_iter()
                    .map(|(name, text)| {
                        let file = files.contains(&name);
                        (name, text, file)
                    })
                    .collect(),
            ),
            Media::Raw(mime) => Body::Bytes {
                content_type: mime.clone(),
                bytes: encode::text_of(&value).into_bytes(),
            },
        };
        Ok(())
    }

    /// The reqwest request.
    pub(crate) fn into_request(
        self,
        client: &reqwest::Client,
    ) -> Result<reqwest::RequestBuilder, Error> {
        let mut url = self.url;
        if !self.query.is_empty() {
            let mut query = url.query().map(str::to_owned).unwrap_or_default();
            for piece in &self.query {
                if !query.is_empty() {
                    query.push('&');
                }
                query.push_str(piece);
            }
            url.set_query(Some(&query));
        }
        let mut headers = self.headers;
        if !self.cookies.is_empty() {
            let (name, value) =
                crate::client::header("cookies", COOKIE.as_str(), &self.cookies.join("; "))?;
            headers.insert(name, value);
        }
        let mut request = client.request(self.method, url);
        match self.body {
            Body::None => {}
            Body::Bytes {
                content_type,
                bytes,
            } => {
                if !headers.contains_key(CONTENT_TYPE) {
                    let (name, value) = crate::client::header(
                        "content_type",
                        CONTENT_TYPE.as_str(),
                        &content_type,
                    )?;
                    headers.insert(name, value);
                }
                request = request.body(bytes);
            }
            Body::Multipart(fields) => {
                let mut form = reqwest::multipart::Form::new();
                for (name, text, file) in fields {
                    form = if file {
                        let part = reqwest::multipart::Part::bytes(text.into_bytes())
                            .file_name(name.clone());
                        form.part(name, part)
                    } else {
                        form.text(name, text)
                    };
                }
                request = request.multipart(form);
            }
        }
        Ok(request.headers(headers))
    }
}

/// The fields of a form body: an object's members as text; anything else
/// is one field named `body`.
fn fields(value: &Value) -> Vec<(String, String)> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(name, v)| match v {
                // Arrays of scalars repeat the field, as HTML forms do.
                Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                    items
                        .iter()
                        .map(|i| (name.clone(), encode::text_of(i)))
                        .collect()
                }
                Value::Null => Vec::new(),
                v => vec![(name.clone(), encode::text_of(v))],
            })
            .collect(),
        Value::Null => Vec::new(),
        v => vec![("body".to_owned(), encode::text_of(v))],
    }
}

/// A JSON template filled from `args`: a string that is exactly
/// `"{name}"` becomes the argument's value (any JSON type; absent: `null`),
/// other strings with holes get the arguments' text.
fn fill(template: &Value, args: &Value) -> Value {
    match template {
        Value::String(s) => {
            let Ok(t) = super::Template::parse(s) else {
                return template.clone();
            };
            match t.pieces.as_slice() {
                [super::Piece::Hole(name)] => args.get(name).cloned().unwrap_or(Value::Null),
                _ => t
                    .render(args, str::to_owned)
                    .map_or(Value::Null, Value::String),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| fill(v, args)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill(v, args)))
                .filter(|(_, v)| !v.is_null())
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_templates_keep_types_and_drop_missing_members() {
        let template =
            json!({"q": "{q}", "n": "{n}", "label": "city: {q}", "opt": "{missing}", "k": 1});
        let filled = fill(&template, &json!({"q": "Oslo", "n": 3}));
        assert_eq!(
            filled,
            json!({"q": "Oslo", "n": 3, "label": "city: Oslo", "k": 1})
        );
    }

    #[test]
    fn form_fields_repeat_arrays_and_stringify_objects() {
        let f = fields(&json!({"a": [1, "x"], "b": {"c": true}, "d": null, "e": "é"}));
        assert_eq!(
            f,
            [
                ("a".to_owned(), "1".to_owned()),
                ("a".to_owned(), "x".to_owned()),
                ("b".to_owned(), r#"{"c":true}"#.to_owned()),
                ("e".to_owned(), "é".to_owned()),
            ]
        );
    }
}
