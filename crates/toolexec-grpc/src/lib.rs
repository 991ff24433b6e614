//! gRPC providers for toolexec: every unary and server-streaming method of
//! a gRPC service as a validated, searchable tool.
//!
//! In ARCHITECTURE.md's call flow this is a backend (step 3), beside the
//! HTTP providers: the CLI imports `[[grpc]]` blocks with [`import`], and
//! the pipeline calls a [`Method`]. It depends on the core, and on
//! `toolexec-http` for the TLS every outbound client shares.
//!
//! The services come from the server itself, by server reflection
//! (`grpc.reflection.v1`, or `v1alpha` as grpcio serves it), or from a
//! descriptor set file (`protoc --include_imports --descriptor_set_out`).
//! Each method's input and output schemas are derived from its protobuf
//! messages under the proto3 JSON mapping ([`schema`]); arguments are
//! encoded and answers decoded at run time ([`prost_reflect`]'s dynamic
//! messages), so no code is generated.
//!
//! A [`Service`] is one server: its channel (HTTP/2, TLS with the same
//! [`TlsOptions`] as every outbound client), deadline, concurrency limit,
//! message size limit and metadata. Its tools are [`Method`]s, the
//! [`Backend`](toolexec::Backend) that sends one call; a server-streaming
//! method streams each message as a chunk and returns them all as
//! `{"messages": [...]}`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolexec::Error> {
//! use toolexec_grpc::{ImportOptions, Source};
//!
//! let exec = toolexec::Exec::builder().build();
//! let import = toolexec_grpc::import(ImportOptions::new(
//!     "echo",
//!     "http://127.0.0.1:50051",
//!     Source::Reflection,
//! ))
//! .await?;
//! exec.catalog().register_many(import.tools(), false)?;
//! let reply = exec
//!     .run_tool("echo:echo_say", serde_json::json!({"text": "hi"}))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Errors: a gRPC status becomes the matching code (`INVALID_ARGUMENT` and
//! `OUT_OF_RANGE` are `invalid_request`, `DEADLINE_EXCEEDED` is `timeout`,
//! `UNAUTHENTICATED` and `PERMISSION_DENIED` are `not_allowed`,
//! `UNAVAILABLE` and `UNIMPLEMENTED` are `backend_unavailable`,
//! `RESOURCE_EXHAUSTED` is `limit_exceeded`, anything else
//! `execution_failed`), with the status code and message in the error.

mod check;
mod codec;
mod connect;
mod import;
mod method;
mod reflect;
pub mod schema;
mod status;

pub use connect::{
    DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_STREAM_MESSAGES,
    DEFAULT_TIMEOUT, GrpcOptions, MAX_CONCURRENCY, MAX_TIMEOUT, Service,
};
pub use import::{Import, ImportOptions, Skipped, Source, import};
pub use method::Method;
pub use toolexec_http::TlsOptions;
