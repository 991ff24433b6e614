//! Credentials for an API's security schemes, and applying them to a
//! request: API keys (header, query, cookie), HTTP bearer and basic, and
//! OAuth 2 client credentials (tokens fetched with the `oauth2` crate,
//! cached until shortly before they expire, fetched again after a `401`).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use oauth2::basic::BasicClient;
use oauth2::{ClientId, ClientSecret, Scope, TokenResponse, TokenUrl};
use tokio::sync::Mutex;
use tokio::time::Instant;
use toolexec::{Error, Secret};
use url::Url;

use crate::client::ClientOptions;
use crate::endpoint::RequestParts;
use crate::tls::{Tls, TlsOptions};

/// A token is fetched again this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// Largest token endpoint response read.
const MAX_TOKEN_RESPONSE: usize = 64 << 10;
/// Longest token lifetime believed.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The credential configured for one security scheme.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Credential {
    /// The key of an `apiKey` scheme, sent where the scheme says.
    ApiKey(Secret),
    /// The token of an `http` `bearer` scheme.
    Bearer(Secret),
    /// The user and password of an `http` `basic` scheme.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: Secret,
    },
    /// An `oauth2` scheme's client credentials grant.
    ClientCredentials {
        /// The client's id.
        client_id: String,
        /// The client's secret (sent with HTTP Basic, RFC 6749 2.3.1).
        client_secret: Secret,
        /// The token endpoint; default: the scheme's `clientCredentials`
        /// flow's `tokenUrl`.
        token_url: Option<String>,
        /// Scopes asked for; default: those the operation's security
        /// requirement names.
        scopes: Vec<String>,
    },
}

/// Credentials by security scheme name (the keys of the document's
/// `components.securitySchemes`).
pub type Credentials = BTreeMap<String, Credential>;

/// Where an `apiKey` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyIn {
    Header,
    Query,
    Cookie,
}

/// A security scheme as the document declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scheme {
    ApiKey {
        name: String,
        location: KeyIn,
    },
    Bearer,
    Basic,
    /// `token_url`: the `clientCredentials` flow's, when declared.
    OAuth2 {
        token_url: Option<String>,
    },
    /// A scheme toolexec cannot use (openIdConnect, mutualTLS, another
    /// `http` scheme), and why.
    Unsupported(String),
}

/// One security requirement of an operation: every scheme named, with
/// its scopes. An operation lists alternatives; the first one whose
/// schemes all have credentials is used.
pub(crate) type Requirement = Vec<(String, Vec<String>)>;

/// The credentials of an API, matched with its schemes.
pub(crate) struct Auth {
    entries: BTreeMap<String, Entry>,
    /// How token requests connect (a client is built per fetch: tokens
    /// are fetched rarely, and the token endpoint may use another scheme
    /// than the API).
    tls: TlsOptions,
    connect_timeout: Duration,
    timeout: Duration,
}

struct Entry {
    scheme: Scheme,
    credential: Credential,
    /// The OAuth 2 token endpoint, checked.
    token_url: Option<Url>,
    /// The cached token of an OAuth 2 scheme (its lock also makes one
    /// fetch at a time).
    token: Mutex<Option<CachedToken>>,
}

struct CachedToken {
    value: Secret,
    refresh_at: Option<Instant>,
}

impl Auth {
    /// Matches `credentials` with `schemes`: a credential for an unknown
    /// scheme, of the wrong kind, or for a scheme toolexec cannot use is
    /// `invalid_request` at `auth.<name>`.
    ///
    /// A token URL the operator did not set comes from the document, so it
    /// must be on the API's own origin (`base`): a document cannot send the
    /// client secret elsewhere. Any token URL is `https://`, or `http://`
    /// on a loopback address.
    pub(crate) fn new(
        schemes: &BTreeMap<String, Scheme>,
        credentials: Credentials,
        base: &Url,
        options: &ClientOptions,
    ) -> Result<Auth, Error> {
        let mut entries = BTreeMap::new();
        for (name, credential) in credentials {
            let field = format!("auth.{name}");
            let Some(scheme) = schemes.get(&name) else {
                let known: Vec<&str> = schemes.keys().map(String::as_str).collect();
                return Err(Error::invalid_request(
                    field,
                    format!("no security scheme {name:?} in the document (it has: {known:?})"),
                ));
            };
            let mut checked_url = None;
            let fits = match (scheme, &credential) {
                (Scheme::ApiKey { .. }, Credential::ApiKey(_))
                | (Scheme::Bearer, Credential::Bearer(_))
                | (Scheme::Basic, Credential::Basic { .. }) => true,
                (
                    Scheme::OAuth2 { token_url },
                    Credential::ClientCredentials { token_url: own, .. },
                ) => {
                    checked_url = Some(token_endpoint(
                        &field,
                        own.as_deref(),
                        token_url.as_deref(),
                        base,
                    )?);
                    true
                }
                (Scheme::Unsupported(why), _) => {
                    return Err(Error::invalid_request(field, why.clone()));
                }
                _ => false,
            };
            if !fits {
                return Err(Error::invalid_request(
                    field,
                    format!(
                        "{} credential for a {} scheme",
                        credential.kind(),
                        scheme.kind()
                    ),
                ));
            }
            entries.insert(
                name,
                Entry {
                    scheme: scheme.clone(),
                    credential,
                    token_url: checked_url,
                    token: Mutex::new(None),
                },
            );
        }
        Ok(Auth {
            entries,
            tls: options.tls.clone(),
            connect_timeout: options.connect_timeout,
            timeout: options.timeout,
        })
    }

    /// Whether every scheme of `requirement` has a credential.
    fn satisfies(&self, requirement: &Requirement) -> bool {
        requirement
            .iter()
            .all(|(name, _)| self.entries.contains_key(name))
    }

    /// Applies the first of `security`'s alternatives that the credentials
    /// satisfy (none: the request goes without, and the server decides).
    /// Returns the OAuth tokens sent, by scheme.
    pub(crate) async fn apply(
        &self,
        api: &str,
        security: &[Requirement],
        parts: &mut RequestParts,
    ) -> Result<Vec<(String, Secret)>, Error> {
        // An empty alternative (`{}`) makes credentials optional: one that
        // uses them is still preferred.
        let Some(requirement) = security.iter().find(|r| !r.is_empty() && self.satisfies(r)) else {
            return Ok(Vec::new());
        };
        let mut tokens = Vec::new();
        for (name, scopes) in requirement {
            let entry = &self.entries[name];
            match (&entry.scheme, &entry.credential) {
                (Scheme::ApiKey { name, location }, Credential::ApiKey(key)) => match location {
                    KeyIn::Header => parts.secret_header(name, key.expose())?,
                    KeyIn::Query => parts.query_pair(name, key.expose()),
                    KeyIn::Cookie => parts.secret_cookie(name, key.expose()),
                },
                (Scheme::Bearer, Credential::Bearer(token)) => {
                    parts.authorization(&format!("Bearer {}", token.expose()))?;
                }
                (Scheme::Basic, Credential::Basic { username, password }) => {
                    let pair = format!("{username}:{}", password.expose());
                    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                    parts.authorization(&format!("Basic {encoded}"))?;
                }
                (Scheme::OAuth2 { .. }, credential) => {
                    let token = self.token(api, name, entry, credential, scopes).await?;
                    parts.authorization(&format!("Bearer {}", token.expose()))?;
                    tokens.push((name.clone(), token));
                }
                _ => unreachable!("Auth::new pairs schemes and credentials of the same kind"),
            }
        }
        Ok(tokens)
    }

    /// Drops the cached tokens a refused request used (after a `401`), so
    /// the next request fetches new ones; a token fetched since by another
    /// call is kept.
    pub(crate) async fn forget(&self, used: &[(String, Secret)]) {
        for (scheme, token) in used {
            if let Some(entry) = self.entries.get(scheme) {
                let mut cached = entry.token.lock().await;
                if cached
                    .as_ref()
                    .is_some_and(|c| c.value.constant_time_eq(token.expose()))
                {
                    *cached = None;
                }
            }
        }
    }

    async fn token(
        &self,
        api: &str,
        scheme: &str,
        entry: &Entry,
        credential: &Credential,
        required_scopes: &[String],
    ) -> Result<Secret, Error> {
        let Credential::ClientCredentials {
            client_id,
            client_secret,
            scopes,
            ..
        } = credential
        else {
            unreachable!("checked by Auth::new");
        };
        let mut cached = entry.token.lock().await;
        if let Some(token) = cached.as_ref()
            && token.refresh_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(token.value.clone());
        }
        let url = entry.token_url.as_ref().expect("checked by Auth::new");
        let unavailable = |m: String| {
            Error::backend_unavailable(api, format!("OAuth token for scheme {scheme:?}: {m}"))
        };
        let token_uri = TokenUrl::from_url(url.clone());
        let tls = if url.scheme() == "https" {
            self.tls.client_config(api)?
        } else {
            Tls::unused()
        };
        // No redirects: the secret goes to the checked URL only.
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls.config.clone())
            .connect_timeout(self.connect_timeout)
            .timeout(self.timeout)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| unavailable(format!("cannot build the HTTP client: {e}")))?;
        let oauth = BasicClient::new(ClientId::new(client_id.clone()))
            .set_client_secret(ClientSecret::new(client_secret.expose().to_owned()))
            .set_token_uri(token_uri);
        let scopes = if scopes.is_empty() {
            required_scopes
        } else {
            scopes.as_slice()
        };
        let http = |request: oauth2::HttpRequest| {
            let client = client.clone();
            async move { send_token_request(&client, request).await }
        };
        let response = oauth
            .exchange_client_credentials()
            .add_scopes(scopes.iter().cloned().map(Scope::new))
            .request_async(&http)
            .await
            .map_err(|e| unavailable(describe_token_error(&e)))?;
        let value = Secret::new(response.access_token().secret().clone());
        // Fetched again before it expires: 30 s early, or halfway for
        // short-lived tokens; a lifetime past a day counts as a day.
        let refresh_at = response.expires_in().map(|ttl| {
            let ttl = ttl.min(MAX_TOKEN_LIFETIME);
            let early = if ttl > EXPIRY_MARGIN * 2 {
                ttl - EXPIRY_MARGIN
            } else {
                ttl / 2
            };
            Instant::now() + early
        });
        *cached = Some(CachedToken {
            value: value.clone(),
            refresh_at,
        });
        Ok(value)
    }
}

/// Why a token request failed, without the secrets it carried.
fn describe_token_error<RE: std::error::Error + 'static>(
    e: &oauth2::RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
) -> String {
    match e {
        oauth2::RequestTokenError::ServerResponse(r) => format!(
            "the server refused: {}{}",
            r.error(),
            r.error_description()
                .map_or_else(String::new, |d| format!(" ({d})"))
        ),
        oauth2::RequestTokenError::Request(e) => format!("request failed: {e}"),
        oauth2::RequestTokenError::Parse(e, _) => format!("unreadable response: {e}"),
        oauth2::RequestTokenError::Other(m) => m.clone(),
    }
}

/// Why a token request got no usable answer (without the URL, which
/// reqwest's errors carry).
#[derive(Debug)]
struct TokenError(String);

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TokenError {}

impl From<reqwest::Error> for TokenError {
    fn from(e: reqwest::Error) -> Self {
        TokenError(crate::tls::error_chain(
            &e.without_url(),
            crate::tls::next_link,
        ))
    }
}

/// The token request.
async fn send_token_request(
    client: &reqwest::Client,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, TokenError> {
    let (parts, body) = request.into_parts();
    let mut response = client
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await?;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = crate::body::read_capped(&mut response, MAX_TOKEN_RESPONSE)
        .await
        .map_err(|e| match e {
            crate::body::BodyError::Read(e) => TokenError::from(e),
            too_large => TokenError(format!("the token response is {too_large}")),
        })?;
    let mut out = http::Response::new(bytes);
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    Ok(out)
}

/// The token endpoint of an OAuth 2 credential: the operator's, or the
/// document's when it is on the API's origin; `https://`, or `http://` on a
/// loopback address.
fn token_endpoint(
    field: &str,
    own: Option<&str>,
    declared: Option<&str>,
    base: &Url,
) -> Result<Url, Error> {
    let bad = |m: String| Error::invalid_request(field, m);
    let (text, from_document) = match (own, declared) {
        (Some(own), _) => (own, false),
        (None, Some(declared)) => (declared, true),
        (None, None) => {
            return Err(bad(
                "the scheme declares no clientCredentials flow: set token_url".to_owned(),
            ));
        }
    };
    let url = Url::parse(text).map_err(|e| bad(format!("token URL {text:?}: {e}")))?;
    if from_document && url.origin() != base.origin() {
        return Err(bad(format!(
            "the document's tokenUrl {url} is not on the API's origin ({}): \
             set token_url to trust it",
            base.origin().ascii_serialization()
        )));
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    if url.scheme() != "https" && !(url.scheme() == "http" && loopback) {
        return Err(bad(format!(
            "token URL {url}: the client secret goes over https:// only (http:// on loopback)"
        )));
    }
    Ok(url)
}

impl Credential {
    fn kind(&self) -> &'static str {
        match self {
            Credential::ApiKey(_) => "an api_key",
            Credential::Bearer(_) => "a bearer",
            Credential::Basic { .. } => "a basic",
            Credential::ClientCredentials { .. } => "a client-credentials",
        }
    }
}

impl Scheme {
    fn kind(&self) -> &'static str {
        match self {
            Scheme::ApiKey { .. } => "apiKey",
            Scheme::Bearer => "http bearer",
            Scheme::Basic => "http basic",
            Scheme::OAuth2 { .. } => "oauth2",
            Scheme::Unsupported(_) => "unsupported",
        }
    }
}
