//! The HTTP client of streamable HTTP sessions: rmcp's reqwest client, plus
//! one fix-up for servers that answer a stale session with an uncorrelated
//! JSON-RPC error.
//!
//! The spec says a server answers an unknown `mcp-session-id` with HTTP 404,
//! which rmcp handles (re-initialize, retry the request once). Servers built
//! on the TypeScript SDK's examples (server-everything among them) answer
//! HTTP 400 with `{"error": {"message": "Bad Request: No valid session ID
//! provided"}, "id": null}` instead: rmcp cannot route an error without an id,
//! so the request would wait forever. Here such an answer to a request sent
//! with a session id becomes `SessionExpired`, so rmcp's recovery runs as for
//! a 404. Any other uncorrelated error answering a request is re-correlated
//! with the request, so the call fails instead of hanging.
//!
//! It also marks the log messages on a request's response stream with the
//! request ([`origin`](super::origin)), which rmcp does only for requests.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt as _;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, GetExtensions as _, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};

type HttpError = StreamableHttpError<reqwest::Error>;

/// Attached to a request (its extensions, never serialized) whose
/// `Authorization` must be this token instead of the session's credential:
/// a call made as the caller (token exchange).
#[derive(Clone, Debug)]
pub(crate) struct ActAs(pub(crate) toolexec::Secret);

/// The token a request made as its caller carries, if it is one.
fn acting_as(message: &ClientJsonRpcMessage) -> Option<String> {
    match message {
        ClientJsonRpcMessage::Request(r) => r
            .request
            .extensions()
            .get::<ActAs>()
            .map(|a| a.0.expose().to_owned()),
        _ => None,
    }
}

/// A refusal of a request made as its caller, kept to that call: the
/// session is shared by every caller, so the answer one caller's token gets
/// must not re-initialize it (`404`, a lost-session error), refresh or
/// step up the session's own credential (`401`, `403`), or be read as a
/// lost session by the retry logic.
fn caller_refusal(
    result: Result<StreamableHttpPostResponse, HttpError>,
) -> Result<StreamableHttpPostResponse, HttpError> {
    let refused = |what: String| {
        Err(StreamableHttpError::UnexpectedServerResponse(
            format!("the server refused the call made as the caller: {what}").into(),
        ))
    };
    match result {
        Err(StreamableHttpError::SessionExpired) => {
            refused("its token does not reach this session (HTTP 404)".into())
        }
        Err(StreamableHttpError::AuthRequired(_)) => {
            refused("its exchanged token was rejected (HTTP 401)".into())
        }
        Err(StreamableHttpError::InsufficientScope(e)) => refused(format!(
            "its exchanged token lacks scope (HTTP 403{})",
            e.get_required_scope()
                .map(|s| format!(", needs {}", crate::upstream::oauth::printable(s)))
                .unwrap_or_default()
        )),
        Err(StreamableHttpError::Client(e))
            if e.status()
                .is_some_and(|s| matches!(s.as_u16(), 401 | 403 | 404)) =>
        {
            refused(format!(
                "HTTP status {}",
                e.status().map(|s| s.as_u16()).unwrap_or(0)
            ))
        }
        other => other,
    }
}

/// reqwest, without redirects and without idle connection pooling (as rmcp's
/// default client, whose pooling stalls on Linux delayed ACKs), with the
/// upstream's own TLS configuration (rustls sessions are resumed across
/// connections through its session cache).
#[derive(Clone, Debug)]
pub(crate) struct SessionAwareClient(reqwest::Client);

impl SessionAwareClient {
    pub(crate) fn new(tls: rustls::ClientConfig) -> Result<Self, String> {
        reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map(SessionAwareClient)
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    /// The reqwest client.
    pub(crate) fn into_inner(self) -> reqwest::Client {
        self.0
    }
}

/// Whether a JSON-RPC error message says the session is unknown.
pub(crate) fn mentions_lost_session(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("session")
        && [
            "no valid",
            "not found",
            "invalid",
            "unknown",
            "expired",
            "terminated",
        ]
        .iter()
        .any(|w| m.contains(w))
}

fn fix_up(
    message: &ClientJsonRpcMessage,
    session_attached: bool,
    response: StreamableHttpPostResponse,
) -> Result<StreamableHttpPostResponse, HttpError> {
    let ClientJsonRpcMessage::Request(request) = message else {
        return Ok(response);
    };
    match response {
        StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(mut error), session)
            if error.id.is_none() =>
        {
            if session_attached && mentions_lost_session(&error.error.message) {
                return Err(StreamableHttpError::SessionExpired);
            }
            error.id = Some(request.id.clone());
            Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(error),
                session,
            ))
        }
        StreamableHttpPostResponse::Sse(stream, session) => {
            let id = request.id.clone();
            let marked = stream.map(move |event| {
                event.map(|mut sse| {
                    if let Some(data) = sse.data.as_mut() {
                        super::origin::mark(data, &id);
                    }
                    sse
                })
            });
            Ok(StreamableHttpPostResponse::Sse(marked.boxed(), session))
        }
        other => Ok(other),
    }
}

impl StreamableHttpClient for SessionAwareClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let acting = acting_as(&message);
        // A caller's refusal never reads as a lost session.
        let session_attached = session_id.is_some() && acting.is_none();
        let result = self
            .0
            .post_message(
                uri,
                message.clone(),
                session_id,
                acting.clone().or(auth_header),
                custom_headers,
            )
            .await
            .and_then(|response| fix_up(&message, session_attached, response));
        if acting.is_some() {
            caller_refusal(result)
        } else {
            result
        }
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let acting = acting_as(&message);
        let session_attached = session_id.is_some() && acting.is_none();
        let result = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message.clone(),
                session_id,
                acting.clone().or(auth_header),
                custom_headers,
                max_sse_event_size,
            )
            .await
            .and_then(|response| fix_up(&message, session_attached, response));
        if acting.is_some() {
            caller_refusal(result)
        } else {
            result
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, HttpError> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, HttpError> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorData, NumberOrString};
    use serde_json::json;

    fn request() -> ClientJsonRpcMessage {
        serde_json::from_value(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).unwrap()
    }

    fn idless(message: &str) -> StreamableHttpPostResponse {
        StreamableHttpPostResponse::Json(
            ServerJsonRpcMessage::error(
                ErrorData::new(rmcp::model::ErrorCode(-32000), message.to_owned(), None),
                None,
            ),
            None,
        )
    }

    #[test]
    fn stale_session_errors_become_session_expired() {
        let r = fix_up(
            &request(),
            true,
            idless("Bad Request: No valid session ID provided"),
        );
        assert!(matches!(r, Err(StreamableHttpError::SessionExpired)));
        // Without a session attached it is an ordinary error, correlated.
        let r = fix_up(
            &request(),
            false,
            idless("Bad Request: No valid session ID provided"),
        );
        match r {
            Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _)) => {
                assert_eq!(e.id, Some(NumberOrString::Number(7)));
            }
            _ => panic!("not re-correlated"),
        }
    }

    #[test]
    fn a_callers_refusal_is_not_a_lost_session() {
        for refusal in [
            StreamableHttpError::SessionExpired,
            StreamableHttpError::AuthRequired(
                rmcp::transport::streamable_http_client::AuthRequiredError::new(
                    "Bearer error=\"invalid_token\"".into(),
                ),
            ),
            StreamableHttpError::InsufficientScope(
                rmcp::transport::streamable_http_client::InsufficientScopeError::new(
                    "Bearer error=\"insufficient_scope\"".into(),
                    Some("admin".into()),
                ),
            ),
        ] {
            match caller_refusal(Err(refusal)) {
                Err(StreamableHttpError::UnexpectedServerResponse(m)) => {
                    assert!(
                        m.starts_with("the server refused the call made as the caller"),
                        "{m}"
                    );
                    assert!(!m.starts_with("HTTP 40"), "{m}");
                }
                other => panic!("not kept to the call: {:?}", other.err()),
            }
        }
        // Answers are untouched.
        assert!(caller_refusal(Ok(StreamableHttpPostResponse::Accepted)).is_ok());
    }

    #[test]
    fn recognizes_lost_session_messages() {
        assert!(mentions_lost_session(
            "Bad Request: No valid session ID provided"
        ));
        assert!(mentions_lost_session("Session not found"));
        assert!(!mentions_lost_session("Invalid params"));
        assert!(!mentions_lost_session("tool not found"));
    }
}
