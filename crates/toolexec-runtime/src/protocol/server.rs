//! The host side of the channel protocol.

use std::sync::Arc;

use futures::stream::FuturesUnordered;
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite};
use toolexec::{DetailLevel, ErrorBody, ErrorCode};

use super::message::{Request, RequestBody, Response, ResponseBody};
use super::{DEFAULT_MAX_FRAME_BYTES, PROTOCOL_NAME, PROTOCOL_VERSION, codec};
use crate::ToolHost;

/// Settings of a [`ChannelServer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Largest frame accepted from the sandbox (and sent to it).
    pub max_frame_bytes: usize,
    /// Requests handled at once; further frames wait (backpressure).
    pub max_in_flight: usize,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_in_flight: 32,
        }
    }
}

/// Why the host ended a channel session. Every variant ends the run: a
/// sandbox that breaks the protocol is not trusted further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A frame over the maximum size.
    #[error("channel frame exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The maximum.
        max: usize,
    },
    /// A frame that is not a valid message.
    #[error("malformed channel message: {detail}")]
    Malformed {
        /// What is wrong (serde's message, with the field).
        detail: String,
    },
    /// A `hello` for another protocol or version.
    #[error(
        "unsupported channel protocol {protocol:?} version {version} (this host speaks {PROTOCOL_NAME} {PROTOCOL_VERSION})"
    )]
    UnsupportedVersion {
        /// The protocol name the sandbox sent.
        protocol: String,
        /// The version the sandbox sent.
        version: u32,
    },
    /// A second `result` notification.
    #[error("the unit sent its result twice")]
    DuplicateResult,
    /// The transport failed.
    #[error("channel transport failed: {0}")]
    Io(String),
}

impl ProtocolError {
    /// The error as the run reports it: `invalid_request` on field `channel`.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody {
            code: ErrorCode::InvalidRequest,
            message: format!("invalid_request: channel: {self}"),
            details: Some(json!({"field": "channel"})),
        }
    }
}

/// Serves one sandbox's channel connection against a [`ToolHost`].
#[derive(Debug, Clone)]
pub struct ChannelServer {
    host: ToolHost,
    config: ChannelConfig,
    value: Arc<Mutex<Option<Value>>>,
}

impl ChannelServer {
    /// A server for `host`.
    pub fn new(host: ToolHost, config: ChannelConfig) -> Self {
        ChannelServer {
            host,
            config,
            value: Arc::default(),
        }
    }

    /// The tool host.
    pub fn host(&self) -> &ToolHost {
        &self.host
    }

    /// The value the unit sent with `result`, if it did.
    pub fn value(&self) -> Option<Value> {
        self.value.lock().clone()
    }

    /// Serves until the sandbox closes its end (`Ok`) or breaks the protocol
    /// (`Err`; the caller must end the run). Dropping the future abandons
    /// calls in flight.
    pub async fn serve<S>(&self, stream: S) -> Result<(), ProtocolError>
    where
        S: AsyncRead + AsyncWrite,
    {
        let (read, write) = tokio::io::split(stream);
        let mut frames = FramedRead::new(read, codec(self.config.max_frame_bytes));
        let mut sink = FramedWrite::new(write, codec(self.config.max_frame_bytes));
        let mut in_flight = FuturesUnordered::new();
        let mut reading = true;
        loop {
            if !reading && in_flight.is_empty() {
                return Ok(());
            }
            let can_read = reading && in_flight.len() < self.config.max_in_flight;
            tokio::select! {
                frame = frames.next(), if can_read => match frame {
                    None => reading = false,
                    Some(Err(e)) => return Err(frame_error(e, self.config.max_frame_bytes)),
                    Some(Ok(bytes)) => {
                        let request: Request = serde_json::from_slice(&bytes)
                            .map_err(|e| ProtocolError::Malformed { detail: e.to_string() })?;
                        if let Some(answer) = self.dispatch(request)? {
                            in_flight.push(answer);
                        }
                    }
                },
                Some(response) = in_flight.next(), if !in_flight.is_empty() => {
                    let bytes = encode(&response, self.config.max_frame_bytes);
                    if sink.send(tokio_util::bytes::Bytes::from(bytes)).await.is_err() {
                        // The sandbox is gone; nothing left to answer.
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Handles one request: immediate checks here, the answer as a future.
    fn dispatch(
        &self,
        request: Request,
    ) -> Result<Option<futures::future::BoxFuture<'static, Response>>, ProtocolError> {
        let id = match (&request.body, request.id) {
            (RequestBody::Result { .. }, _) => None,
            (_, Some(id)) => Some(id),
            (_, None) => {
                return Err(ProtocolError::Malformed {
                    detail: "requests other than `result` need an `id`".into(),
                });
            }
        };
        let host = self.host.clone();
        let answer = |body: ResponseBody| -> futures::future::BoxFuture<'static, Response> {
            let id = id.unwrap_or_default();
            Box::pin(async move { Response { id, body } })
        };
        Ok(match request.body {
            RequestBody::Hello { protocol, version } => {
                if protocol != PROTOCOL_NAME || version != PROTOCOL_VERSION {
                    return Err(ProtocolError::UnsupportedVersion { protocol, version });
                }
                Some(answer(ResponseBody::Result(json!({
                    "protocol": PROTOCOL_NAME,
                    "version": PROTOCOL_VERSION,
                    "max_frame_bytes": self.config.max_frame_bytes,
                }))))
            }
            RequestBody::Call { tool, args } => {
                let id = id.unwrap_or_default();
                Some(Box::pin(async move {
                    let body = match host.call(&tool, args).await {
                        Ok(value) => ResponseBody::Result(value),
                        Err(error) => ResponseBody::Error(error.to_body()),
                    };
                    Response { id, body }
                }))
            }
            RequestBody::Search { query, limit } => {
                let id = id.unwrap_or_default();
                Some(Box::pin(async move {
                    let body = match host.try_search(&query, limit.unwrap_or(10)).await {
                        Ok(hits) => ResponseBody::Result(hits),
                        Err(error) => ResponseBody::Error(error.to_body()),
                    };
                    Response { id, body }
                }))
            }
            RequestBody::Describe { tool, detail } => {
                let id = id.unwrap_or_default();
                Some(Box::pin(async move {
                    let body = match parse_detail(detail.as_deref()) {
                        Ok(level) => match host.describe(&tool, level).await {
                            Ok(doc) => ResponseBody::Result(doc),
                            Err(error) => ResponseBody::Error(error.to_body()),
                        },
                        Err(error) => ResponseBody::Error(error),
                    };
                    Response { id, body }
                }))
            }
            RequestBody::Result { value } => {
                let mut slot = self.value.lock();
                if slot.is_some() {
                    return Err(ProtocolError::DuplicateResult);
                }
                *slot = Some(value);
                None
            }
        })
    }
}

fn parse_detail(detail: Option<&str>) -> Result<DetailLevel, ErrorBody> {
    match detail.unwrap_or("schema") {
        "summary" => Ok(DetailLevel::Summary),
        "schema" => Ok(DetailLevel::Schema),
        "full" => Ok(DetailLevel::Full),
        other => Err(ErrorBody {
            code: ErrorCode::InvalidRequest,
            message: format!(
                "invalid_request: detail: {other:?} is not one of summary, schema, full"
            ),
            details: Some(json!({"field": "detail"})),
        }),
    }
}

/// Encodes a response; one too large for the frame limit becomes an error
/// response instead (the tool's output limits normally prevent this).
fn encode(response: &Response, max: usize) -> Vec<u8> {
    let bytes = serde_json::to_vec(response).unwrap_or_default();
    if bytes.len() <= max {
        return bytes;
    }
    let error = Response {
        id: response.id,
        body: ResponseBody::Error(ErrorBody {
            code: ErrorCode::LimitExceeded,
            message: format!(
                "limit_exceeded: the answer ({} bytes) exceeds the channel frame maximum of {max} bytes",
                bytes.len()
            ),
            details: Some(json!({"limit": "output_bytes", "max": max})),
        }),
    };
    serde_json::to_vec(&error).unwrap_or_default()
}

fn frame_error(e: std::io::Error, max: usize) -> ProtocolError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        ProtocolError::FrameTooLarge { max }
    } else if e.kind() == std::io::ErrorKind::UnexpectedEof
        // tokio-util's codec reports EOF inside a frame as `Other`.
        || e.to_string().contains("bytes remaining on stream")
    {
        ProtocolError::Malformed {
            detail: "the connection closed inside a frame".into(),
        }
    } else {
        ProtocolError::Io(e.to_string())
    }
}
