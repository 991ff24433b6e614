//! Streamable HTTP hosting: rmcp's `StreamableHttpService` at `/mcp` in
//! axum, behind bearer-token auth and `Origin` checks, within the bounds of
//! [`HttpLimits`] (connections, header and body time, sessions).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolexec::Error;

use super::Gateway;
use super::auth::HttpAuth;
use super::limits::{BACKEND, HttpLimits};
#[cfg(feature = "oauth")]
use super::oauth::ResourceServer;
use super::trace::Identity;

/// The header naming a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// The endpoint path.
pub const MCP_PATH: &str = "/mcp";

/// Origins allowed when [`HttpOptions::allowed_origins`] is empty.
pub const DEFAULT_ALLOWED_ORIGINS: [&str; 3] =
    ["http://localhost", "http://127.0.0.1", "http://[::1]"];

/// Where and how to serve streamable HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Address to listen on (port 0 picks a free port; see [`bind_http`]).
    /// On a loopback address the `Host` header must also name a loopback
    /// host (`localhost`, `127.0.0.1`, `[::1]`), against DNS rebinding.
    pub bind: SocketAddr,
    /// Authentication.
    pub auth: HttpAuth,
    /// Browser origins allowed to call. A request with an `Origin` header
    /// not listed gets `403`; requests without one pass. Empty means
    /// [`DEFAULT_ALLOWED_ORIGINS`]. An entry without a port (or with `:*`)
    /// matches any port, one with a port only that port; `*` allows every
    /// origin and `null` allows `Origin: null`.
    pub allowed_origins: Vec<String>,
    /// Connections, header and body time, sessions.
    pub limits: HttpLimits,
    /// More routes served beside [`MCP_PATH`] behind the same
    /// authentication, `Origin` checks and limits (`/metrics`).
    pub routes: Option<Router>,
}

impl HttpOptions {
    /// Options with the default allowed origins and limits.
    pub fn new(bind: SocketAddr, auth: HttpAuth) -> Self {
        HttpOptions {
            bind,
            auth,
            allowed_origins: Vec::new(),
            limits: HttpLimits::default(),
            routes: None,
        }
    }
}

/// Serves `gateway` over streamable HTTP at `http://{bind}/mcp` until
/// `shutdown` is cancelled; returns the address it was bound to. Each client
/// gets its own MCP session.
pub async fn serve_http(
    gateway: Gateway,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<SocketAddr, Error> {
    let (addr, server) = bind_http(gateway, options, shutdown).await?;
    tracing::info!(%addr, "MCP gateway listening on http://{addr}{MCP_PATH}");
    server.await?;
    Ok(addr)
}

/// Binds the listener and returns the bound address (useful with port 0)
/// and the future that serves until `shutdown` is cancelled.
pub async fn bind_http(
    gateway: Gateway,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<
    (
        SocketAddr,
        impl Future<Output = Result<(), Error>> + Send + 'static,
    ),
    Error,
> {
    options.auth.check()?;
    #[cfg(feature = "oauth")]
    let oauth = match &options.auth {
        HttpAuth::OAuth(o) => Some(Arc::new(ResourceServer::new(o.clone()).await?)),
        _ => None,
    };
    options.limits.check()?;
    let limits = options.limits;
    let mut config =
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(limits.session_idle_timeout);
    let sessions = Arc::new(sessions);
    let guard = Arc::new(Guard {
        limits,
        max_body_bytes: config.max_request_body_bytes,
        sessions: sessions.clone(),
        creating: tokio::sync::Mutex::new(()),
        auth: options.auth,
        owners: parking_lot::Mutex::default(),
        #[cfg(feature = "oauth")]
        oauth,
        origins: if options.allowed_origins.is_empty() {
            DEFAULT_ALLOWED_ORIGINS
                .iter()
                .map(|o| OriginRule::parse(o))
                .collect()
        } else {
            options
                .allowed_origins
                .iter()
                .map(|o| OriginRule::parse(o))
                .collect()
        },
    });
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .map_err(|e| unavailable(format!("cannot listen on {}: {e}", options.bind)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| unavailable(format!("cannot read the bound address: {e}")))?;

    if !addr.ip().is_loopback() {
        // Reachable under names we cannot know; auth and Origin checks apply.
        config = config.disable_allowed_hosts();
    }
    let service =
        StreamableHttpService::new(move || Ok(gateway.for_new_connection()), sessions, config);
    // The last layer runs first: origin and auth, then the body, then the
    // session count.
    let mut router = Router::new().route_service(MCP_PATH, service);
    if let Some(routes) = options.routes {
        router = router.merge(routes);
    }
    let router = router
        .layer(middleware::from_fn_with_state(
            guard.clone(),
            limit_sessions,
        ))
        .layer(middleware::from_fn_with_state(guard.clone(), buffer_body))
        .layer(middleware::from_fn_with_state(guard.clone(), bind_sessions))
        .layer(middleware::from_fn_with_state(guard, check_request));
    let server = async move {
        super::listener::serve(listener, router, limits, shutdown).await;
        Ok(())
    };
    Ok((addr, server))
}

fn unavailable(message: String) -> Error {
    Error::backend_unavailable(BACKEND, message)
}

struct Guard {
    limits: HttpLimits,
    /// rmcp's own cap on a POST body, applied while buffering it.
    max_body_bytes: usize,
    sessions: Arc<LocalSessionManager>,
    /// Held while a request that may create a session is handled, so the
    /// session count checked is the count the new session joins.
    creating: tokio::sync::Mutex<()>,
    auth: HttpAuth,
    /// Each session's creator ([`bind_sessions`]).
    owners: parking_lot::Mutex<HashMap<String, String>>,
    /// Checks access tokens under [`HttpAuth::OAuth`].
    #[cfg(feature = "oauth")]
    oauth: Option<Arc<ResourceServer>>,
    origins: Vec<OriginRule>,
}

impl Guard {
    fn origin_allowed(&self, origin: &str) -> bool {
        let parsed = Origin::parse(origin);
        self.origins
            .iter()
            .any(|r| r.matches(origin, parsed.as_ref()))
    }
}

async fn check_request(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    #[cfg(feature = "oauth")]
    if let Some(rs) = &guard.oauth
        && req.method() == Method::GET
        && rs.is_metadata_path(req.uri().path())
    {
        // Public, for any origin: clients read it to find the issuer.
        let mut response = rs.metadata();
        response.headers_mut().insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            header::HeaderValue::from_static("*"),
        );
        return response;
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| guard.origin_allowed(o));
        if !allowed {
            return (StatusCode::FORBIDDEN, "Forbidden: Origin not allowed\n").into_response();
        }
    }
    #[cfg(feature = "oauth")]
    if let Some(rs) = &guard.oauth {
        let presented = req.headers().get(header::AUTHORIZATION).cloned();
        let caller = match rs.authenticate(presented.as_ref()).await {
            Ok(caller) => caller,
            Err(refusal) => return rs.refuse(refusal),
        };
        let mut req = req;
        req.extensions_mut().insert(Identity(caller));
        return next.run(req).await;
    }
    let Some(caller) = guard
        .auth
        .authenticate(req.headers().get(header::AUTHORIZATION))
    else {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: send Authorization: Bearer <token>\n",
        )
            .into_response();
    };
    let mut req = req;
    req.extensions_mut().insert(Identity(Arc::new(caller)));
    next.run(req).await
}

/// Keeps each session to the principal that created it: a request naming
/// a session another principal created gets `404`, as an unknown session
/// does. Session ids travel in logs and traces; holding one must not let
/// another token replay its responses, attach to its stream or close it.
async fn bind_sessions(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let who = req
        .extensions()
        .get::<Identity>()
        .map(|Identity(c)| c.principal_key())
        .unwrap_or_default();
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(id) = session else {
        let response = next.run(req).await;
        if let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            let id = id.to_owned();
            // Forget sessions that ended (closed or idle) now and then.
            if guard.owners.lock().len() >= guard.limits.max_sessions {
                let live: std::collections::HashSet<String> = guard
                    .sessions
                    .sessions
                    .read()
                    .await
                    .keys()
                    .map(|k| k.to_string())
                    .collect();
                guard.owners.lock().retain(|k, _| live.contains(k));
            }
            guard.owners.lock().insert(id, who);
        }
        return response;
    };
    let owner = guard.owners.lock().get(&id).cloned();
    if owner.is_some_and(|o| o != who) {
        return (StatusCode::NOT_FOUND, "Not Found: session not found\n").into_response();
    }
    let closing = req.method() == Method::DELETE;
    let response = next.run(req).await;
    if closing && response.status().is_success() {
        guard.owners.lock().remove(&id);
    }
    response
}

/// Refuses an `initialize` over [`HttpLimits::max_sessions`]. A POST without
/// a session id is the one request that creates a session (rmcp refuses
/// anything else without one); those are handled one at a time, so the
/// count checked is the count the new session joins.
async fn limit_sessions(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || req.headers().contains_key(SESSION_HEADER) {
        return next.run(req).await;
    }
    let _creating = guard.creating.lock().await;
    if guard.sessions.sessions.read().await.len() >= guard.limits.max_sessions {
        return sessions_full(guard.limits.max_sessions);
    }
    next.run(req).await
}

/// Buffers the request body within [`HttpLimits::body_timeout`] and rmcp's
/// size cap, so a client that drips its body cannot hold the connection
/// (nor, for `initialize`, the session lock) for longer.
async fn buffer_body(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, guard.max_body_bytes);
    match tokio::time::timeout(guard.limits.body_timeout, read).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) if is_length_limit(&e) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Payload Too Large: the body exceeds {} bytes\n",
                guard.max_body_bytes
            ),
        )
            .into_response(),
        Ok(Err(_)) => (StatusCode::BAD_REQUEST, "Bad Request: unreadable body\n").into_response(),
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            [(header::CONNECTION, "close")],
            format!(
                "Request Timeout: the body did not arrive within {}s (gateway.body_timeout)\n",
                guard.limits.body_timeout.as_secs_f64()
            ),
        )
            .into_response(),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// `503` with a JSON-RPC error for an `initialize` over the session limit.
fn sessions_full(max: usize) -> Response {
    let message = format!(
        "backend_unavailable: {BACKEND}: at capacity: {max} MCP sessions are open \
         (gateway.max_sessions); close one (HTTP DELETE) or retry later"
    );
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32000,
            "message": message,
            "data": {"reason": "at_capacity", "max_sessions": max},
        },
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::RETRY_AFTER, "1"),
            (header::CONTENT_TYPE, "application/json"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// A parsed `scheme://host[:port]`.
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    fn parse(s: &str) -> Option<Origin> {
        let (scheme, authority) = s.trim().split_once("://")?;
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return None;
        }
        let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
            let (h, after) = rest.split_once(']')?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':')?),
            };
            (format!("[{h}]"), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (authority.to_owned(), None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(p.parse().ok()?),
        };
        Some(Origin {
            scheme: scheme.to_ascii_lowercase(),
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// One allowed-origin entry.
#[derive(Debug)]
enum OriginRule {
    Any,
    /// Literal match (`null`, or an entry that does not parse).
    Exact(String),
    /// Scheme and host, and a port unless any port goes.
    Pattern {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

impl OriginRule {
    fn parse(s: &str) -> OriginRule {
        let s = s.trim();
        if s == "*" {
            return OriginRule::Any;
        }
        let any_port = s.strip_suffix(":*");
        match Origin::parse(any_port.unwrap_or(s)) {
            Some(o) => OriginRule::Pattern {
                scheme: o.scheme,
                host: o.host,
                port: if any_port.is_some() { None } else { o.port },
            },
            None => OriginRule::Exact(s.to_owned()),
        }
    }

    fn matches(&self, raw: &str, origin: Option<&Origin>) -> bool {
        match (self, origin) {
            (OriginRule::Any, _) => true,
            (OriginRule::Exact(e), _) => e == raw.trim(),
            (OriginRule::Pattern { scheme, host, port }, Some(o)) => {
                *scheme == o.scheme && *host == o.host && (port.is_none() || *port == o.port)
            }
            (OriginRule::Pattern { .. }, None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolexec::Secret;

    fn unlimited() -> Guard {
        Guard {
            limits: HttpLimits::default(),
            max_body_bytes: 1 << 20,
            sessions: Arc::new(LocalSessionManager::default()),
            creating: tokio::sync::Mutex::new(()),
            auth: HttpAuth::InsecureNoAuth,
            owners: parking_lot::Mutex::default(),
            #[cfg(feature = "oauth")]
            oauth: None,
            origins: Vec::new(),
        }
    }

    fn guard(origins: &[&str]) -> Guard {
        let list: Vec<&str> = if origins.is_empty() {
            DEFAULT_ALLOWED_ORIGINS.to_vec()
        } else {
            origins.to_vec()
        };
        Guard {
            auth: HttpAuth::Bearer(Secret::new("t0k")),
            origins: list.iter().map(|o| OriginRule::parse(o)).collect(),
            ..unlimited()
        }
    }

    #[test]
    fn default_origins_are_loopback_with_any_port() {
        let g = guard(&[]);
        for ok in [
            "http://localhost",
            "http://localhost:6274",
            "http://127.0.0.1:9",
            "http://[::1]:80",
            "HTTP://LOCALHOST:1",
        ] {
            assert!(g.origin_allowed(ok), "{ok}");
        }
        for bad in [
            "http://evil.example.com",
            "https://localhost",
            "http://localhost.evil.com",
            "http://127.0.0.1.nip.io",
            "null",
            "http://localhost:99999",
            "garbage",
        ] {
            assert!(!g.origin_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn explicit_ports_and_wildcards() {
        let g = guard(&["https://app.example.com:8443", "http://dev.local:*", "null"]);
        assert!(g.origin_allowed("https://app.example.com:8443"));
        assert!(!g.origin_allowed("https://app.example.com"));
        assert!(g.origin_allowed("http://dev.local:3000"));
        assert!(g.origin_allowed("null"));
        assert!(!g.origin_allowed("http://localhost"));
        assert!(guard(&["*"]).origin_allowed("http://anything"));
    }
}
