//! The sandbox side of the channel protocol.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, WriteHalf};
use tokio::sync::oneshot;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use toolexec::ErrorBody;

use super::message::{Request, RequestBody, Response, ResponseBody};
use super::{
    CHANNEL_FD_ENV, CHANNEL_SOCKET_ENV, DEFAULT_MAX_FRAME_BYTES, PROTOCOL_NAME, PROTOCOL_VERSION,
    codec,
};

/// Why a channel request got no answer from the host.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The host answered with an error (a tool error, `not_allowed`,
    /// `limit_exceeded`, ...).
    #[error("{}", .0.message)]
    Tool(ErrorBody),
    /// The connection is gone (the host ended the run).
    #[error("channel connection closed")]
    Closed,
    /// No channel descriptor in this process, or it is unusable.
    #[error("no channel: {0}")]
    NoChannel(String),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<ResponseBody>>>>;

/// A client for code inside a sandbox. Requests may be concurrent; each
/// waits for its own answer.
pub struct ChannelClient<S> {
    sink: tokio::sync::Mutex<FramedWrite<WriteHalf<S>, LengthDelimitedCodec>>,
    pending: Pending,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl<S> Drop for ChannelClient<S> {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl ChannelClient<tokio::net::UnixStream> {
    /// Connects to the descriptor named by `TOOLEXEC_CHANNEL_FD`, or else
    /// to the socket path in `TOOLEXEC_CHANNEL_SOCKET`. Must be called
    /// inside a tokio runtime, at most once per process (it takes
    /// ownership of the descriptor).
    pub async fn from_env() -> Result<Self, ClientError> {
        use std::os::fd::FromRawFd;
        if std::env::var_os(CHANNEL_FD_ENV).is_none()
            && let Some(path) = std::env::var_os(CHANNEL_SOCKET_ENV)
        {
            let stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| {
                ClientError::NoChannel(format!("cannot connect to {}: {e}", path.to_string_lossy()))
            })?;
            return Ok(ChannelClient::new(stream));
        }
        let fd: i32 = std::env::var(CHANNEL_FD_ENV)
            .map_err(|_| ClientError::NoChannel(format!("{CHANNEL_FD_ENV} is not set")))?
            .parse()
            .map_err(|_| ClientError::NoChannel(format!("{CHANNEL_FD_ENV} is not a number")))?;
        // SAFETY: the sandbox launcher passes an open socket at this
        // descriptor for this process to own; `fstat` checks it is a socket.
        let stream = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut stat) != 0 || stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
                return Err(ClientError::NoChannel(format!(
                    "descriptor {fd} is not a socket"
                )));
            }
            std::os::unix::net::UnixStream::from_raw_fd(fd)
        };
        stream
            .set_nonblocking(true)
            .map_err(|e| ClientError::NoChannel(e.to_string()))?;
        let stream = tokio::net::UnixStream::from_std(stream)
            .map_err(|e| ClientError::NoChannel(e.to_string()))?;
        Ok(ChannelClient::new(stream))
    }
}

impl<S> ChannelClient<S>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    /// A client over `stream`. Spawns the reader task on the current
    /// tokio runtime.
    pub fn new(stream: S) -> Self {
        let (read, write) = tokio::io::split(stream);
        let pending: Pending = Arc::default();
        let reader_pending = pending.clone();
        let reader = tokio::spawn(async move {
            let mut frames = FramedRead::new(read, codec(DEFAULT_MAX_FRAME_BYTES));
            while let Some(Ok(bytes)) = frames.next().await {
                let Ok(response) = serde_json::from_slice::<Response>(&bytes) else {
                    break;
                };
                if let Some(tx) = reader_pending.lock().remove(&response.id) {
                    let _ = tx.send(response.body);
                }
            }
            // Closed: fail everything still waiting.
            reader_pending.lock().clear();
        });
        ChannelClient {
            sink: tokio::sync::Mutex::new(FramedWrite::new(write, codec(DEFAULT_MAX_FRAME_BYTES))),
            pending,
            next_id: AtomicU64::new(1),
            reader,
        }
    }

    /// Sends `hello` and checks the host speaks this version.
    pub async fn hello(&self) -> Result<Value, ClientError> {
        self.request(RequestBody::Hello {
            protocol: PROTOCOL_NAME.into(),
            version: PROTOCOL_VERSION,
        })
        .await
    }

    /// Calls a tool on the host.
    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, ClientError> {
        self.request(RequestBody::Call {
            tool: tool.into(),
            args,
        })
        .await
    }

    /// Searches the allowed tools.
    pub async fn search(&self, query: &str, limit: usize) -> Result<Value, ClientError> {
        self.request(RequestBody::Search {
            query: query.into(),
            limit: Some(limit),
        })
        .await
    }

    /// Describes an allowed tool (`detail`: summary, schema or full).
    pub async fn describe(&self, tool: &str, detail: &str) -> Result<Value, ClientError> {
        self.request(RequestBody::Describe {
            tool: tool.into(),
            detail: Some(detail.into()),
        })
        .await
    }

    /// Sends the unit's result value (once).
    pub async fn send_result(&self, value: Value) -> Result<(), ClientError> {
        self.send(&Request {
            id: None,
            body: RequestBody::Result { value },
        })
        .await
    }

    async fn request(&self, body: RequestBody) -> Result<Value, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        if let Err(e) = self.send(&Request { id: Some(id), body }).await {
            self.pending.lock().remove(&id);
            return Err(e);
        }
        match rx.await.map_err(|_| ClientError::Closed)? {
            ResponseBody::Result(value) => Ok(value),
            ResponseBody::Error(error) => Err(ClientError::Tool(error)),
        }
    }

    async fn send(&self, request: &Request) -> Result<(), ClientError> {
        let bytes = serde_json::to_vec(request).map_err(|_| ClientError::Closed)?;
        self.sink
            .lock()
            .await
            .send(tokio_util::bytes::Bytes::from(bytes))
            .await
            .map_err(|_| ClientError::Closed)
    }
}
