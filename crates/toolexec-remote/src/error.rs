//! The server's HTTP errors: a status and a typed JSON body
//! `{"error": {"code", "message", "details": {"field"}}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// Stable codes of the server's HTTP errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiErrorCode {
    /// 401: a signing header is absent.
    MissingSignature,
    /// 401: the signature does not match (or is malformed).
    BadSignature,
    /// 401: the timestamp is malformed or outside the allowed skew.
    ExpiredTimestamp,
    /// 401: the nonce was already used within the window (or is malformed).
    ReplayedNonce,
    /// 413: the body is larger than the server accepts.
    BodyTooLarge,
    /// 408: the body did not arrive in time.
    RequestTimeout,
    /// 400: the body is not a valid run request.
    InvalidRequest,
    /// 422: the server cannot run this unit under this profile.
    BackendUnavailable,
    /// 503: too many runs at once, or the nonce cache is full; safe to retry.
    Busy,
    /// 404 / 405: no such endpoint or method.
    NotFound,
}

impl ApiErrorCode {
    /// The stable snake_case string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ApiErrorCode::MissingSignature => "missing_signature",
            ApiErrorCode::BadSignature => "bad_signature",
            ApiErrorCode::ExpiredTimestamp => "expired_timestamp",
            ApiErrorCode::ReplayedNonce => "replayed_nonce",
            ApiErrorCode::BodyTooLarge => "body_too_large",
            ApiErrorCode::RequestTimeout => "request_timeout",
            ApiErrorCode::InvalidRequest => "invalid_request",
            ApiErrorCode::BackendUnavailable => "backend_unavailable",
            ApiErrorCode::Busy => "busy",
            ApiErrorCode::NotFound => "not_found",
        }
    }

    /// The HTTP status the server answers with.
    pub const fn status(self) -> u16 {
        match self {
            ApiErrorCode::MissingSignature
            | ApiErrorCode::BadSignature
            | ApiErrorCode::ExpiredTimestamp
            | ApiErrorCode::ReplayedNonce => 401,
            ApiErrorCode::BodyTooLarge => 413,
            ApiErrorCode::RequestTimeout => 408,
            ApiErrorCode::InvalidRequest => 400,
            ApiErrorCode::BackendUnavailable => 422,
            ApiErrorCode::Busy => 503,
            ApiErrorCode::NotFound => 404,
        }
    }
}

/// One HTTP error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The stable code.
    pub code: ApiErrorCode,
    /// One line, starting with the code.
    pub message: String,
    /// `{"field": ...}` naming the failing header or body field, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// An error about `field`.
    pub fn new(code: ApiErrorCode, field: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: field.map(|f| serde_json::json!({"field": f})),
        }
    }

    /// A request refused as invalid (`invalid_request` naming its field).
    pub fn from_invalid(error: &toolexec::Error) -> Self {
        let field = match error {
            toolexec::Error::InvalidRequest { field, .. } => Some(field.as_str()),
            _ => None,
        };
        ApiError::new(ApiErrorCode::InvalidRequest, field, error.to_string())
    }

    /// The failing field, if any.
    pub fn field(&self) -> Option<&str> {
        self.details.as_ref()?.get("field")?.as_str()
    }
}

/// The JSON envelope: `{"error": ...}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiErrorEnvelope {
    /// The error.
    pub error: ApiError,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(ApiErrorEnvelope { error: self })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("toolexec-hmac-sha256"),
            );
        }
        response
    }
}
