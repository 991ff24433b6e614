//! [`Authorizer`]: the rmcp authorization manager one upstream server's
//! sessions share, ready for them (registration from the token file or the
//! configuration, the authorization server checked), with the token
//! requests toolexec makes itself (client credentials top-up and step-up,
//! `private_key_jwt`, enterprise-managed authorization).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, ClientCredentialsConfig, OAuthClientConfig,
    WWWAuthenticateParams,
};
use tokio::sync::Mutex;
use url::Url;

use super::http::{AddressPolicy, OAuthHttp};
use super::settings::is_scope_token;
use super::store::TokenStore;
use super::{Grant, UpstreamOAuth, assertion, describe, enterprise, printable};
use crate::upstream::http_client::SessionAwareClient;

/// Redirect URI configured on clients that only refresh tokens (the
/// authorization code flow sets its real loopback one).
const REFRESH_ONLY_REDIRECT: &str = "http://127.0.0.1/callback";
/// Most scopes asked for with client credentials.
const MAX_SCOPES: usize = 32;
/// Least time between two client credentials step-ups.
const STEP_UP_INTERVAL: Duration = Duration::from_secs(5);

/// Signs in to one upstream server for its sessions: the rmcp manager,
/// shared by every session of the server, and the token file.
pub(crate) struct Authorizer {
    server: String,
    url: Url,
    options: UpstreamOAuth,
    store: TokenStore,
    /// rmcp's client around the shared manager (sessions clone it with
    /// their own HTTP client).
    template: AuthClient<SessionAwareClient>,
    manager: Arc<Mutex<AuthorizationManager>>,
    /// Set once the manager knows the client (and, for client credentials,
    /// the authorization server's metadata).
    prepared: tokio::sync::OnceCell<()>,
    /// Scopes asked for by client credentials (configured ones, then those
    /// step-ups added).
    scopes: parking_lot::Mutex<Vec<String>>,
    /// When the last client credentials step-up happened.
    last_step_up: parking_lot::Mutex<Option<Instant>>,
    /// The client's signing key (`private_key_jwt`), with the token
    /// endpoint discovery found and the client for token requests.
    key: Option<assertion::ClientKey>,
    /// The HTTP clients of enterprise-managed authorization.
    enterprise: Option<enterprise::Clients>,
    endpoint: std::sync::OnceLock<TokenEndpoint>,
    http: reqwest::Client,
    policy: AddressPolicy,
}

/// The authorization server's token endpoint, for `private_key_jwt`.
struct TokenEndpoint {
    url: String,
    /// `aud` of the assertions: the issuer, else the endpoint.
    audience: String,
    issuer: Option<String>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("server", &self.server)
            .field("grant", &self.options.grant)
            .finish_non_exhaustive()
    }
}

/// Refuses an authorization server other than the one configured
/// ([`UpstreamOAuth::issuer`]) or the one that issued the stored tokens,
/// and guessed endpoints (a server without metadata) once tokens came from
/// a real one: a server that turns hostile cannot redirect the client
/// secret or the refresh token to itself.
/// `found` is the issuer discovery found (`None`: no metadata, guessed
/// endpoints).
pub(crate) fn check_authorization_server(
    options: &UpstreamOAuth,
    found: Option<&str>,
    stored_issuer: Option<&str>,
) -> Result<(), String> {
    let shown = |i: Option<&str>| printable(i.unwrap_or("none (no metadata)"));
    if let Some(pinned) = options.issuer.as_deref()
        && found != Some(pinned)
    {
        return Err(format!(
            "the authorization server is {}, not the configured issuer {pinned}: refused",
            shown(found)
        ));
    }
    if let Some(stored) = stored_issuer
        && found != Some(stored)
    {
        return Err(format!(
            "the authorization server is now {}, but the stored tokens came from {stored}: \
             refused (if the move is expected, sign in again: toolexec auth logout, then login)",
            shown(found)
        ));
    }
    Ok(())
}

/// The rmcp manager for a server, with the address-checked HTTP client and
/// the token file.
pub(crate) async fn manager_for(
    url: &Url,
    tls: &rustls::ClientConfig,
    store: &TokenStore,
) -> Result<AuthorizationManager, String> {
    let http = OAuthHttp::new(tls.clone(), AddressPolicy::for_server(url))?;
    let mut manager =
        AuthorizationManager::new_with_oauth_http_client(url.as_str(), Arc::new(http))
            .await
            .map_err(|e| describe(&e))?;
    manager.set_credential_store(store.clone());
    Ok(manager)
}

impl Authorizer {
    pub(crate) async fn new(
        server: &str,
        url: &str,
        options: &UpstreamOAuth,
        tls: rustls::ClientConfig,
    ) -> Result<Arc<Authorizer>, String> {
        let url = Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
        let store = TokenStore::new(options.token_file.clone(), url.as_str());
        let manager = manager_for(&url, &tls, &store).await?;
        let policy = AddressPolicy::for_server(&url);
        let key = match &options.client_key {
            Some(pem) => Some(
                assertion::ClientKey::new(
                    pem,
                    options.client_key_alg.as_deref().unwrap_or("RS256"),
                )
                .map_err(|e| e.to_body().message)?,
            ),
            None => None,
        };
        let http = OAuthHttp::client(tls.clone(), policy, Duration::from_secs(30))?;
        let enterprise = match (&options.grant, &options.enterprise) {
            (Grant::EnterpriseManaged, Some(idp)) => {
                Some(enterprise::Clients::new(idp, policy, &tls)?)
            }
            _ => None,
        };
        let template = AuthClient::new(SessionAwareClient::new(tls)?, manager);
        Ok(Arc::new(Authorizer {
            server: server.to_owned(),
            url,
            options: options.clone(),
            store,
            manager: template.auth_manager.clone(),
            template,
            prepared: tokio::sync::OnceCell::new(),
            scopes: parking_lot::Mutex::new(options.scopes.clone()),
            last_step_up: parking_lot::Mutex::new(None),
            key,
            enterprise,
            endpoint: std::sync::OnceLock::new(),
            http,
            policy,
        }))
    }

    /// The rmcp client that adds the token to each request of a session
    /// made with `http`.
    pub(crate) fn client(&self, http: SessionAwareClient) -> AuthClient<SessionAwareClient> {
        let mut client = self.template.clone();
        client.http_client = http;
        client
    }

    /// Makes the manager ready for this server's sessions (once): the
    /// client registration from the token file or the configuration, and,
    /// for client credentials, the authorization server's metadata.
    pub(crate) async fn prepare(&self) -> Result<(), String> {
        self.prepared
            .get_or_try_init(|| async {
                let mut manager = self.manager.lock().await;
                let record = self.store.record().await?;
                if self.options.grant == Grant::AuthorizationCode && record.credentials.is_none() {
                    return Err(self.not_signed_in());
                }
                let resolution = manager
                    .resolve_metadata()
                    .await
                    .map_err(|e| format!("OAuth discovery failed: {}", describe(&e)))?;
                check_authorization_server(
                    &self.options,
                    resolution.metadata.issuer.as_deref(),
                    record.issuer.as_deref(),
                )?;
                let token_endpoint = resolution.metadata.token_endpoint.clone();
                let issuer = resolution.metadata.issuer.clone();
                manager.set_metadata(resolution.metadata);
                let remember = || -> Result<(), String> {
                    let url = Url::parse(&token_endpoint)
                        .map_err(|e| format!("bad token endpoint {token_endpoint:?}: {e}"))?;
                    self.policy.check_url(&url)?;
                    let audience = issuer.clone().unwrap_or_else(|| token_endpoint.clone());
                    let _ = self.endpoint.set(TokenEndpoint {
                        url: token_endpoint,
                        audience,
                        issuer,
                    });
                    Ok(())
                };
                match self.options.grant {
                    Grant::AuthorizationCode => {
                        manager
                            .initialize_from_store()
                            .await
                            .map_err(|e| describe(&e))?;
                        let secret = self
                            .options
                            .client_secret
                            .clone()
                            .or(self.store.client_secret().await?);
                        if let (Some(id), Some(secret)) = (record.client_id, secret) {
                            manager
                                .configure_client(
                                    OAuthClientConfig::new(id, REFRESH_ONLY_REDIRECT)
                                        .with_client_secret(secret.expose()),
                                )
                                .map_err(|e| describe(&e))?;
                        }
                    }
                    // Token requests made here: remember the endpoint.
                    Grant::EnterpriseManaged => remember()?,
                    Grant::ClientCredentials if self.key.is_some() => remember()?,
                    Grant::ClientCredentials => {
                        let config = self.credentials_config();
                        manager
                            .validate_client_credentials_metadata(&config)
                            .map_err(|e| describe(&e))?;
                        manager
                            .configure_client_credentials(&config)
                            .map_err(|e| describe(&e))?;
                    }
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    fn not_signed_in(&self) -> String {
        format!(
            "not signed in to {0}: run `toolexec auth login {0}` (tokens: {1})",
            self.server,
            self.store.path().display()
        )
    }

    fn credentials_config(&self) -> ClientCredentialsConfig {
        ClientCredentialsConfig::ClientSecret {
            client_id: self.options.client_id.clone().unwrap_or_default(),
            client_secret: self
                .options
                .client_secret
                .as_ref()
                .map(|s| s.expose().to_owned())
                .unwrap_or_default(),
            scopes: self.scopes.lock().clone(),
            resource: Some(self.url.as_str().to_owned()),
        }
    }

    /// Client credentials: a token is at hand, fetched now if the stored
    /// one is missing or about to expire. Other grants: nothing to do (rmcp
    /// refreshes).
    pub(crate) async fn top_up(&self) -> Result<(), AuthError> {
        if self.options.grant == Grant::AuthorizationCode {
            return Ok(());
        }
        let manager = self.manager.lock().await;
        match manager.get_access_token().await {
            Ok(_) => Ok(()),
            Err(AuthError::AuthorizationRequired) => {
                let scopes = self.scopes.lock().clone();
                self.fetch(&manager, scopes).await?;
                tracing::debug!(
                    target: "toolexec_mcp::upstream::oauth",
                    server = %self.server,
                    "fetched a client credentials token"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A client credentials token for `scopes`, stored: authenticated with
    /// the client's key (`private_key_jwt`) or its secret (rmcp).
    async fn fetch(
        &self,
        manager: &AuthorizationManager,
        scopes: Vec<String>,
    ) -> Result<(), AuthError> {
        if let (Some(clients), Some(endpoint), Some(idp)) = (
            &self.enterprise,
            self.endpoint.get(),
            &self.options.enterprise,
        ) {
            let server = enterprise::ResourceServer {
                issuer: endpoint.issuer.as_deref(),
                token_endpoint: &endpoint.url,
                client_id: self.options.client_id.as_deref().unwrap_or_default(),
                client_secret: self.options.client_secret.as_ref(),
            };
            let stored = enterprise::fetch(idp, clients, server, self.url.as_str(), &scopes)
                .await
                .map_err(AuthError::ClientCredentialsError)?;
            return rmcp::transport::auth::CredentialStore::save(&self.store, stored).await;
        }
        if let (Some(key), Some(endpoint)) = (&self.key, self.endpoint.get()) {
            let request = assertion::TokenRequest {
                http: &self.http,
                token_endpoint: &endpoint.url,
                audience: &endpoint.audience,
                client_id: self.options.client_id.as_deref().unwrap_or_default(),
                scopes: &scopes,
                resource: self.url.as_str(),
            };
            let stored = assertion::client_credentials(key, request, endpoint.issuer.clone())
                .await
                .map_err(AuthError::ClientCredentialsError)?;
            return rmcp::transport::auth::CredentialStore::save(&self.store, stored).await;
        }
        let mut config = self.credentials_config();
        if let ClientCredentialsConfig::ClientSecret { scopes: asked, .. } = &mut config {
            *asked = scopes;
        }
        manager
            .exchange_client_credentials(&config)
            .await
            .map(|_| ())
    }

    /// Client credentials after a `403 insufficient_scope`: asks for a token
    /// with the scopes the challenge names added. Returns whether there is
    /// a new token worth retrying with: false when the challenge adds no
    /// scope (retrying would loop), when the scope list is full, or when a
    /// step-up happened less than [`STEP_UP_INTERVAL`] ago. The scopes are
    /// kept only once the authorization server granted a token for them.
    pub(crate) async fn step_up(&self, challenge: &str) -> Result<bool, AuthError> {
        if self.options.grant == Grant::AuthorizationCode {
            return Ok(false);
        }
        let params = WWWAuthenticateParams::parse(challenge, &self.url);
        let mut wanted = self.scopes.lock().clone();
        let before = wanted.len();
        for s in params
            .scope
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
        {
            if is_scope_token(s) && !wanted.iter().any(|w| w == s) {
                wanted.push(s.to_owned());
            }
        }
        if wanted.len() == before || wanted.len() > MAX_SCOPES {
            return Ok(false);
        }
        {
            let mut last = self.last_step_up.lock();
            let now = Instant::now();
            if last.is_some_and(|t| now.duration_since(t) < STEP_UP_INTERVAL) {
                return Ok(false);
            }
            *last = Some(now);
        }
        tracing::info!(
            target: "toolexec_mcp::upstream::oauth",
            server = %self.server,
            scopes = ?wanted,
            "insufficient_scope: fetching a token with more scopes"
        );
        let manager = self.manager.lock().await;
        self.fetch(&manager, wanted.clone()).await?;
        *self.scopes.lock() = wanted;
        Ok(true)
    }

    /// What a refused session should tell its operator.
    pub(crate) fn refusal(&self, insufficient_scope: Option<&str>) -> String {
        match (self.options.grant, insufficient_scope) {
            (Grant::AuthorizationCode, Some(challenge)) => {
                let params = WWWAuthenticateParams::parse(challenge, &self.url);
                // The scopes come from the server: only scope characters
                // reach the command the operator is told to run.
                let scopes: Vec<&str> = params
                    .scope
                    .as_deref()
                    .unwrap_or_default()
                    .split_whitespace()
                    // Quoted with '...' below: a quote would end it.
                    .filter(|s| is_scope_token(s) && !s.contains('\''))
                    .take(MAX_SCOPES)
                    .collect();
                if scopes.is_empty() {
                    return format!(
                        "{0} refused the token for missing scopes it did not name: run \
                         `toolexec auth login {0}` with the scopes it documents",
                        self.server
                    );
                }
                let args: Vec<String> = scopes.iter().map(|s| format!("--scope '{s}'")).collect();
                format!(
                    "{0} needs more scopes ({1}): run `toolexec auth login {0} {2}`",
                    self.server,
                    scopes.join(" "),
                    args.join(" ")
                )
            }
            (Grant::AuthorizationCode, None) => format!(
                "{} refused the stored token and it could not be refreshed; {}",
                self.server,
                self.not_signed_in()
            ),
            (_, Some(_)) => format!(
                "{} refused the client credentials token for missing scopes even after \
                 asking for them (granted scopes may be capped for this client)",
                self.server
            ),
            (_, None) => format!(
                "{} refused the client credentials token (check client_id, client_secret \
                 and the server's audience)",
                self.server
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refusals_quote_only_scope_characters() {
        let dir = std::env::temp_dir().join(format!("toolexec-refusal-{}", std::process::id()));
        let options = UpstreamOAuth::new(dir.join("t.json"));
        let authorizer = Authorizer::new(
            "srv",
            "http://127.0.0.1:1/mcp",
            &options,
            toolexec_http::tls::Tls::unused().config.clone(),
        )
        .await
        .unwrap();
        // Shell syntax stays inside single quotes; a quote is dropped.
        let hostile = r#"Bearer error="insufficient_scope", scope="ok $(id) x';id;' fine""#;
        let message = authorizer.refusal(Some(hostile));
        assert!(
            message.contains("--scope 'ok' --scope '$(id)' --scope 'fine'`"),
            "{message}"
        );
        assert!(!message.contains(";id;"), "{message}");
        let message = authorizer.refusal(Some(r#"Bearer error="insufficient_scope""#));
        assert!(message.contains("did not name"), "{message}");
    }

    #[test]
    fn another_authorization_server_is_refused() {
        let options = UpstreamOAuth::new("/tmp/x.json");
        let check = check_authorization_server;
        assert!(check(&options, Some("https://as"), None).is_ok());
        assert!(check(&options, Some("https://as"), Some("https://as")).is_ok());
        let e = check(&options, Some("https://evil"), Some("https://as")).unwrap_err();
        assert!(e.contains("stored tokens came from https://as"), "{e}");
        // Guessed endpoints (no metadata) after tokens from a real issuer.
        assert!(check(&options, None, Some("https://as")).is_err());
        let mut pinned = options.clone();
        pinned.issuer = Some("https://as".into());
        assert!(check(&pinned, Some("https://as"), None).is_ok());
        let e = check(&pinned, Some("https://evil"), None).unwrap_err();
        assert!(e.contains("not the configured issuer"), "{e}");
    }
}
