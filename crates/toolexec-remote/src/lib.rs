//! # toolexec-remote
//!
//! Remote runtimes for toolexec: a [`server::RuntimeServer`] that runs units
//! for signed remote callers on its local
//! [`toolexec_runtime::Runtimes`], and a client [`RemoteRuntime`] (a
//! [`toolexec_runtime::Runtime`] named `remote`) that sends units there.
//!
//! - **Signed requests**: HMAC-SHA256 over method, authority (`Host`),
//!   path, timestamp, nonce and body ([`auth`]); the server checks the
//!   headers before reading the body and refuses missing or wrong
//!   signatures, requests addressed to another server, timestamps outside
//!   the allowed skew and replayed nonces with `401`, oversized bodies with
//!   `413`, slow ones with `408`, malformed ones and limits above the
//!   server's ceilings ([`LimitCeilings`]) with `400`, each with a typed
//!   JSON error ([`ApiError`]).
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

#![warn(missing_docs)]

pub mod auth;
mod ceilings;
mod client;
mod error;
mod http;
pub mod nonce;
pub mod server;
mod session;
pub mod wire;

pub use client::{ConfigError, RemoteConfig, RemoteRuntime, RetryPolicy};
pub use error::{ApiError, ApiErrorCode, ApiErrorEnvelope};
pub use server::{LimitCeilings, LocalAddr, RuntimeServer, ServerConfig, ServerStats};
