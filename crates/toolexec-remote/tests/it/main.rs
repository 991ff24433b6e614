//! The remote runtime and `runtime-server` over real loopback HTTP, one
//! test binary (one link) for all.

mod auth;
mod hostile;
mod remote;
mod support;
