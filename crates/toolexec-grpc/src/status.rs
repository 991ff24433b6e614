//! gRPC statuses as toolexec errors.

use serde_json::json;
use tonic::{Code, Status};
use toolexec::{Error, ErrorBody, ErrorCode, LimitKind};
use toolexec_http::tls::{error_chain, next_link};

use crate::connect::Service;

/// Longest status message kept in an error.
const MESSAGE_BYTES: usize = 2048;

/// The error of a call `tool` that ended with `status`: its code mapped
/// (see the crate documentation), its code name and message kept in
/// `details` (`grpc_code`, `grpc_message`). A status tonic made up because
/// the connection failed is `backend_unavailable` saying why (a TLS
/// failure in the terms of the configuration).
pub(crate) fn status_error(service: &Service, tool: &str, status: &Status) -> Error {
    if let Some(source) = std::error::Error::source(status) {
        if let Some(failure) = service.tls.failure_in(source, next_link) {
            return Error::backend_unavailable(
                service.name(),
                format!("TLS handshake failed: {}", failure.reason),
            );
        }
        if status.code() == Code::Unavailable || status.code() == Code::Unknown {
            return Error::backend_unavailable(
                service.name(),
                format!("cannot connect: {}", error_chain(source, next_link)),
            );
        }
    }
    let message = excerpt(status.message());
    let name = code_name(status.code());
    if status.code() == Code::OutOfRange
        && std::error::Error::source(status).is_none()
        && is_local_size_limit(status.message())
    {
        return Error::limit_exceeded(
            LimitKind::OutputBytes,
            format!(
                "the answer of {tool} is larger than max_message_bytes ({}): {message}",
                service.options.max_message_bytes
            ),
        );
    }
    let code = match status.code() {
        Code::InvalidArgument | Code::OutOfRange => ErrorCode::InvalidRequest,
        Code::DeadlineExceeded => ErrorCode::Timeout,
        Code::Unauthenticated | Code::PermissionDenied => ErrorCode::NotAllowed,
        Code::Unavailable | Code::Unimplemented => ErrorCode::BackendUnavailable,
        Code::ResourceExhausted => ErrorCode::LimitExceeded,
        _ => {
            return Error::ExecutionFailed {
                tool: tool.to_owned(),
                message: format!("{name}: {message}"),
                data: Some(json!({"grpc_code": name, "grpc_message": message})),
                panicked: false,
            };
        }
    };
    Error::from(ErrorBody {
        code,
        message: format!("{}: {tool}: {name}: {message}", code.as_str()),
        details: Some(json!({"tool": tool, "grpc_code": name, "grpc_message": message})),
    })
}

/// tonic's own refusal of a message over `max_decoding_message_size`
/// (an `OUT_OF_RANGE` status it makes up, not the server's; a server could
/// send the same words, and then gets `limit_exceeded` for an answer that
/// was indeed refused as too large by its own account).
fn is_local_size_limit(message: &str) -> bool {
    message.starts_with("Error, decoded message length too large")
}

/// The status code's canonical name (`INVALID_ARGUMENT`).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// `text` on one line without control characters, cut to
/// [`MESSAGE_BYTES`] on a character boundary.
pub(crate) fn excerpt(text: &str) -> String {
    let mut end = text.len().min(MESSAGE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if end < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_one_line_and_bounded() {
        assert_eq!(excerpt("a\nb"), "a b");
        assert_eq!(excerpt("a\u{1b}[31mb"), "a [31mb");
        let long = "é".repeat(MESSAGE_BYTES);
        let cut = excerpt(&long);
        assert!(cut.len() <= MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
