//! The client runtime: runs units on a remote [`crate::server::RuntimeServer`]
//! and serves their tool calls from the local catalog.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::codec::Framed;
use toolexec::{Availability, BoxFuture, ErrorBody, ErrorCode, Secret};
use toolexec_runtime::{
    OutputSink, OutputStream, Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime,
    RuntimeDescriptor, ToolHost, UnitKind,
};

use crate::error::ApiError;
use crate::http::{self, Endpoint, Failure};
use crate::server::{HEALTH_PATH, RUNS_PATH};
use crate::wire::{self, ClientFrame, ServerFrame, ToolRequest};

/// When and how often to retry a run that did not start.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (default 4).
    pub max_attempts: u32,
    /// Backoff before the second attempt (default 100 ms); doubles after.
    pub initial_backoff: Duration,
    /// Largest backoff (default 2 s).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` (`attempt` ≥ 1): exponential,
    /// capped, with full jitter in its upper half.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_backoff);
        let mut r = [0u8; 4];
        crate::auth::fill_random(&mut r);
        let frac = f64::from(u32::from_le_bytes(r)) / f64::from(u32::MAX);
        exp.mul_f64(0.5 + 0.5 * frac)
    }
}

/// How to reach the server.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// `http://host:port[/prefix]` of the server.
    pub url: String,
    /// The shared key; without one the runtime is unavailable.
    pub key: Option<Secret>,
    /// The strongest profile the server is configured to honour.
    pub max_profile: Profile,
    /// The unit kinds the server accepts.
    pub unit_kinds: Vec<UnitKind>,
    /// Retries of runs that did not start.
    pub retry: RetryPolicy,
    /// Bound on connecting and on the server's answer to the request head.
    pub connect_timeout: Duration,
    /// How long past the unit's wall time to wait for the outcome before
    /// giving up on the server.
    pub outcome_grace: Duration,
    /// Timeout of the availability probe.
    pub probe_timeout: Duration,
    /// How long a probe's answer is reused.
    pub probe_cache: Duration,
}

impl RemoteConfig {
    /// Defaults for `url` and `key`: `standard` profile, command units.
    pub fn new(url: impl Into<String>, key: Option<Secret>) -> Self {
        RemoteConfig {
            url: url.into(),
            key,
            max_profile: Profile::Standard,
            unit_kinds: vec![UnitKind::Command],
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(5),
            outcome_grace: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(1),
            probe_cache: Duration::from_secs(5),
        }
    }
}

/// Runs units on a remote runtime server. Tool calls the remote unit makes
/// come back over the same connection and run against the caller's
/// [`ToolHost`] (its catalog, budget and allowlist), so the remote machine
/// needs no tool credentials.
///
/// ```
/// use toolexec::Availability;
/// use toolexec_remote::{RemoteConfig, RemoteRuntime};
/// use toolexec_runtime::Runtime;
/// let runtime = RemoteRuntime::new(RemoteConfig::new("http://127.0.0.1:9", None)).unwrap();
/// assert_eq!(runtime.name(), "remote");
/// assert!(matches!(runtime.availability(), Availability::Unavailable { reason } if reason.contains("no key")));
/// ```
pub struct RemoteRuntime {
    config: RemoteConfig,
    endpoint: Endpoint,
    isolation: String,
    attempts: AtomicU64,
    probe: Arc<Mutex<Option<(Instant, Availability)>>>,
    probing: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for RemoteRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRuntime")
            .field("url", &self.config.url)
            .field("max_profile", &self.config.max_profile)
            .finish()
    }
}

impl RemoteRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "remote";

    /// What the remote runtime is, before it is built: its profile and
    /// unit kinds are settings ([`RemoteConfig`]), these are the defaults.
    pub const DESCRIPTOR: RuntimeDescriptor = RuntimeDescriptor {
        name: Self::NAME,
        isolation: "remote: units run on a toolexec runtime-server",
        max_profile: Profile::Standard,
        unit_kinds: &[UnitKind::Command],
    };

    /// A runtime for `config`; fails on a bad URL or retry policy
    /// (`invalid_request` naming `remote.url` or `remote.retry`).
    pub fn new(config: RemoteConfig) -> Result<Self, toolexec::Error> {
        let endpoint = Endpoint::parse(&config.url)
            .map_err(|e| toolexec::Error::invalid_request("remote.url", e))?;
        if config.retry.max_attempts == 0 {
            return Err(toolexec::Error::invalid_request(
                "remote.retry.max_attempts",
                "must be at least 1",
            ));
        }
        Ok(RemoteRuntime {
            isolation: format!(
                "remote: units run on the runtime server at {}, under its runtime for the profile",
                config.url
            ),
            config,
            endpoint,
            attempts: AtomicU64::new(0),
            probe: Arc::default(),
            probing: Arc::default(),
        })
    }

    /// HTTP requests sent for runs so far, retries included.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Probes the server now: a signed `GET /v1/health`.
    pub async fn probe(&self) -> Availability {
        let Some(key) = &self.config.key else {
            return unavailable("no key configured");
        };
        probe(
            &self.endpoint,
            key,
            &self.config.url,
            self.config.probe_timeout,
        )
        .await
    }

    /// Starts a probe on a helper thread (its own small tokio runtime, so
    /// it works inside and outside one), unless one is under way.
    fn spawn_probe(&self, key: Secret) -> Option<std::sync::mpsc::Receiver<Availability>> {
        if self.probing.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let endpoint = self.endpoint.clone();
        let url = self.config.url.clone();
        let timeout = self.config.probe_timeout;
        let cache = self.probe.clone();
        let probing = self.probing.clone();
        let spawned = std::thread::Builder::new()
            .name("toolexec-remote-probe".into())
            .spawn(move || {
                let result = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(probe(&endpoint, &key, &url, timeout)),
                    Err(e) => unavailable(format!("cannot probe {url}: {e}")),
                };
                *cache.lock() = Some((Instant::now(), result.clone()));
                probing.store(false, Ordering::Release);
                let _ = tx.send(result);
            });
        match spawned {
            Ok(_) => Some(rx),
            Err(_) => {
                self.probing.store(false, Ordering::Release);
                None
            }
        }
    }

    /// Sends the request, retrying only what cannot have started a unit.
    async fn open(
        &self,
        key: &Secret,
        body: Bytes,
    ) -> Result<hyper::upgrade::Upgraded, (Option<u16>, ErrorBody)> {
        let retry = &self.config.retry;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.attempts.fetch_add(1, Ordering::Relaxed);
            let failure = match http::send(
                &self.endpoint,
                key,
                "POST",
                RUNS_PATH,
                body.clone(),
                true,
                self.config.connect_timeout,
            )
            .await
            {
                Ok(response) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
                    return hyper::upgrade::on(response)
                        .await
                        .map_err(|e| (None, unavailable_body(format!("the upgrade failed: {e}"))));
                }
                Ok(response) => http::failure(response).await,
                Err(failure) => failure,
            };
            match failure {
                Failure::Final { status, error } => return Err((status, api_body(status, error))),
                Failure::Retryable(why) if attempt >= retry.max_attempts => {
                    return Err((
                        None,
                        unavailable_body(format!(
                            "remote server {} unavailable after {attempt} attempts: {why}",
                            self.config.url
                        )),
                    ));
                }
                Failure::Retryable(why) => {
                    tracing::debug!(attempt, %why, "remote run: retrying");
                    tokio::time::sleep(retry.backoff(attempt)).await;
                }
            }
        }
    }

    async fn run_remote(&self, request: RunRequest, ctx: RunContext) -> RunOutcome {
        let started = Instant::now();
        let fail = |error: ErrorBody| {
            let mut outcome = RunOutcome::new(Self::NAME, RunStatus::Error { error });
            outcome.tool_calls = ctx.host.take_tool_calls();
            outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
            outcome
        };
        let Some(key) = self.config.key.clone() else {
            return fail(unavailable_body("remote runtime: no key configured".into()));
        };
        let body = match serde_json::to_vec(&request) {
            Ok(body) => Bytes::from(body),
            Err(e) => return fail(unavailable_body(format!("cannot encode the request: {e}"))),
        };
        let wall_time = request.limits.wall_time;
        let max_output = output_cap(request.limits.max_output_bytes);
        let upgraded = tokio::select! {
            opened = self.open(&key, body) => match opened {
                Ok(upgraded) => upgraded,
                Err((_, error)) => return fail(error),
            },
            _ = ctx.cancel.cancelled() => return cancelled(started, &ctx.host),
        };
        let deadline = tokio::time::sleep(wall_time + self.config.outcome_grace);
        tokio::select! {
            outcome = relay(upgraded, &ctx.host, ctx.output.as_ref(), max_output) => match outcome {
                Ok(outcome) => outcome,
                Err(why) => fail(unavailable_body(format!(
                    "remote run at {}: {why} (not retried: the unit had started)",
                    self.config.url
                ))),
            },
            // Dropping the connection here makes the server stop the unit.
            _ = ctx.cancel.cancelled() => cancelled(started, &ctx.host),
            _ = deadline => fail(unavailable_body(format!(
                "remote server {} sent no outcome within the wall time plus {} ms",
                self.config.url,
                self.config.outcome_grace.as_millis()
            ))),
        }
    }
}

/// The most output text an honest server can send for `max_output_bytes`:
/// it keeps that many bytes of stdout plus stderr, and lossy UTF-8
/// decoding turns each invalid byte into U+FFFD (3 bytes) at worst.
fn output_cap(max_output_bytes: usize) -> usize {
    max_output_bytes.saturating_mul(3)
}

/// Adds a chunk to `text`, or fails when the server sent more output in
/// all (`used` bytes so far) than `cap`.
fn append_capped(
    text: &mut String,
    data: &str,
    used: &mut usize,
    cap: usize,
) -> Result<(), String> {
    *used = used.saturating_add(data.len());
    if *used > cap {
        return Err(format!(
            "the server sent more than {cap} bytes of output, more than the run's \
             limits.max_output_bytes allows"
        ));
    }
    text.push_str(data);
    Ok(())
}

/// Speaks the frame protocol until the outcome; stdout plus stderr are
/// bounded by `max_output` (see [`output_cap`]).
async fn relay(
    upgraded: hyper::upgrade::Upgraded,
    host: &ToolHost,
    live: Option<&OutputSink>,
    max_output: usize,
) -> Result<RunOutcome, String> {
    let (mut sink, mut stream) =
        StreamExt::split::<Bytes>(Framed::new(TokioIo::new(upgraded), wire::codec()));
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut output_used = 0usize;
    let mut calls = FuturesUnordered::new();
    loop {
        tokio::select! {
            frame = stream.next() => {
                let bytes = match frame {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(e)) => return Err(format!("connection failed: {e}")),
                    None => return Err("the connection closed before the outcome".into()),
                };
                let frame: ServerFrame = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("the server sent an invalid frame: {e}"))?;
                match frame {
                    ServerFrame::Started { .. } => {}
                    ServerFrame::Stdout { data } => {
                        append_capped(&mut stdout, &data, &mut output_used, max_output)?;
                        if let Some(live) = live {
                            live.send(OutputStream::Stdout, data.as_bytes());
                        }
                    }
                    ServerFrame::Stderr { data } => {
                        append_capped(&mut stderr, &data, &mut output_used, max_output)?;
                        if let Some(live) = live {
                            live.send(OutputStream::Stderr, data.as_bytes());
                        }
                    }
                    ServerFrame::ToolCall { id, request } => {
                        let host = host.clone();
                        calls.push(async move { (id, serve_tool(&host, request).await) });
                    }
                    ServerFrame::Outcome { outcome } => {
                        let mut outcome = RunOutcome::from_value(outcome)
                            .map_err(|e| format!("the server sent an invalid outcome: {e}"))?;
                        let _ = sink.close().await;
                        outcome.runtime = format!("{}:{}", RemoteRuntime::NAME, outcome.runtime);
                        outcome.stdout = stdout;
                        outcome.stderr = stderr;
                        // What ran against the caller's catalog, then what the
                        // server refused on its own.
                        let refused = std::mem::take(&mut outcome.tool_calls);
                        outcome.tool_calls = host.take_tool_calls();
                        outcome.tool_calls.extend(refused);
                        return Ok(outcome);
                    }
                }
            }
            Some((id, answer)) = calls.next() => {
                let frame = match answer {
                    Ok(value) => ClientFrame::ToolResult { id, result: Some(value), error: None },
                    Err(error) => ClientFrame::ToolResult { id, result: None, error: Some(error) },
                };
                let bytes = serde_json::to_vec(&frame).map_err(|e| e.to_string())?;
                sink.send(bytes.into()).await.map_err(|e| format!("connection failed: {e}"))?;
            }
        }
    }
}

async fn serve_tool(host: &ToolHost, request: ToolRequest) -> Result<serde_json::Value, ErrorBody> {
    let answer = match request {
        ToolRequest::Call { tool, args } => host.call(&tool, args).await,
        ToolRequest::Search { query, limit } => Ok(host.search(&query, limit).await),
        ToolRequest::Describe { tool, detail } => host.describe(&tool, detail).await,
    };
    answer.map_err(|e| e.to_body())
}

fn cancelled(started: Instant, host: &ToolHost) -> RunOutcome {
    let mut outcome = RunOutcome::new(RemoteRuntime::NAME, RunStatus::Cancelled);
    outcome.tool_calls = host.take_tool_calls();
    outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    outcome
}

fn unavailable(reason: impl Into<String>) -> Availability {
    Availability::Unavailable {
        reason: reason.into(),
    }
}

fn unavailable_body(message: String) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::BackendUnavailable,
        message: format!("backend_unavailable: {message}"),
        details: None,
    }
}

/// A server's HTTP error as the outcome's error: `backend_unavailable` for
/// the server's own unavailability, `invalid_request` for the rest, with
/// the server's code, status and failing field in `details`.
fn api_body(status: Option<u16>, error: ApiError) -> ErrorBody {
    let code = match error.code {
        crate::ApiErrorCode::BackendUnavailable | crate::ApiErrorCode::Busy => {
            ErrorCode::BackendUnavailable
        }
        _ => ErrorCode::InvalidRequest,
    };
    ErrorBody {
        code,
        message: format!(
            "{}: remote server refused the run: {}",
            code.as_str(),
            error.message
        ),
        details: Some(json!({
            "remote_code": error.code.as_str(),
            "http_status": status,
            "field": error.field(),
        })),
    }
}

async fn probe(endpoint: &Endpoint, key: &Secret, url: &str, timeout: Duration) -> Availability {
    match http::send(
        endpoint,
        key,
        "GET",
        HEALTH_PATH,
        Bytes::new(),
        false,
        timeout,
    )
    .await
    {
        Ok(response) if response.status() == StatusCode::OK => Availability::Available,
        Ok(response) => match http::failure(response).await {
            Failure::Retryable(why) => unavailable(format!("server {url} unavailable: {why}")),
            Failure::Final { error, .. } => {
                unavailable(format!("server {url} refused the probe: {}", error.message))
            }
        },
        Err(Failure::Retryable(why))
        | Err(Failure::Final {
            error: ApiError { message: why, .. },
            ..
        }) => unavailable(format!("server {url} unreachable: {why}")),
    }
}

impl Runtime for RemoteRuntime {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn isolation(&self) -> &str {
        &self.isolation
    }

    fn max_profile(&self) -> Profile {
        self.config.max_profile
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        &self.config.unit_kinds
    }

    /// `no key configured`, or the result of a signed health probe. A
    /// fresh result (younger than [`RemoteConfig::probe_cache`]) is reused;
    /// a stale one is returned at once while a helper thread refreshes it;
    /// only the very first call waits for a probe (at most about
    /// [`RemoteConfig::probe_timeout`]).
    fn availability(&self) -> Availability {
        let Some(key) = self.config.key.clone() else {
            return unavailable("no key configured");
        };
        let stale = match &*self.probe.lock() {
            Some((at, cached)) if at.elapsed() < self.config.probe_cache => return cached.clone(),
            Some((_, cached)) => Some(cached.clone()),
            None => None,
        };
        let rx = self.spawn_probe(key);
        match (stale, rx) {
            (Some(stale), _) => stale,
            (None, Some(rx)) => rx
                .recv_timeout(self.config.probe_timeout * 2 + Duration::from_millis(200))
                .unwrap_or_else(|_| {
                    unavailable(format!(
                        "server {} did not answer the probe",
                        self.config.url
                    ))
                }),
            (None, None) => unavailable(format!("server {}: probe in progress", self.config.url)),
        }
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(self.run_remote(request, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        for _ in 0..50 {
            let first = policy.backoff(1);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = policy.backoff(3);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            assert!(policy.backoff(30) <= Duration::from_millis(500));
        }
    }

    #[test]
    fn output_is_capped_across_both_streams() {
        let (mut out, mut err, mut used) = (String::new(), String::new(), 0);
        assert!(append_capped(&mut out, "abcd", &mut used, 6).is_ok());
        assert!(append_capped(&mut err, "ef", &mut used, 6).is_ok());
        let e = append_capped(&mut err, "g", &mut used, 6).unwrap_err();
        assert!(e.contains("more than 6 bytes"), "{e}");
        assert_eq!((out.as_str(), err.as_str()), ("abcd", "ef"));
        // One invalid byte per kept byte, decoded lossily, still fits.
        let lossy = String::from_utf8_lossy(&[0xff; 10]).into_owned();
        let mut used = 0;
        assert!(append_capped(&mut String::new(), &lossy, &mut used, output_cap(10)).is_ok());
    }

    #[test]
    fn bad_config_is_refused() {
        assert!(RemoteRuntime::new(RemoteConfig::new("https://x:1", None)).is_err());
        let mut config = RemoteConfig::new("http://x:1", None);
        config.retry.max_attempts = 0;
        assert!(RemoteRuntime::new(config).is_err());
    }
}
