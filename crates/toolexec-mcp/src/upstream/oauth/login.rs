//! Signing in ([`login`]), and the token file's [`status`] and [`logout`].
//!
//! The authorization code flow: a request without a token gets the
//! server's `401` challenge (its metadata URL and scopes), discovery finds
//! the authorization server, the client is the configured one, a Client ID
//! Metadata Document or a dynamic registration (whose secret is kept in the
//! token file for later refreshes), and the user opens the authorization
//! URL. The authorization server redirects to a listener on
//! `127.0.0.1` that takes one callback; its `state` is checked, the code
//! exchanged with the PKCE verifier, and the tokens written to the file.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::auth::{
    AuthorizationCallback, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use toolexec::{Error, Secret};
use url::Url;

use super::authorizer::{check_authorization_server, manager_for};
use super::store::TokenStore;
use super::{Authorizer, Grant, UpstreamOAuth, describe, printable};
use crate::upstream::session::Endpoint;
use crate::upstream::{UpstreamConfig, UpstreamTransport};

/// How [`login`] runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoginOptions {
    /// Port of the loopback redirect listener (`0`: any free port). A
    /// pre-registered client needs the port its redirect URI names.
    pub redirect_port: u16,
    /// Scopes to ask for besides the configured ones (a step-up).
    pub scopes: Vec<String>,
    /// How long to wait for the browser's redirect.
    pub timeout: Duration,
}

impl Default for LoginOptions {
    fn default() -> Self {
        LoginOptions {
            redirect_port: 0,
            scopes: Vec::new(),
            timeout: Duration::from_secs(300),
        }
    }
}

/// What a sign-in got.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LoginReport {
    /// The server's name.
    pub server: String,
    /// The client id used (configured, metadata document URL or registered).
    pub client_id: String,
    /// The scopes the token was granted, as the authorization server said.
    pub scopes: Vec<String>,
    /// Where the tokens are.
    pub token_file: PathBuf,
}

/// What the token file of a server holds (never the tokens).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct TokenStatus {
    /// The server's name.
    pub server: String,
    /// Whether there is an access token.
    pub signed_in: bool,
    /// The client id the tokens belong to.
    pub client_id: Option<String>,
    /// The granted scopes.
    pub scopes: Vec<String>,
    /// Seconds until the access token expires (negative: expired), when
    /// the authorization server said.
    pub expires_in: Option<i64>,
    /// Whether there is a refresh token.
    pub refreshable: bool,
    /// Where the tokens are.
    pub token_file: PathBuf,
}

/// The URL, OAuth settings and TLS configuration of an OAuth server.
fn parts(config: &UpstreamConfig) -> Result<(Url, UpstreamOAuth, rustls::ClientConfig), Error> {
    let UpstreamTransport::Http { url, oauth, .. } = &config.transport else {
        return Err(Error::invalid_request(
            "transport",
            format!(
                "{} is not a streamable HTTP server: OAuth is for those",
                config.name
            ),
        ));
    };
    let Some(oauth) = oauth else {
        return Err(Error::invalid_request(
            "transport.oauth",
            format!("{} has no OAuth settings", config.name),
        ));
    };
    oauth.check()?;
    let url = Url::parse(url.trim())
        .map_err(|e| Error::invalid_request("transport.url", e.to_string()))?;
    match Endpoint::from_config(&config.name, &config.transport)? {
        Endpoint::Http { tls, .. } => Ok((url, oauth.clone(), tls.config.clone())),
        Endpoint::Stdio { .. } | Endpoint::Sse { .. } => {
            Err(Error::invalid_request("transport", "not streamable HTTP"))
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What the token file of `config`'s server holds.
pub async fn status(config: &UpstreamConfig) -> Result<TokenStatus, Error> {
    use oauth2::TokenResponse as _;
    let (url, oauth, _) = parts(config)?;
    let store = TokenStore::new(oauth.token_file.clone(), url.as_str());
    let record = store
        .record()
        .await
        .map_err(|e| Error::backend_unavailable(&config.name, e))?;
    let token = record
        .credentials
        .as_ref()
        .and_then(|c| c.token_response.as_ref());
    let expires_in = record.credentials.as_ref().and_then(|c| {
        let lifetime = i64::try_from(token?.expires_in()?.as_secs()).unwrap_or(i64::MAX);
        let received = i64::try_from(c.token_received_at?).unwrap_or(i64::MAX);
        let now = i64::try_from(now()).unwrap_or(i64::MAX);
        Some(received.saturating_add(lifetime).saturating_sub(now))
    });
    Ok(TokenStatus {
        server: config.name.clone(),
        signed_in: token.is_some(),
        client_id: record.client_id,
        scopes: record
            .credentials
            .as_ref()
            .map(|c| c.granted_scopes.clone())
            .unwrap_or_default(),
        expires_in,
        refreshable: token.is_some_and(|t| t.refresh_token().is_some()),
        token_file: oauth.token_file,
    })
}

/// Deletes the token file of `config`'s server. Returns whether there was one.
pub async fn logout(config: &UpstreamConfig) -> Result<bool, Error> {
    let (url, oauth, _) = parts(config)?;
    TokenStore::new(oauth.token_file, url.as_str())
        .remove()
        .await
        .map_err(|e| Error::backend_unavailable(&config.name, e))
}

/// Signs in to `config`'s server and stores the tokens.
///
/// Authorization code: `open` is given the authorization URL (to print it,
/// open a browser, or, in tests, fetch it); the call returns once the
/// browser came back to the loopback listener, or fails after
/// [`LoginOptions::timeout`]. Client credentials: fetches a token, to check
/// the settings (`open` is not called).
pub async fn login(
    config: &UpstreamConfig,
    options: &LoginOptions,
    open: &(dyn Fn(&str) + Sync),
) -> Result<LoginReport, Error> {
    let (url, oauth, tls) = parts(config)?;
    let fail = |e: String| Error::backend_unavailable(&config.name, e);
    if oauth.grant != Grant::AuthorizationCode {
        let authorizer = Authorizer::new(&config.name, url.as_str(), &oauth, tls)
            .await
            .map_err(fail)?;
        authorizer.prepare().await.map_err(fail)?;
        authorizer
            .top_up()
            .await
            .map_err(|e| fail(format!("token request failed: {}", describe(&e))))?;
        let status = status(config).await?;
        return Ok(LoginReport {
            server: config.name.clone(),
            client_id: status.client_id.unwrap_or_default(),
            scopes: status.scopes,
            token_file: oauth.token_file,
        });
    }

    let listener = TcpListener::bind(("127.0.0.1", options.redirect_port))
        .await
        .map_err(|e| {
            fail(format!(
                "cannot listen on 127.0.0.1:{} for the redirect: {e}",
                options.redirect_port
            ))
        })?;
    let port = listener
        .local_addr()
        .map_err(|e| fail(e.to_string()))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");

    let store = TokenStore::new(oauth.token_file.clone(), url.as_str());
    let mut manager = manager_for(&url, &tls, &store).await.map_err(fail)?;
    let challenge = probe(&url, &tls).await;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| fail(format!("OAuth discovery failed: {}", describe(&e))))?;
    let stored_issuer = store.record().await.map_err(fail)?.issuer;
    check_authorization_server(
        &oauth,
        resolution.metadata.issuer.as_deref(),
        stored_issuer.as_deref(),
    )
    .map_err(fail)?;
    let cimd_supported = resolution
        .metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    manager.set_metadata(resolution.metadata);

    let mut scopes = oauth.scopes.clone();
    for s in &options.scopes {
        if !scopes.contains(s) {
            scopes.push(s.clone());
        }
    }
    let mut request = AuthorizationRequest::new(redirect_uri.clone());
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.clone());
    }
    let client_id = if let Some(id) = &oauth.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &oauth.client_secret {
            request = request.with_client_secret(secret.expose());
        }
        id.clone()
    } else if let Some(document) = oauth
        .client_metadata_url
        .as_ref()
        .filter(|_| cimd_supported)
    {
        request = request.with_client_metadata_url(document.clone());
        document.clone()
    } else {
        register(&mut manager, &store, &oauth, &redirect_uri, &scopes)
            .await
            .map(|(id, secret)| {
                request = request.clone().with_preregistered_client(id.clone());
                if let Some(secret) = secret {
                    request = request.clone().with_client_secret(secret);
                }
                id
            })
            .map_err(fail)?
    };

    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| fail(format!("cannot start the sign-in: {}", describe(&e))))?;
    // Only a redirect carrying this sign-in's `state` ends the wait: any
    // other request to the listener (another local process, a stale tab)
    // is answered and ignored.
    let state = query_value(session.get_authorization_url(), "state")
        .ok_or_else(|| fail("the authorization URL has no state".into()))?;
    let (tx, mut rx) = mpsc::channel::<String>(1);
    let server = tokio::spawn(serve_callbacks(listener, Secret::new(state), tx));
    open(session.get_authorization_url());
    let callback = tokio::time::timeout(options.timeout, rx.recv()).await;
    server.abort();
    let target = match callback {
        Ok(Some(target)) => target,
        Ok(None) => return Err(fail("the redirect listener stopped".into())),
        Err(_) => {
            return Err(fail(format!(
                "no redirect to {redirect_uri} within {}s",
                options.timeout.as_secs()
            )));
        }
    };
    let callback_url = format!("http://127.0.0.1:{port}{target}");
    if let Some(error) = query_value(&callback_url, "error") {
        let description = query_value(&callback_url, "error_description").unwrap_or_default();
        return Err(fail(format!(
            "the authorization server refused: {}",
            printable(&format!("{error} {description}"))
        )));
    }
    let callback = AuthorizationCallback::from_redirect_url(&callback_url)
        .map_err(|e| fail(format!("bad redirect: {}", describe(&e))))?;
    session
        .handle_callback_with_issuer(
            &callback.code,
            &callback.csrf_token,
            callback.issuer.as_deref(),
        )
        .await
        .map_err(|e| fail(format!("the code exchange failed: {}", describe(&e))))?;
    let status = status(config).await?;
    Ok(LoginReport {
        server: config.name.clone(),
        client_id,
        scopes: status.scopes,
        token_file: oauth.token_file,
    })
}

/// Dynamic client registration; the client id and secret are kept in the
/// token file, so a later process can refresh.
async fn register(
    manager: &mut AuthorizationManager,
    store: &TokenStore,
    oauth: &UpstreamOAuth,
    redirect_uri: &str,
    scopes: &[String],
) -> Result<(String, Option<String>), String> {
    let selected = if scopes.is_empty() {
        manager.select_scopes(None, &[])
    } else {
        scopes.to_vec()
    };
    let refs: Vec<&str> = selected.iter().map(String::as_str).collect();
    let registered = manager
        .register_client(&oauth.client_name, redirect_uri, &refs)
        .await
        .map_err(|e| format!("dynamic client registration failed: {}", describe(&e)))?;
    let (id, secret) = (registered.client_id, registered.client_secret);
    // Written with the tokens: an abandoned sign-in changes nothing.
    store.set_pending_client(id.clone(), secret.clone());
    Ok((id, secret))
}

fn query_value(url: &str, key: &str) -> Option<String> {
    Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The `WWW-Authenticate` challenge of a request without a token (an
/// `initialize`, as a client would send first), if the server gives one.
async fn probe(url: &Url, tls: &rustls::ClientConfig) -> Option<String> {
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls.clone())
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()?;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE,
            "capabilities": {},
            "clientInfo": {"name": "toolexec", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let response = client
        .post(url.clone())
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .ok()?;
    response
        .headers()
        .get(http::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Most connections the redirect listener serves at once.
const MAX_CONNECTIONS: usize = 16;

/// Answers requests on the loopback listener; the target (path and query)
/// of the first `/callback` whose `state` is `state` is sent to `tx`.
/// Connections are bounded in number and in the time to send headers, and
/// all end when this task is aborted.
async fn serve_callbacks(listener: TcpListener, state: Secret, tx: mpsc::Sender<String>) {
    let state = std::sync::Arc::new(state);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok((stream, _)) = accepted else {
            return;
        };
        if connections.len() >= MAX_CONNECTIONS {
            continue;
        }
        let (tx, state) = (tx.clone(), state.clone());
        connections.spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let (tx, state) = (tx.clone(), state.clone());
                async move {
                    let target = request
                        .uri()
                        .path_and_query()
                        .map(|p| p.as_str().to_owned())
                        .unwrap_or_default();
                    let ours = request.uri().path() == "/callback"
                        && query_value(&format!("http://127.0.0.1{target}"), "state")
                            .is_some_and(|s| state.constant_time_eq(&s));
                    let (status, text) = if ours {
                        let _ = tx.try_send(target);
                        (
                            200,
                            "toolexec: sign-in received. You can close this window.",
                        )
                    } else {
                        (400, "not a redirect of the sign-in in progress")
                    };
                    hyper::Response::builder()
                        .status(status)
                        .header("content-type", "text/plain; charset=utf-8")
                        .body(Full::new(Bytes::from_static(text.as_bytes())))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Time a client of the redirect listener has to send its headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
