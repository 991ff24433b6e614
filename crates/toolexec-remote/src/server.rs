//! The runtime server: runs units for signed remote callers on its local
//! [`Runtimes`], forwarding the units' tool calls back to the caller.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use toolexec::telemetry::TraceContext;
use tracing::Instrument;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::Connected;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use toolexec::Secret;
use toolexec_runtime::{RunRequest, Runtime, Runtimes};

pub use crate::listener::READ_BUFFER_BYTES;
pub use toolexec_runtime::LimitCeilings;

use crate::error::{ApiError, ApiErrorCode};
use crate::gate;
use crate::nonce::NonceCache;
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
    /// Largest accepted body (default 4 MiB); more is `413`. Only read
    /// once the request's head is authenticated.
    pub max_body_bytes: usize,
    /// Nonces remembered (default 65 536); when all are live, new requests
    /// get `503 busy` rather than the cache forgetting one. A nonce is kept
    /// until `timestamp + max_clock_skew + body_timeout`.
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
    /// Connections open at once, not counting upgraded runs (default
    /// 256); one more is answered `503 busy` and closed. (Used by
    /// [`RuntimeServer::serve`].)
    pub max_connections: usize,
    /// How long a connection may take to send its request head (default
    /// 10 s), from the moment it is accepted; then it is closed.
    pub header_timeout: Duration,
    /// A connection not yet upgraded on which nothing is read or written
    /// for this long (default 30 s) is closed.
    pub idle_timeout: Duration,
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
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
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
    /// Connections open now, not counting upgraded runs.
    pub connections_open: u64,
    /// Connections refused with `503 busy` because
    /// [`ServerConfig::max_connections`] were open.
    pub connections_refused: u64,
    /// Connections closed by the header-read or the idle timeout.
    pub connections_timed_out: u64,
    /// Bytes read now from connections whose request is not authenticated
    /// (yet): what clients without the key make the server hold. At most
    /// [`READ_BUFFER_BYTES`] per open connection.
    pub unauthenticated_bytes: u64,
    /// The highest [`ServerStats::unauthenticated_bytes`] seen.
    pub unauthenticated_bytes_peak: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) runs_started: AtomicU64,
    pub(crate) runs_active: AtomicU64,
    pub(crate) runs_abandoned: AtomicU64,
    pub(crate) connections_open: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
    pub(crate) connections_timed_out: AtomicU64,
    pub(crate) unauthenticated_bytes: AtomicU64,
    pub(crate) unauthenticated_bytes_peak: AtomicU64,
}

pub(crate) struct ServerState {
    pub(crate) runtimes: Runtimes,
    pub(crate) config: ServerConfig,
    pub(crate) nonces: NonceCache,
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
    /// `into_make_service_with_connect_info::<LocalAddr>()`, else every
    /// request is refused. Served this way, the connection limits
    /// ([`ServerConfig::max_connections`], `header_timeout`,
    /// `idle_timeout`) are the caller's to enforce; [`RuntimeServer::serve`]
    /// enforces them.
    pub fn router(&self) -> Router {
        Router::new()
            .route(RUNS_PATH, post(run_handler))
            .route(HEALTH_PATH, get(health_handler))
            .fallback(not_found)
            .with_state(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` resolves, one request per
    /// connection, with the connection cap and the header-read and idle
    /// timeouts of the config. Runs in flight are not waited for; their
    /// units stop when their connections close.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = self.router();
        crate::listener::serve(self.state, router, listener, shutdown).await
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
            connections_open: c.connections_open.load(Ordering::Relaxed),
            connections_refused: c.connections_refused.load(Ordering::Relaxed),
            connections_timed_out: c.connections_timed_out.load(Ordering::Relaxed),
            unauthenticated_bytes: c.unauthenticated_bytes.load(Ordering::Relaxed),
            unauthenticated_bytes_peak: c.unauthenticated_bytes_peak.load(Ordering::Relaxed),
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

async fn health_handler(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let checked = match gate::authenticate_head(&state, &request) {
        // A health check has no body.
        Ok(authenticated) => gate::read_body(&state, request, 0, &authenticated)
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = checked {
        return reject(&state, e);
    }
    let runtimes = state.runtimes.list();
    axum::Json(serde_json::json!({"status": "ok", "runtimes": runtimes})).into_response()
}

/// Head first (signature, freshness, nonce), then a run slot, and only
/// then the body: a request without the key, or one beyond the run cap,
/// costs the server no body reading.
async fn run_handler(State(state): State<Arc<ServerState>>, mut request: Request) -> Response {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let on_upgrade = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>();
    let authenticated = match gate::authenticate_head(&state, &request) {
        Ok(authenticated) => authenticated,
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
    // The run slot is taken before the body is read, so bodies being read
    // are bounded by `max_concurrent_runs × max_body_bytes`.
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
    let request_headers = request.headers().clone();
    let body =
        match gate::read_body(&state, request, state.config.max_body_bytes, &authenticated).await {
            Ok((_, body)) => body,
            Err(e) => return reject(&state, e),
        };
    let run_request = match parse_request(&body).and_then(|r| {
        state
            .config
            .max_limits
            .check(&r.limits)
            .map_err(|e| ApiError::from_invalid(&e))
            .map(|()| r)
    }) {
        Ok(r) => r,
        Err(e) => return reject(&state, e),
    };
    drop(body);
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
    let session_state = state.clone();
    // The run continues the caller's trace (`traceparent` is tracing
    // metadata, not covered by the signature: it decides nothing).
    let span = tracing::info_span!(
        target: "toolexec::remote",
        "remote_run",
        otel.kind = "server",
        toolexec.sandbox.profile = run_request.profile.as_str(),
    );
    if let Some(parent) =
        TraceContext::extract(|k| request_headers.get(k).and_then(|v| v.to_str().ok()))
    {
        toolexec::telemetry::set_parent(&span, &parent);
    }
    tokio::spawn(
        async move {
            let _permit = permit;
            match on_upgrade.await {
                Ok(upgraded) => {
                    let io = hyper_util::rt::TokioIo::new(upgraded);
                    session::serve(session_state, runtime, run_request, io).await;
                }
                Err(e) => tracing::warn!(error = %e, "remote run: upgrade failed"),
            }
        }
        .instrument(span),
    );
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
    if let Err(error) = request.limits.validate() {
        let field = error.field().unwrap_or("limits").to_owned();
        return Err(ApiError::new(
            ApiErrorCode::InvalidRequest,
            Some(&field),
            error.to_string(),
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
