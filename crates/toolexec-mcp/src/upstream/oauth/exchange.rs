//! OAuth 2.0 Token Exchange (RFC 8693) for servers that must see the
//! calling user: each request a caller makes to such a server carries a
//! token the authorization server exchanged for the caller's own access
//! token, instead of the gateway's credential.
//!
//! The gateway authenticates to the token endpoint as a confidential client
//! (HTTP Basic, RFC 6749 2.3.1) and sends the caller's token as
//! `subject_token`; the answer is cached per caller token (by SHA-256
//! digest) until shortly before it expires. A caller without an access
//! token (stdio, a named token) is refused with `not_allowed`: such a
//! server never receives the gateway's own credential for a user's call.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;
use toolexec::{Error, Secret};
use url::Url;

use super::http::{AddressPolicy, OAuthHttp, https_or_loopback};

/// `grant_type` of a token exchange.
const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// `subject_token_type` of an OAuth access token.
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
/// Exchanged tokens are used until this long before they expire.
const MARGIN: Duration = Duration::from_secs(30);
/// Lifetime assumed when the answer gives none, and the longest believed.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
const MAX_LIFETIME: Duration = Duration::from_secs(3600);
/// Most exchanged tokens kept.
const MAX_CACHED: usize = 10_000;
/// Deadline of one exchange.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
const MAX_BODY: usize = 64 << 10;

/// Token exchange settings of one upstream server.
///
/// ```
/// use toolexec_mcp::upstream::oauth::TokenExchange;
/// let exchange = TokenExchange::new(
///     "https://auth.example.com/oauth/token",
///     "toolexec-gateway",
///     toolexec::Secret::new("s3cr3t"),
/// );
/// assert!(exchange.check().is_ok());
/// assert!(!format!("{exchange:?}").contains("s3cr3t"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TokenExchange {
    /// The authorization server's token endpoint (`https://`, or
    /// `http://` on loopback).
    pub token_endpoint: String,
    /// The gateway's client id at the authorization server.
    pub client_id: String,
    /// Its secret.
    pub client_secret: Secret,
    /// `audience` asked for (the upstream service's name at the
    /// authorization server), if any.
    pub audience: Option<String>,
    /// `resource` asked for; default: the server's URL.
    pub resource: Option<String>,
    /// `scope` asked for, if any.
    pub scopes: Vec<String>,
}

impl TokenExchange {
    /// Exchange at `token_endpoint` as client `client_id`.
    pub fn new(
        token_endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: Secret,
    ) -> TokenExchange {
        TokenExchange {
            token_endpoint: token_endpoint.into(),
            client_id: client_id.into(),
            client_secret,
            audience: None,
            resource: None,
            scopes: Vec::new(),
        }
    }

    /// Checks the settings; errors name the field
    /// (`transport.token_exchange.*`).
    pub fn check(&self) -> Result<(), Error> {
        let field = |f: &str| format!("transport.token_exchange.{f}");
        let url = Url::parse(&self.token_endpoint)
            .map_err(|e| Error::invalid_request(field("token_endpoint"), e.to_string()))?;
        if !https_or_loopback(&url) {
            return Err(Error::invalid_request(
                field("token_endpoint"),
                "must be https:// (plain http:// only on loopback)",
            ));
        }
        if self.client_id.trim().is_empty() || self.client_id.contains(':') {
            return Err(Error::invalid_request(
                field("client_id"),
                "must be non-empty, without ':'",
            ));
        }
        if self.client_secret.is_empty() {
            return Err(Error::invalid_request(field("client_secret"), "is empty"));
        }
        Ok(())
    }
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct Answer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// An error answer (RFC 6749 5.2).
#[derive(Deserialize)]
struct Refused {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

struct Cached {
    token: Secret,
    until: Instant,
}

/// Exchanges caller tokens for one upstream server.
pub(crate) struct Exchanger {
    server: String,
    settings: TokenExchange,
    resource: String,
    http: reqwest::Client,
    cache: parking_lot::Mutex<HashMap<[u8; 32], Cached>>,
}

impl std::fmt::Debug for Exchanger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanger")
            .field("server", &self.server)
            .field("token_endpoint", &self.settings.token_endpoint)
            .finish_non_exhaustive()
    }
}

impl Exchanger {
    pub(crate) fn new(
        server: &str,
        server_url: &str,
        settings: &TokenExchange,
        tls: rustls::ClientConfig,
    ) -> Result<Exchanger, Error> {
        settings.check()?;
        let endpoint = Url::parse(&settings.token_endpoint).map_err(|e| {
            Error::invalid_request("transport.token_exchange.token_endpoint", e.to_string())
        })?;
        let http = OAuthHttp::client(tls, AddressPolicy::for_server(&endpoint), TIMEOUT)
            .map_err(|e| Error::backend_unavailable(server, e))?;
        Ok(Exchanger {
            server: server.to_owned(),
            resource: settings
                .resource
                .clone()
                .unwrap_or_else(|| server_url.to_owned()),
            settings: settings.clone(),
            http,
            cache: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    fn unavailable(&self, message: impl std::fmt::Display) -> Error {
        Error::backend_unavailable(&self.server, format!("token exchange failed: {message}"))
    }

    /// The token to send for a caller whose access token is `subject`.
    pub(crate) async fn token_for(&self, subject: &str) -> Result<Secret, Error> {
        let key: [u8; 32] = Sha256::digest(subject.as_bytes()).into();
        let now = Instant::now();
        if let Some(hit) = self.cache.lock().get(&key).filter(|c| c.until > now) {
            return Ok(hit.token.clone());
        }
        let mut form = vec![
            ("grant_type", GRANT),
            ("subject_token", subject),
            ("subject_token_type", ACCESS_TOKEN),
            ("resource", self.resource.as_str()),
        ];
        if let Some(a) = &self.settings.audience {
            form.push(("audience", a));
        }
        let scope = self.settings.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            form_escape(&self.settings.client_id),
            form_escape(self.settings.client_secret.expose())
        ));
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let mut response = self
            .http
            .post(&self.settings.token_endpoint)
            .header(http::header::AUTHORIZATION, format!("Basic {basic}"))
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| self.unavailable(crate::upstream::session::error_chain(&e)))?;
        let status = response.status();
        let bytes = toolexec_http::body::read_capped(&mut response, MAX_BODY)
            .await
            .map_err(|e| self.unavailable(e))?;
        if !status.is_success() {
            let reason = match serde_json::from_slice::<Refused>(&bytes) {
                Ok(r) => format!("{} {}", r.error, r.error_description.unwrap_or_default()),
                Err(_) => format!("HTTP {status}"),
            };
            return Err(self.unavailable(format!(
                "the authorization server refused: {}",
                super::printable(reason.trim())
            )));
        }
        let answer: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| self.unavailable(format!("unreadable answer: {e}")))?;
        // Sent as a bearer token: a DPoP-bound or non-access token is not one.
        if !answer
            .token_type
            .as_deref()
            .is_none_or(|t| t.eq_ignore_ascii_case("bearer"))
        {
            return Err(self.unavailable(format!(
                "the exchanged token is of type {:?}, not a bearer token",
                super::printable(answer.token_type.as_deref().unwrap_or_default())
            )));
        }
        let lifetime = answer
            .expires_in
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_LIFETIME)
            .min(MAX_LIFETIME);
        let token = Secret::new(answer.access_token);
        // A token too short-lived to outlast the margin is used once.
        if let Some(until) = now
            .checked_add(lifetime.saturating_sub(MARGIN))
            .filter(|_| lifetime > MARGIN)
        {
            let mut cache = self.cache.lock();
            if cache.len() >= MAX_CACHED {
                cache.retain(|_, c| c.until > now);
            }
            if cache.len() >= MAX_CACHED {
                // Still full of live tokens: drop the half that expires
                // first, not everyone's.
                let mut ends: Vec<Instant> = cache.values().map(|c| c.until).collect();
                ends.sort_unstable();
                let cut = ends[ends.len() / 2];
                cache.retain(|_, c| c.until > cut);
            }
            cache.insert(
                key,
                Cached {
                    token: token.clone(),
                    until,
                },
            );
        }
        Ok(token)
    }
}

/// `application/x-www-form-urlencoded` escaping of a client id or secret
/// inside HTTP Basic (RFC 6749 2.3.1).
fn form_escape(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let ok = TokenExchange::new("https://as.example/token", "gw", Secret::new("s"));
        assert!(ok.check().is_ok());
        let field = |t: TokenExchange| t.check().unwrap_err().field().unwrap().to_owned();
        assert_eq!(
            field(TokenExchange::new(
                "http://as.example/token",
                "gw",
                Secret::new("s")
            )),
            "transport.token_exchange.token_endpoint"
        );
        assert!(
            TokenExchange::new("http://127.0.0.1:9/token", "gw", Secret::new("s"))
                .check()
                .is_ok()
        );
        assert_eq!(
            field(TokenExchange::new(
                "https://as.example/token",
                "a:b",
                Secret::new("s")
            )),
            "transport.token_exchange.client_id"
        );
        assert_eq!(
            field(TokenExchange::new(
                "https://as.example/token",
                "gw",
                Secret::new("")
            )),
            "transport.token_exchange.client_secret"
        );
    }

    #[test]
    fn an_authorization_header_cannot_ride_along() {
        let mut headers = std::collections::BTreeMap::new();
        headers.insert("Authorization".to_owned(), Secret::new("Bearer gateway"));
        let transport = crate::upstream::UpstreamTransport::Http {
            url: "http://127.0.0.1:1/mcp".into(),
            headers,
            bearer_token: None,
            tls: Default::default(),
            oauth: None,
            token_exchange: Some(TokenExchange::new(
                "http://127.0.0.1:9/token",
                "gw",
                Secret::new("s"),
            )),
        };
        let e = crate::upstream::session::Endpoint::from_config("s", &transport).unwrap_err();
        assert_eq!(e.field(), Some("transport.headers.Authorization"), "{e}");
    }

    #[test]
    fn basic_credentials_are_form_escaped() {
        assert_eq!(form_escape("a b+c/d"), "a+b%2Bc%2Fd");
        assert_eq!(form_escape("plain"), "plain");
    }
}
