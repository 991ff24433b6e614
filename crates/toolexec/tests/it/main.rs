//! The core's integration tests, one binary (one link) for all: each
//! module is one area of the public API.

mod catalog;
mod chains_streams;
mod examples;
mod observer;
mod pipeline;
mod policy;
mod retrieval_eval;
mod semantic;
