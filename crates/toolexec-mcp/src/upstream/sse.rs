//! The HTTP+SSE transport of protocol revision 2024-11-05, for servers that
//! predate streamable HTTP (`transport = "sse"`).
//!
//! The client opens one `GET` event stream; its first event, `endpoint`,
//! names the URL to `POST` every message to. The server's messages (its
//! responses included) arrive as `message` events on the stream. rmcp 3
//! has no client for it, so this is one, as an rmcp [`Transport`].
//!
//! - The `endpoint` URL is resolved against the stream's URL and must have
//!   the same origin (scheme, host and port): a server cannot make toolexec
//!   send its messages, and the configured credentials, anywhere else.
//! - The stream ending ends the session, as a stdio server exiting does;
//!   the supervisor reconnects with backoff.
//! - Messages are parsed as JSON-RPC one event at a time; an event that is
//!   not one is skipped with a warning. An event longer than [`MAX_EVENT`]
//!   bytes ends the stream (and so the session) before it is buffered.

use std::borrow::Cow;
use std::time::Duration;

use futures::StreamExt as _;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::SseStream;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use url::Url;

/// Longest wait for the `endpoint` event after the stream opened.
const ENDPOINT_WAIT: Duration = Duration::from_secs(30);
/// Longest event accepted, in bytes.
pub(crate) const MAX_EVENT: usize = 64 << 20;
/// Server messages read ahead of rmcp.
const BACKLOG: usize = 64;

/// Why the SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SseError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("the server answered {what} with HTTP {status}{body}")]
    Status {
        what: &'static str,
        status: u16,
        body: String,
    },
    #[error("{0}")]
    Protocol(String),
}

/// One HTTP+SSE session.
pub(crate) struct LegacySse {
    client: reqwest::Client,
    /// Where messages are posted (the `endpoint` event's URL).
    post: Url,
    headers: HeaderMap,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    /// Stops the stream reader when the transport goes away.
    _reader: DropGuard,
}

impl LegacySse {
    /// Opens the event stream at `url` and waits for its `endpoint` event.
    pub(crate) async fn connect(
        client: reqwest::Client,
        url: &str,
        headers: HeaderMap,
    ) -> Result<Self, SseError> {
        let base = Url::parse(url).map_err(|e| SseError::Protocol(format!("bad URL: {e}")))?;
        let response = client
            .get(base.clone())
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await?;
        let response = check("the event stream request", response).await?;
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            return Err(SseError::Protocol(
                "the server's answer to the event stream request is not text/event-stream \
                 (is this a streamable HTTP server? then leave transport unset)"
                    .to_owned(),
            ));
        }
        let mut events = SseStream::from_bytes_stream(bounded(response.bytes_stream()));
        let endpoint = tokio::time::timeout(ENDPOINT_WAIT, async {
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| SseError::Protocol(format!("event stream: {e}")))?;
                if event.event.as_deref() == Some("endpoint") {
                    return Ok(event.data.unwrap_or_default());
                }
            }
            Err(SseError::Protocol(
                "the event stream ended before its endpoint event".to_owned(),
            ))
        })
        .await
        .map_err(|_| {
            SseError::Protocol(format!(
                "no endpoint event within {} s of opening the event stream",
                ENDPOINT_WAIT.as_secs()
            ))
        })??;
        let post = same_origin(&base, endpoint.trim())?;
        let (tx, incoming) = mpsc::channel(BACKLOG);
        let stop = CancellationToken::new();
        tokio::spawn(read_events(events, tx, stop.clone()));
        Ok(LegacySse {
            client,
            post,
            headers,
            incoming,
            _reader: stop.drop_guard(),
        })
    }
}

/// `endpoint` resolved against `base`, refused unless it has `base`'s origin.
fn same_origin(base: &Url, endpoint: &str) -> Result<Url, SseError> {
    let post = base
        .join(endpoint)
        .map_err(|e| SseError::Protocol(format!("the endpoint event is not a URL: {e}")))?;
    if post.origin() != base.origin() {
        return Err(SseError::Protocol(format!(
            "the endpoint event names another origin ({}) than the event stream's ({}); \
             refused, so that messages and credentials stay with the configured server",
            post.origin().ascii_serialization(),
            base.origin().ascii_serialization()
        )));
    }
    Ok(post)
}

/// Hands the stream's `message` events to the transport, until the stream
/// ends, fails, or the transport goes away.
async fn read_events<S>(
    mut events: S,
    tx: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
    stop: CancellationToken,
) where
    S: futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Unpin,
{
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = stop.cancelled() => return,
        };
        let event = match event {
            Some(Ok(event)) => event,
            Some(Err(e)) => {
                tracing::info!(error = %e, "the SSE event stream failed");
                return;
            }
            None => {
                tracing::info!("the server ended the SSE event stream");
                return;
            }
        };
        if !matches!(event.event.as_deref(), None | Some("message")) {
            continue;
        }
        let Some(data) = event.data else { continue };
        match serde_json::from_str(&data) {
            Ok(message) => {
                if tx.send(message).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "an SSE event that is not a JSON-RPC message was skipped")
            }
        }
    }
}

/// `body` failing once an event (the bytes between two blank lines) grows
/// past [`MAX_EVENT`].
fn bounded<S>(body: S) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>>
where
    S: futures::Stream<Item = Result<bytes::Bytes, reqwest::Error>>,
{
    // Bytes of the current event, and whether the last byte (`\r` aside)
    // ended a line.
    let mut state = (0usize, false);
    body.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        let (len, after_newline) = &mut state;
        for &b in chunk.iter() {
            match b {
                b'\r' => {}
                b'\n' if *after_newline => *len = 0,
                b'\n' => *after_newline = true,
                _ => {
                    *after_newline = false;
                    *len += 1;
                }
            }
            if *len > MAX_EVENT {
                return Err(std::io::Error::other(format!(
                    "an event is longer than {} MiB",
                    MAX_EVENT >> 20
                )));
            }
        }
        Ok(chunk)
    })
}

/// `response` if its status is a success, else the status and the start of
/// its body.
async fn check(
    what: &'static str,
    response: reqwest::Response,
) -> Result<reqwest::Response, SseError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let body = body.trim();
    Err(SseError::Status {
        what,
        status: status.as_u16(),
        body: if body.is_empty() {
            String::new()
        } else {
            format!(": {}", toolexec::telemetry::clip(body))
        },
    })
}

impl Transport<RoleClient> for LegacySse {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "LegacySse".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = serde_json::to_vec(&item).map(|body| {
            self.client
                .post(self.post.clone())
                .headers(self.headers.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body)
        });
        async move {
            let request =
                request.map_err(|e| SseError::Protocol(format!("encoding a message: {e}")))?;
            check("a posted message", request.send().await?).await?;
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_must_keep_the_stream_origin() {
        let base = Url::parse("http://127.0.0.1:8000/sse").unwrap();
        assert_eq!(
            same_origin(&base, "/messages/?session_id=ab")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8000/messages/?session_id=ab"
        );
        assert_eq!(
            same_origin(&base, "http://127.0.0.1:8000/m")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8000/m"
        );
        for elsewhere in [
            "http://attacker.example/m",
            "https://127.0.0.1:8000/m",
            "http://127.0.0.1:8001/m",
            "//attacker.example/m",
        ] {
            let e = same_origin(&base, elsewhere).unwrap_err().to_string();
            assert!(e.contains("another origin"), "{elsewhere}: {e}");
        }
    }
}
