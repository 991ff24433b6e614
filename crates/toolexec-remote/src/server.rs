//! The runtime server: runs units for signed remote callers on its local
//! [`Runtimes`], forwarding the units' tool calls back to the caller.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use toolexec::Secret;
use toolexec_runtime::{RunRequest, Runtime, Runtimes};

pub use crate::ceilings::LimitCeilings;

use crate::auth::{self, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::error::{ApiError, ApiErrorCode};
use crate::nonce::{NonceCache, NonceRejection};
use crate::session;

/// Path of the run endpoint.
pub const RUNS_PATH: &str = "/v1/runs";
/// Path of the health endpoint.
pub const HEALTH_PATH: &str = "/v1/health";
/// The `Upgrade` protocol token of the run endpoint.
pub const UPGRADE_PROTOCOL: &str = "toolexec-run.v1";

/// How the server authenticates and bounds requests.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The shared HMAC key (see [`crate::auth::KeySource`]).
    pub key: Secret,
    /// Accepted distance between a request's timestamp and the server's
    /// clock, either way (default 30 s).
    pub max_clock_skew: Duration,
    /// Largest accepted body (default 4 MiB); more is `413`.
    pub max_body_bytes: usize,
    /// Nonces remembered (default 65 536); when all are live, new requests
    /// get `503 busy` rather than the cache forgetting one.
    pub nonce_capacity: usize,
    /// Runs at once (default 16); more get `503 busy`.
    pub max_concurrent_runs: usize,
    /// After the caller disconnects, how long the unit gets to stop on
    /// cancellation before its future is dropped (which kills it too).
    pub cleanup_grace: Duration,
    /// The most a run's limits may ask for (see [`LimitCeilings`]).
    pub max_limits: LimitCeilings,
    /// How long reading a request's body may take (default 30 s); slower
    /// is `408 request_timeout`.
    pub body_timeout: Duration,
    /// The authorities (`host:port`, as in the `Host` header the client
    /// sends and signs) this server answers to. A request signed for any
    /// other is refused, so a request captured on its way to another
    /// server sharing the key cannot be replayed here. Empty (default):
    /// only the local address the connection arrived on (e.g.
    /// `10.0.0.5:7878`); set it when clients use a DNS name or go through
    /// a port mapping.
    pub hosts: Vec<String>,
}

impl ServerConfig {
    /// Defaults with `key`.
    pub fn new(key: Secret) -> Self {
        ServerConfig {
            key,
            max_clock_skew: Duration::from_secs(30),
            max_body_bytes: 4 << 20,
            nonce_capacity: 1 << 16,
            max_concurrent_runs: 16,
            cleanup_grace: Duration::from_secs(5),
            max_limits: LimitCeilings::default(),
            body_timeout: Duration::from_secs(30),
            hosts: Vec::new(),
        }
    }
}

/// Counters, for operators and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests to any endpoint.
    pub requests: u64,
    /// Requests answered with an error status.
    pub rejected: u64,
    /// Units started.
    pub runs_started: u64,
    /// Units running now.
    pub runs_active: u64,
    /// Runs whose caller disconnected before the outcome.
    pub runs_abandoned: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    rejected: AtomicU64,
    pub(crate) runs_started: AtomicU64,
    pub(crate) runs_active: AtomicU64,
    pub(crate) runs_abandoned: AtomicU64,
}

pub(crate) struct ServerState {
    pub(crate) runtimes: Runtimes,
    pub(crate) config: ServerConfig,
    nonces: NonceCache,
    runs: Arc<tokio::sync::Semaphore>,
    pub(crate) counters: Counters,
}

/// Serves units for remote callers.
///
/// ```no_run
/// use toolexec_remote::auth::KeySource;
/// use toolexec_remote::server::{RuntimeServer, ServerConfig};
/// use toolexec_runtime::{ProfileMap, Runtimes};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let key = KeySource::Env("TOOLEXEC_REMOTE_KEY".into()).load()?;
/// let runtimes = Runtimes::new(ProfileMap::default()); // register runtimes here
/// let server = RuntimeServer::new(runtimes, ServerConfig::new(key));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
/// server.serve(listener, std::future::pending()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RuntimeServer {
    state: Arc<ServerState>,
}

impl std::fmt::Debug for RuntimeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeServer")
            .field("runtimes", &self.state.runtimes)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RuntimeServer {
    /// A server running units on `runtimes` (selected by the caller's
    /// profile through their [`toolexec_runtime::ProfileMap`]).
    pub fn new(runtimes: Runtimes, config: ServerConfig) -> Self {
        RuntimeServer {
            state: Arc::new(ServerState {
                runtimes,
                nonces: NonceCache::new(config.nonce_capacity),
                runs: Arc::new(tokio::sync::Semaphore::new(
                    config.max_concurrent_runs.max(1),
                )),
                config,
                counters: Counters::default(),
            }),
        }
    }

    /// The axum router (`POST /v1/runs`, `GET /v1/health`). Serve it with
    /// upgrades enabled (`axum::serve` does). Without
    /// [`ServerConfig::hosts`], serve it through
    /// `into_make_service_with_connect_info::<LocalAddr>()` (as
    /// [`RuntimeServer::serve`] does), else every request is refused.
    pub fn router(&self) -> Router {
        Router::new()
            .route(RUNS_PATH, post(run_handler))
            .route(HEALTH_PATH, get(health_handler))
            .fallback(not_found)
            .with_state(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` resolves. Runs in flight are
    /// not waited for; their units stop when their connections close.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let service = self
            .router()
            .into_make_service_with_connect_info::<LocalAddr>();
        axum::serve(listener, service)
            .with_graceful_shutdown(shutdown)
            .await
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ServerStats {
        let c = &self.state.counters;
        ServerStats {
            requests: c.requests.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            runs_started: c.runs_started.load(Ordering::Relaxed),
            runs_active: c.runs_active.load(Ordering::Relaxed),
            runs_abandoned: c.runs_abandoned.load(Ordering::Relaxed),
        }
    }
}

async fn not_found(State(state): State<Arc<ServerState>>, method: Method) -> Response {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    state.counters.rejected.fetch_add(1, Ordering::Relaxed);
    ApiError::new(
        ApiErrorCode::NotFound,
        Some("path"),
        format!("not_found: no endpoint for {method} here ({RUNS_PATH}, {HEALTH_PATH})"),
    )
    .into_response()
}

fn reject(state: &ServerState, error: ApiError) -> Response {
    state.counters.rejected.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(code = error.code.as_str(), message = %error.message, "remote request rejected");
    error.into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, ApiError> {
    let value = headers.get(name).ok_or_else(|| {
        ApiError::new(
            ApiErrorCode::MissingSignature,
            Some(name),
            format!("missing_signature: header {name} is required"),
        )
    })?;
    value.to_str().map_err(|_| {
        ApiError::new(
            ApiErrorCode::BadSignature,
            Some(name),
            format!("bad_signature: header {name} is not ASCII"),
        )
    })
}

/// The local address a connection arrived on: the server's own authority
/// when [`ServerConfig::hosts`] is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub SocketAddr);

impl Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>> for LocalAddr {
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        LocalAddr(
            stream
                .io()
                .local_addr()
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
        )
    }
}

/// The signing headers of a request, checked for shape, time window and
/// authority before its body is read.
struct Signed {
    signature: String,
    timestamp: u64,
    nonce: String,
    authority: String,
}

/// Checks everything about the signature that does not need the body:
/// headers present and well formed, timestamp in the window, nonce shape,
/// and that the request is addressed to this server.
fn check_headers(state: &ServerState, request: &Request) -> Result<Signed, ApiError> {
    let headers = request.headers();
    let signature = header_str(headers, SIGNATURE_HEADER)?;
    let timestamp = header_str(headers, TIMESTAMP_HEADER)?;
    let nonce = header_str(headers, NONCE_HEADER)?;
    let authority = header_str(headers, header::HOST.as_str())?;
    if !signature.starts_with("v1=") || signature.len() != 3 + 64 {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some(SIGNATURE_HEADER),
            "bad_signature: expected v1= and 64 hex digits",
        ));
    }
    let timestamp: u64 = timestamp.parse().map_err(|_| {
        ApiError::new(
            ApiErrorCode::ExpiredTimestamp,
            Some(TIMESTAMP_HEADER),
            "expired_timestamp: not a number of unix seconds",
        )
    })?;
    let now = auth::unix_now();
    let skew = state.config.max_clock_skew.as_secs();
    if timestamp.abs_diff(now) > skew {
        return Err(ApiError::new(
            ApiErrorCode::ExpiredTimestamp,
            Some(TIMESTAMP_HEADER),
            format!("expired_timestamp: {timestamp} is more than {skew} s from the server's clock"),
        ));
    }
    if !auth::valid_nonce(nonce) {
        return Err(ApiError::new(
            ApiErrorCode::ReplayedNonce,
            Some(NONCE_HEADER),
            "replayed_nonce: the nonce must be 16 to 128 characters of [A-Za-z0-9_-]",
        ));
    }
    let local = request
        .extensions()
        .get::<ConnectInfo<LocalAddr>>()
        .map(|c| c.0.0.to_string());
    let ours = if state.config.hosts.is_empty() {
        local.is_some_and(|l| l.eq_ignore_ascii_case(authority))
    } else {
        state
            .config
            .hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(authority))
    };
    if !ours {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some("host"),
            format!(
                "bad_signature: the request is addressed to {authority:?}, which is not this server"
            ),
        ));
    }
    Ok(Signed {
        signature: signature.to_owned(),
        timestamp,
        nonce: nonce.to_owned(),
        authority: authority.to_owned(),
    })
}

/// Checks the signature over the body and records the nonce.
fn authenticate(
    state: &ServerState,
    request: &Request,
    signed: &Signed,
    body: &[u8],
) -> Result<(), ApiError> {
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let target = auth::Target {
        method: request.method().as_str(),
        authority: &signed.authority,
        path_and_query: path,
    };
    if !auth::verify(
        &state.config.key,
        target,
        body,
        signed.timestamp,
        &signed.nonce,
        &signed.signature,
    ) {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some(SIGNATURE_HEADER),
            "bad_signature: the signature does not match the request",
        ));
    }
    // Only signed requests reach the cache, so nobody without the key can
    // fill it. A nonce is kept until its timestamp leaves the window.
    let expires = signed.timestamp + state.config.max_clock_skew.as_secs();
    match state
        .nonces
        .check_and_insert(&signed.nonce, expires, auth::unix_now())
    {
        Ok(()) => Ok(()),
        Err(NonceRejection::Replayed) => Err(ApiError::new(
            ApiErrorCode::ReplayedNonce,
            Some(NONCE_HEADER),
            "replayed_nonce: this nonce was already used",
        )),
        Err(NonceRejection::Full) => Err(ApiError::new(
            ApiErrorCode::Busy,
            None,
            "busy: too many recent requests; retry later",
        )),
    }
}

/// Reads the body, refusing more than the limit with `413` and a body
/// slower than [`ServerConfig::body_timeout`] with `408`.
async fn read_body(state: &ServerState, request: Request) -> Result<(Request, Vec<u8>), ApiError> {
    let max = state.config.max_body_bytes;
    let too_large = || {
        ApiError::new(
            ApiErrorCode::BodyTooLarge,
            Some("body"),
            format!("body_too_large: the body is larger than {max} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let (parts, body) = request.into_parts();
    let timeout = state.config.body_timeout;
    let bytes = tokio::time::timeout(timeout, axum::body::to_bytes(body, max))
        .await
        .map_err(|_| {
            ApiError::new(
                ApiErrorCode::RequestTimeout,
                Some("body"),
                format!(
                    "request_timeout: the body did not arrive within {} ms",
                    timeout.as_millis()
                ),
            )
        })?
        .map_err(|_| too_large())?;
    Ok((Request::from_parts(parts, Body::empty()), bytes.to_vec()))
}

/// Headers first, then the body, then the signature over it.
async fn signed_body(
    state: &ServerState,
    request: Request,
) -> Result<(Request, Vec<u8>), ApiError> {
    let signed = check_headers(state, &request)?;
    let (request, body) = read_body(state, request).await?;
    authenticate(state, &request, &signed, &body)?;
    Ok((request, body))
}

async fn health_handler(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = signed_body(&state, request).await {
        return reject(&state, e);
    }
    let runtimes = state.runtimes.list();
    axum::Json(serde_json::json!({"status": "ok", "runtimes": runtimes})).into_response()
}

async fn run_handler(State(state): State<Arc<ServerState>>, mut request: Request) -> Response {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let on_upgrade = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>();
    let (request, body) = match signed_body(&state, request).await {
        Ok(read) => read,
        Err(e) => return reject(&state, e),
    };
    let run_request = match parse_request(&body)
        .and_then(|r| state.config.max_limits.check(&r.limits).map(|()| r))
    {
        Ok(r) => r,
        Err(e) => return reject(&state, e),
    };
    let wants_upgrade = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(UPGRADE_PROTOCOL));
    let Some(on_upgrade) = on_upgrade.filter(|_| wants_upgrade) else {
        return reject(
            &state,
            ApiError::new(
                ApiErrorCode::InvalidRequest,
                Some("upgrade"),
                format!(
                    "invalid_request: {RUNS_PATH} needs `Connection: upgrade` and `Upgrade: {UPGRADE_PROTOCOL}` over HTTP/1.1"
                ),
            ),
        );
    };
    let runtime: Arc<dyn Runtime> = match state
        .runtimes
        .select(run_request.profile, run_request.unit.kind())
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return reject(
                &state,
                ApiError {
                    code: ApiErrorCode::BackendUnavailable,
                    message: e.message,
                    details: e.details,
                },
            );
        }
    };
    let Ok(permit) = state.runs.clone().try_acquire_owned() else {
        return reject(
            &state,
            ApiError::new(
                ApiErrorCode::Busy,
                None,
                format!(
                    "busy: {} runs are in flight; retry later",
                    state.config.max_concurrent_runs
                ),
            ),
        );
    };
    let session_state = state.clone();
    tokio::spawn(async move {
        let _permit = permit;
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                session::serve(session_state, runtime, run_request, io).await;
            }
            Err(e) => tracing::warn!(error = %e, "remote run: upgrade failed"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    response
        .headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static(UPGRADE_PROTOCOL));
    response
}

/// Parses and validates a run request; errors name the failing field.
pub fn parse_request(body: &[u8]) -> Result<RunRequest, ApiError> {
    let invalid = |field: String, message: String| {
        let field = if field == "." || field == "?" {
            "body".to_owned()
        } else {
            field
        };
        ApiError::new(
            ApiErrorCode::InvalidRequest,
            Some(&field),
            format!("invalid_request: {field}: {message}"),
        )
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let request: RunRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        match (path == "unit").then(|| unit_error(body)).flatten() {
            Some((field, message)) => invalid(field, message),
            None => invalid(path, e.inner().to_string()),
        }
    })?;
    de.end()
        .map_err(|e| invalid("body".into(), e.to_string()))?;
    if let Err(message) = request.limits.validate() {
        let field = message
            .split_whitespace()
            .next()
            .unwrap_or("limits")
            .to_owned();
        return Err(ApiError::new(
            ApiErrorCode::InvalidRequest,
            Some(field.trim_end_matches(':')),
            format!("invalid_request: {message}"),
        ));
    }
    Ok(request)
}

/// The field inside `unit` that fails: the unit is an internally tagged
/// enum, which serde buffers, so the first pass only knows `unit`.
fn unit_error(body: &[u8]) -> Option<(String, String)> {
    use toolexec_runtime::{CommandUnit, ScriptUnit, WasmUnit};
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut unit = value.get("unit")?.as_object()?.clone();
    let kind = unit.remove("kind")?;
    let unit = serde_json::Value::Object(unit);
    let error = match kind.as_str()? {
        "command" => serde_path_to_error::deserialize::<_, CommandUnit>(unit).err()?,
        "script" => serde_path_to_error::deserialize::<_, ScriptUnit>(unit).err()?,
        "wasm" => serde_path_to_error::deserialize::<_, WasmUnit>(unit).err()?,
        _ => {
            return Some((
                "unit.kind".into(),
                "expected command, script or wasm".into(),
            ));
        }
    };
    let path = error.path().to_string();
    let field = if path == "." || path == "?" {
        "unit".to_owned()
    } else {
        format!("unit.{path}")
    };
    Some((field, error.inner().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_the_field() {
        let cases: [(&str, &str); 8] = [
            (
                r#"{"unit": {"kind": "shell", "argv": ["ls"]}, "profile": "dev"}"#,
                "unit.kind",
            ),
            (
                r#"{"unit": {"kind": "command", "argv": ["ls"], "extra": 1}, "profile": "dev"}"#,
                "unit.extra",
            ),
            ("{", "body"),
            ("[]", "body"),
            (
                r#"{"unit": {"kind": "command", "argv": "ls"}, "profile": "dev"}"#,
                "unit.argv",
            ),
            (
                r#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "weird"}"#,
                "profile",
            ),
            (
                r#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"wall_time": 0}}"#,
                "limits.wall_time",
            ),
            (
                r#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev"} x"#,
                "body",
            ),
        ];
        for (body, field) in cases {
            let err = parse_request(body.as_bytes()).unwrap_err();
            assert_eq!(err.code, ApiErrorCode::InvalidRequest, "{body}");
            assert_eq!(err.field(), Some(field), "{body}: {err}");
        }
        assert!(
            parse_request(br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev"}"#)
                .is_ok()
        );
    }
}
