//! `run_tool` latency on a local tool, with and without validation.
//!
//! The tool completes on its first poll, so the main benchmarks drive the
//! pipeline future by hand with a no-op waker inside an entered Tokio
//! context: what is measured is the pipeline itself (parse, resolve,
//! validate, execute, normalize, validate output), not an executor's
//! scheduling. The `tokio_block_on` variants add a current-thread runtime's
//! `block_on` for comparison. This target uses the system allocator;
//! `run_mimalloc` runs the same code with mimalloc.

include!("common/run_body.rs");
