//! The sandbox↔host channel protocol, version 1.
//!
//! Sandboxed code reaches tools only through this protocol; the host side
//! ([`ChannelServer`]) checks every request against the run's budget and
//! allowlist. The full specification, with examples, is
//! `docs/tool-channel.md`; in short:
//!
//! - **Transport**: a stream socket. Sandboxed processes find it as file
//!   descriptor [`CHANNEL_FD`], announced in the environment variable
//!   [`CHANNEL_FD_ENV`]; where descriptors cannot be inherited (containers
//!   under a daemon), a Unix socket path in [`CHANNEL_SOCKET_ENV`].
//! - **Framing**: a 4-byte big-endian length, then that many bytes of UTF-8
//!   JSON. A frame longer than the host's maximum (default
//!   [`DEFAULT_MAX_FRAME_BYTES`]) ends the run with `invalid_request`, as
//!   does a frame that is not a valid message.
//! - **Requests** (sandbox → host): `{"id": 1, "method": "call", "tool":
//!   "math:add", "args": {...}}`; methods `hello`, `call`, `search`,
//!   `describe`, and the notification `result` (no `id`) that sets the
//!   unit's result value once.
//! - **Responses** (host → sandbox): `{"id": 1, "result": ...}` or
//!   `{"id": 1, "error": {"code": "not_allowed", "message": "...",
//!   "details": ...}}`, in completion order (calls run concurrently).

mod client;
mod message;
mod server;

pub use client::{ChannelClient, ClientError};
pub use message::{Request, RequestBody, Response, ResponseBody};
pub use server::{ChannelConfig, ChannelServer, ProtocolError};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The protocol name sent in `hello`.
pub const PROTOCOL_NAME: &str = "toolexec-channel";

/// The file descriptor the channel socket has in sandboxed processes.
pub const CHANNEL_FD: i32 = 3;

/// The environment variable that announces the channel's descriptor.
pub const CHANNEL_FD_ENV: &str = "TOOLEXEC_CHANNEL_FD";

/// The environment variable naming a Unix socket path to connect to
/// instead, for sandboxes that cannot inherit descriptors (Docker, remote).
pub const CHANNEL_SOCKET_ENV: &str = "TOOLEXEC_CHANNEL_SOCKET";

/// Default maximum frame size, both ways: 1 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1 << 20;

/// The length-prefixed codec with a maximum frame size.
pub(crate) fn codec(max_frame_bytes: usize) -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(max_frame_bytes)
        .new_codec()
}
