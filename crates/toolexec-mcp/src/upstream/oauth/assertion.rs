//! `private_key_jwt` client authentication (RFC 7523 section 2.2) for the
//! client credentials grant: the client proves itself with a short-lived
//! JWT signed by its own key instead of a shared secret. Signed with
//! `jsonwebtoken` (pure-Rust crypto); the token request is made here, since
//! rmcp's implementation of it needs a C crypto library.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rmcp::transport::auth::{OAuthTokenResponse, StoredCredentials};
use serde_json::json;
use toolexec::{Error, Secret};

/// `client_assertion_type` of a JWT.
const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// Lifetime of one assertion.
const LIFETIME: Duration = Duration::from_secs(60);
/// Largest token answer read.
const MAX_BODY: usize = 64 << 10;

/// A client's signing key.
pub(crate) struct ClientKey {
    alg: Algorithm,
    key: EncodingKey,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl ClientKey {
    /// The PEM key `pem` for algorithm `alg` (RS256/384/512, PS256/384/512,
    /// ES256/384, EdDSA). Errors name `transport.oauth.client_key`.
    pub(crate) fn new(pem: &Secret, alg: &str) -> Result<ClientKey, Error> {
        let field = "transport.oauth.client_key";
        let alg: Algorithm = alg.parse().map_err(|_| {
            Error::invalid_request(
                "transport.oauth.client_key_alg",
                format!("{alg:?} is not a JWS algorithm"),
            )
        })?;
        let pem = pem.expose().as_bytes();
        let key = match alg {
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => EncodingKey::from_rsa_pem(pem),
            Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(pem),
            _ => {
                return Err(Error::invalid_request(
                    "transport.oauth.client_key_alg",
                    "must be an asymmetric algorithm (RS*, PS*, ES256, ES384, EdDSA)",
                ));
            }
        }
        .map_err(|e| Error::invalid_request(field, format!("not a PEM key for {alg:?}: {e}")))?;
        Ok(ClientKey { alg, key })
    }

    /// A fresh assertion: `iss` and `sub` the client, `aud` the
    /// authorization server, a minute of validity, a random `jti`.
    fn assertion(&self, client_id: &str, audience: &str) -> Result<String, String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs();
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| format!("no randomness: {e}"))?;
        let claims = json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + LIFETIME.as_secs(),
            "jti": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(jti),
        });
        jsonwebtoken::encode(&Header::new(self.alg), &claims, &self.key)
            .map_err(|e| format!("cannot sign the client assertion: {e}"))
    }
}

/// Where and how to ask for a token.
pub(crate) struct TokenRequest<'a> {
    pub(crate) http: &'a reqwest::Client,
    pub(crate) token_endpoint: &'a str,
    /// `aud` of the assertion (the issuer, else the token endpoint).
    pub(crate) audience: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) scopes: &'a [String],
    pub(crate) resource: &'a str,
}

/// Runs the client credentials grant authenticated with `key`; returns
/// what to store.
pub(crate) async fn client_credentials(
    key: &ClientKey,
    request: TokenRequest<'_>,
    issuer: Option<String>,
) -> Result<StoredCredentials, String> {
    use oauth2::TokenResponse as _;
    let assertion = key.assertion(request.client_id, request.audience)?;
    let scope = request.scopes.join(" ");
    let body = {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials")
            .append_pair("client_assertion_type", ASSERTION_TYPE)
            .append_pair("client_assertion", &assertion)
            .append_pair("resource", request.resource);
        if !scope.is_empty() {
            form.append_pair("scope", &scope);
        }
        form.finish()
    };
    let mut response = request
        .http
        .post(request.token_endpoint)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| crate::upstream::session::error_chain(&e))?;
    let status = response.status();
    let body = toolexec_http::body::read_capped(&mut response, MAX_BODY)
        .await
        .map_err(|e| format!("token answer: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "the token endpoint refused (HTTP {status}): {}",
            super::printable(&String::from_utf8_lossy(&body))
        ));
    }
    let token: OAuthTokenResponse =
        serde_json::from_slice(&body).map_err(|e| format!("unreadable token answer: {e}"))?;
    let granted = token
        .scopes()
        .map(|s| s.iter().map(|s| s.to_string()).collect())
        .unwrap_or_else(|| request.scopes.to_vec());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .ok();
    Ok(
        StoredCredentials::new(request.client_id.to_owned(), Some(token), granted, now)
            .with_issuer(issuer),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_when_configured() {
        let field = |pem: &str, alg: &str| {
            ClientKey::new(&Secret::new(pem), alg)
                .unwrap_err()
                .field()
                .unwrap()
                .to_owned()
        };
        assert_eq!(field("x", "HS256"), "transport.oauth.client_key_alg");
        assert_eq!(field("x", "nope"), "transport.oauth.client_key_alg");
        assert_eq!(field("not a pem", "ES256"), "transport.oauth.client_key");
        let der = toolexec_testkit::tls::p256_pkcs8_der();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        let key = ClientKey::new(&Secret::new(pem), "ES256").unwrap();
        let jwt = key.assertion("bot", "https://as.example").unwrap();
        assert_eq!(jwt.split('.').count(), 3);
        assert!(!format!("{key:?}").contains("PRIVATE"));
    }
}
