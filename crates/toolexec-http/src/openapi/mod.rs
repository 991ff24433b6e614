//! OpenAPI 3.0 and 3.1 documents as tools: each operation one tool.
//!
//! - **Id**: `<name>:<operationId>`, made a valid tool name
//!   ([`toolexec::names`]); without an `operationId`, the method and path
//!   (`get_pets_petId`). Names that collide after mapping keep one
//!   operation, deterministically; the others are skipped with a reason.
//! - **Input schema**: one object with a property per parameter (path,
//!   query, header, cookie; a name two locations share becomes
//!   `query.<name>` for the later one) and `body` for the request body
//!   (JSON, form, multipart; text and bytes as a string). Referenced
//!   schemas travel in `$defs`, so recursive schemas stay finite.
//! - **Output schema**: the JSON schema of the 2xx responses, when they
//!   are JSON (off with [`ImportOptions::output_schemas`] for documents
//!   whose schemas do not match what the server sends).
//! - **Skipped** operations (unsupported body types, broken `$ref`s,
//!   undeclared path parameters, ...) are listed with a reason in
//!   [`Import::skipped`]; the rest are imported.

mod load;
mod operation;
mod refs;
mod schema;
mod select;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;
use toolexec::{Backend, Error, Tool};

use self::load::Version;
use self::operation::{Context, Declared, METHODS};
use self::refs::Documents;
use self::schema::Converter;
pub use self::select::{Filter, Selection};
use crate::auth::{Credentials, KeyIn, Scheme};
use crate::client::{Api, ClientOptions};
use crate::endpoint::Operation;

/// What to import, and how to call it.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The API's name: the namespace of its tools.
    pub name: String,
    /// The document: a file path, or an `http://` / `https://` URL.
    pub spec: String,
    /// Where requests go; default: the document's first server (relative
    /// server URLs resolved against the document's URL).
    pub base_url: Option<String>,
    /// Client settings: timeout, concurrency, retries, TLS, headers.
    pub client: ClientOptions,
    /// Credentials by security scheme name.
    pub credentials: Credentials,
    /// Which operations to import.
    pub select: Selection,
    /// operationIds that may be retried although their method is not
    /// idempotent (operations with `x-idempotent: true` may be too).
    pub idempotent: BTreeSet<String>,
    /// Give tools the output schema of their success responses (default).
    pub output_schemas: bool,
}

impl ImportOptions {
    /// Defaults for the API `name` described at `spec`.
    pub fn new(name: impl Into<String>, spec: impl Into<String>) -> Self {
        ImportOptions {
            name: name.into(),
            spec: spec.into(),
            base_url: None,
            client: ClientOptions::default(),
            credentials: Credentials::new(),
            select: Selection::default(),
            idempotent: BTreeSet::new(),
            output_schemas: true,
        }
    }
}

/// An imported API: its tools, and what was left out.
#[derive(Debug)]
pub struct Import {
    /// The API the tools call.
    pub api: Arc<Api>,
    /// The document's `info.title`.
    pub title: String,
    /// The tools, sorted by id.
    pub tools: Vec<(Tool, Arc<Operation>)>,
    /// Operations not imported because they cannot be, with the reason.
    pub skipped: Vec<Skipped>,
    /// Operations left out by [`ImportOptions::select`].
    pub excluded: usize,
}

impl Import {
    /// The tools as [`Catalog::register_many`](toolexec::Catalog::register_many)
    /// takes them.
    pub fn tools(&self) -> Vec<(Tool, Arc<dyn Backend>)> {
        self.tools
            .iter()
            .map(|(tool, op)| (tool.clone(), op.clone() as Arc<dyn Backend>))
            .collect()
    }
}

/// An operation that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `METHOD /path` (and the operationId, when it has one).
    pub operation: String,
    /// Why.
    pub reason: String,
}

/// Reads the document and builds a tool per selected operation. A
/// document that cannot be read or is not OpenAPI 3 is an error
/// (`invalid_request` at `spec`, or `backend_unavailable` for a URL that
/// cannot be fetched); a bad operation is only [skipped](Import::skipped).
pub async fn import(options: ImportOptions) -> Result<Import, Error> {
    let document = load::load(&options.spec, &options.client).await?;
    let base_url = match &options.base_url {
        Some(url) => url.clone(),
        None => load::server_url(&document)?,
    };
    let title = document
        .value
        .pointer("/info/title")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let version = document.version;
    let selector = options.select.compile()?;
    let mut docs = Documents::new(document.value, &document.origin);
    let mut schemes = security_schemes(&mut docs)?;
    // Token URLs may be relative to the server.
    for scheme in schemes.values_mut() {
        if let Scheme::OAuth2 {
            token_url: Some(url),
        } = scheme
            && url::Url::parse(url).is_err()
            && let Ok(base) = url::Url::parse(&format!("{}/", base_url.trim_end_matches('/')))
            && let Ok(joined) = base.join(url)
        {
            *url = joined.to_string();
        }
    }
    let api = Api::with_auth(
        &options.name,
        &base_url,
        options.client.clone(),
        &schemes,
        options.credentials.clone(),
    )?;
    let security = match docs.main().get("security") {
        Some(s) => operation::requirements(s).map_err(|e| Error::invalid_request("spec", e))?,
        None => Vec::new(),
    };
    // Headers the operator or a credential sets are never arguments.
    let mut reserved: BTreeSet<String> = options
        .client
        .headers
        .keys()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    for (name, scheme) in &schemes {
        if let Scheme::ApiKey {
            name: header,
            location: KeyIn::Header,
        } = scheme
            && options.credentials.contains_key(name)
        {
            reserved.insert(header.to_ascii_lowercase());
        }
    }
    build_all(
        &options, &selector, version, docs, api, title, &security, &reserved,
    )
}

/// One declared operation with its place in the document.
struct Found {
    /// The document the path item was found in.
    doc: usize,
    path: String,
    method: &'static str,
    operation: Value,
    shared_params: Vec<Value>,
    label: String,
}

#[allow(clippy::too_many_arguments)]
fn build_all(
    options: &ImportOptions,
    selector: &select::Selector,
    version: Version,
    mut docs: Documents,
    api: Arc<Api>,
    title: String,
    security: &[crate::auth::Requirement],
    reserved_headers: &BTreeSet<String>,
) -> Result<Import, Error> {
    let mut skipped = Vec::new();
    let mut excluded = 0;
    let mut found = Vec::new();
    let paths = docs
        .main()
        .get("paths")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (path, item) in &paths {
        let (doc, item) = match docs.deref(0, item) {
            Ok(found) => found,
            Err(reason) => {
                skipped.push(Skipped {
                    operation: path.clone(),
                    reason,
                });
                continue;
            }
        };
        let shared_params = item
            .get("parameters")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if item.get("trace").is_some() {
            skipped.push(Skipped {
                operation: format!("TRACE {path}"),
                reason: "TRACE is not imported: a server echoing the request would show the \
                         credentials to the caller"
                    .to_owned(),
            });
        }
        for method in METHODS {
            let Some(operation) = item.get(*method) else {
                continue;
            };
            let label = match operation.get("operationId").and_then(Value::as_str) {
                Some(id) => format!("{} {path} ({id})", method.to_ascii_uppercase()),
                None => format!("{} {path}", method.to_ascii_uppercase()),
            };
            if !selector.includes(path, operation) {
                excluded += 1;
                continue;
            }
            found.push(Found {
                doc,
                path: path.clone(),
                method,
                operation: operation.clone(),
                shared_params: shared_params.clone(),
                label,
            });
        }
    }
    // Names first, so collisions resolve the same whatever the order.
    let originals: Vec<String> = found.iter().map(original_name).collect();
    let mapping = toolexec::names::map_names(originals.iter().map(String::as_str));
    let winners: BTreeMap<&str, &str> = mapping
        .kept
        .iter()
        .map(|(mapped, original)| (original.as_str(), mapped.as_str()))
        .collect();

    let mut converter = Converter::new(version);
    let mut cx = Context {
        docs: &mut docs,
        converter: &mut converter,
        api: &api,
        security,
        idempotent: &options.idempotent,
        output_schemas: options.output_schemas,
        reserved_headers,
        defs_copied: 0,
    };
    let mut tools = Vec::new();
    let mut taken = BTreeSet::new();
    for (f, original) in found.iter().zip(&originals) {
        let Some(name) = winners
            .get(original.as_str())
            .filter(|_| taken.insert(original.clone()))
        else {
            skipped.push(Skipped {
                operation: f.label.clone(),
                reason: format!("its tool name collides with another operation's ({original:?})"),
            });
            continue;
        };
        let declared = Declared {
            doc: f.doc,
            path: &f.path,
            method: f.method,
            operation: &f.operation,
            shared_params: &f.shared_params,
        };
        match operation::build(&mut cx, name, &declared) {
            Ok(built) => tools.push((built.tool, Arc::new(built.operation))),
            Err(reason) => skipped.push(Skipped {
                operation: f.label.clone(),
                reason,
            }),
        }
    }
    for s in &skipped {
        tracing::info!(api = %options.name, operation = %s.operation, reason = %s.reason, "operation skipped");
    }
    tools.sort_by_key(|(tool, _)| tool.id.to_string());
    Ok(Import {
        api,
        title,
        tools,
        skipped,
        excluded,
    })
}

/// The name an operation asks for: its operationId, else method and path
/// (`get_pets_petId` for `GET /pets/{petId}`).
fn original_name(f: &Found) -> String {
    if let Some(id) = f.operation.get("operationId").and_then(Value::as_str)
        && !id.trim().is_empty()
    {
        return id.to_owned();
    }
    let path: String = f
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_matches(|c| c == '{' || c == '}'))
        .collect::<Vec<_>>()
        .join("_");
    format!("{}_{path}", f.method)
}

/// `components.securitySchemes`, read as toolexec can use them.
fn security_schemes(docs: &mut Documents) -> Result<BTreeMap<String, Scheme>, Error> {
    let raw = docs
        .main()
        .pointer("/components/securitySchemes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for (name, scheme) in raw {
        let (_, scheme) = docs
            .deref(0, &scheme)
            .map_err(|e| Error::invalid_request(format!("spec.securitySchemes.{name}"), e))?;
        let kind = scheme.get("type").and_then(Value::as_str).unwrap_or("");
        let parsed = match kind {
            "apiKey" => {
                let location = match scheme.get("in").and_then(Value::as_str) {
                    Some("header") => Some(KeyIn::Header),
                    Some("query") => Some(KeyIn::Query),
                    Some("cookie") => Some(KeyIn::Cookie),
                    _ => None,
                };
                match (scheme.get("name").and_then(Value::as_str), location) {
                    (Some(key), Some(location)) => Scheme::ApiKey {
                        name: key.to_owned(),
                        location,
                    },
                    _ => Scheme::Unsupported(
                        "an apiKey scheme without a name or a valid `in`".into(),
                    ),
                }
            }
            "http" => match scheme
                .get("scheme")
                .and_then(Value::as_str)
                .map(str::to_ascii_lowercase)
                .as_deref()
            {
                Some("bearer") => Scheme::Bearer,
                Some("basic") => Scheme::Basic,
                other => Scheme::Unsupported(format!(
                    "http scheme {other:?} is not supported (bearer and basic are)"
                )),
            },
            "oauth2" => Scheme::OAuth2 {
                token_url: scheme
                    .pointer("/flows/clientCredentials/tokenUrl")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            other => Scheme::Unsupported(format!("{other} schemes are not supported")),
        };
        out.insert(name, parsed);
    }
    Ok(out)
}
