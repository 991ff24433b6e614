//! [`Method`]: the backend of one gRPC method's tool.

use std::sync::Arc;

use http::uri::PathAndQuery;
use prost_reflect::{DeserializeOptions, DynamicMessage, MethodDescriptor, SerializeOptions};
use serde_json::{Value, json};
use tokio::time::Instant;
use tonic::Status;
use tonic::client::Grpc;
use tonic::transport::Channel;
use toolexec::{Backend, BoxFuture, Call, Error, LimitKind, ToolContext, ToolOutput};

use crate::check;
use crate::codec::DynamicCodec;
use crate::connect::Service;
use crate::status::status_error;

/// Calls one method of a [`Service`]: the arguments encoded as its input
/// message, the answer decoded to JSON (proto3 JSON mapping, every field
/// present). A server-streaming method streams each message as a chunk
/// and returns `{"messages": [...]}`.
#[derive(Debug)]
pub struct Method {
    service: Arc<Service>,
    tool: String,
    descriptor: MethodDescriptor,
    path: PathAndQuery,
}

impl Method {
    /// The method `descriptor` of `service`, answering as tool `tool`.
    pub(crate) fn new(
        service: Arc<Service>,
        tool: String,
        descriptor: MethodDescriptor,
    ) -> Result<Method, String> {
        let path = format!(
            "/{}/{}",
            descriptor.parent_service().full_name(),
            descriptor.name()
        );
        let path = PathAndQuery::try_from(path.as_str())
            .map_err(|e| format!("{path:?} is not a request path: {e}"))?;
        Ok(Method {
            service,
            tool,
            descriptor,
            path,
        })
    }

    /// The method's full name, `package.Service/Method`.
    pub fn full_name(&self) -> String {
        format!(
            "{}/{}",
            self.descriptor.parent_service().full_name(),
            self.descriptor.name()
        )
    }

    /// Whether the server answers with a stream of messages.
    pub fn is_streaming(&self) -> bool {
        self.descriptor.is_server_streaming()
    }

    async fn run(&self, call: Call<'_>) -> Result<ToolOutput, Error> {
        let options = &self.service.options;
        let message = DynamicMessage::deserialize_with_options(
            self.descriptor.input(),
            call.args,
            &DeserializeOptions::new().deny_unknown_fields(true),
        )
        .map_err(|e| Error::invalid_request("arguments", e.to_string()))?;
        let deadline = Instant::now() + options.timeout;
        let work =
            async {
                let _slot =
                    self.service.slots.acquire().await.map_err(|_| {
                        Error::backend_unavailable(self.service.name(), "shut down")
                    })?;
                let mut client = self.service.client();
                client
                    .ready()
                    .await
                    .map_err(|e| self.status(&Status::from_error(e.into())))?;
                let mut request = self.service.request(message);
                request.set_timeout(deadline.saturating_duration_since(Instant::now()));
                let codec = DynamicCodec::new(self.descriptor.output());
                if self.is_streaming() {
                    self.stream(client, request, codec, &call.ctx).await
                } else {
                    let answer = client
                        .unary(request, self.path.clone(), codec)
                        .await
                        .map_err(|s| self.status(&s))?;
                    let answer = answer.into_inner();
                    let (value, _) = self.to_json(&answer, options.max_message_bytes)?;
                    Ok(ToolOutput::structured(value))
                }
            };
        let timeout = || Error::Timeout {
            tool: self.tool.clone(),
            after: options.timeout,
        };
        tokio::select! {
            done = tokio::time::timeout_at(deadline, work) => match done {
                // tonic ends a call whose `grpc-timeout` passed with its own
                // CANCELLED, racing the deadline here.
                Ok(Err(_)) if Instant::now() >= deadline => Err(timeout()),
                Ok(done) => done,
                Err(_) => Err(timeout()),
            },
            () = call.ctx.cancelled() => Err(Error::Cancelled { tool: self.tool.clone() }),
        }
    }

    /// Reads a server stream: every message a chunk, all of them the
    /// result; past the message count or total size limit the call fails
    /// with `limit_exceeded` (output) and the stream is dropped.
    async fn stream(
        &self,
        mut client: Grpc<Channel>,
        request: tonic::Request<DynamicMessage>,
        codec: DynamicCodec,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, Error> {
        let options = &self.service.options;
        let mut stream = client
            .server_streaming(request, self.path.clone(), codec)
            .await
            .map_err(|s| self.status(&s))?
            .into_inner();
        let mut messages = Vec::new();
        let mut bytes = 0usize;
        while let Some(message) = stream.message().await.map_err(|s| self.status(&s))? {
            let left = options.max_message_bytes.saturating_sub(bytes);
            let (value, size) = self.to_json(&message, left)?;
            bytes = bytes.saturating_add(size);
            if messages.len() >= options.max_stream_messages || bytes > options.max_message_bytes {
                return Err(Error::limit_exceeded(
                    LimitKind::OutputBytes,
                    format!(
                        "the stream of {} passed max_stream_messages ({}) or max_message_bytes ({}) and was dropped",
                        self.tool, options.max_stream_messages, options.max_message_bytes
                    ),
                ));
            }
            ctx.chunk(value.clone()).await;
            messages.push(value);
        }
        Ok(ToolOutput::structured(json!({"messages": messages})))
    }

    fn status(&self, status: &Status) -> Error {
        status_error(&self.service, &self.tool, status)
    }

    /// `message` in the proto3 JSON mapping, every field present, at most
    /// `max` bytes of JSON (defaults spelled out can make a small message
    /// a large document): past it `limit_exceeded`, found while writing.
    /// Also the JSON's size in bytes.
    fn to_json(&self, message: &DynamicMessage, max: usize) -> Result<(Value, usize), Error> {
        check::any_depth(message).map_err(|why| {
            Error::execution_failed(&self.tool, format!("the answer is refused: {why}"))
        })?;
        let mut out = Capped {
            bytes: Vec::new(),
            max,
        };
        let mut serializer = serde_json::Serializer::new(&mut out);
        let written = message.serialize_with_options(
            &mut serializer,
            &SerializeOptions::new().skip_default_fields(false),
        );
        if let Err(e) = written {
            if out.bytes.len() >= max || e.to_string().contains(OVER) {
                return Err(Error::limit_exceeded(
                    LimitKind::OutputBytes,
                    format!(
                        "the answer of {} is more than {max} bytes as JSON (max_message_bytes)",
                        self.tool
                    ),
                ));
            }
            return Err(Error::execution_failed(
                &self.tool,
                format!("the answer has no JSON form: {e}"),
            ));
        }
        let value = serde_json::from_slice(&out.bytes)
            .map_err(|e| Error::execution_failed(&self.tool, format!("the answer's JSON: {e}")))?;
        Ok((value, out.bytes.len()))
    }
}

impl Backend for Method {
    fn kind(&self) -> &str {
        "grpc"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        Box::pin(self.run(call))
    }
}

/// The error a [`Capped`] writer stops with.
const OVER: &str = "JSON size limit reached";

/// A writer that refuses to grow past `max` bytes.
struct Capped {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.max {
            return Err(std::io::Error::other(OVER));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
