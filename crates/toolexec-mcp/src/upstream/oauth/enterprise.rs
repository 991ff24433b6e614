//! Enterprise-managed authorization (SEP-990, "cross-app access"), on
//! rmcp's `enterprise` module: the user's enterprise identity provider
//! exchanges their OpenID Connect ID token for an identity assertion grant
//! (ID-JAG, RFC 8693), and the MCP server's authorization server redeems
//! it for an access token (JWT bearer grant, RFC 7523). No browser: the ID
//! token comes from the enterprise's single sign-on, and a new access token
//! is fetched with it whenever the last one expires.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use oauth2::ClientSecret;
use rmcp::transport::auth::enterprise::{
    EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest,
};
use rmcp::transport::auth::{OAuthHttpClient, OAuthTokenResponse, StoredCredentials};
use serde_json::json;
use toolexec::{Error, Secret};
use url::Url;

use super::http::{AddressPolicy, OAuthHttp, https_or_loopback};

/// The enterprise identity provider of [`Grant::EnterpriseManaged`](super::Grant::EnterpriseManaged).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnterpriseIdp {
    /// The identity provider's issuer identifier.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// This client's id there.
    pub client_id: String,
    /// Its secret there, for a confidential client (HTTP Basic).
    pub client_secret: Option<Secret>,
    /// The user's ID token from the provider, exchanged for each new
    /// access token.
    pub id_token: Secret,
}

impl EnterpriseIdp {
    /// The provider `issuer` with its `token_endpoint`, client `client_id`,
    /// and the user's `id_token`.
    pub fn new(
        issuer: impl Into<String>,
        token_endpoint: impl Into<String>,
        client_id: impl Into<String>,
        id_token: Secret,
    ) -> EnterpriseIdp {
        EnterpriseIdp {
            issuer: issuer.into(),
            token_endpoint: token_endpoint.into(),
            client_id: client_id.into(),
            client_secret: None,
            id_token,
        }
    }

    /// Checks the settings; errors name `transport.oauth.enterprise.*`.
    pub(crate) fn check(&self) -> Result<(), Error> {
        let field = |f: &str| format!("transport.oauth.enterprise.{f}");
        for (name, value) in [
            ("issuer", &self.issuer),
            ("token_endpoint", &self.token_endpoint),
        ] {
            if !Url::parse(value).is_ok_and(|u| https_or_loopback(&u)) {
                return Err(Error::invalid_request(
                    field(name),
                    "must be https:// (plain http:// only on loopback)",
                ));
            }
        }
        if self.client_id.trim().is_empty() {
            return Err(Error::invalid_request(field("client_id"), "is empty"));
        }
        if self.id_token.is_empty() {
            return Err(Error::invalid_request(field("id_token"), "is empty"));
        }
        Ok(())
    }
}

fn authentication(secret: Option<&Secret>) -> EmaClientAuthentication {
    match secret {
        Some(s) => {
            EmaClientAuthentication::ClientSecretBasic(ClientSecret::new(s.expose().to_owned()))
        }
        None => EmaClientAuthentication::None,
    }
}

/// Both exchanges' HTTP clients: the provider's under its own address
/// policy, the resource authorization server's under the MCP server's.
pub(crate) struct Clients {
    idp: Arc<dyn OAuthHttpClient>,
    resource: Arc<dyn OAuthHttpClient>,
}

impl Clients {
    pub(crate) fn new(
        idp: &EnterpriseIdp,
        server_policy: AddressPolicy,
        tls: &rustls::ClientConfig,
    ) -> Result<Clients, String> {
        let idp_url = Url::parse(&idp.token_endpoint).map_err(|e| e.to_string())?;
        Ok(Clients {
            idp: Arc::new(OAuthHttp::new(
                tls.clone(),
                AddressPolicy::for_server(&idp_url),
            )?),
            resource: Arc::new(OAuthHttp::new(tls.clone(), server_policy)?),
        })
    }
}

/// What the resource authorization server is, from discovery.
pub(crate) struct ResourceServer<'a> {
    pub(crate) issuer: Option<&'a str>,
    pub(crate) token_endpoint: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) client_secret: Option<&'a Secret>,
}

/// A new access token for `resource` (the MCP server's URL), as what to store.
pub(crate) async fn fetch(
    idp: &EnterpriseIdp,
    clients: &Clients,
    server: ResourceServer<'_>,
    resource: &str,
    scopes: &[String],
) -> Result<StoredCredentials, String> {
    let issuer = server
        .issuer
        .ok_or("the authorization server's metadata has no issuer (required for an ID-JAG)")?;
    let provider = EmaAuthorizationServer::new(&idp.issuer, &idp.token_endpoint, &idp.client_id)
        .with_client_authentication(authentication(idp.client_secret.as_ref()));
    let resource_as = EmaAuthorizationServer::new(issuer, server.token_endpoint, server.client_id)
        .with_client_authentication(authentication(server.client_secret));
    let token = EmaExchangeRequest::new_with_id_token(
        provider,
        resource_as,
        resource,
        idp.id_token.expose(),
    )
    .with_scopes(scopes.iter().cloned())
    .exchange(clients.idp.as_ref(), clients.resource.as_ref())
    .await
    .map_err(|e| format!("enterprise-managed authorization failed: {e}"))?;
    let mut granted: Vec<String> = token.scopes.into_iter().collect();
    granted.sort();
    let response: OAuthTokenResponse = serde_json::from_value(json!({
        "access_token": token.access_token.secret(),
        "token_type": "Bearer",
        "expires_in": token.expires_in.map(|d| d.as_secs()),
    }))
    .map_err(|e| e.to_string())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .ok();
    Ok(
        StoredCredentials::new(server.client_id.to_owned(), Some(response), granted, now)
            .with_issuer(Some(issuer.to_owned())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let idp = |endpoint: &str, token: &str| {
            EnterpriseIdp::new("https://idp.example", endpoint, "c", Secret::new(token))
        };
        assert!(idp("https://idp.example/token", "t").check().is_ok());
        assert!(idp("http://127.0.0.1:9/token", "t").check().is_ok());
        let field = |i: EnterpriseIdp| i.check().unwrap_err().field().unwrap().to_owned();
        assert_eq!(
            field(idp("http://idp.example/token", "t")),
            "transport.oauth.enterprise.token_endpoint"
        );
        assert_eq!(
            field(idp("https://idp.example/token", "")),
            "transport.oauth.enterprise.id_token"
        );
        assert!(!format!("{:?}", idp("https://idp.example/token", "sekrit")).contains("sekrit"));
    }
}
