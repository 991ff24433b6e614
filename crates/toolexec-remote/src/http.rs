//! The client's signed HTTP/1.1 exchange: one request per connection,
//! classified into what may be retried and what may not.

use std::time::Duration;

use axum::http::{Request, StatusCode, Uri, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use toolexec::Secret;

use crate::auth::{self, CONTENT_SHA256_HEADER, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::error::{ApiError, ApiErrorCode, ApiErrorEnvelope};
use crate::server::UPGRADE_PROTOCOL;

/// Where the server is: `http://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) authority: String,
    pub(crate) prefix: String,
}

impl Endpoint {
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("url {url:?} is not a URL: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "url {url:?}: only http:// is supported (use a private network or a TLS tunnel)"
            ));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("url {url:?} has no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "url {url:?}: credentials in the URL are not allowed"
            ));
        }
        let port = authority.port_u16().unwrap_or(80);
        if uri.query().is_some() {
            return Err(format!("url {url:?}: a query is not allowed"));
        }
        Ok(Endpoint {
            authority: format!("{}:{port}", authority.host()),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }
}

/// How one attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Nothing reached a unit: safe to try again (connection refused,
    /// connect timeout, 502, 503).
    Retryable(String),
    /// Final (4xx and anything unexpected).
    Final {
        status: Option<u16>,
        error: ApiError,
    },
}

/// Sends one signed request on a fresh connection and returns the response
/// head (the body unread, so that a `101` can be upgraded).
pub(crate) async fn send(
    endpoint: &Endpoint,
    key: &Secret,
    method: &str,
    path: &str,
    body: Bytes,
    upgrade: bool,
    timeout: Duration,
) -> Result<hyper::Response<Incoming>, Failure> {
    let full_path = format!("{}{path}", endpoint.prefix);
    let target = auth::Target {
        method,
        authority: &endpoint.authority,
        path_and_query: &full_path,
    };
    let signature = auth::sign(key, target, &body);
    let exchange = async {
        let tcp = match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect(&endpoint.authority),
        )
        .await
        {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => {
                return Err(Failure::Retryable(format!(
                    "cannot connect to {}: {e}",
                    endpoint.authority
                )));
            }
            Err(_) => {
                return Err(Failure::Retryable(format!(
                    "cannot connect to {} within {} ms",
                    endpoint.authority,
                    timeout.as_millis()
                )));
            }
        };
        let _ = tcp.set_nodelay(true);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| Failure::Retryable(format!("HTTP handshake failed: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        let mut builder = Request::builder()
            .method(method)
            .uri(&full_path)
            .header(header::HOST, &endpoint.authority)
            .header(SIGNATURE_HEADER, &signature.signature)
            .header(TIMESTAMP_HEADER, signature.timestamp.to_string())
            .header(NONCE_HEADER, &signature.nonce)
            .header(CONTENT_SHA256_HEADER, &signature.content_sha256);
        if !body.is_empty() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(trace) = toolexec::telemetry::current_trace() {
            builder = builder.header("traceparent", trace.traceparent);
            if let Some(state) = trace.tracestate {
                builder = builder.header("tracestate", state);
            }
        }
        if upgrade {
            builder = builder
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, UPGRADE_PROTOCOL);
        }
        let request = builder.body(Full::new(body)).map_err(|e| Failure::Final {
            status: None,
            error: ApiError::new(
                ApiErrorCode::InvalidRequest,
                Some("url"),
                format!("invalid_request: {e}"),
            ),
        })?;
        // Once the request is on the wire the server may have accepted it
        // (and started the unit), so nothing from here on is retried.
        let lost = |why: String| Failure::Final {
            status: None,
            error: ApiError::new(
                ApiErrorCode::BackendUnavailable,
                None,
                format!(
                    "backend_unavailable: {why} (not retried: the server may have started the unit)"
                ),
            ),
        };
        match tokio::time::timeout(timeout, sender.send_request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(lost(format!("the request failed: {e}"))),
            Err(_) => Err(lost(format!("no answer within {} ms", timeout.as_millis()))),
        }
    };
    exchange.await
}

/// Largest error body read from the server; a longer one is not parsed.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 << 10;

/// Classifies a non-`101`/non-`200` answer, reading its JSON error (at
/// most [`MAX_ERROR_BODY_BYTES`], for at most 5 s).
pub(crate) async fn failure(response: hyper::Response<Incoming>) -> Failure {
    let status = response.status();
    let limited = Limited::new(response.into_body(), MAX_ERROR_BODY_BYTES);
    let body = match tokio::time::timeout(Duration::from_secs(5), limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Bytes::from(format!(
            "(error body larger than {MAX_ERROR_BODY_BYTES} bytes, not read)"
        )),
        _ => Bytes::new(),
    };
    let error = serde_json::from_slice::<ApiErrorEnvelope>(&body)
        .map(|e| e.error)
        .unwrap_or_else(|_| {
            ApiError::new(
                ApiErrorCode::InvalidRequest,
                None,
                format!(
                    "unexpected answer {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
            )
        });
    if status == StatusCode::BAD_GATEWAY || status == StatusCode::SERVICE_UNAVAILABLE {
        Failure::Retryable(format!("{status}: {}", error.message))
    } else {
        Failure::Final {
            status: Some(status.as_u16()),
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:9000/").unwrap();
        assert_eq!(e.authority, "127.0.0.1:9000");
        assert_eq!(e.prefix, "");
        let e = Endpoint::parse("http://runner.internal/base").unwrap();
        assert_eq!(e.authority, "runner.internal:80");
        assert_eq!(e.prefix, "/base");
        for bad in [
            "https://x:1",
            "ftp://x",
            "not a url",
            "http://u:p@x:1",
            "http://x:1/?a=b",
            "/path",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
