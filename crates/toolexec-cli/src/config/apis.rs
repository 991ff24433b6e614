//! `[[openapi]]` and `[[http]]`: HTTP services as tools, as
//! `toolexec-http`'s [`ImportOptions`] and [`PlainTool`]s. Both take the
//! same client keys (timeout, concurrency, retries, response size, TLS,
//! headers), read by [`ClientKeys`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolexec::Limits;
use toolexec_builtins::Group;
use toolexec_http::openapi::{Filter, ImportOptions, Selection};
use toolexec_http::{ClientOptions, Credential, PlainTool, RetryPolicy, TlsOptions};

use super::commands::Schema;
use super::error::Fault;
use super::values::{DurationText, SecretSource, SizeText, id_problem, relative_to};

/// The client keys both tables take, as written.
#[derive(Default)]
struct ClientKeys {
    timeout: Option<DurationText>,
    connect_timeout: Option<DurationText>,
    max_concurrency: Option<usize>,
    max_response_bytes: Option<SizeText>,
    retries: Option<u32>,
    retry_backoff: Option<DurationText>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    headers: BTreeMap<String, SecretSource>,
}

impl ClientKeys {
    /// The options, with `limits.default_timeout` as the default timeout;
    /// errors at `<key>.<name>`.
    fn resolve(
        self,
        key: &dyn Fn(&str) -> String,
        base: &Path,
        limits: &Limits,
    ) -> Result<ClientOptions, Fault> {
        let defaults = ClientOptions::default();
        let max_concurrency = self.max_concurrency.unwrap_or(defaults.max_concurrency);
        if max_concurrency == 0 {
            return Err(Fault::new(key("max_concurrency"), "must be greater than 0"));
        }
        let tls = TlsOptions {
            ca_file: self.ca_file.map(|p| relative_to(base, &p)),
            client_cert: self.client_cert.map(|p| relative_to(base, &p)),
            client_key: self.client_key.map(|p| relative_to(base, &p)),
        };
        if !tls.is_empty() {
            tls.check().map_err(|e| {
                let (field, message) = e.into_field_message("");
                Fault::new(key(field.trim_start_matches("tls.")), message)
            })?;
        }
        let headers = self
            .headers
            .iter()
            .map(|(name, src)| {
                Ok((
                    name.clone(),
                    src.resolve(&key(&format!("headers.{name}")), base)?,
                ))
            })
            .collect::<Result<_, Fault>>()?;
        let retry = RetryPolicy {
            max_retries: self.retries.unwrap_or(defaults.retry.max_retries),
            initial_backoff: self
                .retry_backoff
                .map_or(defaults.retry.initial_backoff, |d| d.0),
            ..RetryPolicy::default()
        };
        Ok(ClientOptions {
            timeout: self.timeout.map_or(limits.default_timeout, |d| d.0),
            connect_timeout: self
                .connect_timeout
                .map_or(defaults.connect_timeout, |d| d.0),
            max_concurrency,
            max_response_bytes: self
                .max_response_bytes
                .map_or(defaults.max_response_bytes, |s| s.0),
            retry,
            tls,
            headers,
        })
    }
}

/// One `[[openapi]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OpenApiTable {
    name: String,
    spec: String,
    base_url: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, AuthTable>,
    #[serde(default)]
    include: FilterTable,
    #[serde(default)]
    exclude: FilterTable,
    #[serde(default)]
    idempotent: Vec<String>,
    #[serde(default = "yes")]
    output_schemas: bool,
    timeout: Option<DurationText>,
    connect_timeout: Option<DurationText>,
    max_concurrency: Option<usize>,
    max_response_bytes: Option<SizeText>,
    retries: Option<u32>,
    retry_backoff: Option<DurationText>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    #[serde(default)]
    headers: BTreeMap<String, SecretSource>,
}

fn yes() -> bool {
    true
}

/// `include` / `exclude`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FilterTable {
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    operations: Vec<String>,
}

impl From<FilterTable> for Filter {
    fn from(t: FilterTable) -> Filter {
        Filter {
            tags: t.tags,
            paths: t.paths,
            operations: t.operations,
        }
    }
}

/// `[openapi.auth.<scheme>]`: one credential, by its keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthTable {
    api_key: Option<SecretSource>,
    bearer: Option<SecretSource>,
    username: Option<String>,
    password: Option<SecretSource>,
    client_id: Option<String>,
    client_secret: Option<SecretSource>,
    token_url: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
}

impl AuthTable {
    fn resolve(self, key: &str, base: &Path) -> Result<Credential, Fault> {
        let at = |k: &str| format!("{key}.{k}");
        match self {
            AuthTable {
                api_key: Some(k),
                bearer: None,
                username: None,
                password: None,
                client_id: None,
                client_secret: None,
                token_url: None,
                ..
            } => Ok(Credential::ApiKey(k.resolve(&at("api_key"), base)?)),
            AuthTable {
                bearer: Some(t),
                api_key: None,
                username: None,
                password: None,
                client_id: None,
                client_secret: None,
                token_url: None,
                ..
            } => Ok(Credential::Bearer(t.resolve(&at("bearer"), base)?)),
            AuthTable {
                username: Some(username),
                password: Some(p),
                api_key: None,
                bearer: None,
                client_id: None,
                client_secret: None,
                token_url: None,
                ..
            } => Ok(Credential::Basic {
                username,
                password: p.resolve(&at("password"), base)?,
            }),
            AuthTable {
                client_id: Some(client_id),
                client_secret: Some(s),
                token_url,
                scopes,
                api_key: None,
                bearer: None,
                username: None,
                password: None,
            } => Ok(Credential::ClientCredentials {
                client_id,
                client_secret: s.resolve(&at("client_secret"), base)?,
                token_url,
                scopes,
            }),
            _ => Err(Fault::new(
                key,
                "give one of: api_key; bearer; username and password; \
                 client_id and client_secret (with token_url, scopes)",
            )),
        }
    }
}

/// The APIs of the file; names are namespaces apart from the built-ins,
/// the servers and each other.
pub(super) fn resolve_openapi(
    tables: Vec<OpenApiTable>,
    base: &Path,
    taken: &[String],
    builtins: &[Group],
    limits: &Limits,
) -> Result<Vec<ImportOptions>, Fault> {
    let mut out: Vec<ImportOptions> = Vec::with_capacity(tables.len());
    for (i, t) in tables.into_iter().enumerate() {
        let key = |k: &str| format!("openapi[{i}].{k}");
        if let Err(e) = toolexec::ToolIdRef::parse(&format!("{}:x", t.name)) {
            return Err(Fault::new(
                key("name"),
                format!("not a valid namespace: {}", id_problem(e)),
            ));
        }
        if builtins.iter().any(|g| g.as_str() == t.name)
            || taken.contains(&t.name)
            || out.iter().any(|o| o.name == t.name)
        {
            return Err(Fault::new(
                key("name"),
                format!("namespace {:?} is taken", t.name),
            ));
        }
        let client = ClientKeys {
            timeout: t.timeout,
            connect_timeout: t.connect_timeout,
            max_concurrency: t.max_concurrency,
            max_response_bytes: t.max_response_bytes,
            retries: t.retries,
            retry_backoff: t.retry_backoff,
            ca_file: t.ca_file,
            client_cert: t.client_cert,
            client_key: t.client_key,
            headers: t.headers,
        }
        .resolve(&key, base, limits)?;
        let spec = if t.spec.starts_with("http://") || t.spec.starts_with("https://") {
            t.spec
        } else {
            relative_to(base, Path::new(&t.spec)).display().to_string()
        };
        let mut credentials = BTreeMap::new();
        for (scheme, table) in t.auth {
            let credential = table.resolve(&key(&format!("auth.{scheme}")), base)?;
            credentials.insert(scheme, credential);
        }
        out.push(ImportOptions {
            name: t.name,
            spec,
            base_url: t.base_url,
            client,
            credentials,
            select: Selection {
                include: t.include.into(),
                exclude: t.exclude.into(),
            },
            idempotent: t.idempotent.into_iter().collect(),
            output_schemas: t.output_schemas,
        });
    }
    Ok(out)
}

/// One `[[http]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpTable {
    id: String,
    #[serde(default)]
    description: String,
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default)]
    query: BTreeMap<String, String>,
    /// Header templates (text with `{argument}` holes).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Headers holding secrets (`{ env = ... }`, `{ file = ... }`).
    #[serde(default)]
    secret_headers: BTreeMap<String, SecretSource>,
    body: Option<toml::Value>,
    body_type: Option<String>,
    input_schema: Schema,
    output_schema: Option<Schema>,
    idempotent: Option<bool>,
    #[serde(default)]
    tags: Vec<String>,
    timeout: Option<DurationText>,
    connect_timeout: Option<DurationText>,
    max_concurrency: Option<usize>,
    max_response_bytes: Option<SizeText>,
    retries: Option<u32>,
    retry_backoff: Option<DurationText>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

fn get() -> String {
    "GET".to_owned()
}

/// The plain HTTP tools of the file, each with its client options.
pub(super) fn resolve_http(
    tables: Vec<HttpTable>,
    base: &Path,
    limits: &Limits,
) -> Result<Vec<(PlainTool, ClientOptions)>, Fault> {
    let mut out = Vec::with_capacity(tables.len());
    for (i, t) in tables.into_iter().enumerate() {
        let key = |k: &str| format!("http[{i}].{k}");
        if let Err(e) = toolexec::ToolIdRef::parse(&t.id) {
            return Err(Fault::new(
                key("id"),
                format!("not a valid tool id: {}", id_problem(e)),
            ));
        }
        let client = ClientKeys {
            timeout: t.timeout,
            connect_timeout: t.connect_timeout,
            max_concurrency: t.max_concurrency,
            max_response_bytes: t.max_response_bytes,
            retries: t.retries,
            retry_backoff: t.retry_backoff,
            ca_file: t.ca_file,
            client_cert: t.client_cert,
            client_key: t.client_key,
            headers: t.secret_headers,
        }
        .resolve(
            &|k: &str| key(&k.replace("headers.", "secret_headers.")),
            base,
            limits,
        )?;
        let body = match t.body {
            Some(v) => {
                Some(serde_json::to_value(v).map_err(|e| Fault::new(key("body"), e.to_string()))?)
            }
            None => None,
        };
        let tool = PlainTool {
            id: t.id,
            description: t.description,
            method: t.method,
            url: t.url,
            query: t.query,
            headers: t.headers,
            body,
            body_type: t.body_type,
            input_schema: t.input_schema.0,
            output_schema: t.output_schema.map(|s| s.0),
            idempotent: t.idempotent,
            tags: t.tags,
        };
        // Built once here so the file's errors point at their keys; the
        // tool is built again when the catalog is.
        tool.clone().build(client.clone()).map_err(|e| {
            let (field, message) = e.into_field_message("");
            Fault::new(
                if field.is_empty() {
                    format!("http[{i}]")
                } else {
                    key(&field)
                },
                message,
            )
        })?;
        out.push((tool, client));
    }
    Ok(out)
}
