//! The settings of an upstream server's OAuth sign-in: [`Grant`] and
//! [`UpstreamOAuth`], checked before anything connects.

use std::path::PathBuf;

use toolexec::{Error, Secret};
use url::Url;

use super::assertion;
use super::enterprise::EnterpriseIdp;

/// How toolexec gets access tokens for one upstream server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Grant {
    /// A person signs in once with [`login`](super::login()) (authorization code + PKCE).
    #[default]
    AuthorizationCode,
    /// A machine account: [`UpstreamOAuth::client_id`] and
    /// [`UpstreamOAuth::client_secret`] are exchanged for tokens.
    ClientCredentials,
    /// Enterprise-managed (SEP-990): the user's ID token from
    /// [`UpstreamOAuth::enterprise`]'s identity provider is exchanged for
    /// each access token, without a browser.
    EnterpriseManaged,
}

/// OAuth 2.1 sign-in to an upstream HTTP server.
///
/// ```
/// use toolexec_mcp::upstream::oauth::{Grant, UpstreamOAuth};
/// let mut oauth = UpstreamOAuth::new("/home/me/.local/state/toolexec/oauth/remote.json");
/// oauth.grant = Grant::ClientCredentials;
/// oauth.client_id = Some("ci-bot".into());
/// oauth.client_secret = Some(toolexec::Secret::new("s3cr3t"));
/// assert!(oauth.check().is_ok());
/// assert!(!format!("{oauth:?}").contains("s3cr3t"));
/// ```
#[derive(Debug, Clone)]
pub struct UpstreamOAuth {
    /// Which grant gets tokens.
    pub grant: Grant,
    /// A client registered with the authorization server beforehand. Without
    /// one, the authorization code grant uses [`client_metadata_url`] where
    /// the server supports it, else dynamic client registration.
    ///
    /// [`client_metadata_url`]: UpstreamOAuth::client_metadata_url
    pub client_id: Option<String>,
    /// The secret of [`client_id`](UpstreamOAuth::client_id), for a
    /// confidential client.
    pub client_secret: Option<Secret>,
    /// Instead of a secret, with client credentials: the client's private
    /// key (PEM), to sign `private_key_jwt` assertions (RFC 7523).
    pub client_key: Option<Secret>,
    /// The key's JWS algorithm (default `RS256`; `ES256`, `EdDSA`, ...).
    pub client_key_alg: Option<String>,
    /// The identity provider of [`Grant::EnterpriseManaged`].
    pub enterprise: Option<EnterpriseIdp>,
    /// An `https://` URL of this client's metadata document, used as its
    /// client id where the authorization server supports Client ID
    /// Metadata Documents.
    pub client_metadata_url: Option<String>,
    /// The client name sent with a dynamic registration.
    pub client_name: String,
    /// Scopes to ask for. Empty: those the server's challenge names, else
    /// all it lists as supported, else none.
    pub scopes: Vec<String>,
    /// The token file (created with mode 0600 in a 0700 directory).
    pub token_file: PathBuf,
    /// The authorization server's issuer identifier, when known: discovery
    /// that finds another is refused. Without it, the first issuer that
    /// grants tokens is remembered in the token file and later ones are
    /// refused. Recommended with client credentials.
    pub issuer: Option<String>,
}

impl UpstreamOAuth {
    /// Authorization code sign-in with dynamic registration, storing tokens
    /// in `token_file`.
    pub fn new(token_file: impl Into<PathBuf>) -> UpstreamOAuth {
        UpstreamOAuth {
            grant: Grant::AuthorizationCode,
            client_id: None,
            client_secret: None,
            client_key: None,
            client_key_alg: None,
            enterprise: None,
            client_metadata_url: None,
            client_name: "toolexec".to_owned(),
            scopes: Vec::new(),
            token_file: token_file.into(),
            issuer: None,
        }
    }

    /// Checks the settings; errors name the field (`transport.oauth.*`).
    pub fn check(&self) -> Result<(), Error> {
        let field = |f: &str| format!("transport.oauth.{f}");
        if self
            .client_id
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
        {
            return Err(Error::invalid_request(field("client_id"), "is empty"));
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err(Error::invalid_request(
                field("client_secret"),
                "needs client_id (the client it belongs to)",
            ));
        }
        if self.client_key.is_some() && self.client_secret.is_some() {
            return Err(Error::invalid_request(
                field("client_key"),
                "client_key and client_secret are alternatives: set one",
            ));
        }
        if self.client_key.is_some() && self.grant != Grant::ClientCredentials {
            return Err(Error::invalid_request(
                field("client_key"),
                "is for the client_credentials grant",
            ));
        }
        if self.grant == Grant::ClientCredentials
            && (self.client_id.is_none()
                || (self.client_secret.is_none() && self.client_key.is_none()))
        {
            return Err(Error::invalid_request(
                field("grant"),
                "client_credentials needs client_id and client_secret (or client_key)",
            ));
        }
        if self.grant == Grant::EnterpriseManaged {
            let Some(idp) = &self.enterprise else {
                return Err(Error::invalid_request(
                    field("enterprise"),
                    "enterprise_managed needs the identity provider's settings",
                ));
            };
            idp.check()?;
            if self.client_id.is_none() {
                return Err(Error::invalid_request(
                    field("client_id"),
                    "enterprise_managed needs the client registered at the server's \
                     authorization server",
                ));
            }
        } else if self.enterprise.is_some() {
            return Err(Error::invalid_request(
                field("enterprise"),
                "is for the enterprise_managed grant",
            ));
        }
        if let Some(pem) = &self.client_key {
            assertion::ClientKey::new(pem, self.client_key_alg.as_deref().unwrap_or("RS256"))?;
        }
        if let Some(u) = &self.client_metadata_url {
            let ok = Url::parse(u)
                .is_ok_and(|u| u.scheme() == "https" && u.path() != "/" && !u.path().is_empty());
            if !ok {
                return Err(Error::invalid_request(
                    field("client_metadata_url"),
                    "must be an https:// URL with a path",
                ));
            }
        }
        if let Some(issuer) = &self.issuer
            && !Url::parse(issuer).is_ok_and(|u| matches!(u.scheme(), "https" | "http"))
        {
            return Err(Error::invalid_request(
                field("issuer"),
                "must be the authorization server's http(s) URL",
            ));
        }
        if self.token_file.as_os_str().is_empty() {
            return Err(Error::invalid_request(field("token_file"), "is empty"));
        }
        for s in &self.scopes {
            if !is_scope_token(s) {
                return Err(Error::invalid_request(
                    field("scopes"),
                    format!("{s:?} is not a scope token"),
                ));
            }
        }
        Ok(())
    }
}

/// Whether `s` is a scope token (RFC 6749 3.3: `%x21 / %x23-5B / %x5D-7E`).
pub(crate) fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(o: &UpstreamOAuth) -> String {
        o.check()
            .unwrap_err()
            .field()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn bad_settings_name_their_field() {
        let mut o = UpstreamOAuth::new("/tmp/x.json");
        assert!(o.check().is_ok());
        o.client_secret = Some(Secret::new("s"));
        assert_eq!(field_of(&o), "transport.oauth.client_secret");
        o = UpstreamOAuth::new("/tmp/x.json");
        o.grant = Grant::ClientCredentials;
        assert_eq!(field_of(&o), "transport.oauth.grant");
        o = UpstreamOAuth::new("/tmp/x.json");
        o.client_metadata_url = Some("http://example.com/client.json".into());
        assert_eq!(field_of(&o), "transport.oauth.client_metadata_url");
        o.client_metadata_url = Some("https://example.com/".into());
        assert_eq!(field_of(&o), "transport.oauth.client_metadata_url");
        o = UpstreamOAuth::new("/tmp/x.json");
        o.scopes = vec!["a b".into()];
        assert_eq!(field_of(&o), "transport.oauth.scopes");
        o = UpstreamOAuth::new("");
        assert_eq!(field_of(&o), "transport.oauth.token_file");
        o = UpstreamOAuth::new("/tmp/x.json");
        o.issuer = Some("not a url".into());
        assert_eq!(field_of(&o), "transport.oauth.issuer");
    }
}
