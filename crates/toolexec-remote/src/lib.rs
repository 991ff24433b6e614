//! # toolexec-remote
//!
//! Remote runtimes for toolexec: a [`server::RuntimeServer`] that runs units
//! for signed remote callers on its local
//! [`toolexec_runtime::Runtimes`], and a client [`RemoteRuntime`] (a
//! [`toolexec_runtime::Runtime`] named `remote`) that sends units there.
//!
//! Place in the workspace: one runtime of the contract (`toolexec-runtime`)
//! whose units run on another machine's registry (see ARCHITECTURE.md).
//!
//! - **Signed requests**: HMAC-SHA256 over method, authority (`Host`),
//!   path, timestamp, nonce and the body's SHA-256, sent in a header
//!   ([`auth`]); the server authenticates the head (signature, freshness,
//!   nonce) before reading a byte of the body, then checks the body against
//!   the signed digest. It refuses missing or wrong signatures, requests
//!   addressed to another server, timestamps outside the allowed skew and
//!   replayed nonces with `401`, oversized bodies with `413`, slow ones
//!   with `408`, malformed ones and limits above the server's ceilings
//!   ([`LimitCeilings`]) with `400`, each with a typed JSON error
//!   ([`ApiError`]).
//! - **Bounded connections**: a cap on open connections (`503 busy`
//!   beyond it), header-read and idle timeouts, and at most
//!   [`server::READ_BUFFER_BYTES`] read from a connection before its
//!   signature is checked.
//! - **One connection per run**: `POST /v1/runs` with the signed request,
//!   upgraded (`101`) to a full-duplex stream of length-prefixed JSON frames
//!   ([`wire`]): the server sends output, tool-call requests and the
//!   outcome; the caller answers the tool calls from its own catalog, so
//!   the remote machine needs no tool credentials.
//! - **Safe retries**: connection refused, `502` and `503` before the run
//!   started, with exponential backoff and jitter; never `4xx`, never once
//!   the server accepted the run.
//! - **Cleanup**: dropping or cancelling the client's run closes the
//!   connection; the server cancels the unit and its runtime cleans up.
//!
//! The protocol is specified in `docs/remote-protocol.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
mod client;
mod error;
mod gate;
mod http;
mod listener;
pub mod nonce;
pub mod server;
mod session;
pub mod wire;

pub use client::{RemoteConfig, RemoteRuntime, RetryPolicy};
pub use error::{ApiError, ApiErrorCode, ApiErrorEnvelope};
pub use server::{LimitCeilings, LocalAddr, RuntimeServer, ServerConfig, ServerStats};
