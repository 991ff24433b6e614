//! The HTTP client of a signed-in session: rmcp's [`AuthClient`] (the
//! token on each request, one refresh and retry after a `401`), with a
//! client credentials token fetched before it is needed and a step-up
//! after `403 insufficient_scope`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::AuthClient;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};

use super::Authorizer;
use crate::upstream::http_client::SessionAwareClient;

type HttpError = StreamableHttpError<reqwest::Error>;

/// The HTTP client of one signed-in session.
#[derive(Clone, Debug)]
pub(crate) struct SignedIn {
    inner: AuthClient<SessionAwareClient>,
    authorizer: Arc<Authorizer>,
}

impl SignedIn {
    pub(crate) fn new(authorizer: Arc<Authorizer>, http: SessionAwareClient) -> SignedIn {
        SignedIn {
            inner: authorizer.client(http),
            authorizer,
        }
    }

    async fn run<T, F, Fut>(&self, call: F) -> Result<T, HttpError>
    where
        F: Fn(AuthClient<SessionAwareClient>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        self.authorizer.top_up().await?;
        match call(self.inner.clone()).await {
            Err(StreamableHttpError::InsufficientScope(refusal)) => {
                if self
                    .authorizer
                    .step_up(&refusal.www_authenticate_header)
                    .await?
                {
                    call(self.inner.clone()).await
                } else {
                    Err(StreamableHttpError::InsufficientScope(refusal))
                }
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for SignedIn {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.run(|c| {
            let (uri, message, session_id, auth_header, headers) = (
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
            );
            async move {
                c.post_message(uri, message, session_id, auth_header, headers)
                    .await
            }
        })
        .await
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
        self.run(|c| {
            let (uri, message, session_id, auth_header, headers) = (
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
            );
            async move {
                c.post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    headers,
                    max_sse_event_size,
                )
                .await
            }
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.run(|c| {
            let (uri, session_id, auth_header, headers) = (
                uri.clone(),
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
            );
            async move {
                c.delete_session(uri, session_id, auth_header, headers)
                    .await
            }
        })
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
        self.run(|c| {
            let (uri, session_id, last_event_id, auth_header, headers) = (
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
            );
            async move {
                c.get_stream(uri, session_id, last_event_id, auth_header, headers)
                    .await
            }
        })
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
        self.run(|c| {
            let (uri, session_id, last_event_id, auth_header, headers) = (
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
            );
            async move {
                c.get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    headers,
                    max_sse_event_size,
                )
                .await
            }
        })
        .await
    }
}
