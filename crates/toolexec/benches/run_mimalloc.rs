//! The `run` benchmarks with mimalloc as the global allocator, as a
//! latency-sensitive service would deploy.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

include!("common/run_body.rs");
