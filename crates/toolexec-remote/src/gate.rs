//! Authentication of a request from its head alone, then its body checked
//! against the signed digest.
//!
//! Signature, freshness and the nonce are settled together, before a byte
//! of the body is read: a request without the key costs the server no body
//! reading, and a captured request cannot be replayed by dripping its body
//! out until its nonce is forgotten (the nonce is recorded before the body
//! is read, and kept longer than a body may take to arrive).

use axum::body::Body;
use axum::extract::Request;
use axum::extract::connect_info::ConnectInfo;
use axum::http::{HeaderMap, header};
use bytes::Bytes;

use crate::auth::{
    self, CONTENT_SHA256_HEADER, NONCE_HEADER, SIGNATURE_HEADER, SIGNATURE_PREFIX, TIMESTAMP_HEADER,
};
use crate::error::{ApiError, ApiErrorCode};
use crate::listener::ConnMeter;
use crate::nonce::NonceRejection;
use crate::server::{LocalAddr, ServerState};

/// A request whose head carried a valid, fresh, first-seen signature.
/// Its body is still unread; [`read_body`] checks it against the digest.
#[derive(Debug)]
pub(crate) struct Authenticated {
    content_sha256: String,
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

/// Checks the signing headers, the signature over them, the timestamp
/// window and the authority, then records the nonce, all from the head.
/// On success the connection counts as authenticated (its bytes leave the
/// server's unauthenticated gauge).
pub(crate) fn authenticate_head(
    state: &ServerState,
    request: &Request,
) -> Result<Authenticated, ApiError> {
    let headers = request.headers();
    let signature = header_str(headers, SIGNATURE_HEADER)?;
    let timestamp = header_str(headers, TIMESTAMP_HEADER)?;
    let nonce = header_str(headers, NONCE_HEADER)?;
    let content_sha256 = header_str(headers, CONTENT_SHA256_HEADER)?;
    let authority = header_str(headers, header::HOST.as_str())?;
    if !signature.starts_with(SIGNATURE_PREFIX) || signature.len() != SIGNATURE_PREFIX.len() + 64 {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some(SIGNATURE_HEADER),
            format!("bad_signature: expected {SIGNATURE_PREFIX} and 64 hex digits"),
        ));
    }
    if !auth::valid_sha256(content_sha256) {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some(CONTENT_SHA256_HEADER),
            "bad_signature: expected the body's SHA-256 as 64 lowercase hex digits",
        ));
    }
    let timestamp: u64 = timestamp.parse().map_err(|_| {
        ApiError::new(
            ApiErrorCode::ExpiredTimestamp,
            Some(TIMESTAMP_HEADER),
            "expired_timestamp: not a number of unix seconds",
        )
    })?;
    let skew = state.config.max_clock_skew.as_secs();
    if timestamp.abs_diff(auth::unix_now()) > skew {
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
    if !addressed_here(state, request, authority) {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some("host"),
            format!(
                "bad_signature: the request is addressed to {authority:?}, which is not this server"
            ),
        ));
    }
    let target = auth::Target {
        method: request.method().as_str(),
        authority,
        path_and_query: request
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    };
    if !auth::verify(
        &state.config.key,
        target,
        content_sha256,
        timestamp,
        nonce,
        signature,
    ) {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some(SIGNATURE_HEADER),
            "bad_signature: the signature does not match the request",
        ));
    }
    // Only signed requests reach the cache, so nobody without the key can
    // fill it. The nonce is recorded now, before the body, and kept past
    // the last moment its request could still be in progress: accepted up
    // to `timestamp + skew`, then up to `body_timeout` to send the body.
    let expires = timestamp
        .saturating_add(skew)
        .saturating_add(state.config.body_timeout.as_secs_f64().ceil() as u64);
    match state
        .nonces
        .check_and_insert(nonce, expires, auth::unix_now())
    {
        Ok(()) => {}
        Err(NonceRejection::Replayed) => {
            return Err(ApiError::new(
                ApiErrorCode::ReplayedNonce,
                Some(NONCE_HEADER),
                "replayed_nonce: this nonce was already used",
            ));
        }
        Err(NonceRejection::Full) => {
            return Err(ApiError::new(
                ApiErrorCode::Busy,
                None,
                "busy: too many recent requests; retry later",
            ));
        }
    }
    if let Some(meter) = request.extensions().get::<ConnMeter>() {
        meter.authenticated();
    }
    Ok(Authenticated {
        content_sha256: content_sha256.to_owned(),
    })
}

/// Whether `authority` (the `Host` header) names this server.
fn addressed_here(state: &ServerState, request: &Request, authority: &str) -> bool {
    if state.config.hosts.is_empty() {
        request
            .extensions()
            .get::<ConnectInfo<LocalAddr>>()
            .is_some_and(|c| c.0.0.to_string().eq_ignore_ascii_case(authority))
    } else {
        state
            .config
            .hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(authority))
    }
}

/// Reads the body of an authenticated request: more than `max` bytes is
/// `413`, slower than [`crate::ServerConfig::body_timeout`] is `408`, and a
/// body whose SHA-256 is not the signed digest is `401 bad_signature`.
pub(crate) async fn read_body(
    state: &ServerState,
    request: Request,
    max: usize,
    authenticated: &Authenticated,
) -> Result<(Request, Bytes), ApiError> {
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
    if auth::body_sha256(&bytes) != authenticated.content_sha256 {
        return Err(ApiError::new(
            ApiErrorCode::BadSignature,
            Some(CONTENT_SHA256_HEADER),
            format!("bad_signature: the body does not match the signed {CONTENT_SHA256_HEADER}"),
        ));
    }
    Ok((Request::from_parts(parts, Body::empty()), bytes))
}
