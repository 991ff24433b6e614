//! `[[servers]]`: upstream MCP servers, as `toolexec-mcp`'s
//! [`UpstreamConfig`]. Their secrets (`env`, `headers`, `bearer_token`) are
//! read when the file is, relative to its directory; so are the TLS files
//! (`ca_file`, `client_cert`, `client_key`), checked then by toolexec-mcp.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolexec::{Limits, Secret};
use toolexec_builtins::Group;
use toolexec_mcp::upstream::oauth::{EnterpriseIdp, Grant, TokenExchange, UpstreamOAuth};
use toolexec_mcp::upstream::{
    ClientRelay, DEFAULT_MAX_CONCURRENCY, TlsOptions, UpstreamConfig, UpstreamTransport,
};

use super::error::Fault;
use super::values::{DurationText, SecretSource, id_problem, relative_to};

/// One `[[servers]]` table as written: a stdio server (`command`) or an
/// HTTP one (`url`), each with its own keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerTable {
    name: String,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, SecretSource>,
    #[serde(default)]
    inherit_env: Vec<String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    /// `"sse"`: the 2024-11-05 HTTP+SSE transport at `url`;
    /// `"streamable-http"` (the default for `url`).
    transport: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, SecretSource>,
    bearer_token: Option<SecretSource>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    timeout: Option<DurationText>,
    max_concurrency: Option<usize>,
    #[serde(default)]
    lazy: bool,
    /// `false`: the gateway publishes the server's tools and prompts under
    /// their own names instead of `name__tool`.
    prefix: Option<bool>,
    /// What `serve` relays between the server and the client of a call:
    /// `sampling`, `elicitation`, `roots`, `logging` (default all but
    /// `roots`).
    relay: Option<Vec<String>>,
    /// `auth = { oauth = { ... } }`: OAuth 2.1 sign-in instead of a static
    /// token.
    auth: Option<AuthTable>,
}

/// `auth = { ... }` of a server: the session's own sign-in (`oauth`), and
/// acting as each caller (`token_exchange`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthTable {
    oauth: Option<OAuthTable>,
    token_exchange: Option<ExchangeTable>,
}

/// `auth.token_exchange = { ... }`: toolexec-mcp's [`TokenExchange`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExchangeTable {
    token_endpoint: String,
    client_id: String,
    client_secret: SecretSource,
    audience: Option<String>,
    resource: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
}

impl ExchangeTable {
    fn resolve(self, key: impl Fn(&str) -> String, base: &Path) -> Result<TokenExchange, Fault> {
        let secret = self.client_secret.resolve(&key("client_secret"), base)?;
        let mut exchange = TokenExchange::new(self.token_endpoint, self.client_id, secret);
        exchange.audience = self.audience;
        exchange.resource = self.resource;
        exchange.scopes = self.scopes;
        exchange.check().map_err(|e| {
            let (field, message) = e.into_field_message("token_exchange");
            let field = field
                .strip_prefix("transport.token_exchange.")
                .unwrap_or(&field);
            Fault::new(key(field), message)
        })?;
        Ok(exchange)
    }
}

/// `auth.oauth = { ... }`: toolexec-mcp's [`UpstreamOAuth`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OAuthTable {
    /// `"authorization_code"` (default) or `"client_credentials"`.
    grant: Option<String>,
    client_id: Option<String>,
    client_secret: Option<SecretSource>,
    /// A PEM private key, for `private_key_jwt` client credentials.
    client_key: Option<SecretSource>,
    client_key_alg: Option<String>,
    client_metadata_url: Option<String>,
    client_name: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    /// Default: `$XDG_STATE_HOME/toolexec/oauth/NAME.json` (or
    /// `~/.local/state/...`).
    token_file: Option<PathBuf>,
    /// The authorization server's issuer, pinned.
    issuer: Option<String>,
    /// The identity provider of `grant = "enterprise_managed"`.
    enterprise: Option<EnterpriseTable>,
}

/// `auth.oauth.enterprise = { ... }`: toolexec-mcp's [`EnterpriseIdp`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnterpriseTable {
    issuer: String,
    token_endpoint: String,
    client_id: String,
    client_secret: Option<SecretSource>,
    id_token: SecretSource,
}

/// Where the tokens of server `name` are kept by default.
fn default_token_file(name: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local").join("state"))
        })?;
    Some(
        base.join("toolexec")
            .join("oauth")
            .join(format!("{name}.json")),
    )
}

impl OAuthTable {
    fn resolve(
        self,
        name: &str,
        key: impl Fn(&str) -> String,
        base: &Path,
    ) -> Result<UpstreamOAuth, Fault> {
        let token_file = match self.token_file {
            Some(p) => relative_to(base, &p),
            None => default_token_file(name).ok_or_else(|| {
                Fault::new(
                    key("token_file"),
                    "neither XDG_STATE_HOME nor HOME is set: give token_file",
                )
            })?,
        };
        let mut oauth = UpstreamOAuth::new(token_file);
        oauth.grant = match self.grant.as_deref() {
            None | Some("authorization_code") => Grant::AuthorizationCode,
            Some("client_credentials") => Grant::ClientCredentials,
            Some("enterprise_managed") => Grant::EnterpriseManaged,
            Some(other) => {
                return Err(Fault::new(
                    key("grant"),
                    format!(
                        "expected \"authorization_code\", \"client_credentials\" or \
                         \"enterprise_managed\", got {other:?}"
                    ),
                ));
            }
        };
        oauth.client_id = self.client_id;
        oauth.client_secret = match &self.client_secret {
            Some(src) => Some(src.resolve(&key("client_secret"), base)?),
            None => None,
        };
        oauth.client_key = match &self.client_key {
            Some(src) => Some(src.resolve(&key("client_key"), base)?),
            None => None,
        };
        oauth.client_key_alg = self.client_key_alg;
        oauth.client_metadata_url = self.client_metadata_url;
        if let Some(n) = self.client_name {
            oauth.client_name = n;
        }
        oauth.scopes = self.scopes;
        oauth.issuer = self.issuer;
        if let Some(e) = self.enterprise {
            let mut idp = EnterpriseIdp::new(
                e.issuer,
                e.token_endpoint,
                e.client_id,
                e.id_token.resolve(&key("enterprise.id_token"), base)?,
            );
            idp.client_secret = match &e.client_secret {
                Some(src) => Some(src.resolve(&key("enterprise.client_secret"), base)?),
                None => None,
            };
            oauth.enterprise = Some(idp);
        }
        oauth.check().map_err(|e| {
            let (field, message) = e.into_field_message("oauth");
            let field = field.strip_prefix("transport.oauth.").unwrap_or(&field);
            Fault::new(key(field), message)
        })?;
        Ok(oauth)
    }
}

/// The servers of the file (their names are namespaces, unique and apart
/// from the enabled built-in groups), and the names of those with
/// `prefix = false`, in file order.
pub(super) fn resolve(
    tables: Vec<ServerTable>,
    base: &Path,
    builtins: &[Group],
    limits: &Limits,
) -> Result<(Vec<UpstreamConfig>, Vec<String>), Fault> {
    let mut servers: Vec<UpstreamConfig> = Vec::with_capacity(tables.len());
    let mut unprefixed = Vec::new();
    for (i, table) in tables.into_iter().enumerate() {
        let prefix = table.prefix.unwrap_or(true);
        let server = table.resolve(i, base, builtins, limits)?;
        if !prefix {
            unprefixed.push(server.name.clone());
        }
        if servers.iter().any(|s| s.name == server.name) {
            return Err(Fault::new(
                format!("servers[{i}].name"),
                format!("duplicate server name {:?}", server.name),
            ));
        }
        servers.push(server);
    }
    Ok((servers, unprefixed))
}

/// The secrets of `map`, each read at `key.<name>`.
fn secrets(
    map: &BTreeMap<String, SecretSource>,
    key: impl Fn(&str) -> String,
    base: &Path,
) -> Result<BTreeMap<String, Secret>, Fault> {
    map.iter()
        .map(|(name, src)| Ok((name.clone(), src.resolve(&key(name), base)?)))
        .collect()
}

impl ServerTable {
    /// Validates the table (index `i`) into an upstream config.
    fn resolve(
        self,
        i: usize,
        base: &Path,
        builtins: &[Group],
        limits: &Limits,
    ) -> Result<UpstreamConfig, Fault> {
        let key = |k: &str| format!("servers[{i}].{k}");
        let fail = |k: &str, message: String| Err(Fault::new(key(k), message));
        if let Err(e) = toolexec::ToolIdRef::parse(&format!("{}:x", self.name)) {
            return fail("name", format!("not a valid namespace: {}", id_problem(e)));
        }
        if builtins.iter().any(|g| g.as_str() == self.name) {
            return fail("name", format!("{:?} is a built-in namespace", self.name));
        }
        let tls = TlsOptions {
            ca_file: self.ca_file.map(|p| relative_to(base, &p)),
            client_cert: self.client_cert.map(|p| relative_to(base, &p)),
            client_key: self.client_key.map(|p| relative_to(base, &p)),
        };
        let sse = match self.transport.as_deref() {
            None | Some("streamable-http") => false,
            Some("sse") => true,
            Some(other) => {
                return fail(
                    "transport",
                    format!("expected \"sse\" or \"streamable-http\", got {other:?}"),
                );
            }
        };
        let transport = match (self.command, self.url) {
            (Some(_), None) if self.transport.is_some() => {
                return fail("transport", "transport is for url servers".into());
            }
            (Some(command), None) => {
                if !self.headers.is_empty() || self.bearer_token.is_some() {
                    return fail(
                        "headers",
                        "headers and bearer_token are for url servers".into(),
                    );
                }
                if self.auth.is_some() {
                    return fail("auth", "auth is for url servers".into());
                }
                if !tls.is_empty() {
                    return fail(
                        first_tls_key(&tls),
                        "ca_file, client_cert and client_key are for https:// servers".into(),
                    );
                }
                UpstreamTransport::Stdio {
                    command,
                    args: self.args,
                    env: secrets(&self.env, |n| key(&format!("env.{n}")), base)?,
                    inherit_env: self.inherit_env,
                    cwd: self.cwd.map(|c| relative_to(base, &c)),
                }
            }
            (None, Some(url)) => {
                if !self.args.is_empty()
                    || !self.env.is_empty()
                    || !self.inherit_env.is_empty()
                    || self.cwd.is_some()
                {
                    return fail(
                        "args",
                        "args, env, inherit_env and cwd are for command servers".into(),
                    );
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return fail(
                        "url",
                        format!("expected an http:// or https:// URL, got {url:?}"),
                    );
                }
                if !tls.is_empty() {
                    if !url.starts_with("https://") {
                        return fail(
                            first_tls_key(&tls),
                            "ca_file, client_cert and client_key are for https:// servers".into(),
                        );
                    }
                    tls.check()
                        .map_err(|e| Fault::refused(&format!("servers[{i}]"), e, &[]))?;
                }
                let bearer_token = match &self.bearer_token {
                    Some(src) => Some(src.resolve(&key("bearer_token"), base)?),
                    None => None,
                };
                let headers = secrets(&self.headers, |n| key(&format!("headers.{n}")), base)?;
                if sse && self.auth.is_some() {
                    return fail(
                        "auth",
                        "auth is for streamable HTTP servers, not transport = \"sse\"".into(),
                    );
                }
                let (oauth, token_exchange) = match self.auth {
                    Some(auth) => {
                        if auth.oauth.is_some() && self.bearer_token.is_some() {
                            return fail(
                                "auth",
                                "auth.oauth and bearer_token are alternatives: set one".into(),
                            );
                        }
                        let oauth = match auth.oauth {
                            Some(o) => Some(o.resolve(
                                &self.name,
                                |k| key(&format!("auth.oauth.{k}")),
                                base,
                            )?),
                            None => None,
                        };
                        let exchange = match auth.token_exchange {
                            Some(t) => {
                                Some(t.resolve(|k| key(&format!("auth.token_exchange.{k}")), base)?)
                            }
                            None => None,
                        };
                        (oauth, exchange)
                    }
                    None => (None, None),
                };
                if sse {
                    UpstreamTransport::Sse {
                        url,
                        headers,
                        bearer_token,
                        tls,
                    }
                } else {
                    UpstreamTransport::Http {
                        url,
                        headers,
                        bearer_token,
                        tls,
                        oauth,
                        token_exchange,
                    }
                }
            }
            (Some(_), Some(_)) => {
                return fail(
                    "url",
                    "give either command (stdio) or url (HTTP), not both".into(),
                );
            }
            (None, None) => {
                return fail(
                    "command",
                    "missing: give command (stdio) or url (HTTP)".into(),
                );
            }
        };
        let relay = match &self.relay {
            None => ClientRelay::GATEWAY,
            Some(names) => {
                let mut relay = ClientRelay::NONE;
                for name in names {
                    match name.as_str() {
                        "sampling" => relay.sampling = true,
                        "elicitation" => relay.elicitation = true,
                        "roots" => relay.roots = true,
                        "logging" => relay.logging = true,
                        other => {
                            return fail(
                                "relay",
                                format!(
                                    "expected \"sampling\", \"elicitation\", \"roots\" or \
                                     \"logging\", got {other:?}"
                                ),
                            );
                        }
                    }
                }
                relay
            }
        };
        let max_concurrency = self.max_concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY);
        if max_concurrency == 0 {
            return fail("max_concurrency", "must be greater than 0".into());
        }
        Ok(UpstreamConfig {
            name: self.name,
            transport,
            call_timeout: self.timeout.map_or(limits.default_timeout, |d| d.0),
            max_concurrency,
            lazy: self.lazy,
            relay,
        })
    }
}

/// The first TLS key written, to point a refusal of them all at.
fn first_tls_key(tls: &TlsOptions) -> &'static str {
    if tls.ca_file.is_some() {
        "ca_file"
    } else if tls.client_cert.is_some() {
        "client_cert"
    } else {
        "client_key"
    }
}
