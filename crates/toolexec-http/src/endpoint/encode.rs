//! Parameter serialization as OpenAPI defines it: `style` and `explode`
//! for path (`simple`, `label`, `matrix`), query (`form`,
//! `spaceDelimited`, `pipeDelimited`, `deepObject`), header (`simple`) and
//! cookie (`form`) parameters, with percent-encoding where the URL needs it.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use toolexec::Error;

use super::parts::RequestParts;
use super::{Param, Source};

/// Everything but the unreserved characters (RFC 3986, 2.3): safe in a
/// path segment and in a query name or value.
pub(crate) const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What a cookie value cannot carry as it is (RFC 6265 `cookie-octet`):
/// controls, space, `"`, `,`, `;`, `\\`, and `%` (so the encoding can be
/// undone); everything else goes as written, as servers read cookies
/// without decoding them.
pub(crate) const COOKIE_VALUE: &AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b',')
    .add(b';')
    .add(b'\\')
    .add(b'%');

/// With `allowReserved`: the reserved characters (RFC 3986, 2.2) stay too,
/// except `&`, `=` and `#`, which would end the value.
const QUERY_RESERVED: &AsciiSet = &QUERY
    .remove(b':')
    .remove(b'/')
    .remove(b'?')
    .remove(b'[')
    .remove(b']')
    .remove(b'@')
    .remove(b'!')
    .remove(b'$')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';');

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    Path,
    Query,
    Header,
    Cookie,
}

/// A serialization style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Simple,
    Label,
    Matrix,
    Form,
    SpaceDelimited,
    PipeDelimited,
    DeepObject,
}

impl Style {
    /// Parses an OpenAPI `style`.
    pub(crate) fn parse(text: &str) -> Option<Style> {
        Some(match text {
            "simple" => Style::Simple,
            "label" => Style::Label,
            "matrix" => Style::Matrix,
            "form" => Style::Form,
            "spaceDelimited" => Style::SpaceDelimited,
            "pipeDelimited" => Style::PipeDelimited,
            "deepObject" => Style::DeepObject,
            _ => return None,
        })
    }

    /// The default style of a location.
    pub(crate) fn default_for(location: Location) -> Style {
        match location {
            Location::Path | Location::Header => Style::Simple,
            Location::Query | Location::Cookie => Style::Form,
        }
    }

    /// Whether OpenAPI allows this style at `location`.
    pub(crate) fn allowed_at(self, location: Location) -> bool {
        match location {
            Location::Path => matches!(self, Style::Simple | Style::Label | Style::Matrix),
            Location::Query => matches!(
                self,
                Style::Form | Style::SpaceDelimited | Style::PipeDelimited | Style::DeepObject
            ),
            Location::Header => self == Style::Simple,
            Location::Cookie => self == Style::Form,
        }
    }
}

pub(crate) fn escape(text: &str, set: &'static AsciiSet) -> String {
    utf8_percent_encode(text, set).to_string()
}

/// A scalar's text: strings as they are, numbers and booleans as JSON
/// writes them, `null` empty; arrays and objects as JSON text.
pub(crate) fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        other => other.to_string(),
    }
}

/// The value a parameter sends: `None` when its argument is absent (or
/// `null`).
enum Resolved<'a> {
    /// An argument, to serialize by style.
    Value(&'a Value),
    /// Text made already (a template, JSON content); `encoded`
    /// when it may go into a URL as it is.
    Text { text: String, encoded: bool },
}

fn resolve<'a>(param: &Param, args: &'a Value, set: &'static AsciiSet) -> Option<Resolved<'a>> {
    match &param.source {
        Source::Arg(name) => args.get(name).filter(|v| !v.is_null()).map(Resolved::Value),
        Source::JsonArg(name) => args.get(name).map(|v| Resolved::Text {
            text: v.to_string(),
            encoded: false,
        }),
        Source::Template(t) => t
            .render(args, |s| escape(s, set))
            .map(|text| Resolved::Text {
                text,
                encoded: true,
            }),
    }
}

/// The members of an object, or the items of an array, as text.
fn items(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::Array(items) => Some(items.iter().map(text_of).collect()),
        _ => None,
    }
}

fn members(value: &Value) -> Option<Vec<(String, String)>> {
    match value {
        Value::Object(map) => Some(map.iter().map(|(k, v)| (k.clone(), text_of(v))).collect()),
        _ => None,
    }
}

/// A path parameter's text, encoded for the path.
pub(crate) fn path_value(param: &Param, args: &Value) -> Result<Option<String>, Error> {
    let set = QUERY;
    let Some(resolved) = resolve(param, args, set) else {
        return Ok(None);
    };
    let value = match resolved {
        Resolved::Text { text, encoded } => {
            return Ok(Some(if encoded { text } else { escape(&text, set) }));
        }
        Resolved::Value(v) => v,
    };
    let e = |s: &str| escape(s, set);
    let name = e(&param.name);
    let (prefix, sep, kv) = match (param.style, param.explode) {
        (Style::Label, false) => (".".to_owned(), ",", ","),
        (Style::Label, true) => (".".to_owned(), ".", "="),
        (Style::Matrix, false) => (format!(";{name}="), ",", ","),
        (Style::Matrix, true) => (";".to_owned(), ";", "="),
        (_, false) => (String::new(), ",", ","),
        (_, true) => (String::new(), ",", "="),
    };
    let body = if let Some(items) = items(value) {
        if param.style == Style::Matrix && param.explode {
            return Ok(Some(
                items.iter().map(|i| format!(";{name}={}", e(i))).collect(),
            ));
        }
        items.iter().map(|i| e(i)).collect::<Vec<_>>().join(sep)
    } else if let Some(members) = members(value) {
        members
            .iter()
            .map(|(k, v)| format!("{}{kv}{}", e(k), e(v)))
            .collect::<Vec<_>>()
            .join(sep)
    } else if param.style == Style::Matrix && param.explode {
        return Ok(Some(format!(";{name}={}", e(&text_of(value)))));
    } else {
        e(&text_of(value))
    };
    Ok(Some(format!("{prefix}{body}")))
}

/// Adds a query parameter's pieces.
pub(crate) fn query(param: &Param, args: &Value, parts: &mut RequestParts) {
    let set = if param.allow_reserved {
        QUERY_RESERVED
    } else {
        QUERY
    };
    let e = |s: &str| escape(s, set);
    let name = e(&param.name);
    let Some(resolved) = resolve(param, args, set) else {
        return;
    };
    let value = match resolved {
        Resolved::Text { text, encoded } => {
            let text = if encoded { text } else { e(&text) };
            parts.query_encoded(format!("{name}={text}"));
            return;
        }
        Resolved::Value(v) => v,
    };
    if let Some(items) = items(value) {
        let joined = |sep: &str| items.iter().map(|i| e(i)).collect::<Vec<_>>().join(sep);
        match (param.style, param.explode) {
            (Style::SpaceDelimited, _) => parts.query_encoded(format!("{name}={}", joined("%20"))),
            (Style::PipeDelimited, _) => parts.query_encoded(format!("{name}={}", joined("|"))),
            (_, true) => {
                for item in &items {
                    parts.query_encoded(format!("{name}={}", e(item)));
                }
            }
            (_, false) => parts.query_encoded(format!("{name}={}", joined(","))),
        }
    } else if let Value::Object(map) = value {
        match (param.style, param.explode) {
            (Style::DeepObject, _) => deep_object(&name, map, parts, &e),
            (_, true) => {
                for (k, v) in map {
                    parts.query_encoded(format!("{}={}", e(k), e(&text_of(v))));
                }
            }
            (_, false) => {
                let flat: Vec<String> = map
                    .iter()
                    .flat_map(|(k, v)| [e(k), e(&text_of(v))])
                    .collect();
                parts.query_encoded(format!("{name}={}", flat.join(",")));
            }
        }
    } else {
        parts.query_encoded(format!("{name}={}", e(&text_of(value))));
    }
}

/// `name[key]=value`, nested objects deeper (`name[a][b]=v`), arrays as
/// repeated `name[key]=item`.
fn deep_object(
    prefix: &str,
    map: &serde_json::Map<String, Value>,
    parts: &mut RequestParts,
    e: &dyn Fn(&str) -> String,
) {
    for (k, v) in map {
        let key = format!("{prefix}%5B{}%5D", e(k));
        match v {
            Value::Object(inner) => deep_object(&key, inner, parts, e),
            Value::Array(items) => {
                for item in items {
                    parts.query_encoded(format!("{key}={}", e(&text_of(item))));
                }
            }
            Value::Null => {}
            v => parts.query_encoded(format!("{key}={}", e(&text_of(v)))),
        }
    }
}

/// A header parameter's value (`simple` style; no percent-encoding).
pub(crate) fn header_value(param: &Param, args: &Value) -> Option<String> {
    match resolve(param, args, QUERY)? {
        Resolved::Text { text, encoded } => Some(if encoded {
            // A template's holes were encoded for a URL: render again raw.
            match &param.source {
                Source::Template(t) => t.render(args, str::to_owned)?,
                _ => text,
            }
        } else {
            text
        }),
        Resolved::Value(v) => Some(if let Some(items) = items(v) {
            items.join(",")
        } else if let Some(members) = members(v) {
            let kv = if param.explode { "=" } else { "," };
            members
                .iter()
                .map(|(k, v)| format!("{k}{kv}{v}"))
                .collect::<Vec<_>>()
                .join(",")
        } else {
            text_of(v)
        }),
    }
}

/// Adds a cookie parameter (`form` style).
pub(crate) fn cookie(param: &Param, args: &Value, parts: &mut RequestParts) {
    let Some(resolved) = resolve(param, args, QUERY) else {
        return;
    };
    match resolved {
        Resolved::Text { .. } => {
            if let Some(text) = header_value(param, args) {
                parts.cookie(&param.name, &text);
            }
        }
        Resolved::Value(v) => match items(v) {
            Some(items) if param.explode => {
                for item in items {
                    parts.cookie(&param.name, &item);
                }
            }
            Some(items) => parts.cookie(&param.name, &items.join(",")),
            None => parts.cookie(&param.name, &header_value(param, args).unwrap_or_default()),
        },
    }
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;

    fn param(name: &str, location: Location, style: Style, explode: bool) -> Param {
        Param {
            name: name.to_owned(),
            location,
            source: Source::Arg(name.to_owned()),
            style,
            explode,
            allow_reserved: false,
        }
    }

    fn query_string(p: &Param, args: Value) -> String {
        let mut parts = RequestParts::new(Method::GET, url::Url::parse("http://h/").unwrap());
        query(p, &args, &mut parts);
        // reqwest is built without a crypto provider: give it a TLS setup.
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::Tls::unused().config)
            .build()
            .unwrap();
        let request = parts.into_request(&client).unwrap().build().unwrap();
        request.url().query().unwrap_or("").to_owned()
    }

    #[test]
    fn path_styles_follow_the_openapi_table() {
        let cases = [
            (Style::Simple, false, json!("a b/c"), "a%20b%2Fc"),
            (Style::Simple, false, json!([3, 4, 5]), "3,4,5"),
            (
                Style::Simple,
                false,
                json!({"R": 100, "G": 200}),
                "G,200,R,100",
            ),
            (
                Style::Simple,
                true,
                json!({"R": 100, "G": 200}),
                "G=200,R=100",
            ),
            (Style::Label, false, json!([3, 4, 5]), ".3,4,5"),
            (Style::Label, true, json!([3, 4, 5]), ".3.4.5"),
            (Style::Matrix, false, json!(5), ";color=5"),
            (Style::Matrix, false, json!([3, 4, 5]), ";color=3,4,5"),
            (
                Style::Matrix,
                true,
                json!([3, 4, 5]),
                ";color=3;color=4;color=5",
            ),
            (
                Style::Matrix,
                true,
                json!({"R": 100, "G": 200}),
                ";G=200;R=100",
            ),
        ];
        for (style, explode, value, expected) in cases {
            let p = param("color", Location::Path, style, explode);
            let got = path_value(&p, &json!({"color": value})).unwrap().unwrap();
            assert_eq!(got, expected, "{style:?} explode={explode} {value}");
        }
    }

    #[test]
    fn query_styles_follow_the_openapi_table() {
        let cases = [
            (
                Style::Form,
                true,
                json!("blue sky&x=1"),
                "color=blue%20sky%26x%3D1",
            ),
            (Style::Form, true, json!([3, 4]), "color=3&color=4"),
            (Style::Form, false, json!([3, 4]), "color=3,4"),
            (Style::Form, true, json!({"R": 1, "G": 2}), "G=2&R=1"),
            (Style::Form, false, json!({"R": 1, "G": 2}), "color=G,2,R,1"),
            (Style::SpaceDelimited, false, json!([3, 4]), "color=3%204"),
            (Style::PipeDelimited, false, json!([3, 4]), "color=3|4"),
            (
                Style::DeepObject,
                true,
                json!({"R": 1, "G": {"x": true}}),
                "color%5BG%5D%5Bx%5D=true&color%5BR%5D=1",
            ),
        ];
        for (style, explode, value, expected) in cases {
            let p = param("color", Location::Query, style, explode);
            assert_eq!(
                query_string(&p, json!({"color": value})),
                expected,
                "{style:?} explode={explode}"
            );
        }
        // Absent and null arguments send nothing.
        let p = param("color", Location::Query, Style::Form, true);
        assert_eq!(query_string(&p, json!({"color": null})), "");
        assert_eq!(query_string(&p, json!({})), "");
    }

    #[test]
    fn allow_reserved_keeps_reserved_characters_but_not_separators() {
        let mut p = param("path", Location::Query, Style::Form, true);
        p.allow_reserved = true;
        assert_eq!(
            query_string(&p, json!({"path": "a/b:c&d=e"})),
            "path=a/b:c%26d%3De"
        );
    }

    #[test]
    fn cookies_encode_only_what_a_cookie_cannot_carry() {
        let p = param("session", Location::Cookie, Style::Form, true);
        let mut parts = RequestParts::new(Method::GET, url::Url::parse("http://h/").unwrap());
        cookie(&p, &json!({"session": "a b;c/d%"}), &mut parts);
        cookie(
            &param("ids", Location::Cookie, Style::Form, false),
            &json!({"ids": [1, 2]}),
            &mut parts,
        );
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::Tls::unused().config)
            .build()
            .unwrap();
        let request = parts.into_request(&client).unwrap().build().unwrap();
        assert_eq!(
            request.headers()["cookie"],
            "session=a%20b%3Bc/d%25; ids=1%2C2"
        );
    }

    #[test]
    fn headers_are_simple_and_not_encoded() {
        let p = param("X-Tags", Location::Header, Style::Simple, false);
        assert_eq!(
            header_value(&p, &json!({"X-Tags": ["a b", "c"]})).unwrap(),
            "a b,c"
        );
        let p = param("X-Obj", Location::Header, Style::Simple, true);
        assert_eq!(
            header_value(&p, &json!({"X-Obj": {"a": 1}})).unwrap(),
            "a=1"
        );
    }
}
