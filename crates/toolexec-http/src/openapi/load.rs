//! Reading an OpenAPI document: a file or an `http(s)://` URL, JSON or
//! YAML, OpenAPI 3.0 or 3.1 (Swagger 2.0 is refused, saying how to
//! convert it).

use std::path::{Path, PathBuf};

use serde_json::Value;
use toolexec::Error;
use url::Url;

use crate::client::ClientOptions;
use crate::tls::{Tls, error_chain, next_link};

/// Largest document read.
const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// The OpenAPI version family, which decides how schemas are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// 3.0.x: schemas are an extended subset of JSON Schema draft 5
    /// (`nullable`, boolean `exclusiveMinimum`, siblings of `$ref` ignored).
    V30,
    /// 3.1.x: schemas are JSON Schema 2020-12.
    V31,
}

/// A document as read.
#[derive(Debug)]
pub(crate) struct Document {
    pub(crate) value: Value,
    pub(crate) version: Version,
    /// Where it came from: its directory (for relative `$ref` files) or
    /// its URL (for relative server URLs).
    pub(crate) origin: Origin,
}

#[derive(Debug, Clone)]
pub(crate) enum Origin {
    File(PathBuf),
    Url(Url),
}

/// Reads the document at `spec` (a path, or an `http://`/`https://` URL
/// fetched with `client`'s TLS and limits).
pub(crate) async fn load(spec: &str, client: &ClientOptions) -> Result<Document, Error> {
    let (text, origin) = if spec.starts_with("http://") || spec.starts_with("https://") {
        let url = Url::parse(spec)
            .map_err(|e| Error::invalid_request("spec", format!("{spec:?} is not a URL: {e}")))?;
        (fetch(&url, client).await?, Origin::Url(url))
    } else {
        let path = PathBuf::from(spec);
        (read_file(&path)?, Origin::File(path))
    };
    let value = parse(&text, spec)?;
    let version = version(&value, spec)?;
    Ok(Document {
        value,
        version,
        origin,
    })
}

/// A regular file of at most [`MAX_DOCUMENT_BYTES`], as UTF-8 (a device
/// or a pipe is refused: it could be endless or block).
pub(crate) fn read_file(path: &Path) -> Result<String, Error> {
    use std::io::Read as _;
    let bad = |m: String| Error::invalid_request("spec", format!("{}: {m}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".to_owned()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_DOCUMENT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(bad(format!(
            "larger than the {MAX_DOCUMENT_BYTES} bytes read"
        )));
    }
    String::from_utf8(bytes).map_err(|_| bad("not UTF-8".to_owned()))
}

async fn fetch(url: &Url, options: &ClientOptions) -> Result<String, Error> {
    let unavailable = |m: String| Error::backend_unavailable("openapi", format!("{url}: {m}"));
    let tls = if url.scheme() == "https" {
        options.tls.client_config(url.as_str())?
    } else {
        Tls::unused()
    };
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls.config.clone())
        .connect_timeout(options.connect_timeout)
        .timeout(options.timeout)
        .no_proxy()
        .https_only(url.scheme() == "https")
        .build()
        .map_err(|e| unavailable(format!("cannot build the HTTP client: {e}")))?;
    let mut response = client
        .get(url.clone())
        .header(
            http::header::ACCEPT,
            "application/json, application/yaml, */*",
        )
        .send()
        .await
        .map_err(|e| match tls.failure_in(&e, next_link) {
            Some(f) => unavailable(format!("TLS handshake failed: {}", f.reason)),
            None => unavailable(error_chain(&e, next_link)),
        })?;
    if !response.status().is_success() {
        return Err(unavailable(format!("HTTP {}", response.status())));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| unavailable(error_chain(&e, next_link)))?
    {
        if bytes.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(unavailable(format!(
                "the document is larger than {MAX_DOCUMENT_BYTES} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|_| unavailable("the document is not UTF-8".to_owned()))
}

/// JSON when it starts with `{`, else YAML; errors say where.
pub(crate) fn parse(text: &str, source: &str) -> Result<Value, Error> {
    let bad = |m: String| Error::invalid_request("spec", format!("{source}: {m}"));
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| {
            bad(format!(
                "invalid JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ))
        });
    }
    // Aliases can expand a small text into a huge tree: the nodes built
    // are counted, and a document past the budget is refused as it parses.
    let budget = std::cell::Cell::new(text.len().saturating_mul(4).max(100_000));
    let de = serde_norway::Deserializer::from_str(text);
    let value = serde::de::DeserializeSeed::deserialize(Counted(&budget), de).map_err(|e| {
        let at = e.location().map_or_else(String::new, |l| {
            format!(" at line {} column {}", l.line(), l.column())
        });
        bad(format!("invalid YAML{at}: {e}"))
    })?;
    if !value.is_object() {
        return Err(bad("not an OpenAPI document (not a mapping)".to_owned()));
    }
    Ok(value)
}

/// A [`Value`] deserialized while counting its nodes against a budget.
#[derive(Clone, Copy)]
struct Counted<'b>(&'b std::cell::Cell<usize>);

impl Counted<'_> {
    fn spend<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.0.get().checked_sub(1) {
            Some(left) => {
                self.0.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "the document expands to too many nodes (YAML aliases?)",
            )),
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Counted<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Counted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.spend()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.spend()?;
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::de::DeserializeSeed::deserialize(self, d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend()?;
        let mut out = serde_json::Map::new();
        // Keys as text: YAML writes response codes as integers.
        while let Some(key) = map.next_key_seed(KeyText)? {
            self.spend()?;
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key as text, whatever its YAML type.
struct KeyText;

impl<'de> serde::de::DeserializeSeed<'de> for KeyText {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl serde::de::Visitor<'_> for KeyText {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a scalar key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }
}

fn version(doc: &Value, source: &str) -> Result<Version, Error> {
    let bad = |m: String| Error::invalid_request("spec", format!("{source}: {m}"));
    if let Some(v) = doc.get("swagger") {
        return Err(bad(format!(
            "Swagger {} (OpenAPI 2) is not supported: convert it to OpenAPI 3 first \
             (for example `npx swagger2openapi {source} -o openapi.yaml`)",
            v.as_str().unwrap_or("2.0")
        )));
    }
    let Some(v) = doc.get("openapi").and_then(Value::as_str) else {
        return Err(bad(
            "no \"openapi\" version field: not an OpenAPI document".to_owned()
        ));
    };
    if v.starts_with("3.0") {
        Ok(Version::V30)
    } else if v.starts_with("3.1") || v.starts_with("3.2") {
        Ok(Version::V31)
    } else {
        Err(bad(format!(
            "OpenAPI {v} is not supported (3.0 and 3.1 are)"
        )))
    }
}

/// The document's first server URL, its variables filled with their
/// defaults, made absolute against the document's URL. A document with no
/// `servers` is served from `/` (OpenAPI's default), which only a document
/// read from a URL can resolve.
pub(crate) fn server_url(doc: &Document) -> Result<String, Error> {
    let server = doc.value.pointer("/servers/0");
    let mut url = match server {
        Some(server) => server
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::invalid_request(
                    "base_url",
                    "the document's first server has no url: set base_url",
                )
            })?
            .to_owned(),
        None => "/".to_owned(),
    };
    if let Some(vars) = server
        .and_then(|s| s.get("variables"))
        .and_then(Value::as_object)
    {
        for (name, var) in vars {
            if let Some(default) = var.get("default").and_then(Value::as_str) {
                url = url.replace(&format!("{{{name}}}"), default);
            }
        }
    }
    if Url::parse(&url).is_ok() {
        return Ok(url);
    }
    match &doc.origin {
        Origin::Url(base) => base
            .join(&url)
            .map(String::from)
            .map_err(|e| Error::invalid_request("base_url", format!("server URL {url:?}: {e}"))),
        Origin::File(_) if server.is_none() => Err(Error::invalid_request(
            "base_url",
            "the document lists no servers: set base_url",
        )),
        Origin::File(_) => Err(Error::invalid_request(
            "base_url",
            format!("the document's server URL {url:?} is relative: set base_url"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_parse_and_versions_are_checked() {
        let yaml = "openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        200:\n          description: ok\n";
        let v = parse(yaml, "t.yaml").unwrap();
        // YAML integer keys (response codes) come out as strings.
        assert!(v.pointer("/paths/~1a/get/responses/200").is_some(), "{v}");
        assert_eq!(version(&v, "t").unwrap(), Version::V30);
        let e = version(&serde_json::json!({"swagger": "2.0"}), "old.json").unwrap_err();
        assert!(e.to_string().contains("swagger2openapi"), "{e}");
        let e = parse("{\"openapi\": ", "bad.json").unwrap_err();
        assert!(e.to_string().contains("line 1 column"), "{e}");
        let e = parse("openapi: [3\n  x: :", "bad.yaml").unwrap_err();
        assert!(e.to_string().contains("invalid YAML at line"), "{e}");
        // An alias bomb is refused while it parses.
        let mut bomb = format!("a: &a [{}]\n", vec!["x"; 200].join(", "));
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_owned()
            } else {
                format!("l{}", i - 1)
            };
            bomb.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let e = parse(&bomb, "bomb.yaml").unwrap_err();
        assert!(e.to_string().contains("too many nodes"), "{e}");
        assert!(version(&serde_json::json!({"openapi": "4.0"}), "x").is_err());
    }
}
