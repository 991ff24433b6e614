//! The gateway as an OAuth 2.1 resource server ([`HttpAuth::OAuth`]):
//! bearer access tokens are JWTs checked against the issuer's keys
//! (`jsonwebtoken`, pure-Rust crypto): signature with an asymmetric
//! algorithm the key allows, `iss`, `aud`, `exp` and `nbf` (with leeway),
//! a subject, and the scopes every caller needs. The caller becomes the
//! token's subject, with its scopes and claims, for the policy and the
//! quotas. Protected resource metadata (RFC 9728) is served at
//! `/.well-known/oauth-protected-resource` and named in every `401`'s
//! `WWW-Authenticate`.
//!
//! [`HttpAuth::OAuth`]: super::HttpAuth::OAuth

mod jwks;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value, json};
use toolexec::Error;
use toolexec::telemetry::{AccessToken, Caller, PrincipalKind};
use toolexec_http::tls::{Tls, TlsOptions};

use jwks::{Jwks, KeyError};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// The path of the protected resource metadata (RFC 9728); the resource's
/// own path follows it (`/.well-known/oauth-protected-resource/mcp`).
pub const PROTECTED_RESOURCE_PATH: &str = "/.well-known/oauth-protected-resource";

/// Longest access token looked at.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Signature algorithms accepted: asymmetric only, so a key set's public
/// key can never be used as an HMAC secret.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How the gateway checks OAuth access tokens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OAuthOptions {
    /// The authorization server's issuer identifier: a token's `iss` must
    /// equal it, and its metadata names the key set.
    pub issuer: String,
    /// Accepted audiences: a token's `aud` must contain one (usually the
    /// gateway's URL, as clients ask for it with RFC 8707 `resource`).
    pub audience: Vec<String>,
    /// The key set's URL; `None` reads `jwks_uri` from the issuer's
    /// metadata (RFC 8414, then OpenID Connect discovery).
    pub jwks_uri: Option<String>,
    /// Scopes every token must carry; a token without them gets `403` with
    /// `error="insufficient_scope"`. Also advertised in the metadata.
    pub scopes: Vec<String>,
    /// This resource's identifier (an `https://` or `http://` URL), in the
    /// metadata and in `WWW-Authenticate`. Default: the first audience.
    pub resource: Option<String>,
    /// Clock skew allowed when checking `exp` and `nbf`. Default 60 s.
    pub leeway: Duration,
    /// The key set is fetched again when older than this. Default 10 min.
    pub jwks_max_age: Duration,
    /// Least time between two fetches of the key set (a token naming an
    /// unknown key fetches it at most this often). Default 10 s.
    pub jwks_min_interval: Duration,
    /// TLS for an `https://` issuer: CA file, client certificate.
    pub tls: TlsOptions,
    /// Most verified tokens remembered (by SHA-256 digest, never the
    /// token), so a client's later requests skip the signature check: each
    /// until its `exp` or `jwks_max_age` after it was checked, whichever
    /// comes first (so a key retired from the set stops working as it
    /// would without the cache). `0`: every request is verified in full.
    /// Default 10,000.
    pub cache_tokens: usize,
}

impl OAuthOptions {
    /// Options for tokens of `issuer` meant for `audience`, with the
    /// defaults.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        OAuthOptions {
            issuer: issuer.into(),
            audience: vec![audience.into()],
            jwks_uri: None,
            scopes: Vec::new(),
            resource: None,
            leeway: Duration::from_secs(60),
            jwks_max_age: Duration::from_secs(600),
            jwks_min_interval: Duration::from_secs(10),
            tls: TlsOptions::default(),
            cache_tokens: 10_000,
        }
    }

    /// `invalid_request` naming the first bad field (`auth.issuer`, ...).
    pub fn check(&self) -> Result<(), Error> {
        let url = |field: &str, v: &str| -> Result<(), Error> {
            if v.starts_with("https://") || v.starts_with("http://") {
                Ok(())
            } else {
                Err(Error::invalid_request(
                    format!("auth.{field}"),
                    format!("expected an https:// (or http://) URL, got {v:?}"),
                ))
            }
        };
        url("issuer", &self.issuer)?;
        if let Some(uri) = &self.jwks_uri {
            url("jwks_uri", uri)?;
        }
        if self.audience.is_empty() || self.audience.iter().any(|a| a.trim().is_empty()) {
            return Err(Error::invalid_request(
                "auth.audience",
                "at least one audience, none empty",
            ));
        }
        url("resource", self.resource())?;
        if let Some(s) = self.scopes.iter().find(|s| !is_scope_token(s)) {
            return Err(Error::invalid_request(
                "auth.scopes",
                format!(
                    "{s:?} is not a scope (RFC 6749: printable ASCII, no spaces, quotes or backslashes)"
                ),
            ));
        }
        if self.jwks_max_age.is_zero() {
            return Err(Error::invalid_request(
                "auth.jwks_max_age",
                "must be greater than 0",
            ));
        }
        self.tls.check()
    }

    fn resource(&self) -> &str {
        self.resource
            .as_deref()
            .unwrap_or_else(|| self.audience.first().map_or("", String::as_str))
    }
}

/// A scope token as RFC 6749 (section 3.3) allows.
fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// Checks access tokens for one gateway: the gateway's HTTP layer under
/// [`HttpAuth::OAuth`](super::HttpAuth::OAuth), or code of your own.
pub struct ResourceServer {
    options: OAuthOptions,
    jwks: Jwks,
    /// Verified tokens by digest: the caller and until when it stands.
    verified: Mutex<Verified>,
    /// `resource_metadata="..."` for `WWW-Authenticate`.
    metadata_url: String,
    /// The metadata document.
    metadata: Value,
}

/// Verified tokens by SHA-256 digest: the caller, and until when.
type Verified = HashMap<[u8; 32], (Arc<Caller>, Instant)>;

/// Why a request is refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum Refusal {
    /// No bearer token (`401` without an error code, RFC 6750 section 3.1).
    Missing,
    /// A token that is not valid (`401`, `invalid_token`).
    Invalid(String),
    /// A valid token without the scopes needed (`403`).
    InsufficientScope,
    /// The issuer's keys cannot be had (`503`).
    Unavailable(Error),
}

impl ResourceServer {
    /// Checks `options` and fetches the key set once (a failure is logged:
    /// requests then get `503` until the keys can be fetched).
    pub async fn new(options: OAuthOptions) -> Result<Self, Error> {
        options.check()?;
        let tls = match options.issuer.starts_with("https://")
            || options
                .jwks_uri
                .as_ref()
                .is_some_and(|u| u.starts_with("https://"))
        {
            true => options.tls.client_config(jwks::BACKEND)?,
            false => Tls::unused(),
        };
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls.config)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::backend_unavailable(jwks::BACKEND, format!("HTTP client: {e}")))?;
        let jwks = Jwks::new(
            client,
            options.issuer.clone(),
            options.jwks_uri.clone(),
            options.jwks_max_age,
            options.jwks_min_interval,
        );
        match jwks.prime().await {
            Ok(n) => {
                tracing::info!(target: "toolexec::oauth", issuer = %options.issuer, keys = n, "fetched the issuer's keys")
            }
            Err(e) => tracing::error!(
                target: "toolexec::oauth",
                issuer = %options.issuer,
                error = %e,
                "cannot fetch the issuer's keys: requests are refused (503) until they can be"
            ),
        }
        let resource = options.resource().to_owned();
        let metadata_url = metadata_url(&resource);
        let mut metadata = json!({
            "resource": resource,
            "authorization_servers": [options.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "toolexec",
        });
        if !options.scopes.is_empty() {
            metadata["scopes_supported"] = json!(options.scopes);
        }
        Ok(ResourceServer {
            options,
            jwks,
            verified: Mutex::default(),
            metadata_url,
            metadata,
        })
    }

    /// True for the paths the metadata is served at.
    pub(super) fn is_metadata_path(&self, path: &str) -> bool {
        path == PROTECTED_RESOURCE_PATH
            || self
                .metadata_url
                .split_once("://")
                .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
                .is_some_and(|p| p == path)
    }

    /// The protected resource metadata document.
    pub(super) fn metadata(&self) -> Response {
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "max-age=3600"),
            ],
            self.metadata.to_string(),
        )
            .into_response()
    }

    /// The caller a request's `Authorization` header proves.
    pub async fn authenticate(&self, value: Option<&HeaderValue>) -> Result<Arc<Caller>, Refusal> {
        let token = super::auth::bearer(value).ok_or(Refusal::Missing)?;
        if self.options.cache_tokens == 0 {
            return self.checked(token).await.map(Arc::new);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((caller, until)) = self.verified.lock().get(&digest)
            && now < *until
        {
            return Ok(caller.clone());
        }
        let caller = Arc::new(self.checked(token).await?);
        let until = now + self.options.jwks_max_age.min(until_exp(&caller.claims));
        let mut verified = self.verified.lock();
        if verified.len() >= self.options.cache_tokens {
            verified.retain(|_, (_, u)| now < *u);
            if verified.len() >= self.options.cache_tokens {
                verified.clear();
            }
        }
        verified.insert(digest, (caller.clone(), until));
        Ok(caller)
    }

    /// [`Self::verify`], logging why a token is refused.
    async fn checked(&self, token: &str) -> Result<Caller, Refusal> {
        let caller = self.verify(token).await;
        if let Err(Refusal::Invalid(why)) = &caller {
            tracing::debug!(target: "toolexec::oauth", reason = %why, "access token refused");
        }
        caller
    }

    async fn verify(&self, token: &str) -> Result<Caller, Refusal> {
        let invalid = |why: String| Refusal::Invalid(why);
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid(format!("longer than {MAX_TOKEN_BYTES} bytes")));
        }
        let head = decode_header(token).map_err(|e| invalid(format!("malformed: {e}")))?;
        if !ALGORITHMS.contains(&head.alg) {
            return Err(invalid(format!("algorithm {:?} is not accepted", head.alg)));
        }
        let jwk = match self.jwks.key(head.kid.as_deref()).await {
            Ok(jwk) => jwk,
            Err(KeyError::Unknown) => {
                return Err(invalid(match &head.kid {
                    Some(kid) => format!("no key {kid:?} in the issuer's key set"),
                    None => "no key id, and the issuer has several keys".into(),
                }));
            }
            Err(KeyError::Unavailable(e)) => return Err(Refusal::Unavailable(e)),
        };
        // A key that names its algorithm is used for that one only (both
        // serialize as their JOSE names).
        if let Some(alg) = jwk.common.key_algorithm
            && serde_json::to_value(alg).ok() != serde_json::to_value(head.alg).ok()
        {
            return Err(invalid(format!(
                "the key is for {alg:?}, the token says {:?}",
                head.alg
            )));
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| invalid(format!("key: {e}")))?;
        let mut validation = Validation::new(head.alg);
        validation.set_issuer(&[&self.options.issuer]);
        validation.set_audience(&self.options.audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.options.leeway.as_secs();
        let data = decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| invalid(e.to_string()))?;
        let claims = data.claims;
        let subject = match claims.get("sub") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(invalid("sub is not a non-empty string".into())),
        };
        let scopes = scopes(&claims);
        if !self.options.scopes.iter().all(|s| scopes.contains(s)) {
            return Err(Refusal::InsufficientScope);
        }
        Ok(Caller {
            principal: Some(subject),
            kind: PrincipalKind::Subject,
            scopes,
            claims,
            credential: Some(AccessToken::new(token)),
            ..Caller::default()
        })
    }

    /// The answer to a refused request.
    pub fn refuse(&self, refusal: Refusal) -> Response {
        let scope = match self.options.scopes.is_empty() {
            true => String::new(),
            false => format!(", scope=\"{}\"", self.options.scopes.join(" ")),
        };
        let metadata = format!("resource_metadata=\"{}\"", self.metadata_url);
        let (status, challenge, body) = match refusal {
            Refusal::Missing => (
                StatusCode::UNAUTHORIZED,
                format!("Bearer {metadata}{scope}"),
                "Unauthorized: send Authorization: Bearer <access token>\n".to_owned(),
            ),
            Refusal::Invalid(why) => (
                StatusCode::UNAUTHORIZED,
                format!(
                    "Bearer error=\"invalid_token\", error_description=\"{}\", {metadata}",
                    quotable(&why)
                ),
                format!("Unauthorized: invalid access token: {why}\n"),
            ),
            Refusal::InsufficientScope => (
                StatusCode::FORBIDDEN,
                format!("Bearer error=\"insufficient_scope\"{scope}, {metadata}"),
                "Forbidden: the access token lacks a scope this server needs\n".to_owned(),
            ),
            Refusal::Unavailable(e) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "10")],
                    format!("Service Unavailable: cannot check access tokens now: {e}\n"),
                )
                    .into_response();
            }
        };
        let challenge = HeaderValue::from_str(&challenge)
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
        (status, [(header::WWW_AUTHENTICATE, challenge)], body).into_response()
    }
}

/// Time left until the token's `exp` (zero when it is missing or past).
fn until_exp(claims: &Map<String, Value>) -> Duration {
    let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Duration::from_secs(exp.saturating_sub(now))
}

/// RFC 9728 section 3.1: the well-known name between the host and the
/// resource's path.
fn metadata_url(resource: &str) -> String {
    let start = resource.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match resource[start..].find('/') {
        Some(slash) => resource.split_at(start + slash),
        None => (resource, ""),
    };
    let path = path.trim_end_matches('/');
    format!("{origin}{PROTECTED_RESOURCE_PATH}{path}")
}

/// The token's scopes: `scope` (space-separated, RFC 8693 and RFC 9068) or
/// `scp` (an array or a string, as some issuers write it).
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => words(s),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// `text` safe inside a quoted `WWW-Authenticate` parameter: printable
/// ASCII without `"` and `\`, at most 200 bytes.
fn quotable(text: &str) -> String {
    text.chars()
        .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_puts_the_well_known_name_before_the_path() {
        assert_eq!(
            metadata_url("https://gw.example.com/mcp"),
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let claims = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(scopes(&claims(json!({"scope": "a  b"}))), ["a", "b"]);
        assert_eq!(scopes(&claims(json!({"scp": ["a", 1, "c"]}))), ["a", "c"]);
        assert!(scopes(&claims(json!({"scope": 3}))).is_empty());
    }

    #[test]
    fn bad_options_name_their_field() {
        let field =
            |o: OAuthOptions| o.check().unwrap_err().to_body().details.unwrap()["field"].clone();
        let good = OAuthOptions::new("https://as.example.com", "https://gw.example.com/mcp");
        good.check().unwrap();
        let mut o = good.clone();
        o.issuer = "as.example.com".into();
        assert_eq!(field(o), "auth.issuer");
        let mut o = good.clone();
        o.audience = vec![];
        assert_eq!(field(o), "auth.audience");
        let mut o = good.clone();
        o.audience = vec!["urn:toolexec".into()];
        assert_eq!(field(o), "auth.resource");
        let mut o = good.clone();
        o.scopes = vec!["tools read".into()];
        assert_eq!(field(o), "auth.scopes");
        assert_eq!(quotable("a \"b\" \\ é"), "a b  ");
    }
}
