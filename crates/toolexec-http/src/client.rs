//! One HTTP service as tools see it: [`Api`] holds the base URL, a pooled
//! reqwest client with its TLS, the concurrency limit, the retry policy and
//! the credentials; [`Api::send`] runs one request through them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use http::{HeaderName, HeaderValue, Method, StatusCode};
use reqwest::Response;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use toolexec::{Error, Secret};
use url::Url;

use crate::auth::{Auth, Credentials, Requirement, Scheme};
use crate::endpoint::RequestParts;
use crate::tls::{Tls, TlsOptions, error_chain, next_link};

/// Default time for one call, retries and reading the response included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of requests in flight to one API.
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;
/// Default cap on a response body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 << 20;
/// Most requests in flight to one API that can be configured.
pub const MAX_CONCURRENCY: usize = 10_000;

/// How an [`Api`] talks to its server.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Time for one call: every attempt, the waits between them and reading
    /// the response. Past it the call fails with `timeout`.
    pub timeout: Duration,
    /// Time to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Requests in flight at once; more wait for a slot.
    pub max_concurrency: usize,
    /// Largest response body read; a larger one is `limit_exceeded`,
    /// detected without reading it whole.
    pub max_response_bytes: usize,
    /// When failed requests are tried again.
    pub retry: RetryPolicy,
    /// Roots and client certificate for `https://`.
    pub tls: TlsOptions,
    /// Headers sent with every request (secrets: never logged or shown).
    pub headers: BTreeMap<String, Secret>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            retry: RetryPolicy::default(),
            tls: TlsOptions::default(),
            headers: BTreeMap::new(),
        }
    }
}

/// Retries of idempotent requests (GET, HEAD, OPTIONS, PUT, DELETE, and
/// operations marked idempotent) after a connection failure or a `429`,
/// `502`, `503` or `504` answer: exponential backoff with full jitter, or
/// the server's `Retry-After` when it sends one (a wait that would pass the
/// call's deadline is not taken: the answer is returned as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first (0: never retry).
    pub max_retries: u32,
    /// Upper bound of the first backoff; it doubles per attempt.
    pub initial_backoff: Duration,
    /// Upper bound of any backoff, `Retry-After` included.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): a random duration up
    /// to `initial_backoff * 2^retry`, capped by `max_backoff`.
    fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .initial_backoff
            .saturating_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX))
            .min(self.max_backoff);
        let fraction = getrandom::u64().unwrap_or(u64::MAX / 2) as f64 / u64::MAX as f64;
        ceiling.mul_f64(fraction)
    }
}

/// An HTTP service: where it is, how to reach it, and its credentials.
/// Shared (`Arc`) by all of its tools; clones of the client share one
/// connection pool.
pub struct Api {
    name: String,
    base_url: Url,
    client: reqwest::Client,
    tls: Tls,
    permits: Semaphore,
    headers: Vec<(HeaderName, HeaderValue)>,
    auth: Auth,
    pub(crate) options: ClientOptions,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("name", &self.name)
            .field("base_url", &self.base_url.as_str())
            .finish_non_exhaustive()
    }
}

impl Api {
    /// An API named `name` (the namespace of its tools) at `base_url`
    /// (`http://` or `https://`; operation paths are appended to it), with
    /// no security schemes (plain tools carry credentials in `headers`).
    /// Fails with `invalid_request` naming the field: `base_url`, `tls.*`,
    /// `headers.<name>`, `max_concurrency`.
    ///
    /// ```
    /// use toolexec_http::{Api, ClientOptions};
    /// let api = Api::new("weather", "http://127.0.0.1:8000/v1/", ClientOptions::default()).unwrap();
    /// assert_eq!(api.base_url().as_str(), "http://127.0.0.1:8000/v1");
    /// let err = Api::new("weather", "ftp://example.com", ClientOptions::default()).unwrap_err();
    /// assert_eq!(err.field(), Some("base_url"));
    /// ```
    pub fn new(name: &str, base_url: &str, options: ClientOptions) -> Result<Arc<Api>, Error> {
        Api::with_auth(
            name,
            base_url,
            options,
            &BTreeMap::new(),
            Credentials::new(),
        )
    }

    /// As [`Api::new`], with the document's security schemes and the
    /// credentials configured for them (`auth.<scheme>` errors).
    pub(crate) fn with_auth(
        name: &str,
        base_url: &str,
        options: ClientOptions,
        schemes: &BTreeMap<String, Scheme>,
        credentials: Credentials,
    ) -> Result<Arc<Api>, Error> {
        let base_url = parse_base_url(base_url)?;
        let https = base_url.scheme() == "https";
        let tls = if https || !options.tls.is_empty() {
            options.tls.client_config(name)?
        } else {
            Tls::unused()
        };
        let client =
            client(&tls, &options, &base_url).map_err(|e| Error::backend_unavailable(name, e))?;
        let headers = options
            .headers
            .iter()
            .map(|(k, v)| header(&format!("headers.{k}"), k, v.expose()))
            .collect::<Result<Vec<_>, _>>()?;
        if !(1..=MAX_CONCURRENCY).contains(&options.max_concurrency) {
            return Err(Error::invalid_request(
                "max_concurrency",
                format!("must be from 1 to {MAX_CONCURRENCY}"),
            ));
        }
        let auth = Auth::new(schemes, credentials, &base_url, &options)?;
        Ok(Arc::new(Api {
            name: name.to_owned(),
            base_url,
            permits: Semaphore::new(options.max_concurrency),
            client,
            tls,
            headers,
            auth,
            options,
        }))
    }

    /// The API's name: its tools' namespace.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base URL operation paths are appended to.
    pub fn base_url(&self) -> &Url {
        &self.base_url
    }

    /// A concurrency slot: held for a whole call (sending, retries and
    /// reading the answer); more callers wait.
    pub(crate) async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Error> {
        self.permits
            .acquire()
            .await
            .map_err(|_| Error::backend_unavailable(&self.name, "the API is shut down"))
    }

    /// Runs one request for `tool` (the caller holds a [`slot`](Self::slot)):
    /// builds it (`build`, once per attempt), authenticates and sends it,
    /// retrying as [`RetryPolicy`] says when `idempotent`. Returns the
    /// last response, whatever its status; transport failures are
    /// `backend_unavailable` (TLS failures say why). `deadline` bounds the
    /// waits between attempts.
    pub(crate) async fn send(
        &self,
        tool: &str,
        idempotent: bool,
        deadline: Instant,
        security: &[Requirement],
        build: impl Fn() -> Result<RequestParts, Error>,
    ) -> Result<Response, Error> {
        let span = tracing::info_span!(
            target: "toolexec::upstream",
            "upstream_request",
            otel.kind = "client",
            gen_ai.tool.name = tool,
            toolexec.upstream = %self.name,
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let result = self
            .send_attempts(tool, idempotent, deadline, security, build)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(response) => span.record("http.response.status_code", response.status().as_u16()),
            Err(e) => span.record("error.type", e.code().as_str()),
        };
        result
    }

    async fn send_attempts(
        &self,
        tool: &str,
        idempotent: bool,
        deadline: Instant,
        security: &[Requirement],
        build: impl Fn() -> Result<RequestParts, Error>,
    ) -> Result<Response, Error> {
        let policy = &self.options.retry;
        let mut retry = 0;
        let mut reauthenticated = false;
        loop {
            let mut parts = build()?;
            let tokens = self.auth.apply(&self.name, security, &mut parts).await?;
            parts.operator_headers(&self.headers);
            parts.trace_context();
            let request = parts.into_request(&self.client)?;
            let may_retry = idempotent && retry < policy.max_retries;
            self.tls.new_attempt();
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    if status == StatusCode::UNAUTHORIZED && !tokens.is_empty() && !reauthenticated
                    {
                        // An expired or revoked OAuth token: the server
                        // refused before acting, so once more with a new one.
                        self.auth.forget(&tokens).await;
                        reauthenticated = true;
                        continue;
                    }
                    if !may_retry || !retryable_status(status) {
                        return Ok(response);
                    }
                    // A server asking for a longer wait than the policy
                    // allows gets its answer back, not an early retry.
                    let wait = match retry_after(&response) {
                        Some(w) if w > policy.max_backoff => return Ok(response),
                        Some(w) => w,
                        None => policy.backoff(retry),
                    };
                    if Instant::now() + wait >= deadline {
                        return Ok(response);
                    }
                    tracing::debug!(api = %self.name, %tool, %status, retry, ?wait, "retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    // The URL may carry an API key in its query: never shown.
                    let e = e.without_url();
                    let permanent = self
                        .tls
                        .failure_in(&e, next_link)
                        .is_some_and(|f| f.permanent);
                    // Only a request that never reached the server, and
                    // not a TLS setup that cannot work.
                    if !(may_retry && e.is_connect()) || permanent {
                        return Err(self.transport_error(&e));
                    }
                    let wait = policy.backoff(retry);
                    if Instant::now() + wait >= deadline {
                        return Err(self.transport_error(&e));
                    }
                    tracing::debug!(api = %self.name, %tool, retry, ?wait, error = %e, "retrying");
                    tokio::time::sleep(wait).await;
                }
            }
            retry += 1;
        }
    }

    /// `backend_unavailable` for a request that got no answer, saying why
    /// (a TLS failure in the terms of the configuration). `e` must have
    /// lost its URL ([`reqwest::Error::without_url`]): it may hold a key.
    pub(crate) fn transport_error(&self, e: &reqwest::Error) -> Error {
        if let Some(failure) = self.tls.failure_in(e, next_link) {
            return Error::backend_unavailable(
                &self.name,
                format!("TLS handshake failed: {}", failure.reason),
            );
        }
        let chain = error_chain(e, next_link);
        let what = if e.is_connect() {
            "cannot connect"
        } else if e.is_timeout() {
            "no answer in time"
        } else {
            "request failed"
        };
        Error::backend_unavailable(&self.name, format!("{what}: {chain}"))
    }
}

/// Whether a method is idempotent by definition (RFC 9110, 9.2.2).
pub(crate) fn idempotent_method(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

fn retryable_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// `Retry-After` as delay-seconds or an HTTP date.
fn retry_after(response: &Response) -> Option<Duration> {
    let value = response
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

fn parse_base_url(text: &str) -> Result<Url, Error> {
    let bad = |m: String| Error::invalid_request("base_url", m);
    let mut url = Url::parse(text).map_err(|e| bad(format!("{text:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "{text:?}: only http:// and https:// are supported"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad(format!("{text:?} has no host")));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad(format!(
            "{text:?}: a base URL has no query or fragment"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "a base URL carries no user or password: use headers or auth".to_owned(),
        ));
    }
    // Operation paths are appended: the base path never ends in `/`.
    let path = url.path().trim_end_matches('/').to_owned();
    url.set_path(&path);
    Ok(url)
}

/// The API's client: pooled, no proxy from the environment, no `Referer`,
/// and redirects followed only within the base URL's origin (scheme, host
/// and port), at most 5: reqwest strips only `Authorization` and cookies
/// on a redirect elsewhere, and API keys travel in other headers and in
/// queries.
pub(crate) fn client(
    tls: &Tls,
    options: &ClientOptions,
    base: &Url,
) -> Result<reqwest::Client, String> {
    let origin = base.origin();
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > 5 || attempt.url().origin() != origin {
            attempt.stop()
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls.config.clone())
        .connect_timeout(options.connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .no_proxy()
        .referer(false)
        .https_only(base.scheme() == "https")
        .redirect(redirects)
        .user_agent(concat!("toolexec/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A header checked for HTTP: `invalid_request` at `field` otherwise. The
/// value is a secret or an argument: it is never quoted.
pub(crate) fn header(
    field: &str,
    name: &str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), Error> {
    let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        Error::invalid_request(field, format!("{name:?} is not a valid header name"))
    })?;
    let mut value = HeaderValue::from_str(value).map_err(|_| {
        Error::invalid_request(
            field,
            "not a valid header value (control characters or non-ASCII)",
        )
    })?;
    value.set_sensitive(true);
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for retry in 0..40 {
            let ceiling = (Duration::from_millis(100) * 2u32.saturating_pow(retry.min(20)))
                .min(Duration::from_secs(1));
            assert!(p.backoff(retry) <= ceiling, "retry {retry}");
        }
    }

    #[test]
    fn base_urls_are_checked_and_lose_a_trailing_slash() {
        assert_eq!(
            parse_base_url("http://127.0.0.1:8000/api/")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8000/api"
        );
        for bad in ["ftp://x", "not a url", "http://x/?q=1", "unix:/tmp/s"] {
            let e = parse_base_url(bad).unwrap_err();
            assert_eq!(e.field(), Some("base_url"), "{bad}: {e}");
        }
    }

    #[test]
    fn idempotent_methods_are_the_rfc_ones() {
        assert!(idempotent_method(&Method::PUT));
        assert!(!idempotent_method(&Method::POST));
        assert!(!idempotent_method(&Method::PATCH));
    }
}
